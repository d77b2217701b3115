package lz4frame

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kgo"
)

// inputs are batches of the shapes a topic holds: empty, tiny, text that
// compresses, random bytes that do not, and more than one 4 MiB block.
func inputs() map[string][]byte {
	r := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 300<<10)
	for i := range random {
		random[i] = byte(r.Uint32())
	}
	var text bytes.Buffer
	for i := 0; text.Len() < 9<<20; i++ {
		fmt.Fprintf(&text, `{"seq":%d,"key":"k%d","pad":"%x"}`, i, i%1000, random[i%1000:i%1000+40])
	}
	return map[string][]byte{
		"empty":        {},
		"one byte":     {7},
		"short text":   []byte(`{"seq":1,"key":"k1"}`),
		"records":      text.Bytes()[:1<<20],
		"random":       random,
		"zeros":        make([]byte, 1<<20),
		"three blocks": text.Bytes(),
	}
}

// reference decodes a frame with the reference reader.
func reference(t *testing.T, frame []byte) []byte {
	t.Helper()
	out, err := io.ReadAll(lz4.NewReader(bytes.NewReader(frame)))
	if err != nil {
		t.Fatalf("the reference reader rejects the frame: %v", err)
	}
	return out
}

// TestFramesReadByTheReferenceReader: what Compress writes is a valid lz4
// frame (header checksum included) without a content checksum, that decodes
// to the batch with the reference reader and with the client's.
func TestFramesReadByTheReferenceReader(t *testing.T) {
	c, d := NewCompressor(), kgo.DefaultDecompressor()
	for name, in := range inputs() {
		var buf bytes.Buffer
		frame, codec := c.Compress(&buf, in)
		if codec != kgo.CodecLz4 {
			t.Fatalf("%s: codec %v", name, codec)
		}
		if got := reference(t, frame); !bytes.Equal(got, in) {
			t.Fatalf("%s: the reference reader decodes %d bytes, want the %d written", name, len(got), len(in))
		}
		if flg := frame[4]; flg&0x04 != 0 || flg&0x20 == 0 {
			t.Fatalf("%s: frame flags %08b: want independent blocks and no content checksum", name, flg)
		}
		// Blocks of the smallest size that holds the batch: a reader
		// allocates one of that size for every batch it decodes.
		want := byte(0x40)
		for size := 64 << 10; len(in) > size && want < 0x70; size *= 4 {
			want += 0x10
		}
		if bd := frame[5]; bd != want {
			t.Fatalf("%s: %d bytes in blocks of code %#x, want %#x", name, len(in), bd, want)
		}
		got, err := d.Decompress(frame, kgo.CodecLz4)
		if err != nil || !bytes.Equal(got, in) {
			t.Fatalf("%s: the client decodes %d bytes, %v; want the %d written", name, len(got), err, len(in))
		}
		if name == "records" && len(frame) > len(in)/2 {
			t.Fatalf("records compress to %d of %d bytes: not compressed", len(frame), len(in))
		}
	}
}

func BenchmarkCompress(b *testing.B) {
	in := inputs()["records"]
	b.Run("lz4frame", func(b *testing.B) {
		c := NewCompressor()
		var buf bytes.Buffer
		b.SetBytes(int64(len(in)))
		for b.Loop() {
			c.Compress(&buf, in)
		}
	})
	b.Run("client", func(b *testing.B) {
		c, _ := kgo.DefaultCompressor(kgo.Lz4Compression())
		var buf bytes.Buffer
		b.SetBytes(int64(len(in)))
		for b.Loop() {
			c.Compress(&buf, in)
		}
	})
}
