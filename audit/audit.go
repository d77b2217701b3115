// Package audit checks a pipeline's history against its topics. Every
// checkpoint writes a progress record (wire.Progress) inside its own
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

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/txsink"
	"github.com/pipeline-run/pipeline/wire"
)

// Spec says what to audit.
type Spec struct {
	Group      string
	Inputs     []string // source topics, repartition topics included
	Outputs    []string // sink topics and the dead-letter topic
	Progress   string   // the audit topic
	TxnTimeout time.Duration

	// Positioned lists the sink topics whose records carry source
	// positions (audit.source_positions): with it, each input's outputs
	// are checked one by one. Empty: those checks are off.
	Positioned []string
	// DeadLetter is the dead-letter topic, whose records name their
	// input in headers; with Positioned, they are checked by it too.
	DeadLetter string
	// Window bounds the audit; the zero Window audits the whole history.
	Window Window
	// OnRead, when not nil, is told how far the audit's reads have come:
	// which topic it reads, and how many of its offsets it has read. It
	// is called from Run's goroutine, often; throttling is the caller's.
	OnRead func(Reading)
	// StartLatest says a new group of the pipeline starts at the end of
	// its inputs (consumer.start_from: latest), skipping what is there on
	// purpose. Where that end was is not recorded, so the records before
	// each input partition's first checkpoint, and before the group's
	// offset on partitions no checkpoint consumed, are not checked (a note
	// says so). False (start_from: earliest, the default) checks them.
	StartLatest bool
}

// Check names one property of an exactly-once history.
type Check string

const (
	Overlap     Check = "overlap"      // input offsets consumed by two committed checkpoints
	Gap         Check = "gap"          // input records consumed by no committed checkpoint: between two ranges, or before a partition's first
	OutputCount Check = "output-count" // an output partition holds other than what committed checkpoints wrote
	Hanging     Check = "hanging"      // a transaction left open on an output partition
	Offsets     Check = "offsets"      // the group's committed offsets differ from the last checkpoint's end, or skip records no checkpoint consumed
	Progress    Check = "progress"     // a progress record that cannot be read

	// With source positions (Spec.Positioned):
	Duplicate   Check = "duplicate"    // one output of an input (same sink and number) visible twice
	Missing     Check = "missing"      // an input's outputs skip a number: one in between is gone
	Misplaced   Check = "misplaced"    // an input's output written by another transaction than the one that consumed the input
	Unsourced   Check = "unsourced"    // an output naming no input, or one no committed checkpoint consumed
	SourceCount Check = "source-count" // a checkpoint wrote other than the outputs of the inputs it consumed
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
	Checkpoints   int   // committed checkpoints audited (within the window)
	InputRecords  int64 // input records those checkpoints consumed
	OutputRecords int64 // output records accounted for
	// Sourced counts the outputs checked against their source positions,
	// and Sources the inputs they name.
	Sourced, Sources int64
	// Notes say what was not checked, and why.
	Notes    []string
	Findings []Finding
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

// position is one record's place in a topic.
type position struct {
	tp
	offset int64
}

func (p position) String() string { return fmt.Sprintf("%s/%d@%d", p.topic, p.partition, p.offset) }

func positionOf(r *kgo.Record) position { return position{tp{r.Topic, r.Partition}, r.Offset} }

// checkpoint is one committed progress record.
type checkpoint struct {
	id       string // instance/run/id, for messages and window ends
	order    int    // index in the progress topic: the order checkpoints committed in
	time     time.Time
	producer int64 // the producer id of its transaction, which wrote its outputs too
	in       bool  // within the window
	outputs  map[tp]int64
	inputs   []span
}

type span struct {
	tp
	first, last int64
	cp          *checkpoint
}

// history is what the committed progress records say.
type history struct {
	cps      []*checkpoint
	consumed map[tp][]span // sorted by first offset
}

// consumer returns the committed checkpoint that consumed p, or nil.
func (h *history) consumer(p position) *checkpoint {
	spans := h.consumed[p.tp]
	i, _ := slices.BinarySearchFunc(spans, p.offset, func(s span, off int64) int { return cmp.Compare(s.first, off+1) })
	// spans[i-1] is the last one starting at or before p.
	if i > 0 && spans[i-1].last >= p.offset {
		return spans[i-1].cp
	}
	return nil
}

// Run audits. cl must be able to read every topic in spec; its isolation
// level does not matter (reads choose theirs).
//
// Audit a stopped pipeline: the topics and offsets are read one after the
// other, so a checkpoint committing meanwhile shows as a difference between
// them that a second run would not find.
//
// A window end that cannot be used is a *WindowError.
func Run(ctx context.Context, cl *kgo.Client, spec Spec) (*Report, error) {
	if err := spec.Window.Check(); err != nil {
		return nil, err
	}
	adm := kadm.NewClient(cl)
	r := &Report{}
	whole := spec.Window.IsZero()
	rd := newReader(cl, spec)

	h, err := readProgress(ctx, rd, spec, r)
	if err != nil {
		return nil, err
	}
	if err := spec.Window.resolve(h.cps); err != nil {
		return nil, err
	}
	for _, cp := range h.cps {
		if cp.in {
			r.Checkpoints++
		}
	}

	// Inputs: committed ranges never overlap, and nothing lies between
	// them. With a window, a pair of neighbouring ranges is checked when
	// either is within it: the window's first range against the one
	// before, never against the start of the topic.
	inputData := map[tp][]int64{} // offsets of read_committed data records
	for _, topic := range spec.Inputs {
		recs, err := rd.read(ctx, "input", topic)
		if err != nil {
			return nil, fmt.Errorf("reading input %s: %w", topic, err)
		}
		for _, rec := range recs {
			k := tp{rec.Topic, rec.Partition}
			inputData[k] = append(inputData[k], rec.Offset)
		}
	}
	// Listed after the reads: retention meanwhile moves a start later,
	// never earlier, so records it removed are not counted as skipped.
	logStart, err := logStarts(ctx, adm, spec.Inputs)
	if err != nil {
		return nil, err
	}
	lastEnd := map[tp]int64{}
	for k, spans := range h.consumed {
		data := inputData[k]
		for i, s := range spans {
			if s.cp.in {
				r.InputRecords += countIn(data, s.first, s.last)
			}
			if i == 0 {
				// The head, before the partition's first range, belongs
				// to the checkpoint that consumed that range.
				if s.cp.in && !spec.StartLatest {
					headGap(r, k, data, logStart[k], s)
				}
				continue
			}
			prev := spans[i-1]
			if !s.cp.in && !prev.cp.in {
				continue
			}
			switch {
			case s.first <= prev.last:
				r.add(Overlap, fmt.Sprintf("%s@%d", k, s.first), "offsets %d..%d were consumed by checkpoint %s and again by %s",
					s.first, min(s.last, prev.last), prev.cp.id, s.cp.id)
			case s.first > prev.last+1:
				if n := countIn(data, prev.last+1, s.first-1); n > 0 {
					r.add(Gap, fmt.Sprintf("%s@%d", k, prev.last+1), "%d records between checkpoint %s (ends at %d) and %s (starts at %d) were consumed by no committed checkpoint",
						n, prev.cp.id, prev.last, s.cp.id, s.first)
				}
			}
		}
		// The group's offset is checked against the last checkpoint only
		// when the window holds it.
		if last := spans[len(spans)-1]; last.cp.in {
			lastEnd[k] = last.last + 1
		}
	}

	// Outputs: each partition holds exactly what committed checkpoints
	// wrote: no more (duplicates, or records from aborted or foreign
	// transactions), no fewer (lost writes). That needs the whole
	// history; a window bounds the outputs only through their sources.
	src := newSources(spec, h, r)
	for _, topic := range spec.Outputs {
		recs, err := rd.read(ctx, "output", topic)
		if err != nil {
			return nil, fmt.Errorf("reading output %s: %w", topic, err)
		}
		src.read(topic, recs)
		if !whole {
			continue
		}
		written := map[tp]int64{}
		for _, cp := range h.cps {
			for k, n := range cp.outputs {
				if k.topic == topic {
					written[k] += n
				}
			}
		}
		visible := map[tp]int64{}
		for _, rec := range recs {
			visible[tp{rec.Topic, rec.Partition}]++
		}
		for k := range written {
			visible[k] += 0
		}
		for k, n := range visible {
			w := written[k]
			r.OutputRecords += min(n, w)
			if n != w {
				r.add(OutputCount, k.String(), "%d records visible to read_committed, committed checkpoints wrote %d", n, w)
			}
		}
	}
	switch {
	case len(spec.Positioned) > 0:
		src.check(r, inputData)
		if !whole {
			r.OutputRecords = src.accounted
		}
	case !whole:
		r.Notes = append(r.Notes, "output counts were not checked: within a window, outputs can be told apart only by their source positions (audit.source_positions)")
	}

	// No transaction left open on an output partition.
	set, err := txsink.PartitionsOf(ctx, adm, spec.Outputs...)
	if err != nil {
		return nil, err
	}
	hanging, err := txsink.Hanging(ctx, adm, set, spec.TxnTimeout)
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
	if !whole && len(lastEnd) < len(h.consumed) {
		r.Notes = append(r.Notes, fmt.Sprintf("the group's offsets were checked on %d of %d input partitions: on the others the last checkpoint is after the window", len(lastEnd), len(h.consumed)))
	}
	// A partition no committed checkpoint consumed, at all, has only a
	// head: the group's offset there skips what lies before it. That is
	// checked when the window holds the first checkpoint of the history,
	// as a head is with its partition's first checkpoint.
	unconsumed := skippedUnconsumed(spec, h, committed, inputData, logStart)
	switch {
	case spec.StartLatest:
		r.Notes = append(r.Notes, "consumer.start_from is latest: a new group starts at the end its inputs had then, which is not recorded, "+
			"so the records before each input partition's first checkpoint, and before the group's offset on partitions no checkpoint consumed, were not checked")
	case len(h.cps) == 0 || h.cps[0].in:
		for _, u := range unconsumed {
			r.add(Offsets, u.tp.String(), "the group's committed offset is %d, but no committed checkpoint consumed this partition: "+
				"the %d records before it (offsets %d..%d, from the log start) are skipped (the offset moved by `pipeline offsets reset` or by hand, "+
				"or the pipeline ran before its progress records begin)",
				u.at, u.skipped, u.start, u.at-1)
		}
	case len(unconsumed) > 0:
		r.Notes = append(r.Notes, fmt.Sprintf("the group's offsets on %d input partitions that no committed checkpoint consumed were not checked: the window starts after the first checkpoint", len(unconsumed)))
	}
	slices.SortFunc(r.Findings, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(a.Check, b.Check), cmp.Compare(a.Where, b.Where), cmp.Compare(a.Detail, b.Detail))
	})
	return r, nil
}

// headGap reports the records of partition k before its first committed
// range, first, from the log start on: no checkpoint consumed them.
// Records removed by retention are not there to count, and a log start
// after the range leaves nothing.
func headGap(r *Report, k tp, data []int64, start int64, first span) {
	n := countIn(data, start, first.first-1)
	if n == 0 {
		return
	}
	r.add(Gap, fmt.Sprintf("%s@%d", k, start), "%d records (offsets %d..%d, from the log start) lie before checkpoint %s (starts at %d), the first on this partition, "+
		"and were consumed by no committed checkpoint: the group's offset was past them (moved by `pipeline offsets reset` or by hand), "+
		"or the pipeline ran before its progress records begin; if that was deliberate, audit --from a checkpoint committed after %s",
		n, start, first.first-1, first.cp.id, first.first, first.cp.id)
}

// unconsumedOffset is a committed group offset on an input partition that
// no committed checkpoint consumed, with the records it skips.
type unconsumedOffset struct {
	tp
	at, start, skipped int64
}

// skippedUnconsumed returns the input partitions that no committed
// checkpoint consumed on which the group's committed offset lies past
// records still in the log, sorted. An offset at the log start (or one
// with only transaction markers and aborted records before it) skips
// nothing; records after it are lag.
func skippedUnconsumed(spec Spec, h *history, committed kadm.OffsetResponses, inputData map[tp][]int64, logStart map[tp]int64) []unconsumedOffset {
	var out []unconsumedOffset
	committed.Each(func(o kadm.OffsetResponse) {
		k := tp{o.Topic, o.Partition}
		if o.Err != nil || !slices.Contains(spec.Inputs, k.topic) || len(h.consumed[k]) > 0 {
			return
		}
		if n := countIn(inputData[k], logStart[k], o.At-1); n > 0 {
			out = append(out, unconsumedOffset{k, o.At, logStart[k], n})
		}
	})
	slices.SortFunc(out, func(a, b unconsumedOffset) int {
		return cmp.Or(cmp.Compare(a.topic, b.topic), cmp.Compare(a.partition, b.partition))
	})
	return out
}

// logStarts lists the earliest offset still in the log of each partition
// of topics.
func logStarts(ctx context.Context, adm *kadm.Client, topics []string) (map[tp]int64, error) {
	out := map[tp]int64{}
	if len(topics) == 0 {
		return out, nil
	}
	listed, err := adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("listing the start offsets of the inputs: %w", err)
	}
	var errs []error
	listed.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			errs = append(errs, fmt.Errorf("listing the start offset of %s/%d: %w", o.Topic, o.Partition, o.Err))
			return
		}
		out[tp{o.Topic, o.Partition}] = o.Offset
	})
	return out, errors.Join(errs...)
}

// readProgress reads the group's committed progress records, in the order
// they committed.
func readProgress(ctx context.Context, rd *reader, spec Spec, r *Report) (*history, error) {
	recs, err := rd.read(ctx, "progress", spec.Progress)
	if err != nil {
		return nil, fmt.Errorf("reading the progress topic: %w", err)
	}
	// The pipeline writes them all to partition 0, so offsets are the
	// commit order; other partitions follow, each in its own order.
	slices.SortStableFunc(recs, func(a, b *kgo.Record) int {
		return cmp.Or(cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Offset, b.Offset))
	})
	h := &history{consumed: map[tp][]span{}}
	for _, rec := range recs {
		var p wire.Progress
		if err := json.Unmarshal(rec.Value, &p); err != nil {
			r.add(Progress, positionOf(rec).String(), "not a progress record: %v", err)
			continue
		}
		if p.Group != spec.Group {
			continue
		}
		cp := &checkpoint{
			id:    fmt.Sprintf("%s/%s/%d", p.Instance, p.Run, p.Checkpoint),
			order: len(h.cps), time: time.UnixMilli(p.Time), producer: rec.ProducerID,
			outputs: make(map[tp]int64, len(p.Outputs)),
		}
		for _, in := range p.Inputs {
			s := span{tp: tp{in.Topic, in.Partition}, first: in.First, last: in.Last, cp: cp}
			cp.inputs = append(cp.inputs, s)
			h.consumed[s.tp] = append(h.consumed[s.tp], s)
		}
		for _, out := range p.Outputs {
			cp.outputs[tp{out.Topic, out.Partition}] += out.Records
		}
		h.cps = append(h.cps, cp)
	}
	for _, spans := range h.consumed {
		slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.first, b.first) })
	}
	return h, nil
}

// countIn counts the offsets of sorted within [first, last].
func countIn(sorted []int64, first, last int64) int64 {
	lo, _ := slices.BinarySearch(sorted, first)
	hi, _ := slices.BinarySearch(sorted, last+1)
	return int64(hi - lo)
}

func isGroupNotFound(err error) bool { return errors.Is(err, kerr.GroupIDNotFound) }
