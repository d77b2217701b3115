package engine

import (
	"context"
	"fmt"
	"log/slog"
	goruntime "runtime"
	"slices"
	"sync"
	"time"

	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/state"

	"github.com/twmb/franz-go/pkg/kgo"
)

// opContext is the pipeline.Context of one operator instance in one task
// (or of one worker of a parallel stage, which sets task and the embedded
// context per record).
type opContext struct {
	context.Context // the task's: done when it stops
	eval            pipeline.Evaluator
	log             *slog.Logger

	task  *task
	node  *node
	input int
}

func (c *opContext) Task() pipeline.TaskID               { return c.task.id }
func (c *opContext) Input() int                          { return c.input }
func (c *opContext) Eval() *pipeline.Evaluator           { return &c.eval }
func (c *opContext) Logger() *slog.Logger                { return c.log }
func (c *opContext) Watermark() time.Time                { return c.task.watermark(c.node) }
func (c *opContext) Now() time.Time                      { return c.task.rt.clock().Now() }
func (c *opContext) DropLate(r *pipeline.Record)         { c.task.rt.dropLate(c.node, r) }
func (c *opContext) Emit(r *pipeline.Record)             { c.task.deliver(c.node, "", r) }
func (c *opContext) EmitTo(o string, r *pipeline.Record) { c.task.deliver(c.node, o, r) }

// task processes the records of one partition number, in offset order, on
// its own goroutine. It owns one operator instance per step.
type task struct {
	id pipeline.TaskID
	rt *runtime
	// queue is where the task's work is sent, in is where run takes it
	// from: the same channel, unless a decoder goroutine sits between the
	// two (see decodeAhead).
	queue, in chan work
	done      chan struct{}
	// spare takes back the memory of the chunks the decoder handed run,
	// for the decoder to fill again; nil unless the task decodes ahead in
	// a graph that forgets records (Graph.forgets).
	spare chan *aheadMem
	// made counts the aheadMems the decoder allocated, for tests.
	made int
	// held holds the chunk of fetched records being processed, in a graph
	// that recycles them (runtime.pool): what is produced meanwhile is
	// tagged with it. Only the task's goroutine uses it.
	held *chunkHold

	// ctx is done once the task stops, or when the shutdown grace period
	// is over: operators that call out pass it on (pipeline.Context).
	ctx    context.Context
	cancel context.CancelFunc
	ops    []pipeline.Operator // by node index; nil for sources
	ctxs   []*opContext
	stores []*state.Store // by node index; nil but for stateful steps
	// time is the task's event time and timers; nil when the graph
	// tracks no event time and no step has timers.
	time *taskTime
	// counts are the records each node handled (read, handed, written)
	// since the last checkpoint, by node index; folded into the
	// pipeline's figures when it commits. Entries of nodes behind a
	// parallel stage change under mu.
	counts []int64

	// mu guards the instances of steps downstream of a parallel stage,
	// which the stage's workers call too. Lock order: a task never holds
	// mu while handing a record to a worker (parallel stages cannot
	// follow one another, see Build).
	mu sync.Mutex
}

// work is one item of a task's queue: records, or a barrier to answer.
type work struct {
	recs []*kgo.Record
	// pre, when set, holds recs read and their values decoded ahead, by
	// index; an entry with no source topic was not (see decodeAhead).
	pre     []pipeline.Record
	mem     *aheadMem // pre's memory, to hand back to the decoder; nil if not to
	flush   int       // node to flush at this barrier; -1 for none
	barrier chan struct{}
	tick    time.Time // at a barrier: do the time work (task.tick) first, unless zero
}

// newTask makes the task of partition number id, its operators and its
// stores, opened and checked against their changelogs but not restored, and
// returns what the stores have left to restore. Restore them
// (rt.restoreStores), then start the task.
func newTask(rt *runtime, id pipeline.TaskID) (*task, backlog, error) {
	t := &task{
		id:     id,
		rt:     rt,
		queue:  make(chan work, 4),
		done:   make(chan struct{}),
		ops:    make([]pipeline.Operator, len(rt.g.nodes)),
		counts: make([]int64, len(rt.g.nodes)),
		ctxs:   make([]*opContext, len(rt.g.nodes)),
		stores: make([]*state.Store, len(rt.g.nodes)),
	}
	parent := rt.hard
	if parent == nil { // a graph run offline, in tests
		parent = context.Background()
	}
	t.in = t.queue
	if goruntime.GOMAXPROCS(0) > 1 && slices.ContainsFunc(rt.g.nodes, decodesAhead) {
		t.in = make(chan work, aheadChunks)
		if rt.g.forgets {
			// As many as can be on their way: in t.in, being
			// decoded and being processed.
			t.spare = make(chan *aheadMem, aheadChunks+2)
		}
	}
	t.ctx, t.cancel = context.WithCancel(parent)
	need, err := rt.openStores(t)
	if err != nil {
		t.closeOps()
		return nil, need, err
	}
	for _, n := range rt.g.nodes {
		var op pipeline.Operator
		switch {
		case n.kind == sourceNode:
			continue
		case n.kind == sinkNode:
			so := &sinkOp{def: n.sink, prod: rt}
			so.maxBytes, so.limit = rt.recordLimit(n.sink.topic)
			op = so
		case n.parallel != nil:
			op = parallelOp{st: rt.stages[n.idx]}
		case n.repart != nil:
			ro := &repartitionOp{def: n.repart, prod: func(r *kgo.Record) { rt.internalOut.Add(1); rt.produce(r) }, copies: rt.topicParts[n.repart.topic]}
			ro.maxBytes, ro.limit = rt.recordLimit(n.repart.topic)
			op = ro
		case n.stateful() != nil && t.stores[n.idx] == nil:
			op = absentStateOp{step: n.name, task: id}
		case n.stateful() != nil:
			var err error
			if op, err = n.stateful().NewStatefulOperator(id, t.stores[n.idx]); err != nil {
				t.closeOps()
				return nil, need, &config.FieldError{Path: n.path, Msg: err.Error()}
			}
		default:
			var err error
			if op, err = n.def.NewOperator(id); err != nil {
				t.closeOps()
				return nil, need, &config.FieldError{Path: n.path, Msg: err.Error()}
			}
		}
		t.ops[n.idx] = op
		t.ctxs[n.idx] = &opContext{Context: t.ctx, task: t, node: n, log: rt.log.With("step", n.name, "task", id)}
		if feedsSinkAsIs(n) {
			t.ctxs[n.idx].eval.WriteObjectsAsJSON()
		}
	}
	tt, err := newTaskTime(rt, t)
	if err != nil {
		t.closeOps()
		return nil, need, err
	}
	if tt.on || slices.ContainsFunc(tt.all, func(c *consumer) bool { return c.handler != nil }) {
		t.time = tt
	}
	// The operators registered their states: the restore can check every
	// record with its state's codec.
	return t, need, nil
}

// start starts the task's goroutine, and its decoder's if it has one.
func (t *task) start() {
	if t.in != t.queue {
		go t.decodeAhead()
	}
	go t.run()
}

// aheadChunk is how many records the decoder hands the task at a time, and
// aheadChunks how many chunks it may be ahead: small enough that the task
// starts on a fetch soon after the decoder does, large enough that handing
// over costs little per record. A chunk's records are one allocation:
// 128 of them stay under 32 KB, where the allocator takes them from its
// per-core caches; 256 were a large allocation each time, from the heap
// and cleared afresh.
const aheadChunk, aheadChunks = 128, 16

// decodesAhead reports whether the values of n's records are worth decoding
// on a goroutine of their own: n is a source from outside whose JSON values
// some step reads, and which has no direct sink (that copies records as they
// are, without reading them).
func decodesAhead(n *node) bool {
	return n.kind == sourceNode && !n.internal && n.direct == nil && n.dec.Decodes()
}

// decodeAhead reads the records of the task's queue and decodes their values
// before handing them on to run, in chunks, so that on a partition whose
// task is busy the decoding (the largest part of a step that reads fields)
// runs on another core. Barriers pass through in order. A value that does
// not decode is handed on as it is: the step that reads it gets the error,
// as it would without this.
func (t *task) decodeAhead() {
	defer close(t.in)
	var buf pipeline.DecodeBuffer // when not reusing aheadMems
	for w := range t.queue {
		if w.barrier != nil || t.rt.failed() {
			t.in <- w
			continue
		}
		var src *node
		var srcTopic string
		for len(w.recs) > 0 {
			n := min(len(w.recs), aheadChunk)
			chunk := work{recs: w.recs[:n:n], flush: -1}
			w.recs = w.recs[n:]
			fields := &buf // the chunk's own when it has an aheadMem
			for i, kr := range chunk.recs {
				if src == nil || kr.Topic != srcTopic {
					src, srcTopic = t.rt.g.byTopic[kr.Topic], kr.Topic
				}
				if !decodesAhead(src) {
					continue
				}
				if chunk.pre == nil {
					if chunk.mem = t.aheadMem(); chunk.mem != nil {
						chunk.pre, fields = chunk.mem.recs[:n], &chunk.mem.fields
					} else {
						chunk.pre = make([]pipeline.Record, n)
					}
				}
				r := &chunk.pre[i]
				r.Read(kr, src.dec)
				r.Preload(fields)
			}
			t.in <- chunk
		}
	}
}

// aheadMem is the memory of a chunk the decoder hands run: its records and
// the fields of their values. In a graph that forgets records, run hands it
// back (task.spare) once the chunk is done, and the decoder fills it
// again rather than allocate a chunk's worth of memory for the collector
// to clear: on real Kafka the bench's filter-map then took a fifth less
// CPU, its keyed count a tenth.
type aheadMem struct {
	recs   []pipeline.Record // aheadChunk of them
	fields pipeline.DecodeBuffer
}

// aheadMem returns the memory for the decoder's next chunk, cleared: one
// run handed back, or a new one. It returns nil when the task does not
// reuse them.
func (t *task) aheadMem() *aheadMem {
	if t.spare == nil {
		return nil
	}
	select {
	case m := <-t.spare:
		clear(m.recs)
		m.fields.Reuse()
		return m
	default:
		t.made++
		return &aheadMem{recs: make([]pipeline.Record, aheadChunk)}
	}
}

func (t *task) run() {
	defer close(t.done)
	tt := t.time
	if tt != nil {
		// The stores are restored: they hold the committed input times.
		if err := tt.load(); err != nil {
			t.rt.fail(fmt.Errorf("task %d: reading its event time from its state: %w", t.id, err))
		}
	}
	for w := range t.in {
		if w.barrier != nil {
			if !w.tick.IsZero() && !t.rt.failed() {
				t.tick(w.tick)
			}
			if w.flush >= 0 && !t.rt.failed() {
				t.flush(t.rt.g.nodes[w.flush])
			}
			close(w.barrier)
			continue
		}
		// One allocation for the batch's records rather than one each:
		// per-record allocation was a tenth of a pass-through's profile.
		// A record an operator keeps keeps the slab alive, which a
		// batch's worth of memory bounds.
		var slab []pipeline.Record
		var src *node
		var srcTopic string
		var direct *sinkOp // src's direct sink, if it has one
		var in *inputTime  // src's partition, in graphs tracking event time
		if t.rt.pool != nil {
			t.held = newChunkHold(w.recs)
		}
		for i, kr := range w.recs {
			if t.rt.failed() {
				// A record failed with no dead-letter topic: the
				// checkpoint aborts, so the rest need no work.
				break
			}
			// Records come a partition at a time: look the source up
			// when the topic changes, not for every record.
			if src == nil || kr.Topic != srcTopic {
				src, srcTopic = t.rt.g.byTopic[kr.Topic], kr.Topic
				direct = nil
				if src.direct != nil {
					direct = t.ops[src.direct.idx].(*sinkOp)
				}
				in = nil
				if tt != nil && tt.on {
					if in = tt.ins[kr.Topic]; in != nil && !src.internal {
						in.last, in.isIdle = t.rt.clock().Now(), false
					}
				}
			}
			t.counts[src.idx]++
			if direct != nil && direct.passThrough(kr, t.held) {
				t.counts[src.direct.idx]++
				continue
			}
			var r *pipeline.Record
			if src.internal {
				if isWatermark(kr) {
					t.writerMark(in, kr)
					continue
				}
				r = repartitionRecord(kr, src.decs)
			} else {
				if w.pre != nil && w.pre[i].Source.Topic != "" {
					r = &w.pre[i]
				} else {
					if len(slab) == 0 {
						slab = make([]pipeline.Record, min(len(w.recs)-i, aheadChunk))
					}
					r = &slab[0]
					slab = slab[1:]
					r.Read(kr, src.dec)
				}
				if src.et.from != nil && tt != nil {
					ts, err := tt.eventTimeOf(src.et, r)
					if err != nil {
						t.rt.recordFailedIn(t.held, &pipeline.RecordError{Step: src.name, Path: src.et.path, Position: r.Source, Err: err}, r)
						continue
					}
					r.Timestamp = ts
				}
				if in != nil {
					t.observe(in, r.Timestamp.UnixMilli())
				}
			}
			t.deliver(src, "", r)
		}
		t.rt.processed(len(w.recs))
		if h := t.held; h != nil {
			// Done with the chunk here: the client has its memory back
			// once what was produced of it is acknowledged.
			t.held = nil
			h.release()
		}
		if t.rt.g.forgets {
			// No step kept any of the chunk's records, nor a value
			// built of them.
			for _, c := range t.ctxs {
				if c != nil {
					c.eval.Reuse()
				}
			}
			if w.mem != nil {
				select {
				case t.spare <- w.mem:
				default:
				}
			}
		}
	}
}

// deliver passes r to every reader of n's output. Each reader but the last
// gets a clone, since operators change records in place.
//
// Steps after a parallel stage are reached both by the stage's workers and
// by the task goroutine (through a union, say). Their instances are kept
// single-threaded by t.mu, taken at the boundary: when a worker emits out of
// the stage, or when the task goroutine enters that part of the graph. Inside
// it nobody takes the lock again. A parallel stage never reads from that
// part (Build refuses it), so nobody holds t.mu while handing a record to a
// worker, whose queue may be full.
func (t *task) deliver(n *node, output string, r *pipeline.Record) {
	readers := n.readers
	if output != "" {
		readers = n.outputs[output]
	}
	for i, e := range readers {
		rr := r
		if i < len(readers)-1 {
			rr = r.Clone()
		}
		lock := n.parallel != nil || (!n.afterParallel && e.to.afterParallel)
		if lock {
			t.mu.Lock()
		}
		t.counts[e.to.idx]++
		ctx := t.ctxs[e.to.idx]
		ctx.input = e.input
		if err := t.ops[e.to.idx].Process(ctx, rr); err != nil {
			t.recordFailed(e.to, rr, err)
		}
		if lock {
			t.mu.Unlock()
		}
	}
}

func (t *task) flush(n *node) {
	f, ok := t.ops[n.idx].(pipeline.Flusher)
	if !ok {
		return
	}
	if n.afterParallel {
		t.mu.Lock()
		defer t.mu.Unlock()
	}
	if err := f.Flush(t.ctxs[n.idx]); err != nil {
		t.rt.fail(&pipeline.RecordError{Step: n.name, Path: n.path, Err: err})
	}
}

// recordFailed sends the input r derives from to the dead-letter topic, or
// stops the pipeline when there is none.
func (t *task) recordFailed(n *node, r *pipeline.Record, err error) {
	t.rt.recordFailedIn(t.held, &pipeline.RecordError{Step: n.name, Path: n.path, Position: r.Source, Err: err}, r)
}

// stop ends the task's goroutine once its queue is done.
func (t *task) stop() {
	close(t.queue)
	<-t.done
	t.closeOps()
}

func (t *task) closeOps() {
	t.cancel()
	for _, op := range t.ops {
		if c, ok := op.(pipeline.Closer); ok {
			_ = c.Close()
		}
	}
	for i, st := range t.stores {
		if st != nil {
			_ = st.Close()
			t.stores[i] = nil
		}
	}
}
