// Command custom-operator is the pipeline command with three more operator
// kinds: limit_check (limit.go), a keyed step over two streams, batch_of
// (batch.go), which keeps operator (non-keyed) state, and mask,
// which replaces chosen fields of a JSON value with a fixed string before
// the record leaves the pipeline:
//
//	steps:
//	  - mask: {fields: [email, card.number], with: "***"}
//
// It shows the whole of what a Go user writes to add an operator: a
// Factory that decodes and checks the step's spec, a Definition, an
// Operator, and a main that registers the kind and hands over to cli.Main.
// Try it on the embedded broker:
//
//	go run ./examples/custom-operator run -c examples/custom-operator/pipeline.yaml
package main

import (
	"fmt"
	"maps"
	"os"
	"strings"

	"github.com/pipeline-run/pipeline/cli"
	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/ops"
)

func main() {
	reg := ops.NewRegistry() // the built-in operators
	for kind, f := range map[string]pipeline.Factory{"mask": newMask, "limit_check": newLimitCheck, "batch_of": newBatchOf} {
		if err := reg.Register(kind, f); err != nil {
			fmt.Fprintln(os.Stderr, "custom-operator:", err)
			os.Exit(cli.ExitFailure)
		}
	}
	os.Exit(cli.Main(os.Args[1:], reg))
}

// maskSpec is the YAML under `mask:`.
type maskSpec struct {
	Fields []string `yaml:"fields"` // field paths, "a" or "a.b.c"
	With   *string  `yaml:"with"`   // nil: "***"
}

const defaultMask = "***"

// mask replaces fields of a JSON object value. A field that is absent (or
// under a null) is left alone; a field path that runs into something other
// than an object (a list, a string) fails the record, which then goes to the
// dead-letter topic: a mask must never let data through because its shape
// was unexpected.
//
// It keeps no state, so one instance serves every task: its fields are
// only read after newMask returns, which makes it safe to call from several
// task goroutines at once.
type mask struct {
	fields []string   // as configured, for messages
	paths  [][]string // fields split on "."
	with   string
}

// newMask is the Factory: it decodes the spec, reports every problem at
// its YAML path through spec.Errorf, and touches no network (`pipeline
// validate` runs it).
func newMask(spec *pipeline.Spec) (pipeline.Definition, error) {
	var s maskSpec
	if !spec.Decode(&s) { // a spec that is not a map, an unknown key, a wrong type
		return nil, nil
	}
	if len(s.Fields) == 0 {
		spec.Errorf(".fields", "required: the fields to mask, e.g. [email, card.number]")
		return nil, nil
	}
	m := &mask{with: defaultMask}
	if s.With != nil {
		m.with = *s.With
	}
	seen := map[string]int{}
	for i, f := range s.Fields {
		sub := fmt.Sprintf(".fields[%d]", i)
		path := strings.Split(f, ".")
		if f == "" || strings.Contains(f, "..") || path[0] == "" || path[len(path)-1] == "" {
			spec.Errorf(sub, "%q is not a field path: use names separated by dots, such as card.number", f)
			continue
		}
		if j, dup := seen[f]; dup {
			spec.Errorf(sub, "%q is already listed as fields[%d]", f, j)
			continue
		}
		seen[f] = i
		m.fields = append(m.fields, f)
		m.paths = append(m.paths, path)
	}
	// A field inside another masked field would find a string where it
	// expects an object, and fail every record that has both.
	for _, f := range m.fields {
		for _, g := range m.fields {
			if strings.HasPrefix(f, g+".") {
				spec.Errorf(fmt.Sprintf(".fields[%d]", seen[f]), "%q is inside %q, which is masked whole", f, g)
			}
		}
	}
	return m, nil
}

// Outputs: mask has only the default output.
func (m *mask) Outputs() []string { return nil }

// NewOperator returns the shared instance; see mask.
func (m *mask) NewOperator(pipeline.TaskID) (pipeline.Operator, error) { return m, nil }

// Process masks r's value and emits it. An error fails the input record r
// derives from.
func (m *mask) Process(ctx pipeline.Context, r *pipeline.Record) error {
	if err := m.apply(r); err != nil {
		return err
	}
	ctx.Emit(r)
	return nil
}

// apply is Process without the Emit. It sets a new value only when a field
// was masked: a record with nothing to mask keeps its value untouched and
// is written byte for byte.
func (m *mask) apply(r *pipeline.Record) error {
	v, err := r.Value.Get()
	if err != nil {
		return fmt.Errorf("value: %w", err)
	}
	if v == nil {
		return nil // no value (a tombstone): nothing to mask
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("mask: the value is %s, not a JSON object", kind(v))
	}
	changed := false
	for i, p := range m.paths {
		out, did, err := maskPath(obj, p, m.with)
		if err != nil {
			return fmt.Errorf("mask %s: %w", m.fields[i], err)
		}
		obj, changed = out, changed || did
	}
	if changed {
		r.Value.Set(obj)
	}
	return nil
}

// maskPath returns obj with the field at path replaced by with, and whether
// there was such a field. Decoded values may be shared with other records
// (Record.Clone shares them), so it never changes obj or anything in it: it
// copies the maps on the way down to the field instead.
func maskPath(obj map[string]any, path []string, with string) (map[string]any, bool, error) {
	v, ok := obj[path[0]]
	if !ok || (v == nil && len(path) > 1) {
		return obj, false, nil
	}
	var nv any = with
	if len(path) > 1 {
		inner, isObj := v.(map[string]any)
		if !isObj {
			return nil, false, fmt.Errorf("%s is %s, not an object", path[0], kind(v))
		}
		m, did, err := maskPath(inner, path[1:], with)
		if err != nil || !did {
			return obj, false, err
		}
		nv = m
	}
	out := maps.Clone(obj)
	out[path[0]] = nv
	return out, true, nil
}

func kind(v any) string {
	switch v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int, float64:
		return "a number"
	}
	return fmt.Sprintf("a %T", v)
}
