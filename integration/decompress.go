package integration

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kgo"
)

// checkerDecompressor is kgo's decompressor with lz4 (the pipeline's
// default codec) decoded block by block into one reused scratch buffer.
//
// The lz4 frame reader that kgo uses takes a block buffer of up to 4 MiB
// from a sync.Pool for every record batch, and under the race detector
// sync.Pool drops a quarter of what it is given while every large
// allocation costs the detector dearly: reading a 200,000-record output back
// took minutes under `go test -race` instead of seconds. The checker reads
// with one goroutine, so one scratch buffer serves every batch.
//
// Checksums in the frame are skipped, not verified: the record batch CRC,
// which ProcessFetchPartition checks, already covers the compressed bytes.
type checkerDecompressor struct {
	dflt    kgo.Decompressor
	scratch []byte
}

func newCheckerDecompressor() *checkerDecompressor {
	return &checkerDecompressor{dflt: kgo.DefaultDecompressor()}
}

func (d *checkerDecompressor) Decompress(src []byte, codec kgo.CompressionCodecType) ([]byte, error) {
	if codec != kgo.CodecLz4 {
		return d.dflt.Decompress(src, codec)
	}
	out, err := d.lz4Frames(src)
	if errors.Is(err, errLZ4Unusual) {
		// Legacy framing or dependent blocks: rare enough to leave to kgo.
		return d.dflt.Decompress(src, codec)
	}
	return out, err
}

const lz4FrameMagic = 0x184D2204

var (
	errLZ4Frame   = errors.New("malformed lz4 frame")
	errLZ4Unusual = errors.New("lz4 frame this decoder leaves to kgo")
)

// lz4Frames decodes one or more concatenated lz4 frames (the LZ4 frame
// format, https://github.com/lz4/lz4/blob/dev/doc/lz4_Frame_format.md).
// The result is freshly allocated: records keep slices of it.
func (d *checkerDecompressor) lz4Frames(src []byte) ([]byte, error) {
	var out []byte
	for len(src) > 0 {
		if len(src) < 7 || binary.LittleEndian.Uint32(src) != lz4FrameMagic {
			return nil, errLZ4Unusual
		}
		flg, bd := src[4], src[5]
		if flg>>6 != 1 {
			return nil, fmt.Errorf("%w: frame version %d", errLZ4Frame, flg>>6)
		}
		if flg&0x20 == 0 { // blocks that refer back to earlier blocks
			return nil, errLZ4Unusual
		}
		blockChecksum := flg&0x10 != 0
		contentSize := flg&0x08 != 0
		contentChecksum := flg&0x04 != 0
		dictID := flg&0x01 != 0
		blockMax := 1 << (8 + 2*int(bd>>4&0x7)) // 4 → 64 KiB … 7 → 4 MiB
		if bd>>4&0x7 < 4 {
			return nil, fmt.Errorf("%w: block size code %d", errLZ4Frame, bd>>4&0x7)
		}
		src = src[6:]
		if contentSize {
			if len(src) < 8 {
				return nil, errLZ4Frame
			}
			if n := binary.LittleEndian.Uint64(src); out == nil && n <= 1<<30 {
				out = make([]byte, 0, n)
			}
			src = src[8:]
		}
		if dictID {
			src = src[min(4, len(src)):]
		}
		src = src[min(1, len(src)):] // header checksum
		if cap(d.scratch) < blockMax {
			d.scratch = make([]byte, blockMax)
		}
		for {
			if len(src) < 4 {
				return nil, fmt.Errorf("%w: truncated block header", errLZ4Frame)
			}
			size := binary.LittleEndian.Uint32(src)
			src = src[4:]
			if size == 0 { // end mark
				break
			}
			raw := size&0x80000000 != 0
			size &^= 0x80000000
			if int(size) > len(src) || int(size) > blockMax {
				return nil, fmt.Errorf("%w: block of %d bytes", errLZ4Frame, size)
			}
			block := src[:size]
			src = src[size:]
			if raw {
				out = append(out, block...)
			} else {
				n, err := lz4.UncompressBlock(block, d.scratch[:blockMax])
				if err != nil {
					return nil, fmt.Errorf("%w: %v", errLZ4Frame, err)
				}
				out = append(out, d.scratch[:n]...)
			}
			if blockChecksum {
				src = src[min(4, len(src)):]
			}
		}
		if contentChecksum {
			src = src[min(4, len(src)):]
		}
	}
	return out, nil
}
