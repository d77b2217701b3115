package engine

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/internal/codec"
	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/state"
)

// The hot paths one record takes, without a broker: run with
//
//	go test -run XXX -bench 'Eval|Graph|AggregateOp' -benchmem ./pipeline
//
// ns/op and allocs/op are per record.

func benchRecords(n, size int) []*kgo.Record {
	pad := make([]byte, max(0, size-64))
	for i := range pad {
		pad[i] = 'x'
	}
	recs := make([]*kgo.Record, n)
	for i := range recs {
		key := "k" + strconv.Itoa(i%10000)
		recs[i] = &kgo.Record{Topic: "in", Offset: int64(i), Key: []byte(key),
			Value: fmt.Appendf(nil, `{"k":%q,"seq":%d,"ts":%d,"p":"%s"}`, key, i, 1795955790878123+i, pad)}
	}
	return recs
}

// BenchmarkEval evaluates a predicate: on a record as read (the value is
// decoded on first use, as in a pipeline) and on one already decoded (the
// expression VM alone).
func BenchmarkEval(b *testing.B) {
	e, err := pipeline.CompileExpr(`value.seq % 10 != 3 && value.k != "k7"`, pipeline.BoolResult)
	if err != nil {
		b.Fatal(err)
	}
	recs := benchRecords(1000, 100)
	b.Run("decode+eval", func(b *testing.B) {
		var ev pipeline.Evaluator
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			r := pipeline.NewRecord(recs[i%len(recs)], pipeline.String, pipeline.JSON)
			if _, err := ev.EvalBool(e, r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("eval", func(b *testing.B) { benchEval(b, e, recs) })
}

func benchEval(b *testing.B, e *pipeline.Expr, recs []*kgo.Record) {
	{
		var ev pipeline.Evaluator
		rs := make([]*pipeline.Record, len(recs))
		for i, kr := range recs {
			rs[i] = pipeline.NewRecord(kr, pipeline.String, pipeline.JSON)
			if _, err := ev.EvalBool(e, rs[i]); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := ev.EvalBool(e, rs[i%len(rs)]); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkGraph runs batches of records through whole graphs to the point
// where they would be produced: reading, routing between steps, the steps,
// and building the output records.
func BenchmarkGraph(b *testing.B) {
	cases := []struct{ name, steps, sinks string }{
		{"pass-through", `[]`, `{out: {topic: out}}`},
		{"filter+map", `[{filter: "value.seq % 10 != 3"}, {map: "{k: value.k, seq: value.seq, twice: value.seq * 2}"}]`, `{out: {topic: out}}`},
		// The bench's filter-map: the padding copied too.
		{"filter+map-pad", `[{filter: "value.seq % 10 != 3"}, {map: "{k: value.k, seq: value.seq, p: value.p, twice: value.seq * 2}"}]`, `{out: {topic: out}}`},
		{"route", `[{name: r, route: [{small: "value.seq % 3 == 0"}, {big: "value.seq % 3 == 1"}]}]`,
			`{a: {topic: a, from: r.small}, b: {topic: b, from: r.big}, c: {topic: c, from: r.default}}`},
	}
	const batch = 500
	tmpl := benchRecords(batch, 100)
	// A sink that re-produces a record as fetched rewrites it (topic,
	// offset): each batch is fed from fresh copies of the templates.
	recs := make([]*kgo.Record, batch)
	for i := range recs {
		recs[i] = new(kgo.Record)
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			o := newOffline(b, fmt.Sprintf("sources: {in: {topics: [in]}}\nsteps: %s\nsinks: %s\n", tc.steps, tc.sinks), nil)
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				for i, r := range recs {
					*r = *tmpl[i]
				}
				n += len(o.feed(recs...))
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "records/s")
			b.ReportMetric(float64(n)/float64(b.N*batch), "outputs/record")
			// Per record, not per batch.
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/record")
		})
	}
}

// BenchmarkAccumulator reads and writes back an aggregate's accumulator,
// as every record of a keyed aggregation does, in the two codecs.
func BenchmarkAccumulator(b *testing.B) {
	acc := map[string]any{"n": 1234, "total": 98765, "avg": map[string]any{"sum": 1234.5, "count": 77}, "last": "k42"}
	for _, c := range []struct {
		name  string
		codec interface {
			Append([]byte, map[string]any) ([]byte, error)
			Decode([]byte) (map[string]any, error)
		}
	}{{"binary", codec.Acc{}}, {"json", codec.AccJSON{}}} {
		b.Run(c.name, func(b *testing.B) {
			buf, err := c.codec.Append(nil, acc)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				m, err := c.codec.Decode(buf)
				if err != nil {
					b.Fatal(err)
				}
				m["n"] = m["n"].(int) + 1
				if buf, err = c.codec.Append(buf[:0], m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAggregateOp runs the built-in aggregate's Process over 10,000
// keys on a state store of each backend, with a checkpoint (the store's
// Changes and Commit) every 10,000 records, as the runtime drives it. Per
// record: the accumulator read, folded and written back, and the output
// record built.
func BenchmarkAggregateOp(b *testing.B) {
	const commitEvery = 10_000
	recs := benchRecords(commitEvery, 100) // keys k0..k9999
	for _, tc := range []struct{ name, step string }{
		{"fields", `aggregate: {fields: {n: count, total: {sum: value.seq}, hi: {max: value.seq}, mean: {avg: value.seq}}}`},
		// The bench's keyed-count arms.
		{"count-update", `aggregate: {fields: {count: count, seq: {last: value.seq}, k: {last: value.k}}}`},
		{"count-checkpoint", `aggregate: {emit: checkpoint, fields: {count: count, seq: {last: value.seq}, k: {last: value.k}}}`},
		// Every field an int.
		{"count-ints", `aggregate: {fields: {count: count, seq: {last: value.seq}, total: {sum: value.seq}}}`},
		// The bench's keyed-count arm: count, last seq, last send time.
		{"count-last", `aggregate: {fields: {count: count, seq: {last: value.seq}, ts: {last: value.ts}}}`},
		// The bench's windowed-count arm (no watermark: windows stay open).
		{"window-count", `window: {tumbling: 1s, fields: {count: count}}`},
	} {
		cfg := parseConfig(b, "sources: {in: {topics: [in]}}\nsteps: [{name: per_key, "+tc.step+"}]\nsinks: {out: {topic: out}}\n")
		g, err := Build(cfg, nil)
		if err != nil {
			b.Fatal(err)
		}
		def, dec := g.byName["per_key"].stateful(), g.byTopic["in"].dec
		for _, backend := range []string{"memory", "pebble"} {
			b.Run(tc.name+"/"+backend, func(b *testing.B) { benchAggregate(b, def, dec, backend, recs) })
		}
	}
}

// benchAggregate folds recs into an aggregate over and over, committing
// (and flushing, as a checkpoint does) after every ten passes over them:
// each key changes ten times a checkpoint (a 1 s checkpoint of the bench's
// keyed count on Kafka changes each of its 10,000 keys a hundred times).
// Records are decoded as the engine decodes them (dec).
func benchAggregate(b *testing.B, def pipeline.StatefulDefinition, dec *pipeline.Decoding, backend string, recs []*kgo.Record) {
	var be state.Backend = state.NewMemory()
	if backend == "pebble" {
		p, err := state.OpenPebble(b.TempDir(), state.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
		if err != nil {
			b.Fatal(err)
		}
		be = p
	}
	st, err := state.Open(be, "t/per_key", 0, def.Fingerprint(), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = st.Close()
		_ = be.Close()
	})
	op, err := def.NewStatefulOperator(0, st)
	if err != nil {
		b.Fatal(err)
	}
	flusher, _ := op.(pipeline.Flusher)
	// A node without readers: Emit delivers to nobody.
	ctx := &opContext{Context: context.Background(), task: &task{id: 0}, node: &node{outputs: map[string][]edge{}}}
	var offset int64 = -1
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		r := new(pipeline.Record)
		r.Read(recs[i%len(recs)], dec)
		if err := op.Process(ctx, r); err != nil {
			b.Fatal(err)
		}
		if (i+1)%(10*len(recs)) == 0 {
			if flusher != nil {
				if err := flusher.Flush(ctx); err != nil {
					b.Fatal(err)
				}
			}
			offset += int64(len(st.Changes()))
			if err := st.Commit(offset); err != nil {
				b.Fatal(err)
			}
		}
	}
}
