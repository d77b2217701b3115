package lz4frame

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// benchBatch is size bytes of JSON records of about rec bytes, padded with
// x (as the bench tool pads them) or with random letters.
func benchBatch(size, rec int, letters bool) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	var text bytes.Buffer
	pad := make([]byte, rec-40)
	for i := 0; text.Len() < size; i++ {
		for j := range pad {
			pad[j] = 'x'
			if letters {
				pad[j] = 'a' + byte(r.IntN(26))
			}
		}
		fmt.Fprintf(&text, `{"seq":%d,"key":"k%d","pad":"%s"}`, i, r.IntN(10000), pad)
	}
	return text.Bytes()[:size]
}

func BenchmarkDecompress(b *testing.B) {
	for _, rec := range []int{100, 1000} {
		for _, size := range []int{64 << 10, 1 << 20} {
			for _, letters := range []bool{false, true} {
				in := benchBatch(size, rec, letters)
				var buf bytes.Buffer
				frame, _ := NewCompressor().Compress(&buf, in)
				frame = bytes.Clone(frame)
				name := fmt.Sprintf("rec=%d/batch=%dK/letters=%v", rec, size>>10, letters)
				for _, d := range []struct {
					name string
					kgo.Decompressor
				}{{"client", kgo.DefaultDecompressor()}, {"lz4frame", NewDecompressor()}} {
					b.Run(name+"/"+d.name, func(b *testing.B) {
						b.SetBytes(int64(size))
						for b.Loop() {
							if _, err := d.Decompress(frame, kgo.CodecLz4); err != nil {
								b.Fatal(err)
							}
						}
					})
				}
			}
		}
	}
}
