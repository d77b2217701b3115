package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/internal/engine"
	"github.com/pipeline-run/pipeline/internal/testkit"
	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/ops"
	"github.com/pipeline-run/pipeline/pipeline/state"
	"github.com/pipeline-run/pipeline/wire"
)

// batcher is an operator that is not keyed: it buffers the seqs of its
// task's records in operator list state and emits them size at a time
// (a record with "flush" set emits what it has). A union list keeps the
// task numbers that ran it; the first record a task sees after starting
// emits that list to the output "seen" and replaces it with its own task.
// (Whether it did is read from that state, not kept in a field: an aborted
// checkpoint rolls state back, not the operator's fields.)
type batcher struct{ size int }

func (b *batcher) Outputs() []string   { return []string{"seen"} }
func (b *batcher) Fingerprint() string { return "batcher:v1:" + strconv.Itoa(b.size) }
func (b *batcher) NewOperator(pipeline.TaskID) (pipeline.Operator, error) {
	return nil, errors.New("batcher needs a state store")
}

func (b *batcher) NewStatefulOperator(task pipeline.TaskID, st *state.Store) (pipeline.Operator, error) {
	pending, err := state.NewOperatorList[int](st, "pending")
	if err != nil {
		return nil, err
	}
	ran, err := state.NewUnionList[int](st, "ran")
	if err != nil {
		return nil, err
	}
	return &batchOp{size: b.size, task: int(task), pending: pending, ran: ran}, nil
}

type batchOp struct {
	size, task int
	pending    *state.OperatorList[int]
	ran        *state.OperatorList[int]
}

func (o *batchOp) Process(ctx pipeline.Context, r *pipeline.Record) error {
	ran, err := o.ran.Get()
	if err != nil {
		return err
	}
	if !slices.Equal(ran, []int{o.task}) {
		seen := r.Clone()
		seen.Key = pipeline.RawValue([]byte("t"+strconv.Itoa(o.task)), pipeline.String)
		seen.Value.Set(map[string]any{"task": o.task, "ran": toAny(ran)})
		ctx.EmitTo("seen", seen)
		if err := o.ran.Update([]int{o.task}); err != nil {
			return err
		}
	}
	v, err := r.Value.Get()
	if err != nil {
		return err
	}
	obj, _ := v.(map[string]any)
	if seq, ok := obj["seq"].(int); ok {
		if err := o.pending.Add(seq); err != nil {
			return err
		}
	}
	xs, err := o.pending.Get()
	if err != nil {
		return err
	}
	if len(xs) < o.size && obj["flush"] != true {
		return nil
	}
	if len(xs) == 0 {
		return nil
	}
	r.Key = pipeline.RawValue([]byte("t"+strconv.Itoa(o.task)), pipeline.String)
	r.Value.Set(map[string]any{"task": o.task, "seqs": toAny(xs)})
	ctx.Emit(r)
	return o.pending.Clear()
}

func toAny(xs []int) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

// TestOperatorStateIsRedistributedWhenPartitionsAreAdded runs batcher over
// a topic of 2 partitions, adds 2 partitions, and runs it again. The run
// after the change must start with the old tasks' unsent seqs split in
// task order among the 4 new tasks (list state), each new task must see
// both old tasks in its union list, and every seq must come out in exactly
// one batch. The oracle is computed from the input: each partition's
// records in offset order, batched by size.
//
// In "cut short", the changelog already has its 4 partitions when the
// second run starts, as when a redistribution added them and the process
// died before it wrote the state: the second run must finish it.
func TestOperatorStateIsRedistributedWhenPartitionsAreAdded(t *testing.T) {
	for _, cut := range []bool{false, true} {
		t.Run(map[bool]string{false: "whole", true: "cut short"}[cut], func(t *testing.T) { testRedistribution(t, cut) })
	}
}

func testRedistribution(t *testing.T, cutShort bool) {
	k := testkit.NewKafka(t)
	k.Topic("in", 2)
	const size, n1, n2 = 7, 1003, 2002
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// byPart[p] lists the seqs written to partition p, in order.
	byPart := map[int32][]int{}
	produce := func(from, to int, parts int32, flush bool) {
		var rs []*kgo.Record
		for i := from; i < to; i++ {
			p := int32(i*7919) % parts // spread unevenly over time
			byPart[p] = append(byPart[p], i)
			rs = append(rs, &kgo.Record{Topic: "in", Partition: p, Value: fmt.Appendf(nil, `{"seq":%d}`, i)})
		}
		if flush {
			for p := range parts {
				rs = append(rs, &kgo.Record{Topic: "in", Partition: p, Value: []byte(`{"flush":true}`)})
			}
		}
		// A new client each time: it must know the partitions added.
		prod, err := kgo.NewClient(kgo.SeedBrokers(k.Addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		defer prod.Close()
		if err := prod.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	body := `name: batch
brokers: [` + k.Addr + `]
instance_id: i1
checkpoint: {interval: 100ms, timeout: 10s, max_records: 300}
transactions: {timeout: 20s}
sources: {in: {topics: [in]}}
steps:
  - name: buf
    batcher: {}
sinks:
  out: {topic: out, from: buf}
  seen: {topic: seen, from: buf.seen}
`
	cfg, err := config.Parse([]byte(body), "batch.yaml", func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	run := func() {
		reg := ops.NewRegistry()
		if err := reg.Register("batcher", func(spec *pipeline.Spec) (pipeline.Definition, error) {
			return &batcher{size: size}, nil
		}); err != nil {
			t.Fatal(err)
		}
		p, err := engine.New(cfg, reg, engine.WithLogger(testkit.Logger(t)), engine.WithSeedBrokers(k.Addr))
		if err != nil {
			t.Fatal(err)
		}
		testkit.RunUntilCommitted(t, k, p, "batch", "in")
	}

	produce(0, n1, 2, false)
	run()
	first := k.ReadAll("out")
	// What each old task left unsent: its records after the last full batch.
	var leftover []int
	for p := range int32(2) {
		seqs := byPart[p]
		leftover = append(leftover, seqs[len(seqs)/size*size:]...)
	}
	if len(leftover) < 4 {
		t.Fatalf("the test needs unsent seqs in the old tasks to show they move; only %d", len(leftover))
	}

	grow := []string{"in"}
	if cutShort {
		grow = append(grow, wire.ChangelogTopic("batch", "buf"))
	}
	if _, err := k.Admin.UpdatePartitions(ctx, 4, grow...); err != nil {
		t.Fatal(err)
	}
	produce(n1, n2, 4, true)
	run()

	parts, err := k.Admin.ListTopics(ctx, wire.ChangelogTopic("batch", "buf"))
	if err != nil {
		t.Fatal(err)
	}
	if got := len(parts[wire.ChangelogTopic("batch", "buf")].Partitions); got != 4 {
		t.Fatalf("the changelog has %d partitions, want 4", got)
	}
	type batch struct {
		Task int   `json:"task"`
		Seqs []int `json:"seqs"`
		Ran  []int `json:"ran"`
	}
	decode := func(r *kgo.Record) batch {
		var b batch
		if err := json.Unmarshal(r.Value, &b); err != nil {
			t.Fatalf("output %s: %v", r.Value, err)
		}
		return b
	}
	// Every seq once, in one batch.
	count := map[int]int{}
	firstAfter := map[int][]int{} // task → its first batch of the second run
	for _, r := range k.ReadAll("out") {
		b := decode(r)
		for _, s := range b.Seqs {
			count[s]++
		}
		if !slices.ContainsFunc(first, func(f *kgo.Record) bool { return f.Partition == r.Partition && f.Offset == r.Offset }) {
			if _, ok := firstAfter[b.Task]; !ok {
				firstAfter[b.Task] = b.Seqs
			}
		}
	}
	var problems []string
	for s := range n2 {
		if count[s] != 1 {
			problems = append(problems, fmt.Sprintf("seq %d in %d batches", s, count[s]))
		}
	}
	if len(count) != n2 {
		problems = append(problems, fmt.Sprintf("%d distinct seqs, want %d", len(count), n2))
	}
	// Each new task's first batch starts with its share of the leftovers.
	for task := range 4 {
		share := leftover[task*len(leftover)/4 : (task+1)*len(leftover)/4]
		got := firstAfter[task]
		if len(got) < len(share) || !slices.Equal(got[:len(share)], share) {
			problems = append(problems, fmt.Sprintf("task %d's first batch after the change is %v, want it to start with %v (its share of %v)", task, got, share, leftover))
		}
	}
	// Each new task saw both old tasks in its union list.
	seen := map[int][]int{}
	for _, r := range k.ReadAll("seen") {
		b := decode(r)
		seen[b.Task] = b.Ran // the last one: the second run's
	}
	for task := range 4 {
		if !slices.Equal(seen[task], []int{0, 1}) {
			problems = append(problems, fmt.Sprintf("task %d's union list after the change is %v, want [0 1]", task, seen[task]))
		}
	}
	if len(problems) > 0 {
		t.Fatalf("%d problems:\n%s", len(problems), strings.Join(problems[:min(20, len(problems))], "\n"))
	}
}
