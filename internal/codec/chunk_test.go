package codec

import (
	"bytes"
	"testing"
)

// TestChunkKeepsValuesApart: values cut from one buffer stay intact as
// more are appended, none can grow into the next, and one larger than the
// room left comes back on an array of its own.
func TestChunkKeepsValuesApart(t *testing.T) {
	var c Chunk
	a := c.Keep(append(c.Tail(), "first"...))
	b := c.Keep(append(c.Tail(), "second"...))
	if cap(a) != len(a) {
		t.Errorf("a kept value has room to grow into the next: len %d cap %d", len(a), cap(a))
	}
	_ = append(a, "XX"...) // must not overwrite b
	big := c.Keep(append(c.Tail(), bytes.Repeat([]byte("x"), chunkSize)...))
	after := c.Keep(append(c.Tail(), "third"...))
	if string(a) != "first" || string(b) != "second" || len(big) != chunkSize || string(after) != "third" {
		t.Fatalf("values %q %q (%d bytes) %q", a, b, len(big), after)
	}
	if &a[0] == &big[0] || &b[0] == &big[0] {
		t.Error("a value larger than the room left shares the buffer")
	}
	if e := c.Keep(c.Tail()); len(e) != 0 {
		t.Errorf("an empty value came back as %q", e)
	}
}
