package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/txsink"
)

// checkpoint reads for one interval (or max_records), then runs the
// barrier, prepare and commit phases.
func (rt *runtime) checkpoint(ctx context.Context) Checkpoint {
	rt.addRestored()
	rt.nextID++
	cp := Checkpoint{ID: rt.nextID}
	start := time.Now()
	defer rt.p.stats.txnBegan.Store(0)
	bctx, bcancel := context.WithTimeout(ctx, min(max(rt.cfg.Checkpoint.Interval, time.Second), rt.cfg.Checkpoint.Timeout))
	err := rt.sink.Begin(bctx)
	bcancel()
	if err != nil {
		// The client refuses to begin only after a fatal error of its
		// own, which a new client may not repeat: rebuild.
		cp.Err, cp.rebuild = fmt.Errorf("beginning checkpoint %d: %w", cp.ID, err), true
		rt.p.stats.aborted.Add(1)
		return cp
	}
	rt.p.stats.txnBegan.Store(start.UnixNano())
	rt.track.Begin()
	rt.internalOut.Store(0)
	deadline := nextDeadline(rt.cadence, start, rt.cfg.Checkpoint.Interval, rt.lastCommit)
	rt.cadence, rt.lastCommit = time.Time{}, 0
	maxRecords := rt.cfg.Checkpoint.MaxRecords
	fullInterval := false
	// The last barrier left every task idle.
	rt.queued.Store(0)
	for cp.Records < maxRecords && ctx.Err() == nil && !rt.failed() {
		pctx, cancel := context.WithDeadline(ctx, deadline)
		room := rt.waitForRoom(pctx)
		if room == 0 {
			cancel()
			fullInterval = ctx.Err() == nil
			break
		}
		n := min(rt.cfg.Consumer.MaxPollRecords, maxRecords-cp.Records, room)
		if rt.polled.n == 0 {
			// Everything the client has buffered, when there is time
			// to hand it all out: the client fetches a partition again
			// only once its buffered fetch is taken whole, so taking it
			// piece by piece, as the tasks make room, makes fetching
			// wait for processing. Close to the deadline it takes
			// pieces, which leaves less to read again.
			take := n
			size := max(int(rt.sink.Client().BufferedFetchRecords()), rt.lastWhole)
			whole := wholePoll(size, cp.Records, maxRecords, time.Since(start), time.Until(deadline), rt.handRate)
			if whole {
				take = 0
			}
			fetches := rt.sink.Poll(pctx, take)
			if err := rt.fetchErr(fetches); err != nil {
				cancel()
				cp.Err = err
				cp.rebuild = true
				break
			}
			rt.polled.add(fetches)
			if whole {
				rt.lastWhole = rt.polled.n
			}
		}
		cancel()
		n, internal := rt.dispatch(rt.polled.take(n))
		cp.Records += n
		cp.Internal += internal
		if !time.Now().Before(deadline) {
			fullInterval = true
			break
		}
	}

	if read := time.Since(start); cp.Records > 0 && read > 0 {
		rt.handRate = float64(cp.Records) / read.Seconds()
	}
	// What was polled and not handed out is read again by the next
	// checkpoint: the offsets this one commits stop before it.
	rt.rewindPolled()

	// Barrier and prepare: every task finishes what it was given, parallel
	// stages drain and holding operators flush, in graph order.
	commitStart := time.Now()
	rt.barrier()
	cp.Barrier = time.Since(commitStart)
	if cp.Err == nil && rt.hard.Err() != nil {
		// What the barrier waited for failed rather than finished.
		cp.Err = fmt.Errorf("checkpoint %d: %w (checkpoint.timeout, %s)", cp.ID, errGraceOver, rt.cfg.Checkpoint.Timeout)
	}
	// Every output so far went through Produce; the changelog and
	// progress records come after.
	cp.Produced, _ = rt.sink.Produced()
	cp.Produced -= rt.internalOut.Load()
	if cp.Err == nil && !rt.failed() {
		rt.writeWatermarks()
		rt.logChanges()
	}
	_, cp.Bytes = rt.sink.Produced()
	cctx, cancel := context.WithTimeout(rt.hard, rt.cfg.Checkpoint.Timeout)
	defer cancel()
	if cp.Err == nil && !rt.failed() && rt.cfg.Audit.Enabled && (cp.Records > 0 || cp.Produced > 0) {
		// The progress record needs the per-partition counts, known only
		// once every output is acknowledged.
		acks, err := rt.sink.Flush(cctx)
		if err != nil {
			cp.Err, cp.rebuild = fmt.Errorf("checkpoint %d: flushing: %w", cp.ID, err), true
		} else if rt.sink.Err() == nil {
			rt.produce(rt.progressRecord(cp.ID, acks))
		}
	}
	if cp.Err == nil && !rt.failed() && rt.p.hook != nil {
		if err := rt.p.hook(cp); err != nil {
			cp.Err = fmt.Errorf("checkpoint %d: before commit: %w", cp.ID, err)
		}
	}
	if cp.Err != nil || rt.failed() {
		if ctx.Err() != nil || rt.failed() || cp.rebuild {
			// The client is closed next, by shutdown or by the rebuild,
			// which aborts the transaction. Abort would wait for an answer
			// to every record in flight, which a stalled broker never
			// gives; closing the client fails them instead.
		} else if err := rt.sink.Abort(cctx); err != nil {
			cp.rebuild = true
			if cp.Err == nil {
				cp.Err = err
			}
		}
		rt.track.Abort()
		rt.settleStores(false)
		rt.p.stats.aborted.Add(1)
		cp.Duration = time.Since(start)
		rt.sink.AllowRebalance()
		return cp
	}

	if rt.p.fault != nil && cp.Records > 0 {
		rt.p.fault(BeforeCommit, cp)
	}
	// Commit: offsets join the transaction, which commits.
	committed, err := rt.sink.Commit(cctx)
	cp.Commit = time.Since(commitStart)
	cp.Duration = time.Since(start)
	cp.Err = err
	var unknown *txsink.UnknownOutcomeError
	cp.rebuild = errors.As(err, &unknown)
	if !committed {
		rt.track.Abort()
		rt.settleStores(false)
		rt.p.stats.aborted.Add(1)
		if err != nil {
			err = fmt.Errorf("checkpoint %d: %w", cp.ID, err)
			cp.Err = err
		}
		rt.sink.AllowRebalance()
		return cp
	}
	cp.Committed = true
	if fullInterval {
		rt.cadence = deadline
	}
	rt.lastCommit = cp.Commit
	cp.Ranges = rt.track.Commit()
	if rt.purge != nil {
		rt.purge.committed(cp.Ranges)
	}
	if rt.p.fault != nil && cp.Records > 0 {
		rt.p.fault(AfterCommit, cp)
	}
	rt.settleStores(true)
	rt.p.stats.committed.Add(1)
	rt.p.stats.in.Add(int64(cp.Records - cp.Internal))
	rt.p.stats.repartitioned.Add(int64(cp.Internal))
	rt.p.stats.out.Add(cp.Produced)
	if cp.Records > 0 {
		rt.log.Debug("checkpoint committed", "checkpoint", cp.ID, "records", cp.Records, "produced", cp.Produced,
			"duration", cp.Duration, "commit", cp.Commit, "barrier", cp.Barrier)
	}
	// Only now may a waiting rebalance take partitions away: nothing is
	// in flight.
	rt.sink.AllowRebalance()
	return cp
}

// nextDeadline returns when a checkpoint beginning at start stops reading,
// given when the last one did (cadence; zero if it did not read for its
// whole interval or did not commit) and how long its commit took
// (lastCommit; zero if it did not commit).
//
// Checkpoints keep the interval's cadence: the one that begins as its
// predecessor's commit ends reads for the rest of the interval, not a whole
// one more. A record read just after a checkpoint stopped reading then
// waits at most one interval plus one commit to be visible, instead of an
// interval plus two commits. A checkpoint cut short (max_records, an error)
// or an abort starts a new cadence with a whole interval.
//
// But a checkpoint never reads for less time than the last commit took:
// reading stops while a checkpoint commits, and when commits are slow next
// to the interval (a high rate, many partitions, a short interval) they
// would otherwise take most of the time, each one adding its round trips.
// So at most half the time goes to committing; when commits are short, as
// they are below the maximum rate, the cadence is the interval's.
func nextDeadline(cadence, start time.Time, interval, lastCommit time.Duration) time.Time {
	d := start.Add(interval)
	if c := cadence.Add(interval); !cadence.IsZero() && c.After(start) {
		d = c
	}
	if least := start.Add(lastCommit); d.Before(least) {
		d = least
	}
	return d
}

// fetchErr decides which fetch errors end the checkpoint. The client
// retries transient ones itself and reports them only for information.
func (rt *runtime) fetchErr(f kgo.Fetches) error {
	for _, fe := range f.Errors() {
		switch {
		case errors.Is(fe.Err, context.DeadlineExceeded), errors.Is(fe.Err, context.Canceled):
		case errors.Is(fe.Err, kgo.ErrClientClosed):
			return fe.Err
		case txsink.Classify(fe.Err) == txsink.Exit:
			acc := access{cfg: rt.cfg, g: rt.g}
			if fe.Topic == "" {
				// The client's own errors (the group's) come with no topic.
				return fmt.Errorf("consuming: %w", acc.denied(fe.Err))
			}
			return fmt.Errorf("consuming %s/%d: %w", fe.Topic, fe.Partition, acc.deniedTopic(fe.Err, fe.Topic, false))
		default:
			rt.log.Warn("fetch error (retried by the client)", "topic", fe.Topic, "partition", fe.Partition, "err", fe.Err)
		}
	}
	return nil
}

// wholePoll says whether the coordinator may poll all the records the
// client has buffered, size (or as many as the last such poll returned, if
// more): whether they would all be handed out before the checkpoint stops
// reading, left from now, and within max_records. What is polled and not
// handed out is read again. The rate it goes by is the lower of the last
// checkpoint's, lastRate records/s (0: none yet), and this one's so far
// (records in read); with neither it polls in pieces. The first hand-out
// of a checkpoint fills the tasks at once, so its rate alone says little.
func wholePoll(size, records, maxRecords int, read, left time.Duration, lastRate float64) bool {
	if records+size > maxRecords {
		return false
	}
	rate := lastRate
	if records > 0 && read > 0 {
		if now := float64(records) / read.Seconds(); rate == 0 || now < rate {
			rate = now
		}
	}
	if rate <= 0 {
		return false
	}
	return time.Duration(float64(size)/rate*float64(time.Second)) <= left
}
