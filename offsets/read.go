package offsets

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pipeline-run/pipeline/internal/lz4frame"
)

// ReadToEnd reads every partition of topic from its start to the end it has
// now: the last stable offset when committed is true (read_committed), the
// high watermark otherwise. It returns the data records in offset order per
// partition.
//
// It sends Fetch requests itself rather than running a consumer, because it
// must know when a partition is read: the last offsets before a
// read_committed end are often transaction markers or aborted records that a
// consumer never hands back, so waiting for the last record could wait
// forever. kgo.ProcessFetchPartition says where the next fetch starts
// whether or not it kept the records it passed over.
func ReadToEnd(ctx context.Context, cl *kgo.Client, topic string, committed bool) ([]*kgo.Record, error) {
	opts := ReadOptions{}
	if !committed {
		opts.Isolation = ReadUncommitted
	}
	return Read(ctx, cl, topic, opts)
}

// Isolation is the isolation level a read fetches with.
type Isolation int8

const (
	// ReadCommitted reads non-transactional records and those of committed
	// transactions, up to the last stable offset.
	ReadCommitted Isolation = iota
	// ReadUncommitted reads every record, aborted or still open ones
	// included, up to the high watermark.
	ReadUncommitted
)

// ReadOptions say how Read reads a topic. The zero value reads every
// partition read_committed from its start to its last stable offset,
// without transaction markers, as ReadToEnd(ctx, cl, topic, true) does.
type ReadOptions struct {
	Isolation Isolation
	// KeepControl keeps control records (transaction markers) in the
	// result, in offset order among the data records: their
	// Attrs.IsControl() is true and their Key reads as a
	// kmsg.ControlRecordKey. A record's ProducerID and
	// Attrs.IsTransactional() tie it to its marker.
	KeepControl bool
	// To, when not nil, is where the read of each partition stops (the
	// offset after the last one read) instead of the end listed when the
	// read starts, so that a caller can read to offsets it listed itself.
	// Only the partitions it names are read.
	To map[int32]int64
	// Decompressor decodes compressed batches; nil means
	// lz4frame's, which leaves codecs but lz4 to kgo.DefaultDecompressor().
	// Decompress is called from one goroutine.
	Decompressor kgo.Decompressor

	// WaitDecided, with ReadCommitted and no To, reads to the end every
	// partition had when the read began, once every transaction written
	// before then is decided, rather than to the last stable offset of
	// that moment: a transaction committed a moment ago may not have its
	// markers yet (see waitDecided). A transaction still open after 5 s
	// is taken for abandoned, and the read stops below it.
	WaitDecided bool

	// OnProgress, when not nil, is told how far the read has come: once
	// before the first fetch, then after each round of fetches. It is
	// called from the reading goroutine.
	OnProgress func(Progress)

	// retryListing lists offsets and leaders again, until ctx is done,
	// while the answer is a transient error (see Transient).
	retryListing bool
	// partitionBytes is a fetch's limit per partition; 0 means
	// readPartitionBytes.
	partitionBytes int32
}

// readPartitionBytes is a fetch's limit per partition for Read, and
// streamPartitionBytes for ReadPartition and ReadEach. A broker answers with at least
// one whole batch whatever the limit.
const (
	readPartitionBytes   = 8 << 20
	streamPartitionBytes = 512 << 10
)

// waitDecided waits until the last stable offset of each partition in to
// has reached its high watermark as listed now, then sets to to that
// watermark. A transaction committed a moment ago may still lack its
// marker on a partition: the broker writes markers after the commit is
// decided, and not on every partition at once. Its records are committed
// but below the last stable offset no reader sees them yet; a restore that
// stopped there would miss them.
//
// Markers follow a commit within milliseconds. A transaction still open
// after decideWait is one its producer left undecided: a restore's
// previous owner that died or was fenced, whose transaction the broker
// aborts (a live one that had committed offsets in it would still hold the
// partition's stable offsets, so nobody would be restoring). The read then
// stops at the last stable offset, below that transaction. Waiting for the
// broker's abort instead could outlast the reader's own transaction.
func waitDecided(ctx context.Context, adm *kadm.Client, topic string, retry bool, to map[int32]int64) error {
	deadline := time.Now().Add(decideWait)
	hw, err := listOffsets(ctx, retry, func() (kadm.ListedOffsets, error) { return adm.ListEndOffsets(ctx, topic) })
	if err != nil {
		return fmt.Errorf("listing end offsets of %s: %w", topic, err)
	}
	want := map[int32]int64{}
	for p, stable := range to {
		if o, ok := hw.Lookup(topic, p); ok && o.Err == nil && o.Offset > stable {
			want[p] = o.Offset
		}
	}
	for len(want) > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the transactions on %s to be decided: %w", topic, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
		lso, err := listOffsets(ctx, retry, func() (kadm.ListedOffsets, error) { return adm.ListCommittedOffsets(ctx, topic) })
		if err != nil {
			return fmt.Errorf("listing stable offsets of %s: %w", topic, err)
		}
		late := time.Now().After(deadline)
		for p, w := range want {
			o, ok := lso.Lookup(topic, p)
			if !ok || o.Err != nil {
				continue
			}
			switch {
			case o.Offset >= w:
				to[p] = w
				delete(want, p)
			case late:
				to[p] = max(to[p], o.Offset)
				delete(want, p)
			}
		}
	}
	return nil
}

// decideWait bounds how long waitDecided waits for a transaction's marker.
var decideWait = 5 * time.Second

// Read reads every partition of topic (or those opts.To names) from its
// start to its end as opts say, and returns the records in partition
// order, then offset order. See ReadToEnd for why it sends Fetch requests
// itself.
func Read(ctx context.Context, cl *kgo.Client, topic string, opts ReadOptions) ([]*kgo.Record, error) {
	out := map[int32][]*kgo.Record{}
	parts, err := read(ctx, cl, topic, -1, -1, opts, func(p int32, rs []*kgo.Record, _ Progress) error {
		out[p] = append(out[p], rs...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	var all []*kgo.Record
	for _, p := range parts {
		all = append(all, out[p]...)
	}
	return all, nil
}

// ReadEach reads topic as Read does, handing fn the records a fetched
// partition at a time, in offset order within each partition (partitions
// interleave), instead of returning them all: a reader that only counts or
// checks them holds one fetch at a time, not the whole topic, and it
// fetches 512 KiB of a partition at a time, as ReadPartition does (8 MiB
// of well-compressed records decompress to hundreds of megabytes). fn's
// error ends the read and is returned.
func ReadEach(ctx context.Context, cl *kgo.Client, topic string, opts ReadOptions, fn func(partition int32, rs []*kgo.Record) error) error {
	opts.partitionBytes = streamPartitionBytes
	_, err := read(ctx, cl, topic, -1, -1, opts, func(p int32, rs []*kgo.Record, _ Progress) error { return fn(p, rs) })
	return err
}

// Progress says how far a read has come, in offsets.
type Progress struct {
	Done, Total int64
}

// ReadPartition reads one partition of topic with read_committed from
// offset from (or its start, if later) to the end it had when the read
// began, once every transaction there is decided (see waitDecided), handing
// the records to fn a fetch at a time, in offset order, with how far the
// read has come.
func ReadPartition(ctx context.Context, cl *kgo.Client, topic string, partition int32, from int64, fn func([]*kgo.Record, Progress) error) error {
	// A changelog created a moment ago may not be known yet to the broker
	// (or the client's metadata) that answers the listing: that passes.
	_, err := read(ctx, cl, topic, partition, from, ReadOptions{retryListing: true, WaitDecided: true, partitionBytes: streamPartitionBytes}, func(_ int32, rs []*kgo.Record, p Progress) error { return fn(rs, p) })
	return err
}

// listOffsets calls list, and again after a pause while retry is set and
// the request or a partition failed with a transient error (see Retry).
func listOffsets(ctx context.Context, retry bool, list func() (kadm.ListedOffsets, error)) (kadm.ListedOffsets, error) {
	if !retry {
		return list()
	}
	var l kadm.ListedOffsets
	err := Retry(ctx, func() error {
		var err error
		if l, err = list(); err == nil {
			err = l.Error()
		}
		return err
	})
	return l, err
}

// read reads topic (only partition only, if >= 0) from max(from, start),
// handing each fetched batch of a partition to fn; it returns the
// partitions read, sorted.
func read(ctx context.Context, cl *kgo.Client, topic string, only int32, from int64, ro ReadOptions, fn func(int32, []*kgo.Record, Progress) error) ([]int32, error) {
	adm := kadm.NewClient(cl)
	starts, err := listOffsets(ctx, ro.retryListing, func() (kadm.ListedOffsets, error) { return adm.ListStartOffsets(ctx, topic) })
	if err != nil {
		return nil, fmt.Errorf("listing start offsets of %s: %w", topic, err)
	}
	committed := ro.Isolation == ReadCommitted
	next, to := map[int32]int64{}, map[int32]int64{}
	if ro.To != nil {
		var errs []error
		for p, end := range ro.To {
			if only >= 0 && p != only {
				continue
			}
			s, ok := starts.Lookup(topic, p)
			if !ok || s.Err != nil {
				errs = append(errs, fmt.Errorf("partition %d: %w", p, cmp.Or(s.Err, errors.New("no start offset listed"))))
				continue
			}
			next[p], to[p] = max(s.Offset, from), end
		}
		if len(errs) > 0 {
			return nil, fmt.Errorf("listing start offsets of %s: %w", topic, errors.Join(errs...))
		}
	} else {
		ends, err := listOffsets(ctx, ro.retryListing, func() (kadm.ListedOffsets, error) {
			if committed {
				return adm.ListCommittedOffsets(ctx, topic)
			}
			return adm.ListEndOffsets(ctx, topic)
		})
		if err != nil {
			return nil, fmt.Errorf("listing end offsets of %s: %w", topic, err)
		}
		var errs []error
		ends.Each(func(o kadm.ListedOffset) {
			if o.Err != nil {
				errs = append(errs, o.Err)
				return
			}
			if only >= 0 && o.Partition != only {
				return
			}
			s, _ := starts.Lookup(topic, o.Partition)
			next[o.Partition], to[o.Partition] = max(s.Offset, from), o.Offset
		})
		if len(errs) > 0 {
			return nil, fmt.Errorf("listing offsets of %s: %w", topic, errors.Join(errs...))
		}
		if committed && ro.WaitDecided {
			if err := waitDecided(ctx, adm, topic, ro.retryListing, to); err != nil {
				return nil, err
			}
		}
	}

	opts := kgo.ProcessFetchPartitionOpts{Topic: topic, IsolationLevel: kgo.ReadUncommitted(), KeepControlRecords: ro.KeepControl}
	var isolation int8
	if committed {
		opts.IsolationLevel, isolation = kgo.ReadCommitted(), 1
	}
	dec := ro.Decompressor
	if dec == nil {
		dec = lz4frame.NewDecompressor()
	}
	partBytes := cmp.Or(ro.partitionBytes, readPartitionBytes)
	var total, done int64
	for p, t := range to {
		total += max(t-next[p], 0)
	}
	progress := func() {
		if ro.OnProgress != nil {
			ro.OnProgress(Progress{Done: done, Total: total})
		}
	}
	progress()
	// The topic's leaders are looked up again only after a fetch failed:
	// a lookup per fetch was a round trip for nothing.
	var d kadm.TopicDetail
	stale := true
	for {
		if stale {
			describe := func() error {
				details, err := adm.ListTopics(ctx, topic)
				if err != nil {
					return err
				}
				var ok bool
				if d, ok = details[topic]; !ok {
					return kerr.UnknownTopicOrPartition
				}
				return d.Err
			}
			var err error
			if ro.retryListing {
				err = Retry(ctx, describe)
			} else {
				err = describe()
			}
			if err != nil {
				return nil, fmt.Errorf("describing %s: %w", topic, err)
			}
			stale = false
		}
		byLeader := map[int32][]int32{}
		for p, pd := range d.Partitions {
			if _, ok := to[p]; ok && next[p] < to[p] {
				byLeader[pd.Leader] = append(byLeader[pd.Leader], p)
			}
		}
		if len(byLeader) == 0 {
			break
		}
		retry := false
		for leader, ps := range byLeader {
			req := kmsg.NewPtrFetchRequest()
			req.MaxWaitMillis, req.MinBytes, req.MaxBytes, req.IsolationLevel = 500, 1, 32<<20, isolation
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic, rt.TopicID = topic, d.ID
			for _, p := range ps {
				rp := kmsg.NewFetchRequestTopicPartition()
				rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, next[p], partBytes
				rt.Partitions = append(rt.Partitions, rp)
			}
			req.Topics = append(req.Topics, rt)
			kresp, err := cl.Broker(int(leader)).Request(ctx, req)
			if err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				retry = true
				continue
			}
			resp := kresp.(*kmsg.FetchResponse)
			if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
				return nil, fmt.Errorf("fetching %s: %w", topic, err)
			}
			for i := range resp.Topics {
				for j := range resp.Topics[i].Partitions {
					rp := &resp.Topics[i].Partitions[j]
					p := rp.Partition
					if _, ok := to[p]; !ok {
						continue
					}
					opts.Partition, opts.Offset = p, next[p]
					fp, nextOffset := kgo.ProcessFetchPartition(opts, rp, dec, nil)
					if fp.Err != nil {
						if kerr.IsRetriable(fp.Err) {
							retry = true
							continue
						}
						return nil, fmt.Errorf("fetching %s/%d at %d: %w", topic, p, next[p], fp.Err)
					}
					recs := fp.Records
					for len(recs) > 0 && recs[len(recs)-1].Offset >= to[p] {
						recs = recs[:len(recs)-1]
					}
					done += min(nextOffset, to[p]) - min(next[p], to[p])
					next[p] = max(next[p], nextOffset)
					if len(recs) > 0 {
						if err := fn(p, recs, Progress{Done: done, Total: total}); err != nil {
							return nil, err
						}
					}
				}
			}
		}
		progress()
		if retry {
			stale = true
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	parts := make([]int32, 0, len(to))
	for p := range to {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	return parts, nil
}
