package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/broker"
	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/offsets"
	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/optest"
	"github.com/pipeline-run/pipeline/pipeline/state"
)

// TestBatchOf drives the operator with optest's Context over a memory
// store, through a checkpoint that cuts a batch and one that aborts.
func TestBatchOf(t *testing.T) {
	def := &batchOf{size: 3}
	st, err := state.Open(state.NewMemory(), "t/batches", 0, def.Fingerprint(), nil)
	if err != nil {
		t.Fatal(err)
	}
	op, err := def.NewStatefulOperator(0, st)
	if err != nil {
		t.Fatal(err)
	}
	ctx := optest.NewContext(t)
	feed := func(from, to int) {
		for i := from; i < to; i++ {
			r := &pipeline.Record{Value: pipeline.RawValue(fmt.Appendf(nil, `{"n":%d}`, i), pipeline.JSON)}
			if err := op.Process(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
	}
	commit := func() {
		st.Changes()
		if err := st.Commit(-1); err != nil {
			t.Fatal(err)
		}
	}
	feed(0, 4) // a batch of 0..2; 3 waits
	commit()
	feed(4, 7) // a batch of 3..5, then aborted
	if err := st.Abort(); err != nil {
		t.Fatal(err)
	}
	feed(4, 8) // replayed after the abort: 3..5 again, with the same id; 6, 7 wait
	var got []string
	for _, e := range ctx.Emitted("") {
		got = append(got, string(e.Value.Raw()))
	}
	want := []string{
		`{"batch":"g0-t0-0","values":[{"n":0},{"n":1},{"n":2}]}`,
		`{"batch":"g0-t0-1","values":[{"n":3},{"n":4},{"n":5}]}`, // the aborted one
		`{"batch":"g0-t0-1","values":[{"n":3},{"n":4},{"n":5}]}`, // its replay
	}
	if !slices.Equal(got, want) {
		t.Fatalf("emitted\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestBatchOfWhenPartitionsAreAdded runs batch_of on the embedded broker
// over a topic of 2 partitions, adds 2 partitions, and runs it again. The
// values the first run had not sent go out in the second, every value in
// exactly one batch, and no batch id repeats. What may stay unsent at the
// end is computed from the input: at most size-1 of the last values of
// each partition.
func TestBatchOfWhenPartitionsAreAdded(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker and a pipeline")
	}
	const size = 5
	b, err := broker.Start(broker.Options{Topics: []string{"events", "batches"}, Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	adm, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	byPart := map[int32][]int{}
	produce := func(from, to int, parts int32) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		for i := from; i < to; i++ {
			p := int32(i) % parts
			byPart[p] = append(byPart[p], i)
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "events", Partition: p, Value: fmt.Appendf(nil, `{"n":%d}`, i)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	cfg, err := config.Parse([]byte(`
name: batches
brokers: embedded
instance_id: test-0
checkpoint: {interval: 100ms}
consumer: {session_timeout: 6s}
sources: {in: {topics: [events]}}
steps: [{batch_of: {size: 5}}]
sinks: {out: {topic: batches}}
`), "test.yaml", func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	// run runs the pipeline until it has read every event.
	run := func(total int) {
		p, stop := start(ctx, t, cfg, b.Addrs(), "batch_of", newBatchOf)
		for p.Stats().RecordsIn < int64(total) && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(300 * time.Millisecond) // a checkpoint or two past the last record
		stop()
	}
	produce(0, 43, 2)
	run(43)
	if _, err := kadm.NewClient(adm).UpdatePartitions(ctx, 4, "events"); err != nil {
		t.Fatal(err)
	}
	produce(43, 143, 4)
	run(100)

	out, err := offsets.ReadToEnd(ctx, adm, "batches", true)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	count := map[int]int{}
	moved := 0 // values of the first run batched by a task added after it
	for _, r := range out {
		var batch struct {
			ID     string `json:"batch"`
			Values []struct {
				N int `json:"n"`
			} `json:"values"`
		}
		if err := json.Unmarshal(r.Value, &batch); err != nil {
			t.Fatalf("%s: %v", r.Value, err)
		}
		if ids[batch.ID] {
			t.Errorf("batch id %s twice", batch.ID)
		}
		ids[batch.ID] = true
		if len(batch.Values) != size {
			t.Errorf("batch %s has %d values", batch.ID, len(batch.Values))
		}
		for _, v := range batch.Values {
			count[v.N]++
			if v.N < 43 && (strings.Contains(batch.ID, "-t2-") || strings.Contains(batch.ID, "-t3-")) {
				moved++
			}
		}
	}
	// The first run left 22%5 + 21%5 = 3 values unsent; split over 4
	// tasks, tasks 2 and 3 get one each.
	if moved != 2 {
		t.Errorf("%d values of the first run were batched by the tasks added after it, want 2", moved)
	}
	mayWait := map[int]bool{}
	for _, seqs := range byPart {
		for _, n := range seqs[max(0, len(seqs)-(size-1)):] {
			if n >= 43 {
				mayWait[n] = true
			}
		}
	}
	for n := range 143 {
		if count[n] > 1 || (count[n] == 0 && !mayWait[n]) {
			t.Errorf("value %d is in %d batches", n, count[n])
		}
	}
}
