package bench

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Options configures a benchmark run. ParseFlags fills it from the command
// line; Validate checks it.
type Options struct {
	Broker          string          // "embedded", or comma-separated host:port seeds
	Label           string          // how results name the broker; default "embedded" or "kafka"
	Records         int             // backlog size, in records
	Sizes           []int           // record (value) sizes, in bytes
	Partitions      []int           // partition counts of the input and output topics
	Intervals       []time.Duration // checkpoint intervals (and the peer's commit cadence)
	Rounds          int             // throughput rounds; arms interleave round by round
	Arms            []string        // arm names, in order
	Warmup          bool            // one unrecorded run of every arm before the first round
	Latency         bool            // also measure latency at a fixed rate
	LatencyFor      time.Duration   // how long each latency run measures (at least 3 intervals)
	LatencyRate     float64         // records/s of the latency runs; 0: half the slowest arm's throughput
	LatencySettle   time.Duration   // how long a latency run goes on after its start-up backlog is visible before it measures
	MaxRecords      int             // checkpoint.max_records, and the peer's records per transaction
	Restore         int             // keys of state each restore run restores; 0: no restore runs
	Linger          time.Duration   // producer linger of every arm (the pipeline's producer.linger)
	RunTimeout      time.Duration   // one arm run's limit
	JSON, CSV       string          // result files; "" for none
	Plot            string          // PNG of throughput against checkpoint interval; "" for none
	Report          []string        // summarise these JSON result files (tables, Plot, JSON, CSV) instead of running
	CPUProfile      string          // write a CPU profile of one extra run of ProfileArm
	RestoreProfile  string          // write a CPU profile of the last restore run of each size and partition count
	Trace           string          // write an execution trace of that run
	MemProfile      string          // write the allocations of that run (and, beside it, a base profile from just before)
	ProfileArms     []string        // the arms to profile, one run each
	ProfileInterval time.Duration   // its checkpoint interval
	ProfileRecords  int             // its backlog
	LogLevel        slog.Level      // of the pipeline's and the broker's logs, to stderr
	KStreams        string          // the script that builds and runs the Kafka Streams arms
}

// ArmNames lists the arms in the order they are reported. keyed-count,
// keyed-count-cp, windowed-count, interval-join and table-join run only when
// the pipeline has their operator; the kstreams-* arms only on a real broker,
// with Java and Maven. The limit, keyed-count-cp, windowed-count, table-join
// and kstreams-* arms have no latency runs.
var ArmNames = []string{"limit", "copy", "copy-rc", "peer", "pass", "filter-map", "keyed-count", "keyed-count-cp", "windowed-count", "interval-join", "table-join",
	"kstreams-pass", "kstreams-count", "kstreams-count-cached", "kstreams-windowed-count", "kstreams-table-join"}

// ParseFlags parses the command line. It returns an error wrapping
// ErrUsage (or flag.ErrHelp) on bad usage; messages and help go to w.
func ParseFlags(args []string, w io.Writer) (Options, error) {
	o := Options{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(w)
	fs.StringVar(&o.Broker, "broker", "embedded", "`embedded` (an in-process broker) or the seed brokers, host:port[,host:port]")
	fs.StringVar(&o.Label, "label", "", "the broker's name in results and the plot (default: embedded or kafka)")
	fs.IntVar(&o.Records, "records", 200000, "records in the backlog each throughput run reads")
	sizes := fs.String("size", "100,1024", "record value sizes in bytes, comma-separated")
	parts := fs.String("partitions", "1,6", "partition counts, comma-separated")
	intervals := fs.String("intervals", "100ms,1s,5s", "checkpoint intervals (the peer commits at the same cadence), comma-separated")
	fs.IntVar(&o.Rounds, "rounds", 5, "throughput rounds; every arm runs once per round")
	arms := fs.String("arms", "all", "arms, comma-separated, or all: "+strings.Join(ArmNames, ", "))
	fs.BoolVar(&o.Warmup, "warmup", true, "run every arm once, unrecorded, before the first round")
	fs.BoolVar(&o.Latency, "latency", true, "after the rounds, measure end-to-end latency of every arm at half the slowest arm's throughput")
	fs.Float64Var(&o.LatencyRate, "latency-rate", 0, "records/s of the latency runs (default: half the slowest arm's throughput in the same configuration)")
	fs.DurationVar(&o.LatencyFor, "latency-duration", 10*time.Second, "how long each latency run measures (at least three checkpoint intervals)")
	fs.DurationVar(&o.LatencySettle, "latency-settle", 2*time.Second, "how long each latency run goes on, once the records sent during the arm's start-up are visible, before it measures (and at least until the arm keeps up with the rate): the arm catches up on what arrived meanwhile")
	fs.IntVar(&o.MaxRecords, "max-records", 1000000, "checkpoint.max_records of the pipeline arms; the peer commits after as many records")
	fs.IntVar(&o.Restore, "restore", 0, "after the throughput rounds of each size and partition count, time a fresh instance restoring this many keys of state (one changelog record of about the record size each) once per round; 0: no restore runs")
	fs.DurationVar(&o.Linger, "linger", 50*time.Millisecond, "producer linger of every arm: the pipeline's producer.linger, and the baselines' (default: the pipeline's default)")
	fs.DurationVar(&o.RunTimeout, "run-timeout", 5*time.Minute, "limit of one arm run")
	fs.StringVar(&o.JSON, "json", "", "write every run and the summary as JSON to `file`")
	fs.StringVar(&o.CSV, "csv", "", "write the summary rows as CSV to `file`")
	fs.StringVar(&o.Plot, "plot", "", "draw throughput against checkpoint interval to `file` (PNG)")
	reportFiles := fs.String("report", "", "instead of running, print the tables of these JSON result files (comma-separated), recomputed from their runs, and write -plot, -csv and -json (one file) from them")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "after the sweep, profile one more throughput run of -profile-arm and write the CPU profile to `file`")
	fs.StringVar(&o.RestoreProfile, "restore-cpuprofile", "", "write a CPU profile of the last restore round of each record size and partition count (from the restoring instance's start to its last record restored) to `file`, with -SIZE-Pp before its extension")
	fs.StringVar(&o.Trace, "trace", "", "after the sweep, write an execution trace (go tool trace) of one more throughput run of -profile-arm to `file`; with -cpuprofile, of the same run")
	fs.StringVar(&o.MemProfile, "memprofile", "", "after the sweep, write the allocation profile of one more throughput run of -profile-arm to `file`, and one taken just before the run to file.base: go tool pprof -sample_index=alloc_space -base file.base file shows the run's allocations")
	profArms := fs.String("profile-arm", "pass", "the arms -cpuprofile, -memprofile and -trace profile, comma-separated; with several, each profile's file name gets -ARM before its extension")
	fs.DurationVar(&o.ProfileInterval, "profile-interval", time.Second, "checkpoint interval of the profiled run")
	fs.IntVar(&o.ProfileRecords, "profile-records", 1000000, "backlog of the profiled run")
	fs.StringVar(&o.KStreams, "kstreams", "scripts/kstreams.sh", "the `script` that builds and runs the Kafka Streams application of the kstreams-* arms (Java 17 and Maven)")
	logLevel := fs.String("log-level", "error", "level of the pipeline's and the broker's logs on stderr: debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return o, err
		}
		return o, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return o, usageErrorf("unexpected argument %q", fs.Arg(0))
	}
	var err error
	if o.Sizes, err = parseInts("-size", *sizes); err != nil {
		return o, err
	}
	if o.Partitions, err = parseInts("-partitions", *parts); err != nil {
		return o, err
	}
	if o.Intervals, err = parseDurations("-intervals", *intervals); err != nil {
		return o, err
	}
	if o.Arms, err = parseArms(*arms); err != nil {
		return o, err
	}
	if o.ProfileArms, err = parseArms(*profArms); err != nil {
		return o, err
	}
	if o.Restore < 0 {
		return o, usageErrorf("-restore must not be negative")
	}
	if err := o.LogLevel.UnmarshalText([]byte(*logLevel)); err != nil {
		return o, usageErrorf("-log-level: %q is not debug, info, warn or error", *logLevel)
	}
	if *reportFiles != "" {
		o.Report = strings.Split(*reportFiles, ",")
	}
	return o, o.Validate()
}

// Validate checks o; errors wrap ErrUsage.
func (o *Options) Validate() error {
	if len(o.Report) > 0 {
		return nil
	}
	switch {
	case o.Broker == "":
		return usageErrorf("-broker: empty")
	case o.Records < 1:
		return usageErrorf("-records must be at least 1")
	case o.Rounds < 1:
		return usageErrorf("-rounds must be at least 1")
	case o.MaxRecords < 1:
		return usageErrorf("-max-records must be at least 1")
	case o.Linger < 0:
		return usageErrorf("-linger must not be negative")
	case o.RunTimeout <= 0:
		return usageErrorf("-run-timeout must be positive")
	case o.LatencyFor <= 0:
		return usageErrorf("-latency-duration must be positive")
	case o.LatencySettle < 0:
		return usageErrorf("-latency-settle must not be negative")
	case o.LatencyRate < 0 || math.IsNaN(o.LatencyRate) || math.IsInf(o.LatencyRate, 0):
		return usageErrorf("-latency-rate must be a positive number of records/s, or 0 for half the slowest arm's")
	case o.profiling() && (o.ProfileRecords < 1 || o.ProfileInterval <= 0):
		return usageErrorf("-profile-records and -profile-interval must be positive")
	}
	for _, s := range o.Sizes {
		if s < 60 {
			return usageErrorf("-size %d: records must be at least 60 bytes to hold the seq and the timestamp", s)
		}
	}
	for _, p := range o.Partitions {
		if p < 1 {
			return usageErrorf("-partitions %d: must be at least 1", p)
		}
	}
	for _, d := range o.Intervals {
		if d <= 0 {
			return usageErrorf("-intervals %s: must be positive", d)
		}
	}
	return nil
}

func parseInts(name, s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, usageErrorf("%s: %q is not a whole number", name, f)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseDurations(name, s string) ([]time.Duration, error) {
	var out []time.Duration
	for f := range strings.SplitSeq(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil {
			return nil, usageErrorf("%s: %q is not a duration (like 100ms or 1s)", name, f)
		}
		out = append(out, d)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func parseArms(s string) ([]string, error) {
	if strings.TrimSpace(s) == "all" {
		return slices.Clone(ArmNames), nil
	}
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(ArmNames, f) {
			return nil, usageErrorf("-arms: unknown arm %q (known: %s)", f, strings.Join(ArmNames, ", "))
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	// Reported in the fixed order, whatever order they were named in.
	slices.SortFunc(out, func(a, b string) int { return slices.Index(ArmNames, a) - slices.Index(ArmNames, b) })
	return out, nil
}

// profiling reports whether the sweep ends with a profiled run.
func (o *Options) profiling() bool { return o.CPUProfile != "" || o.MemProfile != "" || o.Trace != "" }
