package engine

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestSinkWritesTheInputRecordItTakes: a sink's output is the input record
// as fetched when nothing else was made of it, cleared of what the fetch
// set; when a step's output goes to two readers, each gets its own output
// and the input is left as it was, for the dead-letter topic of the other.
func TestSinkWritesTheInputRecordItTakes(t *testing.T) {
	fetched := func() *kgo.Record {
		r := rec("in", 2, 7, "k", `{"n":1}`)
		r.LeaderEpoch, r.ProducerID, r.ProducerEpoch = 3, 99, 4
		r.Attrs = kgo.RecordAttrs{}
		r.Headers = []kgo.RecordHeader{{Key: "h", Value: []byte("x")}}
		return r
	}

	t.Run("one output", func(t *testing.T) {
		o := newOffline(t, "sources: {in: {topics: [in]}}\nsteps: [{map: \"{m: value.n + 1}\"}]\nsinks: {out: {topic: out}}\n", nil)
		in := fetched()
		out := o.feed(in)
		if len(out) != 1 {
			t.Fatalf("%d outputs, want 1", len(out))
		}
		if out[0] != in {
			t.Error("the output is a new record, not the input record the sink could take")
		}
		want := kgo.Record{Topic: "out", Key: []byte("k"), Value: []byte(`{"m":2}`), Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("x")}}}
		got := *out[0]
		got.Timestamp = want.Timestamp
		if show([]*kgo.Record{&got})[0] != show([]*kgo.Record{&want})[0] ||
			got.Partition != 0 || got.Offset != 0 || got.LeaderEpoch != 0 || got.ProducerID != 0 || got.ProducerEpoch != 0 || got.Context != nil {
			t.Errorf("output %+v keeps what the fetch set, or is not the map's output", got)
		}
	})

	t.Run("two readers", func(t *testing.T) {
		o := newOffline(t, `
sources: {in: {topics: [in]}}
steps:
  - {name: plus, from: in, map: "{m: value.n + 1}"}
  - {name: bad, from: in, map: "{m: value.n / value.zero * value.missing.x}"}
sinks:
  out: {from: plus, topic: out}
  copy: {from: in, topic: copy}
  worse: {from: bad, topic: worse}
dead_letter: {topic: dlq}
`, nil)
		in := fetched()
		out := o.feed(in)
		for _, r := range out {
			if r == in {
				t.Errorf("the %s output is the input record, which other readers share", r.Topic)
			}
		}
		if in.Topic != "in" || string(in.Value) != `{"n":1}` || in.Offset != 7 {
			t.Errorf("the input record changed: %+v", *in)
		}
		got := strings.Join(show(out), "\n")
		for _, want := range []string{`copy k {"n":1} h=x`, `out k {"m":2} h=x`,
			`dlq k {"n":1} h=x pipeline.step=bad pipeline.source.topic=in pipeline.source.partition=2 pipeline.source.offset=7`} {
			if !strings.Contains(got, want) {
				t.Errorf("no output %q in\n%s", want, got)
			}
		}
	})
}
