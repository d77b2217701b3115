package engine

import (
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/offsets"
	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/state"
	"github.com/pipeline-run/pipeline/wire"
)

// Pipeline runs one configured graph.
type Pipeline struct {
	cfg   *config.Config
	g     *Graph
	log   *slog.Logger
	seeds []string
	extra []kgo.Opt
	obs   func(Checkpoint)
	hook  func(Checkpoint) error
	fault func(FaultPoint, Checkpoint)
	clock state.Clock // state TTLs; nil: the system clock (WithClock)

	// heldAtBarrier counts barriers that found a parallel stage still
	// holding records: tests use it to show the case they exercise
	// happened.
	heldAtBarrier atomic.Int64
	// skipDrain, set by tests only (withSkippedDrain), makes barriers skip
	// draining parallel stages and calls it instead, with a way to count
	// what the stage still holds, to show that the drain is what keeps the
	// outputs exact. It runs on the coordinator goroutine.
	skipDrain func(inflight func() int64)

	// purgeEvery and hangingEvery, set by tests only, replace the
	// constants of those names.
	purgeEvery, hangingEvery time.Duration

	// running is the run under way, for Lag; nil before and after.
	running atomic.Pointer[runtime]

	stats   counters
	health  health
	figures figures
}

// Option configures a Pipeline.
type Option func(*Pipeline)

// WithLogger sets the logger (default: slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(p *Pipeline) { p.log = l } }

// WithSeedBrokers overrides the configured brokers, for the embedded broker.
func WithSeedBrokers(addrs ...string) Option { return func(p *Pipeline) { p.seeds = addrs } }

// WithClientOpts adds options to the transactional client, after the ones
// the configuration implies (tests use it for hooks).
func WithClientOpts(opts ...kgo.Opt) Option {
	return func(p *Pipeline) { p.extra = append(p.extra, opts...) }
}

// WithCheckpointObserver calls fn after every checkpoint, committed or not,
// on the coordinator goroutine; fn must return quickly.
func WithCheckpointObserver(fn func(Checkpoint)) Option { return func(p *Pipeline) { p.obs = fn } }

// WithBeforeCommit calls fn after a checkpoint's barrier and before its
// commit; an error from fn aborts the checkpoint as a failed produce would,
// and the records are replayed. It exists to inject faults (tests, chaos
// drills) on any broker; fn runs on the coordinator goroutine.
func WithBeforeCommit(fn func(Checkpoint) error) Option { return func(p *Pipeline) { p.hook = fn } }

// withSkippedDrain makes barriers skip draining parallel stages, calling
// fn instead (tests only; see Pipeline.skipDrain).
func withSkippedDrain(fn func(inflight func() int64)) Option {
	return func(p *Pipeline) { p.skipDrain = fn }
}

// FaultPoint names a moment of the checkpoint protocol where a fault drill
// can strike (WithFaultPoint).
type FaultPoint string

const (
	// BeforeCommit: outputs, changelog and progress records are written and
	// acknowledged; the transaction is not committed.
	BeforeCommit FaultPoint = "before-commit"
	// AfterCommit: the broker confirmed the commit; the state stores have
	// not recorded it yet.
	AfterCommit FaultPoint = "after-commit"
)

// WithFaultPoint calls fn at each FaultPoint of every checkpoint that read
// records. It exists for fault drills: `pipeline run` uses it to crash
// itself at a chosen point (PIPELINE_CRASH_AT), which shows that a crash
// between the Kafka commit and the local state write loses nothing.
func WithFaultPoint(fn func(FaultPoint, Checkpoint)) Option {
	return func(p *Pipeline) { p.fault = fn }
}

// New builds the graph of cfg with the operators of reg (nil: the built-in
// ones). It does not touch the network.
func New(cfg *config.Config, reg *pipeline.Registry, opts ...Option) (*Pipeline, error) {
	g, err := Check(cfg, nil, reg)
	if err != nil {
		return nil, err
	}
	p := &Pipeline{cfg: cfg, g: g, log: slog.Default()}
	for _, o := range opts {
		o(p)
	}
	return p, nil
}

// Graph returns the pipeline's graph.
func (p *Pipeline) Graph() *Graph { return p.g }

// Checkpoint describes one finished checkpoint.
type Checkpoint struct {
	ID        wire.CheckpointID
	Committed bool
	Err       error         // why it did not commit
	Records   int           // records it covered, those read back from repartition topics included
	Internal  int           // of Records, those read back from repartition topics
	Produced  int64         // outputs written: sink records and dead letters (not repartition, changelog or progress records)
	Bytes     int64         // bytes written, changelog and progress records included
	Duration  time.Duration // from the first poll to the broker's answer
	Commit    time.Duration // barrier, flush and commit
	Barrier   time.Duration // of Commit, waiting for the tasks to finish what they were handed
	Ranges    []offsets.Range

	// rebuild says the client's state is unknown: it must be rebuilt
	// before the next checkpoint.
	rebuild bool
}

// Stats are the running totals of a pipeline.
type Stats struct {
	RecordsIn  int64 // source records covered by committed checkpoints (not those of repartition topics)
	RecordsOut int64 // records written by committed checkpoints to sinks and the dead-letter topic
	// Repartitioned is how many records committed checkpoints read back
	// from the repartition topics of key_by steps.
	Repartitioned int64
	DeadLetters   int64 // input records sent to the dead-letter topic, committed or not
	Committed     int64 // checkpoints committed
	Aborted       int64 // checkpoints aborted
	Rebuilds      int64 // times the transactional client was rebuilt
	Restored      int64 // changelog records replayed into state stores
	StateKeys     int64 // keys in the state stores of this instance (-1: the backend does not count them)
	StateBytes    int64 // memory the state stores hold (the memory backend's data and every uncommitted change)
	StateDisk     int64 // bytes of state on disk (pebble)
	// Restoring is how many tasks are restoring their state apart from
	// the checkpoints; their records wait until they are done.
	Restoring int64
	// TransactionAge is how long the open checkpoint's transaction has
	// been open (0 between checkpoints). The broker aborts it at
	// transactions.timeout.
	TransactionAge time.Duration
	// Rebalances counts the group's assignments this instance received;
	// PartitionsOwned is how many partitions it owns now.
	Rebalances, PartitionsOwned int64
	// HeldPartitions is how many output partitions a transaction open
	// longer than transactions.timeout held back at the last look (each
	// minute): their read_committed readers are stalled.
	HeldPartitions int64
	// LateRecords is how many records came after their windows closed
	// (past allowed_lateness) and were dropped, at steps with no late
	// output, committed or not.
	LateRecords int64
}

type counters struct {
	in, out, dead, committed, aborted, rebuilds, restored atomic.Int64
	repartitioned                                         atomic.Int64
	stateKeys, stateBytes, stateDisk                      atomic.Int64 // as of the last checkpoint
	restoring                                             atomic.Int64
	late                                                  atomic.Int64
	txnBegan                                              atomic.Int64 // Unix nanoseconds; 0: no checkpoint open
	rebalances, owned                                     atomic.Int64
	held                                                  atomic.Int64
	// Records polled and not handed out: read again by the next
	// checkpoint (reread) or held for a restoring task (heldRecords,
	// counted again each time they are polled).
	reread, heldRecords atomic.Int64
}

// Stats returns the running totals.
func (p *Pipeline) Stats() Stats {
	var age time.Duration
	if began := p.stats.txnBegan.Load(); began != 0 {
		age = time.Since(time.Unix(0, began))
	}
	return Stats{
		TransactionAge: age,
		RecordsIn:      p.stats.in.Load(), RecordsOut: p.stats.out.Load(), Repartitioned: p.stats.repartitioned.Load(), DeadLetters: p.stats.dead.Load(),
		Committed: p.stats.committed.Load(), Aborted: p.stats.aborted.Load(), Rebuilds: p.stats.rebuilds.Load(), LateRecords: p.stats.late.Load(),
		Rebalances: p.stats.rebalances.Load(), PartitionsOwned: p.stats.owned.Load(), HeldPartitions: p.stats.held.Load(),
		Restored: p.stats.restored.Load(), StateKeys: p.stats.stateKeys.Load(), StateBytes: p.stats.stateBytes.Load(),
		StateDisk: p.stats.stateDisk.Load(), Restoring: p.stats.restoring.Load(),
	}
}
