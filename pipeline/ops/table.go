package ops

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/state"
)

// tableJoin enriches a keyed stream with a keyed table on event time, as
// Flink's temporal (versioned) table join does: the first input is the
// stream, the second the table's changelog (a compacted topic: each record
// the row of its key from its time on, a tombstone deleting it). A stream
// record at time t joins the row its key had at t:
//
//	steps:
//	  - name: enriched
//	    from: [orders, customers]   # stream, table: keyed alike
//	    table_join:
//	      type: left                # inner (default): only records with a row
//	      late: output              # records behind the watermark go to enriched.late
//
// A stream record waits until the watermark has passed its time, so that
// every table change up to then has come, and is then emitted, stamped with
// its own time, as
//
//	{"key": "c-7", "left": {…the order…}, "right": {…the customer row…}}
//
// with "right" null (type left) or no result (inner) when the key had no
// row. The table keeps, per key, the row in force at the watermark and the
// changes after it: older versions are dropped as the watermark passes.
// Records of either side behind the watermark when they come are late: sent
// to the late output, or counted and dropped.
type tableJoin struct {
	left    bool
	lateOut lateData
	fp      string
}

type tableJoinSpec struct {
	Type string `yaml:"type"`
	Late string `yaml:"late"`
}

func newTableJoin(s *pipeline.Spec) (pipeline.Definition, error) {
	var ts tableJoinSpec
	if !s.Decode(&ts) {
		return nil, nil
	}
	j := &tableJoin{}
	if s.Inputs != 2 {
		s.Errorf("", "a table join reads two streams, the stream and the table's changelog, keyed alike: give them as from: [stream, table] (found %d)", s.Inputs)
	}
	switch ts.Type {
	case "", "inner":
	case "left":
		j.left = true
	default:
		s.Errorf(".type", "must be inner (records whose key has a row) or left (every record, \"right\": null without a row), found %q", ts.Type)
	}
	j.lateOut = parseLate(s, ts.Late)
	j.fp = fmt.Sprintf("table_join:v1:%v", j.left)
	return j, nil
}

func (j *tableJoin) Outputs() []string { return j.lateOut.outputs() }

func (j *tableJoin) Fingerprint() string { return j.fp }
func (j *tableJoin) UsesEventTime() bool { return true }

// MergesInputs: a result stands for a stream record and a table row.
func (j *tableJoin) MergesInputs() (sub, what, instead string) {
	return "", "a join writes one record for two inputs", "leave audit.source_positions off for this pipeline"
}

func (j *tableJoin) NewOperator(pipeline.TaskID) (pipeline.Operator, error) {
	return nil, errors.New("table_join needs a state store")
}

func (j *tableJoin) NewStatefulOperator(_ pipeline.TaskID, st *state.Store) (pipeline.Operator, error) {
	buf, tm, err := joinState(st)
	if err != nil {
		return nil, err
	}
	return &tableJoinOp{def: j, buf: buf, timers: tm, cache: newKeyCache[*tjKey](st)}, nil
}

// Map key sides of a table join's state: waiting stream records, and
// table versions.
const (
	sideStream = 'S'
	sideTable  = 'V'
)

// tableJoinOp is a table join in one task. Its state, per key: the stream
// records waiting for the watermark and the table's versions (map key:
// side, time, then the position read at in binary, so that versions of one
// time sort in the order they were written), in joinEntry form (a version
// marked "matched" is a tombstone); and a timer at the earliest time the
// key has work at. The keys it touched are cached (keyCache).
type tableJoinOp struct {
	def    *tableJoin
	buf    *state.Map[joinEntry]
	timers *state.Timers
	cache  keyCache[*tjKey]
}

// tjKey is a key of a table join, cached: its waiting stream records and
// its table versions, each in map key order.
type tjKey struct {
	cached
	stream   []tjRecord
	versions []tjRecord
	// armed is the time of the earliest timer set for the key, 0 if none
	// is, -1 if not known (the key was read back from the store).
	armed int64
}

// tjRecord is a record of a table join: a stream record or a version.
type tjRecord struct {
	ts    int64
	src   pipeline.Position
	tomb  bool   // a version deleting the row
	value []byte // JSON; nil for a tombstone
	mk    string // the map key it is stored under; "" if not stored
}

// before reports whether a sorts before b in map key order: time, then
// position (versionKey).
func (a *tjRecord) before(b *tjRecord) bool {
	if a.ts != b.ts {
		return a.ts < b.ts
	}
	if a.src.Partition != b.src.Partition {
		return uint32(a.src.Partition) < uint32(b.src.Partition)
	}
	if a.src.Offset != b.src.Offset {
		return uint64(a.src.Offset) < uint64(b.src.Offset)
	}
	return a.src.Topic < b.src.Topic
}

func (o *tableJoinOp) Process(ctx pipeline.Context, r *pipeline.Record) error {
	key, err := r.KeyBytes()
	if err != nil {
		return err
	}
	if key == nil {
		return fmt.Errorf("table_join needs a record key; this record has none (key the stream with key_by, and the table's topic by its row key)")
	}
	ts, wm := r.Timestamp.UnixMilli(), watermarkOf(ctx)
	if ts < wm {
		o.def.lateOut.send(ctx, r)
		return nil
	}
	rec := tjRecord{ts: ts, src: r.Source}
	table := ctx.Input() == 1
	if table && r.Value.Raw() == nil && !r.Value.Changed() {
		rec.tomb = true // a tombstone: no row from ts on
	} else {
		v, err := jsonOf(&r.Value)
		if err != nil {
			return err
		}
		// A copy: the record's value may share the memory of the batch
		// it was read in, which a version kept for long would hold.
		rec.value = slices.Clone(v)
	}
	k, err := o.entry(key)
	if err != nil {
		return err
	}
	if table {
		k.versions = insertRecord(k.versions, rec)
	} else {
		k.stream = insertRecord(k.stream, rec)
	}
	o.cache.touch(k)
	return o.arm(k)
}

// insertRecord inserts r into rs in map key order; one at r's very
// position (read again) replaces it.
func insertRecord(rs []tjRecord, r tjRecord) []tjRecord {
	i := len(rs)
	for i > 0 && r.before(&rs[i-1]) {
		i--
	}
	if i > 0 && !rs[i-1].before(&r) {
		r.mk = rs[i-1].mk // the same position: the store has it
		rs[i-1] = r
		return rs
	}
	return slices.Insert(rs, i, r)
}

// entry returns key's cache entry, read from the store if it is not
// cached.
func (o *tableJoinOp) entry(key []byte) (*tjKey, error) {
	if k, ok := o.cache.get(key); ok {
		return k, nil
	}
	all, err := o.buf.Entries(key)
	if err != nil {
		return nil, err
	}
	k := &tjKey{cached: cached{key: string(key)}, armed: -1}
	if len(all) == 0 {
		k.armed = 0 // nothing stored: no timer waits for it
	}
	for _, e := range all {
		mk := e.Key
		if len(mk) < 21 {
			return nil, fmt.Errorf("a table join state entry of key %q with a map key of %d bytes", key, len(mk))
		}
		rec := tjRecord{
			ts:    e.Value.ts,
			tomb:  e.Value.matched,
			value: e.Value.value,
			mk:    mk,
			src: pipeline.Position{
				Partition: int32(binary.BigEndian.Uint32([]byte(mk[9:13]))),
				Offset:    int64(binary.BigEndian.Uint64([]byte(mk[13:21]))),
				Topic:     mk[21:],
			},
		}
		switch mk[0] {
		case sideStream:
			rec.tomb = false
			k.stream = append(k.stream, rec)
		case sideTable:
			k.versions = append(k.versions, rec)
		default:
			return nil, fmt.Errorf("a table join state entry of key %q of unknown side %q", key, mk[0])
		}
	}
	return k, o.cache.add(k, o.write)
}

// due returns the earliest time k has work at, and whether it has any:
// a waiting stream record to emit, a version making the one before it
// obsolete, or a tombstone to drop.
func (k *tjKey) due() (int64, bool) {
	at, ok := int64(math.MaxInt64), false
	if len(k.stream) > 0 {
		at, ok = k.stream[0].ts, true
	}
	if len(k.versions) > 1 && k.versions[1].ts < at {
		at, ok = k.versions[1].ts, true
	}
	if len(k.versions) > 0 && k.versions[0].tomb && k.versions[0].ts < at {
		at, ok = k.versions[0].ts, true
	}
	return at, ok
}

// arm sets k's timer for its earliest work unless an earlier one is set.
// The work at time t waits for the watermark to pass t, so the timer is at
// t+1.
func (o *tableJoinOp) arm(k *tjKey) error {
	at, ok := k.due()
	if !ok {
		return nil
	}
	at++
	if k.armed > 0 && k.armed <= at {
		return nil
	}
	if err := o.timers.Set([]byte(k.key), time.UnixMilli(at), state.EventTime); err != nil {
		return err
	}
	k.armed = at
	return nil
}

// versionKey is an entry's map key: side, time, and the position read at
// (partition and offset in binary, so that entries of one time sort in the
// order they were written).
func versionKey(side byte, ts int64, src pipeline.Position) string {
	k := make([]byte, 0, 21+len(src.Topic))
	k = append(k, side)
	k = append(k, startKey(ts)...)
	k = binary.BigEndian.AppendUint32(k, uint32(src.Partition))
	k = binary.BigEndian.AppendUint64(k, uint64(src.Offset))
	return string(append(k, src.Topic...))
}

// OnTimer does the key's work before the timer's time t, which the
// watermark has passed: it emits the stream records before t, each with
// the row in force at its time, then drops the versions no record to come
// can need: all but the last before t, and that one too if it is a
// tombstone. Work after t waits for its own timer, so that the join emits
// in time order across keys, as the timers fire.
func (o *tableJoinOp) OnTimer(ctx pipeline.Context, t state.Timer) error {
	k, err := o.entry(t.Key)
	if err != nil {
		return err
	}
	upTo := t.Time.UnixMilli()
	if k.armed == upTo {
		k.armed = 0
	}
	n := 0
	for n < len(k.stream) && k.stream[n].ts < upTo {
		s := &k.stream[n]
		var row []byte
		found := false
		for i := range k.versions {
			v := &k.versions[i]
			if v.ts > s.ts {
				break
			}
			row, found = v.value, !v.tomb
		}
		switch {
		case found:
			ctx.Emit(joinResult(t.Key, s.value, row, s.ts, pipeline.Position{}))
		case o.def.left:
			ctx.Emit(joinResult(t.Key, s.value, nil, s.ts, pipeline.Position{}))
		}
		if s.mk != "" {
			k.gone = append(k.gone, s.mk)
		}
		n++
	}
	k.stream = drop(k.stream, n)
	// The version in force at t is the last one before it.
	last := -1
	for i := range k.versions {
		if k.versions[i].ts < upTo {
			last = i
		}
	}
	n = last
	if last >= 0 && k.versions[last].tomb {
		n++
	}
	for i := range n {
		if mk := k.versions[i].mk; mk != "" {
			k.gone = append(k.gone, mk)
		}
	}
	k.versions = drop(k.versions, n)
	if len(k.gone) > 0 {
		o.cache.touch(k) // the store holds records the key dropped
	}
	return o.arm(k)
}

// drop removes the first n records of rs, keeping its array.
func drop(rs []tjRecord, n int) []tjRecord {
	if n <= 0 {
		return rs
	}
	m := copy(rs, rs[n:])
	clear(rs[m:])
	return rs[:m]
}

// Flush writes what the store has not seen of the cached keys: the
// records they keep, the removal of those they dropped.
func (o *tableJoinOp) Flush(pipeline.Context) error { return o.cache.flush(o.write) }

// write writes k to the store.
func (o *tableJoinOp) write(k *tjKey) error {
	key := []byte(k.key)
	for _, mk := range k.gone {
		if err := o.buf.Remove(key, mk); err != nil {
			return err
		}
	}
	if err := o.store(key, k.stream, sideStream); err != nil {
		return err
	}
	return o.store(key, k.versions, sideTable)
}

// store writes the records of rs not stored yet.
func (o *tableJoinOp) store(key []byte, rs []tjRecord, side byte) error {
	for i := range rs {
		r := &rs[i]
		if r.mk != "" {
			continue
		}
		mk := versionKey(side, r.ts, r.src)
		if err := o.buf.Put(key, mk, joinEntry{ts: r.ts, matched: r.tomb, value: r.value}); err != nil {
			return err
		}
		r.mk = mk
	}
	return nil
}
