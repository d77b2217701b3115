package pipeline

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestPreloadWithABuffer decodes records' values ahead into one buffer:
// each reads its own fields afterwards, even next to records with fewer
// fields, repeated keys, values that are not objects or not JSON; and the
// buffer saves the allocation of each record's fields.
func TestPreloadWithABuffer(t *testing.T) {
	d := NewDecoding(String, JSON, ValueReads{Fields: []string{"a", "b"}})
	values := []string{`{"a":1,"b":"x","c":[1]}`, `{"b":"only b"}`, `{"a":2,"a":3,"b":"dup"}`, `[1,2]`, `{"a":`, `{}`, `{"a":4,"b":"last"}`}
	want := [][2]any{{1, "x"}, {nil, "only b"}, {3, "dup"}, {nil, nil}, {nil, nil}, {nil, nil}, {4, "last"}}
	var buf DecodeBuffer
	recs := make([]Record, 3*decodeBlock)
	for i := range recs {
		recs[i].Read(&kgo.Record{Value: []byte(values[i%len(values)])}, d)
		recs[i].Preload(&buf)
	}
	for i := range recs {
		j := i % len(values)
		for k, name := range []string{"a", "b"} {
			x, isObject, err := recs[i].Value.Field(name)
			switch {
			case j == 4:
				if err == nil {
					t.Fatalf("record %d (%s): no error reading %s", i, values[j], name)
				}
			case j == 3:
				if err != nil || isObject {
					t.Fatalf("record %d (%s): %s is %v, object %v, %v", i, values[j], name, x, isObject, err)
				}
			case err != nil || !isObject || fmt.Sprint(x) != fmt.Sprint(want[j][k]) && !(x == nil && want[j][k] == nil):
				t.Fatalf("record %d (%s): %s is %v (object %v, %v), want %v", i, values[j], name, x, isObject, err, want[j][k])
			}
		}
	}

	r := Record{}
	kr := &kgo.Record{Value: []byte(`{"a":1,"b":"x"}`)}
	alone := testing.AllocsPerRun(200, func() { r = Record{}; r.Read(kr, d); r.Preload(nil) })
	shared := testing.AllocsPerRun(200, func() { r = Record{}; r.Read(kr, d); r.Preload(&buf) })
	if shared >= alone {
		t.Errorf("%.2f allocations per record with a buffer, %.2f without: the buffer saves none", shared, alone)
	}
}
