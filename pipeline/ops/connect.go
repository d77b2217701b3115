package ops

import (
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/pipeline-run/pipeline/internal/codec"
	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/state"
)

// connect processes two (or more) keyed streams of different shapes with
// one keyed state, as Flink's connected streams with a CoProcessFunction
// do: a rule per input says what a record of that input does to its key's
// state fields and what it emits.
//
//	steps:
//	  - name: alerts
//	    from: [limits, readings]        # keyed alike
//	    connect:
//	      state: [limit]                # the key's state fields; each starts null
//	      on:
//	        - set: {limit: value.max}   # a limits record: remember its max
//	        - when: state.limit != nil && value.temp > state.limit
//	          emit: '{sensor: key, temp: value.temp, limit: state.limit}'
//
// Rule i applies to the records of from[i], in the order they arrive:
// when (a predicate over the record and state, the key's fields as they
// are) decides whether the record does anything; emit computes the value of
// a record to send on (keyed like the input, stamped like it) from the
// record and the state before set; set assigns fields from expressions
// evaluated against the state before it. Records of different inputs are
// processed in the order they arrive, as in Flink: what a record of one
// input sees of the other's updates depends on that order.
type connect struct {
	fields []string
	rules  []connectRule
	fp     string
}

type connectRule struct {
	when *pipeline.Expr
	emit *pipeline.Expr
	set  []connectSet
}

type connectSet struct {
	field string
	expr  *pipeline.Expr
}

type connectSpec struct {
	State []string          `yaml:"state"`
	On    []connectRuleSpec `yaml:"on"`
}

type connectRuleSpec struct {
	When string            `yaml:"when"`
	Emit string            `yaml:"emit"`
	Set  map[string]string `yaml:"set"`
}

func newConnect(s *pipeline.Spec) (pipeline.Definition, error) {
	var cs connectSpec
	if !s.Decode(&cs) {
		return nil, nil
	}
	c := &connect{}
	if s.Inputs < 2 {
		s.Errorf("", "connect reads two or more streams, keyed alike: give them as from: [a, b] (found %d)", s.Inputs)
	}
	if len(cs.State) == 0 {
		s.Errorf(".state", "required: the names of the key's state fields, such as [limit]")
	}
	for i, f := range cs.State {
		if f == "" || slices.Contains(cs.State[:i], f) {
			s.Errorf(fmt.Sprintf(".state[%d]", i), "a field name, once: found %q", f)
		}
	}
	c.fields = cs.State
	if len(cs.On) != s.Inputs {
		s.Errorf(".on", "one rule per input, in the order of from: found %d rules for %d inputs", len(cs.On), s.Inputs)
	}
	for i, rs := range cs.On {
		sub := fmt.Sprintf(".on[%d]", i)
		var r connectRule
		if rs.When != "" {
			r.when = s.Expr(sub+".when", rs.When, pipeline.BoolResult)
		}
		if rs.Emit != "" {
			r.emit = s.Expr(sub+".emit", rs.Emit, pipeline.AnyResult)
		}
		names := make([]string, 0, len(rs.Set))
		for f := range rs.Set {
			names = append(names, f)
		}
		sort.Strings(names)
		for _, f := range names {
			if !slices.Contains(cs.State, f) {
				s.Errorf(sub+".set."+f, "%q is not a state field (state: %v)", f, cs.State)
				continue
			}
			r.set = append(r.set, connectSet{field: f, expr: s.Expr(sub+".set."+f, rs.Set[f], pipeline.AnyResult)})
		}
		if r.emit == nil && len(r.set) == 0 {
			s.Errorf(sub, "a rule that neither sets a field nor emits does nothing: give set, emit or both")
		}
		c.rules = append(c.rules, r)
	}
	c.fp = "connect:v1:" + fmt.Sprint(cs.State)
	return c, nil
}

func (c *connect) Fingerprint() string { return c.fp }
func (c *connect) Outputs() []string   { return nil }

func (c *connect) NewOperator(pipeline.TaskID) (pipeline.Operator, error) {
	return nil, errors.New("connect needs a state store")
}

func (c *connect) NewStatefulOperator(_ pipeline.TaskID, st *state.Store) (pipeline.Operator, error) {
	v, err := state.NewValue[map[string]any](st, "fields", state.TTLConfig{}, state.WithCodec[map[string]any](codec.Acc{}))
	if err != nil {
		return nil, err
	}
	return &connectOp{def: c, fields: v}, nil
}

// connectOp is a connect step in one task; its state is each key's fields.
type connectOp struct {
	def    *connect
	fields *state.Value[map[string]any]
	vals   []any // scratch
}

func (o *connectOp) Process(ctx pipeline.Context, r *pipeline.Record) error {
	key, err := r.KeyBytes()
	if err != nil {
		return err
	}
	if key == nil {
		return fmt.Errorf("connect needs a record key; this record has none (key the streams with key_by)")
	}
	rule := o.def.rules[ctx.Input()]
	st, _, err := o.fields.Get(key)
	if err != nil {
		return err
	}
	if st == nil {
		st = make(map[string]any, len(o.def.fields))
	}
	// Every field is there, null until set, so expressions may name any.
	for _, f := range o.def.fields {
		if _, ok := st[f]; !ok {
			st[f] = nil
		}
	}
	ev := ctx.Eval()
	if rule.when != nil {
		ok, err := ev.EvalState(rule.when, r, st)
		if err != nil {
			return fmt.Errorf("when: %w", err)
		}
		if b, _ := ok.(bool); !b {
			return nil
		}
	}
	var out any
	if rule.emit != nil {
		if out, err = ev.EvalState(rule.emit, r, st); err != nil {
			return fmt.Errorf("emit: %w", err)
		}
	}
	if len(rule.set) > 0 {
		o.vals = o.vals[:0]
		for _, s := range rule.set {
			x, err := ev.EvalState(s.expr, r, st)
			if err != nil {
				return fmt.Errorf("set.%s: %w", s.field, err)
			}
			o.vals = append(o.vals, x)
		}
		next := make(map[string]any, len(st))
		for k, v := range st {
			if v != nil {
				next[k] = v
			}
		}
		for i, s := range rule.set {
			if o.vals[i] == nil {
				delete(next, s.field)
			} else {
				next[s.field] = o.vals[i]
			}
		}
		if len(next) == 0 {
			err = o.fields.Delete(key)
		} else {
			err = o.fields.Put(key, next)
		}
		if err != nil {
			return err
		}
	}
	if rule.emit != nil {
		r.Value = pipeline.ObjectValue(out)
		ctx.Emit(r)
	}
	return nil
}
