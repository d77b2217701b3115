package engine

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/state"
	"github.com/pipeline-run/pipeline/wire"
)

// Event time, as Flink has it:
//
//   - A record's event time is its timestamp: the Kafka record timestamp,
//     or what the source's event_time.from expression says (the record's
//     timestamp is then set to it, so that it travels with the record
//     through repartition topics and to the sinks).
//   - Each input partition of a task has a watermark: the latest event
//     time seen in it minus the source's max_out_of_orderness. A
//     repartition topic's partition has the minimum of the watermarks its
//     upstream writers (the tasks of the key_by step) wrote into it.
//   - A step's watermark in a task is the minimum over the partitions of
//     the topics it reads from, leaving out idle ones; it never goes back.
//     Event-time timers fire once it reaches their time.
//
// Watermarks are state: the latest event time of every source partition and
// the writers' watermarks of every repartition partition are written to
// each of the task's state stores at every checkpoint (the reserved state
// timeState), and restored with them. A restored task thus has the
// watermark it committed, and a replay judges records late or on time as
// the first run did.

// noTime is the watermark of an input that has said nothing yet.
const noTime = math.MinInt64

// timeState is the reserved state of every store, in graphs that track
// event time, holding the task's input times.
const timeState = "__event_time"

var timeGroup = []byte("t")

// eventTimeDef is where a source's records get their event time.
type eventTimeDef struct {
	from  *pipeline.Expr // nil: the Kafka record timestamp
	path  string         // of from, for errors
	bound int64          // max_out_of_orderness, milliseconds
	idle  time.Duration  // 0: never idle
}

func buildEventTime(src *config.Source, line func(string) int, errs *config.Errors, reads *pipeline.ValueReads) *eventTimeDef {
	d := &eventTimeDef{}
	et := src.EventTime
	if et == nil {
		return d
	}
	d.bound, d.idle, d.path = et.MaxOutOfOrderness.Milliseconds(), et.IdleTimeout, et.Path+".from"
	if et.From == "" || et.From == "timestamp" {
		return d
	}
	spec := pipeline.NewSpec(src.Name, "event_time", et.Path, nil, 0, line)
	d.from = spec.Expr(".from", et.From, pipeline.AnyResult)
	*errs = append(*errs, spec.Problems()...)
	addReads(reads, spec.ValueReads())
	return d
}

// timeRecord is what timeState holds per input topic.
type timeRecord struct {
	Max     int64           `json:"max,omitempty"`
	Writers map[int32]int64 `json:"writers,omitempty"`
	Idle    []int32         `json:"idle,omitempty"` // writers that said they are idle
}

// inputTime is the event time of one input partition of a task.
type inputTime struct {
	topic string
	bound int64
	idle  time.Duration // sources: how long without records makes it idle

	max      int64           // sources: latest event time seen
	writers  map[int32]int64 // repartition topics: each writer's watermark
	idleW    map[int32]bool  // repartition topics: writers that said they are idle
	nwriters int             // repartition topics: how many writers there are

	last   time.Time // sources: when it last had records
	isIdle bool
	dirty  bool // changed since it was last written to the stores
	cons   []*consumer

	// The committed values, for a rollback.
	cMax     int64
	cWriters map[int32]int64
	cIdleW   map[int32]bool
}

func (in *inputTime) watermark() int64 {
	if in.writers == nil {
		if in.max == noTime {
			return noTime
		}
		return in.max - in.bound
	}
	known := len(in.writers)
	for w := range in.idleW {
		if _, ok := in.writers[w]; !ok {
			known++
		}
	}
	if known < in.nwriters {
		return noTime // some writer has said nothing yet
	}
	// The minimum over the writers that are not idle; with every writer
	// idle, the furthest any of them came.
	w, idleMax := int64(math.MaxInt64), int64(noTime)
	for id, x := range in.writers {
		switch {
		case in.idleW[id]:
			idleMax = max(idleMax, x)
		case x < w:
			w = x
		}
	}
	if w == math.MaxInt64 {
		return idleMax
	}
	return w
}

// consumer is a step that reads watermarks in a task: a stateful step (for
// its timers and Context.Watermark) or the writing half of a key_by step
// (which passes its watermark on to the repartition topic).
type consumer struct {
	n   *node
	ins []*inputTime
	wm  int64
	cWM int64 // committed

	timers  []*state.Timers
	handler pipeline.TimerHandler

	// key_by: the watermark last written to the repartition topic (and
	// committed), and whether it said idle.
	sent, cSent         int64
	sentIdle, cSentIdle bool
}

// idle reports whether every input of c is idle.
func (c *consumer) idle() bool {
	for _, in := range c.ins {
		if !in.isIdle {
			return false
		}
	}
	return len(c.ins) > 0
}

// compute returns c's watermark: the minimum over its inputs that are not
// idle, never less than it was. With every input idle, it is the furthest
// any of them came: nothing is coming, and the windows up to there can
// close. (A partition that comes back after being idle finds the
// watermark where the others took it: its records behind it are late.)
func (c *consumer) compute() int64 {
	w, idleMax := int64(math.MaxInt64), int64(noTime)
	for _, in := range c.ins {
		if in.isIdle {
			idleMax = max(idleMax, in.watermark())
			continue
		}
		w = min(w, in.watermark())
	}
	if w == math.MaxInt64 {
		w = idleMax
	}
	return max(w, c.wm)
}

// taskTime is a task's event time: its input partitions and the steps that
// read their watermarks.
type taskTime struct {
	on   bool // the graph tracks event time
	ins  map[string]*inputTime
	cons []*consumer // by node index; nil for other nodes
	all  []*consumer
	eval pipeline.Evaluator
	// stores hold timeState, in the task's stateful steps.
	stores []*state.Map[timeRecord]
}

// newTaskTime sets up the event time of task t: called once its
// operators are made (they registered their timers) and before its stores
// are restored.
func newTaskTime(rt *runtime, t *task) (*taskTime, error) {
	tt := &taskTime{on: rt.g.eventTime, ins: map[string]*inputTime{}, cons: make([]*consumer, len(rt.g.nodes))}
	now := rt.clock().Now()
	for _, n := range rt.g.nodes {
		st := t.stores[n.idx]
		isStateful := n.stateful() != nil && st != nil
		if !isStateful && n.repart == nil {
			continue
		}
		c := &consumer{n: n, wm: noTime, cWM: noTime, sent: noTime, cSent: noTime}
		if isStateful {
			c.timers = st.Timers()
			c.handler, _ = t.ops[n.idx].(pipeline.TimerHandler)
			if len(c.timers) > 0 && c.handler == nil {
				return nil, fmt.Errorf("step %s (%s) registers timers but its operator has no OnTimer method (pipeline.TimerHandler)", n.name, n.path)
			}
			// Registered whether or not the graph tracks event time: a
			// changelog written when it did must still restore.
			m, err := state.NewMap[timeRecord](st, timeState, state.TTLConfig{})
			if err != nil {
				return nil, fmt.Errorf("step %s (%s): %w", n.name, n.path, err)
			}
			tt.stores = append(tt.stores, m)
		}
		if tt.on {
			for _, topic := range n.upTopics {
				if p, ok := rt.topicParts[topic]; ok && int32(t.id) >= p {
					continue // the topic has no partition of this number
				}
				in := tt.input(rt, topic, now)
				in.cons = append(in.cons, c)
				c.ins = append(c.ins, in)
			}
		}
		tt.cons[n.idx] = c
		tt.all = append(tt.all, c)
	}
	return tt, nil
}

func (tt *taskTime) input(rt *runtime, topic string, now time.Time) *inputTime {
	if in, ok := tt.ins[topic]; ok {
		return in
	}
	in := &inputTime{topic: topic, max: noTime, cMax: noTime, last: now}
	src := rt.g.byTopic[topic]
	switch {
	case src != nil && src.internal:
		in.writers, in.idleW = map[int32]int64{}, map[int32]bool{}
		in.nwriters = rt.writers(src)
	case src != nil && src.et != nil:
		in.bound, in.idle = src.et.bound, src.et.idle
	}
	tt.ins[topic] = in
	return in
}

// writers returns how many tasks write watermarks into the repartition
// topic internal source src reads: one per partition number of the topics
// its key_by step reads.
func (rt *runtime) writers(src *node) int {
	w := rt.g.byName[src.name+".repartition"]
	if w == nil {
		return 1
	}
	n := int32(1)
	for _, t := range w.upTopics {
		if p, ok := rt.topicParts[t]; ok {
			n = max(n, p)
		}
	}
	return int(n)
}

// load sets the input times from what the restored stores hold.
func (tt *taskTime) load() error {
	for _, m := range tt.stores {
		es, err := m.Entries(timeGroup)
		if err != nil {
			return err
		}
		for _, e := range es {
			in, ok := tt.ins[e.Key]
			if !ok {
				continue // a topic the step no longer reads
			}
			in.max = max(in.max, e.Value.Max)
			if in.writers == nil {
				continue
			}
			for w, x := range e.Value.Writers {
				if cur, ok := in.writers[w]; !ok || x > cur {
					in.writers[w] = x
				}
			}
			for _, w := range e.Value.Idle {
				in.idleW[w] = true
			}
			in.isIdle = len(in.idleW) >= in.nwriters
		}
	}
	for _, in := range tt.ins {
		in.commit()
	}
	for _, c := range tt.all {
		c.wm = c.compute()
		c.cWM = c.wm
	}
	return nil
}

func (in *inputTime) commit() {
	in.cMax = in.max
	if in.writers != nil {
		in.cWriters, in.cIdleW = maps.Clone(in.writers), maps.Clone(in.idleW)
	}
}

func (in *inputTime) rollback() {
	in.max = in.cMax
	if in.writers != nil {
		in.writers, in.idleW = map[int32]int64{}, map[int32]bool{}
		maps.Copy(in.writers, in.cWriters)
		maps.Copy(in.idleW, in.cIdleW)
		in.isIdle = len(in.idleW) >= in.nwriters
	}
}

// observe notes a record of event time ms read from in, and fires the
// timers its watermark now reaches.
func (t *task) observe(in *inputTime, ms int64) {
	if ms <= in.max {
		return
	}
	in.max, in.dirty = ms, true
	t.advance(in)
}

// advance recomputes the watermarks of the steps reading in.
func (t *task) advance(in *inputTime) {
	for _, c := range in.cons {
		if w := c.compute(); w > c.wm {
			t.setWatermark(c, w)
			t.fire(c, state.EventTime, w)
		}
	}
}

// setWatermark moves c's watermark. Behind a parallel stage the stage's
// workers read it too (Context.Watermark), under the task's lock.
func (t *task) setWatermark(c *consumer, w int64) {
	if c.n.afterParallel {
		t.mu.Lock()
		defer t.mu.Unlock()
	}
	c.wm = w
}

// writerMark applies a watermark record read from a repartition topic: a
// writer's watermark, or its saying it is idle.
func (t *task) writerMark(in *inputTime, kr *kgo.Record) {
	if in == nil || in.writers == nil {
		return
	}
	w, x, idle, err := wire.ParseWatermark(kr.Headers[0].Value)
	if err != nil {
		t.rt.log.Warn("ignoring a malformed watermark record", "topic", kr.Topic, "partition", kr.Partition, "offset", kr.Offset, "err", err)
		return
	}
	if idle != in.idleW[w] {
		in.dirty = true
	}
	if idle {
		in.idleW[w] = true
	} else {
		delete(in.idleW, w)
	}
	if cur, ok := in.writers[w]; x != noTime && (!ok || x > cur) {
		in.writers[w] = x
		in.dirty = true
	}
	in.isIdle = len(in.idleW) >= in.nwriters
	t.advance(in)
}

// tick is the task's periodic time work, at every checkpoint barrier:
// source partitions without records for their idle_timeout become idle,
// and timers whose time came fire.
func (t *task) tick(now time.Time) {
	tt := t.time
	if tt == nil {
		return
	}
	changed := false
	for _, in := range tt.ins {
		if in.writers != nil || in.idle <= 0 {
			continue
		}
		idle := now.Sub(in.last) >= in.idle
		if idle != in.isIdle {
			in.isIdle, changed = idle, true
		}
	}
	for _, c := range tt.all {
		if changed {
			t.setWatermark(c, max(c.wm, c.compute()))
		}
		if c.handler == nil {
			continue
		}
		t.fire(c, state.EventTime, c.wm)
		t.fire(c, state.ProcessingTime, now.UnixMilli())
	}
}

// fire calls c's OnTimer for each of its timers of domain d due at upTo,
// earliest first, including those that timers fired on the way set.
func (t *task) fire(c *consumer, d state.TimeDomain, upTo int64) {
	if c.handler == nil || upTo == noTime || t.rt.failed() {
		return
	}
	n := c.n
	if n.afterParallel {
		t.mu.Lock()
		defer t.mu.Unlock()
	}
	for {
		var next *state.Timers
		at := int64(math.MaxInt64)
		for _, tm := range c.timers {
			x, ok, err := tm.Next(d)
			if err != nil {
				t.rt.fail(fmt.Errorf("step %s (%s), task %d: timers: %w", n.name, n.path, t.id, err))
				return
			}
			if ok && x <= upTo && x < at {
				next, at = tm, x
			}
		}
		if next == nil {
			return
		}
		tmr, _, err := next.Pop(d, upTo)
		if err == nil {
			err = c.handler.OnTimer(t.ctxs[n.idx], tmr)
		}
		if err != nil {
			t.rt.fail(&pipeline.RecordError{Step: n.name, Path: n.path, Err: fmt.Errorf("%s timer at %s for key %q: %w",
				d, tmr.Time.UTC().Format(time.RFC3339Nano), tmr.Key, err)})
			return
		}
	}
}

// watermark is what Context.Watermark returns for node n.
func (t *task) watermark(n *node) time.Time {
	if t.time == nil {
		return time.Time{}
	}
	c := t.time.cons[n.idx]
	if c == nil || c.wm == noTime {
		return time.Time{}
	}
	return time.UnixMilli(c.wm)
}

// persist writes the inputs that changed since the last checkpoint to the
// task's stores, inside the open checkpoint. The task is idle.
func (tt *taskTime) persist() error {
	for _, in := range tt.ins {
		if !in.dirty {
			continue
		}
		rec := timeRecord{Writers: in.writers}
		if in.max != noTime {
			rec.Max = in.max
		}
		for w := range in.idleW {
			rec.Idle = append(rec.Idle, w)
		}
		slices.Sort(rec.Idle)
		for _, m := range tt.stores {
			if err := m.Put(timeGroup, in.topic, rec); err != nil {
				return err
			}
		}
	}
	return nil
}

// settle ends the checkpoint for the task's event time as the transaction
// ended: committed, what it holds is the committed state; otherwise it goes
// back to the last committed one, as the consumer's positions do.
func (tt *taskTime) settle(committed bool) {
	for _, in := range tt.ins {
		if committed {
			in.commit()
		} else {
			in.rollback()
		}
		in.dirty = false
	}
	for _, c := range tt.all {
		if committed {
			c.cWM, c.cSent, c.cSentIdle = c.wm, c.sent, c.sentIdle
		} else {
			c.wm, c.sent, c.sentIdle = c.cWM, c.cSent, c.cSentIdle
		}
	}
}

// eventTimeOf reads a source record's event time with d.
func (tt *taskTime) eventTimeOf(d *eventTimeDef, r *pipeline.Record) (time.Time, error) {
	x, err := tt.eval.Eval(d.from, r)
	if err != nil {
		return time.Time{}, err
	}
	ts, err := pipeline.ToTime(x)
	if err != nil {
		return time.Time{}, fmt.Errorf("event time %s: %w", describeTime(x), err)
	}
	return ts, nil
}

func describeTime(x any) string {
	switch t := x.(type) {
	case string:
		return strconv.Quote(t)
	case nil:
		return "null"
	}
	return strings.TrimSpace(fmt.Sprint(x))
}
