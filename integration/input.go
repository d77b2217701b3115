package integration

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// CreateTopics creates topics with the given partition count and the
// broker's default replication. Tests create every topic they use: a topic
// made by auto-creation gets the broker's default partition count, which
// would silently change what a test exercises. An existing topic fails the
// test, since names are meant to be unique per test.
func CreateTopics(t testing.TB, adm *kadm.Client, partitions int32, topics ...string) {
	t.Helper()
	CreateTopicsWith(t, adm, partitions, nil, topics...)
}

// CreateTopicsWith is CreateTopics with topic configs.
func CreateTopicsWith(t testing.TB, adm *kadm.Client, partitions int32, configs map[string]*string, topics ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	resps, err := adm.CreateTopics(ctx, partitions, -1, configs, topics...)
	if err != nil {
		t.Fatalf("creating topics %v: %v", topics, err)
	}
	for _, r := range resps.Sorted() {
		if r.Err != nil {
			t.Fatalf("creating topic %s: %v (%s)", r.Topic, r.Err, r.ErrMessage)
		}
	}
	// Metadata can lag CreateTopics on a multi-broker cluster; producers and
	// the pipeline must see every partition with a leader before they start.
	WaitFor(t, 30*time.Second, fmt.Sprintf("topics %v to have leaders", topics), func() (bool, string) {
		tds, err := adm.ListTopics(ctx, topics...)
		if err != nil {
			return false, err.Error()
		}
		for _, topic := range topics {
			td, ok := tds[topic]
			if !ok || td.Err != nil || len(td.Partitions) != int(partitions) {
				return false, fmt.Sprintf("%s: %+v", topic, td)
			}
			for _, p := range td.Partitions {
				if p.Err != nil || p.Leader < 0 {
					return false, fmt.Sprintf("%s/%d: leader %d, %v", topic, p.Partition, p.Leader, p.Err)
				}
			}
		}
		return true, ""
	})
}

// InputSpec describes the input of an end-to-end run: Records records with
// keys k0..k<Keys-1>; record i has key k<i%Keys> and the JSON value
// {"k":"k<i%Keys>","seq":i}. Records are produced in seq order, so for each
// key seq rises with offset.
type InputSpec struct {
	Topic   string
	Records int
	Keys    int
	// Rate is records per second; 0 produces as fast as the broker takes them.
	Rate int
	// Hold, when positive, holds back the records from seq Hold on until
	// Release raises the limit: a test that must inject a fault while input
	// is still to come (mid-stream, whatever the pipeline's speed) keeps the
	// tail back until the fault is over. Time spent held does not count:
	// once released, the input goes on at Rate.
	Hold int
}

// InputKey is the key of input record seq.
func InputKey(seq, keys int) string { return "k" + strconv.Itoa(seq%keys) }

// InputValue is the value of input record seq.
func InputValue(seq, keys int) []byte {
	return fmt.Appendf(nil, `{"k":%q,"seq":%d}`, InputKey(seq, keys), seq)
}

// InputProducer produces an InputSpec in the background.
//
// It owns one goroutine and one client, both gone once Wait returns or the
// test ends, whichever is first.
type InputProducer struct {
	spec   InputSpec
	cancel context.CancelFunc
	done   chan struct{}

	acked atomic.Int64
	mu    sync.Mutex
	err   error // the first produce error

	limit    atomic.Int64  // records below this seq may be produced
	released chan struct{} // signalled when limit rises
}

// StartInput starts producing spec to its topic with a plain idempotent
// producer (acks=all, so per-partition order holds across retries).
func StartInput(t testing.TB, seeds []string, spec InputSpec) *InputProducer {
	t.Helper()
	if spec.Keys <= 0 || spec.Records < 0 {
		t.Fatalf("bad input spec %+v", spec)
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(seeds...),
		kgo.DefaultProduceTopic(spec.Topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// The topic exists (tests create theirs first), but a Kafka broker
		// that has just created it or is restarting can still answer
		// UNKNOWN_TOPIC_OR_PARTITION for a moment; the client's default is
		// to fail records after four of those, which would stop the input
		// and leave the pipeline idle through no fault of its own.
		kgo.UnknownTopicRetries(-1),
	)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &InputProducer{spec: spec, cancel: cancel, done: make(chan struct{}), released: make(chan struct{}, 1)}
	p.limit.Store(int64(spec.Records))
	if spec.Hold > 0 {
		p.limit.Store(int64(min(spec.Hold, spec.Records)))
	}
	go func() {
		defer close(p.done)
		defer cl.Close()
		p.run(ctx, cl)
	}()
	t.Cleanup(func() {
		cancel()
		<-p.done
	})
	return p
}

func (p *InputProducer) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.err = err
	}
}

func (p *InputProducer) firstErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *InputProducer) run(ctx context.Context, cl *kgo.Client) {
	start := time.Now()
	for seq := range p.spec.Records {
		if int64(seq) >= p.limit.Load() {
			held := time.Now()
			if !p.waitRelease(ctx, seq) {
				p.fail(fmt.Errorf("input stopped at seq %d of %d while held: %w", seq, p.spec.Records, ctx.Err()))
				return
			}
			start = start.Add(time.Since(held))
		}
		if p.spec.Rate > 0 && seq%100 == 0 {
			// Pace in steps of 100 records: the due time of record seq is
			// seq/Rate after the start, whatever the producer's hiccups.
			due := start.Add(time.Duration(float64(seq) / float64(p.spec.Rate) * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				timer := time.NewTimer(d)
				select {
				case <-ctx.Done():
					timer.Stop()
				case <-timer.C:
				}
			}
		}
		if ctx.Err() != nil {
			p.fail(fmt.Errorf("input stopped at seq %d of %d: %w", seq, p.spec.Records, ctx.Err()))
			return
		}
		if p.firstErr() != nil {
			// Producing past a failed record would leave a gap the checker
			// would blame on the pipeline.
			return
		}
		rec := &kgo.Record{
			Key:   []byte(InputKey(seq, p.spec.Keys)),
			Value: InputValue(seq, p.spec.Keys),
		}
		cl.Produce(ctx, rec, func(r *kgo.Record, err error) {
			if err != nil {
				p.fail(fmt.Errorf("producing input seq %d: %w", seq, err))
				return
			}
			p.acked.Add(1)
		})
	}
	if err := cl.Flush(ctx); err != nil {
		p.fail(fmt.Errorf("flushing input: %w", err))
	}
}

// waitRelease waits until seq is below the limit; false if ctx ended first.
func (p *InputProducer) waitRelease(ctx context.Context, seq int) bool {
	for int64(seq) >= p.limit.Load() {
		select {
		case <-ctx.Done():
			return false
		case <-p.released:
		}
	}
	return true
}

// Release lets the producer go on up to (not including) seq upTo; a spec
// without Hold is never held.
func (p *InputProducer) Release(upTo int) {
	upTo = min(upTo, p.spec.Records)
	for {
		cur := p.limit.Load()
		if int64(upTo) <= cur || p.limit.CompareAndSwap(cur, int64(upTo)) {
			break
		}
	}
	select {
	case p.released <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// Acked is how many records the broker has acknowledged so far.
func (p *InputProducer) Acked() int64 { return p.acked.Load() }

// Done is closed when the producer has finished, successfully or not.
func (p *InputProducer) Done() <-chan struct{} { return p.done }

// Wait waits for every record to be acknowledged, failing the test on any
// produce error.
func (p *InputProducer) Wait(t testing.TB) {
	t.Helper()
	<-p.done
	if err := p.firstErr(); err != nil {
		t.Fatalf("input %s: %v", p.spec.Topic, err)
	}
	if got := p.acked.Load(); got != int64(p.spec.Records) {
		t.Fatalf("input %s: %d of %d records acknowledged", p.spec.Topic, got, p.spec.Records)
	}
}

// ProduceInput produces spec and waits for it.
func ProduceInput(t testing.TB, seeds []string, spec InputSpec) {
	t.Helper()
	StartInput(t, seeds, spec).Wait(t)
}
