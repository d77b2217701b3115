package pipeline

import (
	"reflect"
	"slices"
	"strings"

	"github.com/expr-lang/expr/ast"
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
	vInt // int; int64 when is64 (offset, timestamp), which arithmetic makes int, as the VM does
	vFloat
	vString
	vOther // an object or a list, in x, which only member reads and literals take
)

type val struct {
	k    vkind
	is64 bool
	b    bool
	i    int
	f    float64
	s    string
	// x is the object or list of a vOther; of another kind, the value
	// boxed already (read from a record, or a constant), or nil: box
	// returns it rather than boxing anew, which allocates. Whatever
	// changes b, i, f or s makes a new val or clears x.
	x any
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
		return v.b
	case vInt:
		if v.is64 {
			return int64(v.i)
		}
		return v.i
	case vFloat:
		return v.f
	case vString:
		return v.s
	case vOther:
		return v.x
	}
	return nil
}

// unbox reads x, or says it is of a type only the VM handles.
func unbox(x any) (val, bool) {
	switch t := x.(type) {
	case nil:
		return val{}, true
	case bool:
		return val{k: vBool, b: t, x: x}, true
	case int:
		return val{k: vInt, i: t, x: x}, true
	case int64:
		return val{k: vInt, i: int(t), is64: true, x: x}, true
	case float64:
		return val{k: vFloat, f: t, x: x}, true
	case string:
		return val{k: vString, s: t, x: x}, true
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
		v := val{k: vBool, b: n.Value}
		return func(*fastEnv) (val, bool) { return v, true }
	case *ast.StringNode:
		v := val{k: vString, s: n.Value}
		v.x = v.box()
		return func(*fastEnv) (val, bool) { return v, true }
	case *ast.IntegerNode:
		var v val
		switch t := n.Type(); {
		case t == nil || t.Kind() == reflect.Int:
			v = val{k: vInt, i: n.Value}
		case t.Kind() == reflect.Int64:
			v = val{k: vInt, i: n.Value, is64: true}
		case t.Kind() == reflect.Float64:
			v = val{k: vFloat, f: float64(n.Value)}
		default:
			return nil
		}
		v.x = v.box()
		return func(*fastEnv) (val, bool) { return v, true }
	case *ast.FloatNode:
		if t := n.Type(); t != nil && t.Kind() == reflect.Float32 {
			return nil
		}
		v := val{k: vFloat, f: n.Value}
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
			if c.b {
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
	keys, vals := make([]string, len(order)), make([]fastFn, len(order))
	for i, j := range order {
		keys[i], vals[i] = o.keys[j], o.vals[j]
		if i > 0 && keys[i] == keys[i-1] {
			return nil // a repeated key: the VM keeps the first
		}
	}
	o.keys, o.vals = keys, vals
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
		return func(env *fastEnv) (val, bool) { return val{k: vString, s: env.r.Source.Topic}, true }
	case "partition":
		return func(env *fastEnv) (val, bool) { return val{k: vInt, i: int(env.r.Source.Partition)}, true }
	case "offset":
		return func(env *fastEnv) (val, bool) { return val{k: vInt, i: int(env.r.Source.Offset), is64: true}, true }
	case "timestamp":
		return func(env *fastEnv) (val, bool) {
			return val{k: vInt, i: int(env.r.Timestamp.UnixMilli()), is64: true}, true
		}
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
	field := name.Value
	// The commonest read, value.f, without a call for value.
	if obj, ok := n.Arguments[0].(*ast.IdentifierNode); ok && obj.Value == "value" {
		return func(env *fastEnv) (val, bool) {
			x, isObject := env.r.Value.field(field)
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
			return val{k: vBool, b: !v.b}, true
		}
	case "-":
		return func(env *fastEnv) (val, bool) {
			v, ok := x(env)
			switch {
			case !ok:
				return val{}, false
			case v.k == vInt:
				v.i, v.x = -v.i, nil
				return v, true
			case v.k == vFloat:
				v.f, v.x = -v.f, nil
				return v, true
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
	return func(env *fastEnv) (val, bool) {
		a, ok := l(env)
		if !ok {
			return val{}, false
		}
		b, ok := r(env)
		if !ok {
			return val{}, false
		}
		return op(a, b)
	}
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
		if a.b == decides {
			return a, true
		}
		return r(env)
	}
}

var binaryOps = map[string]func(a, b val) (val, bool){
	"==": func(a, b val) (val, bool) {
		eq, ok := equal(a, b)
		return val{k: vBool, b: eq}, ok
	},
	"!=": func(a, b val) (val, bool) {
		eq, ok := equal(a, b)
		return val{k: vBool, b: !eq}, ok
	},
	"<":  compare(func(c int) bool { return c < 0 }),
	">":  compare(func(c int) bool { return c > 0 }),
	"<=": compare(func(c int) bool { return c <= 0 }),
	">=": compare(func(c int) bool { return c >= 0 }),
	"+": func(a, b val) (val, bool) {
		if a.k == vString && b.k == vString {
			return val{k: vString, s: a.s + b.s}, true
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
		return val{k: vFloat, f: x / y}, okx && oky
	},
	"%": func(a, b val) (val, bool) {
		if a.k != vInt || b.k != vInt || b.i == 0 {
			return val{}, false // the VM's error: not integers, or division by zero
		}
		return val{k: vInt, i: a.i % b.i}, true
	},
}

// float is a number as a float64, as the VM converts mixed operands.
func (v val) float() (float64, bool) {
	switch v.k {
	case vInt:
		return float64(v.i), true
	case vFloat:
		return v.f, true
	}
	return 0, false
}

// arith is + - * on numbers: int with int is int, anything with a float
// is float64.
func arith(a, b val, ints func(x, y int) int, floats func(x, y float64) float64) (val, bool) {
	if a.k == vInt && b.k == vInt {
		return val{k: vInt, i: ints(a.i, b.i)}, true
	}
	x, okx := a.float()
	y, oky := b.float()
	if !okx || !oky {
		return val{}, false
	}
	return val{k: vFloat, f: floats(x, y)}, true
}

// equal is the VM's ==: numbers by value across int and float, strings,
// bools and nils by value, values of different types unequal. Objects and
// lists are compared by the VM.
func equal(a, b val) (eq, ok bool) {
	if a.k == vOther || b.k == vOther {
		return false, false
	}
	if a.k == vInt && b.k == vInt {
		return a.i == b.i, true
	}
	if x, okx := a.float(); okx {
		if y, oky := b.float(); oky {
			return x == y, true
		}
	}
	if a.k != b.k {
		return false, true
	}
	switch a.k {
	case vString:
		return a.s == b.s, true
	case vBool:
		return a.b == b.b, true
	}
	return true, true // both nil
}

// compare is < > <= >= on two numbers or two strings; anything else is
// the VM's error.
func compare(holds func(c int) bool) func(a, b val) (val, bool) {
	return func(a, b val) (val, bool) {
		c := 0
		switch {
		case a.k == vInt && b.k == vInt:
			c = cmpOrdered(a.i, b.i)
		case a.k == vString && b.k == vString:
			c = cmpOrdered(a.s, b.s)
		default:
			x, okx := a.float()
			y, oky := b.float()
			if !okx || !oky {
				return val{}, false
			}
			if x != x || y != y {
				return val{k: vBool, b: false}, true // NaN compares false, as in Go
			}
			c = cmpOrdered(x, y)
		}
		return val{k: vBool, b: holds(c)}, true
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
