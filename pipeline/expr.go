package pipeline

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/vm"
	exprruntime "github.com/expr-lang/expr/vm/runtime"

	"github.com/pipeline-run/pipeline/internal/codec"
)

// ExprEnv is what an expression sees. Expressions name its fields in lower
// case: key, value, headers, topic, partition, offset, timestamp (Unix
// milliseconds) and, in reduce expressions, state.
type ExprEnv struct {
	Key       any               `expr:"key"`
	Value     any               `expr:"value"`
	Headers   map[string]string `expr:"headers"`
	Topic     string            `expr:"topic"`
	Partition int               `expr:"partition"`
	Offset    int64             `expr:"offset"`
	Timestamp int64             `expr:"timestamp"`
	State     any               `expr:"state"`
}

type envField uint8

const (
	useKey envField = 1 << iota
	useValue
	useHeaders
)

// Expr is an expression compiled once at start-up. It is safe for
// concurrent use; each goroutine evaluates it with its own Evaluator.
type Expr struct {
	src  string
	prog *vm.Program
	uses envField
	// valueFields are the top-level fields of value the expression reads
	// by name (value.f, value?.f, value["f"]). wholeValue is set when it
	// reads value any other way: passes it on, ranges over it, indexes it
	// with a computed name, or reaches it through $env.
	valueFields []string
	wholeValue  bool
	// direct, when set, is the whole expression: value.<field> (field),
	// value or key, which Eval reads without running the program.
	direct directRead
	field  string
	// fast, when set, evaluates the expression without the VM (see
	// compileFast); bool says the VM is asked for a bool.
	fast fastFn
	bool bool
	// object, when set, is the whole expression: an object literal, which
	// EvalValue builds as a list of fields (see fastObjectOf).
	object *fastObject
}

// directRead is an expression simple enough to read without the VM.
type directRead uint8

const (
	notDirect directRead = iota
	directValueField
	directValue
	directKey
)

// ExprResult constrains what an expression must return.
type ExprResult uint8

const (
	AnyResult ExprResult = iota
	BoolResult
)

// CompileExpr compiles src. The error carries the parser's message with the
// position in src.
func CompileExpr(src string, want ExprResult) (*Expr, error) {
	return compileExpr(src, want, true)
}

func compileExpr(src string, want ExprResult, fastMembers bool) (*Expr, error) {
	opts := []expr.Option{expr.Env(ExprEnv{})}
	if fastMembers {
		opts = append(opts, expr.Function(memberFunc, member), expr.Patch(memberPatcher{}))
	}
	if want == BoolResult {
		opts = append(opts, expr.AsBool())
	}
	prog, err := expr.Compile(src, opts...)
	if err != nil {
		return nil, fmt.Errorf("expression %q: %v", src, err)
	}
	e := &Expr{src: src, prog: prog, bool: want == BoolResult}
	node := prog.Node()
	ast.Walk(&node, &usesVisitor{uses: &e.uses})
	fv := &fieldsVisitor{}
	ast.Walk(&node, fv)
	e.valueFields, e.wholeValue = fv.fields, fv.named < fv.all
	if want == AnyResult {
		e.direct, e.field = directOf(node)
	}
	e.fast = compileFast(node)
	if want == AnyResult && e.fast != nil {
		e.object = fastObjectOf(node)
	}
	return e, nil
}

// directOf says whether node, a whole expression, is one Eval reads
// without the VM: the program costs ~10× a map lookup to start.
func directOf(node ast.Node) (directRead, string) {
	switch t := node.(type) {
	case *ast.IdentifierNode:
		switch t.Value {
		case "value":
			return directValue, ""
		case "key":
			return directKey, ""
		}
	case *ast.CallNode:
		// What memberPatcher made of value.f.
		id, ok := t.Callee.(*ast.IdentifierNode)
		if !ok || id.Value != memberFunc || len(t.Arguments) != 2 {
			break
		}
		obj, ok := t.Arguments[0].(*ast.IdentifierNode)
		name, ok2 := t.Arguments[1].(*ast.StringNode)
		if ok && ok2 && obj.Value == "value" {
			return directValueField, codec.Intern(name.Value)
		}
	}
	return notDirect, ""
}

// fieldsVisitor finds the fields of value an expression reads. It counts
// every mention of value, and those that are a field access by a constant
// name: when the counts differ, value is read some other way. A variable
// of a let named value counts as value, which errs on the side of reading.
type fieldsVisitor struct {
	fields     []string
	named, all int
}

func (v *fieldsVisitor) Visit(n *ast.Node) {
	var obj, prop ast.Node
	switch t := (*n).(type) {
	case *ast.IdentifierNode:
		switch t.Value {
		case "value":
			v.all++
		case "$env":
			v.all++ // $env.value, $env["value"]: count it as a whole read
		}
		return
	case *ast.CallNode:
		// What memberPatcher made of value.f.
		if id, ok := t.Callee.(*ast.IdentifierNode); !ok || id.Value != memberFunc || len(t.Arguments) != 2 {
			return
		}
		obj, prop = t.Arguments[0], t.Arguments[1]
	case *ast.MemberNode:
		if t.Method {
			return
		}
		obj, prop = t.Node, t.Property
	default:
		return
	}
	id, ok := obj.(*ast.IdentifierNode)
	if !ok || id.Value != "value" {
		return
	}
	name, ok := prop.(*ast.StringNode)
	if !ok {
		return
	}
	v.named++
	if !slices.Contains(v.fields, name.Value) {
		v.fields = append(v.fields, name.Value)
	}
}

// memberFunc is what memberPatcher turns field access on untyped values
// into. Users can name it too, to no harm.
const memberFunc = "_pipeline_member"

// memberPatcher rewrites obj.name and obj["name"], where obj has no static
// type (key, value, state and what comes out of them), into a call of
// member. expr reads such fields through reflection, which allocates on
// every access (MapIndex copies the element); decoded JSON objects are
// plain maps, read here without it. What the checker knows the type of is
// left alone, so type errors are still found at start-up.
type memberPatcher struct{}

func (memberPatcher) Visit(n *ast.Node) {
	m, ok := (*n).(*ast.MemberNode)
	if !ok || m.Optional || m.Method {
		return
	}
	name, ok := m.Property.(*ast.StringNode)
	if !ok || m.Node.Type() == nil || m.Node.Type().Kind() != reflect.Interface {
		return
	}
	ast.Patch(n, &ast.CallNode{
		Callee:    &ast.IdentifierNode{Value: memberFunc},
		Arguments: []ast.Node{m.Node, name},
	})
}

// member is obj.name: a map's entry (nil when missing, as expr gives),
// anything else as expr reads it.
func member(args ...any) (any, error) {
	name := args[1].(string)
	switch obj := args[0].(type) {
	case map[string]any:
		return obj[name], nil
	case nil:
		return nil, fmt.Errorf("cannot fetch %s from <nil>", name)
	default:
		return exprruntime.Fetch(obj, name), nil
	}
}

// String returns the expression's source.
func (e *Expr) String() string { return e.src }

type usesVisitor struct{ uses *envField }

func (v *usesVisitor) Visit(n *ast.Node) {
	id, ok := (*n).(*ast.IdentifierNode)
	if !ok {
		return
	}
	switch id.Value {
	case "key":
		*v.uses |= useKey
	case "value":
		*v.uses |= useValue
	case "headers":
		*v.uses |= useHeaders
	}
}

// Evaluator evaluates expressions against records. It is not safe for
// concurrent use: give each task or worker its own.
type Evaluator struct {
	vm   vm.VM
	env  ExprEnv
	fenv fastEnv
	// fields holds the fields of the object literals EvalValue returns,
	// many to an allocation.
	fields DecodeBuffer
	// json, when set, holds the object literals EvalValue returns written
	// as JSON (WriteObjectsAsJSON).
	json *codec.Chunk
}

// WriteObjectsAsJSON makes EvalValue return the object literals it builds
// without the expression VM as their JSON, written at once, rather than as
// fields that a sink would encode later: the engine calls it for a step
// whose one reader is a sink writing values as they are. A step that reads
// such a value decodes it, as it would a record read from a topic.
func (ev *Evaluator) WriteObjectsAsJSON() { ev.json = new(codec.Chunk) }

// WritesObjectsAsJSON reports whether WriteObjectsAsJSON was called.
func (ev *Evaluator) WritesObjectsAsJSON() bool { return ev.json != nil }

// appendObject writes o as JSON to ev.json, byte for byte as the fields
// EvalValue would build are written (codec.AppendJSONFields); ok is false,
// and nothing kept, where the VM must answer or a value has no JSON.
func (ev *Evaluator) appendObject(o *fastObject, env *fastEnv) ([]byte, bool) {
	in := &env.r.Value
	copies := in.split && !in.decoded
	b := append(ev.json.Tail(), '{')
	var err error
	for i, f := range o.vals {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, o.names[i]...)
		if copies && o.from[i] != "" {
			switch src := in.fieldAt(o.from[i]); {
			case src == nil:
				b = append(b, "null"...)
			case src.Raw != nil:
				b = append(b, src.Raw...) // as read
			default:
				if b, err = codec.AppendJSON(b, src.Value); err != nil {
					return nil, false
				}
			}
			continue
		}
		v, ok := f(env)
		if !ok {
			return nil, false
		}
		if v.k == vInt || v.k == vInt|k64 {
			b = strconv.AppendInt(b, int64(v.i()), 10)
		} else if b, err = codec.AppendJSON(b, v.box()); err != nil {
			return nil, false
		}
	}
	return ev.json.Keep(append(b, '}')), true
}

// EvalInt evaluates e against r for a caller that keeps whole numbers
// unboxed: ok is true, and n the value, when Eval would return the int n;
// false when Eval would return something else, or fail, or when telling
// would take Eval's work (call Eval then). Fields of JSON values read as
// they were written are read without building them.
func (ev *Evaluator) EvalInt(e *Expr, r *Record) (n int, ok bool) {
	n, _, ok = ev.EvalIntRaw(e, r)
	return n, ok
}

// EvalIntRaw is EvalInt that also returns, when n is a field of r's JSON
// value read as it was written, its digits there (as
// strconv.AppendInt would write n: the decoder keeps only such), valid
// while r's value is; nil otherwise.
func (ev *Evaluator) EvalIntRaw(e *Expr, r *Record) (n int, raw []byte, ok bool) {
	if e.direct == directValueField {
		v := &r.Value
		if v.load() != nil || !v.split || v.decoded {
			return 0, nil, false
		}
		f := v.fieldAt(e.field)
		if f == nil {
			return 0, nil, false
		}
		if f.Value == nil {
			if n, ok = f.RawInt(); ok {
				return n, f.Raw, true
			}
			return 0, nil, false
		}
		n, ok = f.Value.(int)
		return n, nil, ok
	}
	if e.fast == nil || e.direct != notDirect {
		return 0, nil, false
	}
	env, err := ev.readyFast(e, r, nil)
	if err != nil {
		return 0, nil, false
	}
	x, ok := e.fast(env)
	if !ok || x.k != vInt {
		return 0, nil, false
	}
	return x.i(), nil, true
}

// Reuse lets the evaluator build the values EvalValue returns in the
// memory of those it returned before: call it only when none of them is
// used any more. The engine does, between batches, in a graph whose steps
// are all Forgetters.
func (ev *Evaluator) Reuse() { ev.fields.Reuse() }

// Eval evaluates e against r. Only the parts of r the expression names are
// decoded.
func (ev *Evaluator) Eval(e *Expr, r *Record) (any, error) {
	return ev.EvalState(e, r, nil)
}

// EvalState is Eval with the state variable bound.
func (ev *Evaluator) EvalState(e *Expr, r *Record, state any) (any, error) {
	if e.direct != notDirect {
		if out, ok, err := e.read(r); ok || err != nil {
			return out, err
		}
	}
	if e.fast != nil {
		if out, ok, err := ev.evalFast(e, r, state); ok || err != nil {
			return out, err
		}
	}
	env := &ev.env
	*env = ExprEnv{
		Topic:     r.Source.Topic,
		Partition: int(r.Source.Partition),
		Offset:    r.Source.Offset,
		Timestamp: r.Timestamp.UnixMilli(),
		State:     state,
	}
	if e.uses&useKey != 0 {
		k, err := r.Key.Get()
		if err != nil {
			return nil, fmt.Errorf("key: %w", err)
		}
		env.Key = k
	}
	if e.uses&useValue != 0 {
		v, err := r.Value.Get()
		if err != nil {
			return nil, fmt.Errorf("value: %w", err)
		}
		env.Value = v
	}
	if e.uses&useHeaders != 0 && len(r.Headers) > 0 {
		env.Headers = make(map[string]string, len(r.Headers))
		for _, h := range r.Headers {
			env.Headers[h.Key] = string(h.Value)
		}
	}
	out, err := ev.vm.Run(e.prog, env)
	if err != nil {
		return nil, fmt.Errorf("evaluating %q: %w", e.src, err)
	}
	return out, nil
}

// EvalValue evaluates e against r, as Eval does, as a Value for
// Value.Replace. The value of an object literal ({a: ..., b: ...}) is kept
// as its fields: written out without building a map, which is built only
// if something reads the value whole.
func (ev *Evaluator) EvalValue(e *Expr, r *Record) (Value, error) {
	if o := e.object; o != nil {
		env, err := ev.readyFast(e, r, nil)
		if err != nil {
			return Value{}, err
		}
		if ev.json != nil {
			if b, ok := ev.appendObject(o, env); ok {
				return RawValue(b, JSON), nil
			}
		}
		fs := ev.fields.take(len(o.keys))[:len(o.keys)]
		in := &r.Value
		copies := in.split && !in.decoded
		ok := true
		for i, f := range o.vals {
			if copies && o.from[i] != "" {
				if src := in.fieldAt(o.from[i]); src != nil {
					fs[i] = *src // as read, if it was kept so
				}
				fs[i].Name = o.keys[i]
				continue
			}
			var v val
			if v, ok = f(env); !ok {
				break
			}
			fs[i] = codec.Field{Name: o.keys[i], Value: v.box()}
		}
		if ok {
			var out Value
			out.setFields(fs)
			return out, nil
		}
	}
	x, err := ev.Eval(e, r)
	if err != nil {
		return Value{}, err
	}
	return ObjectValue(x), nil
}

// readyFast readies ev's environment for a fast evaluator of e. It decodes
// what the VM would, so it fails where the VM does.
func (ev *Evaluator) readyFast(e *Expr, r *Record, state any) (env *fastEnv, err error) {
	env = &ev.fenv
	*env = fastEnv{r: r, state: state}
	if e.uses&useKey != 0 {
		if env.key, err = r.Key.Get(); err != nil {
			return nil, fmt.Errorf("key: %w", err)
		}
	}
	if e.uses&useValue != 0 {
		// Decoded as its fields are read (Value.Field): an object is
		// built only if the expression reads the value whole.
		if err = r.Value.load(); err != nil {
			return nil, fmt.Errorf("value: %w", err)
		}
	}
	return env, nil
}

// evalFast runs e's fast evaluator; ok is false where the VM must answer.
func (ev *Evaluator) evalFast(e *Expr, r *Record, state any) (out any, ok bool, err error) {
	env, err := ev.readyFast(e, r, state)
	if err != nil {
		return nil, false, err
	}
	v, ok := e.fast(env)
	if !ok || (e.bool && v.k != vBool) {
		return nil, false, nil
	}
	return v.box(), true, nil
}

// read evaluates a direct expression, as the program would; ok is false
// where only the program gives its answer (value.f of something not an
// object, with the error the program gives).
func (e *Expr) read(r *Record) (out any, ok bool, err error) {
	switch e.direct {
	case directKey:
		k, err := r.Key.Get()
		if err != nil {
			return nil, false, fmt.Errorf("key: %w", err)
		}
		return k, true, nil
	}
	if e.direct == directValue {
		v, err := r.Value.Get()
		if err != nil {
			return nil, false, fmt.Errorf("value: %w", err)
		}
		return v, true, nil
	}
	x, isObject, err := r.Value.Field(e.field)
	if err != nil {
		return nil, false, fmt.Errorf("value: %w", err)
	}
	return x, isObject, nil
}

// EvalBool evaluates a predicate.
func (ev *Evaluator) EvalBool(e *Expr, r *Record) (bool, error) {
	out, err := ev.Eval(e, r)
	if err != nil {
		return false, err
	}
	b, ok := out.(bool)
	if !ok {
		return false, fmt.Errorf("evaluating %q: got %T, want bool", e.src, out)
	}
	return b, nil
}

// EvalList evaluates an expression that must yield a list.
func (ev *Evaluator) EvalList(e *Expr, r *Record) ([]any, error) {
	out, err := ev.Eval(e, r)
	if err != nil {
		return nil, err
	}
	switch t := out.(type) {
	case []any:
		return t, nil
	case nil:
		return nil, nil
	}
	rv := reflect.ValueOf(out)
	if rv.Kind() != reflect.Slice && rv.Kind() != reflect.Array {
		return nil, fmt.Errorf("evaluating %q: got %T, want a list", e.src, out)
	}
	list := make([]any, rv.Len())
	for i := range list {
		list[i] = rv.Index(i).Interface()
	}
	return list, nil
}
