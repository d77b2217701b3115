package bench

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// latency feeds arm a a fresh input at rate records/s and times every
// output a read_committed reader sees. Only records sent in the measuring
// window count: from the moment the arm keeps up with the rate, at least
// the settle period after it caught up with what was sent before its first
// output appeared (the group join, the first checkpoints and the backlog
// they leave are start-up, not latency), until the window ends. The input
// keeps flowing until every one of those is visible, so that the last
// checkpoint is cut as in a steady stream, not held open for want of
// input.
func (h *harness) latency(ctx context.Context, a *Arm, c Case, rate float64) LatencyRun {
	l := LatencyRun{Arm: a.Name, IntervalS: c.Interval.Seconds(), Size: c.Size, Partitions: c.Partitions, Rate: rate}
	if a.NoLatency != "" {
		// group skips such arms: no output of theirs times one input.
		l.Err = fmt.Sprintf("%s has no latency runs: %s", a.Name, a.NoLatency)
		return l
	}
	name := h.name(a.Name + "-lat")
	in, out := name+"-in", name+"-out"
	defer h.cleanup(name, in, out)
	fail := func(err error) LatencyRun {
		l.Err = err.Error()
		return l
	}
	if err := h.createTopics(ctx, c.Partitions, in, out); err != nil {
		return fail(err)
	}
	obs, err := startObserver(ctx, h.seeds, out, a.Keep)
	if err != nil {
		return fail(err)
	}
	defer obs.Stop()
	// The input is sent without lingering: the time an upstream producer
	// holds a record back is its own, not the arm's, and it stamps the
	// record before it does. (-linger is the arms'.)
	pcl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(h.seeds...), kgo.ClientID("bench-rate")}, tuning(0)...)...)
	if err != nil {
		return fail(err)
	}
	defer pcl.Close()

	e := h.env(a, name, in, out, c.Interval, 0)
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- a.run(actx, e) }()
	prod := startRate(actx, pcl, in, rate, c.Size)
	if h.onRate != nil {
		h.onRate(prod)
	}
	stopProducing := func() (int64, error) {
		sctx, scancel := context.WithTimeout(ctx, time.Minute)
		defer scancel()
		return prod.Stop(sctx, pcl)
	}

	// wait polls cond until it holds, the arm stops, or limit passes.
	wait := func(what string, limit time.Duration, cond func() bool) error {
		deadline := time.Now().Add(limit)
		for !cond() {
			select {
			case err := <-errc:
				errc <- err
				if err == nil {
					err = errors.New("stopped")
				}
				return fmt.Errorf("%s: the arm stopped: %w", what, err)
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: not within %s", what, limit)
			}
		}
		return nil
	}
	limit := c.Interval + time.Minute
	if err := wait("waiting for the first output", limit, func() bool { return obs.firstAt.Load() != 0 }); err != nil {
		stopProducing()
		return fail(err)
	}
	// The arm's start-up leaves a backlog: everything sent until its first
	// output appeared. Records sent while it drains that wait behind it,
	// which is start-up, not latency, so the window opens once every
	// record sent before the first output is visible.
	backlog := prod.sent.Load()
	if err := wait("draining the start-up backlog", limit, func() bool { return obs.complete.Load() >= backlog }); err != nil {
		stopProducing()
		return fail(fmt.Errorf("%w (complete up to %d of %d)", err, obs.complete.Load(), backlog))
	}
	// Then it catches up on what arrived while it drained: still
	// start-up, which on a loaded machine can take seconds (a new
	// instance's first checkpoints are slower). The window opens once the
	// settle period is over and the arm keeps up with the rate: every
	// record sent more than keepUp ago is visible, and among them some
	// sent after the drain. (Without that, an input producer that stalled
	// for keepUp, as on a loaded machine, made a stalled arm look as if it
	// kept up: everything it had been sent was visible.)
	drained := time.Now()
	l.DrainedAt = drained.UnixMicro()
	drainedSent := prod.sent.Load()
	settled := drained.Add(h.o.LatencySettle)
	keepUp := c.Interval + 500*time.Millisecond
	var sentAt []sentSample
	keepsUp := func() bool {
		now := time.Now()
		sentAt = append(sentAt, sentSample{now, prod.sent.Load()})
		// The latest sample at least keepUp old, and those after it.
		i := sort.Search(len(sentAt), func(i int) bool { return now.Sub(sentAt[i].at) < keepUp }) - 1
		if i < 0 {
			return false
		}
		sentAt = sentAt[i:]
		return !now.Before(settled) && sentAt[0].sent > drainedSent && obs.complete.Load() >= sentAt[0].sent
	}
	if err := wait("settling", h.o.LatencySettle+time.Minute, keepsUp); err != nil {
		stopProducing()
		return fail(fmt.Errorf("%w: the arm did not keep up with %.0f records/s (records sent %v before were not all visible)", err, rate, keepUp))
	}
	ready := time.Now().UnixMicro()
	l.MeasuredFrom = ready
	window := max(h.o.LatencyFor, 3*c.Interval)
	end := time.Now().Add(window)
	if err := wait("measuring", window+time.Minute, func() bool { return !time.Now().Before(end) }); err != nil {
		stopProducing()
		return fail(err)
	}
	cutoff := prod.sent.Load()
	if err := wait("waiting for the outputs of the window", limit, func() bool { return obs.complete.Load() >= cutoff }); err != nil {
		stopProducing()
		return fail(fmt.Errorf("%w (complete up to %d of %d)", err, obs.complete.Load(), cutoff))
	}
	sent, err := stopProducing()
	l.Sent, l.Achieved = sent, prod.Achieved()
	if err != nil {
		return fail(fmt.Errorf("producing the input: %w", err))
	}
	exp := a.Expect(sent)
	want := exp.Count()
	if err := wait("waiting for the last outputs", limit, func() bool { return obs.distinct.Load() >= want }); err != nil {
		return fail(fmt.Errorf("%w (%d of %d seen)", err, obs.distinct.Load(), want))
	}
	cancel()
	l.Commits, l.Aborts = e.commits.Load(), e.aborts.Load()
	select {
	case err := <-errc:
		if err != nil {
			return fail(fmt.Errorf("stopping: %w", err))
		}
	case <-time.After(time.Minute):
		return fail(errors.New("did not stop within a minute of being told to"))
	}
	obs.Stop()
	if err := obs.err.get(); err != nil {
		return fail(fmt.Errorf("reading the output: %w", err))
	}
	lat := Summarize(obs.latencies(ready, cutoff))
	l.Measured = lat.Samples
	l.P50Ms, l.P99Ms, l.MaxMs = ms(lat.P50), ms(lat.P99), ms(lat.Max)
	gctx, gcancel := context.WithTimeout(ctx, 5*time.Minute)
	defer gcancel()
	if err := gate(gctx, h.cl, out, exp); err != nil {
		return fail(err)
	}
	if lat.Samples == 0 {
		return fail(errors.New("no output to time"))
	}
	return l
}

// sentSample is how many records the rate producer had sent at a time.
type sentSample struct {
	at   time.Time
	sent int64
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
