package ops_test

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/ops"
	"github.com/pipeline-run/pipeline/pipeline/optest"
	"github.com/pipeline-run/pipeline/pipeline/state"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestAggregateKeepsAccumulatorsRight drives an aggregate (which keeps the
// accumulators of the keys changed since the last checkpoint decoded, and
// writes them at the checkpoint) through a record whose second field
// fails, a checkpoint, an abort and a restore: every output must be what
// the records that counted make.
func TestAggregateKeepsAccumulatorsRight(t *testing.T) {
	open := statefulOpener(t, "agg", "aggregate",
		map[string]any{"fields": map[string]any{"n": "count", "total": map[string]any{"sum": "value.x"}}})
	st, op := open()
	ctx := optest.NewContext(t)
	feed := func(v string, wantErr bool) string {
		t.Helper()
		r := jsonRecord(v)
		r.Key = pipeline.RawValue([]byte("k"), pipeline.String)
		n := len(ctx.Emitted(""))
		err := op.Process(ctx, r)
		if (err != nil) != wantErr {
			t.Fatalf("record %s: error %v", v, err)
		}
		if wantErr {
			return ""
		}
		return values(t, ctx.Emitted("")[n:])
	}
	checkpoint := func(commit bool) {
		t.Helper()
		if err := op.(pipeline.Flusher).Flush(ctx); err != nil {
			t.Fatal(err)
		}
		st.Changes()
		var err error
		if commit {
			err = st.Commit(-1)
		} else {
			err = st.Abort()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := feed(`{"x":1}`, false); got != `{"n":1,"total":1}` {
		t.Fatalf("first record: %s", got)
	}
	feed(`{"x":"a"}`, true) // counted by n, then failed in total: undone
	if got := feed(`{"x":2}`, false); got != `{"n":2,"total":3}` {
		t.Fatalf("after a failed record: %s, want n 2 total 3", got)
	}
	checkpoint(true)
	if got := feed(`{"x":10}`, false); got != `{"n":3,"total":13}` {
		t.Fatalf("after a checkpoint: %s", got)
	}
	checkpoint(false) // aborted: the record above is replayed
	if got := feed(`{"x":10}`, false); got != `{"n":3,"total":13}` {
		t.Fatalf("replayed after an abort: %s, want n 3 total 13", got)
	}
	feed(`{"x":5}`, false)
	st.Abort() // rolled back without a checkpoint (the task's state restored)
	if got := feed(`{"x":10}`, false); got != `{"n":3,"total":13}` {
		t.Fatalf("after a rollback: %s, want n 3 total 13", got)
	}
	checkpoint(true)
	_ = st.Close()
	st, op = open()
	if got := feed(`{"x":100}`, false); got != `{"n":4,"total":113}` {
		t.Fatalf("after a restart: %s, want n 4 total 113", got)
	}
}

// TestAggregateOutputsReadLikeObjects: an aggregate writes its outputs as
// JSON, and a step after it reads their fields as it would an object's:
// each output is the accumulator the records so far make, computed here
// from the input.
func TestAggregateOutputsReadLikeObjects(t *testing.T) {
	f, _ := ops.NewRegistry().Lookup("aggregate")
	s := pipeline.NewSpec("agg", "aggregate", "steps[0].aggregate", map[string]any{"fields": map[string]any{
		"n": "count", "mean": map[string]any{"avg": "value.x"}, "last": map[string]any{"last": "value.s"},
		"xs": map[string]any{"collect": "value.x", "max": 2}, "hi": map[string]any{"max": "value.x"},
	}}, 1, func(string) int { return 0 })
	def, err := f(s)
	if err != nil || len(s.Problems()) > 0 {
		t.Fatalf("building: %v %v", err, s.Problems())
	}
	sd := def.(pipeline.StatefulDefinition)
	st, err := state.Open(state.NewMemory(), "t/agg", 0, sd.Fingerprint(), nil)
	if err != nil {
		t.Fatal(err)
	}
	op, err := sd.NewStatefulOperator(0, st)
	if err != nil {
		t.Fatal(err)
	}
	ctx := optest.NewContext(t)
	next, err := pipeline.CompileExpr(`{twice: value.n * 2, mean: value.mean, last: value.last, xs: value.xs, hi: value.hi}`, pipeline.AnyResult)
	if err != nil {
		t.Fatal(err)
	}
	xs := []float64{3, 4.5, -2, 10}
	strs := []string{"a", "b\"q", "ü", "d"}
	sum := 0.0
	for i, x := range xs {
		r := jsonRecord(fmt.Sprintf(`{"x":%v,"s":%q}`, x, strs[i]))
		r.Key = pipeline.RawValue([]byte("k"), pipeline.String)
		if err := op.Process(ctx, r); err != nil {
			t.Fatal(err)
		}
		out := ctx.Emitted("")[i]
		got, err := ctx.Eval().Eval(next, out)
		if err != nil {
			t.Fatalf("output %d read by the next step: %v", i, err)
		}
		sum += x
		hi := slices.Max(xs[:i+1])
		var want = map[string]any{"twice": 2 * (i + 1), "mean": whole(sum / float64(i+1)), "last": strs[i], "hi": whole(hi)}
		var recent []any
		for _, y := range xs[max(0, i-1) : i+1] {
			recent = append(recent, whole(y))
		}
		want["xs"] = recent
		if !reflect.DeepEqual(got, want) {
			t.Errorf("after record %d the next step reads %#v, want %#v", i, got, want)
		}
	}
}

// whole is x as a JSON round trip gives it: an int when it is whole.
func whole(x float64) any {
	if x == float64(int(x)) {
		return int(x)
	}
	return x
}

// statefulOpener builds step name of kind from args and returns a function
// that opens its store (task 0, in one memory backend shared by every
// call, so a store opened again holds what was committed) and an operator
// over it.
func statefulOpener(t testing.TB, name, kind string, args map[string]any) func() (*state.Store, pipeline.Operator) {
	t.Helper()
	return statefulOpenerN(t, name, kind, args, 1)
}

// fireTimers fires, in time order, every event-time timer of op's store st
// due at upTo, with the watermark of ctx at upTo.
func fireTimers(t *testing.T, ctx *optest.Context, st *state.Store, op pipeline.Operator, upTo int64) {
	t.Helper()
	ctx.WM = time.UnixMilli(upTo)
	tm := st.Timers()[0]
	for {
		timer, ok, err := tm.Pop(state.EventTime, upTo)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return
		}
		if err := op.(pipeline.TimerHandler).OnTimer(ctx, timer); err != nil {
			t.Fatal(err)
		}
	}
}

// statefulOpenerN is statefulOpener of a step reading inputs streams.
func statefulOpenerN(t testing.TB, name, kind string, args map[string]any, inputs int) func() (*state.Store, pipeline.Operator) {
	t.Helper()
	f, _ := ops.NewRegistry().Lookup(kind)
	s := pipeline.NewSpec(name, kind, "steps[0]."+kind, args, inputs, func(string) int { return 0 })
	def, err := f(s)
	if err != nil || len(s.Problems()) > 0 {
		t.Fatalf("building: %v %v", err, s.Problems())
	}
	sd := def.(pipeline.StatefulDefinition)
	mem := state.NewMemory()
	return func() (*state.Store, pipeline.Operator) {
		st, err := state.Open(mem, "t/"+name, 0, sd.Fingerprint(), nil)
		if err != nil {
			t.Fatal(err)
		}
		op, err := sd.NewStatefulOperator(0, st)
		if err != nil {
			t.Fatal(err)
		}
		return st, op
	}
}

// TestAggregateEmitCheckpointAfterARollback: with emit: checkpoint, a key
// changed before the store rolled back and again after it is written once,
// with the value the records since make, on its last record; a key changed
// only before it is not written at all (its change is gone).
func TestAggregateEmitCheckpointAfterARollback(t *testing.T) {
	open := statefulOpener(t, "agg", "aggregate", map[string]any{"emit": "checkpoint",
		"fields": map[string]any{"n": "count", "total": map[string]any{"sum": "value.x"}, "at": map[string]any{"last": "value.at"}}})
	st, op := open()
	ctx := optest.NewContext(t)
	feed := func(key, v string) {
		t.Helper()
		r := jsonRecord(v)
		r.Key = pipeline.RawValue([]byte(key), pipeline.String)
		if err := op.Process(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	flush := func() string {
		t.Helper()
		n := len(ctx.Emitted(""))
		if err := op.(pipeline.Flusher).Flush(ctx); err != nil {
			t.Fatal(err)
		}
		st.Changes()
		if err := st.Commit(-1); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range ctx.Emitted("")[n:] {
			k, _ := r.Key.Encode(pipeline.String)
			out = append(out, string(k)+"="+values(t, []*pipeline.Record{r}))
		}
		return strings.Join(out, " ")
	}
	feed("k", `{"x":1,"at":1}`)
	feed("a", `{"x":2,"at":2}`)
	if got, want := flush(), `a={"at":2,"n":1,"total":2} k={"at":1,"n":1,"total":1}`; got != want {
		t.Fatalf("first checkpoint: %s, want %s", got, want)
	}
	feed("k", `{"x":5,"at":3}`)
	feed("j", `{"x":7,"at":4}`)
	if err := st.Abort(); err != nil { // rolled back without a checkpoint
		t.Fatal(err)
	}
	feed("k", `{"x":10,"at":5}`)
	feed("k", `{"x":20,"at":6}`)
	if got, want := flush(), `k={"at":6,"n":3,"total":31}`; got != want {
		t.Fatalf("after a rollback: %s, want %s", got, want)
	}
	if got := flush(); got != "" {
		t.Fatalf("a checkpoint with no change wrote %s", got)
	}
}

// TestAggregateFoldsIntsAsTheirValues drives a count, sum, first and last
// over records decoded field by field, as the engine reads them (whole
// numbers kept as read, folded without boxing), mixed with fractions,
// strings that fail the sum, checkpoints and an abort. Every output is
// checked against the accumulators computed here from the input.
func TestAggregateFoldsIntsAsTheirValues(t *testing.T) {
	// Four fields or fewer fold as ints first and fall back field by
	// field; more take the general path from the start.
	t.Run("four fields", func(t *testing.T) { foldsIntsAsTheirValues(t, false) })
	t.Run("five fields", func(t *testing.T) { foldsIntsAsTheirValues(t, true) })
}

func foldsIntsAsTheirValues(t *testing.T, withD bool) {
	fields := map[string]any{
		"n": "count", "s": map[string]any{"sum": "value.x"}, "f": map[string]any{"first": "value.x"},
		"l": map[string]any{"last": "value.x"}}
	if withD {
		fields["d"] = map[string]any{"sum": "value.x * 2"}
	}
	open := statefulOpener(t, "agg", "aggregate", map[string]any{"fields": fields})
	st, op := open()
	ctx := optest.NewContext(t)
	dec := pipeline.NewDecoding(pipeline.String, pipeline.JSON, pipeline.ValueReads{Fields: []string{"x"}})
	type acc struct {
		n        int
		s, d     float64
		frac     bool // s and d are no longer whole
		f, l     string
		has      bool
		saved    *acc // at the last commit
		inflight bool
	}
	keys := map[string]*acc{}
	num := func(x float64, frac bool) string {
		if frac {
			return strconv.FormatFloat(x, 'f', -1, 64) // as encoding/json writes it
		}
		return fmt.Sprint(int64(x))
	}
	for i := range 3000 {
		key := fmt.Sprintf("k%d", i*7%13)
		var raw string
		var x float64
		var isNum, isFrac bool
		switch {
		case i%97 == 5:
			raw = `"bad"`
		case i%89 == 7:
			x, isNum, isFrac = float64(i)+0.5, true, true
			raw = fmt.Sprint(x)
		default:
			x, isNum = float64(i*31-40000), true
			raw = fmt.Sprint(int64(x))
		}
		r := new(pipeline.Record)
		r.Read(&kgo.Record{Key: []byte(key), Value: []byte(`{"x":` + raw + `}`)}, dec)
		n := len(ctx.Emitted(""))
		err := op.Process(ctx, r)
		a := keys[key]
		if a == nil {
			a = &acc{}
			keys[key] = a
		}
		if !isNum {
			if err == nil {
				t.Fatalf("record %d: a sum of a string folded", i)
			}
			continue
		}
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		a.n++
		a.s += x
		a.d += 2 * x
		a.frac = a.frac || isFrac
		if !a.has {
			a.f, a.has = raw, true
		}
		a.l = raw
		want := fmt.Sprintf(`{"f":%s,"l":%s,"n":%d,"s":%s}`, a.f, a.l, a.n, num(a.s, a.frac))
		if withD {
			want = fmt.Sprintf(`{"d":%s,`, num(a.d, a.frac)) + want[1:]
		}
		if got := values(t, ctx.Emitted("")[n:]); got != want {
			t.Fatalf("record %d (%s of %s): %s, want %s", i, raw, key, got, want)
		}
		switch i % 500 {
		case 250: // a checkpoint
			if err := op.(pipeline.Flusher).Flush(ctx); err != nil {
				t.Fatal(err)
			}
			st.Changes()
			if err := st.Commit(-1); err != nil {
				t.Fatal(err)
			}
			for _, a := range keys {
				c := *a
				a.saved = &c
			}
		case 499: // an abort: back to the last checkpoint
			if err := st.Abort(); err != nil {
				t.Fatal(err)
			}
			for k, a := range keys {
				if a.saved == nil {
					keys[k] = &acc{}
				} else {
					c := *a.saved
					c.saved = a.saved
					keys[k] = &c
				}
			}
		}
	}
	_ = st
}

// TestAggregateFoldsIntsUnboxed: folding a record of whole numbers into a
// cached key's count, sum, first and last allocates nothing per record
// (each new int boxed was three allocations a record).
func TestAggregateFoldsIntsUnboxed(t *testing.T) {
	_, op := statefulOpener(t, "agg", "aggregate", map[string]any{"fields": map[string]any{
		"n": "count", "s": map[string]any{"sum": "value.x"}, "f": map[string]any{"first": "value.x"},
		"l": map[string]any{"last": "value.ts"}, "d": map[string]any{"sum": "value.x * 2"}}})()
	ctx := optest.NewContext(t)
	recs := preloaded(300, []string{"x", "ts"}, func(i int) (key, value []byte) {
		return []byte("k"), fmt.Appendf(nil, `{"x":%d,"ts":%d}`, 100000+i, 1795955790878123+i)
	})
	next := 0
	process := func() {
		if err := op.Process(ctx, recs[next]); err != nil {
			t.Fatal(err)
		}
		next++
	}
	process() // the key's entry
	if allocs := testing.AllocsPerRun(200, process); allocs >= 1 {
		t.Errorf("%.0f allocations a record, want none", allocs)
	}
	if got, want := values(t, ctx.Emitted("")[next-1:]), fmt.Sprintf(`{"d":%d,"f":100000,"l":%d,"n":%d,"s":%d}`,
		2*(100000*next+next*(next-1)/2), 1795955790878123+next-1, next, 100000*next+next*(next-1)/2); got != want {
		t.Errorf("last output %s, want %s", got, want)
	}
}

// TestAggregateKeepsNoRecord: an aggregate says it keeps no record
// (pipeline.Forgetter), so the engine may reuse a record's memory once
// Process returns. Each input here is read into the same Record, as a
// reused chunk would be: what emit: checkpoint writes at the checkpoint is
// still each key's last record (key, header, time) with its count, as
// computed here from the input, with and without a TTL.
func TestAggregateKeepsNoRecord(t *testing.T) {
	for _, ttl := range []string{"", "1h"} {
		args := map[string]any{"fields": map[string]any{"n": "count", "s": map[string]any{"last": "value.seq"}}, "emit": "checkpoint"}
		if ttl != "" {
			args["ttl"] = ttl
		}
		open := statefulOpener(t, "agg", "aggregate", args)
		st, op := open()
		ctx := optest.NewContext(t)
		dec := pipeline.NewDecoding(pipeline.String, pipeline.JSON, pipeline.ValueReads{Fields: []string{"seq"}})
		var r pipeline.Record
		count, last := map[string]int{}, map[string]int{}
		for seq := range 500 {
			k := fmt.Sprintf("k%d", seq*7%23)
			r = pipeline.Record{}
			r.Read(&kgo.Record{Key: []byte(k), Value: fmt.Appendf(nil, `{"seq":%d}`, seq), Timestamp: time.UnixMilli(int64(1000 + seq)),
				Headers: []kgo.RecordHeader{{Key: "h", Value: fmt.Appendf(nil, "%d", seq)}}}, dec)
			if err := op.Process(ctx, &r); err != nil {
				t.Fatal(err)
			}
			count[k]++
			last[k] = seq
		}
		if err := op.(pipeline.Flusher).Flush(ctx); err != nil {
			t.Fatal(err)
		}
		st.Changes()
		out := ctx.Emitted("")
		if len(out) != len(last) {
			t.Fatalf("ttl %q: %d outputs for %d keys", ttl, len(out), len(last))
		}
		for _, o := range out {
			k := string(o.Key.Raw())
			s := last[k]
			v, _ := o.Value.Encode(pipeline.JSON)
			h, _ := o.Header("h")
			if want := fmt.Sprintf(`{"n":%d,"s":%d}`, count[k], s); string(v) != want || string(h) != fmt.Sprint(s) || o.Timestamp.UnixMilli() != int64(1000+s) {
				t.Errorf("ttl %q key %s: %s, header %s, time %d; want %s of seq %d", ttl, k, v, h, o.Timestamp.UnixMilli(), want, s)
			}
		}
		_ = st.Close()
	}
}

// BenchmarkAggregateFold is the keyed count of the bench tool (count, last
// seq, last send time) on records decoded beforehand, over 100 keys
// already cached: the fold and the output value, without decoding, the
// store or checkpoints (engine's BenchmarkAggregateOp has those).
func BenchmarkAggregateFold(b *testing.B) {
	_, op := statefulOpener(b, "agg", "aggregate", map[string]any{"fields": map[string]any{
		"count": "count", "seq": map[string]any{"last": "value.seq"}, "ts": map[string]any{"last": "value.ts"}}})()
	ctx := optest.NewContext(b)
	recs := preloaded(1000, []string{"seq", "ts"}, func(i int) (key, value []byte) {
		return fmt.Appendf(nil, "k%d", i%100),
			fmt.Appendf(nil, `{"seq":%d,"ts":%d,"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`, 1234567+i, 1795955790878123+i)
	})
	// Process sets r's value to the output: each goes in as a copy.
	var r pipeline.Record
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%len(recs) == 0 {
			ctx.Reset()
		}
		r = *recs[i%len(recs)]
		if err := op.Process(ctx, &r); err != nil {
			b.Fatal(err)
		}
	}
	if got := ctx.Emitted(""); len(got) == 0 || !strings.Contains(values(b, got[len(got)-1:]), `"ts":1795955790`) {
		b.Fatalf("outputs: %d, the last %s", len(got), values(b, got[len(got)-1:]))
	}
}

// preloaded returns n records of JSON values read as the engine reads them
// for steps that read fields, and decoded: record i of kv(i).
func preloaded(n int, fields []string, kv func(i int) (key, value []byte)) []*pipeline.Record {
	dec := pipeline.NewDecoding(pipeline.String, pipeline.JSON, pipeline.ValueReads{Fields: fields})
	var buf pipeline.DecodeBuffer
	recs := make([]*pipeline.Record, n)
	for i := range recs {
		key, value := kv(i)
		recs[i] = new(pipeline.Record)
		recs[i].Read(&kgo.Record{Key: key, Value: value}, dec)
		recs[i].Preload(&buf)
	}
	return recs
}
