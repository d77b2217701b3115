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
	r := ThroughputRun{Arm: a.Name, Size: size, Partitions: parts, Round: round, Records: n, Outputs: exp.Count()}
	if a.PerInterval {
		r.IntervalS = iv.Seconds()
	}
	defer h.cleanup(name, out)
	if err := h.createTopics(ctx, parts, out); err != nil {
		r.Err = err.Error()
		return r
	}
	e := h.env(a, name, in, out, iv, n)
	e.hooks.wantAcks = exp.Count()

	runtime.GC()
	debug.FreeOSMemory()
	rss := startRSS(20 * time.Millisecond)
	cpu0, t0 := cpuTime(), time.Now()
	err := h.runUntilDone(ctx, a, e)
	r.CPUS = (cpuTime() - cpu0).Seconds()
	r.PeakRSS = rss.Stop()
	r.Load1 = loadAvg()
	r.Commits, r.Aborts = e.commits.Load(), e.aborts.Load()
	if first := e.hooks.firstFetch.Load(); first > 0 && err == nil {
		done := e.doneAt.Load()
		last := e.hooks.lastAck.Load()
		if last == 0 || last > done {
			last = done
		}
		r.StartupS = time.Duration(first - t0.UnixNano()).Seconds()
		r.ProcessingS = time.Duration(last - first).Seconds()
		r.VisibleS = time.Duration(done - first).Seconds()
	}
	if err == nil {
		gctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		err = gate(gctx, h.cl, out, exp)
		cancel()
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
	return e
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
