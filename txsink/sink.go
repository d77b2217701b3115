// Package txsink is the transactional side of the pipeline: one Kafka
// client that consumes in a group with read_committed and produces in
// transactions, so that outputs, state changes and consumed offsets commit
// together (KIP-447: the offsets go into the producer's transaction with the
// group's metadata).
//
// The consumer and the producer are one client because the transaction must
// carry the group generation the offsets were consumed under; franz-go's
// GroupTransactSession does that and aborts whenever the group rebalanced
// before the commit. Sink adds what the pipeline needs on top: the first
// produce error decides the outcome, an unknown outcome is reported as such,
// and the client can be rebuilt from scratch.
package txsink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Sink owns the transactional client. Poll, Begin, Produce, Commit, Abort
// and Rebuild are called from one goroutine (the checkpoint coordinator);
// Produce may also be called from others (tasks, workers) between Begin and
// Commit.
type Sink struct {
	opts []kgo.Opt
	log  *slog.Logger

	// sess is swapped by Rebuild while a stray producer (a bug elsewhere)
	// might still call Produce; a closed client fails such records
	// instead of crashing, so the pointer is atomic and never nil.
	sess   atomic.Pointer[kgo.GroupTransactSession]
	closed bool

	mu       sync.Mutex
	firstErr *ProduceError

	// acks counts, per partition, the records acknowledged in the open
	// transaction. Only promises write it, and kgo calls them one at a
	// time; readers wait for pending first. cur caches the last partition
	// acknowledged: acknowledgements come a batch at a time, so most skip
	// the map (hashing a TopicPartition per record showed in profiles).
	acks    map[TopicPartition]*partAcks
	cur     *partAcks
	curTP   TopicPartition
	pending sync.WaitGroup // produces not yet acknowledged

	produced atomic.Int64 // records produced in this transaction
	bytes    atomic.Int64
	promise  func(*kgo.Record, error)

	// keptOpen is set when Commit found nothing to commit and left the
	// client's transaction open for the next Begin to take over (see
	// Commit). Nothing of it has reached a broker.
	keptOpen bool

	// connTrouble is set when a connection to a broker failed (a dial, a
	// write or a read) since the transaction began; see endLeash.
	connTrouble atomic.Bool
}

// endLeash bounds ending a transaction during which a broker connection
// failed. The client's group heartbeat loop stops when its heartbeats
// fail, and waits for the next rebalance, which the pipeline allows only
// after the checkpoint; but ending a transaction forces a heartbeat first
// and waits for that loop to answer. So after a broker restart, End used to
// wait out all of checkpoint.timeout (30 s by default) with the broker long
// back. A healthy End takes milliseconds; one that has not answered within
// the leash is given up, its outcome unknown, and the client rebuilt.
var endLeash = 3 * time.Second

// OnBrokerConnect, OnBrokerWrite and OnBrokerRead (kgo hooks) note a
// failed connection.
func (s *Sink) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	s.noteConn(err)
}

func (s *Sink) OnBrokerWrite(_ kgo.BrokerMetadata, _ int16, _ int, _, _ time.Duration, err error) {
	s.noteConn(err)
}

func (s *Sink) OnBrokerRead(_ kgo.BrokerMetadata, _ int16, _ int, _, _ time.Duration, err error) {
	s.noteConn(err)
}

func (s *Sink) noteConn(err error) {
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		s.connTrouble.Store(true)
	}
}

// New makes the client. opts must include the seed brokers, consumer group,
// topics, transactional id and read_committed isolation; New adds nothing
// that decides semantics.
func New(opts []kgo.Opt, log *slog.Logger) (*Sink, error) {
	s := &Sink{opts: opts, log: log}
	s.promise = s.acked
	if err := s.open(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Sink) open() error {
	sess, err := kgo.NewGroupTransactSession(append(s.opts[:len(s.opts):len(s.opts)], kgo.WithHooks(s))...)
	if err != nil {
		return fmt.Errorf("creating transactional client: %w", err)
	}
	s.sess.Store(sess)
	s.closed = false
	return nil
}

// Client is the underlying client, for admin requests and inspection. It
// must not be used to manage transactions.
func (s *Sink) Client() *kgo.Client { return s.sess.Load().Client() }

// Poll fetches up to max records. It blocks until records arrive or ctx is
// done. Rebalances wait until AllowRebalance.
func (s *Sink) Poll(ctx context.Context, max int) kgo.Fetches {
	return s.sess.Load().PollRecords(ctx, max)
}

// AllowRebalance lets a rebalance that waited on a poll go ahead. The
// coordinator calls it between transactions only, so partitions are never
// given up with work in flight.
func (s *Sink) AllowRebalance() { s.sess.Load().AllowRebalance() }

// Begin starts a transaction. ctx bounds asking for the producer id a
// transaction kept open still lacks (see below).
func (s *Sink) Begin(ctx context.Context) error {
	s.mu.Lock()
	s.firstErr = nil
	s.mu.Unlock()
	s.acks = map[TopicPartition]*partAcks{}
	s.cur = nil
	s.produced.Store(0)
	s.bytes.Store(0)
	s.connTrouble.Store(false)
	if s.keptOpen {
		s.keptOpen = false
		return s.ensureProducerID(ctx)
	}
	return s.sess.Load().Begin()
}

// ensureProducerID asks for the client's producer id if it has none.
//
// A client begins its transaction even when it could not get a producer id
// (a broker was down), and asks again only when it next produces. But a
// transaction our predecessor left open with the group's offsets in it (a
// crash between the offsets joining it and its end) makes the broker
// withhold those offsets from us (UNSTABLE_OFFSET_COMMIT) until it ends;
// without offsets we read nothing, so we produce nothing, and the kept
// transaction never asks. Only our producer id ends that transaction early:
// asking for it aborts it. Without this the pipeline sat idle until the
// broker aborted it, transactions.timeout after it began.
//
// A client with its producer id answers at once. Any other failure is left
// to the next checkpoint, except one that retrying cannot help.
func (s *Sink) ensureProducerID(ctx context.Context) error {
	_, _, err := s.sess.Load().Client().ProducerID(ctx)
	if err == nil {
		return nil
	}
	if Classify(err) == Exit || IsFenced(err) {
		return err
	}
	s.log.Debug("no producer id yet; the next checkpoint asks again", "err", err)
	return nil
}

// Produce sends r inside the open transaction. It blocks while the client's
// buffer is full (back-pressure). A failure is remembered and makes the
// transaction abort at Commit. When r.Context is an Acker, its Acked is
// called once the producer is done with r, before Commit can return.
func (s *Sink) Produce(ctx context.Context, r *kgo.Record) {
	s.pending.Add(1)
	s.produced.Add(1)
	s.bytes.Add(int64(len(r.Key) + len(r.Value)))
	s.sess.Load().Produce(ctx, r, s.promise)
}

// Acker is a kgo.Record.Context the sink tells when the producer is done
// with the record: acknowledged, or failed.
type Acker interface {
	Acked()
}

func (s *Sink) acked(r *kgo.Record, err error) {
	a, _ := r.Context.(Acker)
	if err != nil {
		s.mu.Lock()
		if s.firstErr == nil {
			s.firstErr = &ProduceError{Topic: r.Topic, Partition: r.Partition, Err: err}
		}
		s.mu.Unlock()
		if a != nil {
			a.Acked()
		}
		s.pending.Done()
		return
	}
	pa := s.cur
	if pa == nil || r.Partition != s.curTP.Partition || r.Topic != s.curTP.Topic {
		tp := TopicPartition{r.Topic, r.Partition}
		if pa = s.acks[tp]; pa == nil {
			pa = &partAcks{last: -1}
			s.acks[tp] = pa
		}
		s.cur, s.curTP = pa, tp
	}
	pa.n++
	pa.last = max(pa.last, r.Offset)
	if a != nil {
		a.Acked()
	}
	s.pending.Done()
}

// partAcks is what one partition acknowledged in the open transaction.
type partAcks struct {
	n    int64 // records
	last int64 // offset of the last one, -1 before the first
}

// TopicPartition names a partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// Flush waits until every record produced so far is acknowledged (or
// failed), and returns how many each partition acknowledged in the open
// transaction.
func (s *Sink) Flush(ctx context.Context) (map[TopicPartition]int64, error) {
	if err := s.sess.Load().Client().Flush(ctx); err != nil {
		return nil, err
	}
	s.pending.Wait()
	acks := make(map[TopicPartition]int64, len(s.acks))
	for tp, pa := range s.acks {
		acks[tp] = pa.n
	}
	return acks, nil
}

// LastOffset returns the offset of the last record of the just committed
// transaction acknowledged on a partition, and whether there is one. Call
// it between Commit and the next Begin.
func (s *Sink) LastOffset(topic string, partition int32) (int64, bool) {
	pa := s.acks[TopicPartition{topic, partition}]
	if pa == nil {
		return 0, false
	}
	return pa.last, true
}

// Produced returns the records and bytes produced in the open transaction.
func (s *Sink) Produced() (records, bytes int64) { return s.produced.Load(), s.bytes.Load() }

// Err returns the first produce error of the open transaction, if any.
func (s *Sink) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.firstErr == nil {
		return nil
	}
	return s.firstErr
}

// Commit flushes every produced record, waits for each to be acknowledged,
// puts the consumed offsets into the transaction and commits it.
//
// It returns (true, nil) only when the broker confirmed the commit. (false,
// nil) means the transaction was aborted cleanly (the group rebalanced) and
// consumption was rewound to the committed offsets. An error means it was
// not committed: a *ProduceError (aborted), or an *UnknownOutcomeError, after
// which the caller must Rebuild.
func (s *Sink) Commit(ctx context.Context) (bool, error) {
	if err := s.sess.Load().Client().Flush(ctx); err != nil {
		return false, &UnknownOutcomeError{Err: fmt.Errorf("flushing: %w", err)}
	}
	s.pending.Wait() // every promise has run: firstErr is final
	if perr := s.Err(); perr != nil {
		if _, err := s.sess.Load().End(ctx, kgo.TryAbort); err != nil {
			return false, &UnknownOutcomeError{Err: errors.Join(perr, err)}
		}
		return false, perr
	}
	if s.produced.Load() == 0 && s.sess.Load().Client().UncommittedOffsets() == nil {
		// Nothing was produced and no offset moved: there is nothing to
		// commit, and ending the transaction would cost half a second.
		// The client learns that the brokers support stable offset
		// fetches (KIP-447) only from a TxnOffsetCommit answer; a commit
		// without offsets sends none, so it takes the brokers for old ones
		// and holds the next End for 500 ms to let their markers spread.
		// An idle pipeline's every checkpoint took that long. The open
		// transaction has sent nothing, so it is kept for the next
		// checkpoint. A rebalance meanwhile makes the next commit abort,
		// as it would have made this one: the next checkpoint replays.
		s.keptOpen = true
		return true, nil
	}
	if s.connTrouble.Load() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, endLeash)
		defer cancel()
	}
	committed, err := s.sess.Load().End(ctx, kgo.TryCommit)
	if err != nil {
		if s.connTrouble.Load() && errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("a broker connection failed during the checkpoint, and ending its transaction took longer than %s: %w", endLeash, err)
		}
		return false, &UnknownOutcomeError{Err: err}
	}
	return committed, nil
}

// Abort aborts the open transaction, dropping buffered records, and rewinds
// consumption to the committed offsets.
func (s *Sink) Abort(ctx context.Context) error {
	s.keptOpen = false
	_, err := s.sess.Load().End(ctx, kgo.TryAbort)
	if err != nil {
		// Records may still be in flight to a broker that stopped
		// answering: waiting for them could hang. The caller rebuilds,
		// and closing the client fails them.
		return &UnknownOutcomeError{Err: err}
	}
	s.pending.Wait()
	return nil
}

// Rebuild closes the client and makes a new one with the same transactional
// id and group instance id. The new producer's initialisation fences the old
// one and completes or aborts its open transaction on the broker; the group
// hands back our partitions and the stable committed offsets.
func (s *Sink) Rebuild(ctx context.Context) error {
	s.closeClient(ctx)
	return s.open()
}

// Close aborts any open transaction and closes the client. It does not leave
// the group: with static membership a restarted instance takes its
// partitions straight back.
func (s *Sink) Close(ctx context.Context) {
	s.closeClient(ctx)
}

func (s *Sink) closeClient(ctx context.Context) {
	if s.closed {
		return
	}
	// Ending a transaction that is not open is a no-op; one that is open
	// must not be left for the broker's time-out to find.
	s.keptOpen = false
	if _, err := s.sess.Load().End(ctx, kgo.TryAbort); err != nil {
		s.log.Debug("aborting before close", "err", err)
	}
	s.sess.Load().CloseAllowingRebalance()
	s.pending.Wait()
	s.closed = true
}
