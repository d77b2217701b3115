package ops

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pipeline-run/pipeline/internal/codec"
	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/state"
)

// intervalJoin joins two keyed streams on event time, as Flink's interval
// join does: a record a of the first input (left) and a record b of the
// second (right) with the same key are a pair when
//
//	a.ts + lower <= b.ts <= a.ts + upper
//
//	- name: paid
//	  from: [orders_by_id, payments_by_id]   # left, right: keyed alike
//	  interval_join:
//	    lower: 0s
//	    upper: 10m
//	    type: left        # inner (default), left or outer
//	    late: output      # records behind the watermark go to paid.late
//
// Each pair is emitted once, when its second record arrives: a record keyed
// like the inputs, stamped with the later of the two times, whose value is
//
//	{"key": "o-17", "left": {…the order…}, "right": {…the payment…}}
//
// Each record is kept (keyed state, a state.Map per key, and a timer) until
// the watermark has passed the last time a record of the other side could
// still pair with it: a.ts + upper for a left record, b.ts - lower for a
// right one. With type left (outer) a left (any) record that found no pair
// by then is emitted alone, with "right" (or "left") null. A record behind
// the watermark when it arrives is late: the records it could pair with
// may be gone, so it is not joined but sent to the late output, or counted
// and dropped.
type intervalJoin struct {
	lower, upper int64 // milliseconds
	kind         string
	lateOut      lateData
	fp           string
}

type intervalJoinSpec struct {
	Lower any    `yaml:"lower"` // signed durations: -5m is before
	Upper any    `yaml:"upper"`
	Type  string `yaml:"type"`
	Late  string `yaml:"late"`
}

func newIntervalJoin(s *pipeline.Spec) (pipeline.Definition, error) {
	var js intervalJoinSpec
	if !s.Decode(&js) {
		return nil, nil
	}
	j := &intervalJoin{kind: "inner"}
	if s.Inputs != 2 {
		s.Errorf("", "an interval join reads two streams, the left and the right, keyed alike: give them as from: [left, right] (found %d)", s.Inputs)
	}
	lower, lerr := durationOf(js.Lower) // negative: before
	upper, uerr := durationOf(js.Upper)
	switch {
	case js.Lower == nil:
		s.Errorf(".lower", "required: the earliest a right record may be after a left one (negative: before it), such as 0s or -5m")
	case lerr != nil:
		s.Errorf(".lower", "%v", lerr)
	case js.Upper == nil:
		s.Errorf(".upper", "required: the latest a right record may be after a left one, such as 10m")
	case uerr != nil:
		s.Errorf(".upper", "%v", uerr)
	case lower > upper:
		s.Errorf(".upper", "upper (%s) is before lower (%s): no pair could match", upper, lower)
	default:
		j.lower, j.upper = lower.Milliseconds(), upper.Milliseconds()
	}
	switch js.Type {
	case "", "inner":
	case "left", "outer":
		j.kind = js.Type
	default:
		s.Errorf(".type", "must be inner (pairs only), left (and left records that found no pair) or outer (and records of either side that found none), found %q", js.Type)
	}
	j.lateOut = parseLate(s, js.Late)
	j.fp = fmt.Sprintf("interval_join:v1:%d:%d:%s", j.lower, j.upper, j.kind)
	return j, nil
}

func (j *intervalJoin) Outputs() []string { return j.lateOut.outputs() }

func (j *intervalJoin) Fingerprint() string { return j.fp }
func (j *intervalJoin) UsesEventTime() bool { return true }

// MergesInputs: a pair stands for two inputs.
func (j *intervalJoin) MergesInputs() (sub, what, instead string) {
	return "", "a join writes one record for two inputs", "leave audit.source_positions off for this pipeline"
}

func (j *intervalJoin) NewOperator(pipeline.TaskID) (pipeline.Operator, error) {
	return nil, errors.New("interval_join needs a state store")
}

func (j *intervalJoin) NewStatefulOperator(_ pipeline.TaskID, st *state.Store) (pipeline.Operator, error) {
	buf, tm, err := joinState(st)
	if err != nil {
		return nil, err
	}
	return &intervalJoinOp{def: j, buf: buf, timers: tm, cache: newKeyCache[*ijKey](st)}, nil
}

// joinEntry is one buffered record: its event time, its value as written,
// and whether it found a pair.
type joinEntry struct {
	ts      int64
	matched bool
	value   []byte
}

// joinEntryCodec encodes an entry as a flag byte, the time (8 bytes) and
// the value.
type joinEntryCodec struct{}

func (joinEntryCodec) Append(dst []byte, e joinEntry) ([]byte, error) {
	var flags byte
	if e.matched {
		flags = 1
	}
	dst = append(dst, flags)
	dst = binary.BigEndian.AppendUint64(dst, uint64(e.ts))
	return append(dst, e.value...), nil
}

func (joinEntryCodec) Decode(src []byte) (joinEntry, error) {
	if len(src) < 9 || src[0] > 1 {
		return joinEntry{}, fmt.Errorf("a buffered join record of %d bytes", len(src))
	}
	return joinEntry{matched: src[0] == 1, ts: int64(binary.BigEndian.Uint64(src[1:9])), value: slices.Clone(src[9:])}, nil
}

// Sides, as the first byte of a buffered record's map key.
const (
	sideLeft  = 'L'
	sideRight = 'R'
)

// intervalJoinOp is an interval join in one task. Its state, per key: the
// buffered records of both sides (map key: side, time, then where the
// record was read, so entries sort by side and time and replay the same
// way), and a timer at each one's expiry. The keys it touched are cached
// (keyCache).
type intervalJoinOp struct {
	def    *intervalJoin
	buf    *state.Map[joinEntry]
	timers *state.Timers
	cache  keyCache[*ijKey]
}

// ijKey is a key of an interval join, cached: its buffered records in map
// key order.
type ijKey struct {
	cached
	recs []ijRecord
}

// ijRecord is a buffered record of an interval join.
type ijRecord struct {
	mk string // its map key
	joinEntry
	stored  bool // the store has it
	changed bool // and not as it is now
}

func (o *intervalJoinOp) Process(ctx pipeline.Context, r *pipeline.Record) error {
	key, err := r.KeyBytes()
	if err != nil {
		return err
	}
	if key == nil {
		return fmt.Errorf("interval_join needs a record key; this record has none (key both streams with key_by)")
	}
	ts, wm := r.Timestamp.UnixMilli(), watermarkOf(ctx)
	if ts < wm {
		o.def.lateOut.send(ctx, r)
		return nil
	}
	value, err := jsonOf(&r.Value)
	if err != nil {
		return err
	}
	left := ctx.Input() == 0
	side, other := byte(sideLeft), byte(sideRight)
	// The other side's times that pair with ts, and when this record
	// expires: no record of the other side that is not late can pair
	// with it once the watermark is past expiry.
	from, to, expiry := ts+o.def.lower, ts+o.def.upper, ts+o.def.upper
	if !left {
		side, other = sideRight, sideLeft
		from, to, expiry = ts-o.def.upper, ts-o.def.lower, ts-o.def.lower
	}
	k, err := o.entry(key)
	if err != nil {
		return err
	}
	matched := false
	for i := range k.recs {
		e := &k.recs[i]
		if e.mk[0] != other || e.ts < from || e.ts > to {
			continue
		}
		matched = true
		l, rt := value, e.value
		if !left {
			l, rt = e.value, value
		}
		o.emit(ctx, key, l, rt, max(ts, e.ts), r.Source)
		if !e.matched && o.keepsUnmatched(other) {
			e.matched, e.changed = true, true
			o.cache.touch(k)
		}
	}
	if expiry < wm {
		// Already past: nothing to come can pair with it.
		if !matched && o.keepsUnmatched(side) {
			o.emitAlone(ctx, key, side, value, ts, r.Source)
		}
		return nil
	}
	// A copy: the record's value may share the memory of the batch it
	// was read in.
	e := ijRecord{mk: entryKey(side, ts, r.Source, len(k.recs)), joinEntry: joinEntry{ts: ts, matched: matched, value: slices.Clone(value)}}
	i, found := slices.BinarySearchFunc(k.recs, e.mk, func(x ijRecord, mk string) int { return strings.Compare(x.mk, mk) })
	if found {
		// Read again at the same position: it replaces the one the
		// store may have.
		e.stored, e.changed = k.recs[i].stored, true
		k.recs[i] = e
	} else {
		k.recs = slices.Insert(k.recs, i, e)
	}
	o.cache.touch(k)
	return o.timers.Set(key, time.UnixMilli(expiry+1), state.EventTime)
}

// entry returns key's cache entry, read from the store if it is not
// cached.
func (o *intervalJoinOp) entry(key []byte) (*ijKey, error) {
	if k, ok := o.cache.get(key); ok {
		return k, nil
	}
	all, err := o.buf.Entries(key)
	if err != nil {
		return nil, err
	}
	k := &ijKey{cached: cached{key: string(key)}, recs: make([]ijRecord, 0, len(all))}
	for _, e := range all {
		if e.Key == "" || (e.Key[0] != sideLeft && e.Key[0] != sideRight) {
			return nil, fmt.Errorf("an interval join state entry of key %q with map key %q", key, e.Key)
		}
		k.recs = append(k.recs, ijRecord{mk: e.Key, joinEntry: e.Value, stored: true})
	}
	return k, o.cache.add(k, o.write)
}

// write writes k to the store.
func (o *intervalJoinOp) write(k *ijKey) error {
	key := []byte(k.key)
	for _, mk := range k.gone {
		if err := o.buf.Remove(key, mk); err != nil {
			return err
		}
	}
	for i := range k.recs {
		e := &k.recs[i]
		if e.stored && !e.changed {
			continue
		}
		if err := o.buf.Put(key, e.mk, e.joinEntry); err != nil {
			return err
		}
		e.stored, e.changed = true, false
	}
	return nil
}

// Flush writes what the store has not seen of the cached keys.
func (o *intervalJoinOp) Flush(pipeline.Context) error { return o.cache.flush(o.write) }

// keepsUnmatched says whether records of side that found no pair are
// emitted alone.
func (o *intervalJoinOp) keepsUnmatched(side byte) bool {
	return o.def.kind == "outer" || (o.def.kind == "left" && side == sideLeft)
}

// entryKey is a buffered record's map key: side, time (order-preserving),
// and the position it was read at, which sets it apart from other records
// of the same time and is the same on every replay; n, the entries the key
// had, stands in for a record built with no position.
func entryKey(side byte, ts int64, src pipeline.Position, n int) string {
	k := make([]byte, 0, 48)
	k = append(k, side)
	k = append(k, startKey(ts)...)
	if src.Topic == "" {
		return string(strconv.AppendInt(k, int64(n), 10))
	}
	k = append(k, src.Topic...)
	k = append(k, '/')
	k = strconv.AppendInt(k, int64(src.Partition), 10)
	k = append(k, '@')
	return string(strconv.AppendInt(k, src.Offset, 10))
}

// OnTimer drops the key's records the watermark has passed the expiry of,
// emitting those that found no pair when the join type keeps them.
func (o *intervalJoinOp) OnTimer(ctx pipeline.Context, t state.Timer) error {
	k, err := o.entry(t.Key)
	if err != nil {
		return err
	}
	wm := watermarkOf(ctx)
	kept := k.recs[:0]
	for _, e := range k.recs {
		side := e.mk[0]
		expiry := e.ts + o.def.upper
		if side == sideRight {
			expiry = e.ts - o.def.lower
		}
		if expiry >= wm {
			kept = append(kept, e)
			continue
		}
		if !e.matched && o.keepsUnmatched(side) {
			o.emitAlone(ctx, t.Key, side, e.value, e.ts, pipeline.Position{})
		}
		if e.stored {
			k.gone = append(k.gone, e.mk)
			o.cache.touch(k)
		}
	}
	clear(k.recs[len(kept):])
	k.recs = kept
	return nil
}

// emit sends the pair (l, r) of key, stamped ts.
func (o *intervalJoinOp) emit(ctx pipeline.Context, key, l, r []byte, ts int64, src pipeline.Position) {
	ctx.Emit(joinResult(key, l, r, ts, src))
}

// emitAlone sends a record of side that found no pair.
func (o *intervalJoinOp) emitAlone(ctx pipeline.Context, key []byte, side byte, value []byte, ts int64, src pipeline.Position) {
	if side == sideLeft {
		ctx.Emit(joinResult(key, value, nil, ts, src))
		return
	}
	ctx.Emit(joinResult(key, nil, value, ts, src))
}

// joinResult is {"key": key, "left": l, "right": r}, l and r JSON (nil:
// null), keyed by key and stamped ts.
func joinResult(key, l, r []byte, ts int64, src pipeline.Position) *pipeline.Record {
	v := appendJoined(make([]byte, 0, len(key)+len(l)+len(r)+32), key, l, r)
	return joinRecord(key, append(v, '}'), ts, src)
}

// appendJoined appends {"key":key,"left":l,"right":r to dst, the object
// left open for more fields.
func appendJoined(dst, key, l, r []byte) []byte {
	dst = append(dst, `{"key":`...)
	dst, _ = codec.AppendJSON(dst, string(key)) // a string always encodes
	dst = append(dst, `,"left":`...)
	dst = appendOrNull(dst, l)
	dst = append(dst, `,"right":`...)
	return appendOrNull(dst, r)
}

// joinRecord is a join's output: value v (JSON), keyed by key, stamped ts.
func joinRecord(key, v []byte, ts int64, src pipeline.Position) *pipeline.Record {
	return &pipeline.Record{
		Key:       pipeline.RawValue(slices.Clone(key), pipeline.String),
		Value:     pipeline.RawValue(v, pipeline.JSON),
		Timestamp: time.UnixMilli(ts),
		Source:    src,
	}
}

func appendOrNull(dst, b []byte) []byte {
	if len(b) == 0 {
		return append(dst, "null"...)
	}
	return append(dst, b...)
}

// jsonOf is a record value as JSON: as written when it was read as JSON,
// encoded when an operator set it, and a JSON string for a value read as
// a string or bytes.
func jsonOf(v *pipeline.Value) ([]byte, error) {
	if v.Format() == pipeline.JSON || v.Changed() {
		b, err := v.Encode(pipeline.JSON)
		if err != nil || len(b) > 0 {
			return b, err
		}
		return []byte("null"), nil
	}
	return codec.AppendJSON(nil, string(v.Raw()))
}
