package pipeline

import (
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDirectReadsAgreeWithTheProgram: the expressions Eval reads without
// the VM (value.f, value, key) give what their program gives, errors
// included, on every shape of value.
func TestDirectReadsAgreeWithTheProgram(t *testing.T) {
	values := []struct {
		raw    string
		format Format
	}{
		{`{"seq":7,"n":{"a":1},"s":"x"}`, JSON}, {`{}`, JSON}, {`[1,2]`, JSON}, {`"text"`, JSON},
		{`12`, JSON}, {`null`, JSON}, {`{"seq":`, JSON}, {`plain`, String}, {`bytes`, Bytes},
	}
	for _, src := range []string{"value", "key", "value.seq", "value.n", "value.missing", `value["seq"]`} {
		e, err := CompileExpr(src, AnyResult)
		if err != nil {
			t.Fatal(err)
		}
		if e.direct == notDirect {
			t.Fatalf("%s is not read directly", src)
		}
		prog := *e
		prog.direct = notDirect
		for i := range 2 * len(values) {
			v := values[i%len(values)]
			// Decoded whole, then as the engine decodes what it reads by
			// name: field by field.
			reads := ValueReads{Whole: true}
			if i >= len(values) {
				if e.wholeValue {
					continue
				}
				reads = ValueReads{Fields: e.valueFields}
			}
			rec := func() *Record {
				r := new(Record)
				r.Read(&kgo.Record{Topic: "in", Key: []byte(`{"id":1}`), Value: []byte(v.raw)}, NewDecoding(JSON, v.format, reads))
				return r
			}
			var ev1, ev2 Evaluator
			got, gerr := ev1.Eval(e, rec())
			want, werr := ev2.Eval(&prog, rec())
			if (gerr == nil) != (werr == nil) || (gerr != nil && gerr.Error() != werr.Error()) {
				t.Errorf("%s on %s: error %v, the program's %v", src, v.raw, gerr, werr)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s on %s: %#v, the program gives %#v", src, v.raw, got, want)
			}
		}
	}
	for _, src := range []string{"value.seq + 1", "value?.seq", "value.n.a", "timestamp"} {
		if e, err := CompileExpr(src, AnyResult); err != nil || e.direct != notDirect {
			t.Errorf("%s: direct %v (%v)", src, e.direct, err)
		}
	}
}
