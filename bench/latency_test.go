package bench

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pipeline-run/pipeline/broker"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestLatencyWindowOpensAfterTheStartUpBacklog: an arm that stalls after
// its first output (as one still joining its group or cutting its first
// checkpoint does) leaves a backlog of records sent meanwhile. Their wait
// is start-up, not latency: the window opens only once they are visible.
// Before, it opened at the first output and every record sent during the
// stall counted, a tail of up to the stall's length.
func TestLatencyWindowOpensAfterTheStartUpBacklog(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a broker")
	}
	h := latencyHarness(t, "bench-latency-test", 0)

	const stall = time.Second
	var stalledUntil, sentDuring atomic.Int64
	first := true
	a := copyingArm("stall", func(ctx context.Context, cl *kgo.Client, e *env, fs kgo.Fetches) error {
		if first && !fs.Empty() {
			first = false
			if err := cl.Flush(ctx); err != nil {
				return err
			}
			before := endOffsets(cl, e.in)
			time.Sleep(stall)
			sentDuring.Store(endOffsets(cl, e.in) - before)
			stalledUntil.Store(time.Now().UnixMicro())
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l := h.latency(ctx, a, Case{Interval: 100 * time.Millisecond, Size: 100, Partitions: 2}, 2000)
	if l.Err != "" {
		t.Fatal(l.Err)
	}
	if stalledUntil.Load() == 0 || sentDuring.Load() < 100 {
		t.Fatalf("the stall did not leave a backlog: %d records sent during it", sentDuring.Load())
	}
	if l.MeasuredFrom < stalledUntil.Load() {
		t.Errorf("the window opened %v before the arm's stall ended", time.Duration(stalledUntil.Load()-l.MeasuredFrom)*time.Microsecond)
	}
	if l.Measured == 0 {
		t.Error("no output timed")
	}
	t.Logf("stall left %d records behind; window opened %v after it; %d timed, p99 %.0f ms, max %.0f ms",
		sentDuring.Load(), time.Duration(l.MeasuredFrom-stalledUntil.Load())*time.Microsecond, l.Measured, l.P99Ms, l.MaxMs)
}

// endOffsets sums topic's end offsets: how many records it holds.
func endOffsets(cl *kgo.Client, topic string) int64 {
	ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), topic)
	if err != nil {
		return 0
	}
	var n int64
	ends.Each(func(lo kadm.ListedOffset) { n += lo.Offset })
	return n
}

// TestObserverTimesVisibilityNotReading: an output is visible once its
// transaction commits, however long its reader then takes to fetch it.
// Here the reader sleeps a second after each poll, and the transaction
// commits while it sleeps; the latency is still the commit's, from the
// last stable offsets sampled meanwhile.
func TestObserverTimesVisibilityNotReading(t *testing.T) {
	ctx, tx, addrs := gateTopic(t)
	const slow = time.Second
	o, err := newObserver(addrs, "g", nil)
	if err != nil {
		t.Fatal(err)
	}
	var polls atomic.Int64
	o.afterPoll = func() { polls.Add(1); time.Sleep(slow) }
	o.start(ctx)
	defer o.Stop()

	// A first transaction of seq 0 sets the reader to sleep; the second,
	// seqs 1 to n-1, commits while it sleeps.
	const n = 50
	txn := func(sent int64, seqs ...int64) {
		t.Helper()
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, seq := range seqs {
			if err := tx.ProduceSync(ctx, &kgo.Record{Key: Key(nil, seq), Value: Value(nil, seq, sent, 100)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	}
	txn(time.Now().UnixMicro(), 0)
	for polls.Load() == 0 {
		if ctx.Err() != nil {
			t.Fatal("the first output was never polled")
		}
		time.Sleep(time.Millisecond)
	}
	sent := time.Now().UnixMicro()
	seqs := make([]int64, 0, n-1)
	for seq := int64(1); seq < n; seq++ {
		seqs = append(seqs, seq)
	}
	txn(sent, seqs...)
	committed := time.Now().UnixMicro()
	for o.complete.Load() < n {
		if ctx.Err() != nil {
			t.Fatalf("%d of %d outputs seen", o.complete.Load(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	o.Stop()

	lats := o.latencies(sent, n)
	if len(lats) != n-1 {
		t.Fatalf("%d latencies, want %d", len(lats), n-1)
	}
	var lastPolled int64
	for _, at := range o.arrivals {
		lastPolled = max(lastPolled, at)
	}
	if polls.Load() == 0 || lastPolled-committed < (slow/2).Microseconds() {
		t.Fatalf("the reader was not slow: %d polls, last output polled %v after the commit", polls.Load(), time.Duration(lastPolled-committed)*time.Microsecond)
	}
	visible := time.Duration(committed-sent) * time.Microsecond
	for i, l := range lats {
		if seq := i + 1; l > visible+slow/2 {
			t.Errorf("seq %d: latency %v; the commit returned %v after sending, and the reader polled it %v after", seq, l, visible, time.Duration(o.arrivals[seq]-sent)*time.Microsecond)
		}
	}
}

// TestLatencyWindowOpensAfterTheSettlePeriod: once the records sent during
// the arm's start-up are visible, the window opens the settle period later,
// not at once: the arm is still catching up on what arrived meanwhile.
func TestLatencyWindowOpensAfterTheSettlePeriod(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a broker")
	}
	copyArm := copyingArm("copy", nil)
	for _, settle := range []time.Duration{0, 700 * time.Millisecond} {
		h := latencyHarness(t, "bench-settle-test-"+settle.String(), settle)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		l := h.latency(ctx, copyArm, Case{Interval: 100 * time.Millisecond, Size: 100, Partitions: 2}, 2000)
		cancel()
		if l.Err != "" {
			t.Fatal(l.Err)
		}
		if l.DrainedAt == 0 || l.Measured == 0 {
			t.Fatalf("settle %v: drained at %d, %d outputs timed", settle, l.DrainedAt, l.Measured)
		}
		gap := time.Duration(l.MeasuredFrom-l.DrainedAt) * time.Microsecond
		if gap < settle {
			t.Errorf("settle %v: the window opened %v after the start-up backlog was visible", settle, gap)
		}
		t.Logf("settle %v: window opened %v after the backlog was visible; p99 %.0f ms", settle, gap, l.P99Ms)
	}
}

// startTestBroker starts an in-process broker and a client of it, both
// closed when the test ends.
func startTestBroker(t *testing.T) (*broker.Broker, *kgo.Client) {
	t.Helper()
	b, err := broker.Start(broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return b, cl
}

// latencyHarness is a harness for latency runs on a broker of the test's
// own, with the given settle period.
func latencyHarness(t *testing.T, id string, settle time.Duration) *harness {
	b, cl := startTestBroker(t)
	return &harness{
		o:     Options{LatencyFor: 300 * time.Millisecond, LatencySettle: settle, MaxRecords: 1000, Linger: 5 * time.Millisecond, RunTimeout: 30 * time.Second},
		seeds: b.Addrs(), cl: cl, adm: kadm.NewClient(cl), id: id,
		log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// copyingArm copies its input to its output, one fetch at a time; after,
// if not nil, runs once each fetch is handed to the producer (tests stall
// the arm in it).
func copyingArm(name string, after func(ctx context.Context, cl *kgo.Client, e *env, fs kgo.Fetches) error) *Arm {
	return &Arm{Name: name, run: func(ctx context.Context, e *env) error {
		cl, err := kgo.NewClient(e.clientOpts()...)
		if err != nil {
			return err
		}
		defer cl.Close()
		pctx := context.WithoutCancel(ctx)
		for {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				break
			}
			fs.EachRecord(func(r *kgo.Record) {
				cl.Produce(pctx, &kgo.Record{Topic: e.out, Key: r.Key, Value: r.Value}, nil)
			})
			if after != nil {
				if err := after(ctx, cl, e, fs); err != nil {
					return err
				}
			}
		}
		return cl.Flush(pctx)
	}}
}

// TestLatencyWindowWaitsForTheArmToKeepUp: an arm that runs below the rate
// for longer than the settle period after its first output (as a new
// instance's first checkpoints can on a loaded machine) builds a backlog;
// the window opens only once it caught up, not while records wait behind
// that backlog.
func TestLatencyWindowWaitsForTheArmToKeepUp(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a broker")
	}
	const slow = 2500 * time.Millisecond
	var slowEnd atomic.Int64 // Unix microseconds
	var throttled atomic.Int64
	lagging := &Arm{Name: "copy", run: func(ctx context.Context, e *env) error {
		cl, err := kgo.NewClient(e.clientOpts()...)
		if err != nil {
			return err
		}
		defer cl.Close()
		pctx := context.WithoutCancel(ctx)
		var until time.Time
		for {
			// While slow, 5 records every 50 ms: 100 records/s, a
			// twentieth of the rate.
			n := 0
			if time.Now().Before(until) {
				n = 5
			}
			fs := cl.PollRecords(ctx, n)
			if ctx.Err() != nil {
				break
			}
			fs.EachRecord(func(r *kgo.Record) {
				cl.Produce(pctx, &kgo.Record{Topic: e.out, Key: r.Key, Value: r.Value}, nil)
			})
			if until.IsZero() && fs.NumRecords() > 0 {
				if err := cl.Flush(pctx); err != nil {
					return err
				}
				until = time.Now().Add(slow)
				slowEnd.Store(until.UnixMicro())
			}
			if time.Now().Before(until) {
				throttled.Add(1)
				time.Sleep(50 * time.Millisecond)
			}
		}
		return cl.Flush(pctx)
	}}
	h := latencyHarness(t, "bench-keep-up-test", time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l := h.latency(ctx, lagging, Case{Interval: 100 * time.Millisecond, Size: 100, Partitions: 1}, 2000)
	if l.Err != "" {
		t.Fatal(l.Err)
	}
	if throttled.Load() < 10 || slowEnd.Load() == 0 {
		t.Fatalf("the arm was throttled %d times: it never ran below the rate", throttled.Load())
	}
	if l.MeasuredFrom < slowEnd.Load() {
		t.Errorf("the window opened %v before the arm stopped lagging", time.Duration(slowEnd.Load()-l.MeasuredFrom)*time.Microsecond)
	}
	t.Logf("the window opened %v after the slow phase ended; p99 %.0f ms, max %.0f ms",
		time.Duration(l.MeasuredFrom-slowEnd.Load())*time.Microsecond, l.P99Ms, l.MaxMs)
}

// TestLatencyWindowWaitsForInputSentAfterTheBacklog: the input's producer
// stalls too (a loaded machine), from just before the arm's first output
// until after the arm itself stalls, so every record sent before the
// first output is visible at once and nothing newer comes for a while.
// "Every record sent a keep-up period ago is visible" then held for a
// stalled arm, and the window opened inside its stall, which every record
// sent meanwhile waited out. The window must wait for an output of input
// sent after the start-up backlog.
func TestLatencyWindowWaitsForInputSentAfterTheBacklog(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a broker")
	}
	var prod atomic.Pointer[rateProducer]
	h := latencyHarness(t, "bench-latency-held-test", 0)
	h.onRate = func(p *rateProducer) { prod.Store(p) }
	const stall, held = time.Second, 200 * time.Millisecond
	var stalledUntil, heldFor atomic.Int64
	var polled int64
	first := true
	a := copyingArm("stall", func(ctx context.Context, cl *kgo.Client, _ *env, fs kgo.Fetches) error {
		if !first || fs.Empty() {
			return nil
		}
		p := prod.Load()
		p.hold.Store(true)
		if polled += int64(fs.NumRecords()); polled < p.sent.Load() {
			return nil
		}
		// Every record sent so far is out: stall, and let the input
		// flow again a little into the stall.
		first = false
		if err := cl.Flush(ctx); err != nil {
			return err
		}
		start := time.Now()
		time.Sleep(held)
		p.hold.Store(false)
		heldFor.Store(int64(time.Since(start)))
		time.Sleep(stall - held)
		stalledUntil.Store(time.Now().UnixMicro())
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l := h.latency(ctx, a, Case{Interval: 100 * time.Millisecond, Size: 100, Partitions: 2}, 2000)
	if l.Err != "" {
		t.Fatal(l.Err)
	}
	if stalledUntil.Load() == 0 || heldFor.Load() == 0 {
		t.Fatal("the arm never stalled with the input held: the fault did not fire")
	}
	if l.MeasuredFrom < stalledUntil.Load() {
		t.Errorf("the window opened %v before the arm's stall ended", time.Duration(stalledUntil.Load()-l.MeasuredFrom)*time.Microsecond)
	}
	t.Logf("input held %v into the arm's %v stall; window opened %v after it; %d timed, p99 %.0f ms",
		time.Duration(heldFor.Load()).Round(time.Millisecond), stall, time.Duration(l.MeasuredFrom-stalledUntil.Load())*time.Microsecond, l.Measured, l.P99Ms)
}
