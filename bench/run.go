// Package bench measures the pipeline's throughput and latency side by
// side with a plain franz-go copy (the physical limit) and franz-go's own
// exactly-once copy loop (the peer), on the same broker, in the same
// process and the same run, round by round, so that the ratios hold even
// where the absolute numbers are noisy. cmd/bench is its command line;
// docs/benchmarks.md has the method and results.
package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/pipeline-run/pipeline/broker"
	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrFailed reports that at least one arm failed its correctness gate or
// did not finish; the tables say which.
var ErrFailed = errors.New("some arms FAILED")

// Machine describes where the benchmark ran.
type Machine struct {
	CPUs       int     `json:"cpus"`
	GOMAXPROCS int     `json:"gomaxprocs"`
	CPUModel   string  `json:"cpu_model"`
	Memory     string  `json:"memory"`
	Go         string  `json:"go"`
	OS         string  `json:"os"`
	Load1      float64 `json:"load1"` // the 1-minute load average when the run started
}

func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), Go: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH, Load1: loadAvg()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				var kb int64
				fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
				m.Memory = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
			}
		}
	}
	return m
}

// harness runs the sweep on one broker.
type harness struct {
	o     Options
	seeds []string
	label string
	cl    *kgo.Client // admin and read-back client
	adm   *kadm.Client
	arms  []*Arm
	id    string // prefix of every topic, group and transactional id
	n     int    // runs so far, for unique names
	log   *slog.Logger
	out   io.Writer // tables
	msg   io.Writer // progress
	res   *Results
}

// Run runs the benchmark o describes, printing tables to stdout and
// progress to stderr. It returns ErrFailed (after printing everything) if
// any arm failed, and ctx's error if it was cancelled.
func Run(ctx context.Context, o Options, stdout, stderr io.Writer) error {
	if len(o.Report) > 0 {
		return report(o, stdout, stderr)
	}
	start := time.Now()
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: o.LogLevel}))
	h := &harness{o: o, log: log, out: stdout, msg: stderr, id: "bench-" + newRunID()}

	h.label = o.Label
	if o.Broker == "embedded" {
		b, err := broker.Start(broker.Options{Logger: log})
		if err != nil {
			return err
		}
		defer b.Close()
		h.seeds = b.Addrs()
		if h.label == "" {
			h.label = "embedded"
		}
	} else {
		h.seeds = strings.Split(o.Broker, ",")
		if h.label == "" {
			h.label = "kafka"
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.seeds...), kgo.ClientID("bench-admin"))
	if err != nil {
		return err
	}
	defer cl.Close()
	h.cl, h.adm = cl, kadm.NewClient(cl)
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = h.adm.BrokerMetadata(pctx)
	cancel()
	if err != nil {
		return fmt.Errorf("broker %s does not answer: %w", strings.Join(h.seeds, ","), err)
	}

	var skipped []string
	h.arms, skipped = arms(o.Arms, pipeline.NewRegistry())
	h.res = &Results{Broker: h.label, Command: "go run ./cmd/bench " + strings.Join(os.Args[1:], " "), Machine: machine(), Started: start, Skipped: skipped}
	m := h.res.Machine
	fmt.Fprintf(stdout, "broker: %s (%s); %d CPUs (GOMAXPROCS %d), %s, %s; %s %s; load average %.2f\n", h.label, strings.Join(h.seeds, ","), m.CPUs, m.GOMAXPROCS, m.Memory, m.CPUModel, m.Go, m.OS, m.Load1)
	fmt.Fprintf(stdout, "backlog %d records per run, %d rounds; sizes %v B, partitions %v, intervals %v\n", o.Records, o.Rounds, o.Sizes, o.Partitions, o.Intervals)
	for _, s := range skipped {
		fmt.Fprintln(stdout, s)
	}
	fmt.Fprintln(stdout)

	warm := o.Warmup
	for _, size := range o.Sizes {
		for _, parts := range o.Partitions {
			if err := h.group(ctx, size, parts, warm); err != nil {
				return err
			}
			warm = false
		}
	}
	h.res.ProcessRSS = maxRSS()

	fmt.Fprintf(stdout, "records/s relative to the copy arm of the same round (median over rounds), %s:\n\n", h.label)
	names := make([]string, len(h.arms))
	for i, a := range h.arms {
		names[i] = a.Name
	}
	FormatRatios(stdout, names, h.res.Rows)
	fmt.Fprintf(stdout, "process peak RSS (getrusage, whole process%s): %.0f MB\n\n", map[bool]string{true: ", embedded broker included", false: ""}[o.Broker == "embedded"], float64(h.res.ProcessRSS)/1e6)

	if o.CPUProfile != "" {
		if err := h.profile(ctx); err != nil {
			return err
		}
	}
	h.res.Took = time.Since(start).Round(time.Second).String()
	if o.JSON != "" {
		if err := WriteJSON(o.JSON, h.res); err != nil {
			return err
		}
	}
	if o.CSV != "" {
		if err := WriteCSV(o.CSV, h.res.Rows); err != nil {
			return err
		}
	}
	if o.Plot != "" {
		if err := WritePlot(o.Plot, []*Results{h.res}); err != nil {
			return err
		}
	}
	fmt.Fprintf(stderr, "done in %s\n", h.res.Took)
	for _, r := range h.res.Rows {
		if r.Failed != "" {
			return ErrFailed
		}
	}
	return nil
}

// group runs every round and the latency runs of one record size and
// partition count over one backlog, then prints its tables.
func (h *harness) group(ctx context.Context, size, parts int, warm bool) error {
	o := h.o
	in := h.name("in")
	if err := h.createTopics(ctx, parts, in); err != nil {
		return err
	}
	defer h.deleteTopics(in)
	fmt.Fprintf(h.msg, "filling %s with %d records of %d B in %d partitions\n", in, o.Records, size, parts)
	pcl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(h.seeds...), kgo.ClientID("bench-fill")}, tuning()...)...)
	if err != nil {
		return err
	}
	err = prefill(ctx, pcl, in, int64(o.Records), size)
	pcl.Close()
	if err != nil {
		return err
	}

	type job struct {
		arm *Arm
		iv  time.Duration
	}
	var jobs []job
	for _, a := range h.arms {
		if !a.PerInterval {
			jobs = append(jobs, job{a, 0})
			continue
		}
		for _, iv := range o.Intervals {
			jobs = append(jobs, job{a, iv})
		}
	}
	if warm {
		// The first runs on a fresh broker (a cold JVM, empty caches) are
		// slow: one unrecorded run of each arm first.
		for _, a := range h.arms {
			r := h.throughput(ctx, a, o.Intervals[0], size, parts, 0, in)
			fmt.Fprintf(h.msg, "warm-up %-10s %s\n", a.Name, brief(r))
		}
	}
	for round := 1; round <= o.Rounds; round++ {
		// Rotate the order every round, so no arm always goes first.
		k := (round - 1) % len(jobs)
		order := append(append([]job(nil), jobs[k:]...), jobs[:k]...)
		for _, j := range order {
			if err := ctx.Err(); err != nil {
				return err
			}
			r := h.throughput(ctx, j.arm, j.iv, size, parts, round, in)
			h.res.Runs = append(h.res.Runs, r)
			fmt.Fprintf(h.msg, "round %d/%d %d B %dp %-10s %-5s %s\n", round, o.Rounds, size, parts, j.arm.Name, ivName(r.IntervalS), brief(r))
		}
	}

	if o.Latency {
		for _, iv := range o.Intervals {
			c := Case{Interval: iv, Size: size, Partitions: parts}
			rate := latencyRate(Summary(h.label, h.arms, c, h.res.Runs, nil))
			if rate == 0 {
				continue
			}
			for _, a := range h.arms {
				if err := ctx.Err(); err != nil {
					return err
				}
				l := h.latency(ctx, a, c, rate)
				h.res.Latencies = append(h.res.Latencies, l)
				fmt.Fprintf(h.msg, "latency %d B %dp %-10s %-5s at %s/s (sent %s/s, %d commits): p50 %s p99 %s max %s ms, load %.1f %s\n", size, parts, a.Name, iv,
					thousands(l.Rate), thousands(l.Achieved), l.Commits, fmtMs(l.P50Ms), fmtMs(l.P99Ms), fmtMs(l.MaxMs), loadAvg(), l.Err)
			}
		}
	}

	h.res.Rows = append(h.res.Rows, printGroup(h.out, h.label, h.arms, size, parts, o.Intervals, o.Records, o.Rounds, h.res)...)
	return nil
}

// printGroup prints the table of every interval of one record size and
// partition count, and returns their rows.
func printGroup(w io.Writer, label string, as []*Arm, size, parts int, intervals []time.Duration, records, rounds int, res *Results) []Row {
	var all []Row
	for _, iv := range intervals {
		c := Case{Interval: iv, Size: size, Partitions: parts}
		rows := Summary(label, as, c, res.Runs, res.Latencies)
		all = append(all, rows...)
		heading := fmt.Sprintf("#### %s, %s: %d records, %d rounds", label, c, records, rounds)
		for _, r := range rows {
			if r.Latency {
				heading += fmt.Sprintf("; latency at %s records/s", thousands(r.Rate))
				break
			}
		}
		FormatTable(w, heading, rows)
	}
	return all
}

// Report recomputes the summary rows of res from its runs (as this version
// of the tool summarises them) and prints every table and the ratios.
func Report(w io.Writer, res *Results) {
	var as []*Arm
	var sizes, parts []int
	var intervals []time.Duration
	records, rounds := 0, 0
	for _, name := range ArmNames {
		var a *Arm
		for _, r := range res.Runs {
			if r.Arm != name {
				continue
			}
			if a == nil {
				a = &Arm{Name: name}
				as = append(as, a)
			}
			a.PerInterval = a.PerInterval || r.IntervalS != 0
		}
	}
	for _, r := range res.Runs {
		if !slices.Contains(sizes, r.Size) {
			sizes = append(sizes, r.Size)
		}
		if !slices.Contains(parts, r.Partitions) {
			parts = append(parts, r.Partitions)
		}
		if iv := time.Duration(r.IntervalS * float64(time.Second)); r.IntervalS != 0 && !slices.Contains(intervals, iv) {
			intervals = append(intervals, iv)
		}
		records, rounds = max(records, int(r.Records)), max(rounds, r.Round)
	}
	slices.Sort(intervals)
	res.Rows = nil
	for _, size := range sizes {
		for _, p := range parts {
			res.Rows = append(res.Rows, printGroup(w, res.Broker, as, size, p, intervals, records, rounds, res)...)
		}
	}
	names := make([]string, len(as))
	for i, a := range as {
		names[i] = a.Name
	}
	fmt.Fprintf(w, "records/s relative to the copy arm of the same round (median over rounds), %s:\n\n", res.Broker)
	FormatRatios(w, names, res.Rows)
}

func ivName(s float64) string {
	if s == 0 {
		return "-"
	}
	return fmtInterval(time.Duration(s * float64(time.Second)))
}

func brief(r ThroughputRun) string {
	if r.Err != "" {
		return "FAILED: " + r.Err
	}
	return fmt.Sprintf("%s rec/s, visible after %.2fs, %d commits, cpu %.2fs, load %.1f, gate ok", thousands(r.RecordsPerSec()), r.VisibleS, r.Commits, r.CPUS, r.Load1)
}

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

// latency feeds arm a a fresh input at rate records/s and times every
// output a read_committed reader sees. Only records sent in the measuring
// window count: from the first output's appearing (the group join and the
// first checkpoint are start-up, not latency) until the window ends. The
// input keeps flowing until every one of those is visible, so that the
// last checkpoint is cut as in a steady stream, not held open for want of
// input.
func (h *harness) latency(ctx context.Context, a *Arm, c Case, rate float64) LatencyRun {
	l := LatencyRun{Arm: a.Name, IntervalS: c.Interval.Seconds(), Size: c.Size, Partitions: c.Partitions, Rate: rate}
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
	pcl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(h.seeds...), kgo.ClientID("bench-rate")}, tuning()...)...)
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
	ready := obs.firstAt.Load()
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

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// profile runs each profiled arm once more, on a backlog of its own, with
// the CPU profiler on from the arm's start until its last output is
// visible.
func (h *harness) profile(ctx context.Context) error {
	o := h.o
	as, _ := arms(o.ProfileArms, pipeline.NewRegistry())
	if len(as) == 0 {
		return usageErrorf("-profile-arm: none of %v can run", o.ProfileArms)
	}
	size, parts := o.Sizes[0], o.Partitions[0]
	in := h.name("profile-in")
	if err := h.createTopics(ctx, parts, in); err != nil {
		return err
	}
	defer h.deleteTopics(in)
	pcl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(h.seeds...), kgo.ClientID("bench-fill")}, tuning()...)...)
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
		path := o.CPUProfile
		if len(as) > 1 {
			ext := filepath.Ext(path)
			path = strings.TrimSuffix(path, ext) + "-" + a.Name + ext
		}
		var buf bytes.Buffer
		if err := pprof.StartCPUProfile(&buf); err != nil {
			return err
		}
		r := h.throughputProfiled(ctx, a, o.ProfileInterval, size, parts, in)
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(h.out, "CPU profile of %s (%s checkpoint, %d B, %d partition%s, %d records): %s; %s\n\n",
			a.Name, o.ProfileInterval, size, parts, plural(parts), o.ProfileRecords, path, brief(r))
	}
	return nil
}

// throughputProfiled is throughput with the profiler stopped as soon as
// the arm is done, before the gate reads the output back.
func (h *harness) throughputProfiled(ctx context.Context, a *Arm, iv time.Duration, size, parts int, in string) ThroughputRun {
	n := int64(h.o.Records)
	name := h.name(a.Name)
	out := name + "-out"
	exp := a.Expect(n)
	r := ThroughputRun{Arm: a.Name, Size: size, Partitions: parts, Records: n, Outputs: exp.Count(), IntervalS: iv.Seconds()}
	defer h.cleanup(name, out)
	if err := h.createTopics(ctx, parts, out); err != nil {
		pprof.StopCPUProfile()
		r.Err = err.Error()
		return r
	}
	e := h.env(a, name, in, out, iv, n)
	e.hooks.wantAcks = exp.Count()
	cpu0 := cpuTime()
	err := h.runUntilDone(ctx, a, e)
	pprof.StopCPUProfile()
	r.CPUS, r.Load1 = (cpuTime() - cpu0).Seconds(), loadAvg()
	if first := e.hooks.firstFetch.Load(); first > 0 && err == nil {
		last := e.hooks.lastAck.Load()
		if last == 0 {
			last = e.doneAt.Load()
		}
		r.ProcessingS = time.Duration(last - first).Seconds()
		r.VisibleS = time.Duration(e.doneAt.Load() - first).Seconds()
	}
	r.Commits = e.commits.Load()
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

// name returns a fresh name for a run's topics, group and transactional
// id.
func (h *harness) name(what string) string {
	h.n++
	return fmt.Sprintf("%s-%d-%s", h.id, h.n, what)
}

func (h *harness) createTopics(ctx context.Context, parts int, topics ...string) error {
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	resp, err := h.adm.CreateTopics(cctx, int32(parts), -1, nil, topics...)
	if err != nil {
		return fmt.Errorf("creating %v: %w", topics, err)
	}
	if err := resp.Error(); err != nil {
		return fmt.Errorf("creating %v: %w", topics, err)
	}
	// Wait until the metadata has every partition with a leader, so that
	// no client starts on a topic the broker is still setting up.
	for {
		md, err := h.adm.Metadata(cctx, topics...)
		if err == nil {
			ready := true
			for _, t := range topics {
				d, ok := md.Topics[t]
				if !ok || d.Err != nil || len(d.Partitions) != parts {
					ready = false
					break
				}
				for _, p := range d.Partitions {
					if p.Leader < 0 || p.Err != nil {
						ready = false
					}
				}
			}
			if ready {
				return nil
			}
		}
		select {
		case <-cctx.Done():
			return fmt.Errorf("creating %v: not ready: %w", topics, cctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// cleanup deletes what a run made: its topics (the pipeline's progress
// topic included) and its group. The embedded broker keeps everything in
// memory, so this is what keeps its footprint flat over a long sweep.
func (h *harness) cleanup(name string, topics ...string) {
	h.deleteTopics(append(topics, pipelineTopics(name)...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _ = h.adm.DeleteGroups(ctx, name)
}

func (h *harness) deleteTopics(topics ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = h.adm.DeleteTopics(ctx, topics...)
}

func newRunID() string {
	return fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffff)
}

// report reads result files, prints their tables recomputed from their
// runs, and writes the plot, JSON and CSV o asks for.
func report(o Options, stdout, stderr io.Writer) error {
	var all []*Results
	for _, p := range o.Report {
		r, err := ReadJSON(p)
		if err != nil {
			return err
		}
		Report(stdout, r)
		all = append(all, r)
	}
	if o.JSON != "" {
		if len(all) != 1 {
			return usageErrorf("-json with -report takes one result file")
		}
		if err := WriteJSON(o.JSON, all[0]); err != nil {
			return err
		}
	}
	if o.CSV != "" {
		var rows []Row
		for _, r := range all {
			rows = append(rows, r.Rows...)
		}
		if err := WriteCSV(o.CSV, rows); err != nil {
			return err
		}
	}
	if o.Plot != "" {
		if err := WritePlot(o.Plot, all); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote %s\n", o.Plot)
	}
	return nil
}
