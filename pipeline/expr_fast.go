package pipeline

import (
	"math"
	"reflect"
	"slices"
	"strings"

	"github.com/expr-lang/expr/ast"

	"github.com/pipeline-run/pipeline/internal/codec"
)

// The fast evaluator runs the common shapes of expression — field reads,
// constants, arithmetic, comparisons, logic, conditionals, list and object
// literals — as a tree of Go closures over unboxed values, without the VM:
// starting the VM, boxing each intermediate number and calling member
// through its generic function path cost several times the work itself.
//
// It answers exactly as the VM does or not at all: where an operand has a
// type it does not handle, or the VM would fail (a type error, an integer
// division by zero), it reports that it cannot answer and Eval runs the
// program, whose result or error is the answer. Expressions with anything
// else in them (function calls, predicates, optional chains, variables)
// are left to the VM entirely. TestFastAgreesWithTheVM holds the two to
// the same results.

// vkind is the type of an unboxed value.
type vkind uint8

const (
	vNil vkind = iota
	vBool
	vInt // int; int64 when the k64 bit is set (offset, timestamp), which arithmetic makes int, as the VM does
	vFloat
	vString
	vOther // an object or a list, in x, which only member reads and literals take

	k64 vkind = 0x80 // with vInt: an int64
)

// val is a value unboxed. It is kept to three words and a byte so that
// the compiler holds it in registers: a larger struct went through memory
// between every two closures, each copy a stalled load, and that was the
// most costly part of a filter's arithmetic.
type val struct {
	k vkind // the kind, with k64 for an int64: read it with kind()
	n uint64
	// x is the string of a vString, the object or list of a vOther; of
	// another kind, the value boxed already (read from a record, or a
	// constant), or nil: box returns it rather than boxing anew, which
	// allocates. Whatever changes n makes a new val or clears x.
	x any
}

func (v val) kind() vkind    { return v.k &^ k64 }
func (v val) b() bool        { return v.n != 0 }
func (v val) i() int         { return int(v.n) }
func (v val) f() float64     { return math.Float64frombits(v.n) }
func (v val) s() string      { s, _ := v.x.(string); return s }
func boolVal(b bool) val     { return val{k: vBool, n: b2u(b)} }
func intVal(i int) val       { return val{k: vInt, n: uint64(i)} }
func int64Val(i int) val     { return val{k: vInt | k64, n: uint64(i)} }
func floatVal(f float64) val { return val{k: vFloat, n: math.Float64bits(f)} }

// stringVal boxes s: a string is always held boxed.
func stringVal(s string) val { return val{k: vString, x: s} }

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// fastEnv is what a fast expression reads.
type fastEnv struct {
	key, state any
	r          *Record // its value loaded (Value.load)
}

// fastFn evaluates a node; ok is false where the VM must answer.
type fastFn func(env *fastEnv) (v val, ok bool)

// box returns v as the VM would have it.
func (v val) box() any {
	if v.x != nil {
		return v.x
	}
	switch v.k {
	case vBool:
		return v.b()
	case vInt:
		return v.i()
	case vInt | k64:
		return int64(v.i())
	case vFloat:
		return v.f()
	}
	return nil // vNil; a vString or vOther always has x
}

// unbox reads x, or says it is of a type only the VM handles.
func unbox(x any) (val, bool) {
	switch t := x.(type) {
	case nil:
		return val{}, true
	case bool:
		return val{k: vBool, n: b2u(t), x: x}, true
	case int:
		return val{k: vInt, n: uint64(t), x: x}, true
	case int64:
		return val{k: vInt | k64, n: uint64(t), x: x}, true
	case float64:
		return val{k: vFloat, n: math.Float64bits(t), x: x}, true
	case string:
		return val{k: vString, x: x}, true
	case map[string]any, []any:
		return val{k: vOther, x: x}, true
	}
	return val{}, false
}

// compileFast returns node's fast evaluator, or nil when some part of it
// is for the VM alone.
func compileFast(node ast.Node) fastFn {
	switch n := node.(type) {
	case *ast.NilNode:
		return func(*fastEnv) (val, bool) { return val{}, true }
	case *ast.BoolNode:
		v := boolVal(n.Value)
		return func(*fastEnv) (val, bool) { return v, true }
	case *ast.StringNode:
		v := stringVal(n.Value)
		return func(*fastEnv) (val, bool) { return v, true }
	case *ast.IntegerNode:
		var v val
		switch t := n.Type(); {
		case t == nil || t.Kind() == reflect.Int:
			v = intVal(n.Value)
		case t.Kind() == reflect.Int64:
			v = int64Val(n.Value)
		case t.Kind() == reflect.Float64:
			v = floatVal(float64(n.Value))
		default:
			return nil
		}
		v.x = v.box()
		return func(*fastEnv) (val, bool) { return v, true }
	case *ast.FloatNode:
		if t := n.Type(); t != nil && t.Kind() == reflect.Float32 {
			return nil
		}
		v := floatVal(n.Value)
		v.x = v.box()
		return func(*fastEnv) (val, bool) { return v, true }
	case *ast.ConstantNode:
		v, ok := unbox(n.Value)
		if !ok {
			return nil
		}
		return func(*fastEnv) (val, bool) { return v, true }
	case *ast.IdentifierNode:
		return fastIdentifier(n.Value)
	case *ast.CallNode:
		return fastMember(n)
	case *ast.UnaryNode:
		return fastUnary(n)
	case *ast.BinaryNode:
		return fastBinary(n)
	case *ast.ConditionalNode:
		cond, yes, no := compileFast(n.Cond), compileFast(n.Exp1), compileFast(n.Exp2)
		if cond == nil || yes == nil || no == nil {
			return nil
		}
		return func(env *fastEnv) (val, bool) {
			c, ok := cond(env)
			if !ok || c.k != vBool {
				return val{}, false
			}
			if c.b() {
				return yes(env)
			}
			return no(env)
		}
	case *ast.ArrayNode:
		elems := make([]fastFn, len(n.Nodes))
		for i, e := range n.Nodes {
			if elems[i] = compileFast(e); elems[i] == nil {
				return nil
			}
		}
		return func(env *fastEnv) (val, bool) {
			out := make([]any, len(elems))
			for i, f := range elems {
				v, ok := f(env)
				if !ok {
					return val{}, false
				}
				out[i] = v.box()
			}
			return val{k: vOther, x: out}, true
		}
	case *ast.MapNode:
		o := fastObjectOf(n)
		if o == nil {
			return nil
		}
		return func(env *fastEnv) (val, bool) {
			out := make(map[string]any, len(o.keys))
			for i, f := range o.vals {
				v, ok := f(env)
				if !ok {
					return val{}, false
				}
				out[o.keys[i]] = v.box()
			}
			return val{k: vOther, x: out}, true
		}
	}
	return nil
}

// fastObject is an object literal's keys, sorted, and the fast
// evaluators of their values in the same order.
type fastObject struct {
	keys []string
	vals []fastFn
	// from, by key, is the field of value the key's value is, when it is
	// value.<field> ("" otherwise): EvalValue copies such a field as it
	// was read, not decoding it only to encode it again.
	from []string
	// names are the keys as JSON strings, each with its colon, for
	// EvalValue writing the object as JSON (Evaluator.WriteObjectsAsJSON).
	names [][]byte
}

// fastObjectOf returns node's fastObject if node is an object literal
// whose keys are constant and distinct and whose values all have fast
// evaluators; else nil.
func fastObjectOf(node ast.Node) *fastObject {
	n, ok := node.(*ast.MapNode)
	if !ok {
		return nil
	}
	o := &fastObject{keys: make([]string, len(n.Pairs)), vals: make([]fastFn, len(n.Pairs))}
	order := make([]int, len(n.Pairs))
	for i, p := range n.Pairs {
		pair, ok := p.(*ast.PairNode)
		if !ok {
			return nil
		}
		k, ok := pair.Key.(*ast.StringNode)
		if !ok {
			return nil
		}
		o.keys[i], order[i] = k.Value, i
		if o.vals[i] = compileFast(pair.Value); o.vals[i] == nil {
			return nil
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(o.keys[a], o.keys[b]) })
	keys, vals, from := make([]string, len(order)), make([]fastFn, len(order)), make([]string, len(order))
	for i, j := range order {
		keys[i], vals[i] = o.keys[j], o.vals[j]
		if d, f := directOf(n.Pairs[j].(*ast.PairNode).Value); d == directValueField {
			from[i] = f
		}
		if i > 0 && keys[i] == keys[i-1] {
			return nil // a repeated key: the VM keeps the first
		}
	}
	o.keys, o.vals, o.from = keys, vals, from
	o.names = make([][]byte, len(keys))
	for i, k := range keys {
		b, _ := codec.AppendJSON(nil, k)
		o.names[i] = append(b, ':')
	}
	return o
}

func fastIdentifier(name string) fastFn {
	switch name {
	case "value":
		return func(env *fastEnv) (val, bool) {
			x, err := env.r.Value.Get() // cannot fail once loaded
			if err != nil {
				return val{}, false
			}
			return unbox(x)
		}
	case "key":
		return func(env *fastEnv) (val, bool) { return unbox(env.key) }
	case "state":
		return func(env *fastEnv) (val, bool) { return unbox(env.state) }
	case "topic":
		return func(env *fastEnv) (val, bool) { return stringVal(env.r.Source.Topic), true }
	case "partition":
		return func(env *fastEnv) (val, bool) { return intVal(int(env.r.Source.Partition)), true }
	case "offset":
		return func(env *fastEnv) (val, bool) { return int64Val(int(env.r.Source.Offset)), true }
	case "timestamp":
		return func(env *fastEnv) (val, bool) { return int64Val(int(env.r.Timestamp.UnixMilli())), true }
	}
	return nil
}

// fastMember is what memberPatcher made of obj.name: an object's field.
func fastMember(n *ast.CallNode) fastFn {
	id, ok := n.Callee.(*ast.IdentifierNode)
	if !ok || id.Value != memberFunc || len(n.Arguments) != 2 {
		return nil
	}
	name, ok := n.Arguments[1].(*ast.StringNode)
	if !ok {
		return nil
	}
	field := codec.Intern(name.Value)
	// The commonest read, value.f, without a call for value.
	if obj, ok := n.Arguments[0].(*ast.IdentifierNode); ok && obj.Value == "value" {
		return func(env *fastEnv) (val, bool) {
			v := &env.r.Value
			if v.split && !v.decoded {
				f := v.fieldAt(field)
				if f == nil {
					return val{}, true
				}
				if n, ok := f.RawInt(); ok { // read without boxing it
					return intVal(n), true
				}
				return unbox(f.Decode())
			}
			x, isObject := v.field(field)
			if !isObject {
				return val{}, false
			}
			return unbox(x)
		}
	}
	obj := compileFast(n.Arguments[0])
	if obj == nil {
		return nil
	}
	return func(env *fastEnv) (val, bool) {
		o, ok := obj(env)
		if !ok {
			return val{}, false
		}
		m, ok := o.x.(map[string]any)
		if o.k != vOther || !ok {
			return val{}, false
		}
		return unbox(m[field])
	}
}

func fastUnary(n *ast.UnaryNode) fastFn {
	x := compileFast(n.Node)
	if x == nil {
		return nil
	}
	switch n.Operator {
	case "!", "not":
		return func(env *fastEnv) (val, bool) {
			v, ok := x(env)
			if !ok || v.k != vBool {
				return val{}, false
			}
			return boolVal(!v.b()), true
		}
	case "-":
		return func(env *fastEnv) (val, bool) {
			v, ok := x(env)
			switch {
			case !ok:
				return val{}, false
			case v.kind() == vInt:
				v.n, v.x = uint64(-v.i()), nil // an int64 stays one
				return v, true
			case v.k == vFloat:
				return floatVal(-v.f()), true
			}
			return val{}, false
		}
	case "+":
		return x
	}
	return nil
}

func fastBinary(n *ast.BinaryNode) fastFn {
	l, r := compileFast(n.Left), compileFast(n.Right)
	if l == nil || r == nil {
		return nil
	}
	switch n.Operator {
	case "and", "&&":
		return shortCircuit(l, r, false)
	case "or", "||":
		return shortCircuit(l, r, true)
	}
	op := binaryOps[n.Operator]
	if op == nil {
		return nil
	}
	code, ints := intOps[n.Operator]
	// Two ints, the commonest case (value.seq % 10, value.n * 2), are
	// worked out here: passing two vals to op goes through memory, and
	// was the most costly step of a filter's or a map's arithmetic. With
	// an int constant on the right, it is not called for either.
	if c, ok := n.Right.(*ast.IntegerNode); ok && ints {
		if t := c.Type(); t == nil || t.Kind() == reflect.Int {
			cv, _ := r(nil)
			return func(env *fastEnv) (val, bool) {
				a, ok := l(env)
				if !ok {
					return val{}, false
				}
				if a.kind() == vInt {
					return intOp(code, a.i(), cv.i())
				}
				return op(a, cv)
			}
		}
	}
	return func(env *fastEnv) (val, bool) {
		a, ok := l(env)
		if !ok {
			return val{}, false
		}
		b, ok := r(env)
		if !ok {
			return val{}, false
		}
		if ints && a.kind() == vInt && b.kind() == vInt {
			return intOp(code, a.i(), b.i())
		}
		return op(a, b)
	}
}

// intOps are the binary operators intOp works out for two ints.
var intOps = map[string]int{"+": opAdd, "-": opSub, "*": opMul, "%": opMod, "==": opEq, "!=": opNe, "<": opLt, ">": opGt, "<=": opLe, ">=": opGe}

const (
	opAdd = iota
	opSub
	opMul
	opMod
	opEq
	opNe
	opLt
	opGt
	opLe
	opGe
)

// intOp is binaryOps[op](a, b) for two ints (of either int type), as
// arith, equal and compare answer it.
func intOp(op, x, y int) (val, bool) {
	switch op {
	case opAdd:
		return intVal(x + y), true
	case opSub:
		return intVal(x - y), true
	case opMul:
		return intVal(x * y), true
	case opMod:
		if y == 0 {
			return val{}, false
		}
		return intVal(x % y), true
	case opEq:
		return boolVal(x == y), true
	case opNe:
		return boolVal(x != y), true
	case opLt:
		return boolVal(x < y), true
	case opGt:
		return boolVal(x > y), true
	case opLe:
		return boolVal(x <= y), true
	case opGe:
		return boolVal(x >= y), true
	}
	return val{}, false
}

// shortCircuit is and (decided by a false left) and or (by a true one), as
// the VM has them: the left must be a bool; when it does not decide, the
// result is the right, whatever it is.
func shortCircuit(l, r fastFn, decides bool) fastFn {
	return func(env *fastEnv) (val, bool) {
		a, ok := l(env)
		if !ok || a.k != vBool {
			return val{}, false
		}
		if a.b() == decides {
			return a, true
		}
		return r(env)
	}
}

var binaryOps = map[string]func(a, b val) (val, bool){
	"==": func(a, b val) (val, bool) {
		eq, ok := equal(a, b)
		return boolVal(eq), ok
	},
	"!=": func(a, b val) (val, bool) {
		eq, ok := equal(a, b)
		return boolVal(!eq), ok
	},
	"<":  compare(func(c int) bool { return c < 0 }),
	">":  compare(func(c int) bool { return c > 0 }),
	"<=": compare(func(c int) bool { return c <= 0 }),
	">=": compare(func(c int) bool { return c >= 0 }),
	"+": func(a, b val) (val, bool) {
		if a.k == vString && b.k == vString {
			return stringVal(a.s() + b.s()), true
		}
		return arith(a, b, func(x, y int) int { return x + y }, func(x, y float64) float64 { return x + y })
	},
	"-": func(a, b val) (val, bool) {
		return arith(a, b, func(x, y int) int { return x - y }, func(x, y float64) float64 { return x - y })
	},
	"*": func(a, b val) (val, bool) {
		return arith(a, b, func(x, y int) int { return x * y }, func(x, y float64) float64 { return x * y })
	},
	"/": func(a, b val) (val, bool) {
		x, okx := a.float()
		y, oky := b.float()
		return floatVal(x / y), okx && oky
	},
	"%": func(a, b val) (val, bool) {
		if a.kind() != vInt || b.kind() != vInt || b.i() == 0 {
			return val{}, false // the VM's error: not integers, or division by zero
		}
		return intVal(a.i() % b.i()), true
	},
}

// float is a number as a float64, as the VM converts mixed operands.
func (v val) float() (float64, bool) {
	switch v.kind() {
	case vInt:
		return float64(v.i()), true
	case vFloat:
		return v.f(), true
	}
	return 0, false
}

// arith is + - * on numbers: int with int is int, anything with a float
// is float64.
func arith(a, b val, ints func(x, y int) int, floats func(x, y float64) float64) (val, bool) {
	if a.kind() == vInt && b.kind() == vInt {
		return intVal(ints(a.i(), b.i())), true
	}
	x, okx := a.float()
	y, oky := b.float()
	if !okx || !oky {
		return val{}, false
	}
	return floatVal(floats(x, y)), true
}

// equal is the VM's ==: numbers by value across int and float, strings,
// bools and nils by value, values of different types unequal. Objects and
// lists are compared by the VM.
func equal(a, b val) (eq, ok bool) {
	if a.k == vOther || b.k == vOther {
		return false, false
	}
	if a.kind() == vInt && b.kind() == vInt {
		return a.i() == b.i(), true
	}
	if x, okx := a.float(); okx {
		if y, oky := b.float(); oky {
			return x == y, true
		}
	}
	if a.kind() != b.kind() {
		return false, true
	}
	switch a.k {
	case vString:
		return a.s() == b.s(), true
	case vBool:
		return a.b() == b.b(), true
	}
	return true, true // both nil
}

// compare is < > <= >= on two numbers or two strings; anything else is
// the VM's error.
func compare(holds func(c int) bool) func(a, b val) (val, bool) {
	return func(a, b val) (val, bool) {
		c := 0
		switch {
		case a.kind() == vInt && b.kind() == vInt:
			c = cmpOrdered(a.i(), b.i())
		case a.k == vString && b.k == vString:
			c = cmpOrdered(a.s(), b.s())
		default:
			x, okx := a.float()
			y, oky := b.float()
			if !okx || !oky {
				return val{}, false
			}
			if x != x || y != y {
				return boolVal(false), true // NaN compares false, as in Go
			}
			c = cmpOrdered(x, y)
		}
		return boolVal(holds(c)), true
	}
}

func cmpOrdered[T int | float64 | string](x, y T) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}
