package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"time"
)

// throughput runs arm a once over the backlog in topic in, into a fresh
// output topic with a fresh group, and gates the result.
func (h *harness) throughput(ctx context.Context, a *Arm, iv time.Duration, size, parts, round int, in string) ThroughputRun {
	n := int64(h.o.Records)
	name := h.name(a.Name)
	out := name + "-out"
	exp := a.Expect(n)
	r := ThroughputRun{Arm: a.Name, Size: size, Partitions: parts, Round: round, Records: n}
	if a.PerInterval {
		r.IntervalS = iv.Seconds()
	}
	defer h.cleanup(name, out)
	var err error
	if r.Outputs, err = h.outputs(ctx, a, in, exp); err != nil {
		r.Err = err.Error()
		return r
	}
	if err := h.createTopics(ctx, parts, out); err != nil {
		r.Err = err.Error()
		return r
	}
	e := h.env(a, name, in, out, iv, n)
	e.hooks.wantAcks = r.Outputs

	runtime.GC()
	debug.FreeOSMemory()
	rss := startRSS(20 * time.Millisecond)
	cpu0, t0 := cpuTime(), time.Now()
	err = h.runUntilDone(ctx, a, e)
	r.CPUS = (cpuTime() - cpu0).Seconds()
	r.PeakRSS = rss.Stop()
	if e.extCPU > 0 {
		r.CPUS, r.PeakRSS = e.extCPU.Seconds(), e.extRSS
	}
	r.Load1 = loadAvg()
	r.Commits, r.Aborts = e.commits.Load(), e.aborts.Load()
	r.CommitS = time.Duration(e.commitT.Load()).Seconds()
	if first := e.hooks.firstFetch.Load(); first > 0 && err == nil {
		r.StartupS = time.Duration(first - t0.UnixNano()).Seconds()
		r.ProcessingS = time.Duration(e.processedAt() - first).Seconds()
		r.VisibleS = time.Duration(e.doneAt.Load() - first).Seconds()
	}
	if err == nil {
		err = h.check(ctx, a, in, out, exp)
	}
	if err != nil {
		r.Err = err.Error()
	}
	return r
}

func (h *harness) env(a *Arm, name, in, out string, iv time.Duration, target int64) *env {
	e := newEnv(target)
	e.seeds, e.in, e.out, e.name, e.interval, e.maxRecords, e.log = h.seeds, in, out, name, iv, h.o.MaxRecords, h.log
	e.linger = h.o.Linger
	e.hooks = &hooks{in: in, out: out}
	if a.EndAtLastInput && target > 0 {
		e.lastInput = &lastInputHook{topic: in, want: target}
	}
	return e
}

// outputs returns how many outputs arm a must write for the backlog in
// topic in, which exp describes for the seq-gated arms. An arm with its own
// gate reads the input back for it: before the run, so that its last
// output is timed as every arm's is, and outside the run's time.
func (h *harness) outputs(ctx context.Context, a *Arm, in string, exp Expect) (int64, error) {
	if a.Outputs == nil {
		return exp.Count(), nil
	}
	gctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	return a.Outputs(gctx, h.cl, in)
}

// check is the correctness gate of a run of arm a from in to out: the
// arm's own, or the seq-based one against exp.
func (h *harness) check(ctx context.Context, a *Arm, in, out string, exp Expect) error {
	gctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if a.Gate != nil {
		return a.Gate(gctx, h.cl, in, out)
	}
	return gate(gctx, h.cl, out, exp)
}

// runUntilDone runs a until every input record's output is visible, then
// stops it and waits for it to return.
func (h *harness) runUntilDone(ctx context.Context, a *Arm, e *env) error {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- a.run(actx, e) }()
	timer := time.NewTimer(h.o.RunTimeout)
	defer timer.Stop()
	var err error
	select {
	case <-e.done:
	case err = <-errc:
		if err == nil {
			err = errors.New("stopped before every record was copied")
		}
		return err
	case <-timer.C:
		err = fmt.Errorf("not done after %s: %d of %d input records visible", h.o.RunTimeout, e.committed.Load(), e.target)
	case <-ctx.Done():
		err = ctx.Err()
	}
	cancel()
	select {
	case rerr := <-errc:
		if err == nil && rerr != nil {
			err = fmt.Errorf("stopping: %w", rerr)
		}
	case <-time.After(time.Minute):
		if err == nil {
			err = errors.New("did not stop within a minute of being told to")
		}
	}
	return err
}
