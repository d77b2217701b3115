package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/pipeline/ops"
)

// profile runs each profiled arm once more, on a backlog of its own, with
// the CPU profiler, the execution tracer or both on from the arm's start
// until its last output is visible, and the allocation profile written
// just before and just after.
func (h *harness) profile(ctx context.Context) error {
	o := h.o
	as, _ := arms(o.ProfileArms, ops.NewRegistry(), o.KStreams, "the profiler sees this process only")
	if len(as) == 0 {
		return usageErrorf("-profile-arm: none of %v can run", o.ProfileArms)
	}
	size, parts := o.Sizes[0], o.Partitions[0]
	in := h.name("profile-in")
	if err := h.createTopics(ctx, parts, in); err != nil {
		return err
	}
	defer h.deleteTopics(in)
	pcl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(h.seeds...), kgo.ClientID("bench-fill")}, tuning(h.o.Linger)...)...)
	if err != nil {
		return err
	}
	err = prefill(ctx, pcl, in, int64(o.ProfileRecords), size)
	pcl.Close()
	if err != nil {
		return err
	}
	saved := h.o.Records
	h.o.Records = o.ProfileRecords
	defer func() { h.o.Records = saved }()
	for _, a := range as {
		// An arm with its own gate reads the input back for its expected
		// outputs: now, before the profiler starts (it keeps the answer).
		if _, err := h.outputs(ctx, a, in, a.Expect(int64(o.ProfileRecords))); err != nil {
			return err
		}
		var cpu, tr, memBase, mem bytes.Buffer
		if o.MemProfile != "" {
			if err := allocs(&memBase); err != nil {
				return err
			}
		}
		if o.CPUProfile != "" {
			if err := pprof.StartCPUProfile(&cpu); err != nil {
				return err
			}
		}
		if o.Trace != "" {
			if err := trace.Start(&tr); err != nil {
				pprof.StopCPUProfile()
				return err
			}
		}
		r := h.throughputProfiled(ctx, a, o.ProfileInterval, size, parts, in, &mem)
		var wrote []string
		memBasePath := ""
		if o.MemProfile != "" {
			memBasePath = o.MemProfile + ".base"
		}
		for _, f := range []struct {
			path string
			buf  *bytes.Buffer
		}{{o.CPUProfile, &cpu}, {o.MemProfile, &mem}, {memBasePath, &memBase}, {o.Trace, &tr}} {
			if f.path == "" {
				continue
			}
			path := f.path
			if len(as) > 1 {
				path = armPath(path, a.Name)
			}
			if err := os.WriteFile(path, f.buf.Bytes(), 0o644); err != nil {
				return err
			}
			wrote = append(wrote, path)
		}
		fmt.Fprintf(h.out, "profile of %s (%s checkpoint, %d B, %d partition%s, %d records): %s; %s\n\n",
			a.Name, o.ProfileInterval, size, parts, plural(parts), o.ProfileRecords, strings.Join(wrote, ", "), brief(r))
	}
	return nil
}

// armPath returns path with -arm before its extension (before both of a
// base profile's, as in prof-ARM.out.base).
func armPath(path, arm string) string {
	base := ""
	if strings.HasSuffix(path, ".base") {
		path, base = strings.TrimSuffix(path, ".base"), ".base"
	}
	ext := filepath.Ext(path)
	return strings.TrimSuffix(path, ext) + "-" + arm + ext + base
}

// allocs writes the allocation profile, as of a collection run now so that
// it counts every allocation so far.
func allocs(w io.Writer) error {
	runtime.GC()
	return pprof.Lookup("allocs").WriteTo(w, 0)
}

// stopProfiling stops the CPU profiler and the tracer, whichever run.
func stopProfiling() {
	pprof.StopCPUProfile()
	trace.Stop()
}

// throughputProfiled is throughput with the profiler stopped as soon as
// the arm is done, before the gate reads the output back.
//
// With mem set, it writes the allocation profile to it once the arm is
// done.
func (h *harness) throughputProfiled(ctx context.Context, a *Arm, iv time.Duration, size, parts int, in string, mem io.Writer) ThroughputRun {
	n := int64(h.o.Records)
	name := h.name(a.Name)
	out := name + "-out"
	exp := a.Expect(n)
	r := ThroughputRun{Arm: a.Name, Size: size, Partitions: parts, Records: n, IntervalS: iv.Seconds()}
	defer h.cleanup(name, out)
	var err error
	if r.Outputs, err = h.outputs(ctx, a, in, exp); err != nil {
		stopProfiling()
		r.Err = err.Error()
		return r
	}
	if err := h.createTopics(ctx, parts, out); err != nil {
		stopProfiling()
		r.Err = err.Error()
		return r
	}
	e := h.env(a, name, in, out, iv, n)
	e.hooks.wantAcks = r.Outputs
	cpu0 := cpuTime()
	err = h.runUntilDone(ctx, a, e)
	stopProfiling()
	r.CPUS, r.Load1 = (cpuTime() - cpu0).Seconds(), loadAvg()
	if h.o.MemProfile != "" {
		if perr := allocs(mem); perr != nil && err == nil {
			err = perr
		}
	}
	if first := e.hooks.firstFetch.Load(); first > 0 && err == nil {
		r.ProcessingS = time.Duration(e.processedAt() - first).Seconds()
		r.VisibleS = time.Duration(e.doneAt.Load() - first).Seconds()
	}
	r.Commits = e.commits.Load()
	if err == nil {
		err = h.check(ctx, a, in, out, exp)
	}
	if err != nil {
		r.Err = err.Error()
	}
	return r
}
