package bench

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/offsets"
)

// keyedCountCheckpointSteps is the keyed-count-cp arm's pipeline: the
// keyed count emitting each changed key once per checkpoint (`emit:
// checkpoint`), as Kafka Streams does with its record cache on.
const keyedCountCheckpointSteps = `[{name: count, aggregate: {emit: checkpoint, fields: {count: count, seq: {last: value.seq}, ts: {last: value.ts}}}}]`

// finalCountGate is the gate of a count that emits some updates of a key,
// not all (emit: checkpoint, or Kafka Streams with its record cache): every
// output must be right for its seq (countIsRight: the key's count once
// every record before it was counted exactly once), no seq may come twice,
// and each key's last output must hold its last input record, so its count
// is the key's whole count.
type finalCountGate struct{}

// outputs is 0: how many outputs the arm writes depends on its commits, so
// no output marks the end of a run; the run ends when every input is
// committed.
func (finalCountGate) outputs(context.Context, *kgo.Client, string) (int64, error) { return 0, nil }

func (finalCountGate) check(ctx context.Context, cl *kgo.Client, in, out string) error {
	lastIn := map[string]int64{} // key → its last input seq
	err := offsets.ReadEach(ctx, cl, in, offsets.ReadOptions{}, func(_ int32, rs []*kgo.Record) error {
		for _, r := range rs {
			seq, ok := Seq(r.Value)
			if !ok {
				return fmt.Errorf("input record at partition %d offset %d has no seq", r.Partition, r.Offset)
			}
			lastIn[string(r.Key)] = max(lastIn[string(r.Key)], seq)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("gate: reading the input %s back: %w", in, err)
	}
	outs, err := offsets.Read(ctx, cl, out, offsets.ReadOptions{WaitDecided: true})
	if err != nil {
		return fmt.Errorf("gate: reading %s back: %w", out, err)
	}
	return CheckFinalCounts(lastIn, outs)
}

// CheckFinalCounts is finalCountGate's check of the outputs outs (in
// offset order within a partition) against each input key's last seq.
func CheckFinalCounts(lastIn map[string]int64, outs []*kgo.Record) error {
	ge := &GateError{Want: int64(len(lastIn)), Got: int64(len(outs))}
	example := func(r *kgo.Record, why string) {
		if ge.Example == "" {
			ge.Example = fmt.Sprintf("output at partition %d offset %d (%s): %.200s", r.Partition, r.Offset, why, r.Value)
		}
	}
	seen := make(map[int64]bool, len(outs))
	lastOut := map[string]int64{}
	for _, r := range outs {
		seq, ok := Seq(r.Value)
		switch {
		case !ok:
			ge.Unreadable++
			example(r, "no seq")
			continue
		case seen[seq]:
			ge.Duplicates++
			example(r, "its seq came before")
		case string(Key(nil, seq)) != string(r.Key):
			ge.Unexpected++
			example(r, "its seq is not of its key")
		case !countIsRight(seq, r.Value):
			ge.Wrong++
			example(r, fmt.Sprintf("the count of seq %d must be %d", seq, seq/numKeys+1))
		}
		seen[seq] = true
		lastOut[string(r.Key)] = max(lastOut[string(r.Key)], seq)
	}
	for k, seq := range lastIn {
		if got, ok := lastOut[k]; !ok || got != seq {
			ge.Missing++
			if ge.Example == "" {
				ge.Example = fmt.Sprintf("key %s: its last output is of seq %d, its last input seq %d", k, got, seq)
			}
		}
	}
	for k := range lastOut {
		if _, ok := lastIn[k]; !ok {
			ge.Unexpected++
		}
	}
	if ge.Missing+ge.Duplicates+ge.Unexpected+ge.Unreadable+ge.Wrong > 0 {
		return ge
	}
	return nil
}
