package pipeline

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/pipeline-run/pipeline/config"
)

// TaskID names a task: the source partition number it processes. With
// several source topics, the same partition number of each is one task
// (co-partitioning, as Kafka Streams does).
type TaskID int32

// Operator processes the records of one task. Each task has its own
// instance, used from one goroutine at a time, so an operator needs no
// locks for its own fields. Process may change r in place and emit it; an
// operator that emits several records from one must emit clones.
//
// An error returned by Process fails the input record r derives from: it
// goes to the dead-letter topic, or stops the pipeline when there is none.
type Operator interface {
	Process(ctx *Context, r *Record) error
}

// Flusher is an Operator that holds records back (a batch, a window) and
// must release them at a checkpoint barrier, before anything commits.
type Flusher interface {
	Flush(ctx *Context) error
}

// Closer is an Operator with resources to release when its task closes.
type Closer interface {
	Close() error
}

// Definition is an operator as configured: built once from its YAML spec,
// it makes one Operator per task.
type Definition interface {
	// Outputs lists the named outputs besides the default one. A step
	// named s with output o is read as "s.o".
	Outputs() []string
	// NewOperator returns the operator instance for one task.
	NewOperator(task TaskID) (Operator, error)
}

// Factory builds a Definition from a step's spec. It reports every problem
// through spec.Errorf (or returns an error) and must not touch the network:
// `pipeline validate` runs it.
type Factory func(spec *Spec) (Definition, error)

// Registry maps operator kinds (the key under a step, such as "map") to
// their factories. Built-in operators are registered like any other; a Go
// user adds their own with Register and passes the registry to the runtime.
type Registry struct {
	kinds map[string]Factory
}

// NewRegistry returns a registry holding the built-in operators.
func NewRegistry() *Registry {
	r := &Registry{kinds: make(map[string]Factory)}
	r.mustRegister("filter", newFilter)
	r.mustRegister("map", newMap)
	r.mustRegister("flat_map", newFlatMap)
	r.mustRegister("split", newSplit)
	r.mustRegister("route", newRoute)
	r.mustRegister("union", newUnion)
	r.mustRegister("aggregate", newAggregate)
	r.mustRegister("dedupe", newDedupe)
	// parallel is wired by the graph builder, which needs the registry to
	// build the inner step; it is listed here so Kinds names it.
	r.kinds["parallel"] = nil
	r.kinds["key_by"] = nil
	return r
}

func (r *Registry) mustRegister(kind string, f Factory) {
	if err := r.Register(kind, f); err != nil {
		panic(err) // only reachable through a programming error in this package
	}
}

// Register adds an operator kind. Kinds are lower case words; registering a
// kind twice is an error.
func (r *Registry) Register(kind string, f Factory) error {
	if kind == "" || strings.ContainsAny(kind, " .") || kind == "name" || kind == "from" {
		return fmt.Errorf("operator kind %q: not a valid name", kind)
	}
	if f == nil {
		return fmt.Errorf("operator kind %q: nil factory", kind)
	}
	if _, ok := r.kinds[kind]; ok {
		return fmt.Errorf("operator kind %q: already registered", kind)
	}
	r.kinds[kind] = f
	return nil
}

// Kinds returns the registered kinds, sorted.
func (r *Registry) Kinds() []string {
	out := make([]string, 0, len(r.kinds))
	for k := range r.kinds {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (r *Registry) lookup(kind string) (Factory, bool) {
	f, ok := r.kinds[kind]
	return f, ok
}

// Spec is one step's configuration as handed to a Factory.
type Spec struct {
	Name   string // the step's name, unique in the graph
	Kind   string
	Path   string // YAML path of the operator's value, e.g. "steps[2].map"
	Value  any    // the YAML value under the kind key: string, number, bool, []any or map[string]any
	Inputs int    // how many streams the step reads

	line  func(path string) int
	errs  *BuildErrors
	reads *valueReads // what the graph's expressions read of record values
}

// Errorf records a problem at Path + sub (sub may be "" or start with "." or "[").
func (s *Spec) Errorf(sub, format string, args ...any) {
	p := s.Path + sub
	e := &BuildError{Path: p, Msg: fmt.Sprintf(format, args...)}
	if s.line != nil {
		e.Line = s.line(p)
	}
	*s.errs = append(*s.errs, e)
}

// Expr compiles src, recording a problem at Path + sub when it does not
// compile. It returns nil then.
func (s *Spec) Expr(sub, src string, want ExprResult) *Expr {
	if strings.TrimSpace(src) == "" {
		s.Errorf(sub, "empty expression")
		return nil
	}
	e, err := CompileExpr(src, want)
	if err != nil {
		s.Errorf(sub, "%v", err)
		return nil
	}
	s.reads.add(e)
	return e
}

// valueReads gathers what the expressions of a graph read of record
// values, for the projection its sources decode with.
type valueReads struct {
	fields []string
	whole  bool // some step reads values whole, or in ways unknown
}

func (r *valueReads) add(e *Expr) {
	if r == nil || e.uses&useValue == 0 {
		return
	}
	if e.wholeValue {
		r.whole = true
	}
	for _, f := range e.valueFields {
		if !slices.Contains(r.fields, f) {
			r.fields = append(r.fields, f)
		}
	}
}

// projection returns what sources decode JSON values with: nil (all of
// each value) when anything reads values whole.
func (r *valueReads) projection() *projection {
	if r.whole {
		return nil
	}
	return newProjection(r.fields)
}

// builtinKinds are the kinds NewRegistry registers. A registry cannot
// replace them, so a step of one of these kinds is the built-in operator,
// whose every read of a record goes through its expressions. Any other
// operator may read values as it likes.
var builtinKinds = map[string]bool{
	"filter": true, "map": true, "flat_map": true, "split": true, "route": true,
	"union": true, "aggregate": true, "dedupe": true,
}

// Decode copies a map spec into the struct pointed to by into, matching
// keys to `yaml` struct tags. Durations (time.Duration fields) are read as
// the configuration reads them (config.DurationOf): "10m", not a bare
// number. Unknown keys and wrong values are recorded as problems at their
// key's path; Decode reports whether it succeeded.
func (s *Spec) Decode(into any) bool {
	if s.Value == nil {
		return true
	}
	if _, ok := s.Value.(map[string]any); !ok {
		s.Errorf("", "expected a map, got %s", describe(s.Value))
		return false
	}
	var md mapstructure.Metadata
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		TagName:    "yaml",
		Result:     into,
		Metadata:   &md,
		DecodeHook: durationHook,
	})
	if err != nil {
		s.Errorf("", "%v", err)
		return false
	}
	ok := true
	if err := dec.Decode(s.Value); err != nil {
		s.decodeErrors(err)
		ok = false
	}
	sort.Strings(md.Unused)
	for _, k := range md.Unused {
		s.Errorf("."+k, "unknown key")
		ok = false
	}
	return ok
}

var durationType = reflect.TypeFor[time.Duration]()

// durationHook reads the values of time.Duration fields with the
// configuration's one duration reader.
func durationHook(_, to reflect.Type, data any) (any, error) {
	if to != durationType {
		return data, nil
	}
	return config.DurationOf(data)
}

// decodeErrors records each field's error from mapstructure at the
// field's path, in words rather than Go types.
func (s *Spec) decodeErrors(err error) {
	var inner *mapstructure.DecodeError
	switch e := err.(type) {
	case *mapstructure.DecodeError:
		cause := e.Unwrap()
		if errors.As(cause, &inner) {
			s.decodeErrors(cause) // a nested struct's fields name themselves
			return
		}
		sub := e.Name()
		if sub != "" && !strings.HasPrefix(sub, "[") {
			sub = "." + sub
		}
		var ute *mapstructure.UnconvertibleTypeError
		if errors.As(cause, &ute) {
			s.Errorf(sub, "expected %s, found %s", kindName(ute.Expected.Type()), describe(ute.Value))
			return
		}
		s.Errorf(sub, "%v", cause)
	case interface{ Unwrap() []error }:
		for _, e := range e.Unwrap() {
			s.decodeErrors(e)
		}
	case interface{ Unwrap() error }:
		if errors.As(err, &inner) {
			s.decodeErrors(e.Unwrap())
			return
		}
		s.Errorf("", "%v", err)
	default:
		s.Errorf("", "%v", err)
	}
}

// kindName names what a value of type t is, for messages.
func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a map"
	}
	return t.String()
}

func describe(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case []any:
		return "a list"
	case map[string]any:
		return "a map"
	case nil:
		return "nothing"
	}
	return fmt.Sprintf("%T", v)
}
