package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/offsets"
	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/state"
)

// Restores run off the commit cycle, as Kafka Streams runs its restoring
// tasks: a new task whose stores have more than a short tail of changelog
// to read is not handed records until they are restored. Its records are
// held back (see restoring.hold) and its partitions paused, while the other
// tasks go on committing; the checkpoint that finds the restore done adds
// the task and resumes its partitions. A restore inside the checkpoint that
// first read the task kept every other partition's outputs in an open
// transaction for as long as it took, which can be far longer than
// transactions.timeout: the broker aborted the transaction, and every
// replay restored again.

// inlineRestore is the most changelog offsets a new task restores inside
// the checkpoint that found it: a tail this short reads in milliseconds,
// where restoring it apart would hold the task's records back for a
// checkpoint or more.
const inlineRestore = 1000

// restoreStall bounds how long a restore may go without reading anything
// before it fails: a restore making progress may take as long as it needs.
var restoreStall = 2 * time.Minute

// errRestoreStalled ends a restore that read nothing for restoreStall.
var errRestoreStalled = errors.New("no changelog record read")

// backlog is what a task's stores have left to restore.
type backlog struct {
	offsets   int64 // changelog offsets between what the stores applied and the end
	undecided bool  // a transaction on a changelog is not decided yet: reading it waits
}

// inline says the stores can be restored inside a checkpoint.
func (b backlog) inline() bool { return b.offsets <= inlineRestore && !b.undecided }

// bounds of a changelog partition.
type bounds struct {
	start, end int64 // log start offset and high watermark
	stable     int64 // last stable offset
	ok         bool  // the topic has the partition
}

// changelogBounds lists the start offset, the end (high watermark) and the
// last stable offset of partition p of a changelog; ok is false if the
// topic has no such partition. Listing is retried while the topic is not
// known yet (a changelog created a moment ago may not be) and while the
// broker cannot be reached.
//
// A store is checked against the high watermark, not the last stable
// offset: an open transaction of another producer (a previous owner of the
// task, not yet aborted) holds the last stable offset back while committed
// records of the current owner may follow it, and a store that applied
// those is not stale.
func changelogBounds(ctx context.Context, cl *kgo.Client, topic string, p int32) (bounds, error) {
	return listBounds(ctx, kadm.NewClient(cl), topic, p) // not closed: that would close cl
}

// offsetLister lists a topic's offsets; *kadm.Client is one.
type offsetLister interface {
	ListStartOffsets(context.Context, ...string) (kadm.ListedOffsets, error)
	ListEndOffsets(context.Context, ...string) (kadm.ListedOffsets, error)
	ListCommittedOffsets(context.Context, ...string) (kadm.ListedOffsets, error)
}

// listBounds is changelogBounds with adm. A transient failure (see
// offsets.Transient: a retriable error, a connection reset while a broker
// restarts) is retried until ctx is done.
func listBounds(ctx context.Context, adm offsetLister, topic string, p int32) (bounds, error) {
	var b bounds
	err := offsets.Retry(ctx, func() error {
		var starts, ends, stables kadm.ListedOffsets
		for _, l := range []struct {
			to   *kadm.ListedOffsets
			list func(context.Context, ...string) (kadm.ListedOffsets, error)
		}{{&starts, adm.ListStartOffsets}, {&ends, adm.ListEndOffsets}, {&stables, adm.ListCommittedOffsets}} {
			var err error
			if *l.to, err = l.list(ctx, topic); err == nil {
				err = l.to.Error()
			}
			if err != nil {
				return err
			}
		}
		s, sok := starts.Lookup(topic, p)
		e, eok := ends.Lookup(topic, p)
		st, stok := stables.Lookup(topic, p)
		b = bounds{start: s.Offset, end: e.Offset, stable: st.Offset, ok: sok && eok && stok}
		return nil
	})
	return b, err
}

// restoring is a task whose stores are being restored apart from the
// commit cycle. The coordinator owns its fields but done, t and err, which
// the restoring goroutine sets before it closes done.
type restoring struct {
	id      pipeline.TaskID
	started time.Time
	cancel  context.CancelFunc
	done    chan struct{}
	t       *task // the restored task, running; nil after an error
	err     error

	// rewind is, by topic, the first record of partition id not handed
	// to a task: consumption of it goes back there.
	rewind map[string]kgo.EpochOffset
	// pausedBy is the client generation that paused the task's
	// partitions; a rebuilt client starts with none paused.
	pausedBy uint64
}

// startTask makes the task of partition number id. One with little or
// nothing to restore is restored and started here and returned as t; one
// with more is returned as r, restoring on a goroutine of its own.
func (rt *runtime) startTask(id pipeline.TaskID) (*task, *restoring, error) {
	t, need, err := newTask(rt, id)
	if err != nil {
		return nil, nil, err
	}
	if need.inline() {
		if err := rt.restoreStores(rt.restoreCtx, rt.restoreCl, t); err != nil {
			t.closeOps()
			return nil, nil, err
		}
		t.start()
		return t, nil, nil
	}
	ctx, cancel := context.WithCancel(rt.restoreCtx)
	r := &restoring{id: id, started: time.Now(), cancel: cancel, done: make(chan struct{}), rewind: map[string]kgo.EpochOffset{}}
	rt.p.stats.restoring.Add(1)
	rt.log.Info("restoring a task's state apart from the checkpoints; its records wait until it is done",
		"task", id, "changelog_offsets", need.offsets, "undecided_transaction", need.undecided)
	go func() {
		defer close(r.done)
		defer rt.p.stats.restoring.Add(-1)
		// A client of its own: requests on one connection are answered
		// in order, and a restore's large fetches would hold up the
		// short restores done inside a checkpoint, and the other
		// restores.
		cl, err := kgo.NewClient(rt.clientOpts...)
		if err != nil {
			t.closeOps()
			r.err = fmt.Errorf("task %d: a client to restore its state: %w", id, err)
			return
		}
		defer cl.Close()
		if err := rt.restoreStores(ctx, cl, t); err != nil {
			t.closeOps()
			r.err = err
			return
		}
		t.start()
		r.t = t
	}()
	return nil, r, nil
}

// hold notes the records of p, which its restoring task cannot take yet:
// consumption of the partition goes back to the first of them.
func (r *restoring) hold(p kgo.FetchTopicPartition) {
	first := p.Records[0]
	if cur, ok := r.rewind[p.Topic]; !ok || first.Offset < cur.Offset {
		r.rewind[p.Topic] = kgo.EpochOffset{Epoch: first.LeaderEpoch, Offset: first.Offset}
	}
}

// holdBack pauses the partitions of the restoring tasks rs and moves their
// consumption (the fetch position and the offsets the transaction will
// commit) back to their first record not handed out. The coordinator calls
// it between a poll and AllowRebalance, without rt.mu.
func (rt *runtime) holdBack(rs []*restoring) {
	cl := rt.sink.Client()
	for _, r := range rs {
		if r.pausedBy != rt.clientGen {
			cl.PauseFetchPartitions(rt.partitionsOf(r.id))
			r.pausedBy = rt.clientGen
		}
		cl.SetOffsets(r.rewound())
	}
}

// rewound is where consumption of r's partitions resumes, for SetOffsets.
func (r *restoring) rewound() map[string]map[int32]kgo.EpochOffset {
	set := map[string]map[int32]kgo.EpochOffset{}
	for topic, eo := range r.rewind {
		set[topic] = map[int32]kgo.EpochOffset{int32(r.id): eo}
	}
	return set
}

// partitionsOf is partition number id of every topic the pipeline reads.
func (rt *runtime) partitionsOf(id pipeline.TaskID) map[string][]int32 {
	m := map[string][]int32{}
	for _, topic := range rt.g.SourceTopics() {
		m[topic] = []int32{int32(id)}
	}
	return m
}

// addRestored adds the tasks whose restore is done, so that this
// checkpoint hands them records, and resumes their partitions. A restore
// that failed stops the pipeline, as one inside a checkpoint did. It runs
// on the coordinator goroutine before a checkpoint reads.
func (rt *runtime) addRestored() {
	var resume []*restoring
	rt.mu.Lock()
	for id, r := range rt.restores {
		select {
		case <-r.done:
		default:
			continue
		}
		delete(rt.restores, id)
		if r.err != nil {
			rt.fail(r.err)
			continue
		}
		rt.tasks[id] = r.t
		resume = append(resume, r)
	}
	rt.mu.Unlock()
	for _, r := range resume {
		rt.sink.Client().ResumeFetchPartitions(rt.partitionsOf(r.id))
		rt.log.Info("task restored; its records flow again", "task", r.id, "took", time.Since(r.started).Round(time.Millisecond))
	}
}

// stopRestore cancels a restore and waits for it, closing the task it may
// have made.
func stopRestore(r *restoring) {
	r.cancel()
	<-r.done
	if r.t != nil {
		r.t.stop()
	}
}

// restoreStores brings the stores of a new task up to date with their
// changelogs, once its operators registered their states (so that each
// record is checked against its state's codec).
// It reads with cl.
func (rt *runtime) restoreStores(ctx context.Context, cl *kgo.Client, t *task) error {
	for _, n := range rt.g.nodes {
		if st := t.stores[n.idx]; st != nil {
			if err := rt.restore(ctx, cl, n, t.id, st); err != nil {
				return err
			}
		}
	}
	return nil
}

// restore brings st up to its changelog's end, once every transaction
// there is decided. It fails if it reads nothing for restoreStall.
func (rt *runtime) restore(ctx context.Context, cl *kgo.Client, n *node, id pipeline.TaskID, st *state.Store) error {
	topic := rt.changelogs[n.idx]
	from := st.AppliedOffset() + 1
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stall := time.AfterFunc(restoreStall, func() { cancel(errRestoreStalled) })
	defer stall.Stop()
	start, lastLog := time.Now(), time.Now()
	var count int64 // applied; the applier goroutine's until it is closed
	defer rt.p.figures.restoreProgress(StepTask{n.name, int32(id)}, RestoreProgress{}, true)
	// Batches are applied on a goroutine of their own while the next is
	// fetched, decoded and checked: on one partition the two took turns,
	// and each kept a core idle while the other ran.
	ap := startApplier(st.RestoreChecked, func(applied int, p offsets.Progress) {
		count += int64(applied)
		rt.p.stats.restored.Add(int64(applied))
		rt.p.figures.restoreProgress(StepTask{n.name, int32(id)}, RestoreProgress{Done: p.Done, Total: p.Total}, false)
		if time.Since(lastLog) > 2*time.Second {
			lastLog = time.Now()
			rt.log.Info("restoring state", "step", n.name, "task", id, "percent", 100*p.Done/max(p.Total, 1),
				"records", count, "records_per_s", int(float64(count)/time.Since(start).Seconds()))
		}
	})
	first := true
	err := offsets.ReadPartition(ctx, cl, topic, int32(id), from, func(recs []*kgo.Record, p offsets.Progress) error {
		stall.Reset(restoreStall)
		if first {
			// Before the applier has a batch: it owns st from then on.
			st.ExpectRestore(p.Total)
			first = false
		}
		crecs := make([]state.ChangelogRecord, len(recs))
		for i, r := range recs {
			crecs[i] = state.ChangelogRecord{Key: r.Key, Value: r.Value, Offset: r.Offset}
		}
		// Checked here, applied there: the two halves of a record's work
		// run side by side.
		if err := st.CheckChangelog(crecs); err != nil {
			return err
		}
		return ap.apply(crecs, recs[len(recs)-1].Offset, p)
	})
	if aerr := ap.close(); err == nil {
		err = aerr
	}
	if err != nil {
		if cause := context.Cause(ctx); errors.Is(cause, errRestoreStalled) {
			err = fmt.Errorf("%w for %s: %w", cause, restoreStall, err)
		}
		if errors.Is(err, state.ErrIncompatible) {
			return fmt.Errorf("restoring from %s: %w", topic, rt.stateErr(n, id, err))
		}
		return fmt.Errorf("restoring step %s (%s), task %d from %s: %w", n.name, n.path, id, topic, err)
	}
	if count == 0 {
		return nil
	}
	elapsed := time.Since(start)
	rt.log.Info("state restored", "step", n.name, "task", id, "changelog", topic, "from_offset", from,
		"records", count, "records_per_s", int(float64(count)/max(elapsed.Seconds(), 1e-6)), "duration", elapsed.Round(time.Millisecond))
	return nil
}

// applier applies a restore's batches to a store on a goroutine of its
// own, one batch behind the fetches: at most one batch waits while one is
// applied, so a restore holds three fetches' records at most.
type applier struct {
	in   chan restoreBatch
	done chan struct{}
	err  error // the first failure; the goroutine's until done is closed
}

type restoreBatch struct {
	recs []state.ChangelogRecord
	last int64
	p    offsets.Progress
}

// startApplier starts applying batches with restore (a store's Restore);
// after runs on the applier's goroutine once a batch is applied, with its
// count and read progress.
func startApplier(restore func([]state.ChangelogRecord, int64) error, after func(applied int, p offsets.Progress)) *applier {
	a := &applier{in: make(chan restoreBatch, 1), done: make(chan struct{})}
	go func() {
		defer close(a.done)
		for b := range a.in {
			if err := restore(b.recs, b.last); err != nil {
				a.err = err
				return
			}
			after(len(b.recs), b.p)
		}
	}()
	return a
}

// apply queues a batch, waiting while another is queued. It returns the
// failure of an earlier batch, if there was one.
func (a *applier) apply(recs []state.ChangelogRecord, last int64, p offsets.Progress) error {
	select {
	case a.in <- restoreBatch{recs, last, p}:
		return nil
	case <-a.done:
		return a.err
	}
}

// close waits for every queued batch to be applied and returns the first
// failure.
func (a *applier) close() error {
	close(a.in)
	<-a.done
	return a.err
}
