// Package bench measures the pipeline's throughput and latency side by
// side with a plain franz-go copy (the physical limit) and franz-go's own
// exactly-once copy loop (the peer), on the same broker, in the same
// process and the same run, round by round, so that the ratios hold even
// where the absolute numbers are noisy. cmd/bench is its command line;
// docs/benchmarks.md has the method and results.
package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/broker"
	"github.com/pipeline-run/pipeline/pipeline/ops"
)

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
	// onRate, if set, is given each latency run's rate producer (tests).
	onRate func(*rateProducer)
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
	var noKStreams string
	if slices.ContainsFunc(o.Arms, func(a string) bool { _, ok := kstreamsArms[a]; return ok }) {
		if o.Broker == "embedded" {
			noKStreams = "Kafka Streams runs against a real broker only (-broker host:port)"
		} else if noKStreams, err = prepareKStreams(ctx, o.KStreams, stderr); err != nil {
			return err
		}
	}
	h.arms, skipped = arms(o.Arms, ops.NewRegistry(), o.KStreams, noKStreams)
	if o.Latency {
		for _, a := range h.arms {
			if a.NoLatency != "" {
				skipped = append(skipped, a.Name+": no latency runs: "+a.NoLatency)
			}
		}
	}
	h.res = &Results{Broker: h.label, Command: "bench " + strings.Join(os.Args[1:], " "), Machine: machine(), Started: start, Skipped: skipped, Linger: o.Linger.String()}
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

	names := make([]string, len(h.arms))
	for i, a := range h.arms {
		names[i] = a.Name
	}
	fmt.Fprintf(stdout, "records/s relative to the %s arm of the same round (median over rounds), %s:\n\n", baseArm(names), h.label)
	FormatRatios(stdout, names, h.res.Rows)
	included := ""
	if o.Broker == "embedded" {
		included = ", embedded broker included"
	}
	fmt.Fprintf(stdout, "process peak RSS (getrusage, whole process%s): %.0f MB\n\n", included, float64(h.res.ProcessRSS)/1e6)

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
	// The profile comes after the files are written: a sweep's results
	// survive a failed profile run.
	if o.profiling() {
		if err := h.profile(ctx); err != nil {
			return err
		}
	}
	fmt.Fprintf(stderr, "done in %s\n", time.Since(start).Round(time.Second))
	for _, r := range h.res.Rows {
		if r.Failed != "" {
			return ErrFailed
		}
	}
	for _, r := range h.res.Restores {
		if r.Err != "" {
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
	pcl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(h.seeds...), kgo.ClientID("bench-fill")}, tuning(h.o.Linger)...)...)
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
			var r ThroughputRun
			if len(j.arm.variants) > 0 {
				r = h.limit(ctx, j.arm, size, parts, round, in)
			} else {
				r = h.throughput(ctx, j.arm, j.iv, size, parts, round, in)
			}
			h.res.Runs = append(h.res.Runs, r)
			fmt.Fprintf(h.msg, "round %d/%d %d B %dp %-10s %-5s %s\n", round, o.Rounds, size, parts, j.arm.Name, ivName(r.IntervalS), brief(r))
		}
	}

	var restores []RestoreRun
	for round := 1; round <= o.Rounds && o.Restore > 0; round++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		r := h.restore(ctx, int64(o.Restore), size, parts, round)
		restores = append(restores, r)
		fmt.Fprintf(h.msg, "round %d/%d %d B %dp restore of %d keys: %s records/s in %.2f s, %.1f CPU-s %s\n", round, o.Rounds, size, parts, o.Restore, thousands(r.RecordsPerSec()), r.Seconds, r.CPUS, r.Err)
	}
	h.res.Restores = append(h.res.Restores, restores...)

	if o.Latency {
		// Arms with no latency runs (Run said why) do not set the rate.
		var timed []*Arm
		for _, a := range h.arms {
			if a.NoLatency == "" {
				timed = append(timed, a)
			}
		}
		for _, iv := range o.Intervals {
			c := Case{Interval: iv, Size: size, Partitions: parts}
			rate := o.LatencyRate
			if rate == 0 {
				rate = latencyRate(Summary(h.label, timed, c, h.res.Runs, nil))
			}
			if rate == 0 {
				continue
			}
			for _, a := range timed {
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
	FormatRestores(h.out, restores)
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
			FormatRestores(w, slices.DeleteFunc(slices.Clone(res.Restores), func(r RestoreRun) bool { return r.Size != size || r.Partitions != p }))
		}
	}
	names := make([]string, len(as))
	for i, a := range as {
		names[i] = a.Name
	}
	fmt.Fprintf(w, "records/s relative to the %s arm of the same round (median over rounds), %s:\n\n", baseArm(names), res.Broker)
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
	rss, outs := "", ""
	if r.PeakRSS > 0 {
		rss = fmt.Sprintf(", peak RSS %.0f MB", float64(r.PeakRSS)/1e6)
	}
	if r.Outputs != r.Records && r.Outputs > 0 {
		// 0: not known in advance (a count emitted once per checkpoint).
		outs = fmt.Sprintf(" (%s outputs)", thousands(float64(r.Outputs)))
	}
	commits := fmt.Sprintf("%d commits", r.Commits)
	if r.CommitS > 0 {
		commits += fmt.Sprintf(" taking %.2fs", r.CommitS)
	}
	return fmt.Sprintf("%s rec/s, visible after %.2fs, %s, cpu %.2fs%s, load %.1f, gate ok%s",
		thousands(r.RecordsPerSec()), r.VisibleS, commits, r.CPUS, rss, r.Load1, outs)
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
	// Wait until the metadata has every partition with a leader, and the
	// leader answers for it, so that no client starts on a topic the
	// broker is still setting up. The metadata names a leader before the
	// leader takes the partition on: a producer then gets
	// NOT_LEADER_FOR_PARTITION, and franz-go waits for its next metadata
	// refresh, up to 5 s (MetadataMinAge), holding that partition's
	// records. In latency runs that stalled one input partition in a few,
	// and its records counted as seconds of latency.
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
				// ListOffsets is answered by the partition's leader only.
				offs, err := h.adm.ListEndOffsets(cctx, topics...)
				ready = err == nil && offs.Error() == nil
				for _, t := range topics {
					if len(offs[t]) != parts {
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
	// Every internal topic of the run is named after it: the pipeline's
	// progress topic and changelogs, Kafka Streams' changelogs.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if td, err := h.adm.ListTopics(ctx); err == nil {
		for t := range td {
			if strings.HasPrefix(t, name+"-") && !slices.Contains(topics, t) {
				topics = append(topics, t)
			}
		}
	}
	cancel()
	h.deleteTopics(append(topics, pipelineTopics(name)...)...)
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
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

// baseArm is the arm the others are measured against: the limit when it
// ran, else the copy.
func baseArm(arms []string) string {
	if slices.Contains(arms, "limit") {
		return "limit"
	}
	return "copy"
}
