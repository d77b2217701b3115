package ops

import (
	"encoding/binary"
	"errors"
	"fmt"
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
	return &tableJoinOp{def: j, buf: buf, timers: tm}, nil
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
// marked "matched" is a tombstone); and timers at the times of both.
type tableJoinOp struct {
	def    *tableJoin
	buf    *state.Map[joinEntry]
	timers *state.Timers
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
	e := joinEntry{ts: ts}
	side := byte(sideStream)
	if ctx.Input() == 1 {
		side = sideTable
		if r.Value.Raw() == nil && !r.Value.Changed() {
			e.matched = true // a tombstone: no row from ts on
		}
	}
	if !e.matched {
		if e.value, err = jsonOf(&r.Value); err != nil {
			return err
		}
	}
	if err := o.buf.Put(key, versionKey(side, ts, r.Source), e); err != nil {
		return err
	}
	// A stream record is final once the watermark is past its time; a
	// version, once it is, makes the ones before it obsolete.
	return o.timers.Set(key, time.UnixMilli(ts+1), state.EventTime)
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

// OnTimer emits the key's stream records the watermark has passed, each
// with the row in force at its time, then drops the versions no record to
// come can need: all but the last before the watermark, and that one too
// if it is a tombstone.
func (o *tableJoinOp) OnTimer(ctx pipeline.Context, t state.Timer) error {
	all, err := o.buf.Entries(t.Key)
	if err != nil {
		return err
	}
	wm := watermarkOf(ctx)
	// Entries sort by side ('S' before 'V'), then time.
	var versions []state.MapEntry[joinEntry]
	for _, e := range all {
		if e.Key[0] == sideTable {
			versions = append(versions, e)
		}
	}
	for _, e := range all {
		if e.Key[0] != sideStream || e.Value.ts >= wm {
			continue
		}
		var row []byte
		found := false
		for _, v := range versions {
			if v.Value.ts > e.Value.ts {
				break
			}
			row, found = v.Value.value, !v.Value.matched
		}
		switch {
		case found:
			ctx.Emit(joinResult(t.Key, e.Value.value, row, e.Value.ts, pipeline.Position{}))
		case o.def.left:
			ctx.Emit(joinResult(t.Key, e.Value.value, nil, e.Value.ts, pipeline.Position{}))
		}
		if err := o.buf.Remove(t.Key, e.Key); err != nil {
			return err
		}
	}
	// The version in force at the watermark is the last one before it.
	last := -1
	for i, v := range versions {
		if v.Value.ts < wm {
			last = i
		}
	}
	for i := range last + 1 {
		if i == last && !versions[i].Value.matched {
			break
		}
		if err := o.buf.Remove(t.Key, versions[i].Key); err != nil {
			return err
		}
	}
	return nil
}
