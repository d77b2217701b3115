package offsets

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Lag is one partition's committed position against its end.
type Lag struct {
	Topic     string
	Partition int32
	Committed int64 // -1 when the group has committed nothing
	End       int64 // the last stable offset (read_committed end)
	Lag       int64
}

// Describe returns the group's committed offsets against the read_committed
// end of each partition of topics. adm's client must read committed.
func Describe(ctx context.Context, adm *kadm.Client, group string, topics ...string) ([]Lag, error) {
	ends, err := adm.ListEndOffsets(ctx, topics...)
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
		l := Lag{Topic: o.Topic, Partition: o.Partition, Committed: -1, End: o.Offset}
		if c, ok := committed.Lookup(o.Topic, o.Partition); ok && c.Err == nil {
			l.Committed = c.At
		}
		if l.Committed >= 0 {
			l.Lag = l.End - l.Committed
		} else {
			l.Lag = l.End
		}
		out = append(out, l)
	})
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out, errors.Join(errs...)
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
