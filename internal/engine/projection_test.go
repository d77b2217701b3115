package engine

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/ops"
)

// projectionOf builds the pipeline and returns what its sources decode
// JSON values with: "all", or the field names.
func projectionOf(t *testing.T, body string, reg *pipeline.Registry) string {
	t.Helper()
	g, err := Build(parseConfig(t, body), reg)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	var seen []string
	for _, n := range g.nodes {
		if n.kind != sourceNode {
			continue
		}
		s := "all"
		if r := n.dec.Reads(); !r.Whole {
			s = strings.Join(r.Fields, ",")
		}
		seen = append(seen, n.name+":"+s)
	}
	return strings.Join(seen, " ")
}

func TestGraphDecodesOnlyTheFieldsItsExpressionsRead(t *testing.T) {
	reg := ops.NewRegistry()
	if err := reg.Register("upper", func(s *pipeline.Spec) (pipeline.Definition, error) { return upper{}, nil }); err != nil {
		t.Fatal(err)
	}
	const src = "sources: {in: {topics: [in]}}\n"
	const sink = "sinks: {out: {topic: out}}\n"
	tests := []struct{ name, body, want string }{
		{"the bench's keyed count", src + "steps: [{name: count, aggregate: {fields: {count: count, seq: {last: value.seq}, ts: {last: value.ts}}}}]\n" + sink, "in:seq,ts"},
		{"a filter, then a map naming fields", src + `steps: [{filter: "value.seq % 10 != 3"}, {map: "{seq: value.seq, pad: value.pad}"}]` + "\n" + sink, "in:seq,pad"},
		{"a map passing the value on", src + `steps: [{filter: "value.seq > 0"}, {map: "value"}]` + "\n" + sink, "in:all"},
		{"a sink's value expression", src + "sinks: {out: {topic: out, key: value.id, value: \"value.body\"}}\n", "in:id,body"},
		{"a dedupe id, a split and a route", src + `steps: [{dedupe: {id: value.id, ttl: 1m}}, {split: {hot: "value.t > 30"}}, {from: split2.hot, route: [{a: "value.r == 'a'"}]}]` + "\nsinks: {out: {topic: out, from: route3.a}}\n", "in:id,t,r"},
		{"a key_by: its repartition topic is read with the same fields", src + `steps: [{key_by: value.user}, {aggregate: {fields: {n: count, last: {last: value.t}}}}]` + "\n" + sink, "in:user,t key_by1:user,t"},
		{"a custom operator may read anything", src + `steps: [{filter: "value.seq > 0"}, {upper: {}}]` + "\n" + sink, "in:all"},
		{"a custom operator in a parallel stage", src + `steps: [{filter: "value.seq > 0"}, {parallel: {workers: 2, upper: {}}}]` + "\n" + sink, "in:all"},
		{"a built-in one in a parallel stage", src + `steps: [{parallel: {workers: 2, map: "value.n * 2"}}]` + "\n" + sink, "in:n"},
		{"nothing reads the value", src + `steps: [{filter: "key != 'x'"}]` + "\n" + sink, "in:"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := projectionOf(t, tc.body, reg); got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}

// TestStepsSeeWhatTheyReadAndBadRecordsStillFail runs records through
// graphs that decode a few fields: what the steps write is what decoding
// everything would give, and a record broken in a field nobody reads still
// goes to the dead-letter topic.
func TestStepsSeeWhatTheyReadAndBadRecordsStillFail(t *testing.T) {
	const src = "sources: {in: {topics: [in]}}\nsinks: {out: {topic: out}}\ndead_letter: {topic: dlq}\n"
	in := []string{
		`{"seq":1,"pad":[1,{"x":"y"}],"ts":5}`,
		`{"seq":2,"pad":"\x","ts":6}`,     // an invalid escape
		`{"seq":3,"pad":1e400,"ts":7}`,    // a number out of range
		`{"seq":4,"pad":{"a":1,},"ts":8}`, // a trailing comma
		`{"s\u0065q":5,"pad":"ok"}`,       // the field read, its name escaped
	}
	tests := []struct {
		steps string
		want  []string
	}{{
		steps: `[{filter: "value.seq % 2 == 1"}, {map: "{seq: value.seq, ts: value.ts}"}]`,
		want:  []string{`out  {"seq":1,"ts":5}`, `out  {"seq":5,"ts":null}`},
	}, {
		steps: `[{filter: "value.seq % 2 == 1"}, {map: "value"}]`,
		want:  []string{`out  {"pad":"ok","seq":5}`, `out  {"pad":[1,{"x":"y"}],"seq":1,"ts":5}`},
	}}
	for _, tc := range tests {
		o := newOffline(t, src+"steps: "+tc.steps+"\n", nil)
		var recs []*kgo.Record
		for i, v := range in {
			recs = append(recs, rec("in", 0, int64(i), "", v))
		}
		got := show(o.feed(recs...))
		var outs, dlq []string
		for _, g := range got {
			if strings.HasPrefix(g, "dlq ") {
				dlq = append(dlq, g)
			} else {
				outs = append(outs, g)
			}
		}
		if strings.Join(outs, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("%s: wrote\n  %s\nwant\n  %s", tc.steps, strings.Join(outs, "\n  "), strings.Join(tc.want, "\n  "))
		}
		for _, off := range []int{1, 2, 3} {
			if !slices.ContainsFunc(dlq, func(s string) bool {
				return strings.Contains(s, fmt.Sprintf("pipeline.source.offset=%d", off))
			}) {
				t.Errorf("%s: record %d (%s) is not in the dead-letter topic: %q", tc.steps, off, in[off], dlq)
			}
		}
		if len(dlq) != 3 {
			t.Errorf("%s: dead-letter topic holds %d records, want 3", tc.steps, len(dlq))
		}
	}
}

// keysOp replaces a JSON object value with the list of its keys.
type keysOp struct{}

func (keysOp) Outputs() []string                                      { return nil }
func (keysOp) NewOperator(pipeline.TaskID) (pipeline.Operator, error) { return keysOp{}, nil }
func (keysOp) Process(ctx pipeline.Context, r *pipeline.Record) error {
	v, err := r.Value.Get()
	if err != nil {
		return err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("want an object, got %T", v)
	}
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	r.Value.Set(strings.Join(ks, ","))
	ctx.Emit(r)
	return nil
}

// TestTasksDecodeWithTheirSourcesProjection: records read from a source,
// and from a key_by's repartition topic, are decoded with the projection
// Build gave their source. A custom operator turns projection off, so the
// test sets it after Build, to see what the operator is handed.
func TestTasksDecodeWithTheirSourcesProjection(t *testing.T) {
	reg := ops.NewRegistry()
	if err := reg.Register("keys", func(s *pipeline.Spec) (pipeline.Definition, error) { return keysOp{}, nil }); err != nil {
		t.Fatal(err)
	}
	const sinks = "sinks: {out: {topic: out, format: string}}\n"
	o := newOffline(t, "sources: {in: {topics: [in]}}\nsteps: [{keys: {}}]\n"+sinks, reg)
	v := `{"seq":1,"ts":2,"pad":"x"}`
	if got := show(o.feed(rec("in", 0, 0, "k", v))); len(got) != 1 || got[0] != "out k pad,seq,ts" {
		t.Fatalf("with no projection: got %v", got)
	}
	o.rt.g.byName["in"].decodeWith(pipeline.ValueReads{Fields: []string{"seq", "ts"}})
	if got := show(o.feed(rec("in", 0, 1, "k", v))); len(got) != 1 || got[0] != "out k seq,ts" {
		t.Fatalf("decoding seq and ts: got %v", got)
	}

	// The repartition topic's records are read by the key_by's internal
	// source: feed one as it would come back.
	o = newOffline(t, "sources: {in: {topics: [in]}}\nsteps: [{name: rk, key_by: value.seq}, {keys: {}}]\n"+sinks, reg)
	o.rt.g.byName["rk"].decodeWith(pipeline.ValueReads{Fields: []string{"ts"}})
	topic := o.rt.g.byName["rk"].source.Topics[0]
	if got := show(o.feed(rec(topic, 0, 0, "1", v))); len(got) != 1 || got[0] != "out 1 ts" {
		t.Fatalf("a repartitioned record, decoding ts: got %v", got)
	}
}
