package integration

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pipeline-run/pipeline/offsets"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Invariant is one property every end-to-end run must have (DESIGN.md,
// "Invariants every end-to-end test checks").
type Invariant int

const (
	// NoLoss: every input seq has an output.
	NoLoss Invariant = iota
	// NoDuplicates: no seq is output twice.
	NoDuplicates
	// PerKeyOrder: all outputs of a key are in one partition, in seq order.
	PerKeyOrder
	// NoAbortedVisible: read_committed shows exactly the records that the
	// log's transaction markers say were committed (or never transactional).
	NoAbortedVisible
	// OffsetsMatch: the group's committed offsets equal the input's end.
	OffsetsMatch
	// DerivedValues: each output is the value derived from its input once.
	DerivedValues
	// NoHangingTxn: no transaction is left open once the pipeline stopped.
	NoHangingTxn

	numInvariants
)

var invariantNames = [numInvariants]string{
	NoLoss:           "no loss",
	NoDuplicates:     "no duplicates",
	PerKeyOrder:      "per-key order",
	NoAbortedVisible: "nothing from an aborted transaction visible",
	OffsetsMatch:     "committed offsets match the input end",
	DerivedValues:    "derived values",
	NoHangingTxn:     "no hanging transaction",
}

func (i Invariant) String() string {
	if i < 0 || i >= numInvariants {
		return fmt.Sprintf("Invariant(%d)", int(i))
	}
	return invariantNames[i]
}

// Violation is one place where an invariant does not hold.
type Violation struct {
	Topic     string
	Partition int32
	Offset    int64 // -1 when no single record is at fault
	Key       string
	Seq       int64 // -1 when unknown
	Detail    string
}

func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s/%d", v.Topic, v.Partition)
	if v.Offset >= 0 {
		fmt.Fprintf(&b, "@%d", v.Offset)
	}
	if v.Key != "" {
		fmt.Fprintf(&b, " key %s", v.Key)
	}
	if v.Seq >= 0 {
		fmt.Fprintf(&b, " seq %d", v.Seq)
	}
	if v.Detail != "" {
		b.WriteString(": " + v.Detail)
	}
	return b.String()
}

// maxExamples bounds the violations kept per invariant; the count is exact.
const maxExamples = 5

// Findings are the violations of one invariant.
type Findings struct {
	Count    int
	Examples []Violation
}

// Report is what the checker saw and what it found.
type Report struct {
	Input, Output, Group string

	InputRecords int
	// SkippedInput are committed input records CheckSpec.Skip left out.
	SkippedInput int
	// OutputRecords are data records visible to read_committed.
	OutputRecords int
	// UncommittedRecords are data records visible to read_uncommitted.
	UncommittedRecords int
	// AbortedRecords are in aborted transactions: expected after crashes,
	// visible only under read_uncommitted.
	AbortedRecords int
	// OpenRecords are in transactions with no marker yet.
	OpenRecords int
	// CommitMarkers and AbortMarkers count transaction markers in the
	// output, one per transaction and partition.
	CommitMarkers, AbortMarkers int

	Violations [numInvariants]Findings
}

// OK reports whether every invariant holds.
func (r *Report) OK() bool {
	for _, f := range r.Violations {
		if f.Count > 0 {
			return false
		}
	}
	return true
}

// Violated lists the invariants that do not hold.
func (r *Report) Violated() []Invariant {
	var out []Invariant
	for i, f := range r.Violations {
		if f.Count > 0 {
			out = append(out, Invariant(i))
		}
	}
	return out
}

func (r *Report) add(inv Invariant, v Violation) {
	f := &r.Violations[inv]
	f.Count++
	if len(f.Examples) < maxExamples {
		f.Examples = append(f.Examples, v)
	}
}

// Summary is the one-line account of what was read.
func (r *Report) Summary() string {
	skipped := ""
	if r.SkippedInput > 0 {
		skipped = fmt.Sprintf(" (%d more left out)", r.SkippedInput)
	}
	return fmt.Sprintf("input %s: %d records%s; output %s: %d records read_committed, %d read_uncommitted (%d in aborted transactions, %d in open ones; %d commit and %d abort markers); group %s",
		r.Input, r.InputRecords, skipped, r.Output, r.OutputRecords, r.UncommittedRecords,
		r.AbortedRecords, r.OpenRecords, r.CommitMarkers, r.AbortMarkers, r.Group)
}

func (r *Report) String() string {
	var b strings.Builder
	b.WriteString(r.Summary())
	for i, f := range r.Violations {
		if f.Count == 0 {
			fmt.Fprintf(&b, "\n  ok    %d %s", i+1, Invariant(i))
			continue
		}
		plural := "s"
		if f.Count == 1 {
			plural = ""
		}
		fmt.Fprintf(&b, "\n  FAIL  %d %s: %d violation%s", i+1, Invariant(i), f.Count, plural)
		for _, v := range f.Examples {
			fmt.Fprintf(&b, "\n          %s", v)
		}
		if f.Count > len(f.Examples) {
			fmt.Fprintf(&b, "\n          ...")
		}
	}
	return b.String()
}

// InputRecord is one record of the input topic.
type InputRecord struct {
	Partition int32
	Offset    int64
	Key       string
	Seq       int64
}

// Derivation checks that an output value is what the pipeline should have
// made of its input record, returning why not.
type Derivation func(in InputRecord, outKey string, outValue []byte) error

// DoubledSeq is the derivation of the map step
// {k: value.k, seq: value.seq, doubled: value.seq * 2} with the source key
// kept: the value's k is the record key, which is the input's key, and
// doubled is 2*seq.
func DoubledSeq(in InputRecord, outKey string, outValue []byte) error {
	var v struct {
		K       *string      `json:"k"`
		Doubled *json.Number `json:"doubled"`
	}
	if err := json.Unmarshal(outValue, &v); err != nil {
		return fmt.Errorf("value %q: %v", outValue, err)
	}
	var problems []string
	if outKey != in.Key {
		problems = append(problems, fmt.Sprintf("record key %q, input key %q", outKey, in.Key))
	}
	switch {
	case v.K == nil:
		problems = append(problems, "no k")
	case *v.K != outKey:
		problems = append(problems, fmt.Sprintf("k %q is not the record key %q", *v.K, outKey))
	}
	if v.Doubled == nil {
		problems = append(problems, "no doubled")
	} else if d, err := jsonInt(*v.Doubled); err != nil || d != 2*in.Seq {
		problems = append(problems, fmt.Sprintf("doubled %s, want %d", *v.Doubled, 2*in.Seq))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; ") + fmt.Sprintf(" in %s", outValue))
	}
	return nil
}

// jsonInt reads an integer that an encoder may have written as a float
// (expression engines compute in float64: 10 may come out as 10 or 10.0).
func jsonInt(n json.Number) (int64, error) {
	if i, err := n.Int64(); err == nil {
		return i, nil
	}
	f, err := n.Float64()
	if err != nil {
		return 0, err
	}
	if f != float64(int64(f)) {
		return 0, fmt.Errorf("%s is not an integer", n)
	}
	return int64(f), nil
}

// CheckSpec says what to check after a run.
type CheckSpec struct {
	Input, Output string
	// Group is the pipeline's consumer group: its `name`.
	Group string
	// InputRecords, when positive, is how many records the input must hold;
	// a short input would make "no loss" hold vacuously.
	InputRecords int
	// Derive checks each output against its input; nil means DoubledSeq.
	Derive Derivation
	// Skip, when not nil, leaves out of the input the invariants are
	// judged against every committed input record whose value it is true
	// for (poison records, which belong in a dead-letter topic), so that an
	// output of theirs is a violation. Every other committed input record
	// must be a generator record.
	Skip func(value []byte) bool
	// TransactionalInput says the input was written in transactions, some
	// perhaps aborted. The checker then waits for the input's transactions
	// to end and will not judge while one is open (its records would be
	// missed), and the input end the group's offsets must match is the
	// offset after each partition's last read_committed record: the commit
	// markers and aborted records beyond it are passed over by a consumer,
	// so a group offset anywhere from there to the high watermark resumes
	// the same.
	TransactionalInput bool
	// Timeout bounds reading everything back; zero means two minutes.
	Timeout time.Duration
}

// CheckRun runs Verify against the broker at seeds, logs the report and
// fails the test if any invariant does not hold.
func CheckRun(t testing.TB, seeds []string, spec CheckSpec) *Report {
	t.Helper()
	r, err := Verify(t.Context(), seeds, spec)
	if err != nil {
		t.Fatalf("checker could not judge the run: %v", err)
	}
	if !r.OK() {
		t.Fatalf("invariants violated: %v\n%s", r.Violated(), r)
	}
	t.Logf("checker: %s", r.Summary())
	return r
}

// Verify reads back a run with fresh clients and checks every invariant.
// It is meant for after the pipeline has drained and stopped: it reads each
// partition up to the end offsets it lists at the start.
//
// An error means the checker could not judge (broker unreachable, input
// malformed, time-out); violations are in the report.
func Verify(ctx context.Context, seeds []string, spec CheckSpec) (*Report, error) {
	if spec.Derive == nil {
		spec.Derive = DoubledSeq
	}
	if spec.Timeout == 0 {
		spec.Timeout = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, spec.Timeout)
	defer cancel()

	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	h := &history{spec: spec}
	list := listPartitions
	if spec.TransactionalInput {
		// An input transaction still open would hide its records from the
		// read below, and the end computed from them could pass over them.
		list = settledPartitions
	}
	in, err := list(ctx, adm, spec.Input)
	if err != nil {
		return nil, err
	}
	if spec.TransactionalInput {
		for _, p := range in.partitions() {
			if in.lso[p] != in.hwm[p] {
				return nil, fmt.Errorf("input %s/%d has a transaction open at %d (high watermark %d)", spec.Input, p, in.lso[p], in.hwm[p])
			}
		}
	}
	out, err := settledPartitions(ctx, adm, spec.Output)
	if err != nil {
		return nil, err
	}
	h.outHWM, h.outLSO = out.hwm, out.lso

	inRecs, err := readTopic(ctx, cl, adm, in, in.lso, readCommitted)
	if err != nil {
		return nil, fmt.Errorf("reading input %s: %w", spec.Input, err)
	}
	kept := inRecs
	if spec.Skip != nil {
		kept = make(map[int32][]logRecord)
		for p, rs := range inRecs {
			for _, r := range rs {
				if spec.Skip(r.Value) {
					h.skipped++
					continue
				}
				kept[p] = append(kept[p], r)
			}
		}
	}
	if h.input, err = parseInput(kept); err != nil {
		return nil, fmt.Errorf("input %s: %w", spec.Input, err)
	}
	if spec.InputRecords > 0 && len(h.input) != spec.InputRecords {
		return nil, fmt.Errorf("input %s holds %d records to check (%d more left out), want %d", spec.Input, len(h.input), h.skipped, spec.InputRecords)
	}
	if h.committed, err = readTopic(ctx, cl, adm, out, out.lso, readCommitted); err != nil {
		return nil, fmt.Errorf("reading output %s read_committed: %w", spec.Output, err)
	}
	if h.uncommitted, err = readTopic(ctx, cl, adm, out, out.hwm, readUncommittedWithMarkers); err != nil {
		return nil, fmt.Errorf("reading output %s read_uncommitted: %w", spec.Output, err)
	}
	if h.groupOffsets, h.pendingOffsets, err = GroupOffsets(ctx, adm, spec.Group, spec.Input); err != nil {
		return nil, fmt.Errorf("fetching offsets of group %s: %w", spec.Group, err)
	}
	h.inEnd = in.hwm
	if spec.TransactionalInput {
		h.inEnd = make(map[int32]int64)
		for p, hwm := range in.hwm {
			end := in.start[p]
			if rs := inRecs[p]; len(rs) > 0 {
				end = rs[len(rs)-1].Offset + 1
			}
			if g, ok := h.groupOffsets[p]; ok && g > end && g <= hwm {
				end = g
			}
			h.inEnd[p] = end
		}
	}
	return h.check(), nil
}

// markerSettle bounds how long the checker waits for the transaction
// markers of a transaction that ended just before it looked.
const markerSettle = 5 * time.Second

// settledPartitions lists a topic's partitions once every last stable
// offset has reached its high watermark, or as they are after markerSettle.
//
// Tolerated kfake difference: Kafka answers EndTxn once the outcome is
// logged and writes the markers into the partitions afterwards, so for a
// moment after a pipeline's last commit its outputs still look open; kfake
// writes the markers before it answers. A transaction really left hanging
// stays open far longer (until its time-out), and is still reported.
func settledPartitions(ctx context.Context, adm *kadm.Client, topic string) (*topicState, error) {
	deadline := time.Now().Add(markerSettle)
	for {
		ts, err := listPartitions(ctx, adm, topic)
		if err != nil || maps.Equal(ts.lso, ts.hwm) || time.Now().After(deadline) {
			return ts, err
		}
		timer := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		case <-timer.C:
		}
	}
}

// GroupOffsets returns the group's committed offsets for topic, and the
// partitions whose offsets are held up by a transaction still open. A group
// that never committed has no offsets and no error.
func GroupOffsets(ctx context.Context, adm *kadm.Client, group, topic string) (committed map[int32]int64, pending []int32, err error) {
	// RequireStable makes the broker say when a transactional offset commit
	// is pending instead of quietly answering with the older offset.
	resps, err := adm.FetchOffsets(kadm.RequireStable(ctx), group)
	// Tolerated kfake difference: for a group it has never heard of kfake
	// answers GROUP_ID_NOT_FOUND, where Kafka answers with no offsets.
	// Both mean the same here: nothing committed.
	if errors.Is(err, kerr.GroupIDNotFound) {
		return map[int32]int64{}, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var unstable bool
	resps.Each(func(r kadm.OffsetResponse) {
		if errors.Is(r.Err, kerr.UnstableOffsetCommit) && r.Topic == topic {
			unstable = true
			pending = append(pending, r.Partition)
		}
	})
	if unstable {
		// Without RequireStable the broker returns the last stable offsets,
		// which is what the offsets invariant is about.
		if resps, err = adm.FetchOffsets(ctx, group); err != nil {
			return nil, nil, err
		}
	}
	committed = make(map[int32]int64)
	var firstErr error
	resps.Each(func(r kadm.OffsetResponse) {
		if r.Topic != topic {
			return
		}
		if r.Err != nil {
			firstErr = cmp.Or(firstErr, fmt.Errorf("partition %d: %w", r.Partition, r.Err))
			return
		}
		if r.At >= 0 {
			committed[r.Partition] = r.At
		}
	})
	slices.Sort(pending)
	return committed, pending, firstErr
}

// topicState is a topic's partitions and offsets, listed once.
type topicState struct {
	topic    string
	leaders  map[int32]int32
	start    map[int32]int64
	hwm, lso map[int32]int64
}

func listPartitions(ctx context.Context, adm *kadm.Client, topic string) (*topicState, error) {
	ts := &topicState{topic: topic}
	tds, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("describing %s: %w", topic, err)
	}
	td, ok := tds[topic]
	if !ok || td.Err != nil {
		return nil, fmt.Errorf("describing %s: %v", topic, cmp.Or(td.Err, errors.New("not found")))
	}
	ts.leaders = make(map[int32]int32)
	for p, pd := range td.Partitions {
		ts.leaders[p] = pd.Leader
	}
	for _, l := range []struct {
		into *map[int32]int64
		list func(context.Context, ...string) (kadm.ListedOffsets, error)
		what string
	}{
		{&ts.start, adm.ListStartOffsets, "start offsets"},
		{&ts.hwm, adm.ListEndOffsets, "high watermarks"},
		// ListCommittedOffsets lists with read_committed isolation: the
		// last stable offset, below any open transaction.
		{&ts.lso, adm.ListCommittedOffsets, "last stable offsets"},
	} {
		listed, err := l.list(ctx, topic)
		if err != nil {
			return nil, fmt.Errorf("listing %s of %s: %w", l.what, topic, err)
		}
		*l.into = make(map[int32]int64)
		for p := range ts.leaders {
			o, ok := listed.Lookup(topic, p)
			if !ok || o.Err != nil {
				return nil, fmt.Errorf("listing %s of %s/%d: %v", l.what, topic, p, o.Err)
			}
			(*l.into)[p] = o.Offset
		}
	}
	return ts, nil
}

func (ts *topicState) partitions() []int32 {
	return slices.Sorted(maps.Keys(ts.leaders))
}

// logRecord is what the checker keeps of a fetched record.
type logRecord struct {
	Offset        int64
	Key, Value    []byte
	ProducerID    int64
	Transactional bool
	Control       bool
}

// How the checker reads: the output's data records as read_committed
// shows them, and its whole log, markers included, to judge them by.
var (
	readCommitted              = offsets.ReadOptions{Isolation: offsets.ReadCommitted}
	readUncommittedWithMarkers = offsets.ReadOptions{Isolation: offsets.ReadUncommitted, KeepControl: true}
)

// readTopic reads every partition of ts from its start up to (not
// including) the offset in to, the end the checker listed for it, so that
// the records read and the offsets judged are one picture. The admin
// client is not needed; the parameter stays for callers that pass it.
func readTopic(ctx context.Context, cl *kgo.Client, _ *kadm.Client, ts *topicState, to map[int32]int64, mode offsets.ReadOptions) (map[int32][]logRecord, error) {
	mode.To = to
	recs, err := offsets.Read(ctx, cl, ts.topic, mode)
	if err != nil {
		return nil, err
	}
	out := make(map[int32][]logRecord)
	for _, r := range recs {
		out[r.Partition] = append(out[r.Partition], logRecord{
			Offset:        r.Offset,
			Key:           r.Key,
			Value:         r.Value,
			ProducerID:    r.ProducerID,
			Transactional: r.Attrs.IsTransactional(),
			Control:       r.Attrs.IsControl(),
		})
	}
	return out, nil
}

func parseInput(recs map[int32][]logRecord) ([]InputRecord, error) {
	var in []InputRecord
	seen := make(map[int64]InputRecord)
	for p, rs := range recs {
		for _, r := range rs {
			var v struct {
				K   string       `json:"k"`
				Seq *json.Number `json:"seq"`
			}
			if err := json.Unmarshal(r.Value, &v); err != nil || v.Seq == nil {
				return nil, fmt.Errorf("record %d@%d is not generator input: %q", p, r.Offset, r.Value)
			}
			seq, err := jsonInt(*v.Seq)
			if err != nil {
				return nil, fmt.Errorf("record %d@%d: seq: %v", p, r.Offset, err)
			}
			ir := InputRecord{Partition: p, Offset: r.Offset, Key: string(r.Key), Seq: seq}
			if prev, dup := seen[seq]; dup {
				return nil, fmt.Errorf("seq %d at both %d@%d and %d@%d: the generator should never repeat one", seq, prev.Partition, prev.Offset, p, r.Offset)
			}
			seen[seq] = ir
			in = append(in, ir)
		}
	}
	slices.SortFunc(in, func(a, b InputRecord) int { return cmp.Compare(a.Seq, b.Seq) })
	return in, nil
}

// history is everything the checker read; check judges it. Kept apart from
// the reading so that histories no correct broker would produce can be
// built by hand in tests.
type history struct {
	spec    CheckSpec
	input   []InputRecord
	skipped int // input records left out by spec.Skip
	inEnd   map[int32]int64

	committed      map[int32][]logRecord // output data records, read_committed
	uncommitted    map[int32][]logRecord // output records and markers, read_uncommitted
	outHWM, outLSO map[int32]int64

	groupOffsets   map[int32]int64
	pendingOffsets []int32
}

type txnOutcome int8

const (
	notTransactional txnOutcome = iota
	committedTxn
	abortedTxn
	openTxn
)

// output is one output record as the invariants see it.
type output struct {
	partition int32
	offset    int64
	key       string
	value     []byte
	seq       int64 // -1 when seqErr says why there is none
	seqErr    error
}

func outputSeq(value []byte) (int64, error) {
	var v struct {
		Seq *json.Number `json:"seq"`
	}
	if err := json.Unmarshal(value, &v); err != nil || v.Seq == nil {
		return -1, fmt.Errorf("value %q has no seq", value)
	}
	seq, err := jsonInt(*v.Seq)
	if err != nil {
		return -1, fmt.Errorf("seq: %v", err)
	}
	return seq, nil
}

func (o output) violation(topic, detail string) Violation {
	return Violation{Topic: topic, Partition: o.partition, Offset: o.offset, Key: o.key, Seq: o.seq, Detail: detail}
}

func (h *history) check() *Report {
	spec := h.spec
	if spec.Derive == nil {
		spec.Derive = DoubledSeq
	}
	r := &Report{Input: spec.Input, Output: spec.Output, Group: spec.Group, InputRecords: len(h.input), SkippedInput: h.skipped}
	outParts := slices.Sorted(maps.Keys(h.outHWM))

	// 7: an open transaction holds the last stable offset below the high
	// watermark. Markers settle the rest of the picture for invariant 4.
	outcomes := make(map[int32]map[int64]txnOutcome)
	for _, p := range outParts {
		if lso, hwm := h.outLSO[p], h.outHWM[p]; lso != hwm {
			r.add(NoHangingTxn, Violation{Topic: spec.Output, Partition: p, Offset: lso, Seq: -1,
				Detail: fmt.Sprintf("last stable offset %d below high watermark %d: a transaction is still open", lso, hwm)})
		}
		outcomes[p] = h.classify(r, p)
	}
	for _, p := range h.pendingOffsets {
		r.add(NoHangingTxn, Violation{Topic: spec.Input, Partition: p, Offset: -1, Seq: -1,
			Detail: fmt.Sprintf("group %s has a transactional offset commit still pending", spec.Group)})
	}

	// 4: read_committed must show exactly the non-transactional and
	// committed records below the last stable offset.
	var outs []output
	for _, p := range outParts {
		visible := make(map[int64]bool)
		for _, rec := range h.committed[p] {
			visible[rec.Offset] = true
			o := output{partition: p, offset: rec.Offset, key: string(rec.Key), value: rec.Value}
			o.seq, o.seqErr = outputSeq(rec.Value)
			switch outcomes[p][rec.Offset] {
			case abortedTxn:
				r.add(NoAbortedVisible, o.violation(spec.Output, "visible under read_committed, but its transaction was aborted"))
			case openTxn:
				r.add(NoAbortedVisible, o.violation(spec.Output, "visible under read_committed, but its transaction has not committed"))
			}
			outs = append(outs, o)
		}
		for _, rec := range h.uncommitted[p] {
			oc := outcomes[p][rec.Offset]
			if rec.Control || rec.Offset >= h.outLSO[p] || visible[rec.Offset] {
				continue
			}
			if oc == notTransactional || oc == committedTxn {
				seq, _ := outputSeq(rec.Value)
				r.add(NoAbortedVisible, Violation{Topic: spec.Output, Partition: p, Offset: rec.Offset, Key: string(rec.Key), Seq: seq,
					Detail: "committed, but hidden from read_committed"})
			}
		}
	}
	r.OutputRecords = len(outs)

	bySeq := make(map[int64]InputRecord, len(h.input))
	for _, in := range h.input {
		bySeq[in.Seq] = in
	}

	// 6 (decoding): an output without a seq cannot take part in the rest.
	parsed := outs[:0]
	for _, o := range outs {
		if o.seqErr != nil {
			r.add(DerivedValues, o.violation(spec.Output, o.seqErr.Error()))
			continue
		}
		parsed = append(parsed, o)
	}
	outs = parsed

	// 2: the first occurrence of a seq (in partition, offset order) is its
	// output; later ones are duplicates and take no part in the order check,
	// so one bad record is named once.
	first := make(map[int64]output)
	var firsts []output
	for _, o := range outs {
		if prev, dup := first[o.seq]; dup {
			r.add(NoDuplicates, o.violation(spec.Output, fmt.Sprintf("also at %s/%d@%d", spec.Output, prev.partition, prev.offset)))
			continue
		}
		first[o.seq] = o
		firsts = append(firsts, o)
	}

	// 1: every input has an output.
	for _, in := range h.input {
		if _, ok := first[in.Seq]; !ok {
			r.add(NoLoss, Violation{Topic: spec.Input, Partition: in.Partition, Offset: in.Offset, Key: in.Key, Seq: in.Seq,
				Detail: "no output"})
		}
	}

	// 6: each output is derived from its input.
	for _, o := range firsts {
		in, ok := bySeq[o.seq]
		if !ok {
			r.add(DerivedValues, o.violation(spec.Output, "no input has this seq"))
			continue
		}
		if err := spec.Derive(in, o.key, o.value); err != nil {
			r.add(DerivedValues, o.violation(spec.Output, err.Error()))
		}
	}

	// 3: a key lives in one partition (its home: where most of its outputs
	// are), and there its seqs rise with the offset.
	byKey := make(map[string][]output)
	for _, o := range firsts {
		byKey[o.key] = append(byKey[o.key], o)
	}
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		recs := byKey[key]
		count := make(map[int32]int)
		for _, o := range recs {
			count[o.partition]++
		}
		home := recs[0].partition
		for p, n := range count {
			if n > count[home] || (n == count[home] && p < home) {
				home = p
			}
		}
		maxSeq := int64(-1)
		var maxAt output
		for _, o := range recs {
			if o.partition != home {
				r.add(PerKeyOrder, o.violation(spec.Output, fmt.Sprintf("key's other outputs are in partition %d", home)))
				continue
			}
			if o.seq < maxSeq {
				r.add(PerKeyOrder, o.violation(spec.Output, fmt.Sprintf("after seq %d at offset %d", maxSeq, maxAt.offset)))
				continue
			}
			maxSeq, maxAt = o.seq, o
		}
	}

	// 5: the group's offsets are exactly the input's end: behind means
	// inputs will be processed again, ahead means some never were.
	for _, p := range slices.Sorted(maps.Keys(h.inEnd)) {
		end := h.inEnd[p]
		got, ok := h.groupOffsets[p]
		switch {
		case !ok && end == 0:
		case !ok:
			r.add(OffsetsMatch, Violation{Topic: spec.Input, Partition: p, Offset: -1, Seq: -1,
				Detail: fmt.Sprintf("group %s has no committed offset, input end is %d", spec.Group, end)})
		case got < end:
			r.add(OffsetsMatch, Violation{Topic: spec.Input, Partition: p, Offset: got, Seq: -1,
				Detail: fmt.Sprintf("group %s committed %d, behind the input end %d by %d", spec.Group, got, end, end-got)})
		case got > end:
			r.add(OffsetsMatch, Violation{Topic: spec.Input, Partition: p, Offset: got, Seq: -1,
				Detail: fmt.Sprintf("group %s committed %d, ahead of the input end %d", spec.Group, got, end)})
		}
	}
	return r
}

// classify walks a partition's read_uncommitted log, markers included, and
// decides each data record's transaction outcome from the markers that
// follow it, independently of the broker's read_committed filtering. It
// counts records and markers into r as it goes.
func (h *history) classify(r *Report, p int32) map[int64]txnOutcome {
	outcome := make(map[int64]txnOutcome)
	pending := make(map[int64][]int64) // producer id → offsets in its open transaction
	for _, rec := range h.uncommitted[p] {
		if !rec.Control {
			r.UncommittedRecords++
			if rec.Transactional {
				pending[rec.ProducerID] = append(pending[rec.ProducerID], rec.Offset)
				outcome[rec.Offset] = openTxn
			}
			continue
		}
		var key kmsg.ControlRecordKey
		if err := key.ReadFrom(rec.Key); err != nil {
			continue
		}
		var oc txnOutcome
		switch key.Type {
		case kmsg.ControlRecordKeyTypeCommit:
			oc = committedTxn
			r.CommitMarkers++
		case kmsg.ControlRecordKeyTypeAbort:
			oc = abortedTxn
			r.AbortMarkers++
		default:
			continue
		}
		for _, off := range pending[rec.ProducerID] {
			outcome[off] = oc
			if oc == abortedTxn {
				r.AbortedRecords++
			}
		}
		delete(pending, rec.ProducerID)
	}
	for _, offs := range pending {
		r.OpenRecords += len(offs)
	}
	return outcome
}
