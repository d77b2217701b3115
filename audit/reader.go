package audit

import (
	"context"

	"github.com/pipeline-run/pipeline/offsets"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Reading is how far the audit has read: the Topic-th of the Topics it
// reads, what it is to the pipeline (What: "progress", "input" or
// "output"), and its offsets read so far.
type Reading struct {
	What          string
	Topic         string
	Index, Topics int // from 1
	offsets.Progress
}

// reader reads the audit's topics one after the other, telling spec.OnRead.
type reader struct {
	cl     *kgo.Client
	spec   Spec
	index  int
	topics int
}

func newReader(cl *kgo.Client, spec Spec) *reader {
	return &reader{cl: cl, spec: spec, topics: 1 + len(spec.Inputs) + len(spec.Outputs)}
}

// read reads topic to its end with read_committed.
func (r *reader) read(ctx context.Context, what, topic string) ([]*kgo.Record, error) {
	r.index++
	var opts offsets.ReadOptions
	if r.spec.OnRead != nil {
		at := Reading{What: what, Topic: topic, Index: r.index, Topics: r.topics}
		opts.OnProgress = func(p offsets.Progress) {
			at.Progress = p
			r.spec.OnRead(at)
		}
	}
	return offsets.Read(ctx, r.cl, topic, opts)
}
