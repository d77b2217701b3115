package bench

import (
	"context"
	"fmt"

	"github.com/pipeline-run/pipeline/offsets"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Check is the correctness gate: values must hold every seq e expects
// exactly once and nothing else. It returns a *GateError otherwise.
func Check(values [][]byte, e Expect) error {
	seen := make([]bool, e.N)
	g := &GateError{Want: e.Count(), Got: int64(len(values))}
	var found int64
	for _, v := range values {
		seq, ok := Seq(v)
		switch {
		case !ok:
			g.Unreadable++
		case seq < 0 || seq >= e.N || (e.Keep != nil && !e.Keep(seq)):
			g.Unexpected++
		case seen[seq]:
			g.Duplicates++
		default:
			seen[seq] = true
			found++
			if e.Valid != nil && !e.Valid(seq, v) {
				g.Wrong++
			}
		}
	}
	g.Missing = g.Want - found
	if g.Missing != 0 || g.Duplicates != 0 || g.Unexpected != 0 || g.Unreadable != 0 || g.Wrong != 0 {
		return g
	}
	return nil
}

// gate reads topic back as a read_committed consumer sees it, once the
// transactions on it are decided, and checks it against e. The arm has
// stopped, but the markers of its last commit may still be on their way:
// reading to the last stable offset of that moment missed a whole
// transaction's records (seen on Kafka, 1 KB records on 6 partitions).
func gate(ctx context.Context, cl *kgo.Client, topic string, e Expect) error {
	recs, err := offsets.Read(ctx, cl, topic, offsets.ReadOptions{WaitDecided: true})
	if err != nil {
		return fmt.Errorf("gate: reading %s back: %w", topic, err)
	}
	values := make([][]byte, len(recs))
	for i, r := range recs {
		values[i] = r.Value
	}
	return Check(values, e)
}
