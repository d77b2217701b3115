package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// brokerFault is a broker outage injected while a pipeline runs.
type brokerFault struct {
	name string
	// inject takes the broker down and returns an error unless it can show
	// the fault fired the way it should (see Broker.Stop and Broker.Kill).
	inject func(ctx context.Context, b Broker) error
	// down is how long the broker stays down: long enough for every client
	// request in flight to fail, short of the transaction time-out.
	down time.Duration
}

const (
	// brokerBackBound is how long a restarted broker may take to answer.
	brokerBackBound = 2 * time.Minute
	// recoverBound is how long the pipeline may take to commit again once
	// its broker is back.
	recoverBound = 2 * time.Minute
)

// The pipeline must ride out its broker going away, cleanly and by a
// crash, with no restart of its own: it keeps running through each outage,
// commits again once the broker is back, drains, and the run is exact.
func TestPipelineRidesOutBrokerRestarts(t *testing.T) {
	requireBinary(t)
	e := newEnv(t)
	if !e.broker.CanRestart() {
		t.Skipf("the %s broker at %s is not the suite's to restart: broker faults need a broker the suite runs (KAFKA_LOCAL=1, Docker, or the embedded broker process)", e.broker.Kind(), e.broker.Addr())
	}
	faults := []brokerFault{
		{"clean broker stop (SIGTERM)", func(ctx context.Context, b Broker) error { return b.Stop(ctx) }, 3 * time.Second},
		{"broker crash (SIGKILL)", func(_ context.Context, b Broker) error { return b.Kill() }, 3 * time.Second},
	}
	if e.broker.Kind() == "kfake-process" {
		// Tolerated kfake difference: a crash of the embedded broker hides
		// the pipeline's output from read_committed for good (the pipeline
		// is always in a transaction, and its producer id survives the
		// crash), so the checker could only fail, on the broker. Real
		// Kafka takes the crash here; TestTransactionOpenAtABrokerCrashIsAborted
		// pins the kfake behaviour.
		t.Logf("no broker crash on kfake: %s", kfakeCrashKeepsTxnOpen)
		faults = faults[:1]
	}
	const partitions, keys = 4, 1_000
	records := 60_000
	if testing.Short() {
		records = 12_000
	}
	CreateTopics(t, e.adm, partitions, e.input, e.output)
	// The default time-outs: a checkpoint open when its broker dies must
	// not wait out checkpoint.timeout once the broker is back.
	c := e.config(partitions)
	c.CheckpointTimeout, c.TxnTimeout = 30*time.Second, time.Minute
	cfgPath := c.Write(t, e.logDir)

	// The input comes in one slice per fault plus one, each released only
	// once the fault before it is over: every fault then finds input still
	// to come, whatever the pipeline's and the broker's speed, and the
	// pipeline has fresh input to show its recovery on.
	slice := records / (len(faults) + 1)
	const rate = 2_000 // a slice takes slice/rate seconds to produce
	input := StartInput(t, e.seeds, InputSpec{Topic: e.input, Records: records, Keys: keys, Rate: rate, Hold: slice})
	t.Logf("%d records over %d keys at %d/s, released in %d slices; %d broker faults", records, keys, rate, len(faults)+1, len(faults))

	start := time.Now()
	p := e.startPipeline(cfgPath)
	for i, f := range faults {
		// Strike while the pipeline is at work on this slice: it has
		// committed a quarter of it, and the rest is still being produced.
		atWork := int64(i*slice + slice/4)
		e.waitCommitted(p, recoverBound, fmt.Sprintf("the pipeline to commit %d records before the %s", atWork, f.name),
			func(c int64, _ map[int32]int64) bool { return c >= atWork }, input)
		before, _, err := e.committed()
		if err != nil {
			t.Fatalf("before the %s: fetching committed offsets: %v", f.name, err)
		}
		acked := input.Acked()

		ctx, cancel := context.WithTimeout(t.Context(), exitBound+10*time.Second)
		err = f.inject(ctx, e.broker)
		cancel()
		if err != nil {
			t.Fatalf("the %s did not happen as it should: %v", f.name, err)
		}
		downAt := time.Now()
		p.sleepOrExit(t.Context(), f.down)
		select {
		case <-p.Exited():
			t.Fatalf("the pipeline exited while its broker was down after the %s:\n%s", f.name, p.Tail(40))
		default:
		}

		startAt := time.Now()
		ctx, cancel = context.WithTimeout(t.Context(), brokerBackBound)
		err = e.broker.Start(ctx)
		cancel()
		if err != nil {
			t.Fatalf("restarting the broker after the %s: %v", f.name, err)
		}
		upAt := time.Now()

		// Committed offsets only grow: short of the input now, they were
		// short of it at the fault, which hit a run with work left.
		var back int64
		e.waitCommitted(p, brokerBackBound, "the restarted broker to answer an offset fetch", func(c int64, _ map[int32]int64) bool {
			back = c
			return true
		})
		if back >= int64(records) {
			t.Fatalf("the %s came after the pipeline had committed all %d records: it did not happen mid-stream", f.name, records)
		}
		input.Release((i + 2) * slice)

		// Anything committed from now on was committed after the restart,
		// by the same pipeline process.
		e.waitCommitted(p, recoverBound, fmt.Sprintf("the pipeline to commit again after the %s", f.name),
			func(c int64, _ map[int32]int64) bool { return c > back }, input)
		// A checkpoint open when the broker went down must not wait out
		// checkpoint.timeout once it is back: the client's group
		// heartbeats stopped with the broker, and ending the transaction
		// waited for them.
		if d := time.Since(upAt); d > c.CheckpointTimeout/2 {
			t.Fatalf("after the %s the pipeline committed again only %v after its broker was back (checkpoint.timeout %v)", f.name, d.Round(time.Millisecond), c.CheckpointTimeout)
		}
		t.Logf("%s %d/%d: %d records acked and %d committed before it, %d committed when the broker was back; down %v, restart took %v; the pipeline (pid %d, never restarted) committed again %v later",
			f.name, i+1, len(faults), acked, before, back, startAt.Sub(downAt).Round(time.Millisecond),
			upAt.Sub(startAt).Round(time.Millisecond), p.Pid(), time.Since(upAt).Round(time.Millisecond))
	}

	input.Wait(t)
	t.Logf("input all acked after %v", time.Since(start).Round(time.Millisecond))
	end := e.inputEnd()
	e.waitCommitted(p, drainBound, "the group's committed offsets to reach the input end", func(_ int64, committed map[int32]int64) bool {
		return offsetsReached(committed, end)
	}, input)
	t.Logf("drained after %v", time.Since(start).Round(time.Millisecond))
	p.Term()

	r := CheckRun(t, e.seeds, CheckSpec{Input: e.input, Output: e.output, Group: e.group, InputRecords: records})
	t.Logf("figures: %d records, %d broker faults, %v, %d client rebuilds logged by the pipeline, %d aborted-transaction records (%d abort, %d commit markers)",
		records, len(faults), time.Since(start).Round(time.Millisecond), countInFile(p.LogPath(), "rebuilding the transactional client"),
		r.AbortedRecords, r.AbortMarkers, r.CommitMarkers)
}

// waitCommitted polls the group's committed offsets on the input (summed,
// and per partition) until done says so, failing the test if p exits
// meanwhile. Fetch errors, as while the broker comes back, are polled
// through. The input's end offsets and, if given, the producer's count go
// into the status a time-out reports: a pipeline with nothing to do and one
// that is stuck look the same from its offsets alone. On a time-out the
// pipeline is sent SIGQUIT first, and the test shows where its goroutines
// were.
func (e *env) waitCommitted(p *Process, bound time.Duration, what string, done func(sum int64, per map[int32]int64) bool, input ...*InputProducer) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), bound)
	defer cancel()
	start := time.Now()
	var status string
	err := poll(ctx, func() (bool, error) {
		select {
		case <-p.Exited():
			e.t.Fatalf("the pipeline exited on its own while waiting for %s:\n%s", what, p.Tail(40))
		default:
		}
		for _, in := range input {
			if err := in.firstErr(); err != nil {
				e.t.Fatalf("the input producer failed while waiting for %s (the pipeline has nothing more to do): %v", what, err)
			}
		}
		c, per, err := e.committed()
		if err != nil {
			status = err.Error()
			return false, nil
		}
		if done(c, per) {
			return true, nil
		}
		status = fmt.Sprintf("committed %v (%d)", sorted(per), c)
		lctx, lcancel := context.WithTimeout(e.t.Context(), 5*time.Second)
		defer lcancel()
		if ends, err := e.adm.ListEndOffsets(lctx, e.input); err == nil {
			end := map[int32]int64{}
			ends.Each(func(o kadm.ListedOffset) { end[o.Partition] = o.Offset })
			status += fmt.Sprintf("; input end %v", sorted(end))
		}
		for _, in := range input {
			status += fmt.Sprintf("; %d input records acked", in.Acked())
		}
		return false, nil
	})
	if err != nil {
		e.t.Fatalf("waiting for %s: gave up after %v: %v; last status: %s\n%s", what, time.Since(start).Round(time.Millisecond), err, status, p.quit())
	}
}

// quit sends SIGQUIT, on which a Go program prints every goroutine's stack
// and exits, and returns the stacks that run the pipeline's own code.
func (p *Process) quit() string {
	if _, err := p.c.signal(syscall.SIGQUIT, 10*time.Second); err != nil {
		return fmt.Sprintf("(no goroutine dump: %v)", err)
	}
	raw, err := os.ReadFile(p.c.log)
	if err != nil {
		return fmt.Sprintf("(no goroutine dump: %v)", err)
	}
	i := bytes.Index(raw, []byte("SIGQUIT"))
	if i < 0 {
		return "(no goroutine dump in the log)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "goroutines of the pipeline (pid %d) running its own code, at SIGQUIT:\n", p.Pid())
	for _, g := range strings.Split(string(raw[i:]), "\n\n") {
		if strings.HasPrefix(g, "goroutine ") && strings.Contains(g, "pipeline-run/pipeline/") {
			b.WriteString(g)
			b.WriteString("\n\n")
		}
	}
	return b.String()
}

// countInFile counts the occurrences of s in a file; a missing file has none.
func countInFile(path, s string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return bytes.Count(b, []byte(s))
}
