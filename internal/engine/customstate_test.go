// This file is an outside package on purpose: a custom stateful operator
// must be writable with the exported API alone.
package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/internal/engine"
	"github.com/pipeline-run/pipeline/offsets"
	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/ops"
	"github.com/pipeline-run/pipeline/pipeline/state"
)

// tally is a user's stateful operator. Per record key it keeps a count
// per bucket of seq%3 (a map state), the last few seqs (a bounded list),
// the sum of seqs (reducing) and their mean (aggregating), and emits them
// all with each record. In YAML:
//
//	steps: [{name: per_key, tally: {recent: 4}}]
type tally struct{ recent int }

func newTally(spec *pipeline.Spec) (pipeline.Definition, error) {
	var s struct {
		Recent int `yaml:"recent"`
	}
	if !spec.Decode(&s) {
		return nil, nil
	}
	if s.Recent < 1 {
		spec.Errorf(".recent", "must be at least 1")
	}
	return &tally{recent: s.Recent}, nil
}

func (d *tally) Outputs() []string   { return nil }
func (d *tally) Fingerprint() string { return "tally:v1:recent=" + strconv.Itoa(d.recent) }

// NewOperator is never called for a StatefulDefinition; it is part of the
// Definition interface.
func (d *tally) NewOperator(pipeline.TaskID) (pipeline.Operator, error) {
	return nil, errors.New("tally needs a state store")
}

func (d *tally) NewStatefulOperator(_ pipeline.TaskID, st *state.Store) (pipeline.Operator, error) {
	var none state.TTLConfig
	buckets, err := state.NewMap[int](st, "buckets", none)
	if err != nil {
		return nil, err
	}
	recent, err := state.NewList[int](st, "recent", none, d.recent)
	if err != nil {
		return nil, err
	}
	sum, err := state.NewReducing(st, "sum", func(acc, v int) (int, error) { return acc + v, nil }, none)
	if err != nil {
		return nil, err
	}
	mean, err := state.NewAggregating[int, [2]int, float64](st, "mean", meanOf{}, none)
	if err != nil {
		return nil, err
	}
	return &tallyOp{buckets: buckets, recent: recent, sum: sum, mean: mean}, nil
}

// meanOf averages ints over an accumulator of [sum, count].
type meanOf struct{}

func (meanOf) Init() [2]int                          { return [2]int{} }
func (meanOf) Add(acc [2]int, v int) ([2]int, error) { return [2]int{acc[0] + v, acc[1] + 1}, nil }
func (meanOf) Result(acc [2]int) (float64, error) {
	if acc[1] == 0 {
		return 0, errors.New("mean of nothing")
	}
	return float64(acc[0]) / float64(acc[1]), nil
}

type tallyOp struct {
	buckets *state.Map[int]
	recent  *state.List[int]
	sum     *state.Reducing[int]
	mean    *state.Aggregating[int, [2]int, float64]
}

// tallyOut is what tally emits for a record.
type tallyOut struct {
	K       string         `json:"k"`
	Seq     int            `json:"seq"`
	Buckets map[string]int `json:"buckets"`
	Recent  []int          `json:"recent"`
	Sum     int            `json:"sum"`
	Mean    float64        `json:"mean"`
}

func (o *tallyOp) Process(ctx pipeline.Context, r *pipeline.Record) error {
	key := r.Key.Raw() // the key as the source partitioned the record
	v, err := r.Value.Get()
	if err != nil {
		return err
	}
	obj, _ := v.(map[string]any)
	seq, ok := obj["seq"].(int)
	if !ok {
		return fmt.Errorf("tally: seq is %T", obj["seq"])
	}
	b := "b" + strconv.Itoa(seq%3)
	n, _, err := o.buckets.Get(key, b)
	if err == nil {
		err = o.buckets.Put(key, b, n+1)
	}
	if err == nil {
		err = o.recent.Add(key, seq)
	}
	if err == nil {
		err = o.sum.Add(key, seq)
	}
	if err == nil {
		err = o.mean.Add(key, seq)
	}
	if err != nil {
		return err
	}
	out := tallyOut{K: string(key), Seq: seq, Buckets: map[string]int{}}
	entries, err := o.buckets.Entries(key)
	if err != nil {
		return err
	}
	for _, e := range entries {
		out.Buckets[e.Key] = e.Value
	}
	if out.Recent, err = o.recent.Get(key); err != nil {
		return err
	}
	if out.Sum, _, err = o.sum.Get(key); err != nil {
		return err
	}
	if out.Mean, _, err = o.mean.Get(key); err != nil {
		return err
	}
	r.Value.Set(map[string]any{"k": out.K, "seq": out.Seq, "buckets": out.Buckets, "recent": out.Recent, "sum": out.Sum, "mean": out.Mean})
	ctx.Emit(r)
	return nil
}

// wantTally is what tally must emit for input seq over keys keys, had it
// seen every earlier record of the key exactly once.
func wantTally(seq, keys, recent int) tallyOut {
	w := tallyOut{K: "k" + strconv.Itoa(seq%keys), Seq: seq, Buckets: map[string]int{}}
	n := 0
	for s := seq % keys; s <= seq; s += keys {
		w.Buckets["b"+strconv.Itoa(s%3)]++
		w.Recent = append(w.Recent, s)
		w.Sum += s
		n++
	}
	w.Recent = w.Recent[max(0, len(w.Recent)-recent):]
	w.Mean = float64(w.Sum) / float64(n)
	return w
}

// TestCustomStatefulOperator registers tally through a Registry and runs
// it in two pipelines one after the other, the second restoring the
// first's state from the changelog (and, with pebble, from disk), with
// checkpoints aborted on purpose in both. Every output must be the one
// computed from the input: each input once, each with the state of exactly
// the key's earlier records.
func TestCustomStatefulOperator(t *testing.T) {
	for _, backend := range []string{"memory", "pebble"} {
		t.Run(backend, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "in"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			addr := c.ListenAddrs()[0]
			cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()

			const n, keys, recent = 6000, 40, 4
			produce := func(from, to int) {
				rs := make([]*kgo.Record, 0, to-from)
				for i := from; i < to; i++ {
					k := "k" + strconv.Itoa(i%keys)
					rs = append(rs, &kgo.Record{Topic: "in", Key: []byte(k), Value: fmt.Appendf(nil, `{"k":%q,"seq":%d}`, k, i)})
				}
				if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			body := fmt.Sprintf(`name: custom
brokers: [%s]
instance_id: i1
checkpoint: {interval: 100ms, timeout: 10s, max_records: 700}
transactions: {timeout: 20s}
sources: {in: {topics: [in]}}
steps:
  - name: per_key
    tally: {recent: %d}
sinks: {out: {topic: out}}
`, addr, recent)
			if backend == "pebble" {
				body += fmt.Sprintf("state: {backend: pebble, dir: %q}\n", t.TempDir())
			}
			cfg, err := config.Parse([]byte(body), "custom.yaml", func(string) (string, bool) { return "", false })
			if err != nil {
				t.Fatal(err)
			}
			var aborted atomic.Int64
			run := func() engine.Stats {
				// A fresh registry and pipeline, as a new process has.
				reg := ops.NewRegistry()
				if err := reg.Register("tally", newTally); err != nil {
					t.Fatal(err)
				}
				p, err := engine.New(cfg, reg,
					engine.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
					engine.WithBeforeCommit(func(cp engine.Checkpoint) error {
						if cp.ID%3 == 0 && cp.Records > 0 {
							aborted.Add(1)
							return errors.New("injected")
						}
						return nil
					}))
				if err != nil {
					t.Fatal(err)
				}
				runCtx, stop := context.WithCancel(ctx)
				done := make(chan error, 1)
				go func() { done <- p.Run(runCtx) }()
				werr := waitConsumed(ctx, cl, "custom", "in")
				stop()
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				if werr != nil {
					t.Fatal(werr)
				}
				return p.Stats()
			}

			produce(0, n/2)
			run()
			before := aborted.Load()
			produce(n/2, n)
			second := run()
			if before == 0 || aborted.Load() == before {
				t.Fatalf("checkpoints aborted on purpose: %d in the first run, %d in the second; want some in each", before, aborted.Load()-before)
			}
			switch backend {
			case "memory":
				if second.Restored == 0 {
					t.Fatal("the second run restored nothing: a memory backend starts empty")
				}
			case "pebble":
				if second.Restored != 0 {
					t.Fatalf("the second run replayed %d changelog records; pebble had applied them all before the clean stop", second.Restored)
				}
			}

			out, err := offsets.ReadToEnd(ctx, cl, "out", true)
			if err != nil {
				t.Fatal(err)
			}
			seen := make([]int, n)
			bad := 0
			for _, r := range out {
				var got tallyOut
				if err := json.Unmarshal(r.Value, &got); err != nil {
					t.Fatalf("output %s: %v", r.Value, err)
				}
				if got.Seq < 0 || got.Seq >= n {
					t.Fatalf("output seq %d out of range", got.Seq)
				}
				seen[got.Seq]++
				want := wantTally(got.Seq, keys, recent)
				if got.K != want.K || got.Sum != want.Sum || got.Mean != want.Mean || !slices.Equal(got.Recent, want.Recent) || !maps.Equal(got.Buckets, want.Buckets) {
					if bad++; bad <= 3 {
						t.Errorf("seq %d:\n got %+v\nwant %+v", got.Seq, got, want)
					}
				}
			}
			for s, c := range seen {
				if c != 1 {
					t.Fatalf("seq %d is in the output %d times", s, c)
				}
			}
			if bad > 0 {
				t.Fatalf("%d of %d outputs hold the wrong state", bad, n)
			}
			t.Logf("%s: %d outputs each exact, %d checkpoints aborted on purpose, second run restored %d changelog records",
				backend, len(out), aborted.Load(), second.Restored)
		})
	}
}

// waitConsumed polls until group has committed, on every partition of
// topic, the offset after its last record.
func waitConsumed(ctx context.Context, cl *kgo.Client, group, topic string) error {
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return err
	}
	for {
		offs, err := adm.FetchOffsets(ctx, group)
		done := err == nil
		ends.Each(func(e kadm.ListedOffset) {
			if o, ok := offs.Lookup(topic, e.Partition); e.Offset > 0 && (!ok || o.At < e.Offset) {
				done = false
			}
		})
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("group %s did not consume %s: %w", group, topic, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
