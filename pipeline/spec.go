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

// Spec is one step's configuration as handed to a Factory, and where the
// factory reports what is wrong with it.
type Spec struct {
	Name   string // the step's name, unique in the graph
	Kind   string
	Path   string // YAML path of the operator's value, e.g. "steps[2].map"
	Value  any    // the YAML value under the kind key: string, number, bool, []any or map[string]any
	Inputs int    // how many streams the step reads

	env *specEnv
}

// specEnv is what a spec and the specs nested in it share: the problems
// found, where they are in the file, and what the operators read of
// record values.
type specEnv struct {
	line     func(path string) int
	problems config.Errors
	reads    ValueReads
	declared bool // some factory called Reads
}

// ValueReads is what operators read of record values: the top-level
// fields they name, or Whole when some read values whole (or in ways
// unknown). Sources decode JSON values into those fields only.
type ValueReads struct {
	Fields []string
	Whole  bool
}

func (r *ValueReads) add(fields []string, whole bool) {
	r.Whole = r.Whole || whole
	for _, f := range fields {
		if !slices.Contains(r.Fields, f) {
			r.Fields = append(r.Fields, f)
		}
	}
}

// NewSpec returns the spec of one step: its name, its kind, the YAML path
// of the value under the kind key, that value, and how many streams the
// step reads. line gives the line of a YAML path in the file (nil: lines
// unknown). The engine builds every step's spec this way; tests of a
// Factory can too, and read what it reported with Problems.
func NewSpec(name, kind, path string, value any, inputs int, line func(path string) int) *Spec {
	return &Spec{Name: name, Kind: kind, Path: path, Value: value, Inputs: inputs, env: &specEnv{line: line}}
}

// Inner returns the spec of an operator nested in this one (the step of a
// parallel stage): kind and value under this spec's path. Problems and
// reads are shared with s.
func (s *Spec) Inner(kind string, value any) *Spec {
	return &Spec{Name: s.Name, Kind: kind, Path: s.Path + "." + kind, Value: value, Inputs: s.Inputs, env: s.env}
}

// Problems returns what the factories of s and the specs nested in it
// reported, in the order they reported it.
func (s *Spec) Problems() config.Errors { return s.env.problems }

// ValueReads returns what the operator built from s reads of record
// values: the fields its expressions (Expr) name, and those it declared
// with Reads. An operator whose factory did not call Reads is taken to
// read values whole, since Go code may read any field.
func (s *Spec) ValueReads() ValueReads {
	r := s.env.reads
	if !s.env.declared {
		r.Whole = true
	}
	return r
}

// Reads declares that the operator's Go code reads only these top-level
// fields of record values (none, if called with none), besides what its
// expressions compiled through Expr read. Sources then decode JSON values
// into the fields some step reads, and nothing else; without the call
// every field of every value is decoded for the operator's sake.
func (s *Spec) Reads(fields ...string) {
	s.env.declared = true
	s.env.reads.add(fields, false)
}

// Errorf records a problem at Path + sub (sub may be "" or start with "." or "[").
func (s *Spec) Errorf(sub, format string, args ...any) {
	p := s.Path + sub
	e := &config.FieldError{Path: p, Msg: fmt.Sprintf(format, args...)}
	if s.env.line != nil {
		e.Line = s.env.line(p)
	}
	s.env.problems = append(s.env.problems, e)
}

// Expr compiles src, recording a problem at Path + sub when it does not
// compile. It returns nil then. What the expression reads of record
// values counts towards ValueReads.
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
	if e.uses&useValue != 0 {
		s.env.reads.add(e.valueFields, e.wholeValue)
	}
	return e
}

// HeaderExpr is a header set from an expression.
type HeaderExpr struct {
	Name string
	Expr *Expr
}

// HeaderExprs compiles a map of header name to expression at Path + sub,
// in the order of the names.
func (s *Spec) HeaderExprs(sub string, hs map[string]string) []HeaderExpr {
	names := make([]string, 0, len(hs))
	for k := range hs {
		names = append(names, k)
	}
	sort.Strings(names)
	out := make([]HeaderExpr, 0, len(names))
	for _, k := range names {
		out = append(out, HeaderExpr{Name: k, Expr: s.Expr(sub+"."+k, hs[k], AnyResult)})
	}
	return out
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
		s.Errorf("", "expected a map, got %s", Describe(s.Value))
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
			s.Errorf(sub, "expected %s, found %s", kindName(ute.Expected.Type()), Describe(ute.Value))
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

// Describe names what a YAML value is, for messages: "a string", "a
// list", "a map", "nothing".
func Describe(v any) string {
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

// AsInt reads a whole number from a YAML value.
func AsInt(v any) (int, bool) {
	switch t := v.(type) {
	case int:
		return t, true
	case int64:
		return int(t), true
	case float64:
		if t == float64(int(t)) {
			return int(t), true
		}
	}
	return 0, false
}
