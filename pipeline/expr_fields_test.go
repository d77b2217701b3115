package pipeline

import (
	"slices"
	"testing"
)

func TestExprNamesTheFieldsOfValueItReads(t *testing.T) {
	tests := []struct {
		src    string
		fields []string
		whole  bool
	}{
		{src: "value.seq % 10 != 3", fields: []string{"seq"}},
		{src: `value["ts"] + value.seq + value.ts`, fields: []string{"ts", "seq"}},
		{src: "value?.a ?? 1", fields: []string{"a"}},
		{src: "value.a.b", fields: []string{"a"}},
		{src: "value.items[0]", fields: []string{"items"}},
		{src: "map(value.items, #.x)", fields: []string{"items"}},
		{src: "{seq: value.seq, pad: value.pad, twice: value.seq * 2}", fields: []string{"seq", "pad"}},
		{src: `key + "x"`},
		{src: "timestamp > 0 && topic == 'in'"},
		{src: "value", whole: true},
		{src: "len(value)", whole: true},
		{src: "value.a + len(value)", fields: []string{"a"}, whole: true},
		{src: "value[key]", whole: true},
		{src: `"a" in value`, whole: true},
		{src: "let v = value; v.x", whole: true},
		{src: "$env.value.a", whole: true},
		{src: `$env["value"]`, whole: true},
		{src: "value.a ?? value", fields: []string{"a"}, whole: true},
	}
	for _, tc := range tests {
		for _, fast := range []bool{true, false} {
			e, err := compileExpr(tc.src, AnyResult, fast)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(e.valueFields, tc.fields) || e.wholeValue != tc.whole {
				t.Errorf("%q (member patch %v): fields %q, whole %v; want %q, %v", tc.src, fast, e.valueFields, e.wholeValue, tc.fields, tc.whole)
			}
		}
	}
}
