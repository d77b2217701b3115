package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/ops"
	"github.com/pipeline-run/pipeline/wire"
)

// positionsOf returns each produced record as "topic source output" with
// the values of its wire.HeaderSource and wire.HeaderOutput ("-" when absent), in the
// order produced.
func positionsOf(rs []*kgo.Record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		src, ok := headerOf(r, wire.HeaderSource)
		if !ok {
			src = "-"
		}
		o, ok := headerOf(r, wire.HeaderOutput)
		if !ok {
			o = "-"
		}
		out[i] = r.Topic + " " + src + " " + o
	}
	return out
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

func TestSourcePositionHeadersNumberEachInputsOutputs(t *testing.T) {
	const body = `
audit: {source_positions: true}
producer: {batch_max_bytes: 2000}
sources: {in: {topics: [in]}}
steps:
  - name: each
    flat_map: value.items
sinks:
  a: {topic: out}
  b: {from: each, topic: out, value: "{v: value}"}
dead_letter: {topic: dlq}
`
	o := newOffline(t, body, nil)
	big := strings.Repeat("x", 3000)

	o.rt.nextID = 1
	got := positionsOf(o.feed(
		rec("in", 0, 0, "k", `{"items":[1,2,3]}`),
		rec("in", 0, 1, "k", `{"items":[]}`),   // one-to-zero: no output, no number used
		rec("in", 1, 5, "k", `{"items":"no"}`), // fails in flat_map: a dead letter, no headers
		rec("in", 2, 9, "k", `{"items":[1,"`+big+`",2]}`),
	))
	want := []string{
		"dlq - -", // in/1@5
		"dlq - -", // in/2@9: its middle output is too large for the producer, for sink a
		"dlq - -", // and for sink b
		"out in/0@0 a/0", "out in/0@0 a/1", "out in/0@0 a/2",
		"out in/0@0 b/0", "out in/0@0 b/1", "out in/0@0 b/2",
		// The refused record used no number: what was written is numbered
		// without a hole.
		"out in/2@9 a/0", "out in/2@9 a/1",
		"out in/2@9 b/0", "out in/2@9 b/1",
	}
	if g := sortedCopy(got); !slices.Equal(g, want) {
		t.Fatalf("checkpoint 1 wrote\n  %s\nwant\n  %s", strings.Join(g, "\n  "), strings.Join(want, "\n  "))
	}

	// The same input again within the checkpoint continues its numbers:
	// the sink cannot tell a second processing from more outputs.
	got = positionsOf(o.feed(rec("in", 0, 0, "k", `{"items":[7]}`)))
	if want := []string{"out in/0@0 a/3", "out in/0@0 b/3"}; !slices.Equal(sortedCopy(got), want) {
		t.Fatalf("a second processing within checkpoint 1 wrote %v, want %v", got, want)
	}

	// A replay in the next checkpoint (after an abort) numbers from 0
	// again, so the committed attempt's outputs are 0..n-1 whichever
	// attempt committed.
	o.rt.nextID = 2
	got = positionsOf(o.feed(rec("in", 0, 0, "k", `{"items":[1,2,3]}`)))
	want = []string{"out in/0@0 a/0", "out in/0@0 a/1", "out in/0@0 a/2", "out in/0@0 b/0", "out in/0@0 b/1", "out in/0@0 b/2"}
	if g := sortedCopy(got); !slices.Equal(g, want) {
		t.Fatalf("the replay in checkpoint 2 wrote\n  %s\nwant\n  %s", strings.Join(g, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestSourcePositionHeadersAreOffByDefault(t *testing.T) {
	o := newOffline(t, "sources: {in: {topics: [in]}}\nsteps: [{flat_map: value.items}]\nsinks: {out: {topic: out}}\n", nil)
	o.rt.nextID = 1
	for _, r := range o.feed(rec("in", 0, 0, "k", `{"items":[1,2]}`)) {
		if len(r.Headers) != 0 {
			t.Fatalf("record %s has headers %v without audit.source_positions", r.Value, r.Headers)
		}
	}
}

type discard struct{}

func (discard) Produce(*kgo.Record) {}

// TestSourcePositionsCostNoAllocationWhenOff measures the sink alone: off,
// it allocates the kgo.Record and nothing else; on, the header slice and
// one buffer for both header values besides.
func TestSourcePositionsCostNoAllocationWhenOff(t *testing.T) {
	for _, on := range []bool{false, true} {
		rt := &runtime{nextID: 1}
		s := &sinkOp{def: &sinkDef{name: "out", topic: "out", positions: on}, prod: discard{}}
		ctx := &opContext{Context: context.Background(), task: &task{rt: rt}}
		in := &kgo.Record{Topic: "in", Partition: 3, Offset: 41, Key: []byte("k"), Value: []byte(`{"n":1}`)}
		r := pipeline.NewRecord(in, pipeline.String, pipeline.JSON)
		allocs := testing.AllocsPerRun(200, func() {
			if err := s.Process(ctx, r); err != nil {
				t.Fatal(err)
			}
		})
		// Output records come in chunks: a fraction of an allocation each.
		want := 0.0
		if on {
			want = 2
		}
		if allocs < want || allocs > want+0.1 {
			t.Errorf("source positions %v: %v allocations per record, want %v and a fraction", on, allocs, want)
		}
	}
}

// interleave emits two records for each input. For the inputs at offsets
// 10 and 11, keyed to run on different workers of a parallel stage, it makes
// the workers take turns: 10's first, 11's first, 10's second, 11's second.
type interleave struct {
	x, y                       string // keys of the inputs at 10 and 11
	first10, first11, second10 chan struct{}
}

func (d *interleave) Outputs() []string                                      { return nil }
func (d *interleave) NewOperator(pipeline.TaskID) (pipeline.Operator, error) { return d, nil }

func (d *interleave) Process(ctx pipeline.Context, r *pipeline.Record) error {
	wait := func(c chan struct{}) error {
		select {
		case <-c:
			return nil
		case <-time.After(30 * time.Second):
			return errors.New("the other worker never took its turn")
		}
	}
	switch r.Source.Offset {
	case 10:
		ctx.Emit(r.Clone())
		close(d.first10)
		if err := wait(d.first11); err != nil {
			return err
		}
		ctx.Emit(r)
		close(d.second10)
	case 11:
		if err := wait(d.first10); err != nil {
			return err
		}
		ctx.Emit(r.Clone())
		close(d.first11)
		if err := wait(d.second10); err != nil {
			return err
		}
		ctx.Emit(r)
	default:
		ctx.Emit(r.Clone())
		ctx.Emit(r)
	}
	return nil
}

// TestSourcePositionsOfInterleavedOutputs has a parallel stage's workers
// hand one sink the outputs of two inputs interleaved. Numbering by "the
// same input as the record before" would give x's second output the number
// of its first.
func TestSourcePositionsOfInterleavedOutputs(t *testing.T) {
	d := &interleave{first10: make(chan struct{}), first11: make(chan struct{}), second10: make(chan struct{})}
	reg := ops.NewRegistry()
	if err := reg.Register("interleave", func(*pipeline.Spec) (pipeline.Definition, error) { return d, nil }); err != nil {
		t.Fatal(err)
	}
	o := newOffline(t, `
audit: {source_positions: true}
sources: {in: {topics: [in]}}
steps: [{name: p, parallel: {workers: 2, interleave: {}}}]
sinks: {out: {topic: out}}
`, reg)
	st := o.rt.stages[o.rt.g.byName["p"].idx]
	worker := func(k string) int {
		return st.route(&pipeline.Record{Key: pipeline.RawValue([]byte(k), pipeline.String)})
	}
	for i := 0; d.y == ""; i++ {
		k := fmt.Sprint("k", i)
		switch {
		case d.x == "":
			d.x = k
		case worker(k) != worker(d.x):
			d.y = k
		}
	}
	o.rt.nextID = 1
	got := positionsOf(o.feed(rec("in", 0, 10, d.x, `1`), rec("in", 0, 11, d.y, `2`), rec("in", 0, 12, d.x, `3`)))
	// The turns must have happened for the test to show anything.
	if want := []string{"out in/0@10 out/0", "out in/0@11 out/0", "out in/0@10 out/1"}; len(got) < 3 || !slices.Equal(got[:3], want) {
		t.Fatalf("the workers did not interleave as arranged, or numbered wrongly: got\n  %s\nwant it to begin with\n  %s",
			strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	want := []string{"out in/0@10 out/0", "out in/0@10 out/1", "out in/0@11 out/0", "out in/0@11 out/1", "out in/0@12 out/0", "out in/0@12 out/1"}
	if g := sortedCopy(got); !slices.Equal(g, want) {
		t.Fatalf("got\n  %s\nwant\n  %s", strings.Join(g, "\n  "), strings.Join(want, "\n  "))
	}
}

// TestSourcePositionHeaderNamesAreTheConfigs checks that the header names
// config refuses on a sink are the ones this package writes.
func TestSourcePositionHeaderNamesAreTheConfigs(t *testing.T) {
	for _, h := range []string{wire.HeaderSource, wire.HeaderOutput} {
		doc := fmt.Sprintf("name: t\nbrokers: [127.0.0.1:9]\naudit: {source_positions: true}\nsources: {in: {topics: [in]}}\nsinks: {out: {topic: out, headers: {%s: key}}}\n", h)
		_, err := config.Parse([]byte(doc), "test.yaml", noEnv)
		if err == nil || !strings.Contains(err.Error(), "sinks.out.headers."+h) {
			t.Errorf("a sink header named %s was not refused: %v", h, err)
		}
	}
}
