package pipeline

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/internal/codec"
)

// fastExprs are expressions the fast evaluator takes on, with the result
// the VM is asked for.
var fastExprs = []struct {
	src  string
	want ExprResult
}{
	{"value.seq % 10 != 3", BoolResult},
	{"value.seq % value.n == 0", BoolResult},
	{"value.a > 1 && value.b < 2.5", BoolResult},
	{"value.a >= value.b || value.s == 'x'", BoolResult},
	{"value.a <= value.b", BoolResult},
	{"value.s > 'm'", BoolResult},
	{"!(value.flag)", BoolResult},
	{"not value.flag", BoolResult},
	{"value.flag", BoolResult},
	{"value.a == value.b", BoolResult},
	{"value.a != nil", BoolResult},
	{"value.n.a == 1", BoolResult},
	{"key == 'k1' and value.a > 0", BoolResult},
	{"value.a && value.b", AnyResult},
	{"value.a || value.b", AnyResult},
	{"{seq: value.seq, ts: value.ts, pad: value.pad, twice: value.seq * 2}", AnyResult},
	{"value.a + value.b", AnyResult},
	{"value.a - value.b * 3", AnyResult},
	{"value.a / value.b", AnyResult},
	{"value.a % value.b", AnyResult},
	{"-value.a", AnyResult},
	{"+value.a", AnyResult},
	{"value.s + '!'", AnyResult},
	{"value.a > 0 ? value.s : value.b", AnyResult},
	{"[value.a, value.s, 1.5, nil, true]", AnyResult},
	{"{k: key, t: topic, p: partition, o: offset, ts: timestamp, late: timestamp - value.a}", AnyResult},
	{"value.n.a + 1", AnyResult},
	{"{z: value.a, a: value.s, m: 1, o: {x: value.a}, l: [value.b]}", AnyResult},
	{"value.n", AnyResult},
	{"offset", AnyResult},
	{"-offset", AnyResult},
	{"offset * 2", AnyResult},
	{"1 + 2 * 3", AnyResult},
	{"2.5 * value.a", AnyResult},
	{"value.seq / 0", AnyResult},
	{"(value.a - value.a) / (value.b - value.b) < 1", BoolResult},
	{"state.total + value.a", AnyResult},
	{"state == nil ? value.a : state.total", AnyResult},
	// An int constant on the right, by each operator worked out for ints.
	{"[value.a + 1, value.a - 3, value.a * 2, value.a % 4]", AnyResult},
	{"value.a == nil ? 0 : value.a % 0", AnyResult},
	{"[value.a == 2, value.a != 2, value.a < 2, value.a > 2, value.a <= 2, value.a >= 2]", AnyResult},
	{"value.a + value.seq * value.n", AnyResult},
	{"[value.b * 2, value.b == 2]", AnyResult},
	{"value.b % 2", AnyResult},
	{"value.a < value.seq == (value.n >= value.seq)", AnyResult},
	{"[offset % 7, offset - 1, timestamp >= 1700000000000, offset == value.a, value.a * value.n]", AnyResult},
	{"value.seq % 10 == 3 || value.seq * 2 > 20", BoolResult},
}

// fastValues are values of every shape the expressions may meet,
// including those the fast evaluator leaves to the VM.
var fastValues = []string{
	`{"seq":7,"n":3,"a":2,"b":1.5,"s":"x","flag":true,"ts":99,"pad":"ppp"}`,
	`{"seq":30,"n":0,"a":-4,"b":-4,"s":"zz","flag":false}`,
	`{"seq":13,"n":{"a":1},"a":9007199254740993,"b":9007199254740992,"s":"m"}`,
	`{"seq":1.5,"a":"2","b":true,"flag":1,"n":[1,2]}`,
	`{"a":null,"b":null,"s":null,"flag":null,"seq":null,"n":{"a":null}}`,
	`{"a":1e308,"b":1e308,"seq":-7,"n":-2}`,
	`{"a":{"x":1},"b":{"x":1},"s":["x"],"n":{"a":"1"}}`,
	`{"a":true,"b":false,"flag":false,"s":"","seq":0,"n":1}`, `{"a":false,"b":"yes"}`,
	`{}`, `[1,2]`, `"text"`, `12`, `null`, `{"seq":`,
	// fields an object literal copies as read, or not: -0, 19 digits, a
	// fraction, escapes, HTML characters, bytes above 0x7f
	`{"seq":-0,"ts":"a<b","pad":"q\"uote","a":1.0,"s":"\u00e9","b":"x&y"}`,
	`{"seq":1234567890123456789,"ts":-12,"pad":"plain ~","a":"é","b":123456789012345678}`,
}

var fastStates = []any{nil, map[string]any{"total": 5}, map[string]any{"total": 2.5}, map[string]any{}, "plain"}

// vmOnly is e with every way around the VM turned off.
func vmOnly(e *Expr) *Expr {
	p := *e
	p.direct, p.fast = notDirect, nil
	return &p
}

// TestFastAgreesWithTheVM: on every value, the fast evaluator gives what
// the VM gives, errors included, or leaves the answer to it; and it
// answers each expression at least once.
func TestFastAgreesWithTheVM(t *testing.T) {
	for _, x := range fastExprs {
		e, err := CompileExpr(x.src, x.want)
		if err != nil {
			t.Fatal(err)
		}
		if e.fast == nil {
			t.Errorf("%s: not taken by the fast evaluator", x.src)
			continue
		}
		answered := 0
		for _, v := range fastValues {
			for _, st := range fastStates {
				answered += checkFast(t, e, v, st)
			}
		}
		if answered == 0 {
			t.Errorf("%s: the fast evaluator answered on no value", x.src)
		}
	}
}

// checkFast compares e's answer on value raw and state st with the VM's,
// on records decoded whole and, when e names the fields it reads, decoded
// field by field as the engine does; it returns 1 when the fast evaluator
// answered.
func checkFast(t *testing.T, e *Expr, raw string, st any) int {
	t.Helper()
	n := checkFastWith(t, e, raw, st, NewDecoding(String, JSON, ValueReads{Whole: true}))
	if !e.wholeValue {
		n = max(n, checkFastWith(t, e, raw, st, NewDecoding(String, JSON, ValueReads{Fields: e.valueFields})))
	}
	return n
}

func checkFastWith(t *testing.T, e *Expr, raw string, st any, d *Decoding) int {
	t.Helper()
	rec := func() *Record {
		r := new(Record)
		r.Read(&kgo.Record{Topic: "in", Partition: 2, Offset: 1 << 40, Key: []byte("k1"),
			Value: []byte(raw), Timestamp: time.UnixMilli(1_700_000_000_123)}, d)
		return r
	}
	var ev1, ev2, ev3 Evaluator
	got, gerr := ev1.EvalState(e, rec(), st)
	want, werr := ev2.EvalState(vmOnly(e), rec(), st)
	if (gerr == nil) != (werr == nil) || (gerr != nil && gerr.Error() != werr.Error()) {
		t.Errorf("%s on %s, state %v: error %v, the VM's %v", e.src, raw, st, gerr, werr)
	}
	if !reflect.DeepEqual(got, want) && !bothNaN(got, want) {
		t.Errorf("%s on %s, state %v: %#v, the VM gives %#v", e.src, raw, st, got, want)
	}
	if st == nil {
		checkEvalValue(t, e, rec(), want, werr)
	}
	if e.fast == nil {
		return 0
	}
	if _, ok, _ := ev3.evalFast(e, rec(), st); ok {
		return 1
	}
	return 0
}

func bothNaN(a, b any) bool {
	x, ok1 := a.(float64)
	y, ok2 := b.(float64)
	return ok1 && ok2 && x != x && y != y
}

// TestFastLeavesTheRestToTheVM: what the fast evaluator does not know is
// compiled for the VM alone, and still evaluates.
func TestFastLeavesTheRestToTheVM(t *testing.T) {
	for _, src := range []string{
		"len(value.s)", "value?.a", "let x = value.a; x + 1", "value.a in [1, 2]",
		"value.a ?? 0", "headers.h", "value.s startsWith 'x'", "value.a ** 2",
		"filter([1, 2], # > 1)", "value.list[0]", "$env.value", "{a: 1, a: value.a}",
	} {
		e, err := CompileExpr(src, AnyResult)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if e.fast != nil {
			t.Errorf("%s: taken by the fast evaluator", src)
		}
		checkFast(t, e, fastValues[0], nil)
	}
}

// FuzzFastAgreesWithTheVM runs every fast expression on arbitrary values.
func FuzzFastAgreesWithTheVM(f *testing.F) {
	for _, v := range fastValues {
		f.Add(v)
	}
	var exprs []*Expr
	for _, x := range fastExprs {
		e, err := CompileExpr(x.src, x.want)
		if err != nil {
			f.Fatal(err)
		}
		exprs = append(exprs, e)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		for _, e := range exprs {
			for _, st := range fastStates {
				checkFast(t, e, raw, st)
			}
		}
	})
}

// TestFastMakesNewObjects: each evaluation of a literal is a new object,
// as the VM's is: operators change what they are given.
func TestFastMakesNewObjects(t *testing.T) {
	e, err := CompileExpr("{a: [value.a]}", AnyResult)
	if err != nil || e.fast == nil {
		t.Fatalf("fast %v, %v", e.fast != nil, err)
	}
	var ev Evaluator
	r := NewRecord(&kgo.Record{Value: []byte(`{"a":1}`)}, String, JSON)
	x, _ := ev.Eval(e, r)
	y, _ := ev.Eval(e, r)
	x.(map[string]any)["a"].([]any)[0] = 2
	if fmt.Sprint(y) != "map[a:[1]]" {
		t.Fatalf("a later evaluation shares the first's objects: %v", y)
	}
}

// TestFieldReadsBuildNoObject: expressions that read a value's fields by
// name, run as the engine runs them (the value decoded as the graph's
// reads say), build no object for it; asking for the value whole then
// gives the object those fields make.
func TestFieldReadsBuildNoObject(t *testing.T) {
	filter, err := CompileExpr("value.seq % 10 != 3", BoolResult)
	if err != nil {
		t.Fatal(err)
	}
	last, err := CompileExpr("value.ts", AnyResult)
	if err != nil {
		t.Fatal(err)
	}
	d := NewDecoding(String, JSON, ValueReads{Fields: []string{"seq", "ts"}})
	r := new(Record)
	r.Read(&kgo.Record{Value: []byte(`{"seq":12,"pad":"xxxx","ts":99,"seq":13}`)}, d)
	var ev Evaluator
	if ok, err := ev.EvalBool(filter, r); err != nil || ok {
		t.Fatalf("filter: %v, %v; want false (13 %% 10 == 3)", ok, err)
	}
	if ts, err := ev.Eval(last, r); err != nil || ts != 99 {
		t.Fatalf("value.ts: %v, %v", ts, err)
	}
	if r.Value.decoded || !r.Value.split {
		t.Fatalf("decoded %v, split %v: an object was built for reads by name", r.Value.decoded, r.Value.split)
	}
	whole, err := r.Value.Get()
	if want := map[string]any{"seq": 13, "ts": 99}; err != nil || !reflect.DeepEqual(whole, want) {
		t.Fatalf("Get: %#v, %v; want %#v", whole, err, want)
	}
	// A value replaced is read as it was set.
	r.Value.Set(map[string]any{"seq": 3})
	if x, isObject, err := r.Value.Field("seq"); x != 3 || !isObject || err != nil {
		t.Fatalf("after Set: %v %v %v", x, isObject, err)
	}
	// Documents that are not objects, and broken ones, give what the VM
	// gives on them decoded whole, errors included.
	for _, raw := range []string{`[1]`, `7`, `{"seq":`} {
		kr := &kgo.Record{Value: []byte(raw)}
		r := new(Record)
		r.Read(kr, d)
		x, err := ev.Eval(last, r)
		want, werr := ev.Eval(vmOnly(last), NewRecord(kr, String, JSON))
		if werr == nil || err == nil || err.Error() != werr.Error() || x != want {
			t.Errorf("%s: %v, %v; the VM gives %v, %v", raw, x, err, want, werr)
		}
	}
}

// checkEvalValue checks EvalValue against the VM's answer want (or error
// werr): the same error, the same value read whole, field by field and
// written out as JSON.
func checkEvalValue(t *testing.T, e *Expr, r *Record, want any, werr error) {
	t.Helper()
	var ev Evaluator
	v, err := ev.EvalValue(e, r)
	if (err == nil) != (werr == nil) || (err != nil && err.Error() != werr.Error()) {
		t.Errorf("%s: EvalValue's error %v, the VM's %v", e.src, err, werr)
		return
	}
	if err != nil {
		return
	}
	if m, ok := want.(map[string]any); ok {
		for name, x := range m {
			got, isObject, err := v.Field(name)
			if err != nil || !isObject || (!reflect.DeepEqual(got, x) && !bothNaN(got, x)) {
				t.Errorf("%s: EvalValue's field %s is %#v (object %v, %v), the VM gives %#v", e.src, name, got, isObject, err, x)
			}
		}
		if got, isObject, _ := v.Field("absent"); got != nil || !isObject {
			t.Errorf("%s: EvalValue's absent field is %#v (object %v)", e.src, got, isObject)
		}
	}
	b, err := v.Encode(JSON)
	wb, werr2 := Encode(want, JSON)
	if (err == nil) != (werr2 == nil) || string(b) != string(wb) {
		t.Errorf("%s: EvalValue writes %s (%v), the VM's result %s (%v)", e.src, b, err, wb, werr2)
	}
	// Written as JSON at once, for a sink (WriteObjectsAsJSON): the same
	// bytes.
	var jev Evaluator
	jev.WriteObjectsAsJSON()
	jv, err := jev.EvalValue(e, r)
	if err != nil {
		t.Errorf("%s: EvalValue writing JSON: %v", e.src, err)
		return
	}
	if jb, err := jv.Encode(JSON); (err == nil) != (werr2 == nil) || string(jb) != string(wb) {
		t.Errorf("%s: EvalValue writing JSON writes %s (%v), the VM's result %s (%v)", e.src, jb, err, wb, werr2)
	}
	if ab, ok, err := v.AppendJSON([]byte("x")); ok && (fmt.Sprint(err) != fmt.Sprint(werr2) || err == nil && string(ab) != "x"+string(wb)) {
		t.Errorf("%s: EvalValue appends %s (%v), the VM's result is %s (%v)", e.src, ab, err, wb, werr2)
	} else if !ok && string(b) != string(wb) {
		t.Errorf("%s: EvalValue appends nothing, and writes %s", e.src, b)
	}
	got, err := v.Get()
	if err != nil || (!reflect.DeepEqual(got, want) && !bothNaN(got, want)) {
		t.Errorf("%s: EvalValue gives %#v (%v), the VM %#v", e.src, got, err, want)
	}
}

// TestObjectLiteralsAreKeptAsFields: EvalValue keeps an object literal with
// constant, distinct keys as a sorted list of fields, and leaves one with a
// repeated key to the VM, which keeps the first: {a: 1, a: 2} is {a: 1}.
func TestObjectLiteralsAreKeptAsFields(t *testing.T) {
	for src, fields := range map[string]bool{
		"{z: value.a, a: value.s, m: 1}": true,
		"{a: 1, a: value.a}":             false, // the VM's
		"value.a":                        false,
		"{a: len(value.s)}":              false, // the VM's
	} {
		e, err := CompileExpr(src, AnyResult)
		if err != nil {
			t.Fatal(err)
		}
		r := new(Record)
		r.Read(&kgo.Record{Value: []byte(`{"a":1,"s":"x"}`)}, NewDecoding(String, JSON, ValueReads{Whole: true}))
		var ev Evaluator
		v, err := ev.EvalValue(e, r)
		if err != nil {
			t.Fatal(err)
		}
		if got := v.split && !v.decoded; got != fields {
			t.Errorf("%s: kept as fields %v, want %v", src, got, fields)
		}
		if src == "{a: 1, a: value.a}" {
			if got, _ := v.Get(); !reflect.DeepEqual(got, map[string]any{"a": 1}) {
				t.Errorf("%s: %#v, want the first a", src, got)
			}
		}
		if fields && !slices.IsSortedFunc(v.fields, func(a, b codec.Field) int { return strings.Compare(a.Name, b.Name) }) {
			t.Errorf("%s: fields not sorted: %v", src, v.fields)
		}
	}
}

// TestObjectLiteralKeepsReadValuesBoxed: an object literal of fields read
// from the record, constants and a negated field allocates the one value
// computed, not a box per value it copies; its list of fields shares an
// allocation with those of the objects after it.
func TestObjectLiteralKeepsReadValuesBoxed(t *testing.T) {
	e, err := CompileExpr(`{seq: value.seq, pad: value.pad, f: value.f, c: 1000, s: "const", neg: -value.seq}`, AnyResult)
	if err != nil {
		t.Fatal(err)
	}
	r := new(Record)
	r.Read(&kgo.Record{Value: []byte(`{"seq":123456,"pad":"padding padding","f":2.5}`)}, NewDecoding(String, JSON, ValueReads{Whole: true}))
	if _, err := r.Value.Get(); err != nil {
		t.Fatal(err)
	}
	var ev Evaluator
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := ev.EvalValue(e, r); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 1 {
		t.Errorf("%.0f allocations per object, want 1: -value.seq (the fields come many to an allocation)", allocs)
	}
	v, err := ev.EvalValue(e, r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := v.Encode(JSON)
	if want := `{"c":1000,"f":2.5,"neg":-123456,"pad":"padding padding","s":"const","seq":123456}`; err != nil || string(got) != want {
		t.Errorf("got %s (%v), want %s", got, err, want)
	}
}

// TestObjectLiteralCopiesFieldsAsRead: the bench's filter-map, on a
// record decoded field by field as the engine does, reads seq and copies
// seq, ts and pad as they were read, decoding none of them; it allocates
// seq * 2 alone (the list of fields shares an allocation with others).
func TestObjectLiteralCopiesFieldsAsRead(t *testing.T) {
	filter, err := CompileExpr("value.seq % 10 != 3", BoolResult)
	if err != nil {
		t.Fatal(err)
	}
	e, err := CompileExpr("{seq: value.seq, ts: value.ts, pad: value.pad, twice: value.seq * 2}", AnyResult)
	if err != nil {
		t.Fatal(err)
	}
	d := NewDecoding(String, JSON, ValueReads{Fields: []string{"seq", "ts", "pad"}})
	in := []byte(`{"seq":123456,"ts":1795955790878123,"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`)
	r := new(Record)
	r.Read(&kgo.Record{Value: in}, d)
	var ev Evaluator
	if ok, err := ev.EvalBool(filter, r); err != nil || !ok {
		t.Fatalf("filter: %v, %v", ok, err)
	}
	for _, f := range r.Value.fields {
		if f.Raw == nil || f.Value != nil {
			t.Fatalf("field %s: raw %q, value %#v: decoded, not kept as read", f.Name, f.Raw, f.Value)
		}
	}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := ev.EvalValue(e, r); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 1 {
		t.Errorf("%.0f allocations per object, want 1: seq * 2 (the fields come many to an allocation)", allocs)
	}
	v, err := ev.EvalValue(e, r)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range v.fields {
		if (f.Raw != nil) != (f.Name != "twice") {
			t.Errorf("output field %s: raw %q", f.Name, f.Raw)
		}
	}
	got, err := v.Encode(JSON)
	if want := `{"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx","seq":123456,"ts":1795955790878123,"twice":246912}`; err != nil || string(got) != want {
		t.Errorf("got %s (%v), want %s", got, err, want)
	}
	// Read whole afterwards, the copies decode to what was read.
	obj, err := v.Get()
	if want := map[string]any{"seq": 123456, "ts": 1795955790878123, "pad": strings.Repeat("x", 50), "twice": 246912}; err != nil || !reflect.DeepEqual(obj, want) {
		t.Errorf("read whole: %#v (%v), want %#v", obj, err, want)
	}
}

// TestObjectLiteralsShareNoFields: the objects EvalValue returns one after
// another take their fields from one allocation, each its own part of it,
// with no room to grow into the next.
func TestObjectLiteralsShareNoFields(t *testing.T) {
	e, err := CompileExpr("{seq: value.seq, twice: value.seq * 2}", AnyResult)
	if err != nil {
		t.Fatal(err)
	}
	d := NewDecoding(String, JSON, ValueReads{Fields: []string{"seq"}})
	var ev Evaluator
	var outs []Value
	for i := range 2 * decodeBlock {
		r := new(Record)
		r.Read(&kgo.Record{Value: fmt.Appendf(nil, `{"seq":%d}`, i)}, d)
		v, err := ev.EvalValue(e, r)
		if err != nil {
			t.Fatal(err)
		}
		if len(v.fields) != 2 || cap(v.fields) != 2 {
			t.Fatalf("object %d: %d fields, room for %d", i, len(v.fields), cap(v.fields))
		}
		outs = append(outs, v)
	}
	for i := range outs {
		got, err := outs[i].Encode(JSON)
		if want := fmt.Sprintf(`{"seq":%d,"twice":%d}`, i, 2*i); err != nil || string(got) != want {
			t.Fatalf("object %d: %s (%v), want %s", i, got, err, want)
		}
	}
}

// TestEvaluatorReuse: after Reuse, EvalValue builds its objects in the
// memory of those before, cleared: a field the record lacks is null, not
// what the object before held there.
func TestEvaluatorReuse(t *testing.T) {
	e, err := CompileExpr("{a: value.a, b: value.b}", AnyResult)
	if err != nil {
		t.Fatal(err)
	}
	d := NewDecoding(String, JSON, ValueReads{Fields: []string{"a", "b"}})
	var ev Evaluator
	eval := func(in string) Value {
		r := new(Record)
		r.Read(&kgo.Record{Value: []byte(in)}, d)
		v, err := ev.EvalValue(e, r)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	first := eval(`{"a":1,"b":"x"}`)
	if got, _ := first.Encode(JSON); string(got) != `{"a":1,"b":"x"}` {
		t.Fatalf("first object %s", got)
	}
	at := &first.fields[0]
	ev.Reuse()
	second := eval(`{"b":"y"}`)
	if &second.fields[0] != at {
		t.Error("after Reuse, the next object's fields are not where the first's were")
	}
	if got, _ := second.Encode(JSON); string(got) != `{"a":null,"b":"y"}` {
		t.Errorf("second object %s, want a null a", got)
	}
}

// TestEvalIntAgreesWithEval: wherever EvalInt answers, Eval returns the
// same int; and it answers for whole numbers read as written and for
// arithmetic on them.
func TestEvalIntAgreesWithEval(t *testing.T) {
	exprs := []string{"value.x", "value.x * 2", "value.x + value.y", "-value.x", "value.x / 2", "value.s", "len(value.s)", "offset", "value.x % 7", "value"}
	values := []string{`{"x":12,"y":3,"s":"ab"}`, `{"x":-40000,"y":0}`, `{"x":1234567890123456789}`, `{"x":2.5}`, `{"x":"7"}`, `{"x":null}`, `{}`,
		`{"x":-0}`, `{"x":1e3}`, `{"x":{"a":1}}`, `[1,2]`, `{"x":`, `{"x":12,"x":13}`}
	answered := 0
	for _, src := range exprs {
		e, err := CompileExpr(src, AnyResult)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range values {
			for _, reads := range []ValueReads{{Fields: []string{"x", "y", "s"}}, {Whole: true}} {
				d := NewDecoding(String, JSON, reads)
				r := new(Record)
				r.Read(&kgo.Record{Value: []byte(in), Offset: 9}, d)
				var ev Evaluator
				n, ok := ev.EvalInt(e, r)
				x, err := ev.Eval(e, r)
				if !ok {
					continue
				}
				answered++
				if got, isInt := x.(int); err != nil || !isInt || got != n {
					t.Errorf("%s of %s: EvalInt %d, Eval %#v (%v)", src, in, n, x, err)
				}
			}
		}
	}
	if answered < 10 {
		t.Errorf("EvalInt answered %d times, want whole numbers read and computed", answered)
	}
}
