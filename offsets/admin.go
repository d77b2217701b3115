package offsets

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Lag is one partition's committed position against its end.
type Lag struct {
	Topic     string
	Partition int32
	Committed int64 // -1 when the group has committed nothing
	End       int64 // the last stable offset (read_committed end)
	// Lag is End - Committed, or 0 when nothing but transaction markers
	// and aborted records lies between: a read_committed consumer that
	// read every record it could has no lag, although its offset stops
	// short of the marker ending the last transaction. With nothing
	// committed, it is End.
	Lag int64
}

// Describe returns the group's committed offsets against the read_committed
// end of each partition of topics. A partition the group is behind on is
// read from its committed offset to its first data record, to tell lag
// from transaction markers.
func Describe(ctx context.Context, cl *kgo.Client, group string, topics ...string) ([]Lag, error) {
	adm := kadm.NewClient(cl)
	ends, err := adm.ListCommittedOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("listing end offsets: %w", err)
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		committed, err = nil, nil // a group that never committed
	}
	if err != nil {
		return nil, fmt.Errorf("fetching offsets of group %q: %w", group, err)
	}
	var out []Lag
	var errs []error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			errs = append(errs, fmt.Errorf("%s/%d: %w", o.Topic, o.Partition, o.Err))
			return
		}
		l := Lag{Topic: o.Topic, Partition: o.Partition, Committed: -1, End: o.Offset, Lag: o.Offset}
		if c, ok := committed.Lookup(o.Topic, o.Partition); ok && c.Err == nil {
			l.Committed = c.At
			l.Lag = max(l.End-l.Committed, 0)
		}
		out = append(out, l)
	})
	for i := range out {
		l := &out[i]
		if l.Committed < 0 || l.Lag == 0 {
			continue
		}
		data, err := hasData(ctx, cl, l.Topic, l.Partition, l.Committed, l.End)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s/%d: reading from the committed offset %d: %w", l.Topic, l.Partition, l.Committed, err))
			continue
		}
		if !data {
			l.Lag = 0
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out, errors.Join(errs...)
}

// errFound stops hasData's read at the first record.
var errFound = errors.New("found a data record")

// hasData reports whether a read_committed reader finds a data record in
// [from, to) of the partition. It stops at the first one, so a partition
// far behind costs one fetch.
func hasData(ctx context.Context, cl *kgo.Client, topic string, partition int32, from, to int64) (bool, error) {
	_, err := read(ctx, cl, topic, partition, from, ReadOptions{To: map[int32]int64{partition: to}}, func(int32, []*kgo.Record, Progress) error {
		return errFound
	})
	if errors.Is(err, errFound) {
		return true, nil
	}
	return false, err
}

// ResetTo says where Reset moves a group.
type ResetTo uint8

const (
	ToStart ResetTo = iota
	ToEnd
)

// Reset moves the group's committed offsets of topics to their start or
// end. The group must have no live members: Kafka refuses otherwise, and
// moving offsets under a running pipeline would break exactly-once.
func Reset(ctx context.Context, adm *kadm.Client, group string, to ResetTo, topics ...string) (kadm.Offsets, error) {
	var listed kadm.ListedOffsets
	var err error
	if to == ToStart {
		listed, err = adm.ListStartOffsets(ctx, topics...)
	} else {
		listed, err = adm.ListEndOffsets(ctx, topics...)
	}
	if err != nil {
		return nil, fmt.Errorf("listing offsets: %w", err)
	}
	if err := listed.Error(); err != nil {
		return nil, err
	}
	os := listed.Offsets()
	resp, err := adm.CommitOffsets(ctx, group, os)
	if err != nil {
		return nil, fmt.Errorf("committing offsets for group %q: %w", group, err)
	}
	if err := resp.Error(); err != nil {
		return nil, fmt.Errorf("committing offsets for group %q (is a pipeline of this group still running?): %w", group, err)
	}
	return os, nil
}
