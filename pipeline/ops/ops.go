package ops

import (
	"fmt"
	"sort"

	"github.com/pipeline-run/pipeline/pipeline"
)

// stateless is a Definition whose operator is shared by every task: it
// keeps no per-task state.
type stateless struct {
	op      pipeline.Operator
	outputs []string
}

func (s stateless) Outputs() []string                                      { return s.outputs }
func (s stateless) NewOperator(pipeline.TaskID) (pipeline.Operator, error) { return s.op, nil }

// KeepsNoRecords: the stateless operators emit what they make of a
// record, or drop it, before Process returns (pipeline.Forgetter).
func (s stateless) KeepsNoRecords() bool { return true }

// KeepsNoInput: nor any of their bytes (pipeline.InputForgetter).
func (s stateless) KeepsNoInput() bool { return true }

// ChangesKeys reports whether the operator sets record keys: a map or a
// flat_map with a key expression.
func (s stateless) ChangesKeys() bool {
	switch op := s.op.(type) {
	case *mapOp:
		return op.key != nil
	case *flatMap:
		return op.key != nil
	}
	return false
}

// filter keeps the records its predicate holds for.
//
//	filter: "value.temp > 30"
type filter struct{ pred *pipeline.Expr }

func newFilter(s *pipeline.Spec) (pipeline.Definition, error) {
	src, ok := s.Value.(string)
	if !ok {
		s.Errorf("", "expected an expression string, got %s", pipeline.Describe(s.Value))
		return nil, nil
	}
	return stateless{op: &filter{pred: s.Expr("", src, pipeline.BoolResult)}}, nil
}

func (f *filter) Process(ctx pipeline.Context, r *pipeline.Record) error {
	ok, err := ctx.Eval().EvalBool(f.pred, r)
	if err != nil {
		return err
	}
	if ok {
		ctx.Emit(r)
	}
	return nil
}

// mapOp sets a new key, value, headers or timestamp from expressions. Parts
// it does not name are kept. A bare string is the value expression.
//
//	map: "{id: value.sensor, t: value.temperature}"
//	map: {key: value.sensor, value: "...", headers: {source: topic}}
type mapOp struct {
	key, value, timestamp *pipeline.Expr
	headers               []pipeline.HeaderExpr
}

type mapSpec struct {
	Key       string            `yaml:"key"`
	Value     string            `yaml:"value"`
	Headers   map[string]string `yaml:"headers"`
	Timestamp string            `yaml:"timestamp"`
}

func newMap(s *pipeline.Spec) (pipeline.Definition, error) {
	m := &mapOp{}
	if src, ok := s.Value.(string); ok {
		m.value = s.Expr("", src, pipeline.AnyResult)
		return stateless{op: m}, nil
	}
	var ms mapSpec
	if !s.Decode(&ms) {
		return nil, nil
	}
	if ms.Key == "" && ms.Value == "" && len(ms.Headers) == 0 && ms.Timestamp == "" {
		s.Errorf("", "nothing to map: set key, value, headers or timestamp")
		return nil, nil
	}
	if ms.Key != "" {
		m.key = s.Expr(".key", ms.Key, pipeline.AnyResult)
	}
	if ms.Value != "" {
		m.value = s.Expr(".value", ms.Value, pipeline.AnyResult)
	}
	if ms.Timestamp != "" {
		m.timestamp = s.Expr(".timestamp", ms.Timestamp, pipeline.AnyResult)
	}
	m.headers = s.HeaderExprs(".headers", ms.Headers)
	return stateless{op: m}, nil
}

func (m *mapOp) Process(ctx pipeline.Context, r *pipeline.Record) error {
	// Evaluate everything against the record as it came in, then assign:
	// `key: value.id` and `value: "{...}"` must both see the old value.
	var k any
	var v pipeline.Value
	var err error
	if m.key != nil {
		if k, err = ctx.Eval().Eval(m.key, r); err != nil {
			return err
		}
	}
	if m.value != nil {
		if v, err = ctx.Eval().EvalValue(m.value, r); err != nil {
			return err
		}
	}
	var hv [][]byte
	if len(m.headers) > 0 {
		hv = make([][]byte, len(m.headers))
		for i, h := range m.headers {
			x, err := ctx.Eval().Eval(h.Expr, r)
			if err != nil {
				return err
			}
			if hv[i], err = pipeline.Encode(x, pipeline.String); err != nil {
				return fmt.Errorf("header %q: %w", h.Name, err)
			}
		}
	}
	if m.timestamp != nil {
		x, err := ctx.Eval().Eval(m.timestamp, r)
		if err != nil {
			return err
		}
		ts, err := pipeline.ToTime(x)
		if err != nil {
			return fmt.Errorf("timestamp: %w", err)
		}
		r.Timestamp = ts
	}
	if m.key != nil {
		r.Key.Set(k)
	}
	if m.value != nil {
		r.Value.Replace(v)
	}
	for i, h := range m.headers {
		r.SetHeader(h.Name, hv[i])
	}
	ctx.Emit(r)
	return nil
}

// flatMap emits one record per element of a list. Each gets the element as
// its value and keeps the input's key, unless a key expression (which sees
// the element as `value`) says otherwise.
//
//	flat_map: "value.items"
//	flat_map: {values: "value.items", key: "value.id"}
type flatMap struct {
	values, key *pipeline.Expr
}

type flatMapSpec struct {
	Values string `yaml:"values"`
	Key    string `yaml:"key"`
}

func newFlatMap(s *pipeline.Spec) (pipeline.Definition, error) {
	f := &flatMap{}
	if src, ok := s.Value.(string); ok {
		f.values = s.Expr("", src, pipeline.AnyResult)
		return stateless{op: f}, nil
	}
	var fs flatMapSpec
	if !s.Decode(&fs) {
		return nil, nil
	}
	if fs.Values == "" {
		s.Errorf(".values", "required")
		return nil, nil
	}
	f.values = s.Expr(".values", fs.Values, pipeline.AnyResult)
	if fs.Key != "" {
		f.key = s.Expr(".key", fs.Key, pipeline.AnyResult)
	}
	return stateless{op: f}, nil
}

func (f *flatMap) Process(ctx pipeline.Context, r *pipeline.Record) error {
	list, err := ctx.Eval().EvalList(f.values, r)
	if err != nil {
		return err
	}
	out := make([]*pipeline.Record, len(list))
	for i, x := range list {
		c := r.Clone()
		c.Value.Set(x)
		if f.key != nil {
			k, err := ctx.Eval().Eval(f.key, c)
			if err != nil {
				return err
			}
			c.Key.Set(k)
		}
		out[i] = c
	}
	// Emit only once every element evaluated: a failure must not leave
	// half of an input's outputs behind.
	for _, c := range out {
		ctx.Emit(c)
	}
	return nil
}

// split sends each record to every named output whose predicate holds, and
// to the default output when none does.
//
//	split: {hot: "value.temp > 30", cold: "value.temp < 0"}
type split struct {
	names []string
	preds []*pipeline.Expr
}

func newSplit(s *pipeline.Spec) (pipeline.Definition, error) {
	m, ok := s.Value.(map[string]any)
	if !ok || len(m) == 0 {
		s.Errorf("", "expected a map of output name to predicate, got %s", pipeline.Describe(s.Value))
		return nil, nil
	}
	sp := &split{}
	for name := range m {
		sp.names = append(sp.names, name)
	}
	sort.Strings(sp.names)
	for _, name := range sp.names {
		if !validOutputName(name) {
			s.Errorf("."+name, "output name must be letters, digits, _ or -, and not \"default\"")
		}
		src, ok := m[name].(string)
		if !ok {
			s.Errorf("."+name, "expected a predicate string, got %s", pipeline.Describe(m[name]))
			continue
		}
		sp.preds = append(sp.preds, s.Expr("."+name, src, pipeline.BoolResult))
	}
	return stateless{op: sp, outputs: append([]string(nil), sp.names...)}, nil
}

func (sp *split) Process(ctx pipeline.Context, r *pipeline.Record) error {
	var hits []string
	for i, p := range sp.preds {
		ok, err := ctx.Eval().EvalBool(p, r)
		if err != nil {
			return err
		}
		if ok {
			hits = append(hits, sp.names[i])
		}
	}
	if len(hits) == 0 {
		ctx.Emit(r)
		return nil
	}
	for i, name := range hits {
		out := r
		if i < len(hits)-1 {
			out = r.Clone()
		}
		ctx.EmitTo(name, out)
	}
	return nil
}

// route sends each record to the first output whose predicate holds, in
// the order listed, and to the default output when none does.
//
//	route: [{hot: "value.temp > 30"}, {warm: "value.temp > 20"}]
type route struct{ split }

func newRoute(s *pipeline.Spec) (pipeline.Definition, error) {
	list, ok := s.Value.([]any)
	if !ok || len(list) == 0 {
		s.Errorf("", "expected a list of {output: predicate}, got %s", pipeline.Describe(s.Value))
		return nil, nil
	}
	rt := &route{}
	seen := map[string]bool{}
	for i, item := range list {
		sub := fmt.Sprintf("[%d]", i)
		m, ok := item.(map[string]any)
		if !ok || len(m) != 1 {
			s.Errorf(sub, "expected one {output: predicate}")
			continue
		}
		for name, v := range m {
			if !validOutputName(name) {
				s.Errorf(sub+"."+name, "output name must be letters, digits, _ or -, and not \"default\"")
			}
			if seen[name] {
				s.Errorf(sub+"."+name, "output listed twice")
			}
			seen[name] = true
			src, ok := v.(string)
			if !ok {
				s.Errorf(sub+"."+name, "expected a predicate string, got %s", pipeline.Describe(v))
				continue
			}
			rt.names = append(rt.names, name)
			rt.preds = append(rt.preds, s.Expr(sub+"."+name, src, pipeline.BoolResult))
		}
	}
	outs := append([]string(nil), rt.names...)
	sort.Strings(outs)
	return stateless{op: rt, outputs: outs}, nil
}

func (rt *route) Process(ctx pipeline.Context, r *pipeline.Record) error {
	for i, p := range rt.preds {
		ok, err := ctx.Eval().EvalBool(p, r)
		if err != nil {
			return err
		}
		if ok {
			ctx.EmitTo(rt.names[i], r)
			return nil
		}
	}
	ctx.Emit(r)
	return nil
}

func validOutputName(s string) bool {
	if s == "" || s == "default" {
		return false
	}
	for _, c := range s {
		if !(c == '_' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// union merges every stream it reads into one:
//
//   - name: all
//     from: [a, b]
//     union: {}
type union struct{}

func newUnion(s *pipeline.Spec) (pipeline.Definition, error) {
	switch v := s.Value.(type) {
	case nil:
	case map[string]any:
		if len(v) != 0 {
			s.Errorf("", "union takes no settings; list its inputs under from")
		}
	default:
		s.Errorf("", "union takes no settings; list its inputs under from")
	}
	return stateless{op: union{}}, nil
}

func (union) Process(ctx pipeline.Context, r *pipeline.Record) error {
	ctx.Emit(r)
	return nil
}
