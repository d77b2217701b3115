// Package fetchpool is a memory pool for what the Kafka client fetches:
// the Records of a batch and the batch decompressed (kgo.WithPools).
package fetchpool

import (
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Pool takes back the memory the client fetched records into (the
// Records of a batch and the batch decompressed) once nothing uses it any
// more, and hands it out again for the next fetch (kgo.WithPools). Without
// it every record read was about 260 bytes of new memory (the Record, its
// share of the decompressed batch) for the collector to clear: on a
// count per key, ~60% of what it allocated a record.
//
// Its user says when a fetched record is done with (kgo.Record.Recycle),
// once nothing reads its key, value or headers any more. It keeps at most
// a few slices of each size; what it does not keep goes to the collector
// as before.
type Pool struct {
	mu    sync.Mutex
	recs  [][]kgo.Record
	bytes [poolClasses][][]byte

	putRecs, putBytes atomic.Int64
}

const (
	// poolKeep is how many slices of each kind and size the pool keeps.
	poolKeep = 64
	// The decompressed batches it keeps are 4 KiB to 4 MiB, by powers of
	// two; a larger one is left to the collector.
	poolMinShift = 12
	poolClasses  = 11
)

// GetRecords implements kgo.PoolRecords.
func (p *Pool) GetRecords(n int) []kgo.Record {
	p.mu.Lock()
	for i := len(p.recs) - 1; i >= 0; i-- {
		if s := p.recs[i]; cap(s) >= n {
			p.recs[i] = p.recs[len(p.recs)-1]
			p.recs[len(p.recs)-1] = nil
			p.recs = p.recs[:len(p.recs)-1]
			p.mu.Unlock()
			return s[:0]
		}
	}
	p.mu.Unlock()
	// Batches of one topic hold about as many records each: a little
	// room lets a slice serve the next batch too.
	return make([]kgo.Record, 0, n+n/4)
}

// PutRecords implements kgo.PoolRecords. The client zeroed the records.
func (p *Pool) PutRecords(s []kgo.Record) {
	p.putRecs.Add(1)
	p.mu.Lock()
	if len(p.recs) < poolKeep {
		p.recs = append(p.recs, s)
	}
	p.mu.Unlock()
}

// class returns the size class of a slice of n bytes: the smallest that
// holds n, or -1 when n is too large to keep.
func class(n int) int {
	if n <= 1<<poolMinShift {
		return 0
	}
	c := bits.Len(uint(n-1)) - poolMinShift
	if c >= poolClasses {
		return -1
	}
	return c
}

// Returned reports how many record slices and decompressed batches were
// handed back.
func (p *Pool) Returned() (records, batches int64) { return p.putRecs.Load(), p.putBytes.Load() }

// Bytes returns a slice of n bytes to decompress a batch into: the
// lz4frame decompressor's buffers (Decompressor.WithAlloc).
func (p *Pool) Bytes(n int) []byte {
	c := class(n)
	if c < 0 {
		return make([]byte, n)
	}
	p.mu.Lock()
	if l := p.bytes[c]; len(l) > 0 {
		b := l[len(l)-1]
		l[len(l)-1] = nil
		p.bytes[c] = l[:len(l)-1]
		p.mu.Unlock()
		return b[:n]
	}
	p.mu.Unlock()
	return make([]byte, n, 1<<(c+poolMinShift))
}

// GetDecompressBytes implements kgo.PoolDecompressBytes. The client calls
// it only for codecs it decompresses itself (not lz4, which lz4frame does
// with Bytes): there, only the capacity counts, which grows as needed.
func (p *Pool) GetDecompressBytes(compressed []byte, _ kgo.CompressionCodecType) []byte {
	return p.Bytes(4 * len(compressed))[:0]
}

// PutDecompressBytes implements kgo.PoolDecompressBytes. The client
// zeroed the bytes. A slice goes to the largest class it holds (a codec
// may have grown one of ours).
func (p *Pool) PutDecompressBytes(b []byte) {
	p.putBytes.Add(1)
	if cap(b) < 1<<poolMinShift {
		return
	}
	c := bits.Len(uint(cap(b))) - 1 - poolMinShift
	if c >= poolClasses {
		return
	}
	p.mu.Lock()
	if len(p.bytes[c]) < poolKeep {
		p.bytes[c] = append(p.bytes[c], b[:0])
	}
	p.mu.Unlock()
}
