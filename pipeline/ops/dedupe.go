package ops

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/pipeline-run/pipeline/internal/codec"
	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/state"
)

// dedupe drops a record when one with the same key (and, optionally, the
// same id) passed within the TTL:
//
//   - dedupe: {ttl: 10m}                   # by record key
//   - dedupe: {id: value.event_id, ttl: 1h} # by record key and event id
//
// The first record passes and starts the window; duplicates inside it are
// dropped without extending it. What it has seen is keyed state,
// exactly-once with the outputs, so a replayed checkpoint does not make a
// record count as its own duplicate.
type dedupe struct {
	id  *pipeline.Expr
	ttl time.Duration
	fp  string
}

type dedupeSpec struct {
	ID  string        `yaml:"id"`
	TTL time.Duration `yaml:"ttl"`
}

func newDedupe(s *pipeline.Spec) (pipeline.Definition, error) {
	var ds dedupeSpec
	if !s.Decode(&ds) {
		return nil, nil
	}
	d := &dedupe{ttl: ds.TTL}
	if ds.TTL <= 0 {
		s.Errorf(".ttl", "required: how long a key is remembered, e.g. 10m")
	}
	if ds.ID != "" {
		d.id = s.Expr(".id", ds.ID, pipeline.AnyResult)
	}
	sum := sha256.Sum256([]byte("dedupe:v1|" + ds.ID))
	d.fp = "dedupe:v1:" + hex.EncodeToString(sum[:12])
	return d, nil
}

func (d *dedupe) Outputs() []string   { return nil }
func (d *dedupe) Fingerprint() string { return d.fp }
func (d *dedupe) NewOperator(pipeline.TaskID) (pipeline.Operator, error) {
	return nil, fmt.Errorf("dedupe needs a state store")
}

func (d *dedupe) NewStatefulOperator(_ pipeline.TaskID, st *state.Store) (pipeline.Operator, error) {
	seen, err := state.NewValue[int64](st, "seen", state.TTLConfig{TTL: d.ttl, Update: state.OnCreateAndWrite})
	if err != nil {
		return nil, err
	}
	return &dedupeOp{def: d, seen: seen}, nil
}

type dedupeOp struct {
	def  *dedupe
	seen *state.Value[int64]
}

func (o *dedupeOp) Process(ctx pipeline.Context, r *pipeline.Record) error {
	key, err := r.KeyBytes()
	if err != nil {
		return err
	}
	if key == nil {
		return fmt.Errorf("dedupe needs a record key; this record has none")
	}
	if o.def.id != nil {
		id, err := ctx.Eval().Eval(o.def.id, r)
		if err != nil {
			return err
		}
		b, err := codec.AppendJSON(append(append([]byte(nil), key...), 0), id) // never into the record's own bytes
		if err != nil {
			return fmt.Errorf("id: %w", err)
		}
		key = b
	}
	_, dup, err := o.seen.Get(key)
	if err != nil {
		return err
	}
	if dup {
		return nil
	}
	if err := o.seen.Put(key, r.Timestamp.UnixMilli()); err != nil {
		return err
	}
	ctx.Emit(r)
	return nil
}
