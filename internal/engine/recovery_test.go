package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pipeline-run/pipeline/internal/testkit"
	"github.com/pipeline-run/pipeline/txsink"
)

// syncBuffer is a log destination tests read while the pipeline writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) count(substr string) int { return strings.Count(s.String(), substr) }

func bufferLogger(b *syncBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestATransactionTimeoutTheBrokersRefuseStopsThePipeline has the broker
// refuse the transactional producer's time-out (INVALID_TRANSACTION_TIMEOUT)
// although the start-up check passed, as a broker the check cannot read
// does. The client then refuses to begin any transaction; the pipeline used
// to retry at once, for ever, logging every attempt and counting none. It
// must stop with the setting named, having counted what it aborted.
func TestATransactionTimeoutTheBrokersRefuseStopsThePipeline(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("in", 1)
	var refused atomic.Int64
	k.Cluster.ControlKey(int16(kmsg.InitProducerID), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		k.Cluster.KeepControl()
		if kreq.(*kmsg.InitProducerIDRequest).TransactionalID == nil {
			return nil, nil, false
		}
		refused.Add(1)
		resp := kreq.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode = kerr.InvalidTransactionTimeout.Code
		return resp, nil, true
	})
	k.Input("in", 100, 10, nil)
	var logs syncBuffer
	cfg := parseConfig(t, passThrough)
	p, err := New(cfg, nil, WithLogger(bufferLogger(&logs)), WithSeedBrokers(k.Addr))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()

	var runErr error
	select {
	case runErr = <-done:
	case <-time.After(30 * time.Second):
		cancel()
		<-done
		t.Fatalf("the pipeline did not stop within 30 s of the refused transaction; it logged %d aborted checkpoints:\n%s", logs.count("checkpoint"), logs.String())
	}
	if runErr == nil || !errors.Is(runErr, kerr.InvalidTransactionTimeout) ||
		!strings.Contains(runErr.Error(), "transactions.timeout (20s)") || !strings.Contains(runErr.Error(), "transaction.max.timeout.ms") {
		t.Fatalf("Run returned %v; want INVALID_TRANSACTION_TIMEOUT naming transactions.timeout and transaction.max.timeout.ms", runErr)
	}
	if refused.Load() == 0 {
		t.Fatal("the broker refused no InitProducerID: the fault did not fire")
	}
	if got := p.Stats().Aborted; got < 1 {
		t.Fatalf("%d checkpoints counted as aborted, want at least the refused one", got)
	}
	if n := logs.count("checkpoint aborted") + logs.count("checkpoint failed"); n > 5 {
		t.Fatalf("%d lines about failed checkpoints before stopping; the log:\n%s", n, logs.String())
	}
	if got := k.ReadAll("out"); len(got) != 0 {
		t.Fatalf("%d outputs visible", len(got))
	}
}

// TestATwinsGroupFenceStopsThePipelineAtOnce joins the pipeline's group
// with a plain consumer that uses the pipeline's instance_id, as a twin
// started with the same configuration would before its first transaction.
// The broker fences the pipeline's membership (FENCED_INSTANCE_ID): that
// alone is proof of a twin, and the pipeline must stop at once, without
// waiting to be fenced as a producer too.
func TestATwinsGroupFenceStopsThePipelineAtOnce(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("in", 2)
	k.Input("in", 200, 10, nil)
	var logs syncBuffer
	cfg := parseConfig(t, passThrough)
	p, err := New(cfg, nil, WithLogger(bufferLogger(&logs)), WithSeedBrokers(k.Addr))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	if err := k.WaitCommitted(wctx, "t", "in"); err != nil {
		t.Fatal(err)
	}
	wcancel()

	assigned := make(chan struct{})
	var once sync.Once
	twin, err := kgo.NewClient(kgo.SeedBrokers(k.Addr), kgo.ConsumerGroup("t"), kgo.ConsumeTopics("in"),
		kgo.InstanceID("i1"), kgo.SessionTimeout(6*time.Second), kgo.Balancers(kgo.RangeBalancer()),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) { once.Do(func() { close(assigned) }) }))
	if err != nil {
		t.Fatal(err)
	}
	defer twin.Close()
	tctx, tcancel := context.WithCancel(ctx)
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for tctx.Err() == nil {
			twin.PollFetches(tctx) // joins the group
		}
	}()
	defer func() { tcancel(); <-polled }()
	select {
	case <-assigned:
	case <-time.After(20 * time.Second):
		t.Fatal("the twin was not given partitions within 20 s")
	}
	joined := time.Now()

	var runErr error
	select {
	case runErr = <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("the pipeline did not stop within 20 s of the twin joining; log:\n%s", logs.String())
	}
	if !errors.Is(runErr, ErrZombie) || !errors.Is(runErr, kerr.FencedInstanceID) || !strings.Contains(runErr.Error(), `instance_id "i1"`) {
		t.Fatalf("Run returned %v; want ErrZombie from FENCED_INSTANCE_ID naming the instance_id", runErr)
	}
	if n := logs.count("PRODUCER_FENCED") + logs.count("INVALID_PRODUCER_EPOCH"); n > 0 {
		t.Fatalf("the pipeline saw %d producer fences, but nothing fenced its producer", n)
	}
	t.Logf("stopped %v after the twin joined: %v", time.Since(joined).Round(time.Millisecond), runErr)
}

func TestRecoveryDecides(t *testing.T) {
	cfg := parseConfig(t, passThrough) // transactions.timeout 20s
	t0 := time.Unix(1_000_000, 0)
	fenced := &txsink.UnknownOutcomeError{Err: kerr.ProducerFenced}
	type step struct {
		cp   Checkpoint
		at   time.Duration // after t0
		want next
		// for stop: what the error must wrap and say
		is  error
		say string
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"a committed checkpoint goes on", []step{{cp: Checkpoint{Committed: true}, want: goOn}}},
		{"a clean abort goes on with the same client", []step{{cp: Checkpoint{}, want: goOn}}},
		{"an unknown outcome rebuilds", []step{{cp: Checkpoint{Err: &txsink.UnknownOutcomeError{Err: context.DeadlineExceeded}, rebuild: true}, want: rebuild}}},
		{"a refused transaction time-out stops, naming the setting", []step{{
			cp: Checkpoint{Err: &txsink.ProduceError{Topic: "out", Err: kerr.InvalidTransactionTimeout}}, want: stop,
			is: kerr.InvalidTransactionTimeout, say: "transactions.timeout (20s)"}}},
		{"a refused transactional id stops, naming the ACL", []step{{
			cp: Checkpoint{Err: kerr.TransactionalIDAuthorizationFailed, rebuild: true}, want: stop,
			is: kerr.TransactionalIDAuthorizationFailed, say: `TransactionalId "t-i1"`}}},
		{"a group fence stops as a twin", []step{{
			cp: Checkpoint{Err: fmt.Errorf("consuming: %w", kerr.FencedInstanceID), rebuild: true}, want: stop,
			is: ErrZombie, say: "FENCED_INSTANCE_ID"}}},
		{"three fences of young transactions stop as a twin", []step{
			{cp: Checkpoint{Err: fenced, Duration: time.Second}, want: rebuild},
			{cp: Checkpoint{Err: fenced, Duration: time.Second}, at: time.Second, want: rebuild},
			{cp: Checkpoint{Err: fenced, Duration: time.Second}, at: 2 * time.Second, want: stop, is: ErrZombie, say: "younger than transactions.timeout"},
		}},
		{"fences of transactions older than the time-out are the broker's abort, not a twin", []step{
			{cp: Checkpoint{Err: fenced, Duration: 25 * time.Second}, want: rebuild},
			{cp: Checkpoint{Err: fenced, Duration: 25 * time.Second}, at: 30 * time.Second, want: rebuild},
			{cp: Checkpoint{Err: fenced, Duration: 25 * time.Second}, at: 60 * time.Second, want: rebuild},
			{cp: Checkpoint{Err: fenced, Duration: 25 * time.Second}, at: 90 * time.Second, want: rebuild},
		}},
		{"a commit between fences starts the count again", []step{
			{cp: Checkpoint{Err: fenced, Duration: time.Second}, want: rebuild},
			{cp: Checkpoint{Err: fenced, Duration: time.Second}, want: rebuild},
			{cp: Checkpoint{Committed: true}, want: goOn},
			{cp: Checkpoint{Err: fenced, Duration: time.Second}, want: rebuild},
			{cp: Checkpoint{Err: fenced, Duration: time.Second}, want: rebuild},
		}},
		{"records the broker refuses ten times in a row stop", append(repeat(9, step{cp: Checkpoint{Err: &txsink.ProduceError{Topic: "out", Err: kerr.InvalidRecord}}, want: goOn}),
			step{cp: Checkpoint{Err: &txsink.ProduceError{Topic: "out", Err: kerr.InvalidRecord}}, want: stop, is: kerr.InvalidRecord, say: "10 times in a row"})},
		{"checkpoints failing for longer than checkpoint.failure_timeout stop", []step{
			{cp: Checkpoint{Err: &txsink.UnknownOutcomeError{Err: kerr.RequestTimedOut}, rebuild: true}, want: rebuild},
			{cp: Checkpoint{Err: &txsink.UnknownOutcomeError{Err: kerr.RequestTimedOut}, rebuild: true}, at: 4 * time.Minute, want: rebuild},
			{cp: Checkpoint{Err: &txsink.UnknownOutcomeError{Err: kerr.RequestTimedOut}, rebuild: true}, at: 5 * time.Minute, want: stop,
				is: kerr.RequestTimedOut, say: "longer than checkpoint.failure_timeout (5m0s)"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRecovery(cfg, &Graph{}, slog.New(slog.DiscardHandler))
			for i, s := range tc.steps {
				d := r.decide(s.cp, t0.Add(s.at))
				if d.next != s.want {
					t.Fatalf("step %d: decided %d (%v), want %d", i, d.next, d.err, s.want)
				}
				if s.want != stop {
					continue
				}
				if !errors.Is(d.err, s.is) || !strings.Contains(d.err.Error(), s.say) {
					t.Fatalf("step %d: stopped with %v; want it to wrap %v and say %q", i, d.err, s.is, s.say)
				}
			}
		})
	}
}

func repeat[T any](n int, v T) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func TestFailedCheckpointsBackOff(t *testing.T) {
	if d := backoff(1); d != 0 {
		t.Fatalf("the first failure waits %v; a one-off failure should be retried at once", d)
	}
	prev := time.Duration(0)
	for n := 2; n <= 30; n++ {
		d := backoff(n)
		if d <= 0 || d > backoffMax {
			t.Fatalf("failure %d waits %v, want within (0, %v]", n, d, backoffMax)
		}
		if n <= 7 && d < prev {
			// With a fifth of jitter the doubling still grows.
			t.Fatalf("failure %d waits %v, less than failure %d's %v", n, d, n-1, prev)
		}
		prev = d
	}
	if d := backoff(100); d < backoffMax*4/5 {
		t.Fatalf("a long run of failures waits %v, want about %v", d, backoffMax)
	}
}

func TestRateLogLeavesLinesOutAndSaysHowMany(t *testing.T) {
	var b syncBuffer
	log := bufferLogger(&b)
	l := rateLog{every: time.Hour}
	for range 1000 {
		l.log(log, slog.LevelWarn, "failing")
	}
	if n := b.count("failing"); n != 1 {
		t.Fatalf("%d lines in one period, want 1", n)
	}
	l.last.Store(0) // the period is over
	l.log(log, slog.LevelWarn, "failing")
	if !strings.Contains(b.String(), "not_logged_since=999") {
		t.Fatalf("the next line does not say how many were left out:\n%s", b.String())
	}
}
