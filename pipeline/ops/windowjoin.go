package ops

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/pipeline-run/pipeline/internal/codec"
	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/state"
)

// windowJoin joins two keyed streams per event-time window, as Flink's
// window join does: the records of the first input (left) and the second
// (right) with the same key in the same window are paired when the window
// closes.
//
//	steps:
//	  - name: shown
//	    from: [impressions, clicks]   # left, right: keyed alike
//	    window_join:
//	      tumbling: 1h                # or sliding: {size: 1h, slide: 10m}, or session: {gap: 30m}
//	      type: left                  # inner (default), left or outer
//	      late: output                # records of closed windows go to shown.late
//
// When the watermark reaches a window's end, every pair of its left and
// right records is emitted, stamped end-1ms, as
//
//	{"key": "u7", "window_start": …, "window_end": …, "left": {…}, "right": {…}}
//
// then, with type left (outer), each left (any) record of the window that
// found no pair, the other side null. The window's records are then
// dropped. A record whose every window has closed is late.
type windowJoin struct {
	win     window // kind, size, slide
	kind    string // inner, left, outer; co_group
	lateOut lateData
	group   *pipeline.Expr // co_group's value: nil for the group itself
	fp      string
}

type windowJoinSpec struct {
	Tumbling time.Duration `yaml:"tumbling"`
	Sliding  *slidingSpec  `yaml:"sliding"`
	Session  *sessionSpec  `yaml:"session"`
	Type     string        `yaml:"type"`  // window_join
	Value    string        `yaml:"value"` // co_group
	Late     string        `yaml:"late"`
}

func newWindowJoin(s *pipeline.Spec) (pipeline.Definition, error) {
	return newWindowed(s, false)
}

// coGroup hands both streams' records of one key and window to one
// expression, once, when the window closes, as Flink's coGroup does:
//
//	steps:
//	  - name: ctr
//	    from: [impressions, clicks]   # left, right: keyed alike
//	    co_group:
//	      tumbling: 1h                # or sliding: {size: 1h, slide: 10m}
//	      value: '{shown: len(value.left), clicked: len(value.right)}'
//
// The expression sees one record, keyed like the inputs and stamped
// end-1ms, whose value is the group: {"key": …, "window_start": …,
// "window_end": …, "left": [the left records' values, in time order],
// "right": [the right ones']}; without value, that record is the result.
func newCoGroup(s *pipeline.Spec) (pipeline.Definition, error) {
	return newWindowed(s, true)
}

func newWindowed(s *pipeline.Spec, group bool) (pipeline.Definition, error) {
	var ws windowJoinSpec
	if !s.Decode(&ws) {
		return nil, nil
	}
	what := "a window join"
	j := &windowJoin{kind: "inner"}
	if group {
		what, j.kind = "a co_group", "co_group"
		if ws.Type != "" {
			s.Errorf(".type", "a co_group has no type: it hands every window's records of both sides, whatever they are, to its value")
		}
		if ws.Value != "" {
			j.group = s.Expr(".value", ws.Value, pipeline.AnyResult)
		}
	} else if ws.Value != "" {
		s.Errorf(".value", "a window join emits pairs; to compute one value from a window's records of both sides, use co_group")
	}
	if s.Inputs != 2 {
		s.Errorf("", "%s reads two streams, the left and the right, keyed alike: give them as from: [left, right] (found %d)", what, s.Inputs)
	}
	kinds := 0
	if ws.Tumbling != 0 {
		kinds++
		j.win.kind, j.win.size, j.win.slide = "tumbling", ws.Tumbling.Milliseconds(), ws.Tumbling.Milliseconds()
		if j.win.size < 1 {
			s.Errorf(".tumbling", "the window size must be at least 1ms, found %s", ws.Tumbling)
		}
	}
	if ws.Sliding != nil {
		kinds++
		j.win.kind, j.win.size, j.win.slide = "sliding", ws.Sliding.Size.Milliseconds(), ws.Sliding.Slide.Milliseconds()
		switch {
		case j.win.size < 1:
			s.Errorf(".sliding.size", "required: the window size, at least 1ms, such as 10m")
		case j.win.slide < 1:
			s.Errorf(".sliding.slide", "required: how far each window starts after the one before, at least 1ms, such as 1m")
		case j.win.slide > j.win.size:
			s.Errorf(".sliding.slide", "the slide (%s) is larger than the size (%s): records between windows would belong to none", ws.Sliding.Slide, ws.Sliding.Size)
		}
	}
	if ws.Session != nil {
		kinds++
		j.win.kind, j.win.size = "session", ws.Session.Gap.Milliseconds()
		if j.win.size < 1 {
			s.Errorf(".session.gap", "the session gap must be at least 1ms (a gap of 0 would make every record its own session), found %s", ws.Session.Gap)
		}
	}
	if kinds != 1 {
		s.Errorf("", "give exactly one window kind: tumbling: 1h, sliding: {size: 1h, slide: 10m} or session: {gap: 30m}")
	}
	switch {
	case group:
	case ws.Type == "", ws.Type == "inner":
	case ws.Type == "left", ws.Type == "outer":
		j.kind = ws.Type
	default:
		s.Errorf(".type", "must be inner (pairs only), left (and left records that found no pair) or outer (and records of either side that found none), found %q", ws.Type)
	}
	j.lateOut = parseLate(s, ws.Late)
	j.fp = fmt.Sprintf("window_join:v1:%s:%d:%d:%s", j.win.kind, j.win.size, j.win.slide, j.kind)
	if group {
		j.fp = fmt.Sprintf("co_group:v1:%s:%d:%d", j.win.kind, j.win.size, j.win.slide)
	}
	return j, nil
}

func (j *windowJoin) Outputs() []string { return j.lateOut.outputs() }

func (j *windowJoin) Fingerprint() string { return j.fp }
func (j *windowJoin) UsesEventTime() bool { return true }

// MergesInputs: a pair stands for two inputs.
func (j *windowJoin) MergesInputs() (sub, what, instead string) {
	return "", "a join writes one record for two inputs", "leave audit.source_positions off for this pipeline"
}

func (j *windowJoin) NewOperator(pipeline.TaskID) (pipeline.Operator, error) {
	return nil, errors.New("window_join needs a state store")
}

func (j *windowJoin) NewStatefulOperator(_ pipeline.TaskID, st *state.Store) (pipeline.Operator, error) {
	buf, tm, err := joinState(st)
	if err != nil {
		return nil, err
	}
	return &windowJoinOp{def: j, buf: buf, timers: tm}, nil
}

// windowJoinOp is a window join in one task. Its state, per key: each
// window's records (map key: the window's start, the side, then the
// record's time and position, so that a window's records are together and
// each side's in time order), and a timer at each window's end.
type windowJoinOp struct {
	def    *windowJoin
	buf    *state.Map[joinEntry]
	timers *state.Timers
	starts []int64
}

func (o *windowJoinOp) Process(ctx pipeline.Context, r *pipeline.Record) error {
	key, err := r.KeyBytes()
	if err != nil {
		return err
	}
	if key == nil {
		return fmt.Errorf("window_join needs a record key; this record has none (key both streams with key_by)")
	}
	ts, wm := r.Timestamp.UnixMilli(), watermarkOf(ctx)
	side := byte(sideLeft)
	if ctx.Input() == 1 {
		side = sideRight
	}
	if o.def.win.kind == "session" {
		return o.session(ctx, key, side, ts, wm, r)
	}
	var value []byte
	o.starts = o.def.win.assign(ts, o.starts)
	took := false
	for _, start := range o.starts {
		end := start + o.def.win.size
		if end <= wm {
			continue // closed
		}
		if value == nil {
			if value, err = jsonOf(&r.Value); err != nil {
				return err
			}
		}
		took = true
		mk := windowEntryKey(start, side, ts, r.Source)
		if err := o.buf.Put(key, mk, joinEntry{ts: ts, value: value}); err != nil {
			return err
		}
		if err := o.timers.Set(key, time.UnixMilli(end), state.EventTime); err != nil {
			return err
		}
	}
	if !took {
		o.late(ctx, r)
	}
	return nil
}

func (o *windowJoinOp) late(ctx pipeline.Context, r *pipeline.Record) { o.def.lateOut.send(ctx, r) }

// sideMeta marks a session's own entry: its end, as the entry's time.
const sideMeta = 'M'

// session adds r, of side at ts, to key's sessions, which hold the records
// of both sides: it opens [ts, ts+gap), which merges with every session it
// overlaps or touches; the merged session's records move under its start.
func (o *windowJoinOp) session(ctx pipeline.Context, key []byte, side byte, ts, wm int64, r *pipeline.Record) error {
	all, err := o.buf.Entries(key)
	if err != nil {
		return err
	}
	start, end := ts, ts+o.def.win.size
	merged := map[string]bool{} // session prefixes
	for _, e := range all {
		if e.Key[8] != sideMeta {
			continue
		}
		s, en := startOf(e.Key[:8]), e.Value.ts
		if s <= end && en >= start {
			merged[e.Key[:8]] = true
			start, end = min(start, s), max(end, en)
		}
	}
	if end <= wm {
		o.late(ctx, r)
		return nil
	}
	prefix := startKey(start)
	for _, e := range all {
		if !merged[e.Key[:8]] || e.Key[:8] == prefix {
			continue
		}
		if err := o.buf.Remove(key, e.Key); err != nil {
			return err
		}
		if e.Key[8] != sideMeta {
			if err := o.buf.Put(key, prefix+e.Key[8:], e.Value); err != nil {
				return err
			}
		}
	}
	value, err := jsonOf(&r.Value)
	if err != nil {
		return err
	}
	if err := o.buf.Put(key, windowEntryKey(start, side, ts, r.Source), joinEntry{ts: ts, value: value}); err != nil {
		return err
	}
	if err := o.buf.Put(key, prefix+string(sideMeta), joinEntry{ts: end}); err != nil {
		return err
	}
	return o.timers.Set(key, time.UnixMilli(end), state.EventTime)
}

// windowEntryKey is a buffered record's map key: its window's start, its
// side, its time, then where it was read (binary: partition, offset,
// topic).
func windowEntryKey(start int64, side byte, ts int64, src pipeline.Position) string {
	k := make([]byte, 0, 29+len(src.Topic))
	k = append(k, startKey(start)...)
	k = append(k, side)
	k = append(k, startKey(ts)...)
	k = binary.BigEndian.AppendUint32(k, uint32(src.Partition))
	k = binary.BigEndian.AppendUint64(k, uint64(src.Offset))
	return string(append(k, src.Topic...))
}

// OnTimer closes the key's windows the watermark has reached: emits their
// pairs and, for left and outer joins, their unmatched records, then drops
// their records.
func (o *windowJoinOp) OnTimer(ctx pipeline.Context, t state.Timer) error {
	all, err := o.buf.Entries(t.Key)
	if err != nil {
		return err
	}
	wm := watermarkOf(ctx)
	for i := 0; i < len(all); {
		start := startOf(all[i].Key[:8])
		j := i
		for j < len(all) && all[j].Key[:8] == all[i].Key[:8] {
			j++
		}
		win := all[i:j]
		i = j
		end := start + o.def.win.size
		var lefts, rights []state.MapEntry[joinEntry]
		for _, e := range win {
			switch e.Key[8] {
			case sideLeft:
				lefts = append(lefts, e)
			case sideRight:
				rights = append(rights, e)
			case sideMeta:
				end = e.Value.ts // a session's end
			}
		}
		if end > wm {
			continue
		}
		if o.def.kind == "co_group" {
			if err := o.coGroup(ctx, t.Key, start, end, lefts, rights); err != nil {
				return err
			}
			lefts, rights = nil, nil
		}
		for _, l := range lefts {
			for _, r := range rights {
				ctx.Emit(o.result(t.Key, start, end, l.Value.value, r.Value.value))
			}
		}
		if len(rights) == 0 && o.def.kind != "inner" {
			for _, l := range lefts {
				ctx.Emit(o.result(t.Key, start, end, l.Value.value, nil))
			}
		}
		if len(lefts) == 0 && o.def.kind == "outer" {
			for _, r := range rights {
				ctx.Emit(o.result(t.Key, start, end, nil, r.Value.value))
			}
		}
		for _, e := range win {
			if err := o.buf.Remove(t.Key, e.Key); err != nil {
				return err
			}
		}
	}
	return nil
}

// coGroup emits the group of one window: the record its value expression
// makes of it, or the group itself.
func (o *windowJoinOp) coGroup(ctx pipeline.Context, key []byte, start, end int64, lefts, rights []state.MapEntry[joinEntry]) error {
	v := make([]byte, 0, 256)
	v = append(v, `{"key":`...)
	v, _ = codec.AppendJSON(v, string(key))
	v = fmt.Appendf(v, `,"window_start":%d,"window_end":%d,"left":[`, start, end)
	for i, e := range lefts {
		if i > 0 {
			v = append(v, ',')
		}
		v = append(v, e.Value.value...)
	}
	v = append(v, `],"right":[`...)
	for i, e := range rights {
		if i > 0 {
			v = append(v, ',')
		}
		v = append(v, e.Value.value...)
	}
	v = append(v, `]}`...)
	rec := joinRecord(key, v, end-1, pipeline.Position{})
	if o.def.group != nil {
		x, err := ctx.Eval().Eval(o.def.group, rec)
		if err != nil {
			return fmt.Errorf("co_group value, window [%d, %d) of key %q: %w", start, end, key, err)
		}
		rec.Value = pipeline.ObjectValue(x)
	}
	ctx.Emit(rec)
	return nil
}

// result is {"key", "window_start", "window_end", "left", "right"}.
func (o *windowJoinOp) result(key []byte, start, end int64, l, r []byte) *pipeline.Record {
	v := appendJoined(make([]byte, 0, len(key)+len(l)+len(r)+80), key, l, r)
	v = fmt.Appendf(v, `,"window_start":%d,"window_end":%d}`, start, end)
	return joinRecord(key, v, end-1, pipeline.Position{})
}
