// Package lz4frame compresses Kafka record batches as LZ4 frames with the
// block API, for the producer's hot path.
//
// The client's own lz4 codec streams a batch through a frame writer that
// copies it block by block and hashes every byte with xxHash32 for the
// frame's content checksum, which every reader of the batch then hashes
// again to check. A Kafka batch carries a CRC-32C over its compressed bytes,
// which consumers check before they decompress, so the frames written here
// carry no content checksum (as Kafka's Java producer writes them) and are
// compressed straight into the request buffer.
package lz4frame

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	magic         = 0x184D2204
	uncompressBit = 1 << 31
)

// blockSizes are the frame's block sizes, smallest first: a batch goes in
// blocks of the smallest that holds it (4 MiB, the largest, for bigger
// ones), since a reader allocates a buffer of the frame's block size.
var blockSizes = []struct {
	size   int
	option lz4.BlockSize
	header []byte
}{
	{64 << 10, lz4.Block64Kb, nil},
	{256 << 10, lz4.Block256Kb, nil},
	{1 << 20, lz4.Block1Mb, nil},
	{4 << 20, lz4.Block4Mb, nil},
}

func init() {
	for i := range blockSizes {
		blockSizes[i].header = header(blockSizes[i].option, byte(4+i)<<4)
	}
}

// header returns the frame header written for blocks of size bs: version
// 1, independent blocks, no block or content checksum, no content size, and
// the header checksum over those two bytes, taken from the reference
// writer.
func header(bs lz4.BlockSize, bd byte) []byte {
	var b bytes.Buffer
	w := lz4.NewWriter(&b)
	if err := w.Apply(lz4.ChecksumOption(false), lz4.BlockChecksumOption(false), lz4.BlockSizeOption(bs)); err != nil {
		panic(err)
	}
	if err := w.Close(); err != nil {
		panic(err)
	}
	// magic (4) FLG BD HC, then the end mark.
	h := b.Bytes()[:7]
	if binary.LittleEndian.Uint32(h) != magic || h[4] != 0x60 || h[5] != bd {
		panic(fmt.Sprintf("lz4frame: unexpected reference header % x", h))
	}
	return bytes.Clone(h)
}

// Compressor writes lz4 frames; it is a kgo.Compressor.
type Compressor struct{ pool sync.Pool }

// NewCompressor returns a compressor that writes every batch as one lz4
// frame.
func NewCompressor() *Compressor {
	return &Compressor{pool: sync.Pool{New: func() any { return new(lz4.Compressor) }}}
}

// Compress implements kgo.Compressor.
func (c *Compressor) Compress(dst *bytes.Buffer, src []byte, _ ...kgo.CompressFlag) ([]byte, kgo.CompressionCodecType) {
	dst.Reset()
	bs := blockSizes[len(blockSizes)-1]
	for _, b := range blockSizes {
		if len(src) <= b.size {
			bs = b
			break
		}
	}
	blockMax := bs.size
	bound := len(bs.header) + 4
	for n := len(src); n > 0; n -= blockMax {
		bound += 4 + lz4.CompressBlockBound(min(n, blockMax))
	}
	dst.Grow(bound) // the pooled buffer grows once and holds the frame: out never outgrows it
	out := append(dst.AvailableBuffer(), bs.header...)
	lc := c.pool.Get().(*lz4.Compressor)
	defer c.pool.Put(lc)
	for len(src) > 0 {
		n := min(len(src), blockMax)
		block := src[:n]
		src = src[n:]
		at := len(out)
		out = out[:at+4+lz4.CompressBlockBound(n)]
		m, err := lc.CompressBlock(block, out[at+4:])
		if err != nil || m == 0 || m >= n {
			// Incompressible (or not compressed): store it as is.
			binary.LittleEndian.PutUint32(out[at:], uint32(n)|uncompressBit)
			out = append(out[:at+4], block...)
			continue
		}
		binary.LittleEndian.PutUint32(out[at:], uint32(m))
		out = out[:at+4+m]
	}
	out = binary.LittleEndian.AppendUint32(out, 0) // end mark
	return out, kgo.CodecLz4
}
