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
	c := newChecker(e)
	for _, v := range values {
		c.add(v)
	}
	return c.result()
}

// checker is Check a value at a time, so that a gate holds a topic's
// values only as long as it reads each.
type checker struct {
	e     Expect
	seen  []bool
	g     GateError
	found int64
}

func newChecker(e Expect) *checker {
	return &checker{e: e, seen: make([]bool, e.N), g: GateError{Want: e.Count()}}
}

func (c *checker) add(v []byte) {
	c.g.Got++
	seq, ok := Seq(v)
	switch {
	case !ok:
		c.g.Unreadable++
	case seq < 0 || seq >= c.e.N || (c.e.Keep != nil && !c.e.Keep(seq)):
		c.g.Unexpected++
	case c.seen[seq]:
		c.g.Duplicates++
	default:
		c.seen[seq] = true
		c.found++
		if c.e.Valid != nil && !c.e.Valid(seq, v) {
			c.g.Wrong++
		}
	}
}

// result returns a *GateError if what was added is not what e expects.
func (c *checker) result() error {
	g := c.g
	g.Missing = g.Want - c.found
	if g.Missing != 0 || g.Duplicates != 0 || g.Unexpected != 0 || g.Unreadable != 0 || g.Wrong != 0 {
		return &g
	}
	return nil
}

// gate reads topic back as a read_committed consumer sees it, once the
// transactions on it are decided, and checks it against e. The arm has
// stopped, but the markers of its last commit may still be on their way:
// reading to the last stable offset of that moment missed a whole
// transaction's records (seen on Kafka, 1 KB records on 6 partitions).
//
// It checks each fetch as it reads it: reading whole outputs back (millions
// of records, gigabytes with 1 KB values) made the bench's own memory
// peak at many times any arm's, on the machine the arms and the broker
// share.
func gate(ctx context.Context, cl *kgo.Client, topic string, e Expect) error {
	c := newChecker(e)
	err := offsets.ReadEach(ctx, cl, topic, offsets.ReadOptions{WaitDecided: true}, func(_ int32, rs []*kgo.Record) error {
		for _, r := range rs {
			c.add(r.Value)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("gate: reading %s back: %w", topic, err)
	}
	return c.result()
}
