package codec

import "unsafe"

// Chunk hands out encodings that share allocations: many small values are
// appended to one buffer of chunkSize bytes, and each keeps its buffer
// alive until nothing holds it. Write into Tail, then Keep the result.
type Chunk struct{ buf []byte }

const (
	chunkSize = 16 << 10 // bytes per allocation
	chunkMin  = 512      // room left below which a new buffer is started
)

// Tail returns the empty slice to append the next value to.
func (c *Chunk) Tail() []byte {
	if cap(c.buf)-len(c.buf) < chunkMin {
		c.buf = make([]byte, 0, chunkSize)
	}
	return c.buf[len(c.buf):]
}

// Keep takes out, appended to Tail, as handed out and returns it with its
// capacity cut to its length. A value that outgrew the buffer (append gave
// it an array of its own) is returned as it is.
func (c *Chunk) Keep(out []byte) []byte {
	if len(out) == 0 || unsafe.SliceData(out) != unsafe.SliceData(c.buf[len(c.buf):]) {
		return out
	}
	c.buf = c.buf[:len(c.buf)+len(out)]
	return out[:len(out):len(out)]
}
