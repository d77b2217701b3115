package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/offsets"
)

// windowedCountSteps is the windowed-count arm's pipeline: a count per key
// (the input's key, by which it is partitioned) in tumbling 1 s windows of
// event time, which is the records' Kafka timestamp: the time the backlog
// was produced. A window's result comes once the watermark of its
// partition (its latest timestamp so far) reaches the window's end.
const windowedCountSteps = `[{name: count, window: {tumbling: 1s, fields: {count: count}}}]`

// windowMs is the windowed-count arm's window size, in milliseconds.
const windowMs = 1000

// windowID is one window of one key.
type windowID struct {
	key   string
	start int64 // Unix milliseconds
}

func (w windowID) String() string {
	return fmt.Sprintf("key %q, window [%d, %d)", w.key, w.start, w.start+windowMs)
}

// WindowOracle is what a windowed count of an input must write: one
// on_time result for every window of a key whose end the watermark of the
// key's partition reached (the latest timestamp in it: the window step
// runs with max_out_of_orderness 0), holding the records of that window;
// nothing for the windows still open.
type WindowOracle struct {
	Records int64 // input records read
	// Closed holds the count of every window that must have a result.
	Closed map[windowID]int64
	// Open holds the windows the watermark has not passed: no result.
	Open map[windowID]bool
	// Late is how many input records came after their window had closed
	// (a timestamp behind the window's end by then): the step drops them.
	Late int64
	// Watermark is each partition's watermark at the end of the input.
	Watermark map[int32]int64

	part map[string]int32 // each key's partition
}

// NewWindowOracle computes the oracle of the input records recs (every
// partition's, in offset order within a partition), tumbling windows of
// size milliseconds. Each key must stay in one partition.
func NewWindowOracle(recs []*kgo.Record, size int64) (*WindowOracle, error) {
	o := &WindowOracle{Closed: map[windowID]int64{}, Open: map[windowID]bool{}, Watermark: map[int32]int64{}, part: map[string]int32{}}
	partOf := o.part
	counts := map[windowID]int64{}
	for _, r := range recs {
		o.Records++
		key := string(r.Key)
		if p, ok := partOf[key]; !ok {
			partOf[key] = r.Partition
		} else if p != r.Partition {
			return nil, fmt.Errorf("gate: key %q is in partitions %d and %d of the input; the windowed gate needs each key in one", key, p, r.Partition)
		}
		ts := r.Timestamp.UnixMilli()
		wm, seen := o.Watermark[r.Partition]
		if !seen || ts > wm {
			wm = ts
			o.Watermark[r.Partition] = wm
		}
		start := ts - mod(ts, size)
		if start+size <= wm {
			// Its window closed before it came: the watermark passed the
			// window's end on an earlier record of the partition.
			o.Late++
			continue
		}
		counts[windowID{key, start}]++
	}
	for id, n := range counts {
		if id.start+size <= o.Watermark[partOf[id.key]] {
			o.Closed[id] = n
		} else {
			o.Open[id] = true
		}
	}
	return o, nil
}

// mod is a modulo that is never negative, for times before 1970.
func mod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

// windowResult is the value of a window step's result.
type windowResult struct {
	Key    *string `json:"key"`
	Start  *int64  `json:"window_start"`
	End    *int64  `json:"window_end"`
	Timing *string `json:"timing"`
	Count  *int64  `json:"count"`
}

// CheckWindows is the windowed-count arm's correctness gate: the output
// records outs must hold one on_time result for each window o says
// closed, keyed by its key, stamped at its end less 1 ms, with its count;
// no result twice, and none for a window that is still open or has no
// records. It returns a *GateError otherwise, naming the first problem.
func CheckWindows(outs []*kgo.Record, o *WindowOracle, size int64) error {
	g := &GateError{Want: int64(len(o.Closed)), Got: int64(len(outs))}
	seen := make(map[windowID]bool, len(o.Closed))
	example := func(format string, args ...any) {
		if g.Example == "" {
			g.Example = fmt.Sprintf(format, args...)
		}
	}
	for _, r := range outs {
		var v windowResult
		if err := json.Unmarshal(r.Value, &v); err != nil || v.Key == nil || v.Start == nil || v.End == nil || v.Timing == nil || v.Count == nil {
			g.Unreadable++
			example("unreadable result at partition %d offset %d: %.200s", r.Partition, r.Offset, r.Value)
			continue
		}
		id := windowID{*v.Key, *v.Start}
		want, closed := o.Closed[id]
		switch {
		case !closed && o.Open[id]:
			g.Unexpected++
			example("a result for %s, which is still open (the watermark of its partition is %d)", id, o.Watermark[o.part[id.key]])
		case !closed:
			g.Unexpected++
			example("a result for %s, which no input record falls in: %s", id, r.Value)
		case seen[id]:
			g.Duplicates++
			example("a second result for %s: %s", id, r.Value)
		default:
			seen[id] = true
			var wrong string
			switch {
			case *v.End != id.start+size:
				wrong = fmt.Sprintf("window_end %d, want %d", *v.End, id.start+size)
			case *v.Timing != "on_time":
				wrong = fmt.Sprintf("timing %q, want on_time", *v.Timing)
			case *v.Count != want:
				wrong = fmt.Sprintf("count %d, want %d", *v.Count, want)
			case string(r.Key) != id.key:
				wrong = fmt.Sprintf("record key %q, want %q", r.Key, id.key)
			case r.Timestamp.UnixMilli() != id.start+size-1:
				wrong = fmt.Sprintf("record timestamp %d, want %d (the window's end less 1 ms)", r.Timestamp.UnixMilli(), id.start+size-1)
			}
			if wrong != "" {
				g.Wrong++
				example("the result for %s has %s: %s", id, wrong, r.Value)
			}
		}
	}
	g.Missing = g.Want - int64(len(seen))
	if g.Missing > 0 && g.Example == "" {
		// The first missing window, in key and start order, so that the
		// message is the same every time.
		var first *windowID
		for id := range o.Closed {
			if !seen[id] && (first == nil || cmp.Or(cmp.Compare(id.key, first.key), cmp.Compare(id.start, first.start)) < 0) {
				first = &id
			}
		}
		g.Example = fmt.Sprintf("no result for %s, which closed with %d records", first, o.Closed[*first])
	}
	if g.Missing != 0 || g.Duplicates != 0 || g.Unexpected != 0 || g.Unreadable != 0 || g.Wrong != 0 {
		return g
	}
	return nil
}

// windowGate is the windowed-count arm's gate. It reads the input back to
// know what the output must hold, once per input topic: every run of a
// sweep's group reads the same backlog.
type windowGate struct {
	size int64

	mu     sync.Mutex
	topic  string
	oracle *WindowOracle
}

// oracleOf returns the oracle of input topic in, reading it back
// read_committed (as the pipeline reads it) the first time.
func (g *windowGate) oracleOf(ctx context.Context, cl *kgo.Client, in string) (*WindowOracle, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.topic == in && g.oracle != nil {
		return g.oracle, nil
	}
	recs, err := offsets.Read(ctx, cl, in, offsets.ReadOptions{})
	if err != nil {
		return nil, fmt.Errorf("gate: reading the input %s back: %w", in, err)
	}
	o, err := NewWindowOracle(recs, g.size)
	if err != nil {
		return nil, err
	}
	g.topic, g.oracle = in, o
	return o, nil
}

// outputs returns how many results the arm must write for input topic in.
func (g *windowGate) outputs(ctx context.Context, cl *kgo.Client, in string) (int64, error) {
	o, err := g.oracleOf(ctx, cl, in)
	if err != nil {
		return 0, err
	}
	return int64(len(o.Closed)), nil
}

// check reads out back as a read_committed consumer sees it, once the
// transactions on it are decided (as gate does), and checks it against
// the oracle of in.
func (g *windowGate) check(ctx context.Context, cl *kgo.Client, in, out string) error {
	o, err := g.oracleOf(ctx, cl, in)
	if err != nil {
		return err
	}
	recs, err := offsets.Read(ctx, cl, out, offsets.ReadOptions{WaitDecided: true})
	if err != nil {
		return fmt.Errorf("gate: reading %s back: %w", out, err)
	}
	return CheckWindows(recs, o, g.size)
}
