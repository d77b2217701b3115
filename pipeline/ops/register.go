// Package ops holds the built-in operators: filter, map, flat_map, split,
// route, union, aggregate, dedupe, window, interval_join, table_join,
// window_join, co_group, connect and broadcast_join. They are written against the public
// operator API (package pipeline) alone and registered through its
// Registry, as a user's own operators are.
package ops

import "github.com/pipeline-run/pipeline/pipeline"

// NewRegistry returns a registry holding the built-in operators, to which
// a Go user adds their own kinds.
func NewRegistry() *pipeline.Registry {
	reg := pipeline.NewRegistry()
	if err := Register(reg); err != nil {
		panic(err) // reachable only through a programming error in this package
	}
	return reg
}

// Register adds the built-in operator kinds to reg.
func Register(reg *pipeline.Registry) error {
	for _, k := range []struct {
		kind string
		f    pipeline.Factory
	}{
		{"filter", newFilter},
		{"map", newMap},
		{"flat_map", newFlatMap},
		{"split", newSplit},
		{"route", newRoute},
		{"union", newUnion},
		{"aggregate", newAggregate},
		{"dedupe", newDedupe},
		{"window", newWindow},
		{"interval_join", newIntervalJoin},
		{"table_join", newTableJoin},
		{"window_join", newWindowJoin},
		{"co_group", newCoGroup},
		{"connect", newConnect},
		{"broadcast_join", newBroadcastJoin},
	} {
		if err := reg.Register(k.kind, onlyExpressions(k.f)); err != nil {
			return err
		}
	}
	return nil
}

// onlyExpressions declares, for a factory whose operator reads record
// values only through the expressions it compiles with Spec.Expr (every
// built-in), that its Go code reads no field itself.
func onlyExpressions(f pipeline.Factory) pipeline.Factory {
	return func(s *pipeline.Spec) (pipeline.Definition, error) {
		s.Reads()
		return f(s)
	}
}
