package engine

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/pipeline"
)

// waitForRoom bounds how far reading runs ahead of the tasks: at most
// consumer.max_poll_records records are handed out and not yet processed.
// Once that many are, it waits until the tasks are down to half, and
// returns how many more may be read (0 if ctx ended first).
//
// The barrier waits for whatever the tasks were handed, and records queued
// at the end of a checkpoint's reading are part of its commit time. With
// four polls queued per task, a stateful step on six partitions that just
// kept up held 60,000-80,000 records at each barrier: 200-700 ms of commit
// at a 100 ms interval, and the next checkpoint read for as long.
func (rt *runtime) waitForRoom(ctx context.Context) int {
	limit := int64(rt.cfg.Consumer.MaxPollRecords)
	for {
		q := rt.queued.Load()
		if q <= limit/2 {
			return int(min(limit-q, limit))
		}
		select {
		case <-rt.room:
		case <-ctx.Done():
			return 0
		}
	}
}

// processed is a task saying it is done with n records it was handed.
func (rt *runtime) processed(n int) {
	if rt.queued.Add(-int64(n)) <= int64(rt.cfg.Consumer.MaxPollRecords)/2 {
		select {
		case rt.room <- struct{}{}:
		default:
		}
	}
}

// polled is what the coordinator polled and has not handed out yet: the
// records of each partition in offset order, a partition's earlier records
// first. Polls take whole fetches and the tasks are handed at most what
// waitForRoom allows; the rest waits here, and what is left when a
// checkpoint stops reading is read again (rewindPolled).
type polled struct {
	parts []kgo.FetchTopicPartition
	n     int
	out   []kgo.FetchTopicPartition // take's result, reused
}

func (b *polled) add(f kgo.Fetches) {
	f.EachPartition(func(p kgo.FetchTopicPartition) {
		if len(p.Records) > 0 {
			b.parts = append(b.parts, p)
			b.n += len(p.Records)
		}
	})
}

// take removes up to n records, sharing them among the partitions so that
// every task gets work. The result is valid until the next take.
func (b *polled) take(n int) []kgo.FetchTopicPartition {
	b.out = b.out[:0]
	if n <= 0 || b.n == 0 {
		return b.out
	}
	share := max(1, n/len(b.parts))
	kept := b.parts[:0]
	for _, p := range b.parts {
		k := min(share, n, len(p.Records))
		if k > 0 {
			q := p
			q.Records = p.Records[:k:k]
			b.out = append(b.out, q)
			p.Records = p.Records[k:]
			n -= k
			b.n -= k
		}
		if len(p.Records) > 0 {
			kept = append(kept, p)
		}
	}
	clear(b.parts[len(kept):])
	b.parts = kept
	return b.out
}

// holdFor moves the records of r's partitions out of b: they are held
// (restoring.hold) with those dispatch found, and read again once r's
// task is restored. It returns how many there were.
func (b *polled) holdFor(r *restoring) int {
	n := 0
	kept := b.parts[:0]
	for _, p := range b.parts {
		if pipeline.TaskID(p.Partition) == r.id {
			r.hold(p)
			n += len(p.Records)
			continue
		}
		kept = append(kept, p)
	}
	clear(b.parts[len(kept):])
	b.parts = kept
	b.n -= n
	return n
}

// rewindPolled moves consumption back to the first record of each
// partition not handed out, so that the offsets the open transaction
// commits stop before it, and empties it. A partition whose task
// is restoring goes back to its first record held (restoring.hold) or
// left, whichever is earlier. The coordinator calls it between a
// checkpoint's reading and its commit.
func (rt *runtime) rewindPolled() {
	if rt.polled.n == 0 {
		return
	}
	set := map[string]map[int32]kgo.EpochOffset{}
	var held []*restoring
	rt.mu.Lock()
	for _, p := range rt.polled.parts {
		if r := rt.restores[pipeline.TaskID(p.Partition)]; r != nil {
			r.hold(p)
			held = append(held, r)
			continue
		}
		if set[p.Topic] == nil {
			set[p.Topic] = map[int32]kgo.EpochOffset{}
		}
		first := p.Records[0]
		set[p.Topic][p.Partition] = kgo.EpochOffset{Epoch: first.LeaderEpoch, Offset: first.Offset}
	}
	rt.mu.Unlock()
	rt.p.stats.reread.Add(int64(rt.polled.n))
	clear(rt.polled.parts)
	rt.polled.parts, rt.polled.n = rt.polled.parts[:0], 0
	rt.sink.Client().SetOffsets(set)
	if len(held) > 0 {
		rt.holdBack(held)
	}
}

// dispatch hands each partition's records to its task, in offset order.
func (rt *runtime) dispatch(ps []kgo.FetchTopicPartition) (n, internal int) {
	var held []*restoring
	rt.mu.Lock()
	for _, p := range ps {
		if len(p.Records) == 0 {
			continue
		}
		id := pipeline.TaskID(p.Partition)
		if rt.parts[id] == nil {
			rt.parts[id] = map[string]bool{}
		}
		rt.parts[id][p.Topic] = true
		t, ok := rt.tasks[id]
		if !ok {
			r := rt.restores[id]
			if r == nil {
				var err error
				if t, r, err = rt.startTask(id); err != nil {
					rt.fail(err)
					continue
				}
			}
			if r != nil {
				// Not handed out, not observed: consumption goes back
				// to these records (holdBack), and the offsets this
				// checkpoint commits for the partition do not move.
				rt.restores[id] = r
				r.hold(p)
				rt.p.stats.heldRecords.Add(int64(len(p.Records)))
				held = append(held, r)
				continue
			}
			rt.tasks[id] = t
		}
		rt.track.Observe(p.Topic, p.Partition, p.Records[0].Offset, p.Records[len(p.Records)-1].Offset)
		rt.queued.Add(int64(len(p.Records)))
		t.queue <- work{recs: p.Records, flush: -1}
		n += len(p.Records)
		if src := rt.g.byTopic[p.Topic]; src != nil && src.internal {
			internal += len(p.Records)
		}
	}
	rt.mu.Unlock()
	if len(held) > 0 {
		for _, r := range held {
			rt.p.stats.heldRecords.Add(int64(rt.polled.holdFor(r)))
		}
		rt.holdBack(held)
	}
	return n, internal
}

// barrier returns once every record handed out has been fully processed:
// task queues empty, parallel stages drained, and operators that hold
// records flushed, in topological order so that what one releases reaches
// the next before it is flushed in turn.
func (rt *runtime) barrier() {
	rt.syncTasks(-1, true)
	for _, n := range rt.g.nodes {
		if st := rt.stages[n.idx]; st != nil {
			st.drain()
			continue
		}
		if rt.anyFlusher(n) {
			rt.syncTasks(n.idx, false)
			// What it released may have gone to a parallel stage further
			// down, which the loop drains when it gets there.
		}
	}
}

func (rt *runtime) anyFlusher(n *node) bool {
	if n.kind != stepNode {
		return false
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for _, t := range rt.tasks {
		if _, ok := t.ops[n.idx].(pipeline.Flusher); ok {
			return true
		}
	}
	return false
}

// syncTasks sends every task a barrier (flushing node flush, if >= 0, and
// doing its time work first if tick) and waits for all of them to answer.
func (rt *runtime) syncTasks(flush int, tick bool) {
	var now time.Time
	if tick {
		now = rt.clock().Now()
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	acks := make([]chan struct{}, 0, len(rt.tasks))
	for _, t := range rt.tasks {
		c := make(chan struct{})
		t.queue <- work{flush: flush, barrier: c, tick: now}
		acks = append(acks, c)
	}
	for _, c := range acks {
		<-c
	}
}
