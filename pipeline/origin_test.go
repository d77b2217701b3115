package pipeline

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestTakeOrigin: a record's input record goes to whoever takes it, once,
// unless a clone shares it; the dead-letter topic reads it (Origin) until
// then.
func TestTakeOrigin(t *testing.T) {
	in := &kgo.Record{Topic: "in", Key: []byte("k"), Value: []byte(`{"a":1}`)}
	read := func() *Record {
		r := new(Record)
		r.Read(in, &Decoding{Key: String, Value: JSON})
		return r
	}

	r := read()
	if r.Origin() != in {
		t.Fatal("a record read from in does not have in as its origin")
	}
	if got := r.TakeOrigin(); got != in {
		t.Fatalf("TakeOrigin = %p, want the input record %p", got, in)
	}
	if r.Origin() != nil || r.TakeOrigin() != nil {
		t.Error("the input record can be taken twice, or is still the origin after it was taken")
	}

	r = read()
	c := r.Clone()
	if r.TakeOrigin() != nil || c.TakeOrigin() != nil {
		t.Error("a record or its clone gave up the input record they share")
	}
	if r.Origin() != in || c.Origin() != in {
		t.Error("a record and its clone lost their origin")
	}
	if c.Clone().TakeOrigin() != nil {
		t.Error("a clone of a clone gave up the shared input record")
	}

	if (&Record{}).TakeOrigin() != nil {
		t.Error("a record made of nothing has an input record to take")
	}
}
