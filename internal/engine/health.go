package engine

import (
	"fmt"
	"sync/atomic"
	"time"
)

// failedForNotReady is how many checkpoints in a row must fail for the
// pipeline to say it is not ready: one abort is routine (a rebalance, a
// transient error), three are an outage.
const failedForNotReady = 3

// Health is what the pipeline says of itself to probes: whether its loop
// is alive (restart the process if not) and whether it is ready (doing its
// work: every task it was given restored, checkpoints committing).
type Health struct {
	Live  bool
	Ready bool
	// Reason says why it is not live or not ready; "" when both.
	Reason string
}

// health is what the run reports for Health.
type health struct {
	state         atomic.Int32 // phase*
	beat          atomic.Int64 // Unix nanoseconds: the loop's last checkpoint end (or start)
	failedInARow  atomic.Int64
	rebuilding    atomic.Bool
	lastErr       atomic.Value // string: the last failed checkpoint's error
	beatTolerance time.Duration
}

const (
	phaseStarting int32 = iota // checks and set-up, before the first checkpoint
	phaseRunning
	phaseStopped
)

// checkpointDone notes a finished checkpoint.
func (h *health) checkpointDone(cp Checkpoint, now time.Time) {
	h.beat.Store(now.UnixNano())
	h.state.CompareAndSwap(phaseStarting, phaseRunning)
	if cp.Committed {
		h.failedInARow.Store(0)
		return
	}
	h.failedInARow.Add(1)
	if cp.Err != nil {
		h.lastErr.Store(cp.Err.Error())
	}
}

// Health reports the pipeline's liveness and readiness as of now.
//
// Live: the process is starting, or its loop finished a checkpoint within
// the tolerance (interval, plus twice checkpoint.timeout, plus 30 s): a loop
// stuck longer than any checkpoint can take is dead. After Run returned it
// is not live.
//
// Ready: running (the start-up checks passed and a first checkpoint
// finished), no task restoring its state, the client not being rebuilt, and
// fewer than three checkpoints in a row failed.
func (p *Pipeline) Health(now time.Time) Health {
	h := &p.health
	switch h.state.Load() {
	case phaseStopped:
		return Health{Reason: "stopped"}
	case phaseStarting:
		return Health{Live: true, Reason: "starting: checking the cluster and joining the group"}
	}
	if since := now.Sub(time.Unix(0, h.beat.Load())); since > h.beatTolerance {
		return Health{Reason: fmt.Sprintf("no checkpoint finished for %s (more than %s)", since.Round(time.Second), h.beatTolerance)}
	}
	switch {
	case h.rebuilding.Load():
		return Health{Live: true, Reason: "rebuilding the Kafka client after an unknown transaction outcome or a fence"}
	case p.stats.restoring.Load() > 0:
		return Health{Live: true, Reason: fmt.Sprintf("%d tasks restoring their state", p.stats.restoring.Load())}
	case h.failedInARow.Load() >= failedForNotReady:
		err, _ := h.lastErr.Load().(string)
		return Health{Live: true, Reason: fmt.Sprintf("the last %d checkpoints failed (last: %s)", h.failedInARow.Load(), err)}
	}
	return Health{Live: true, Ready: true}
}
