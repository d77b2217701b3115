package engine

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/ops"
)

// nodeKind tells sources, steps and sinks apart.
type nodeKind uint8

const (
	sourceNode nodeKind = iota
	stepNode
	sinkNode
)

// node is one vertex of the graph: a source, a step or a sink.
type node struct {
	idx  int // position in Graph.nodes, which is a topological order
	name string
	path string
	kind nodeKind
	op   string // operator kind for steps

	def        pipeline.Definition // steps
	broken     bool                // steps: building it reported errors, so its outputs are unknown
	readBroken bool                // steps: broken, and a from names one of its outputs
	parallel   *parallelDef        // steps of kind parallel
	repart     *repartitionDef     // the writing half of a key_by step
	sink       *sinkDef            // sinks
	source     *config.Source
	internal   bool // a source reading a key_by step's repartition topic
	// et is where a source's records get their event time; set on the
	// sources the records of which come from outside, in graphs that
	// track event time (Graph.eventTime).
	et *eventTimeDef
	// upTopics are the topics whose records reach a step: the topics of
	// the sources, or repartition topics, it reads through other steps.
	upTopics []string

	keyFormat, valueFormat pipeline.Format // sources
	// dec is how sources decode their records: with their formats, into
	// the fields of JSON values some step reads (Spec.ValueReads).
	// Repartition topics' values come in the format their header names:
	// decs has a decoding per format.
	dec  *pipeline.Decoding
	decs [3]*pipeline.Decoding
	// direct is set on a source whose one reader is a sink writing records
	// as they were read: see directSink.
	direct *node

	inputs []streamRef
	// outputs maps an output name ("" for the default) to its readers.
	outputs map[string][]edge
	// readers are outputs[""], for task.deliver to find without a lookup
	// for every record.
	readers []edge
	// afterParallel is set on nodes a parallel stage's workers can reach:
	// their per-task instances are guarded by the task's lock.
	afterParallel bool
}

type edge struct {
	to    *node
	input int // which of to's inputs this is
}

type streamRef struct {
	node   *node
	output string
}

func (r streamRef) String() string {
	if r.output == "" {
		return r.node.name
	}
	return r.node.name + "." + r.output
}

// Graph is the validated operator graph of a pipeline.
type Graph struct {
	nodes   []*node
	byName  map[string]*node
	byTopic map[string]*node // source topic -> source node
	sinks   []*node
	stages  []*parallelDef
	dlq     string
	// eventTime is set when some step uses event time or a source
	// configures it: tasks then track watermarks (eventtime.go).
	eventTime bool
	// forgets is set when no step keeps a record once it has processed
	// it: tasks then reuse the memory of the records they read (see
	// forgets).
	forgets bool
	// recycles is set when, moreover, no step keeps a byte of what a
	// record was read from (pipeline.InputForgetter): the client's
	// fetched memory then goes back to it (fetchpool.Pool).
	recycles bool
}

// Build turns the configuration into a graph, compiling every expression.
// It reports every problem it finds, each named by its YAML path.
func Build(cfg *config.Config, reg *pipeline.Registry) (*Graph, error) {
	if reg == nil {
		reg = ops.NewRegistry()
	}
	var errs config.Errors
	var reads pipeline.ValueReads
	errf := func(path, format string, args ...any) {
		errs = append(errs, &config.FieldError{Path: path, Line: cfg.Line(path), Msg: fmt.Sprintf(format, args...)})
	}
	g := &Graph{byName: map[string]*node{}, byTopic: map[string]*node{}, dlq: cfg.DeadLetter.Topic}
	// The rules over names, topics, formats and which streams exist are
	// the configuration's (config.Validate, which Check runs): here a
	// configuration that broke them, and said so, is built as far as it
	// goes, for the problems only the graph can find.
	add := func(n *node) bool {
		if _, ok := g.byName[n.name]; ok {
			return false
		}
		n.idx = len(g.nodes)
		n.outputs = map[string][]edge{}
		g.nodes = append(g.nodes, n)
		g.byName[n.name] = n
		return true
	}

	for i := range cfg.Sources {
		src := &cfg.Sources[i]
		n := &node{name: src.Name, path: src.Path, kind: sourceNode, source: src}
		n.et = buildEventTime(src, cfg.Line, &errs, &reads)
		g.eventTime = g.eventTime || src.EventTime != nil
		n.valueFormat, _ = pipeline.ParseFormat(src.Format)
		n.keyFormat, _ = parseKeyFormat(src.KeyFormat)
		for _, t := range src.Topics {
			if _, ok := g.byTopic[t]; !ok {
				g.byTopic[t] = n
			}
		}
		add(n)
	}

	// resolve turns a stream name into a reference. Steps may only read
	// sources and earlier steps, which keeps the graph acyclic and the
	// YAML readable top to bottom.
	resolve := func(path, name string) (streamRef, bool) {
		base, out, _ := strings.Cut(name, ".")
		n, ok := g.byName[base]
		if !ok || n.kind == sinkNode {
			// A name that is nowhere is the configuration's to report; one
			// of a later step is the graph's.
			if slices.ContainsFunc(cfg.Steps, func(s config.Step) bool { return s.Name == base }) {
				errf(path, "no source or earlier step named %q (known: %s)", base, strings.Join(g.streamNames(), ", "))
			}
			return streamRef{}, false
		}
		if out == "default" {
			out = ""
		}
		if out != "" && n.broken {
			// The step itself failed to build, and said so: its outputs
			// are unknown, not missing, and it is read.
			n.readBroken = true
			return streamRef{}, false
		}
		if out != "" && !n.hasOutput(out) {
			if len(n.namedOutputs()) == 0 {
				errf(path, "%s has no named outputs; read it as %q", base, base)
			} else {
				errf(path, "%s has no output %q (outputs: %s)", base, out, strings.Join(n.namedOutputs(), ", "))
			}
			return streamRef{}, false
		}
		return streamRef{node: n, output: out}, true
	}

	var prev *node // the previous step, read by a step with no from
	for i := range cfg.Steps {
		st := &cfg.Steps[i]
		n := &node{name: st.Name, path: st.Path, kind: stepNode, op: st.Kind}
		opPath := st.Path + "." + st.Kind
		switch {
		case len(st.From) > 0:
			for j, f := range st.From {
				p := st.Path + ".from"
				if len(st.From) > 1 {
					p = fmt.Sprintf("%s.from[%d]", st.Path, j)
				}
				if ref, ok := resolve(p, f); ok {
					n.inputs = append(n.inputs, ref)
				}
			}
		case prev != nil:
			n.inputs = []streamRef{{node: prev}}
		case len(cfg.Sources) == 1:
			n.inputs = []streamRef{{node: g.byName[cfg.Sources[0].Name]}}
		default: // several sources and no from: the configuration says so
		}
		spec := pipeline.NewSpec(st.Name, st.Kind, opPath, st.Spec, len(n.inputs), cfg.Line)
		// specDone adds what the step's factory reported, and what it
		// reads of values, to the graph's.
		specDone := func() {
			errs = append(errs, spec.Problems()...)
			addReads(&reads, spec.ValueReads())
		}
		if st.Kind == "key_by" || st.Kind == "broadcast" {
			// Two nodes: the writing half takes the step's inputs, and a
			// source reading the repartition topic takes its name, so
			// the steps after it read what comes back.
			var d *repartitionDef
			if st.Kind == "broadcast" {
				d = buildBroadcast(cfg, st, spec)
			} else {
				d = buildKeyBy(cfg, st, spec)
			}
			spec.Reads() // through its key expression only
			specDone()
			w := &node{name: st.Name + ".repartition", path: st.Path, kind: stepNode, op: st.Kind, repart: d, inputs: n.inputs}
			for _, in := range w.inputs {
				if in.node.afterParallel || in.node.parallel != nil {
					w.afterParallel = true
				}
			}
			if add(w) {
				for j, in := range w.inputs {
					in.node.outputs[in.output] = append(in.node.outputs[in.output], edge{to: w, input: j})
				}
			}
			r := &node{name: st.Name, path: st.Path, kind: sourceNode, internal: true, keyFormat: pipeline.String, valueFormat: pipeline.JSON}
			if d != nil {
				r.source = &config.Source{Name: st.Name, Topics: []string{d.topic}, Format: "json", KeyFormat: "string", Path: st.Path}
				g.byTopic[d.topic] = r
			}
			add(r)
			prev = r
			continue
		}
		opErrs := len(errs)
		if st.Kind == "parallel" {
			n.parallel = buildParallel(spec, reg)
			specDone()
			if n.parallel != nil {
				n.parallel.node = n
				n.def = n.parallel.inner
				for _, in := range n.inputs {
					if in.node.afterParallel || in.node.parallel != nil {
						errf(opPath, "a parallel stage cannot read the output of another parallel stage; put both steps into one stage")
					}
				}
				g.stages = append(g.stages, n.parallel)
			}
		} else if f, ok := reg.Lookup(st.Kind); ok {
			def, err := f(spec)
			before := len(spec.Problems())
			specDone()
			if err != nil {
				errf(opPath, "%v", err)
			} else if def == nil && before == 0 {
				errf(opPath, "operator %q built nothing", st.Kind)
			}
			n.def = def
			if u, ok := def.(pipeline.EventTimeUser); ok && u.UsesEventTime() {
				g.eventTime = true
			}
		} else {
			errf(opPath, "unknown operator %q (known: %s)", st.Kind, strings.Join(knownKinds(reg), ", "))
		}
		n.broken = len(errs) > opErrs
		for _, in := range n.inputs {
			if in.node.afterParallel || in.node.parallel != nil {
				n.afterParallel = true
			}
		}
		if add(n) {
			for j, in := range n.inputs {
				in.node.outputs[in.output] = append(in.node.outputs[in.output], edge{to: n, input: j})
			}
		}
		prev = n
	}

	for i := range cfg.Sinks {
		sk := &cfg.Sinks[i]
		n := &node{name: sk.Name, path: sk.Path, kind: sinkNode}
		var ref streamRef
		var ok bool
		switch {
		case sk.From != "":
			ref, ok = resolve(sk.Path+".from", sk.From)
		case prev != nil:
			ref, ok = streamRef{node: prev}, true
		case len(cfg.Sources) == 1:
			ref, ok = streamRef{node: g.byName[cfg.Sources[0].Name]}, true
		default:
			errf(sk.Path+".from", "required: there are several sources and no steps")
		}
		n.sink = buildSink(sk, cfg.Audit.SourcePositions, cfg.Line, &errs, &reads)
		if ok {
			n.inputs = []streamRef{ref}
			n.afterParallel = ref.node.afterParallel || ref.node.parallel != nil
		}
		if add(n) && ok {
			ref.node.outputs[ref.output] = append(ref.node.outputs[ref.output], edge{to: n})
		}
		g.sinks = append(g.sinks, n)
	}
	if len(cfg.Sinks) == 0 {
		errf("sinks", "at least one sink is required")
	}

	// Stateful steps keep state per task, that is per source partition:
	// their records must still be keyed as the source partitioned them.
	for _, n := range g.nodes {
		if n.kind != stepNode {
			continue
		}
		if n.parallel != nil {
			if _, ok := n.parallel.inner.(pipeline.StatefulDefinition); ok {
				errf(n.path+".parallel", "a stateful step cannot run inside a parallel stage")
			}
			continue
		}
		if n.stateful() == nil {
			continue
		}
		if u, ok := n.def.(pipeline.EventTimeUser); ok && u.UsesEventTime() && n.afterParallel {
			errf(n.path, "a step on event time cannot read from a parallel stage: the stage's workers finish records out of the order they were read in, and the watermark would pass records still in the stage; put a key_by between them, or the parallel stage after this step")
		}
		if by := rekeyedBy(n); by != nil {
			errf(n.path, "its records were re-keyed by step %q (%s); keyed state needs records partitioned by their key: re-key with a key_by step, which moves each record to the task owning its new key", by.name, by.path)
		}
		// A broadcast join looks up a table every task holds whole: its
		// second input must reach every task.
		if n.op == "broadcast_join" && len(n.inputs) == 2 && !g.isBroadcast(n.inputs[1].node) {
			errf(n.path, "its second input, %s, is not a broadcast step: each task would hold only the rows of its own partition. Put a broadcast step in between (- {name: %s_everywhere, from: %s, broadcast: {}})",
				n.inputs[1].node.name, n.inputs[1].node.name, n.inputs[1].String())
		}
	}

	// audit.source_positions stamps each sink record with the one input it
	// derives from: a step whose outputs stand for several inputs has none.
	if cfg.Audit.SourcePositions {
		for _, n := range g.nodes {
			m, ok := n.def.(pipeline.Merger)
			if !ok || n.kind != stepNode {
				continue
			}
			if sub, what, instead := m.MergesInputs(); sub != "" {
				errf(n.path+"."+n.op+sub, "%s, which has no single source position; "+
					"audit.source_positions needs steps that write each record for one input (%s, or turn audit.source_positions off)", what, instead)
			}
		}
	}

	// A step whose output nobody reads is almost always a mistake in the
	// YAML (a misspelt from); say so rather than drop records silently.
	for _, n := range g.nodes {
		if n.kind != stepNode || n.def == nil || n.repart != nil || n.readBroken {
			continue
		}
		if len(n.outputs) == 0 {
			errf(n.path, "nothing reads the output of step %q", n.name)
		}
	}

	if len(errs) > 0 {
		sort.SliceStable(errs, func(i, j int) bool {
			if errs[i].Line != errs[j].Line && errs[i].Line > 0 && errs[j].Line > 0 {
				return errs[i].Line < errs[j].Line
			}
			return false
		})
		return nil, errs
	}
	for _, n := range g.nodes {
		n.readers = n.outputs[""]
		switch {
		case n.kind == sourceNode:
			n.direct = directSink(n)
			n.decodeWith(reads)
		case n.kind == stepNode:
			_, n.upTopics = stepTasks(n, nil)
		}
	}
	g.forgets = forgets(g.nodes)
	g.recycles = g.forgets && recycles(g.nodes)
	return g, nil
}

// forgets reports whether no step of the graph keeps a record once it
// has processed it: each a pipeline.Forgetter that says so, and no
// parallel stage or repartition, whose records cross to other goroutines.
// Sinks keep nothing: they copy what they write. The tasks of such a graph
// reuse the memory of the records they read and of the values their
// steps build, chunk after chunk (aheadMem, Evaluator.Reuse): it was a
// third of what a filter and a map allocated per record.
func forgets(nodes []*node) bool {
	for _, n := range nodes {
		if n.kind != stepNode {
			continue
		}
		if n.parallel != nil || n.repart != nil {
			return false
		}
		if f, ok := n.def.(pipeline.Forgetter); !ok || !f.KeepsNoRecords() {
			return false
		}
	}
	return true
}

// recycles reports whether every step of a graph that forgets records is
// a pipeline.InputForgetter that keeps no input.
func recycles(nodes []*node) bool {
	for _, n := range nodes {
		if n.kind != stepNode {
			continue
		}
		if f, ok := n.def.(pipeline.InputForgetter); !ok || !f.KeepsNoInput() {
			return false
		}
	}
	return true
}

// decodeWith sets a source's decodings to build the value fields reads
// names.
func (n *node) decodeWith(reads pipeline.ValueReads) {
	n.dec = pipeline.NewDecoding(n.keyFormat, n.valueFormat, reads)
	for _, f := range []pipeline.Format{pipeline.JSON, pipeline.String, pipeline.Bytes} {
		n.decs[f] = pipeline.NewDecoding(n.keyFormat, f, reads)
	}
}

// directSink returns the sink that is src's only reader when it writes each
// record exactly as read: no key, value or header expressions and no
// position stamps. Such records skip the Record the steps work on and go to
// the producer as the client fetched them (see sinkOp.passThrough). That
// took a quarter off a pass-through's CPU: 1.3-1.4 to 1.0-1.1 CPU-seconds
// per million records of 100 B on real Kafka.
func directSink(src *node) *node {
	if src.internal || len(src.outputs) != 1 || len(src.outputs[""]) != 1 || (src.et != nil && src.et.from != nil) {
		return nil
	}
	to := src.outputs[""][0].to
	if to.kind != sinkNode || to.sink == nil {
		return nil
	}
	if d := to.sink; d.key != nil || d.value != nil || len(d.headers) > 0 || d.positions {
		return nil
	}
	return to
}

// feedsSinkAsIs reports whether step n's one reader is a sink that writes
// the values it gets as they are, as JSON, with no expression that reads
// them: the object literals n's evaluator builds are then written as JSON
// at once (Evaluator.WriteObjectsAsJSON) rather than as fields the sink
// encodes: filter-map ran 5-10% faster for 8% less CPU on real Kafka.
func feedsSinkAsIs(n *node) bool {
	if n.kind != stepNode || n.parallel != nil || n.repart != nil || len(n.outputs) != 1 || len(n.outputs[""]) != 1 {
		return false
	}
	to := n.outputs[""][0].to
	if to.kind != sinkNode || to.sink == nil {
		return false
	}
	d := to.sink
	return d.key == nil && d.value == nil && len(d.headers) == 0 && d.valueFormat == pipeline.JSON
}

func parseKeyFormat(s string) (pipeline.Format, error) {
	if s == "" {
		return pipeline.String, nil
	}
	return pipeline.ParseFormat(s)
}

func (n *node) namedOutputs() []string {
	if n.def == nil {
		return nil
	}
	return n.def.Outputs()
}

func (n *node) hasOutput(out string) bool {
	for _, o := range n.namedOutputs() {
		if o == out {
			return true
		}
	}
	return false
}

func (g *Graph) streamNames() []string {
	var out []string
	for _, n := range g.nodes {
		if n.kind == sinkNode {
			continue
		}
		out = append(out, n.name)
		for _, o := range n.namedOutputs() {
			out = append(out, n.name+"."+o)
		}
	}
	return out
}

// isBroadcast reports whether n is what a broadcast step's records come
// back through: the source reading its internal topic.
func (g *Graph) isBroadcast(n *node) bool {
	w := g.byName[n.name+".repartition"]
	return n.kind == sourceNode && n.internal && w != nil && w.repart != nil && w.repart.broadcast
}
