package main

import (
	"errors"
	"fmt"

	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/state"
)

// limitCheck is a keyed step over two streams, as Flink's connected
// streams with a CoProcessFunction: the first input's records set their
// key's limit, the second's are checked against it, and readings above
// the limit go on as alerts. In YAML:
//
//	steps:
//	  - name: alerts
//	    from: [limits, readings]   # keyed alike
//	    limit_check: {field: temp}
//
// It shows a Go operator with one method per input (Process switches on
// ctx.Input()) and keyed state shared by both; the built-in connect step
// does the same from YAML rules.
type limitCheck struct {
	field string // the reading's field checked against the limit
}

type limitCheckSpec struct {
	Field string `yaml:"field"`
}

func newLimitCheck(s *pipeline.Spec) (pipeline.Definition, error) {
	var ls limitCheckSpec
	if !s.Decode(&ls) {
		return nil, nil
	}
	if ls.Field == "" {
		s.Errorf(".field", "required: the field of a reading checked against its key's limit")
	}
	if s.Inputs != 2 {
		s.Errorf("", "limit_check reads two streams: from: [limits, readings] (found %d)", s.Inputs)
	}
	s.Reads("max", ls.Field) // what Process reads of values, besides nothing else
	return &limitCheck{field: ls.Field}, nil
}

func (l *limitCheck) Outputs() []string   { return nil }
func (l *limitCheck) Fingerprint() string { return "limit_check:v1" }

func (l *limitCheck) NewOperator(pipeline.TaskID) (pipeline.Operator, error) {
	return nil, errors.New("limit_check needs a state store")
}

// NewStatefulOperator registers the operator's keyed state in the task's
// store: each key's limit. The engine keeps it exactly-once (changelog,
// restore, rebalance).
func (l *limitCheck) NewStatefulOperator(_ pipeline.TaskID, st *state.Store) (pipeline.Operator, error) {
	limits, err := state.NewValue[float64](st, "limit", state.TTLConfig{})
	if err != nil {
		return nil, err
	}
	return &limitCheckOp{def: l, limits: limits}, nil
}

type limitCheckOp struct {
	def    *limitCheck
	limits *state.Value[float64]
}

// Process is one method per input.
func (o *limitCheckOp) Process(ctx pipeline.Context, r *pipeline.Record) error {
	key, err := r.KeyBytes()
	if err != nil || key == nil {
		return fmt.Errorf("limit_check needs keyed records: %v", err)
	}
	if ctx.Input() == 0 {
		return o.setLimit(key, r)
	}
	return o.check(ctx, key, r)
}

// setLimit handles a record of the first input: {"max": 30}.
func (o *limitCheckOp) setLimit(key []byte, r *pipeline.Record) error {
	max, err := number(r, "max")
	if err != nil {
		return err
	}
	return o.limits.Put(key, max)
}

// check handles a record of the second input: emits it when its field is
// above its key's limit.
func (o *limitCheckOp) check(ctx pipeline.Context, key []byte, r *pipeline.Record) error {
	limit, ok, err := o.limits.Get(key)
	if err != nil || !ok {
		return err // no limit yet: nothing to check against
	}
	x, err := number(r, o.def.field)
	if err != nil {
		return err
	}
	if x > limit {
		r.Value.Set(map[string]any{"key": string(key), o.def.field: x, "limit": limit})
		ctx.Emit(r)
	}
	return nil
}

// number reads a numeric top-level field of a JSON object value.
func number(r *pipeline.Record, field string) (float64, error) {
	v, err := r.Value.Get()
	if err != nil {
		return 0, err
	}
	m, _ := v.(map[string]any)
	switch n := m[field].(type) {
	case int:
		return float64(n), nil
	case int64:
		return float64(n), nil
	case float64:
		return n, nil
	}
	return 0, fmt.Errorf("field %q is not a number in %v", field, v)
}
