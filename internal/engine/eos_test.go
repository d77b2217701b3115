package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/pipeline-run/pipeline/internal/testkit"
	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/ops"
	"github.com/pipeline-run/pipeline/wire"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func newPipeline(t *testing.T, k *testkit.Kafka, body string, reg *pipeline.Registry, opts ...Option) *Pipeline {
	t.Helper()
	cfg := parseConfig(t, body)
	p, err := New(cfg, reg, append([]Option{WithLogger(testkit.Logger(t)), WithSeedBrokers(k.Addr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

const passThrough = `
instance_id: i1
checkpoint: {interval: 100ms, timeout: 10s, max_records: 2000}
transactions: {timeout: 20s}
consumer: {session_timeout: 6s}
sources: {in: {topics: [in]}}
steps: [{map: "{k: value.k, seq: value.seq}"}]
sinks: {out: {topic: out}}
dead_letter: {topic: dlq}
`

func TestPassThroughIsExactlyOnceWithDeadLetters(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("in", 3)
	const n = 5000
	poison := map[int]bool{17: true, 2500: true, 4999: true}
	k.Input("in", n, 50, poison)
	p := newPipeline(t, k, passThrough, nil)
	testkit.RunUntilCommitted(t, k, p, "t", "in")
	testkit.CheckExactlyOnce(t, k.ReadAll("out"), n, poison)
	dlq := k.ReadAll("dlq")
	if len(dlq) != len(poison) {
		t.Fatalf("%d dead letters, want %d", len(dlq), len(poison))
	}
	for _, r := range dlq {
		off := ""
		for _, h := range r.Headers {
			if h.Key == wire.HeaderOffset {
				off = string(h.Value)
			}
		}
		if off == "" {
			t.Errorf("dead letter without %s header", wire.HeaderOffset)
		}
	}
	if st := p.Stats(); st.RecordsIn != n || st.DeadLetters != int64(len(poison)) {
		t.Fatalf("stats %+v", st)
	}
}

func TestInjectedProduceFailuresAbortAndReplay(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("in", 3)
	const n = 20000
	k.Input("in", n, 100, nil)
	// Fail some produce requests to the output with an error the client
	// does not retry: each fails its checkpoint, which must abort and
	// replay without losing or doubling anything.
	h := k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "out", Err: kerr.InvalidRecord, Count: 4})
	var aborted atomic.Int64
	p := newPipeline(t, k, passThrough, nil, WithCheckpointObserver(func(cp Checkpoint) {
		if !cp.Committed {
			aborted.Add(1)
		}
	}))
	testkit.RunUntilCommitted(t, k, p, "t", "in")
	if h.Hits() == 0 {
		t.Fatal("the produce fault never fired")
	}
	if aborted.Load() == 0 || p.Stats().Aborted == 0 {
		t.Fatalf("no checkpoint aborted although %d produce requests failed", h.Hits())
	}
	testkit.CheckExactlyOnce(t, k.ReadAll("out"), n, nil)
	t.Logf("%d produce faults fired, %d checkpoints aborted, %d rebuilds, %d committed", h.Hits(), aborted.Load(), p.Stats().Rebuilds, p.Stats().Committed)
}

func TestEveryThirdCheckpointAbortedOnPurpose(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("in", 3)
	const n = 20000
	k.Input("in", n, 100, nil)
	every := testkit.NewEveryNth(3)
	p := newPipeline(t, k, passThrough, nil, WithBeforeCommit(func(cp Checkpoint) error {
		if cp.Records > 0 && every.Hit() {
			return errors.New("injected")
		}
		return nil
	}))
	testkit.RunUntilCommitted(t, k, p, "t", "in")
	st := p.Stats()
	if every.Fired() == 0 || st.Aborted < every.Fired() {
		t.Fatalf("%d faults fired, %d checkpoints aborted", every.Fired(), st.Aborted)
	}
	if st.Rebuilds != 0 {
		t.Fatalf("a clean abort rebuilt the client %d times", st.Rebuilds)
	}
	testkit.CheckExactlyOnce(t, k.ReadAll("out"), n, nil)
	t.Logf("%d checkpoints aborted on purpose, %d committed", every.Fired(), st.Committed)
}

func TestLostEndTxnAnswerIsResolvedNotGuessed(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("in", 2)
	const n = 5000
	k.Input("in", n, 20, nil)
	// REQUEST_TIMED_OUT on EndTxn: the broker applies the commit but the
	// answer says it failed. The pipeline must not guess either way.
	h := k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, Err: kerr.RequestTimedOut, Count: 3})
	p := newPipeline(t, k, passThrough, nil)
	testkit.RunUntilCommitted(t, k, p, "t", "in")
	if h.Hits() == 0 {
		t.Fatal("the EndTxn fault never fired")
	}
	testkit.CheckExactlyOnce(t, k.ReadAll("out"), n, nil)
	t.Logf("%d EndTxn faults fired; stats %+v", h.Hits(), p.Stats())
}

// slow is an operator that takes a while per record, so that a parallel
// stage holds records when a checkpoint's barrier arrives. When gate is
// set, a record is emitted only while the gate is open for readers.
type slow struct {
	d    time.Duration
	gate *sync.RWMutex
}

func (s slow) Outputs() []string                                      { return nil }
func (s slow) NewOperator(pipeline.TaskID) (pipeline.Operator, error) { return s, nil }
func (s slow) Process(ctx pipeline.Context, r *pipeline.Record) error {
	time.Sleep(s.d)
	if s.gate != nil {
		s.gate.RLock()
		defer s.gate.RUnlock()
	}
	ctx.Emit(r)
	return nil
}

func TestParallelStageIsDrainedAtEveryCheckpoint(t *testing.T) {
	for _, skipDrain := range []bool{false, true} {
		name := "with the drain nothing is lost"
		if skipDrain {
			name = "without the drain the check fails (the test can fail)"
		}
		t.Run(name, func(t *testing.T) {
			k := testkit.NewKafka(t)
			k.Topic("in", 2)
			const n = 3000
			k.Input("in", n, 40, nil)
			// A checkpoint whose barrier found the workers holding records
			// commits, and the next one aborts. Without the drain, the
			// barrier also closes the workers' gate: what they still hold is
			// emitted only once the checkpoint has committed, into the next
			// transaction, and is gone with it, its offsets committed, as
			// after a crash. (The gate is needed: the producer's flush
			// would otherwise wait for the workers and drain them by luck.)
			var gate sync.RWMutex
			reg := ops.NewRegistry()
			if err := reg.Register("slow", func(*pipeline.Spec) (pipeline.Definition, error) {
				return slow{d: time.Millisecond, gate: &gate}, nil
			}); err != nil {
				t.Fatal(err)
			}
			body := strings.Replace(passThrough, `steps: [{map: "{k: value.k, seq: value.seq}"}]`,
				`steps: [{parallel: {workers: 3, queue: 64, slow: {}}}]`, 1)
			body = strings.Replace(body, "interval: 100ms", "interval: 20ms", 1)
			var aborts, heldAtCommit atomic.Int64
			// The hooks and the observer run on the coordinator goroutine.
			var p *Pipeline
			var lastHeld int64
			abortNext, locked := false, false
			opts := []Option{WithBeforeCommit(func(cp Checkpoint) error {
				held := p.heldAtBarrier.Load() != lastHeld
				lastHeld = p.heldAtBarrier.Load()
				if abortNext {
					abortNext = false
					aborts.Add(1)
					return errors.New("injected")
				}
				abortNext = held || locked
				return nil
			}), WithCheckpointObserver(func(Checkpoint) {
				if locked {
					locked = false
					gate.Unlock()
				}
			})}
			if skipDrain {
				opts = append(opts, withSkippedDrain(func(inflight func() int64) {
					gate.Lock()
					locked = true
					if inflight() > 0 {
						heldAtCommit.Add(1)
					}
				}))
			}
			p = newPipeline(t, k, body, reg, opts...)
			held := p.heldAtBarrier.Load()

			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- p.Run(ctx) }()
			wctx, wcancel := context.WithTimeout(context.Background(), 60*time.Second)
			werr := k.WaitCommitted(wctx, "t", "in")
			wcancel()
			cancel()
			rerr := <-done
			if got := p.heldAtBarrier.Load() - held; got == 0 {
				t.Fatal("no checkpoint barrier found the workers holding records: the case under test never happened")
			}
			if aborts.Load() == 0 {
				t.Fatal("no checkpoint was aborted")
			}
			out := k.ReadAll("out")
			if skipDrain {
				if heldAtCommit.Load() == 0 {
					t.Fatal("no worker still held a record when its checkpoint committed: the fault never fired")
				}
				// The gate makes the loss certain, so the check must see it.
				problems := testkit.ExactlyOnceProblems(out, n, nil)
				if len(problems) == 0 {
					t.Fatalf("skipping the drain went unnoticed (wait err %v, run err %v)", werr, rerr)
				}
				t.Logf("without the drain: %d commits with records held, %d of %d outputs, %d problems, the last: %v",
					heldAtCommit.Load(), len(out), n, len(problems), problems[len(problems)-1])
				return
			}
			if werr != nil || rerr != nil {
				t.Fatalf("wait: %v, run: %v", werr, rerr)
			}
			testkit.CheckExactlyOnce(t, out, n, nil)
		})
	}
}

func TestStopsAtABadRecordWithoutADeadLetterTopic(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("in", 1)
	const n, bad = 1000, 600
	k.Input("in", n, 10, map[int]bool{bad: true})
	body := strings.Replace(passThrough, "dead_letter: {topic: dlq}\n", "", 1)
	p := newPipeline(t, k, body, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := p.Run(ctx)
	if err == nil {
		t.Fatal("Run returned nil")
	}
	var re *pipeline.RecordError
	if !errors.As(err, &re) || re.Position.Offset != bad || re.Position.Topic != "in" {
		t.Fatalf("error does not name the record's position in/0@%d: %v", bad, err)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("in/0@%d", bad)) {
		t.Fatalf("message does not name the position: %v", err)
	}
	offs, ferr := k.Admin.FetchOffsets(context.Background(), "t")
	if ferr != nil {
		t.Fatal(ferr)
	}
	if c, ok := offs.Lookup("in", 0); ok && c.At > bad {
		t.Fatalf("committed offset %d is past the bad record at %d", c.At, bad)
	}
	for _, r := range k.ReadAll("out") {
		var v struct{ Seq int }
		_ = json.Unmarshal(r.Value, &v)
		if v.Seq >= bad {
			t.Fatalf("output seq %d is at or past the bad record", v.Seq)
		}
	}
}

func TestStartupChecks(t *testing.T) {
	t.Run("a transaction time-out above the broker's maximum names both values", func(t *testing.T) {
		k := testkit.NewKafka(t, kfake.BrokerConfigs(map[string]string{"transaction.max.timeout.ms": "10000"}))
		k.Topic("in", 1)
		p := newPipeline(t, k, passThrough, nil)
		err := p.Run(context.Background())
		if err == nil || !strings.Contains(err.Error(), "transactions.timeout (20s)") || !strings.Contains(err.Error(), "transaction.max.timeout.ms (10s)") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("a missing source topic is named with its YAML path", func(t *testing.T) {
		k := testkit.NewKafka(t)
		p := newPipeline(t, k, passThrough, nil)
		err := p.Run(context.Background())
		if err == nil || !strings.Contains(err.Error(), `sources.in.topics[0]: topic "in" does not exist`) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("an output topic with other partitions than configured is refused", func(t *testing.T) {
		k := testkit.NewKafka(t)
		k.Topic("in", 1)
		k.Topic("out", 2)
		body := strings.Replace(passThrough, "sinks: {out: {topic: out}}", "sinks: {out: {topic: out, partitions: 3}}", 1)
		p := newPipeline(t, k, body, nil)
		err := p.Run(context.Background())
		if err == nil || !strings.Contains(err.Error(), `sinks.out.partitions: topic "out" has 2 partitions, the config asks for 3`) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("missing output topics are created like the source", func(t *testing.T) {
		// Two brokers: the broker's default replication factor is then 2,
		// so the factor 1 the config asks for shows.
		k := testkit.NewKafka(t, kfake.NumBrokers(2))
		k.Topic("in", 4)
		p := newPipeline(t, k, passThrough+"topics: {replication_factor: 1, configs: {retention.ms: \"12345\"}}\n", nil)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()
		deadline := time.Now().Add(10 * time.Second)
		for k.Cluster.TopicInfo("out") == nil || k.Cluster.TopicInfo("dlq") == nil {
			if time.Now().After(deadline) {
				t.Fatal("output topics not created")
			}
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got := len(k.Cluster.PartitionInfos("out")); got != 4 {
			t.Fatalf("out has %d partitions, want 4", got)
		}
		ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		details, err := k.Admin.ListTopics(ctx, "out", "dlq")
		if err != nil {
			t.Fatal(err)
		}
		for _, topic := range []string{"out", "dlq"} {
			d := details[topic]
			if d.Err != nil || len(d.Partitions) == 0 {
				t.Fatalf("%s: %v, %d partitions", topic, d.Err, len(d.Partitions))
			}
			for _, pd := range d.Partitions.Sorted() {
				if len(pd.Replicas) != 1 {
					t.Errorf("%s/%d has %d replicas, want 1 (topics.replication_factor)", topic, pd.Partition, len(pd.Replicas))
				}
			}
		}
		rcs, err := k.Admin.DescribeTopicConfigs(ctx, "out", "dlq")
		if err != nil {
			t.Fatal(err)
		}
		for _, topic := range []string{"out", "dlq"} {
			rc, err := rcs.On(topic, nil)
			if err != nil {
				t.Fatalf("%s: %v", topic, err)
			}
			var found bool
			for _, c := range rc.Configs {
				if c.Key == "retention.ms" {
					found = true
					if c.MaybeValue() != "12345" || c.Source != kmsg.ConfigSourceDynamicTopicConfig {
						t.Errorf("%s: retention.ms is %q from %v, want 12345 set on the topic", topic, c.MaybeValue(), c.Source)
					}
				}
			}
			if !found {
				t.Errorf("%s: no retention.ms in its configs", topic)
			}
		}
	})
}

func TestOversizedOutputsGoToTheDeadLetterTopic(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("in", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Records 3 and 7 carry a pad too large for producer.batch_max_bytes.
	var rs []*kgo.Record
	for i := range 10 {
		pad := ""
		if i == 3 || i == 7 {
			pad = strings.Repeat("x", 3000)
		}
		rs = append(rs, &kgo.Record{Topic: "in", Key: []byte("k"), Value: fmt.Appendf(nil, `{"k":"k","seq":%d,"pad":%q}`, i, pad)})
	}
	if err := k.Client.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	body := strings.Replace(passThrough, `steps: [{map: "{k: value.k, seq: value.seq}"}]`, `steps: [{map: "{k: value.k, seq: value.seq, pad: value.pad}"}]`, 1)
	body += "producer: {batch_max_bytes: 2048}\n"
	p := newPipeline(t, k, body, nil)
	testkit.RunUntilCommitted(t, k, p, "t", "in")
	testkit.CheckExactlyOnce(t, k.ReadAll("out"), 10, map[int]bool{3: true, 7: true})
	dlq := k.ReadAll("dlq")
	if len(dlq) != 2 {
		t.Fatalf("%d dead letters, want 2", len(dlq))
	}
	for _, r := range dlq {
		if _, ok := headerOf(r, wire.HeaderTruncated); !ok {
			t.Errorf("dead letter at %s/%d@%d was not cut to fit and not marked", r.Topic, r.Partition, r.Offset)
		}
		if e, _ := headerOf(r, wire.HeaderError); !strings.Contains(e, "larger than producer.batch_max_bytes") {
			t.Errorf("dead letter error %q", e)
		}
	}
	if p.Stats().Aborted != 0 {
		t.Fatalf("%d checkpoints aborted; the oversized records should never reach the broker", p.Stats().Aborted)
	}
}

func headerOf(r *kgo.Record, k string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == k {
			return string(h.Value), true
		}
	}
	return "", false
}

func TestRecordsTheBrokerAlwaysRefusesStopThePipeline(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("in", 1)
	k.Input("in", 100, 10, nil)
	h := k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "out", Err: kerr.InvalidRecord, Count: -1})
	defer h.Remove()
	p := newPipeline(t, k, passThrough, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := p.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "refused this checkpoint's records 10 times in a row") || !errors.Is(err, kerr.InvalidRecord) {
		t.Fatalf("got %v", err)
	}
	if h.Hits() < maxRefusedInARow {
		t.Fatalf("the fault fired %d times", h.Hits())
	}
	if got := k.ReadAll("out"); len(got) != 0 {
		t.Fatalf("%d records visible", len(got))
	}
}

// TestAbortedInputNeverReachesTheOutput feeds input written in
// transactions, every third of them aborted: read_committed must keep the
// aborted records out, and everything committed must come through once.
func TestAbortedInputNeverReachesTheOutput(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("in", 2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	txn, err := kgo.NewClient(kgo.SeedBrokers(k.Addr), kgo.TransactionalID("input-writer"))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	const batches, per = 30, 100
	aborted := map[int]bool{}
	for b := range batches {
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := range per {
			seq := b*per + i
			key := "k" + strconv.Itoa(seq%17)
			if err := txn.ProduceSync(ctx, &kgo.Record{Topic: "in", Key: []byte(key), Value: fmt.Appendf(nil, `{"k":%q,"seq":%d}`, key, seq)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			if b%3 == 2 {
				aborted[seq] = true
			}
		}
		if err := txn.EndTransaction(ctx, kgo.TransactionEndTry(b%3 != 2)); err != nil {
			t.Fatal(err)
		}
	}
	p := newPipeline(t, k, passThrough, nil)
	testkit.RunUntilCommitted(t, k, p, "t", "in")
	testkit.CheckExactlyOnce(t, k.ReadAll("out"), batches*per, aborted)
	if got := p.Stats().RecordsIn; got != int64(batches*per-len(aborted)) {
		t.Fatalf("the pipeline read %d records, want the %d committed ones", got, batches*per-len(aborted))
	}
}
