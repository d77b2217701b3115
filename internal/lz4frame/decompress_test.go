package lz4frame

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kgo"
)

// writerFrame compresses in with the reference writer and its options:
// frames as other producers (Kafka's Java client among them) write them.
func writerFrame(t testing.TB, in []byte, opts ...lz4.Option) []byte {
	t.Helper()
	var b bytes.Buffer
	w := lz4.NewWriter(&b)
	if err := w.Apply(opts...); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(in); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// writerOptions are the frame options other producers use.
var writerOptions = map[string][]lz4.Option{
	"defaults (4 MiB blocks, content checksum)": nil,
	"64 KiB blocks, no checksums (Kafka's Java client)": {
		lz4.BlockSizeOption(lz4.Block64Kb), lz4.ChecksumOption(false)},
	"256 KiB blocks, block checksums": {
		lz4.BlockSizeOption(lz4.Block256Kb), lz4.BlockChecksumOption(true)},
	"1 MiB blocks, level 9": {
		lz4.BlockSizeOption(lz4.Block1Mb), lz4.CompressionLevelOption(lz4.Level9)},
}

// TestDecompressReadsWhatWritersWrite: frames from this package's
// compressor, the reference writer with each option set, and several frames
// one after another all decode to what was written, as the client's own
// decoder decodes them.
func TestDecompressReadsWhatWritersWrite(t *testing.T) {
	d, ref := NewDecompressor(), kgo.DefaultDecompressor()
	check := func(name string, frame, want []byte) {
		t.Helper()
		got, err := d.Decompress(frame, kgo.CodecLz4)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: decodes %d bytes, %v; want the %d written", name, len(got), err, len(want))
		}
		if len(want) > 0 && cap(got) != len(got) {
			t.Fatalf("%s: %d bytes in a buffer of %d: want one of the exact size", name, len(got), cap(got))
		}
		if r, err := ref.Decompress(frame, kgo.CodecLz4); err != nil || !bytes.Equal(r, want) {
			t.Fatalf("%s: the client's decoder gets %d bytes, %v", name, len(r), err)
		}
	}
	in := inputs()
	for name, data := range in {
		var buf bytes.Buffer
		frame, _ := NewCompressor().Compress(&buf, data)
		check("compressor: "+name, frame, data)
		for oname, opts := range writerOptions {
			check(oname+": "+name, writerFrame(t, data, opts...), data)
		}
		sized := writerFrame(t, data, lz4.SizeOption(uint64(len(data))))
		if len(data) > 0 && sized[4]&0x08 == 0 {
			t.Fatal("the writer wrote no content size")
		}
		check("content size: "+name, sized, data)
	}
	var frames, want []byte
	for _, name := range []string{"short text", "records", "empty", "random"} {
		var buf bytes.Buffer
		frame, _ := NewCompressor().Compress(&buf, in[name])
		frames = append(frames, frame...)
		frames = append(frames, writerFrame(t, in[name], lz4.ChecksumOption(false))...)
		want = append(want, in[name]...)
		want = append(want, in[name]...)
	}
	check("concatenated frames", frames, want)
}

// TestDecompressLeavesOtherCodecsAndFramesToTheClient: other codecs and
// frames this decoder does not read (dependent blocks, no lz4 magic) get
// the client's decoder's answer, result or error.
func TestDecompressLeavesOtherCodecsAndFramesToTheClient(t *testing.T) {
	d, ref := NewDecompressor(), kgo.DefaultDecompressor()
	data := inputs()["records"]
	for _, codec := range []kgo.CompressionCodec{kgo.GzipCompression(), kgo.SnappyCompression(), kgo.ZstdCompression()} {
		c, err := kgo.DefaultCompressor(codec)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		frame, typ := c.Compress(&buf, data)
		got, err := d.Decompress(frame, typ)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("codec %v: %d bytes, %v", typ, len(got), err)
		}
	}
	if got, err := d.Decompress(data, kgo.CodecNone); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("no codec: %d bytes, %v", len(got), err)
	}
	legacy := writerFrame(t, data[:5000], lz4.LegacyOption(true))
	if got, err := d.Decompress(legacy, kgo.CodecLz4); err != nil || !bytes.Equal(got, data[:5000]) {
		t.Fatalf("legacy framing: %d bytes, %v", len(got), err)
	}
	dependent := writerFrame(t, data, lz4.ChecksumOption(false))
	dependent[4] &^= 0x20
	notLZ4 := append([]byte{1, 2, 3, 4}, dependent[4:]...)
	for name, frame := range map[string][]byte{"dependent blocks": dependent, "no magic": notLZ4} {
		if _, err := d.frames(frame); err != errUnusual {
			t.Fatalf("%s: the block decoder says %v, want it left to the client", name, err)
		}
		got, err := d.Decompress(frame, kgo.CodecLz4)
		want, werr := ref.Decompress(frame, kgo.CodecLz4)
		if !bytes.Equal(got, want) || (err == nil) != (werr == nil) {
			t.Fatalf("%s: %d bytes, %v; the client's decoder: %d bytes, %v", name, len(got), err, len(want), werr)
		}
	}
}

// TestDecompressRejectsBrokenFrames: every truncation of a frame, and
// blocks whose sequences run past their end, fail with an error rather than
// a panic or a short result.
func TestDecompressRejectsBrokenFrames(t *testing.T) {
	d := NewDecompressor()
	data := inputs()["records"][:200<<10]
	for name, frame := range map[string][]byte{
		"compressor":      func() []byte { var b bytes.Buffer; f, _ := NewCompressor().Compress(&b, data); return f }(),
		"block checksums": writerFrame(t, data, lz4.BlockSizeOption(lz4.Block64Kb), lz4.BlockChecksumOption(true)),
		"content size":    writerFrame(t, data, lz4.SizeOption(uint64(len(data)))),
		"wrong content size": func() []byte {
			f := writerFrame(t, data, lz4.SizeOption(uint64(len(data))))
			binary.LittleEndian.PutUint64(f[6:], uint64(len(data)+1)) // the reader skips the header checksum
			return f
		}(),
	} {
		for n := range len(frame) + 1 {
			if n == len(frame) && name != "wrong content size" {
				break
			}
			if n > 64 && n < len(frame)-64 && n%97 != 0 {
				continue
			}
			if got, err := d.Decompress(frame[:n], kgo.CodecLz4); err == nil && n > 0 {
				t.Fatalf("%s cut to %d of %d bytes: %d bytes decoded, no error", name, n, len(frame), len(got))
			}
		}
	}
	// A compressed block whose last sequence claims more literals than
	// the block holds, and one that ends on a match.
	for name, blk := range map[string][]byte{
		"literals past the end": {0xf0, 40, 'a', 'b'},
		"ends on a match":       {0x14, 'a', 1, 0},
		"offset cut":            {0x14, 'a', 1},
		"match length cut":      {0x1f, 'a', 1, 0, 255},
		"offset before start":   {0x14, 'a', 9, 0, 0x10, 'b'},
	} {
		frame := append(bytes.Clone(blockSizes[0].header), binary.LittleEndian.AppendUint32(nil, uint32(len(blk)))...)
		frame = append(frame, blk...)
		frame = binary.LittleEndian.AppendUint32(frame, 0)
		if got, err := d.Decompress(frame, kgo.CodecLz4); !errors.Is(err, errFrame) {
			t.Fatalf("%s: %q, %v; want a malformed-frame error", name, got, err)
		}
	}
}

// TestDecompressBoundsTheBatch: a batch that would decode past the bound
// fails with the client's error before anything is allocated for it.
func TestDecompressBoundsTheBatch(t *testing.T) {
	d := NewDecompressor()
	d.max = 1 << 20
	var buf bytes.Buffer
	frame, _ := NewCompressor().Compress(&buf, make([]byte, 1<<20))
	if got, err := d.Decompress(frame, kgo.CodecLz4); err != nil || len(got) != 1<<20 {
		t.Fatalf("at the bound: %d bytes, %v", len(got), err)
	}
	frame, _ = NewCompressor().Compress(&buf, make([]byte, 1<<20+1))
	if _, err := d.Decompress(frame, kgo.CodecLz4); !errors.Is(err, kgo.ErrMaxDecompress) {
		t.Fatalf("past the bound: %v, want %v", err, kgo.ErrMaxDecompress)
	}
}

// FuzzDecompress: on any input the decoder returns without panicking, and
// where the client's decoder also succeeds, both give the same bytes; on a
// frame written from the input, it gives the input back.
func FuzzDecompress(f *testing.F) {
	for _, data := range inputs() {
		if len(data) < 4<<10 {
			f.Add(data, uint8(0))
			var buf bytes.Buffer
			frame, _ := NewCompressor().Compress(&buf, data)
			f.Add(bytes.Clone(frame), uint8(1))
		}
	}
	f.Add([]byte(`{"a":1}{"a":1}{"a":1}{"a":1}{"a":1}{"a":1}`), uint8(3))
	d, ref := NewDecompressor(), kgo.DefaultDecompressor()
	f.Fuzz(func(t *testing.T, data []byte, mode uint8) {
		got, err := d.Decompress(data, kgo.CodecLz4)
		if want, werr := ref.Decompress(data, kgo.CodecLz4); err == nil && werr == nil && !bytes.Equal(got, want) {
			t.Fatalf("raw input: %d bytes; the client's decoder: %d", len(got), len(want))
		}
		var frame []byte
		switch mode % 4 {
		case 0:
			var buf bytes.Buffer
			frame, _ = NewCompressor().Compress(&buf, data)
		case 1:
			frame = writerFrame(t, data, lz4.BlockSizeOption(lz4.Block64Kb), lz4.ChecksumOption(false))
		case 2:
			frame = writerFrame(t, data, lz4.BlockChecksumOption(true), lz4.SizeOption(uint64(len(data))))
		default:
			frame = writerFrame(t, data, lz4.CompressionLevelOption(lz4.Level9))
		}
		got, err = d.Decompress(frame, kgo.CodecLz4)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("mode %d: %d bytes, %v; want the %d written", mode%4, len(got), err, len(data))
		}
		if mode >= 128 && len(frame) > 12 { // flip a byte in a block
			frame[len(frame)/2] ^= mode
			d.Decompress(frame, kgo.CodecLz4)
		}
	})
}

func TestDecodedSizeMatchesTheDecoder(t *testing.T) {
	for name, data := range inputs() {
		if len(data) == 0 {
			continue
		}
		c := new(lz4.Compressor)
		for _, n := range []int{1, 100, 4 << 10, 64 << 10} {
			n = min(n, len(data))
			dst := make([]byte, lz4.CompressBlockBound(n))
			m, err := c.CompressBlock(data[:n], dst)
			if err != nil || m == 0 {
				continue // stored, not compressed
			}
			if got, ok := decodedSize(dst[:m]); !ok || got != n {
				t.Fatalf("%s, %d bytes: sized %d, %v", name, n, got, ok)
			}
		}
	}
}
