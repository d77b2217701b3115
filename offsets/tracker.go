// Package offsets keeps track of source positions: what each checkpoint
// consumed, and (for operators) what a consumer group has committed against
// the end of its topics, and how to move it deliberately.
package offsets

import (
	"fmt"
	"sort"
)

// Range is the offsets of one partition a checkpoint consumed: First to
// Last, both included. Next, the offset committed for it, is Last+1.
type Range struct {
	Topic     string
	Partition int32
	First     int64
	Last      int64
}

// Next is the offset a consumer resumes from after this range.
func (r Range) Next() int64 { return r.Last + 1 }

func (r Range) String() string {
	return fmt.Sprintf("%s/%d[%d..%d]", r.Topic, r.Partition, r.First, r.Last)
}

type tp struct {
	topic     string
	partition int32
}

// Tracker records the ranges consumed by the open checkpoint and the
// position committed by the last one. It belongs to the checkpoint
// coordinator's goroutine.
type Tracker struct {
	open      map[tp]*Range
	committed map[tp]int64 // next offset per partition after the last commit
}

// NewTracker returns an empty tracker.
func NewTracker() *Tracker {
	return &Tracker{open: map[tp]*Range{}, committed: map[tp]int64{}}
}

// Begin starts a checkpoint.
func (t *Tracker) Begin() { clear(t.open) }

// Observe records that offsets first..last of a partition were handed to a
// task. Calls for one partition come in offset order.
func (t *Tracker) Observe(topic string, partition int32, first, last int64) {
	k := tp{topic, partition}
	if r, ok := t.open[k]; ok {
		r.Last = last
		return
	}
	t.open[k] = &Range{Topic: topic, Partition: partition, First: first, Last: last}
}

// Open returns the open checkpoint's ranges, sorted.
func (t *Tracker) Open() []Range {
	out := make([]Range, 0, len(t.open))
	for _, r := range t.open {
		out = append(out, *r)
	}
	sortRanges(out)
	return out
}

// Commit closes the checkpoint as committed and returns its ranges, sorted.
func (t *Tracker) Commit() []Range {
	out := t.Open()
	for k, r := range t.open {
		t.committed[k] = r.Next()
	}
	clear(t.open)
	return out
}

func sortRanges(out []Range) {
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
}

// Abort drops the open checkpoint's ranges: they will be consumed again.
func (t *Tracker) Abort() { clear(t.open) }

// Committed returns the next offset of a partition after the last commit
// this tracker saw, and whether it saw one.
func (t *Tracker) Committed(topic string, partition int32) (int64, bool) {
	o, ok := t.committed[tp{topic, partition}]
	return o, ok
}
