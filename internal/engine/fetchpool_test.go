package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/internal/testkit"
)

// recycleInput writes n records of keys k0…k(keys-1) to topic in lz4
// batches of ~4 KiB, so that the pipeline's client
// decompresses them into its pool's memory. Record i's value is
// {"seq":i,"name":"n<i>","pad":"…"}, but for the poison ones (i%53 == 5, and 6000 to 6999: whole fetches of them),
// which are cut short; its header seq is i. It returns the records as
// written.
func recycleInput(t *testing.T, k *testkit.Kafka, topic string, n, keys int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Addr), kgo.ProducerBatchCompression(kgo.Lz4Compression()), kgo.ProducerLinger(5*time.Millisecond), kgo.ProducerBatchMaxBytes(4096))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	pad := strings.Repeat("p", 60)
	rs := make([]*kgo.Record, n)
	for i := range rs {
		rs[i] = &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i%keys),
			Value:   fmt.Appendf(nil, `{"seq":%d,"name":"n%d","pad":"%s"}`, i, i, pad),
			Headers: []kgo.RecordHeader{{Key: "seq", Value: fmt.Appendf(nil, "%d", i)}}}
		if poisoned(i) {
			rs[i].Value = rs[i].Value[:20]
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return rs
}

func poisoned(i int) bool { return i%53 == 5 || i/1000 == 6 }

// checkDeadLetters checks that the dead letters are the poison inputs,
// each once, as read.
func checkDeadLetters(t *testing.T, in, dlq []*kgo.Record) {
	t.Helper()
	want := 0
	for i := range in {
		if poisoned(i) {
			want++
		}
	}
	if len(dlq) != want {
		t.Errorf("%d dead letters, want %d", len(dlq), want)
	}
	seen := map[int]bool{}
	for _, r := range dlq {
		var i int
		if _, err := fmt.Sscan(string(r.Headers[0].Value), &i); err != nil || i < 0 || i >= len(in) || !poisoned(i) || seen[i] {
			t.Fatalf("dead letter %q %q (headers %v): not a poison input, or twice", r.Key, r.Value, r.Headers)
		}
		seen[i] = true
		if string(r.Key) != string(in[i].Key) || string(r.Value) != string(in[i].Value) {
			t.Fatalf("dead letter %q %q, want input %d as read: %q %q", r.Key, r.Value, i, in[i].Key, in[i].Value)
		}
	}
}

// runRecycling runs body until it committed everything of topic in, with
// a checkpoint aborted on purpose, and reports how many record slices and
// decompressed batches the pipeline's pool took back.
func runRecycling(t *testing.T, k *testkit.Kafka, body string) (recs, batches int64) {
	t.Helper()
	var p *Pipeline
	var fired, withRecords atomic.Int64
	p = newPipeline(t, k, body, nil,
		WithBeforeCommit(func(cp Checkpoint) error {
			// The second checkpoint with records aborts.
			if cp.Records > 0 && withRecords.Add(1) == 2 {
				fired.Add(1)
				return errors.New("injected")
			}
			return nil
		}),
		WithCheckpointObserver(func(Checkpoint) {
			if rt := p.running.Load(); rt != nil && rt.pool != nil {
				recs, batches = rt.pool.Returned()
			}
		}))
	if !p.g.recycles {
		t.Fatal("the graph does not recycle what it fetches")
	}
	testkit.RunUntilCommitted(t, k, p, "t", "in")
	if fired.Load() == 0 {
		t.Fatal("no checkpoint was aborted")
	}
	if recs == 0 || batches == 0 {
		t.Fatalf("the pool took back %d record slices and %d decompressed batches: nothing was recycled", recs, batches)
	}
	return recs, batches
}

// TestRecycledFetchMemory: in graphs that recycle the client's fetched
// memory (pass-through, filter and map, aggregate emit: update, dead
// letters), every output is what the input makes, checked against the
// input itself. The client zeroes what it gets back before it reuses it:
// an output produced from, or an accumulator holding, bytes handed back
// too early reads zeros or another record's bytes, and fails here.
func TestRecycledFetchMemory(t *testing.T) {
	const n = 12000
	cases := []struct {
		name, steps, format string
		keys                int
		check               func(t *testing.T, in, out, dlq []*kgo.Record)
	}{
		{"pass-through", `[]`, "", 40, func(t *testing.T, in, out, dlq []*kgo.Record) {
			if len(dlq) != 0 {
				t.Errorf("%d dead letters, want none", len(dlq))
			}
			bySeq := map[string]*kgo.Record{}
			for _, r := range in {
				bySeq[string(r.Headers[0].Value)] = r
			}
			if len(out) != len(in) {
				t.Errorf("%d outputs, want %d", len(out), len(in))
			}
			for _, r := range out {
				w := bySeq[string(r.Headers[0].Value)]
				if w == nil {
					t.Fatalf("output %q %q: no such input", r.Key, r.Value)
				}
				if string(r.Key) != string(w.Key) || string(r.Value) != string(w.Value) {
					t.Fatalf("output %q %q, want %q %q", r.Key, r.Value, w.Key, w.Value)
				}
			}
		}},
		{"filter-map", `[{filter: "value.seq % 7 != 3"}, {map: "{seq: value.seq, name: value.name, pad: value.pad, twice: value.seq * 2}"}]`, "", 40,
			func(t *testing.T, in, out, dlq []*kgo.Record) {
				want := 0
				for i := range in {
					if i%7 != 3 && !poisoned(i) {
						want++
					}
				}
				checkDeadLetters(t, in, dlq)
				if len(out) != want {
					t.Errorf("%d outputs, want %d", len(out), want)
				}
				seen := map[int]bool{}
				for _, r := range out {
					var v struct {
						Seq, Twice int
						Name, Pad  string
					}
					if err := json.Unmarshal(r.Value, &v); err != nil {
						t.Fatalf("output %q: %v", r.Value, err)
					}
					w := in[v.Seq]
					if v.Seq%7 == 3 || poisoned(v.Seq) || seen[v.Seq] || string(r.Key) != string(w.Key) || v.Name != fmt.Sprintf("n%d", v.Seq) ||
						v.Twice != 2*v.Seq || v.Pad != strings.Repeat("p", 60) || string(r.Headers[0].Value) != fmt.Sprint(v.Seq) {
						t.Fatalf("output %q %q (headers %v) is not what input %d makes", r.Key, r.Value, r.Headers, v.Seq)
					}
					seen[v.Seq] = true
				}
			}},
		// Accumulators kept across records and chunks: a count, the
		// last name and the last three seqs of each key.
		{"aggregate", `[{aggregate: {fields: {n: count, name: {last: value.name}, seqs: {collect: value.seq, max: 3}}}}]`, "", 40,
			func(t *testing.T, in, out, dlq []*kgo.Record) {
				// The oracle: a key's records share a partition, in the
				// order written; the poison ones go to the dead letters.
				type acc struct {
					n    int
					seqs []int
				}
				accs := map[string]*acc{}
				want := map[int]acc{}
				for i, r := range in {
					if poisoned(i) {
						continue
					}
					a := accs[string(r.Key)]
					if a == nil {
						a = new(acc)
						accs[string(r.Key)] = a
					}
					a.n++
					a.seqs = append(a.seqs, i)
					if len(a.seqs) > 3 {
						a.seqs = a.seqs[1:]
					}
					want[i] = acc{a.n, append([]int(nil), a.seqs...)}
				}
				checkDeadLetters(t, in, dlq)
				if len(out) != len(want) {
					t.Errorf("%d outputs, want %d", len(out), len(want))
				}
				seen := map[int]bool{}
				for _, r := range out {
					var v struct {
						N    int
						Name string
						Seqs []int
					}
					if err := json.Unmarshal(r.Value, &v); err != nil {
						t.Fatalf("output %q: %v", r.Value, err)
					}
					var seq int
					if _, err := fmt.Sscanf(v.Name, "n%d", &seq); err != nil || seen[seq] {
						t.Fatalf("output %q %q: no input of its own", r.Key, r.Value)
					}
					w, ok := want[seq]
					if !ok {
						t.Fatalf("output %q %q: no input of its own", r.Key, r.Value)
					}
					seen[seq] = true
					if string(r.Key) != string(in[seq].Key) || v.N != w.n || fmt.Sprint(v.Seqs) != fmt.Sprint(w.seqs) {
						t.Fatalf("output %q %q of input %d, want n %d and seqs %v", r.Key, r.Value, seq, w.n, w.seqs)
					}
				}
			}},
		// Values in the bytes format are the fetched bytes themselves:
		// the accumulators must keep copies. With more keys, a key's
		// records are further apart: in batches handed back between.
		{"aggregate-bytes", `[{aggregate: {fields: {n: count, v: {last: value}, vs: {collect: value, max: 2}}}}]`, "bytes", 1000,
			func(t *testing.T, in, out, dlq []*kgo.Record) {
				if len(dlq) != 0 {
					t.Errorf("%d dead letters, want none", len(dlq))
				}
				if len(out) != len(in) {
					t.Errorf("%d outputs, want %d", len(out), len(in))
				}
				// The oracle: input i's output holds it, and the last two
				// values of its key.
				prev := map[string][]byte{}
				want := make([][][]byte, len(in))
				for i, r := range in {
					want[i] = [][]byte{r.Value}
					if p, ok := prev[string(r.Key)]; ok {
						want[i] = [][]byte{p, r.Value}
					}
					prev[string(r.Key)] = r.Value
				}
				seen := map[int]bool{}
				for _, r := range out {
					var v struct {
						N  int
						V  []byte
						Vs [][]byte
					}
					if err := json.Unmarshal(r.Value, &v); err != nil {
						t.Fatalf("output %q: %v", r.Value, err)
					}
					var seq int
					if _, err := fmt.Sscanf(string(v.V), `{"seq":%d`, &seq); err != nil || seq < 0 || seq >= len(in) || seen[seq] {
						t.Fatalf("output %q %q: no input of its own", r.Key, r.Value)
					}
					seen[seq] = true
					if string(r.Key) != string(in[seq].Key) || v.N != seq/1000+1 || fmt.Sprintf("%q", v.Vs) != fmt.Sprintf("%q", want[seq]) || string(v.V) != string(in[seq].Value) {
						t.Fatalf("output %q %q of input %d: want n %d and values %q", r.Key, r.Value, seq, seq/1000+1, want[seq])
					}
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k := testkit.NewKafka(t)
			k.Topic("in", 3)
			k.Topic("out", 3)
			k.Topic("dlq", 1)
			in := recycleInput(t, k, "in", n, tc.keys)
			body := strings.NewReplacer(`[{map: "{k: value.k, seq: value.seq}"}]`, tc.steps).Replace(passThrough)
			// Small fetches: many chunks, each handed back while later
			// ones are processed.
			body = strings.Replace(body, "consumer: {session_timeout: 6s}", "consumer: {session_timeout: 6s, fetch_max_partition_bytes: 16384}", 1)
			if tc.format != "" {
				body = strings.Replace(body, "topics: [in]}", "topics: [in], format: "+tc.format+"}", 1)
				// An aggregate's cache goes at each checkpoint: with long
				// ones and outputs sent at once, batches are handed back
				// while accumulators made of them are still in it.
				body = strings.Replace(body, "interval: 100ms, timeout: 10s, max_records: 2000", "interval: 1s, timeout: 10s, max_records: 4000", 1)
				body += "producer: {linger: 0s}\n"
			}
			recs, batches := runRecycling(t, k, body)
			tc.check(t, in, k.ReadAll("out"), k.ReadAll("dlq"))
			t.Logf("the pool took back %d record slices and %d decompressed batches", recs, batches)
		})
	}
}
