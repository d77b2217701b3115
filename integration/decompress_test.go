package integration

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestCheckerDecompressorAgreesWithKgo(t *testing.T) {
	var payload []byte
	for i := range 50_000 {
		payload = fmt.Appendf(payload, `{"k":"k%d","seq":%d,"doubled":%d}`, i%1000, i, 2*i)
	}
	noise := make([]byte, 100_000)
	_, _ = rand.NewChaCha8([32]byte{1}).Read(noise)
	for _, tc := range []struct {
		name string
		data []byte
		opts []lz4.Option
	}{
		{"an empty frame", nil, nil},
		{"one small block", payload[:100], nil},
		{"many 64 KiB blocks", payload, []lz4.Option{lz4.BlockSizeOption(lz4.Block64Kb)}},
		{"4 MiB blocks with every checksum and the content size", payload, []lz4.Option{
			lz4.BlockSizeOption(lz4.Block4Mb), lz4.BlockChecksumOption(true), lz4.ChecksumOption(true), lz4.SizeOption(uint64(len(payload))),
		}},
		{"incompressible data stored raw", noise, nil},
		{"legacy framing, left to kgo", payload[:5000], []lz4.Option{lz4.LegacyOption(true)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			w := lz4.NewWriter(&buf)
			if err := w.Apply(tc.opts...); err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write(tc.data); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			compressed := buf.Bytes()
			// Two frames back to back, as a batch may carry, and the same
			// decoder twice, as the checker reuses it.
			twice := append(bytes.Clone(compressed), compressed...)
			want, err := kgo.DefaultDecompressor().Decompress(twice, kgo.CodecLz4)
			if err != nil {
				t.Fatalf("kgo: %v", err)
			}
			d := newCheckerDecompressor()
			for range 2 {
				got, err := d.Decompress(twice, kgo.CodecLz4)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("decoded %d bytes, kgo decoded %d; they differ", len(got), len(want))
				}
			}
		})
	}
}
