package engine

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
)

// chunkHold keeps a chunk of fetched records from going back to the pool
// while anything uses them: the task processing the chunk, and the records
// produced while it did (outputs and dead letters), whose keys, values and
// headers may be the fetched bytes, until the producer acknowledges them.
// It is those outputs' kgo.Record.Context, so that the sink's promise finds
// it (txsink calls Acked); a context that is never done does not change
// how the client produces them.
type chunkHold struct {
	context.Context
	n    atomic.Int32
	recs []*kgo.Record
	// ctxs are the records' contexts as fetched, which Recycle reads: a
	// record that became an output had its own replaced.
	ctxs []context.Context
}

var holds = sync.Pool{New: func() any { return &chunkHold{Context: context.Background()} }}

// newChunkHold returns a hold on recs, counting one user: the task.
func newChunkHold(recs []*kgo.Record) *chunkHold {
	h := holds.Get().(*chunkHold)
	h.recs = recs
	h.ctxs = h.ctxs[:0]
	for _, kr := range recs {
		h.ctxs = append(h.ctxs, kr.Context)
	}
	h.n.Store(1)
	return h
}

// tag makes kr, about to be produced, one more user of the chunk.
func (h *chunkHold) tag(kr *kgo.Record) {
	h.n.Add(1)
	kr.Context = h
}

// Acked is called by the sink's promise once kr, tagged, is acknowledged
// or failed: the producer is done with it.
func (h *chunkHold) Acked() { h.release() }

// release drops one user; the last hands the chunk's records back.
func (h *chunkHold) release() {
	if h.n.Add(-1) != 0 {
		return
	}
	for i, kr := range h.recs {
		kr.Context = h.ctxs[i]
		kr.Recycle()
	}
	clear(h.ctxs)
	h.recs = nil
	holds.Put(h)
}
