package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/pipeline-run/pipeline/internal/testkit"
)

// sinkClient catches the transactional client a pipeline makes (and
// remakes when it rebuilds), to read its buffer gauges.
type sinkClient struct{ cl atomic.Pointer[kgo.Client] }

func (s *sinkClient) OnNewClient(cl *kgo.Client) { s.cl.Store(cl) }

func (s *sinkClient) get() *kgo.Client { return s.cl.Load() }

// producesTo reports whether req is a produce request that writes to the
// topic with the given name or id (produce v13 names topics by id).
func producesTo(req kmsg.Request, topic string, id [16]byte) bool {
	pr, ok := req.(*kmsg.ProduceRequest)
	if !ok {
		return false
	}
	for _, t := range pr.Topics {
		if t.Topic == topic || t.TopicID == id {
			return true
		}
	}
	return false
}

// holdProduces makes the broker keep every produce request to topic,
// without an answer, while hold is set and until release is closed. It
// returns how many requests it held.
func holdProduces(k *testkit.Kafka, topic string, hold *atomic.Bool, release <-chan struct{}) *atomic.Int64 {
	id := k.Cluster.TopicInfo(topic).TopicID
	var held atomic.Int64
	k.Cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if !hold.Load() || !producesTo(req, topic, id) {
			return nil, nil, false
		}
		held.Add(1)
		k.Cluster.SleepControl(func() { <-release })
		return nil, nil, false // then handled as usual
	})
	return &held
}

const shutdownConfig = `
instance_id: i1
checkpoint: {interval: 200ms, timeout: 2s, max_records: 2000}
transactions: {timeout: 20s}
consumer: {session_timeout: 6s, max_poll_records: 100}
producer: {max_buffered_records: %d, linger: 5ms}
sources: {in: {topics: [in]}}
steps: [{map: "{k: value.k, seq: value.seq}"}]
sinks: {out: {topic: out}}
dead_letter: {topic: dlq}
`

// TestShutdownIsBoundedWhenTheBrokerStopsAnsweringProduces stops a pipeline
// while the broker holds every produce request to the output unanswered.
// Run must still return, soon after the grace period (checkpoint.timeout),
// without committing anything more; a restart against the healthy broker
// then finishes the input exactly once.
func TestShutdownIsBoundedWhenTheBrokerStopsAnsweringProduces(t *testing.T) {
	for _, c := range []struct {
		name   string
		buffer int // producer.max_buffered_records
		// stalled says the case under test is there: cl is the
		// pipeline's client (nil once closed), flushFailed says a
		// checkpoint failed on a flush time-out.
		stalled func(cl *kgo.Client, flushFailed bool) bool
		what    string
	}{{
		name:   "while the tasks wait for room in a full producer buffer",
		buffer: 50,
		// The client counts a produce blocked for room on top of the
		// full buffer.
		stalled: func(cl *kgo.Client, _ bool) bool { return cl != nil && cl.BufferedProduceRecords() > 50 },
		what:    "produce blocked on a full buffer",
	}, {
		name:   "after a checkpoint's flush timed out",
		buffer: 100000,
		// The records are in flight and unanswered: aborting the
		// transaction cannot wait for them. (A run wedged there never
		// reports the checkpoint, so the stop comes anyway, later.)
		stalled: func(_ *kgo.Client, flushFailed bool) bool { return flushFailed },
		what:    "checkpoint failing on a flush time-out",
	}} {
		t.Run(c.name, func(t *testing.T) {
			// Registered first, so it runs after the broker has closed.
			before := goleak.IgnoreCurrent()
			t.Cleanup(func() { goleak.VerifyNone(t, before) })

			k := testkit.NewKafka(t)
			k.Topic("in", 2)
			k.Topic("out", 2)
			const n = 20000
			k.Input("in", n, 50, nil)
			body := fmt.Sprintf(shutdownConfig, c.buffer)
			cfg := parseConfig(t, body)

			var hold atomic.Bool
			release := make(chan struct{})
			var releaseOnce sync.Once
			unhold := func() { releaseOnce.Do(func() { hold.Store(false); close(release) }) }
			defer unhold() // the broker cannot close while it holds a request
			held := holdProduces(k, "out", &hold, release)

			var sc sinkClient
			var mu sync.Mutex
			var last *Checkpoint
			lastCheckpoint := func() *Checkpoint {
				mu.Lock()
				defer mu.Unlock()
				return last
			}
			var committedRecords atomic.Int64
			var flushFailed atomic.Bool
			// Once the stall is there, no checkpoint that wrote anything
			// may commit; one that read and wrote nothing (after a client
			// rebuild, say) commits an empty transaction, which needs no
			// produce answered.
			var watching atomic.Bool
			var committedWithOutputs atomic.Int64
			var lastWithOutputs atomic.Pointer[Checkpoint]
			p := newPipeline(t, k, body, nil,
				WithClientOpts(kgo.WithHooks(&sc)),
				WithCheckpointObserver(func(cp Checkpoint) {
					if cp.Committed {
						committedRecords.Add(int64(cp.Records))
					}
					if !cp.Committed && errors.Is(cp.Err, context.DeadlineExceeded) {
						flushFailed.Store(true)
					}
					if watching.Load() && (cp.Records > 0 || cp.Produced > 0) {
						lastWithOutputs.Store(&cp)
						if cp.Committed {
							committedWithOutputs.Add(1)
						}
					}
					mu.Lock()
					last = &cp
					mu.Unlock()
				}))

			ctx, cancel := context.WithCancel(context.Background())
			var runErr error
			ended := make(chan struct{})
			go func() { runErr = p.Run(ctx); close(ended) }()
			defer func() {
				// On a failure: stop the run before the broker closes.
				cancel()
				unhold()
				<-ended
			}()

			// Let records flow until a checkpoint has committed some, then
			// stop answering produces. Once a request is held, nothing
			// produced after it is answered either (one connection,
			// answered in order).
			waitFor(t, ended, 60*time.Second, "checkpoint committing records", func() bool { return committedRecords.Load() > 0 })
			hold.Store(true)
			waitFor(t, ended, 60*time.Second, "produce request held", func() bool { return held.Load() > 0 })
			reached := poll(ended, 20*time.Second, func() bool { return c.stalled(sc.get(), flushFailed.Load()) })
			watching.Store(true)
			committedBefore := p.Stats().Committed

			stopAt := time.Now()
			cancel()
			// A bound on a hang, not a speed: the grace period is 2s.
			const bound = 30 * time.Second
			select {
			case <-ended:
				if runErr != nil {
					t.Fatalf("Run after a stop asked for: %v", runErr)
				}
			case <-time.After(bound):
				t.Fatalf("Run did not return within %s of its context's end while the broker held produces", bound)
			}
			took := time.Since(stopAt)
			if !reached && !c.stalled(nil, flushFailed.Load()) {
				t.Fatalf("no %s before the stop: the case under test never happened", c.what)
			}
			if n := committedWithOutputs.Load(); n > 0 {
				t.Fatalf("%d checkpoints that wrote records committed while the broker answered no produce (the last: %d)", n, lastWithOutputs.Load().ID)
			}
			heldAtStop := held.Load()

			// The broker answers again; what the open checkpoint had read
			// is read again by the next run, and what it wrote stays
			// invisible.
			unhold()
			p2 := newPipeline(t, k, body, nil)
			testkit.RunUntilCommitted(t, k, p2, "t", "in")
			testkit.CheckExactlyOnce(t, k.ReadAll("out"), n, nil)
			t.Logf("%d produce requests held; Run returned %s after the stop (grace %s), the last checkpoint failing with: %v; first run committed %d records (%d checkpoints, empty ones included), the restart %d",
				heldAtStop, took.Round(time.Millisecond), cfg.Checkpoint.Timeout, lastCheckpoint().Err, committedRecords.Load(), committedBefore, p2.Stats().RecordsIn)
		})
	}
}

// waitFor polls cond until it holds, failing the test after within or if
// the run ends first.
func waitFor(t *testing.T, ended <-chan struct{}, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if !poll(ended, within, cond) {
		select {
		case <-ended:
			t.Fatalf("the run ended before %s", what)
		default:
		}
		t.Fatalf("no %s within %s", what, within)
	}
}

// poll reports whether cond held within the time given, before ended
// was closed.
func poll(ended <-chan struct{}, within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		select {
		case <-ended:
			return false
		default:
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}
