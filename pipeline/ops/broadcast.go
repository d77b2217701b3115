package ops

import (
	"errors"
	"fmt"

	"github.com/pipeline-run/pipeline/internal/codec"
	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/state"
)

// broadcastJoin looks the records of a stream up in a table every task
// holds whole, as a Kafka Streams stream–GlobalKTable join does: the second
// input is a broadcast step, so every task reads every row, and a stream
// record finds its row by any key, not only its own:
//
//	steps:
//	  - name: limits_everywhere
//	    from: limits                      # rows keyed by sensor
//	    broadcast: {}
//	  - name: checked
//	    from: [readings, limits_everywhere]
//	    broadcast_join:
//	      key: value.sensor               # the row to look up (default: the record's key)
//	      type: left                      # inner (default) or left
//
// Rows apply in the order they arrive (a tombstone deletes one), and a
// stream record sees the rows its task had applied when it came; it is
// emitted at once, keyed and stamped like it, as {"key": <its key>, "left":
// <the record>, "right": <the row>}, "right" null (type left) or nothing
// (inner) when there is no row. Each task keeps the whole table in its
// keyed state: restored with the task after a crash, moved with it on a
// rebalance.
type broadcastJoin struct {
	key  *pipeline.Expr // nil: the record key
	left bool
	fp   string
}

type broadcastJoinSpec struct {
	Key  string `yaml:"key"`
	Type string `yaml:"type"`
}

func newBroadcastJoin(s *pipeline.Spec) (pipeline.Definition, error) {
	var bs broadcastJoinSpec
	if s.Value != nil && !s.Decode(&bs) {
		return nil, nil
	}
	j := &broadcastJoin{}
	if s.Inputs != 2 {
		s.Errorf("", "a broadcast join reads two streams, the stream and a broadcast step: give them as from: [stream, broadcast] (found %d)", s.Inputs)
	}
	if bs.Key != "" {
		j.key = s.Expr(".key", bs.Key, pipeline.AnyResult)
	}
	switch bs.Type {
	case "", "inner":
	case "left":
		j.left = true
	default:
		s.Errorf(".type", "must be inner (records that find a row) or left (every record, \"right\": null without a row), found %q", bs.Type)
	}
	j.fp = fmt.Sprintf("broadcast_join:v1:%v", j.left)
	return j, nil
}

func (j *broadcastJoin) Outputs() []string   { return nil }
func (j *broadcastJoin) Fingerprint() string { return j.fp }

// MergesInputs: a result stands for a record and a row.
func (j *broadcastJoin) MergesInputs() (sub, what, instead string) {
	return "", "a join writes one record for two inputs", "leave audit.source_positions off for this pipeline"
}

func (j *broadcastJoin) NewOperator(pipeline.TaskID) (pipeline.Operator, error) {
	return nil, errors.New("broadcast_join needs a state store")
}

func (j *broadcastJoin) NewStatefulOperator(_ pipeline.TaskID, st *state.Store) (pipeline.Operator, error) {
	rows, err := state.NewMap[joinEntry](st, "rows", state.TTLConfig{}, state.WithCodec[joinEntry](joinEntryCodec{}))
	if err != nil {
		return nil, err
	}
	return &broadcastJoinOp{def: j, rows: rows}, nil
}

// tableKey is the one state key the broadcast table lives under: it is
// the task's, not any record's.
var tableKey = []byte{0}

type broadcastJoinOp struct {
	def  *broadcastJoin
	rows *state.Map[joinEntry]
}

func (o *broadcastJoinOp) Process(ctx pipeline.Context, r *pipeline.Record) error {
	if ctx.Input() == 1 {
		k, err := r.KeyBytes()
		if err != nil {
			return err
		}
		if r.Value.Raw() == nil && !r.Value.Changed() {
			return o.rows.Remove(tableKey, string(k)) // a tombstone
		}
		v, err := jsonOf(&r.Value)
		if err != nil {
			return err
		}
		return o.rows.Put(tableKey, string(k), joinEntry{ts: r.Timestamp.UnixMilli(), value: v})
	}
	var look string
	if o.def.key == nil {
		k, err := r.KeyBytes()
		if err != nil {
			return err
		}
		look = string(k)
	} else {
		x, err := ctx.Eval().Eval(o.def.key, r)
		if err != nil {
			return fmt.Errorf("key: %w", err)
		}
		switch t := x.(type) {
		case string:
			look = t
		case []byte:
			look = string(t)
		case nil:
			return fmt.Errorf("key: the lookup key is null")
		default:
			b, err := codec.AppendJSON(nil, t)
			if err != nil {
				return fmt.Errorf("key: %w", err)
			}
			look = string(b)
		}
	}
	row, found, err := o.rows.Get(tableKey, look)
	if err != nil {
		return err
	}
	if !found && !o.def.left {
		return nil
	}
	left, err := jsonOf(&r.Value)
	if err != nil {
		return err
	}
	key, err := r.KeyBytes()
	if err != nil {
		return err
	}
	res := joinResult(key, left, row.value, r.Timestamp.UnixMilli(), r.Source)
	if key == nil {
		res.Key = pipeline.Value{} // an unkeyed record's result is unkeyed
	}
	ctx.Emit(res)
	return nil
}
