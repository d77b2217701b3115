package bench

import (
	"bytes"
	"context"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/offsets"
)

// intervalJoinSteps is the interval-join arm's pipeline: the input joined
// with itself, pairs of one key and one event time (the record timestamp).
// Records of one key are numKeys seqs apart, never in one millisecond of
// the backlog's timestamps, so each record pairs with itself alone: one
// output per input, {"key":…,"left":<record>,"right":<record>}, whose first
// seq and ts are the input's.
const intervalJoinSteps = `[{name: count, from: [in, in], interval_join: {lower: 0s, upper: 0s}}]`

// pairsItself checks an interval-join or table-join output: its right
// record is its left one.
func pairsItself(seq int64, v []byte) bool {
	i := bytes.Index(v, []byte(`"right":`))
	if i < 0 {
		return false
	}
	right, ok := Seq(v[i:])
	return ok && right == seq
}

// tableJoinSteps is the table-join arm's pipeline: the input enriched from
// itself read as a table, so each record joins the row its own key had at
// its time: itself. A record is emitted once the watermark has passed its
// time, so the records of a partition's last millisecond wait.
const tableJoinSteps = `[{name: count, from: [in, in], table_join: {}}]`

// tableGate is the table-join arm's gate: one output for every input
// record older than the latest timestamp of its partition (the watermark
// there: max_out_of_orderness 0), pairing it with itself; none for the
// others. With every, each input record has its output.
type tableGate struct {
	every bool
	mu    sync.Mutex
	topic string
	due   map[int64]bool // seqs that must have their output
	all   int64
}

func (g *tableGate) oracleOf(ctx context.Context, cl *kgo.Client, in string) (map[int64]bool, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.topic == in && g.due != nil {
		return g.due, nil
	}
	recs, err := offsets.Read(ctx, cl, in, offsets.ReadOptions{})
	if err != nil {
		return nil, fmt.Errorf("gate: reading the input %s back: %w", in, err)
	}
	due, err := tableDue(recs, g.every)
	if err != nil {
		return nil, err
	}
	g.topic, g.due, g.all = in, due, int64(len(recs))
	return due, nil
}

// tableDue returns the seqs of the input records recs that must have an
// output: all of them with every, else those older than the latest
// timestamp of their partition.
func tableDue(recs []*kgo.Record, every bool) (map[int64]bool, error) {
	latest := map[int32]int64{}
	for _, r := range recs {
		latest[r.Partition] = max(latest[r.Partition], r.Timestamp.UnixMilli())
	}
	due := make(map[int64]bool, len(recs))
	for _, r := range recs {
		seq, ok := Seq(r.Value)
		if !ok {
			return nil, fmt.Errorf("gate: input record at partition %d offset %d has no seq", r.Partition, r.Offset)
		}
		if every || r.Timestamp.UnixMilli() < latest[r.Partition] {
			due[seq] = true
		}
	}
	return due, nil
}

func (g *tableGate) outputs(ctx context.Context, cl *kgo.Client, in string) (int64, error) {
	due, err := g.oracleOf(ctx, cl, in)
	return int64(len(due)), err
}

func (g *tableGate) check(ctx context.Context, cl *kgo.Client, in, out string) error {
	due, err := g.oracleOf(ctx, cl, in)
	if err != nil {
		return err
	}
	recs, err := offsets.Read(ctx, cl, out, offsets.ReadOptions{WaitDecided: true})
	if err != nil {
		return fmt.Errorf("gate: reading %s back: %w", out, err)
	}
	ge := &GateError{Want: int64(len(due)), Got: int64(len(recs))}
	seen := make(map[int64]bool, len(recs))
	for _, r := range recs {
		seq, ok := Seq(r.Value)
		switch {
		case !ok:
			ge.Unreadable++
		case seen[seq]:
			ge.Duplicates++
		case !due[seq]:
			ge.Unexpected++
		case !pairsItself(seq, r.Value):
			ge.Wrong++
		}
		if ge.Example == "" && (!ok || seen[seq] || !due[seq] || !pairsItself(seq, r.Value)) {
			ge.Example = fmt.Sprintf("output at partition %d offset %d: %.200s", r.Partition, r.Offset, r.Value)
		}
		seen[seq] = true
	}
	for seq := range due {
		if !seen[seq] {
			ge.Missing++
		}
	}
	if ge.Missing+ge.Duplicates+ge.Unexpected+ge.Unreadable+ge.Wrong > 0 {
		return ge
	}
	return nil
}
