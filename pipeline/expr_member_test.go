package pipeline

import (
	"reflect"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The member patch must not change what any expression means: each is
// evaluated with and without it over records of every shape, and results
// and failures must agree.
func TestMemberPatchKeepsMeaning(t *testing.T) {
	exprs := []string{
		`value.a`, `value["a"]`, `value.a.b`, `value.a?.b`, `value?.a`, `value?.a.b`,
		`value.missing`, `value.missing == nil`, `value.list[0]`, `value.list[0].x`,
		`value.n + 1`, `value.n % 2 == 0`, `value.s + "!"`, `key.id`, `headers.h`,
		`{k: value.a, twice: value.n * 2}`, `map(value.list, #.x)`, `filter(value.list, .x > 1)`,
		`len(value.list)`, `value.a.b ?? "none"`, `value.n > 3 ? value.s : value.a`, `value.a in ["x", "y"]`,
		`let v = value; v.n`, `topic + "/" + string(partition)`, `value.s.len`,
	}
	values := []string{
		`{"a":{"b":1},"n":4,"s":"str","list":[{"x":1},{"x":2}]}`,
		`{"a":"x","n":7,"s":"","list":[]}`,
		`{"a":null}`, `{}`, `null`, `[1,2]`, `"text"`, `12`,
	}
	keys := []string{`{"id":5}`, `"plain"`, `null`}
	for _, src := range exprs {
		fast, ferr := compileExpr(src, AnyResult, true)
		slow, serr := compileExpr(src, AnyResult, false)
		if (ferr == nil) != (serr == nil) {
			t.Fatalf("%s: compiles %v with the patch, %v without", src, ferr, serr)
		}
		if ferr != nil {
			continue
		}
		patched := strings.Contains(fast.prog.Disassemble(), memberFunc)
		if want := !strings.Contains(src, "?.a") && !strings.HasPrefix(src, "headers") && !strings.HasPrefix(src, "topic"); want && !patched {
			t.Errorf("%s: not patched, so this test does not test the patch on it", src)
		}
		for _, v := range values {
			for _, k := range keys {
				kr := &kgo.Record{Topic: "in", Key: []byte(k), Value: []byte(v), Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("hv")}}}
				var fe, se Evaluator
				fo, ferr := fe.Eval(fast, NewRecord(kr, JSON, JSON))
				so, serr := se.Eval(slow, NewRecord(kr, JSON, JSON))
				if (ferr == nil) != (serr == nil) || !reflect.DeepEqual(fo, so) {
					t.Errorf("%s over key %s value %s:\n patched %v, %v\n as is   %v, %v", src, k, v, fo, ferr, so, serr)
				}
			}
		}
		t.Logf("%-45s patched: %v", src, patched)
	}
}
