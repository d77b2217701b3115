package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/internal/testkit"
	"github.com/pipeline-run/pipeline/wire"
)

// TestDirectSinkOnlyForRecordsWrittenAsRead: the direct path is taken
// exactly where a sink writes what its source read.
func TestDirectSinkOnlyForRecordsWrittenAsRead(t *testing.T) {
	const src = "sources: {in: {topics: [in]}}\n"
	for _, c := range []struct {
		name, body string
		direct     bool
	}{
		{"no steps", src + "steps: []\nsinks: {out: {topic: out}}\n", true},
		{"no steps, other formats", "sources: {in: {topics: [in], format: bytes, key_format: string}}\nsteps: []\nsinks: {out: {topic: out, format: string}}\n", true},
		{"a step", src + "steps: [{filter: \"value.x > 1\"}]\nsinks: {out: {topic: out}}\n", false},
		{"a key expression", src + "steps: []\nsinks: {out: {topic: out, key: value.id}}\n", false},
		{"a value expression", src + "steps: []\nsinks: {out: {topic: out, value: value.x}}\n", false},
		{"a header expression", src + "steps: []\nsinks: {out: {topic: out, headers: {h: value.x}}}\n", false},
		{"two sinks", src + "steps: []\nsinks: {a: {topic: a}, b: {topic: b, from: in}}\n", false},
		{"source positions", src + "steps: []\nsinks: {out: {topic: out}}\naudit: {enabled: true, source_positions: true}\n", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, err := Build(parseConfig(t, c.body), nil)
			if err != nil {
				t.Fatal(err)
			}
			n := g.byTopic["in"]
			if got := n.direct != nil; got != c.direct {
				t.Fatalf("direct path %v, want %v", got, c.direct)
			}
		})
	}
}

// direct is passThrough without its step, at a smaller max_records.
var direct = strings.NewReplacer(
	`steps: [{map: "{k: value.k, seq: value.seq}"}]`, "steps: []",
	"max_records: 2000", "max_records: 1000",
).Replace(passThrough)

// TestDirectPassThroughWritesRecordsAsRead: with no steps, each output is
// its input as read (key, value, headers, timestamp; a null key or value
// stays null), exactly once through aborted checkpoints and a restart, and
// a record too large for the producer still goes to the dead-letter topic.
func TestDirectPassThroughWritesRecordsAsRead(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("in", 3)
	const n = 6000
	oversized := map[int]bool{100: true, 4321: true}
	ts := time.Date(2026, 3, 4, 5, 6, 7, 8e6, time.UTC)
	want := make(map[string]*kgo.Record, n)
	rs := make([]*kgo.Record, n)
	for i := range rs {
		r := &kgo.Record{Topic: "in", Timestamp: ts.Add(time.Duration(i) * time.Millisecond)}
		seq := fmt.Sprint(i)
		r.Headers = []kgo.RecordHeader{{Key: "seq", Value: []byte(seq)}}
		switch i % 4 {
		case 0:
			r.Key, r.Value = []byte("k"+seq), fmt.Appendf(nil, `{"seq":%d}`, i)
		case 1: // a null key
			r.Value = []byte("not JSON, passed as read " + seq)
		case 2: // a tombstone
			r.Key = []byte("k" + seq)
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: "empty", Value: nil}, kgo.RecordHeader{Key: "seq", Value: []byte("again")})
		case 3: // an empty value
			r.Key, r.Value = []byte{}, []byte{}
		}
		if oversized[i] {
			r.Value = bytes.Repeat([]byte("x"), 3000)
		}
		rs[i] = r
		if !oversized[i] {
			want[seq] = r
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := k.Client.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	body := direct + "producer: {batch_max_bytes: 2048}\n"
	var fired atomic.Int64
	abortEven := WithBeforeCommit(func(cp Checkpoint) error {
		if cp.ID%2 == 0 && cp.Records > 0 {
			fired.Add(1)
			return errors.New("injected")
		}
		return nil
	})
	// The first run stops part way, the second finishes.
	if !strings.Contains(body, "steps: []") || !strings.Contains(body, "max_records: 1000}") {
		t.Fatalf("the config has a step or the wrong max_records:\n%s", body)
	}
	p := newPipeline(t, k, body, nil, abortEven)
	if p.g.byTopic["in"].direct == nil {
		t.Fatal("the pipeline does not take the direct path")
	}
	rctx, rcancel := context.WithCancel(context.Background())
	var committed atomic.Int64
	p1 := newPipeline(t, k, body, nil, abortEven, WithCheckpointObserver(func(cp Checkpoint) {
		if cp.Committed && cp.Records > 0 && committed.Add(1) == 2 {
			rcancel()
		}
	}))
	if err := p1.Run(rctx); err != nil {
		t.Fatal(err)
	}
	rcancel()
	if committed.Load() < 2 {
		t.Fatalf("the first run committed %d checkpoints", committed.Load())
	}
	testkit.RunUntilCommitted(t, k, p, "t", "in")
	if fired.Load() == 0 {
		t.Fatal("no checkpoint was aborted")
	}

	out := k.ReadAll("out")
	if len(out) != len(want) {
		t.Errorf("%d outputs, want %d", len(out), len(want))
	}
	seen := map[string]bool{}
	for _, r := range out {
		seq := string(r.Headers[0].Value)
		w, ok := want[seq]
		switch {
		case !ok:
			t.Fatalf("output with seq %q: no such input", seq)
		case seen[seq]:
			t.Fatalf("input %s written twice", seq)
		}
		seen[seq] = true
		if problem := sameRecord(r, w); problem != "" {
			t.Fatalf("input %s: %s", seq, problem)
		}
	}
	dlq := k.ReadAll("dlq")
	if len(dlq) != len(oversized) {
		t.Fatalf("%d dead letters, want %d", len(dlq), len(oversized))
	}
	for _, r := range dlq {
		if e, _ := headerOf(r, wire.HeaderError); !strings.Contains(e, "larger than producer.batch_max_bytes") {
			t.Errorf("dead letter error %q", e)
		}
		if s, _ := headerOf(r, "seq"); !oversized[atoi(s)] {
			t.Errorf("dead letter of input %q, which is not oversized", s)
		}
	}
	t.Logf("%d outputs, %d dead letters, %d checkpoints aborted on purpose", len(out), len(dlq), fired.Load())
}

func atoi(s string) int {
	var i int
	fmt.Sscan(s, &i)
	return i
}

// sameRecord compares what a consumer sees of an output and its input.
func sameRecord(got, want *kgo.Record) string {
	switch {
	case (got.Key == nil) != (want.Key == nil) || !bytes.Equal(got.Key, want.Key):
		return fmt.Sprintf("key %q, want %q", got.Key, want.Key)
	case (got.Value == nil) != (want.Value == nil) || !bytes.Equal(got.Value, want.Value):
		return fmt.Sprintf("value %q, want %q", got.Value, want.Value)
	case !got.Timestamp.Equal(want.Timestamp):
		return fmt.Sprintf("timestamp %s, want %s", got.Timestamp, want.Timestamp)
	case len(got.Headers) != len(want.Headers):
		return fmt.Sprintf("headers %v, want %v", got.Headers, want.Headers)
	}
	for i, h := range got.Headers {
		if w := want.Headers[i]; h.Key != w.Key || !bytes.Equal(h.Value, w.Value) {
			return fmt.Sprintf("header %d: %s=%q, want %s=%q", i, h.Key, h.Value, w.Key, w.Value)
		}
	}
	return ""
}

// TestStepsFeedingASinkWriteJSON: a step writes its object literals as
// JSON at once exactly where its one reader is a sink that writes values
// as they are, as JSON; and a map so written reaches the topic byte for
// byte as the fields would have.
func TestStepsFeedingASinkWriteJSON(t *testing.T) {
	const src = "sources: {in: {topics: [in]}}\n"
	const m = `{name: m, map: "{seq: value.seq, twice: value.seq * 2, s: value.s}"}`
	for _, c := range []struct {
		name, body string
		json       bool
	}{
		{"a map to a sink", src + "steps: [" + m + "]\nsinks: {out: {topic: out}}\n", true},
		{"a map to a filter", src + "steps: [" + m + ", {filter: \"value.seq > 1\"}]\nsinks: {out: {topic: out}}\n", false},
		{"a string sink", src + "steps: [" + m + "]\nsinks: {out: {topic: out, format: string}}\n", false},
		{"a key expression", src + "steps: [" + m + "]\nsinks: {out: {topic: out, key: value.seq}}\n", false},
		{"a header expression", src + "steps: [" + m + "]\nsinks: {out: {topic: out, headers: {h: value.s}}}\n", false},
		{"two sinks", src + "steps: [" + m + "]\nsinks: {a: {topic: a}, b: {topic: b, from: m}}\n", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := newOffline(t, c.body, nil)
			if got := feedsSinkAsIs(o.rt.g.byName["m"]); got != c.json {
				t.Fatalf("writes JSON %v, want %v", got, c.json)
			}
			out := o.feed(rec("in", 0, 0, "k", `{"s":"a\u00e9<b>\"","seq":-3,"pad":"x"}`), rec("in", 0, 1, "k", `{"seq":2.5}`))
			for _, tk := range o.rt.tasks {
				if got := tk.ctxs[o.rt.g.byName["m"].idx].eval.WritesObjectsAsJSON(); got != c.json {
					t.Fatalf("task's evaluator writes JSON %v, want %v", got, c.json)
				}
			}
			if len(o.rt.tasks) == 0 {
				t.Fatal("no task ran")
			}
			var got []string
			for _, r := range out {
				got = append(got, string(r.Value))
			}
			want := []string{`{"s":"aé\u003cb\u003e\"","seq":-3,"twice":-6}`, `{"s":null,"seq":2.5,"twice":5}`}
			if c.name == "a map to a filter" {
				want = want[1:]
			}
			if c.name == "a string sink" || c.name == "two sinks" {
				return // not what this test is about
			}
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Fatalf("outputs %s, want %s", got, want)
			}
		})
	}
}
