package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The Kafka Streams arms run bench/kstreams, a Kafka Streams application
// with processing.guarantee=exactly_once_v2 and a commit interval equal to
// the checkpoint interval, as its own process (scripts/kstreams.sh run),
// against the same broker, and gate its output like the pipeline's:
//
//	kstreams-pass            stream(in).to(out)
//	kstreams-count           a count per key emitting every update (record cache off), as keyed-count
//	kstreams-count-cached    the same with a 10 MB record cache, as keyed-count-cp (emit: checkpoint)
//	kstreams-windowed-count  tumbling 1 s windows, final results only (suppress), as windowed-count
//	kstreams-table-join      the input joined with itself read as a versioned table, as table-join
//
// They are timed from the first record the application processes (it says
// so on its stdout) to the output of the last input record appearing on the
// output topic (read_uncommitted, as the pipeline arms' last produce
// acknowledgement), or for the cached count, whose outputs are not known in
// advance, to the commit of the last input record's offset. CPU time and
// peak RSS are the JVM's (/proc), over the same span and its whole life.

// kstreamsCache is the record cache of kstreams-count-cached: Kafka
// Streams' default, 10 MB.
const kstreamsCache = 10 << 20

// kstreamsArms are the Kafka Streams arms: the application's job and its
// record cache.
var kstreamsArms = map[string]struct {
	job   string
	cache int64
}{
	"kstreams-pass":           {"pass", 0},
	"kstreams-count":          {"count", 0},
	"kstreams-count-cached":   {"count", kstreamsCache},
	"kstreams-windowed-count": {"windowed-count", 0},
	"kstreams-table-join":     {"table-join", 0},
}

// kstreamsArm returns the Kafka Streams arm name, run by script.
func kstreamsArm(name, script string) *Arm {
	k := kstreamsArms[name]
	a := &Arm{Name: name, PerInterval: true, run: runKStreams(script, k.job, k.cache)}
	switch name {
	case "kstreams-count":
		a.Valid = countIsRight
	case "kstreams-count-cached":
		var g finalCountGate
		a.Gate, a.Outputs = g.check, g.outputs
	case "kstreams-windowed-count":
		g := &windowGate{size: windowMs}
		a.Gate, a.Outputs = g.check, g.outputs
	case "kstreams-table-join":
		// Kafka Streams joins a record when it reads it; the pipeline waits
		// for the watermark to pass its time.
		g := &tableGate{every: true}
		a.Gate, a.Outputs = g.check, g.outputs
	}
	a.NoLatency = "the Kafka Streams arms are measured for throughput only"
	return a
}

// prepareKStreams builds the application (once; it is cached) and says
// why the Kafka Streams arms cannot run, if they cannot: "" when they can.
// It fails on anything but missing prerequisites.
func prepareKStreams(ctx context.Context, script string, stderr io.Writer) (string, error) {
	cmd := exec.CommandContext(ctx, script, "prepare")
	var msg bytes.Buffer
	cmd.Stderr = io.MultiWriter(&msg, stderr)
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return "", nil
	case errors.As(err, &ee) && ee.ExitCode() == 3:
		return strings.TrimSpace(msg.String()), nil
	case errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("the Kafka Streams arms need %s (-kstreams): %w", script, err)
	}
	return "", fmt.Errorf("%s prepare: %w", script, err)
}

// runKStreams runs the application's job until the run is done, then
// stops it with SIGTERM.
func runKStreams(script, job string, cache int64) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error {
		threads := 1
		if parts, err := partitionsOf(ctx, e, e.in); err == nil {
			threads = max(1, min(parts, runtime.NumCPU()))
		}
		stateDir, err := os.MkdirTemp("", "bench-kstreams-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(stateDir)
		cmd := exec.Command(script, "run",
			"--bootstrap", strings.Join(e.seeds, ","), "--job", job, "--in", e.in, "--out", e.out, "--app-id", e.name,
			"--commit-interval-ms", strconv.FormatInt(e.interval.Milliseconds(), 10),
			"--cache-max-bytes", strconv.FormatInt(cache, 10),
			"--threads", strconv.Itoa(threads), "--state-dir", stateDir,
			"--linger-ms", strconv.FormatInt(e.linger.Milliseconds(), 10))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		var stderr tail
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("starting Kafka Streams: %w", err)
		}
		pid := cmd.Process.Pid
		exited := make(chan error, 1)
		var lines sync.WaitGroup
		lines.Add(1)
		var cpuAtFirst atomic.Int64
		go func() {
			defer lines.Done()
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				if len(f) == 2 && f[0] == "first-record" {
					if ns, err := strconv.ParseInt(f[1], 10, 64); err == nil {
						cpuAtFirst.Store(int64(procCPU(pid)))
						e.hooks.firstFetch.CompareAndSwap(0, ns)
					}
				}
			}
		}()
		go func() {
			lines.Wait()
			exited <- cmd.Wait()
		}()

		octx, stopObserving := context.WithCancel(ctx)
		observed := make(chan error, 2)
		go func() { observed <- watchCommitted(octx, e) }()
		if e.hooks.wantAcks > 0 {
			go func() { observed <- watchOutputs(octx, e) }()
		}
		var runErr error
		select {
		case <-ctx.Done():
		case err := <-exited:
			stopObserving()
			return fmt.Errorf("Kafka Streams exited before it was told to (%v): %s", err, stderr.String())
		case err := <-observed:
			runErr = err
		}
		stopObserving()
		e.extCPU = procCPU(pid) - time.Duration(cpuAtFirst.Load())
		e.extRSS = procPeakRSS(pid)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			var ee *exec.ExitError
			// The JVM exits 143 after its shutdown hook has closed the
			// application cleanly (it prints "stopped" first).
			if err != nil && (!errors.As(err, &ee) || ee.ExitCode() != 128+int(syscall.SIGTERM)) {
				return errors.Join(runErr, fmt.Errorf("Kafka Streams: %w: %s", err, stderr.String()))
			}
		case <-time.After(90 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			return errors.Join(runErr, fmt.Errorf("Kafka Streams did not stop within 90 s of SIGTERM: %s", stderr.String()))
		}
		return runErr
	}
}

func partitionsOf(ctx context.Context, e *env, topic string) (int, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.seeds...))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	td, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil {
		return 0, err
	}
	return len(td[topic].Partitions), td[topic].Err
}

// watchCommitted polls the offsets the application's group committed on
// the input (in its transactions) and counts them as input records whose
// outputs are visible, until they reach the input's end or ctx ends.
func watchCommitted(ctx context.Context, e *env) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.seeds...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var seen int64
	for ctx.Err() == nil {
		offs, err := adm.FetchOffsets(ctx, e.name)
		if err == nil {
			var sum int64
			offs.Each(func(o kadm.OffsetResponse) {
				if o.Topic == e.in && o.Err == nil {
					sum += o.At
				}
			})
			if sum > seen {
				e.commit(sum - seen)
				seen = sum
			}
			if e.target > 0 && seen >= e.target {
				return nil
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(25 * time.Millisecond):
		}
	}
	return nil
}

// watchOutputs reads the output read_uncommitted and notes when the last
// expected output was written, as the produce hook does for the arms that
// run in this process.
func watchOutputs(ctx context.Context, e *env) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.seeds...), kgo.ConsumeTopics(e.out),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()), kgo.FetchMaxBytes(50<<20))
	if err != nil {
		return err
	}
	defer cl.Close()
	var n int64
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(*kgo.Record) { n++ })
		if n >= e.hooks.wantAcks {
			e.hooks.lastAck.CompareAndSwap(0, time.Now().UnixNano())
			<-ctx.Done()
		}
	}
	return nil
}

// procCPU returns the CPU time (user and system) process pid has used.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command (in parentheses, which may hold spaces):
	// utime and stime are the 12th and 13th of them, in clock ticks.
	i := bytes.LastIndexByte(b, ')')
	f := bytes.Fields(b[i+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(string(f[11]), 10, 64)
	s, _ := strconv.ParseInt(string(f[12]), 10, 64)
	return time.Duration(u+s) * time.Second / 100 // USER_HZ is 100 on Linux
}

// procPeakRSS returns process pid's peak resident set size (VmHWM).
func procPeakRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// tail keeps the last 4 KB written to it.
type tail struct {
	mu sync.Mutex
	b  []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 4096 {
		t.b = t.b[len(t.b)-4096:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}
