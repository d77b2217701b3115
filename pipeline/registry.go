package pipeline

import (
	"fmt"
	"sort"
	"strings"
)

// Factory builds a Definition from a step's spec. It reports every problem
// through spec.Errorf (or returns an error) and must not touch the network:
// `pipeline validate` runs it.
type Factory func(spec *Spec) (Definition, error)

// Registry maps operator kinds (the key under a step, such as "map") to
// their factories. The built-in operators are registered through Register
// like any other (ops.Register); the engine always has them, and a
// registry of a user's own kinds is added to them.
type Registry struct {
	kinds map[string]Factory
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{kinds: make(map[string]Factory)}
}

// reservedKinds are keys of a step that are not operators, or engine
// features that no factory builds: the repartition of key_by and
// broadcast, and the worker pool of parallel.
var reservedKinds = map[string]bool{"name": true, "from": true, "key_by": true, "broadcast": true, "parallel": true}

// Register adds an operator kind. Kinds are lower case words; registering a
// kind twice, or one of the engine's own (key_by, broadcast, parallel), is
// an error.
func (r *Registry) Register(kind string, f Factory) error {
	if kind == "" || strings.ContainsAny(kind, " .") || kind == "name" || kind == "from" {
		return fmt.Errorf("operator kind %q: not a valid name", kind)
	}
	if reservedKinds[kind] {
		return fmt.Errorf("operator kind %q: already registered (it is built into the engine)", kind)
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

// Lookup returns the factory of kind.
func (r *Registry) Lookup(kind string) (Factory, bool) {
	f, ok := r.kinds[kind]
	return f, ok
}
