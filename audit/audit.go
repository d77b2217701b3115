// Package audit checks a pipeline's history against its topics. Every
// checkpoint writes a progress record (pipeline.Progress) inside its own
// transaction, so the committed progress records say exactly what was
// consumed and written; the auditor reads them, the input and output topics
// and the group's offsets, and reports every place where the topics do not
// agree with an exactly-once history.
package audit

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/pipeline-run/pipeline/offsets"
	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Spec says what to audit.
type Spec struct {
	Group      string
	Inputs     []string // source topics
	Outputs    []string // sink topics and the dead-letter topic
	Progress   string   // the audit topic
	TxnTimeout time.Duration
}

// Check names one property of an exactly-once history.
type Check string

const (
	Overlap     Check = "overlap"      // input offsets consumed by two committed checkpoints
	Gap         Check = "gap"          // input records between committed checkpoints' ranges, consumed by none
	OutputCount Check = "output-count" // an output partition holds other than what committed checkpoints wrote
	Hanging     Check = "hanging"      // a transaction left open on an output partition
	Offsets     Check = "offsets"      // the group's committed offsets differ from the last checkpoint's end
	Progress    Check = "progress"     // a progress record that cannot be read
)

// Finding is one violation.
type Finding struct {
	Check  Check
	Where  string // topic/partition@offset or topic/partition
	Detail string
}

func (f Finding) String() string { return fmt.Sprintf("%s %s: %s", f.Check, f.Where, f.Detail) }

// Report is the outcome of an audit.
type Report struct {
	Checkpoints   int   // committed progress records read
	InputRecords  int64 // input records covered by committed checkpoints
	OutputRecords int64 // output records accounted for
	Findings      []Finding
}

// OK reports whether every check held.
func (r *Report) OK() bool { return len(r.Findings) == 0 }

func (r *Report) add(c Check, where, format string, args ...any) {
	r.Findings = append(r.Findings, Finding{Check: c, Where: where, Detail: fmt.Sprintf(format, args...)})
}

type tp struct {
	topic     string
	partition int32
}

func (p tp) String() string { return fmt.Sprintf("%s/%d", p.topic, p.partition) }

type span struct {
	first, last int64
	checkpoint  string // instance/run/id, for messages
}

// Run audits. cl must be able to read every topic in spec; its isolation
// level does not matter (reads choose theirs).
//
// Audit a stopped pipeline: the topics and offsets are read one after the
// other, so a checkpoint committing meanwhile shows as a difference between
// them that a second run would not find.
func Run(ctx context.Context, cl *kgo.Client, spec Spec) (*Report, error) {
	adm := kadm.NewClient(cl)
	r := &Report{}

	progress, err := offsets.ReadToEnd(ctx, cl, spec.Progress, true)
	if err != nil {
		return nil, fmt.Errorf("reading the progress topic: %w", err)
	}
	consumed := map[tp][]span{}
	written := map[tp]int64{}
	for _, rec := range progress {
		var p pipeline.Progress
		if err := json.Unmarshal(rec.Value, &p); err != nil {
			r.add(Progress, fmt.Sprintf("%s/%d@%d", rec.Topic, rec.Partition, rec.Offset), "not a progress record: %v", err)
			continue
		}
		if p.Group != spec.Group {
			continue
		}
		r.Checkpoints++
		id := fmt.Sprintf("%s/%s/%d", p.Instance, p.Run, p.Checkpoint)
		for _, in := range p.Inputs {
			k := tp{in.Topic, in.Partition}
			consumed[k] = append(consumed[k], span{in.First, in.Last, id})
		}
		for _, out := range p.Outputs {
			written[tp{out.Topic, out.Partition}] += out.Records
		}
	}

	// Inputs: committed ranges never overlap, and nothing lies between them.
	inputData := map[tp][]int64{} // offsets of read_committed data records
	for _, topic := range spec.Inputs {
		recs, err := offsets.ReadToEnd(ctx, cl, topic, true)
		if err != nil {
			return nil, fmt.Errorf("reading input %s: %w", topic, err)
		}
		for _, rec := range recs {
			k := tp{rec.Topic, rec.Partition}
			inputData[k] = append(inputData[k], rec.Offset)
		}
	}
	lastEnd := map[tp]int64{}
	for k, spans := range consumed {
		slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.first, b.first) })
		data := inputData[k]
		for i, s := range spans {
			r.InputRecords += countIn(data, s.first, s.last)
			if i == 0 {
				continue
			}
			prev := spans[i-1]
			switch {
			case s.first <= prev.last:
				r.add(Overlap, fmt.Sprintf("%s@%d", k, s.first), "offsets %d..%d were consumed by checkpoint %s and again by %s",
					s.first, min(s.last, prev.last), prev.checkpoint, s.checkpoint)
			case s.first > prev.last+1:
				if n := countIn(data, prev.last+1, s.first-1); n > 0 {
					r.add(Gap, fmt.Sprintf("%s@%d", k, prev.last+1), "%d records between checkpoint %s (ends at %d) and %s (starts at %d) were consumed by no committed checkpoint",
						n, prev.checkpoint, prev.last, s.checkpoint, s.first)
				}
			}
		}
		lastEnd[k] = spans[len(spans)-1].last + 1
	}

	// Outputs: each partition holds exactly what committed checkpoints
	// wrote: no more (duplicates, or records from aborted or foreign
	// transactions), no fewer (lost writes).
	for _, topic := range spec.Outputs {
		recs, err := offsets.ReadToEnd(ctx, cl, topic, true)
		if err != nil {
			return nil, fmt.Errorf("reading output %s: %w", topic, err)
		}
		visible := map[tp]int64{}
		for _, rec := range recs {
			visible[tp{rec.Topic, rec.Partition}]++
		}
		for k := range written {
			if k.topic == topic {
				visible[k] += 0
			}
		}
		for k, n := range visible {
			w := written[k]
			r.OutputRecords += min(n, w)
			if n != w {
				r.add(OutputCount, k.String(), "%d records visible to read_committed, committed checkpoints wrote %d", n, w)
			}
		}
	}

	// No transaction left open on an output partition.
	set, err := pipeline.PartitionsOf(ctx, adm, spec.Outputs...)
	if err != nil {
		return nil, err
	}
	hanging, err := pipeline.Hanging(ctx, adm, set, spec.TxnTimeout)
	if err != nil {
		return nil, fmt.Errorf("looking for hanging transactions: %w", err)
	}
	for _, h := range hanging {
		r.add(Hanging, fmt.Sprintf("%s/%d@%d", h.Topic, h.Partition, h.StartOffset), "producer %d left a transaction open (last write %s ago): %s",
			h.ProducerID, h.OpenFor.Round(time.Second), h.Reason)
	}

	// The group resumes exactly where the last committed checkpoint ended.
	committed, err := adm.FetchOffsets(ctx, spec.Group)
	if err != nil && !isGroupNotFound(err) {
		return nil, fmt.Errorf("fetching the offsets of group %s: %w", spec.Group, err)
	}
	for k, end := range lastEnd {
		c, ok := committed.Lookup(k.topic, k.partition)
		switch {
		case !ok || c.Err != nil:
			r.add(Offsets, k.String(), "the group has no committed offset; the last checkpoint ended at %d", end)
		case c.At != end:
			r.add(Offsets, k.String(), "the group's committed offset is %d; the last checkpoint ended at %d", c.At, end)
		}
	}
	slices.SortFunc(r.Findings, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(a.Check, b.Check), cmp.Compare(a.Where, b.Where))
	})
	return r, nil
}

// countIn counts the offsets of sorted within [first, last].
func countIn(sorted []int64, first, last int64) int64 {
	lo, _ := slices.BinarySearch(sorted, first)
	hi, _ := slices.BinarySearch(sorted, last+1)
	return int64(hi - lo)
}

func isGroupNotFound(err error) bool { return errors.Is(err, kerr.GroupIDNotFound) }
