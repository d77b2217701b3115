// Package pipeline is the runtime: records, the operator graph, tasks and
// the checkpoint coordinator that commits outputs and consumed offsets in
// one Kafka transaction.
package pipeline

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/offsets"
	"github.com/pipeline-run/pipeline/pipeline/state"
	"github.com/pipeline-run/pipeline/txsink"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
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

	stats counters
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
func New(cfg *config.Config, reg *Registry, opts ...Option) (*Pipeline, error) {
	g, err := Build(cfg, reg)
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

// CheckpointID numbers the checkpoints of one run.
type CheckpointID uint64

// Checkpoint describes one finished checkpoint.
type Checkpoint struct {
	ID        CheckpointID
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
}

type counters struct {
	in, out, dead, committed, aborted, rebuilds, restored atomic.Int64
	repartitioned                                         atomic.Int64
	stateKeys, stateBytes, stateDisk                      atomic.Int64 // as of the last checkpoint
	restoring                                             atomic.Int64
}

// Stats returns the running totals.
func (p *Pipeline) Stats() Stats {
	return Stats{
		RecordsIn: p.stats.in.Load(), RecordsOut: p.stats.out.Load(), Repartitioned: p.stats.repartitioned.Load(), DeadLetters: p.stats.dead.Load(),
		Committed: p.stats.committed.Load(), Aborted: p.stats.aborted.Load(), Rebuilds: p.stats.rebuilds.Load(),
		Restored: p.stats.restored.Load(), StateKeys: p.stats.stateKeys.Load(), StateBytes: p.stats.stateBytes.Load(),
		StateDisk: p.stats.stateDisk.Load(), Restoring: p.stats.restoring.Load(),
	}
}

// Run runs the pipeline until ctx is done, then commits (or aborts) the
// open checkpoint and returns nil. It has checkpoint.timeout from the end of
// ctx to do so: past that grace period the checkpoint is not committed,
// nothing waits for the broker any more, and Run returns nil all the same.
// It returns an error for anything that stops it earlier: a record failing
// with no dead-letter topic, a fence by a live twin, a setup problem.
func (p *Pipeline) Run(ctx context.Context) error {
	cfg := p.cfg
	base, err := ClientOpts(cfg, p.seeds, p.log)
	if err != nil {
		return err
	}
	seeds := p.seeds
	if len(seeds) == 0 {
		seeds = cfg.Brokers.Addrs
	}
	if err := dialCheck(ctx, seeds, 30*time.Second); err != nil {
		return err
	}
	admCl, err := kgo.NewClient(base...)
	if err != nil {
		return err
	}
	adm := kadm.NewClient(admCl)
	defer adm.Close()
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	lim, err := prepare(sctx, adm, cfg, p.g, p.log)
	cancel()
	if err != nil {
		return err
	}

	rt := &runtime{
		p:          p,
		g:          p.g,
		cfg:        cfg,
		log:        p.log,
		tasks:      map[TaskID]*task{},
		restores:   map[TaskID]*restoring{},
		parts:      map[TaskID]map[string]bool{},
		stages:     make([]*stage, len(p.g.nodes)),
		track:      offsets.NewTracker(),
		runID:      newRunID(),
		changelogs: make([]string, len(p.g.nodes)),
		restoreCtx: context.WithoutCancel(ctx),
		restoreCl:  admCl,
		clientOpts: base,
		room:       make(chan struct{}, 1),
		limits:     lim,
		dlqLines:   rateLog{every: time.Second},
	}
	manual := map[string]bool{}
	if cfg.Audit.Enabled {
		manual[cfg.Audit.Topic] = true
	}
	for _, n := range p.g.nodes {
		if n.stateful() != nil {
			rt.changelogs[n.idx] = ChangelogTopic(cfg.Name, n.name)
			manual[rt.changelogs[n.idx]] = true
		}
	}
	if rt.backend, err = openBackend(cfg); err != nil {
		return err
	}
	defer rt.backend.Close()
	// Produces must not fail because shutdown began: the last checkpoint
	// still commits what it read. They fail once the grace period is over.
	gr := startGrace(ctx, cfg.Checkpoint.Timeout, p.log)
	defer gr.close()
	rt.hard = gr.hard
	rt.produce = func(r *kgo.Record) { rt.sink.Produce(gr.hard, r) }
	opts := append(transactOpts(cfg, base, p.g.SourceTopics(), rt.revoked, groupErrors{rt}),
		kgo.RecordPartitioner(manualPartitioner{manual: manual, byKey: kgo.StickyKeyPartitioner(nil)}))
	opts = append(opts, kgo.ProducerBatchMaxBytesFn(lim.batch),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { rt.assigned(m) }))
	opts = append(opts, p.extra...)
	rt.sink, err = txsink.New(opts, p.log)
	if err != nil {
		return err
	}
	for _, n := range p.g.nodes {
		if n.parallel == nil {
			continue
		}
		st, err := startStage(rt, n.parallel)
		if err != nil {
			rt.shutdown()
			return err
		}
		rt.stages[n.idx] = st
	}
	p.log.Info("pipeline running", "name", cfg.Name, "instance", cfg.InstanceID, "group", cfg.Group,
		"transactional_id", cfg.Transactions.ID(cfg.InstanceID), "checkpoint_interval", cfg.Checkpoint.Interval,
		"transaction_timeout", cfg.Transactions.Timeout, "graph", p.g.Summary())
	err = rt.loop(ctx)
	gr.begin() // the loop may have stopped by itself: that shutdown is bounded too
	rt.shutdown()
	st := p.Stats()
	p.log.Info("pipeline stopped", "records_in", st.RecordsIn, "records_out", st.RecordsOut, "repartitioned", st.Repartitioned, "dead_letters", st.DeadLetters,
		"checkpoints_committed", st.Committed, "checkpoints_aborted", st.Aborted, "state_keys", st.StateKeys, "state_bytes", st.StateBytes, "err", err)
	return err
}

// runtime is one run's moving parts. The coordinator goroutine owns the
// loop; tasks, workers and client callbacks reach it through the few
// guarded fields below.
type runtime struct {
	p       *Pipeline
	g       *Graph
	cfg     *config.Config
	log     *slog.Logger
	sink    *txsink.Sink
	produce func(*kgo.Record) // into the open transaction
	stages  []*stage          // by node index
	track   *offsets.Tracker
	nextID  CheckpointID
	runID   string
	// cadence is when the last checkpoint stopped reading, if it read
	// for its whole interval and committed; zero otherwise. See nextDeadline.
	cadence time.Time
	// lastCommit is how long the last checkpoint's commit phase took, if
	// it committed; zero otherwise. See nextDeadline.
	lastCommit time.Duration

	// limits are the largest batches and records the written topics
	// take; nil without a cluster (tests running a graph offline).
	limits *limits

	backend    state.Backend
	changelogs []string // by node index, for stateful steps
	restoreCtx context.Context
	// restoreCl reads changelogs. Not the transactional client: its
	// Fetch requests would queue behind the consumer's long poll on the
	// same connection, and every restore would wait out a poll.
	restoreCl *kgo.Client
	// clientOpts connect a client to the cluster: a restore apart from
	// the checkpoints reads with a client of its own (restore.go).
	clientOpts []kgo.Opt

	// hard is cancelled when the shutdown grace period is over (see
	// grace): produces, flushes and commits stop waiting for the broker.
	hard context.Context

	// mu guards tasks, restores, parts and kept, and every send to a
	// task's queue, so a revoked task is never sent work after it stopped.
	mu       sync.Mutex
	tasks    map[TaskID]*task
	restores map[TaskID]*restoring      // tasks restoring apart from the checkpoints (restore.go)
	parts    map[TaskID]map[string]bool // topics assigned per partition number
	// kept is, after a rebuild, the tasks whose state was kept for the
	// new client; see assigned.
	kept map[TaskID]bool

	// rebuilding is set while the client is rebuilt: its revoke callbacks
	// then keep the state. clientGen counts the clients (coordinator
	// only): a new one has no partition paused.
	rebuilding atomic.Bool
	clientGen  uint64

	fatalMu sync.Mutex
	fatal   error
	hasErr  atomic.Bool

	dlqLines rateLog // "record sent to the dead-letter topic": at most one a second

	// queued counts the records handed to tasks and not yet processed;
	// see waitForRoom. room gets a token when a task brings it to half
	// its bound or below.
	queued atomic.Int64
	room   chan struct{}

	// internalOut counts the records key_by steps wrote to repartition
	// topics in the open checkpoint: they are not outputs.
	internalOut atomic.Int64
}

// Produce sends an output (a sink's record or a dead letter) within the
// open transaction. Changelog and progress records go through produce.
func (rt *runtime) Produce(r *kgo.Record) {
	rt.produce(r)
}

func (rt *runtime) failed() bool { return rt.hasErr.Load() }

// recordLimit is the largest record topic takes (see limits), and the
// setting that makes it so.
func (rt *runtime) recordLimit(topic string) (int, string) {
	if rt.limits == nil {
		return (&limits{batchMax: rt.cfg.Producer.BatchMaxBytes}).record(topic)
	}
	return rt.limits.record(topic)
}

func (rt *runtime) fail(err error) {
	rt.fatalMu.Lock()
	if rt.fatal == nil {
		rt.fatal = err
	}
	rt.fatalMu.Unlock()
	rt.hasErr.Store(true)
}

func (rt *runtime) fatalErr() error {
	rt.fatalMu.Lock()
	defer rt.fatalMu.Unlock()
	return rt.fatal
}

// recordFailed routes a failed record to the dead-letter topic, inside the
// open transaction, with the error and the source position in headers.
func (rt *runtime) recordFailed(e *RecordError, r *Record) {
	if rt.g.dlq == "" {
		rt.fail(fmt.Errorf("%w (no dead_letter topic is configured, so the pipeline stops; nothing after the last checkpoint is committed)", e))
		return
	}
	o := r.origin
	kr := &kgo.Record{Topic: rt.g.dlq, Key: o.Key, Value: o.Value, Timestamp: o.Timestamp}
	kr.Headers = append(make([]kgo.RecordHeader, 0, len(o.Headers)+5), o.Headers...)
	kr.Headers = append(kr.Headers,
		kgo.RecordHeader{Key: HeaderError, Value: []byte(e.Err.Error())},
		kgo.RecordHeader{Key: HeaderStep, Value: []byte(e.Step)},
		kgo.RecordHeader{Key: HeaderTopic, Value: []byte(o.Topic)},
		kgo.RecordHeader{Key: HeaderPartition, Value: fmt.Appendf(nil, "%d", o.Partition)},
		kgo.RecordHeader{Key: HeaderOffset, Value: fmt.Appendf(nil, "%d", o.Offset)},
	)
	// The input fitted its topic, but not necessarily the dead-letter
	// topic's limit with the error headers added: cut the value rather
	// than fail the transaction over and over.
	if limit, _ := rt.recordLimit(rt.g.dlq); limit > 0 {
		if size := outputSize(kr); size > limit {
			orig := len(kr.Value)
			kr.Value = kr.Value[:max(0, len(kr.Value)-(size-limit)-64)]
			kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: HeaderTruncated, Value: fmt.Appendf(nil, "%d", orig)})
		}
	}
	rt.Produce(kr)
	rt.p.stats.dead.Add(1)
	rt.dlqLines.log(rt.log, slog.LevelWarn, "record sent to the dead-letter topic", "err", e, "dead_letter_topic", rt.g.dlq)
}

// Headers set on dead-letter records.
const (
	HeaderError     = "pipeline.error"
	HeaderStep      = "pipeline.step"
	HeaderTopic     = "pipeline.source.topic"
	HeaderPartition = "pipeline.source.partition"
	HeaderOffset    = "pipeline.source.offset"
	// HeaderTruncated is set, to the original length, on a dead letter
	// whose value was cut to fit producer.batch_max_bytes.
	HeaderTruncated = "pipeline.truncated"
)

// loop runs checkpoints until ctx is done or something fatal happens. What
// follows a checkpoint that did not commit is recovery's decision.
func (rt *runtime) loop(ctx context.Context) error {
	rec := newRecovery(rt.cfg, rt.log)
	for {
		cp := rt.checkpoint(ctx)
		if rt.p.obs != nil {
			rt.p.obs(cp)
		}
		if fatal := rt.fatalErr(); fatal != nil {
			return fatal
		}
		d := rec.decide(cp, time.Now())
		if d.next == stop {
			return d.err
		}
		if ctx.Err() != nil {
			return nil
		}
		if d.next == rebuild {
			if err := rt.rebuild(ctx); err != nil {
				return err
			}
		}
		if d.wait > 0 {
			t := time.NewTimer(d.wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
		}
	}
}

func openBackend(cfg *config.Config) (state.Backend, error) {
	if cfg.State.Backend == "pebble" {
		b, err := state.OpenPebble(cfg.State.Dir)
		if err != nil {
			return nil, fmt.Errorf("state.dir: %w", err)
		}
		return b, nil
	}
	return state.NewMemory(), nil
}

func newRunID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// refusedByBroker reports whether err is a produce error no retry fixes.
func refusedByBroker(err error) bool {
	var pe *txsink.ProduceError
	if !errors.As(err, &pe) {
		return false
	}
	var ke *kerr.Error
	return errors.As(pe.Err, &ke) && !ke.Retriable
}

func (rt *runtime) rebuild(ctx context.Context) error {
	rt.p.stats.rebuilds.Add(1)
	cctx, cancel := context.WithTimeout(rt.hard, rt.cfg.Checkpoint.Timeout)
	defer cancel()
	// Before the new client exists: its first assignment may come at
	// once, and must find what was kept (see assigned).
	rt.mu.Lock()
	rt.kept = map[TaskID]bool{}
	for id := range rt.tasks {
		rt.kept[id] = true
	}
	for id := range rt.restores {
		rt.kept[id] = true
	}
	rt.mu.Unlock()
	rt.rebuilding.Store(true)
	defer rt.rebuilding.Store(false)
	rt.dropTasks()
	rt.clientGen++
	return rt.sink.Rebuild(cctx)
}

// checkpoint reads for one interval (or max_records), then runs the
// barrier, prepare and commit phases.
func (rt *runtime) checkpoint(ctx context.Context) Checkpoint {
	rt.addRestored()
	rt.nextID++
	cp := Checkpoint{ID: rt.nextID}
	start := time.Now()
	if err := rt.sink.Begin(); err != nil {
		// The client refuses to begin only after a fatal error of its
		// own, which a new client may not repeat: rebuild.
		cp.Err, cp.rebuild = fmt.Errorf("beginning checkpoint %d: %w", cp.ID, err), true
		rt.p.stats.aborted.Add(1)
		return cp
	}
	rt.track.Begin()
	rt.internalOut.Store(0)
	deadline := nextDeadline(rt.cadence, start, rt.cfg.Checkpoint.Interval, rt.lastCommit)
	rt.cadence, rt.lastCommit = time.Time{}, 0
	max := rt.cfg.Checkpoint.MaxRecords
	fullInterval := false
	// The last barrier left every task idle.
	rt.queued.Store(0)
	for cp.Records < max && ctx.Err() == nil && !rt.failed() {
		pctx, cancel := context.WithDeadline(ctx, deadline)
		room := rt.waitForRoom(pctx)
		if room == 0 {
			cancel()
			fullInterval = ctx.Err() == nil
			break
		}
		n := min(rt.cfg.Consumer.MaxPollRecords, max-cp.Records, room)
		fetches := rt.sink.Poll(pctx, n)
		cancel()
		if err := rt.fetchErr(fetches); err != nil {
			cp.Err = err
			cp.rebuild = true
			break
		}
		n, internal := rt.dispatch(fetches)
		cp.Records += n
		cp.Internal += internal
		if !time.Now().Before(deadline) {
			fullInterval = true
			break
		}
	}

	// Barrier and prepare: every task finishes what it was given, parallel
	// stages drain and holding operators flush, in graph order.
	commitStart := time.Now()
	rt.barrier()
	cp.Barrier = time.Since(commitStart)
	if cp.Err == nil && rt.hard.Err() != nil {
		// What the barrier waited for failed rather than finished.
		cp.Err = fmt.Errorf("checkpoint %d: %w (checkpoint.timeout, %s)", cp.ID, errGraceOver, rt.cfg.Checkpoint.Timeout)
	}
	// Every output so far went through Produce; the changelog and
	// progress records come after.
	cp.Produced, _ = rt.sink.Produced()
	cp.Produced -= rt.internalOut.Load()
	if cp.Err == nil && !rt.failed() {
		rt.logChanges()
	}
	_, cp.Bytes = rt.sink.Produced()
	cctx, cancel := context.WithTimeout(rt.hard, rt.cfg.Checkpoint.Timeout)
	defer cancel()
	if cp.Err == nil && !rt.failed() && rt.cfg.Audit.Enabled && (cp.Records > 0 || cp.Produced > 0) {
		// The progress record needs the per-partition counts, known only
		// once every output is acknowledged.
		acks, err := rt.sink.Flush(cctx)
		if err != nil {
			cp.Err, cp.rebuild = fmt.Errorf("checkpoint %d: flushing: %w", cp.ID, err), true
		} else if rt.sink.Err() == nil {
			rt.produce(rt.progressRecord(cp.ID, acks))
		}
	}
	if cp.Err == nil && !rt.failed() && rt.p.hook != nil {
		if err := rt.p.hook(cp); err != nil {
			cp.Err = fmt.Errorf("checkpoint %d: before commit: %w", cp.ID, err)
		}
	}
	if cp.Err != nil || rt.failed() {
		if ctx.Err() != nil || rt.failed() || cp.rebuild {
			// The client is closed next, by shutdown or by the rebuild,
			// which aborts the transaction. Abort would wait for an answer
			// to every record in flight, which a stalled broker never
			// gives; closing the client fails them instead.
		} else if err := rt.sink.Abort(cctx); err != nil {
			cp.rebuild = true
			if cp.Err == nil {
				cp.Err = err
			}
		}
		rt.track.Abort()
		rt.settleStores(false)
		rt.p.stats.aborted.Add(1)
		cp.Duration = time.Since(start)
		rt.sink.AllowRebalance()
		return cp
	}

	if rt.p.fault != nil && cp.Records > 0 {
		rt.p.fault(BeforeCommit, cp)
	}
	// Commit: offsets join the transaction, which commits.
	committed, err := rt.sink.Commit(cctx)
	cp.Commit = time.Since(commitStart)
	cp.Duration = time.Since(start)
	cp.Err = err
	var unknown *txsink.UnknownOutcomeError
	cp.rebuild = errors.As(err, &unknown)
	if !committed {
		rt.track.Abort()
		rt.settleStores(false)
		rt.p.stats.aborted.Add(1)
		if err != nil {
			err = fmt.Errorf("checkpoint %d: %w", cp.ID, err)
			cp.Err = err
		}
		rt.sink.AllowRebalance()
		return cp
	}
	cp.Committed = true
	if fullInterval {
		rt.cadence = deadline
	}
	rt.lastCommit = cp.Commit
	cp.Ranges = rt.track.Commit()
	if rt.p.fault != nil && cp.Records > 0 {
		rt.p.fault(AfterCommit, cp)
	}
	rt.settleStores(true)
	rt.p.stats.committed.Add(1)
	rt.p.stats.in.Add(int64(cp.Records - cp.Internal))
	rt.p.stats.repartitioned.Add(int64(cp.Internal))
	rt.p.stats.out.Add(cp.Produced)
	if cp.Records > 0 {
		rt.log.Debug("checkpoint committed", "checkpoint", cp.ID, "records", cp.Records, "produced", cp.Produced,
			"duration", cp.Duration, "commit", cp.Commit, "barrier", cp.Barrier)
	}
	// Only now may a waiting rebalance take partitions away: nothing is
	// in flight.
	rt.sink.AllowRebalance()
	return cp
}

// nextDeadline returns when a checkpoint beginning at start stops reading,
// given when the last one did (cadence; zero if it did not read for its
// whole interval or did not commit) and how long its commit took
// (lastCommit; zero if it did not commit).
//
// Checkpoints keep the interval's cadence: the one that begins as its
// predecessor's commit ends reads for the rest of the interval, not a whole
// one more. A record read just after a checkpoint stopped reading then
// waits at most one interval plus one commit to be visible, instead of an
// interval plus two commits. A checkpoint cut short (max_records, an error)
// or an abort starts a new cadence with a whole interval.
//
// But a checkpoint never reads for less time than the last commit took:
// reading stops while a checkpoint commits, and when commits are slow next
// to the interval (a high rate, many partitions, a short interval) they
// would otherwise take most of the time, each one adding its round trips.
// So at most half the time goes to committing; when commits are short, as
// they are below the maximum rate, the cadence is the interval's.
func nextDeadline(cadence, start time.Time, interval, lastCommit time.Duration) time.Time {
	d := start.Add(interval)
	if c := cadence.Add(interval); !cadence.IsZero() && c.After(start) {
		d = c
	}
	if least := start.Add(lastCommit); d.Before(least) {
		d = least
	}
	return d
}

// fetchErr decides which fetch errors end the checkpoint. The client
// retries transient ones itself and reports them only for information.
func (rt *runtime) fetchErr(f kgo.Fetches) error {
	for _, fe := range f.Errors() {
		switch {
		case errors.Is(fe.Err, context.DeadlineExceeded), errors.Is(fe.Err, context.Canceled):
		case errors.Is(fe.Err, kgo.ErrClientClosed):
			return fe.Err
		case txsink.Classify(fe.Err) == txsink.Exit:
			return fmt.Errorf("consuming %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
		default:
			rt.log.Warn("fetch error (retried by the client)", "topic", fe.Topic, "partition", fe.Partition, "err", fe.Err)
		}
	}
	return nil
}

// waitForRoom bounds how far reading runs ahead of the tasks: at most
// consumer.max_poll_records records are handed out and not yet processed.
// Once that many are, it waits until the tasks are down to half, and
// returns how many more may be read (0 if ctx ended first).
//
// The barrier waits for whatever the tasks were handed, and records queued
// at the end of a checkpoint's reading are part of its commit time. With
// four polls queued per task, a stateful step on six partitions that just
// kept up held 60,000-80,000 records at each barrier: 200-700 ms of commit
// at a 100 ms interval, and the next checkpoint read for as long.
func (rt *runtime) waitForRoom(ctx context.Context) int {
	limit := int64(rt.cfg.Consumer.MaxPollRecords)
	for {
		q := rt.queued.Load()
		if q <= limit/2 {
			return int(min(limit-q, limit))
		}
		select {
		case <-rt.room:
		case <-ctx.Done():
			return 0
		}
	}
}

// processed is a task saying it is done with n records it was handed.
func (rt *runtime) processed(n int) {
	if rt.queued.Add(-int64(n)) <= int64(rt.cfg.Consumer.MaxPollRecords)/2 {
		select {
		case rt.room <- struct{}{}:
		default:
		}
	}
}

// dispatch hands each partition's records to its task, in offset order.
func (rt *runtime) dispatch(f kgo.Fetches) (n, internal int) {
	var held []*restoring
	rt.mu.Lock()
	f.EachPartition(func(p kgo.FetchTopicPartition) {
		if len(p.Records) == 0 {
			return
		}
		id := TaskID(p.Partition)
		if rt.parts[id] == nil {
			rt.parts[id] = map[string]bool{}
		}
		rt.parts[id][p.Topic] = true
		t, ok := rt.tasks[id]
		if !ok {
			r := rt.restores[id]
			if r == nil {
				var err error
				if t, r, err = rt.startTask(id); err != nil {
					rt.fail(err)
					return
				}
			}
			if r != nil {
				// Not handed out, not observed: consumption goes back
				// to these records (holdBack), and the offsets this
				// checkpoint commits for the partition do not move.
				rt.restores[id] = r
				r.hold(p)
				held = append(held, r)
				return
			}
			rt.tasks[id] = t
		}
		rt.track.Observe(p.Topic, p.Partition, p.Records[0].Offset, p.Records[len(p.Records)-1].Offset)
		rt.queued.Add(int64(len(p.Records)))
		t.in <- work{recs: p.Records, flush: -1}
		n += len(p.Records)
		if src := rt.g.byTopic[p.Topic]; src != nil && src.internal {
			internal += len(p.Records)
		}
	})
	rt.mu.Unlock()
	if len(held) > 0 {
		rt.holdBack(held)
	}
	return n, internal
}

// barrier returns once every record handed out has been fully processed:
// task queues empty, parallel stages drained, and operators that hold
// records flushed, in topological order so that what one releases reaches
// the next before it is flushed in turn.
func (rt *runtime) barrier() {
	rt.syncTasks(-1)
	for _, n := range rt.g.nodes {
		if st := rt.stages[n.idx]; st != nil {
			st.drain()
			continue
		}
		if rt.anyFlusher(n) {
			rt.syncTasks(n.idx)
			// What it released may have gone to a parallel stage further
			// down, which the loop drains when it gets there.
		}
	}
}

func (rt *runtime) anyFlusher(n *node) bool {
	if n.kind != stepNode {
		return false
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for _, t := range rt.tasks {
		if _, ok := t.ops[n.idx].(Flusher); ok {
			return true
		}
	}
	return false
}

// syncTasks sends every task a barrier (flushing node flush, if >= 0) and
// waits for all of them to answer.
func (rt *runtime) syncTasks(flush int) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	acks := make([]chan struct{}, 0, len(rt.tasks))
	for _, t := range rt.tasks {
		c := make(chan struct{})
		t.in <- work{flush: flush, barrier: c}
		acks = append(acks, c)
	}
	for _, c := range acks {
		<-c
	}
}

// revoked runs on the client's group goroutine when partitions are taken
// away. Rebalances are held until a checkpoint is done, so the tasks are
// idle; a task closes once no topic of its partition number is left.
func (rt *runtime) revoked(m map[string][]int32) {
	if rt.rebuilding.Load() {
		// The client closing for a rebuild gives its partitions up; the
		// new one takes them back. dropTasks closes the tasks; their
		// state, and the restores under way, are kept for it.
		return
	}
	var stop []*task
	var restores []*restoring
	rt.mu.Lock()
	for topic, parts := range m {
		for _, p := range parts {
			id := TaskID(p)
			delete(rt.parts[id], topic)
			if len(rt.parts[id]) == 0 {
				if t, ok := rt.tasks[id]; ok {
					stop = append(stop, t)
					delete(rt.tasks, id)
				}
				if r, ok := rt.restores[id]; ok {
					restores = append(restores, r)
					delete(rt.restores, id)
				}
				delete(rt.parts, id)
			}
		}
	}
	rt.mu.Unlock()
	for _, t := range stop {
		t.stop()
		rt.dropState(t.id)
	}
	for _, r := range restores {
		stopRestore(r)
		// A paused partition stays paused through rebalances: should it
		// come back, it must be fetched.
		rt.sink.Client().ResumeFetchPartitions(rt.partitionsOf(r.id))
		rt.dropState(r.id)
	}
	if len(stop)+len(restores) > 0 {
		rt.log.Info("tasks closed after their partitions were revoked", "tasks", len(stop), "restoring", len(restores))
	}
}

// assigned runs on the client's group goroutine when partitions are
// assigned. The first assignment after a rebuild drops the state kept for
// tasks the new client was not given back.
func (rt *runtime) assigned(m map[string][]int32) {
	rt.mu.Lock()
	kept := rt.kept
	rt.kept = nil
	var restores []*restoring
	for id := range kept {
		for _, parts := range m {
			for _, p := range parts {
				if TaskID(p) == id {
					delete(kept, id)
				}
			}
		}
	}
	for id := range kept {
		if r, ok := rt.restores[id]; ok {
			restores = append(restores, r)
			delete(rt.restores, id)
		}
	}
	rt.mu.Unlock()
	for _, r := range restores {
		stopRestore(r)
	}
	for id := range kept {
		rt.dropState(id)
	}
}

// groupErrors hears the group management errors of the client. A
// FENCED_INSTANCE_ID there means another member joined with our
// instance_id: a twin. It stops the pipeline at once, rather than at the
// next poll, which a producer fence by the same twin can come before.
type groupErrors struct{ rt *runtime }

func (h groupErrors) OnGroupManageError(err error) {
	if errors.Is(err, kerr.FencedInstanceID) {
		h.rt.fail(zombieErr(h.rt.cfg, err))
	}
}

// shutdown stops everything the run started, in order: tasks and workers
// first (the last barrier left them idle; nothing they could still produce
// would be committed), then the client, which aborts anything still open.
func (rt *runtime) shutdown() {
	rt.mu.Lock()
	tasks, restores := rt.tasks, rt.restores
	rt.tasks, rt.restores = map[TaskID]*task{}, map[TaskID]*restoring{}
	rt.mu.Unlock()
	for _, t := range tasks {
		t.stop()
	}
	for _, r := range restores {
		stopRestore(r)
	}
	for _, st := range rt.stages {
		if st != nil {
			st.stop()
		}
	}
	if rt.sink != nil {
		// Past the grace period the abort is not even tried: the client
		// closes at once and the broker aborts the transaction when this
		// transactional id next starts, or after transactions.timeout.
		ctx, cancel := context.WithTimeout(rt.hard, rt.cfg.Checkpoint.Timeout)
		defer cancel()
		rt.sink.Close(ctx)
	}
}

// errGraceOver fails the checkpoint that was still open when the shutdown
// grace period ended.
var errGraceOver = errors.New("the shutdown grace period ended before the checkpoint was done")

// grace bounds shutdown. Once it begins (Run's context is done, or the loop
// stopped by itself) the open checkpoint has checkpoint.timeout to commit
// or abort. Then hard is cancelled: produces waiting for room in a full
// buffer fail at once, and so does every wait of the checkpoint on the
// broker, so a broker that stopped answering cannot hold the process. The
// checkpoint is not committed; its records are read again by the next run.
type grace struct {
	hard  context.Context
	begin context.CancelFunc
	stop  context.CancelFunc
	done  chan struct{}
}

func startGrace(ctx context.Context, d time.Duration, log *slog.Logger) *grace {
	stopping, begin := context.WithCancel(ctx)
	hard, stop := context.WithCancel(context.WithoutCancel(ctx))
	g := &grace{hard: hard, begin: begin, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(g.done)
		select {
		case <-stopping.Done():
		case <-hard.Done():
			return
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			log.Warn("shutdown grace period over: the open checkpoint stops waiting for the broker and aborts", "checkpoint_timeout", d)
			stop()
		case <-hard.Done():
		}
	}()
	return g
}

// close ends the grace period's goroutine, once nothing uses hard.
func (g *grace) close() {
	g.begin()
	g.stop()
	<-g.done
}
