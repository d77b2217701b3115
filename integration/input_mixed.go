package integration

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Input that is more than generator records: poison records the pipeline
// must route to its dead-letter topic, and input written in transactions,
// some of them aborted. Verify refuses anything but generator records in the
// input, on purpose, unless CheckSpec.Skip leaves the others out, and judges
// transactional input by its committed records when
// CheckSpec.TransactionalInput says so.

// PoisonKind says how a poison record fails in the pipeline.
type PoisonKind int

const (
	// Undecodable: a value cut short, which is not JSON.
	Undecodable PoisonKind = iota
	// BadField: JSON whose seq is a string, so arithmetic on value.seq
	// (PassThroughDoubled's `value.seq * 2`) fails.
	BadField
)

func (k PoisonKind) String() string {
	if k == Undecodable {
		return "undecodable"
	}
	return "bad field"
}

// PoisonOf is the kind of poison record seq: the kinds alternate.
func PoisonOf(seq int) PoisonKind { return PoisonKind(seq % 2) }

// PoisonValue is the value of poison record seq, unique to it.
func PoisonValue(seq, keys int) []byte {
	if PoisonOf(seq) == Undecodable {
		return fmt.Appendf(nil, `{"k":%q,"seq":%d,"cut":`, InputKey(seq, keys), seq)
	}
	return fmt.Appendf(nil, `{"k":%q,"seq":"not a number: %d"}`, InputKey(seq, keys), seq)
}

// PoisonSpec describes poison records First..First+Count-1, keyed like
// generator input over Keys keys, spread evenly over Span.
type PoisonSpec struct {
	Topic        string
	First, Count int
	Keys         int
	Span         time.Duration
}

// PoisonProducer produces a PoisonSpec in the background, alongside an
// InputProducer writing the good records to the same topic.
//
// It owns one goroutine and one client, both gone once Wait returns or the
// test ends, whichever is first.
type PoisonProducer struct {
	spec PoisonSpec
	done chan struct{}
	err  error // written before done is closed
}

// StartPoison starts producing spec with a plain idempotent producer.
func StartPoison(t testing.TB, seeds []string, spec PoisonSpec) *PoisonProducer {
	t.Helper()
	if spec.Count <= 0 || spec.Keys <= 0 {
		t.Fatalf("bad poison spec %+v", spec)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(spec.Topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.UnknownTopicRetries(-1))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &PoisonProducer{spec: spec, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer cl.Close()
		p.err = p.run(ctx, cl)
	}()
	t.Cleanup(func() {
		cancel()
		<-p.done
	})
	return p
}

func (p *PoisonProducer) run(ctx context.Context, cl *kgo.Client) error {
	gap := p.spec.Span / time.Duration(p.spec.Count)
	for seq := p.spec.First; seq < p.spec.First+p.spec.Count; seq++ {
		rec := &kgo.Record{Key: []byte(InputKey(seq, p.spec.Keys)), Value: PoisonValue(seq, p.spec.Keys)}
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			return fmt.Errorf("producing poison seq %d: %w", seq, err)
		}
		if !sleepUnlessDone(ctx, gap) {
			return fmt.Errorf("poison input stopped after seq %d: %w", seq, ctx.Err())
		}
	}
	return nil
}

// Wait waits for every poison record to be acknowledged, failing the test
// on any produce error.
func (p *PoisonProducer) Wait(t testing.TB) {
	t.Helper()
	<-p.done
	if p.err != nil {
		t.Fatalf("poison input %s: %v", p.spec.Topic, p.err)
	}
}

// Values maps the value of each of spec's poison records to its seq.
func (s PoisonSpec) Values() map[string]int {
	m := make(map[string]int, s.Count)
	for seq := s.First; seq < s.First+s.Count; seq++ {
		m[string(PoisonValue(seq, s.Keys))] = seq
	}
	return m
}

// TxnInputSpec describes input written in transactions: Writers
// transactional producers write Batches batches of PerBatch records each,
// all at once, spread over Span. Batch b of writer w is aborted when
// Abort(w, b), else committed.
//
// The last writer's last batch is written once every other writer has
// finished: it ends the input in every partition it touches.
//
// Record i of batch b of writer w has seq w*Batches*PerBatch + b*PerBatch + i
// and the generator's value for it, with key w<w>-k<seq%Keys>: each writer
// has keys of its own, so that for every key seq rises with offset even
// though the writers run side by side.
type TxnInputSpec struct {
	Topic                      string
	Writers, Batches, PerBatch int
	Keys                       int
	Span                       time.Duration
	Abort                      func(writer, batch int) bool
}

// Seq is the seq of record i of batch b of writer w.
func (s TxnInputSpec) Seq(w, b, i int) int { return (w*s.Batches+b)*s.PerBatch + i }

// Key is the key of seq, written by writer w.
func (s TxnInputSpec) Key(w, seq int) string { return fmt.Sprintf("w%d-%s", w, InputKey(seq, s.Keys)) }

// TxnInputProducer writes a TxnInputSpec in the background, one goroutine
// and one transactional client per writer, all gone once Wait returns or
// the test ends, whichever is first.
type TxnInputProducer struct {
	spec   TxnInputSpec
	wg     sync.WaitGroup
	others sync.WaitGroup // every writer but the last
	done   chan struct{}

	mu                    sync.Mutex
	err                   error
	committed, aborted    map[int]bool // seqs whose transaction ended so
	commitTxns, abortTxns int
}

// StartTxnInput starts the writers.
func StartTxnInput(t testing.TB, seeds []string, spec TxnInputSpec) *TxnInputProducer {
	t.Helper()
	if spec.Writers <= 0 || spec.Batches <= 0 || spec.PerBatch <= 0 || spec.Keys <= 0 || spec.Abort == nil {
		t.Fatalf("bad transactional input spec %+v", spec)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &TxnInputProducer{spec: spec, done: make(chan struct{}), committed: map[int]bool{}, aborted: map[int]bool{}}
	p.others.Add(spec.Writers - 1)
	for w := range spec.Writers {
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(spec.Topic),
			kgo.TransactionalID(fmt.Sprintf("%s-writer-%d", spec.Topic, w)), kgo.UnknownTopicRetries(-1))
		if err != nil {
			cancel()
			p.wg.Wait()
			t.Fatal(err)
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			if w < spec.Writers-1 {
				defer p.others.Done()
			}
			defer cl.Close()
			if err := p.write(ctx, cl, w); err != nil {
				p.mu.Lock()
				p.err = cmp.Or(p.err, err)
				p.mu.Unlock()
			}
		}()
	}
	go func() {
		p.wg.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		cancel()
		<-p.done
	})
	return p
}

func (p *TxnInputProducer) write(ctx context.Context, cl *kgo.Client, w int) error {
	s := p.spec
	gap := s.Span / time.Duration(s.Batches)
	// Staggered, so that the writers' batches alternate in the partitions
	// rather than land in step.
	if !sleepUnlessDone(ctx, time.Duration(w)*gap/time.Duration(s.Writers)) {
		return fmt.Errorf("writer %d stopped before its first batch: %w", w, ctx.Err())
	}
	for b := range s.Batches {
		if w == s.Writers-1 && b == s.Batches-1 {
			p.others.Wait()
		}
		if err := cl.BeginTransaction(); err != nil {
			return fmt.Errorf("writer %d batch %d: begin: %w", w, b, err)
		}
		recs := make([]*kgo.Record, s.PerBatch)
		seqs := make([]int, s.PerBatch)
		for i := range recs {
			seq := s.Seq(w, b, i)
			key := s.Key(w, seq)
			seqs[i] = seq
			recs[i] = &kgo.Record{Key: []byte(key), Value: fmt.Appendf(nil, `{"k":%q,"seq":%d}`, key, seq)}
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return fmt.Errorf("writer %d batch %d: %w", w, b, err)
		}
		abort := s.Abort(w, b)
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(!abort)); err != nil {
			return fmt.Errorf("writer %d batch %d: ending the transaction (commit %v): %w", w, b, !abort, err)
		}
		p.mu.Lock()
		into := p.committed
		if abort {
			into = p.aborted
			p.abortTxns++
		} else {
			p.commitTxns++
		}
		for _, seq := range seqs {
			into[seq] = true
		}
		p.mu.Unlock()
		if !sleepUnlessDone(ctx, gap) {
			return fmt.Errorf("writer %d stopped after batch %d: %w", w, b, ctx.Err())
		}
	}
	return nil
}

// Done is closed when every writer has finished, successfully or not.
func (p *TxnInputProducer) Done() <-chan struct{} { return p.done }

// Ended reports how many records have been committed and aborted so far.
func (p *TxnInputProducer) Ended() (committed, aborted int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.committed), len(p.aborted)
}

// Wait waits for every writer, failing the test on any error, and returns
// the seqs committed and aborted, and how many transactions of each.
func (p *TxnInputProducer) Wait(t testing.TB) (committed, aborted map[int]bool, commitTxns, abortTxns int) {
	t.Helper()
	<-p.done
	if p.err != nil {
		t.Fatalf("transactional input %s: %v", p.spec.Topic, p.err)
	}
	return p.committed, p.aborted, p.commitTxns, p.abortTxns
}

// sleepUnlessDone sleeps d; false if ctx ended first.
func sleepUnlessDone(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// TxnOutcomes reads topic under read_uncommitted, markers included, once
// every transaction on it has ended (or after markerSettle), and counts its
// records by the outcome of their transactions as the checker sees them:
// the Report's record and marker counts, and NoHangingTxn, are filled in.
func TxnOutcomes(ctx context.Context, seeds []string, topic string) (*Report, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ts, err := settledPartitions(ctx, adm, topic)
	if err != nil {
		return nil, err
	}
	recs, err := readTopic(ctx, cl, adm, ts, ts.hwm, readUncommittedWithMarkers)
	if err != nil {
		return nil, fmt.Errorf("reading %s read_uncommitted: %w", topic, err)
	}
	h := &history{uncommitted: recs}
	r := &Report{Output: topic}
	for _, p := range ts.partitions() {
		if lso, hwm := ts.lso[p], ts.hwm[p]; lso != hwm {
			r.add(NoHangingTxn, Violation{Topic: topic, Partition: p, Offset: lso, Seq: -1,
				Detail: fmt.Sprintf("last stable offset %d below high watermark %d: a transaction is still open", lso, hwm)})
		}
		h.classify(r, p)
	}
	return r, nil
}
