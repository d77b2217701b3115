package engine

import (
	"fmt"
	"hash/fnv"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/pipeline-run/pipeline/pipeline"
)

// parallelDef is a step run on N workers:
//
//	parallel: {workers: 4, map: "slow_enrich(value)"}
//
// Records are routed to a worker by a hash of their key (records without a
// key by their source partition), so records of one key are processed in
// order by one worker. Workers are shared by every task of the instance.
//
// A checkpoint drains the stage before anything commits: records handed to
// a worker are part of the transaction that read them, never of a later one.
type parallelDef struct {
	name    string
	workers int
	queue   int
	inner   pipeline.Definition
	node    *node
}

const (
	defaultWorkers = 4
	defaultQueue   = 256
)

func buildParallel(s *pipeline.Spec, reg *pipeline.Registry) *parallelDef {
	m, ok := s.Value.(map[string]any)
	if !ok {
		s.Errorf("", "expected a map with workers and one step, got %s", pipeline.Describe(s.Value))
		return nil
	}
	d := &parallelDef{name: s.Name, workers: defaultWorkers, queue: defaultQueue}
	var kinds []string
	for k, v := range m {
		switch k {
		case "workers":
			n, ok := pipeline.AsInt(v)
			if !ok || n < 1 || n > 1024 {
				s.Errorf(".workers", "must be a whole number from 1 to 1024")
				continue
			}
			d.workers = n
		case "queue":
			n, ok := pipeline.AsInt(v)
			if !ok || n < 1 {
				s.Errorf(".queue", "must be a whole number, at least 1")
				continue
			}
			d.queue = n
		default:
			kinds = append(kinds, k)
		}
	}
	sort.Strings(kinds)
	if len(kinds) != 1 {
		s.Errorf("", "expected exactly one step besides workers and queue, found %d (%v)", len(kinds), kinds)
		return nil
	}
	kind := kinds[0]
	if kind == "parallel" {
		s.Errorf("."+kind, "a parallel stage cannot hold another")
		return nil
	}
	f, ok := reg.Lookup(kind)
	if !ok {
		s.Errorf("."+kind, "unknown operator %q (known: %v)", kind, knownKinds(reg))
		return nil
	}
	inner := s.Inner(kind, m[kind])
	def, err := f(inner)
	if err != nil {
		inner.Errorf("", "%v", err)
		return nil
	}
	if def == nil {
		return nil
	}
	d.inner = def
	return d
}

// stage is a parallel step's running workers.
type stage struct {
	def      *parallelDef
	inflight atomic.Int64 // what busy counts, readable
	in       []chan stageItem
	wg       sync.WaitGroup
	rt       *runtime
	busy     sync.WaitGroup // records handed over and not yet fully processed
}

type stageItem struct {
	t *task
	r *pipeline.Record
}

func startStage(rt *runtime, def *parallelDef) (*stage, error) {
	st := &stage{def: def, rt: rt, in: make([]chan stageItem, def.workers)}
	ops := make([]pipeline.Operator, def.workers)
	for i := range ops {
		op, err := def.inner.NewOperator(-1)
		if err != nil {
			return nil, fmt.Errorf("step %s: %w", def.name, err)
		}
		ops[i] = op
	}
	for i := range st.in {
		st.in[i] = make(chan stageItem, def.queue)
		st.wg.Add(1)
		go st.work(st.in[i], ops[i], i)
	}
	return st, nil
}

func (st *stage) work(in <-chan stageItem, op pipeline.Operator, worker int) {
	defer st.wg.Done()
	ctx := &opContext{node: st.def.node, log: st.rt.log.With("step", st.def.name, "worker", worker)}
	for it := range in {
		if !it.t.rt.failed() {
			ctx.task, ctx.Context = it.t, it.t.ctx
			if err := op.Process(ctx, it.r); err != nil {
				it.t.recordFailed(st.def.node, it.r, err)
			}
		}
		st.inflight.Add(-1)
		st.busy.Done()
	}
}

// submit hands r to its worker. It blocks while that worker's queue is
// full, which slows the task down: back-pressure, not buffering.
func (st *stage) submit(t *task, r *pipeline.Record) {
	st.busy.Add(1)
	st.inflight.Add(1)
	st.in[st.route(r)] <- stageItem{t: t, r: r}
}

func (st *stage) route(r *pipeline.Record) int {
	n := len(st.in)
	if n == 1 {
		return 0
	}
	h := fnv.New32a()
	if b, err := r.Key.Encode(pipeline.JSON); err == nil && b != nil {
		h.Write(b)
	} else {
		return int(uint32(r.Source.Partition) % uint32(n))
	}
	return int(h.Sum32() % uint32(n))
}

// drain waits until every record handed to the stage has been processed
// and emitted downstream.
func (st *stage) drain() {
	if st.inflight.Load() > 0 {
		st.rt.p.heldAtBarrier.Add(1)
	}
	if skip := st.rt.p.skipDrain; skip != nil {
		skip(st.inflight.Load)
		return
	}
	st.busy.Wait()
}

func (st *stage) stop() {
	for _, c := range st.in {
		close(c)
	}
	st.wg.Wait()
}

// parallelOp is a task's handle on a stage.
type parallelOp struct{ st *stage }

func (p parallelOp) Process(ctx pipeline.Context, r *pipeline.Record) error {
	p.st.submit(ctx.(*opContext).task, r)
	return nil
}
