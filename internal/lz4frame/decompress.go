package lz4frame

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kgo"
)

// MaxBatchBytes bounds what one batch may decompress to, as the client's
// own decompressor does by default (kgo.MaxDecompressBatchBytes).
const MaxBatchBytes = 1 << 30

// Decompressor reads lz4 frames with the block API; it is a
// kgo.Decompressor, safe for concurrent use.
//
// The client's lz4 codec streams a frame through a frame reader, which
// decodes each block into a pooled block buffer, copies it into a pooled
// output buffer, and then clones that buffer, since records keep slices of
// what Decompress returns. Here each block of a frame is sized first, by
// walking its sequences without copying, and then decoded once, straight
// into the one buffer returned.
//
// Checksums in the frame are skipped: the record batch's CRC-32C, which the
// client checks before it decompresses, covers every compressed byte. Frames
// this decoder does not read (blocks that refer to earlier blocks, legacy or
// skippable frames) and the other codecs go to the client's decompressor.
type Decompressor struct {
	other kgo.Decompressor
	max   int
	alloc func(n int) []byte // nil: make
}

// NewDecompressor returns a decompressor that bounds a batch at
// MaxBatchBytes.
func NewDecompressor() *Decompressor {
	return &Decompressor{other: kgo.DefaultDecompressor(), max: MaxBatchBytes}
}

// WithAlloc returns a copy of d that decompresses lz4 into slices of n
// bytes from alloc: a pool's, which the client fills in kgo.WithPools.
func (d *Decompressor) WithAlloc(alloc func(n int) []byte) *Decompressor {
	c := *d
	c.alloc = alloc
	return &c
}

var (
	errFrame = errors.New("lz4frame: malformed lz4 frame")
	// errUnusual marks a frame left to the client's decoder.
	errUnusual = errors.New("lz4frame: frame left to the client's decoder")
)

// Decompress implements kgo.Decompressor.
func (d *Decompressor) Decompress(src []byte, codec kgo.CompressionCodecType) ([]byte, error) {
	if codec != kgo.CodecLz4 {
		return d.other.Decompress(src, codec)
	}
	out, err := d.frames(src)
	if err == errUnusual {
		return d.other.Decompress(src, codec)
	}
	return out, err
}

// block is one data block of a frame.
type block struct {
	data []byte
	raw  bool // stored, not compressed
	size int  // decoded size
}

// frames decodes one or more concatenated frames (the LZ4 frame format,
// https://github.com/lz4/lz4/blob/dev/doc/lz4_Frame_format.md).
func (d *Decompressor) frames(src []byte) ([]byte, error) {
	var stack [8]block
	blocks := stack[:0]
	total := 0
	for len(src) > 0 {
		if len(src) < 7 || binary.LittleEndian.Uint32(src) != magic {
			return nil, errUnusual
		}
		flg, bd := src[4], src[5]
		if flg>>6 != 1 {
			return nil, fmt.Errorf("%w: version %d", errFrame, flg>>6)
		}
		if flg&0x20 == 0 { // blocks that refer to earlier blocks
			return nil, errUnusual
		}
		code := bd >> 4 & 7
		if code < 4 {
			return nil, fmt.Errorf("%w: block size code %d", errFrame, code)
		}
		blockMax := 1 << (8 + 2*int(code)) // 4 → 64 KiB … 7 → 4 MiB
		blockChecksum := flg&0x10 != 0
		contentChecksum := flg&0x04 != 0
		n := 7 // magic, FLG, BD, header checksum
		contentSize := -1
		if flg&0x08 != 0 {
			if len(src) >= 14 {
				contentSize = int(min(binary.LittleEndian.Uint64(src[6:]), 1<<62))
			}
			n += 8
		}
		if flg&0x01 != 0 {
			n += 4 // dictionary ID
		}
		if len(src) < n {
			return nil, fmt.Errorf("%w: truncated header", errFrame)
		}
		src = src[n:]
		frameStart := total
		for {
			if len(src) < 4 {
				return nil, fmt.Errorf("%w: truncated block", errFrame)
			}
			h := binary.LittleEndian.Uint32(src)
			src = src[4:]
			if h == 0 { // end mark
				break
			}
			b := block{raw: h&uncompressBit != 0}
			size := int(h &^ uncompressBit)
			if size > blockMax || size > len(src) {
				return nil, fmt.Errorf("%w: block of %d bytes", errFrame, size)
			}
			b.data, src = src[:size], src[size:]
			if b.raw {
				b.size = size
			} else {
				var ok bool
				if b.size, ok = decodedSize(b.data); !ok || b.size > blockMax {
					return nil, fmt.Errorf("%w: bad compressed block", errFrame)
				}
			}
			if total += b.size; total > d.max {
				return nil, kgo.ErrMaxDecompress
			}
			if blockChecksum {
				if len(src) < 4 {
					return nil, fmt.Errorf("%w: truncated block checksum", errFrame)
				}
				src = src[4:]
			}
			blocks = append(blocks, b)
		}
		if contentSize >= 0 && total-frameStart != contentSize {
			return nil, fmt.Errorf("%w: %d bytes, not the %d in its header", errFrame, total-frameStart, contentSize)
		}
		if contentChecksum {
			if len(src) < 4 {
				return nil, fmt.Errorf("%w: truncated content checksum", errFrame)
			}
			src = src[4:]
		}
	}
	var out []byte
	if d.alloc != nil {
		out = d.alloc(total)
	} else {
		out = make([]byte, total)
	}
	at := 0
	for _, b := range blocks {
		if b.raw {
			at += copy(out[at:], b.data)
			continue
		}
		n, err := lz4.UncompressBlock(b.data, out[at:at+b.size])
		if err != nil || n != b.size {
			return nil, fmt.Errorf("%w: block decodes to %d bytes, not %d (%v)", errFrame, n, b.size, err)
		}
		at += n
	}
	return out, nil
}

// decodedSize walks the sequences of a compressed block and returns the
// size it decodes to, without decoding it: each sequence is a token, its
// literals and, but for the last, a 2-byte offset and the match length.
func decodedSize(b []byte) (int, bool) {
	n, i := 0, 0
	var ok bool
	for i < len(b) {
		t := b[i]
		i++
		lit := int(t >> 4)
		if lit == 15 {
			if lit, i, ok = moreLength(b, i, lit); !ok {
				return 0, false
			}
		}
		i += lit
		n += lit
		if i >= len(b) {
			return n, i == len(b) // the last sequence ends the block
		}
		i += 2 // offset
		ml := int(t&15) + 4
		if t&15 == 15 {
			if ml, i, ok = moreLength(b, i, ml); !ok {
				return 0, false
			}
		}
		n += ml
		if n > 1<<23 {
			return 0, false
		}
	}
	return 0, false // a block ends with literals
}

// moreLength adds to n the length bytes of a sequence from b[i]: each 255
// says another follows. It returns the length, where the bytes end, and
// false if b ends first.
func moreLength(b []byte, i, n int) (int, int, bool) {
	for i < len(b) {
		c := b[i]
		i++
		n += int(c)
		if c != 255 {
			return n, i, true
		}
	}
	return n, i, false
}
