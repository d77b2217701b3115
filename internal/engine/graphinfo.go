package engine

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/pipeline-run/pipeline/pipeline"
)

// Summary is a one-line description of the graph, for `validate`.
func (g *Graph) Summary() string {
	var parts []string
	for _, n := range g.nodes {
		switch n.kind {
		case sourceNode:
			if n.internal {
				continue
			}
			parts = append(parts, fmt.Sprintf("source %s%v", n.name, n.source.Topics))
		case stepNode:
			from := make([]string, len(n.inputs))
			for i, in := range n.inputs {
				from[i] = in.String()
			}
			if n.repart != nil {
				parts = append(parts, fmt.Sprintf("%s %s<-%s->%s", n.op, strings.TrimSuffix(n.name, ".repartition"), strings.Join(from, "+"), n.repart.topic))
				continue
			}
			parts = append(parts, fmt.Sprintf("%s %s<-%s", n.op, n.name, strings.Join(from, "+")))
		case sinkNode:
			parts = append(parts, fmt.Sprintf("sink %s<-%s->%s", n.name, n.inputs[0], n.sink.topic))
		}
	}
	s := strings.Join(parts, " | ")
	if g.dlq != "" {
		s += " | dead-letter->" + g.dlq
	}
	return s
}

// SourceTopics returns every topic the pipeline reads, sorted.
func (g *Graph) SourceTopics() []string {
	out := make([]string, 0, len(g.byTopic))
	for t := range g.byTopic {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// rekeyedBy returns a step upstream of n that changes record keys, if any.
func rekeyedBy(n *node) *node {
	for _, in := range n.inputs {
		up := in.node
		if kc, ok := up.def.(pipeline.KeyChanger); ok && kc.ChangesKeys() {
			return up
		}
		if by := rekeyedBy(up); by != nil {
			return by
		}
	}
	return nil
}

// IsStateful reports whether the step named name keeps keyed state.
func (g *Graph) IsStateful(name string) bool {
	n, ok := g.byName[name]
	return ok && n.stateful() != nil
}

// StatefulSteps names the steps that keep keyed state.
func (g *Graph) StatefulSteps() []string {
	var out []string
	for _, n := range g.nodes {
		if n.stateful() != nil {
			out = append(out, n.name)
		}
	}
	return out
}

// OutputTopics returns every topic the pipeline writes outputs to: its
// sinks' and the dead-letter topic, sorted.
func (g *Graph) OutputTopics() []string {
	seen := map[string]bool{}
	var out []string
	for _, n := range g.sinks {
		if n.sink != nil && !seen[n.sink.topic] {
			seen[n.sink.topic] = true
			out = append(out, n.sink.topic)
		}
	}
	if g.dlq != "" && !seen[g.dlq] {
		out = append(out, g.dlq)
	}
	sort.Strings(out)
	return out
}

// addReads adds what one step reads of record values to what the graph
// reads.
func addReads(to *pipeline.ValueReads, r pipeline.ValueReads) {
	to.Whole = to.Whole || r.Whole
	for _, f := range r.Fields {
		if !slices.Contains(to.Fields, f) {
			to.Fields = append(to.Fields, f)
		}
	}
}

// knownKinds lists the operator kinds of reg and the engine's own, for
// messages.
func knownKinds(reg *pipeline.Registry) []string {
	return slices.Sorted(slices.Values(append(reg.Kinds(), "broadcast", "key_by", "parallel")))
}
