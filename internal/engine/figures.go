package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/pipeline-run/pipeline/pipeline"
)

// tooLargeError is a record larger than the topic it goes to takes.
type tooLargeError struct{ msg string }

func (e *tooLargeError) Error() string { return e.msg }

func tooLarge(format string, args ...any) error {
	return &tooLargeError{msg: fmt.Sprintf(format, args...)}
}

// Dead-letter reasons, the reason label of pipeline_dead_letters_total.
const (
	ReasonDecode    = "decode"     // a key or value that is not in its format
	ReasonTooLarge  = "too_large"  // an output larger than its topic takes
	ReasonEventTime = "event_time" // a source's event_time.from that gives no time
	ReasonError     = "error"      // an expression or an operator failed
)

// deadLetterReason classifies a failed record.
func deadLetterReason(e *pipeline.RecordError) string {
	var de *pipeline.DecodeError
	var tl *tooLargeError
	switch {
	case errors.As(e.Err, &de):
		return ReasonDecode
	case errors.As(e.Err, &tl):
		return ReasonTooLarge
	case len(e.Path) > len(".event_time.from") && e.Path[len(e.Path)-len(".event_time.from"):] == ".event_time.from":
		return ReasonEventTime
	}
	return ReasonError
}

// Figures are the labelled figures of a run, for metrics: per source, step
// and sink, records covered by committed checkpoints; dead letters by step
// and reason.
type Figures struct {
	// Records maps a source, step or sink name to the records it handled
	// in committed checkpoints: read from its topics (sources), handed to
	// it (steps), written (sinks).
	Sources, Steps, Sinks map[string]int64
	// DeadLetters counts the records sent to the dead-letter topic by the
	// step (or source) they failed in and reason.
	DeadLetters map[DeadLetterKey]int64
	// State is each stateful step's state in this instance's stores, as
	// of the last checkpoint.
	State map[string]StepState
	// Restoring is, for each step and task restoring its state now, the
	// changelog offsets it has read and has to read.
	Restoring map[StepTask]RestoreProgress
}

// StepState is a stateful step's state in this instance: committed keys
// (-1 where the backend does not count them) and memory held.
type StepState struct{ Keys, Bytes int64 }

// StepTask names one step in one task.
type StepTask struct {
	Step string
	Task int32
}

// RestoreProgress is how far a restore has read its changelog partition.
type RestoreProgress struct{ Done, Total int64 }

// DeadLetterKey labels dead letters.
type DeadLetterKey struct{ Step, Reason string }

// figures accumulates Figures.
type figures struct {
	mu        sync.Mutex
	nodes     []int64 // by node index
	dead      map[DeadLetterKey]int64
	state     map[string]StepState
	restoring map[StepTask]RestoreProgress
}

func (f *figures) setState(s map[string]StepState) {
	f.mu.Lock()
	f.state = s
	f.mu.Unlock()
}

// restoreProgress notes a restore's progress; done with done set, it is
// forgotten.
func (f *figures) restoreProgress(k StepTask, p RestoreProgress, done bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.restoring == nil {
		f.restoring = map[StepTask]RestoreProgress{}
	}
	if done {
		delete(f.restoring, k)
		return
	}
	f.restoring[k] = p
}

func (f *figures) addNodes(counts []int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.nodes) < len(counts) {
		f.nodes = append(f.nodes, make([]int64, len(counts)-len(f.nodes))...)
	}
	for i, n := range counts {
		f.nodes[i] += n
	}
}

func (f *figures) deadLetter(step, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dead == nil {
		f.dead = map[DeadLetterKey]int64{}
	}
	f.dead[DeadLetterKey{step, reason}]++
}

// Figures returns the labelled running totals.
func (p *Pipeline) Figures() Figures {
	f := &p.figures
	f.mu.Lock()
	defer f.mu.Unlock()
	out := Figures{Sources: map[string]int64{}, Steps: map[string]int64{}, Sinks: map[string]int64{}, DeadLetters: map[DeadLetterKey]int64{},
		State: maps.Clone(f.state), Restoring: maps.Clone(f.restoring)}
	for _, n := range p.g.nodes {
		var v int64
		if n.idx < len(f.nodes) {
			v = f.nodes[n.idx]
		}
		switch {
		case n.kind == sourceNode && !n.internal:
			out.Sources[n.name] = v
		case n.kind == sinkNode:
			out.Sinks[n.name] = v
		case n.kind == stepNode && n.repart == nil:
			out.Steps[n.name] = v
		case n.repart != nil:
			out.Steps[n.name[:len(n.name)-len(".repartition")]] += v
		}
	}
	for k, v := range f.dead {
		// key_by's writing half carries the step's name.
		k.Step = strings.TrimSuffix(k.Step, ".repartition")
		out.DeadLetters[k] += v
	}
	return out
}

// PartitionLag is how far this instance's consumption of one partition is
// behind: the partition's last stable offset (what read_committed readers
// can read) minus the group's committed offset.
type PartitionLag struct {
	Topic     string
	Partition int32
	Lag       int64
}

// Lag returns the lag of every source partition (repartition topics
// included) this instance owns, from the group's committed offsets and the
// partitions' last stable offsets, asked of the cluster now. A partition of
// a topic written in transactions shows 1 when caught up: the commit
// marker after its last record, which no consumer commits past (Kafka's
// own tools show the same).
func (p *Pipeline) Lag(ctx context.Context) ([]PartitionLag, error) {
	rt := p.running.Load()
	if rt == nil {
		return nil, nil
	}
	rt.mu.Lock()
	owned := map[string][]int32{}
	for id, topics := range rt.owned {
		for topic := range topics {
			owned[topic] = append(owned[topic], int32(id))
		}
	}
	rt.mu.Unlock()
	if len(owned) == 0 {
		return nil, nil
	}
	adm := kadm.NewClient(rt.restoreCl)
	topics := make([]string, 0, len(owned))
	for t := range owned {
		topics = append(topics, t)
	}
	ends, err := adm.ListCommittedOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("listing the partitions' last stable offsets: %w", err)
	}
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("listing the partitions' start offsets: %w", err)
	}
	committed, err := adm.FetchOffsets(ctx, rt.cfg.Group)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return nil, fmt.Errorf("fetching the group's committed offsets: %w", err)
	}
	var out []PartitionLag
	for _, topic := range slices.Sorted(maps.Keys(owned)) {
		parts := owned[topic]
		slices.Sort(parts)
		for _, part := range parts {
			end, ok := ends.Lookup(topic, part)
			if !ok || end.Err != nil {
				continue
			}
			pos := int64(0)
			if s, ok := starts.Lookup(topic, part); ok && s.Err == nil {
				pos = s.Offset
			}
			if c, ok := committed.Lookup(topic, part); ok && c.Err == nil && c.At >= 0 {
				pos = max(pos, c.At)
			}
			out = append(out, PartitionLag{Topic: topic, Partition: part, Lag: max(0, end.Offset-pos)})
		}
	}
	return out, nil
}
