package audit

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/wire"
)

// sources checks each input's outputs by the source positions they carry
// (audit.source_positions). An output names its input (HeaderSource) and
// which of that input's outputs it is (HeaderOutput, "<sink>/<n>", n from 0
// in the order the sink wrote them); a dead letter names its input in its
// own headers. Steps may write any number of records for an input, none
// included (a filter), so "at least one each" cannot be required. What
// must hold instead, per input consumed by a committed checkpoint:
//
//   - no output is visible twice (Duplicate): a replay's outputs carry the
//     numbers of the first attempt's;
//   - its numbers per sink run from 0 without a hole (Missing);
//   - every output was written by the transaction of the checkpoint that
//     consumed the input (Misplaced): by its producer, and not after an
//     output of a checkpoint that committed later;
//   - and per checkpoint and output partition, the records it wrote are
//     exactly the outputs of the inputs it consumed (SourceCount), which
//     catches a lost last output and one written elsewhere.
//
// Outputs that name no input, or one no committed checkpoint consumed,
// are Unsourced.
type sources struct {
	spec       Spec
	h          *history
	r          *Report
	positioned map[string]bool
	inputs     map[string]bool

	outs       map[outputKey][]position // in-window outputs of sinks, by input and HeaderOutput
	numbers    map[inputSink][]uint64
	attributed map[*checkpoint]map[tp]int64
	withOutput map[position]bool       // in-window inputs with an output (a dead letter counts)
	span       map[tp]*[2]int64        // per output partition, the first and last in-window output
	latest     map[producerAt]*written // per output partition and producer, the output of the latest checkpoint so far
	unsourced  []unsourcedOutput
	accounted  int64
}

type outputKey struct {
	input  position
	output string // "<sink>/<n>"
}

type inputSink struct {
	input position
	sink  string
}

type producerAt struct {
	tp
	producer int64
}

type written struct {
	at position
	cp *checkpoint
}

type unsourcedOutput struct {
	at  position
	why string
}

func newSources(spec Spec, h *history, r *Report) *sources {
	s := &sources{spec: spec, h: h, r: r, positioned: map[string]bool{}, inputs: map[string]bool{},
		outs: map[outputKey][]position{}, numbers: map[inputSink][]uint64{}, attributed: map[*checkpoint]map[tp]int64{},
		withOutput: map[position]bool{}, span: map[tp]*[2]int64{}, latest: map[producerAt]*written{}}
	for _, t := range spec.Positioned {
		s.positioned[t] = true
	}
	for _, t := range spec.Inputs {
		s.inputs[t] = true
	}
	return s
}

// read takes one output topic's records, each partition in offset order.
func (s *sources) read(topic string, recs []*kgo.Record) {
	sink := s.positioned[topic]
	dead := len(s.positioned) > 0 && topic == s.spec.DeadLetter
	if !sink && !dead {
		return
	}
	for _, rec := range recs {
		at := positionOf(rec)
		var in position
		var output, why string
		if sink {
			in, output, why = sinkInput(rec)
		} else {
			in, why = deadLetterInput(rec)
		}
		if why == "" && !s.inputs[in.topic] {
			why = fmt.Sprintf("it names %s, and %s is not an input of the pipeline", in, in.topic)
		}
		var cp *checkpoint
		if why == "" {
			if cp = s.h.consumer(in); cp == nil {
				why = fmt.Sprintf("it names input %s, which no committed checkpoint consumed", in)
			}
		}
		if why != "" {
			s.unsourced = append(s.unsourced, unsourcedOutput{at, why})
			continue
		}
		s.order(rec, at, in, cp)
		if !cp.in {
			continue
		}
		if sp := s.span[at.tp]; sp == nil {
			s.span[at.tp] = &[2]int64{at.offset, at.offset}
		} else {
			sp[1] = at.offset
		}
		if s.attributed[cp] == nil {
			s.attributed[cp] = map[tp]int64{}
		}
		s.attributed[cp][at.tp]++
		s.withOutput[in] = true
		s.r.Sourced++
		if sink {
			k := outputKey{in, output}
			s.outs[k] = append(s.outs[k], at)
			name, n, _ := strings.Cut(output, "/")
			num, _ := strconv.ParseUint(n, 10, 64) // checked by sinkInput
			s.numbers[inputSink{in, name}] = append(s.numbers[inputSink{in, name}], num)
		}
	}
}

// order checks that the output at, of input in consumed by cp, was written
// by cp's transaction as far as the partition can show it: by cp's
// producer, and not after an output of a checkpoint that the same producer
// committed later (a producer's transactions are one after the other).
func (s *sources) order(rec *kgo.Record, at, in position, cp *checkpoint) {
	if rec.ProducerID != cp.producer {
		if cp.in {
			s.r.add(Misplaced, in.String(), "its output %s was written by producer %d, not in the transaction of checkpoint %s (producer %d), which consumed it",
				at, rec.ProducerID, cp.id, cp.producer)
		}
		return
	}
	k := producerAt{at.tp, rec.ProducerID}
	last := s.latest[k]
	if last != nil && cp.order < last.cp.order {
		if cp.in {
			s.r.add(Misplaced, in.String(), "its output %s comes after %s, an output of checkpoint %s, which committed after checkpoint %s consumed %s: it was written by a later transaction",
				at, last.at, last.cp.id, cp.id, in)
		}
		return
	}
	s.latest[k] = &written{at, cp}
}

// check reports what read found. inputData holds the offsets of each
// input partition's records.
func (s *sources) check(r *Report, inputData map[tp][]int64) {
	r.Sources = int64(len(s.withOutput))
	for k, ats := range s.outs {
		if len(ats) > 1 {
			r.add(Duplicate, k.input.String(), "its output %s is visible %d times: %s", k.output, len(ats), list(ats, 10))
		}
	}
	for k, nums := range s.numbers {
		slices.Sort(nums)
		nums = slices.Compact(nums)
		var gone []string
		for i, want := 0, uint64(0); want <= nums[len(nums)-1]; want++ {
			if nums[i] == want {
				i++
				continue
			}
			gone = append(gone, fmt.Sprintf("%s/%d", k.sink, want))
		}
		switch {
		case len(gone) == 1:
			r.add(Missing, k.input.String(), "output %s of sink %s is missing, though %s/%d is there: an output in between is gone",
				gone[0], k.sink, k.sink, nums[len(nums)-1])
		case len(gone) > 1:
			r.add(Missing, k.input.String(), "%d outputs of sink %s are missing (%s), though %s/%d is there: outputs in between are gone",
				len(gone), k.sink, strings.Join(head(gone, 10), ", "), k.sink, nums[len(nums)-1])
		}
	}
	for _, cp := range s.h.cps {
		if !cp.in {
			continue
		}
		parts := map[tp]bool{}
		for k := range cp.outputs {
			if s.positioned[k.topic] || (k.topic == s.spec.DeadLetter && k.topic != "") {
				parts[k] = true
			}
		}
		for k := range s.attributed[cp] {
			parts[k] = true
		}
		for _, k := range sortedTPs(parts) {
			wrote, theirs := cp.outputs[k], s.attributed[cp][k]
			s.accounted += min(wrote, theirs)
			switch {
			case theirs < wrote:
				silent := s.silentInputs(cp, inputData)
				msg := "every input it consumed has an output"
				if len(silent) > 0 {
					msg = fmt.Sprintf("%d of its inputs have no output at all (a step that drops records explains those, a lost write does not): %s",
						len(silent), list(silent, 5))
				}
				r.add(SourceCount, k.String(), "checkpoint %s wrote %d records here, %d of them outputs of inputs it consumed: %d missing or written by another transaction; %s",
					cp.id, wrote, theirs, wrote-theirs, msg)
			case theirs > wrote:
				r.add(SourceCount, k.String(), "checkpoint %s wrote %d records here, but %d outputs of inputs it consumed are here: %d written by another transaction",
					cp.id, wrote, theirs, theirs-wrote)
			}
		}
	}
	for _, u := range s.unsourced {
		if s.inWindow(u.at) {
			r.add(Unsourced, u.at.String(), "%s", u.why)
		}
	}
}

// silentInputs returns the records cp consumed that have no output.
func (s *sources) silentInputs(cp *checkpoint, inputData map[tp][]int64) []position {
	var out []position
	for _, sp := range cp.inputs {
		data := inputData[sp.tp]
		lo, _ := slices.BinarySearch(data, sp.first)
		for _, off := range data[lo:] {
			if off > sp.last {
				break
			}
			if p := (position{sp.tp, off}); !s.withOutput[p] {
				out = append(out, p)
			}
		}
	}
	return out
}

// inWindow reports whether an output that names no consumed input lies
// among the outputs of the window's inputs: between the first and the last
// of them on its partition, or beyond, where the window is open.
func (s *sources) inWindow(at position) bool {
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	if sp := s.span[at.tp]; sp != nil {
		lo, hi = sp[0], sp[1]
	}
	if s.spec.Window.From.IsZero() {
		lo = math.MinInt64
	}
	if s.spec.Window.To.IsZero() {
		hi = math.MaxInt64
	}
	return lo <= at.offset && at.offset <= hi
}

// sinkInput reads a sink record's source position headers. The last of
// each counts: a pipeline reading another's output copies its headers
// before adding its own.
func sinkInput(rec *kgo.Record) (in position, output, why string) {
	src, ok := lastHeader(rec, wire.HeaderSource)
	if !ok {
		return in, "", "it has no " + wire.HeaderSource + " header"
	}
	in, err := parsePosition(src)
	if err != nil {
		return in, "", fmt.Sprintf("its %s header %q is not topic/partition@offset", wire.HeaderSource, src)
	}
	output, ok = lastHeader(rec, wire.HeaderOutput)
	if !ok {
		return in, "", "it has no " + wire.HeaderOutput + " header"
	}
	name, n, ok := strings.Cut(output, "/")
	if _, err := strconv.ParseUint(n, 10, 64); !ok || name == "" || err != nil {
		return in, "", fmt.Sprintf("its %s header %q is not sink/number", wire.HeaderOutput, output)
	}
	return in, output, ""
}

// deadLetterInput reads the input a dead letter names.
func deadLetterInput(rec *kgo.Record) (in position, why string) {
	topic, ok1 := lastHeader(rec, wire.HeaderTopic)
	part, ok2 := lastHeader(rec, wire.HeaderPartition)
	off, ok3 := lastHeader(rec, wire.HeaderOffset)
	if !ok1 || !ok2 || !ok3 {
		return in, "a dead letter without the headers naming its input"
	}
	p, err1 := strconv.ParseInt(part, 10, 32)
	o, err2 := strconv.ParseInt(off, 10, 64)
	if topic == "" || err1 != nil || err2 != nil {
		return in, fmt.Sprintf("a dead letter naming input %q/%q@%q, which is not a position", topic, part, off)
	}
	return position{tp{topic, int32(p)}, o}, ""
}

func lastHeader(rec *kgo.Record, key string) (string, bool) {
	for i := len(rec.Headers) - 1; i >= 0; i-- {
		if rec.Headers[i].Key == key {
			return string(rec.Headers[i].Value), true
		}
	}
	return "", false
}

// parsePosition reads "topic/partition@offset". Topic names hold neither
// "/" nor "@".
func parsePosition(s string) (position, error) {
	rest, off, ok1 := cutLast(s, "@")
	topic, part, ok2 := cutLast(rest, "/")
	p, err1 := strconv.ParseInt(part, 10, 32)
	o, err2 := strconv.ParseInt(off, 10, 64)
	if !ok1 || !ok2 || topic == "" || err1 != nil || err2 != nil || p < 0 || o < 0 {
		return position{}, fmt.Errorf("%q is not topic/partition@offset", s)
	}
	return position{tp{topic, int32(p)}, o}, nil
}

func cutLast(s, sep string) (before, after string, ok bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

func sortedTPs(m map[tp]bool) []tp {
	out := make([]tp, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b tp) int { return cmp.Or(cmp.Compare(a.topic, b.topic), cmp.Compare(a.partition, b.partition)) })
	return out
}

// list formats the first n of ps, and how many more there are.
func list[T fmt.Stringer](ps []T, n int) string {
	parts := make([]string, 0, min(n, len(ps)))
	for _, p := range head(ps, n) {
		parts = append(parts, p.String())
	}
	s := strings.Join(parts, ", ")
	if len(ps) > n {
		s += fmt.Sprintf(" and %d more", len(ps)-n)
	}
	return s
}

func head[T any](s []T, n int) []T { return s[:min(n, len(s))] }
