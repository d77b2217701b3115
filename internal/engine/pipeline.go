// Package engine runs pipelines: the graph builder, tasks, dispatch,
// restores and the checkpoint coordinator that commits outputs, state
// changelogs and consumed offsets in one Kafka transaction. Programs use
// it through package runner and the pipeline command.
package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/internal/fetchpool"
	"github.com/pipeline-run/pipeline/internal/lz4frame"
	"github.com/pipeline-run/pipeline/offsets"
	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/state"
	"github.com/pipeline-run/pipeline/txsink"
	"github.com/pipeline-run/pipeline/wire"
)

// Run runs the pipeline until ctx is done, then commits (or aborts) the
// open checkpoint and returns nil. It has checkpoint.timeout from the end of
// ctx to do so: past that grace period the checkpoint is not committed,
// nothing waits for the broker any more, and Run returns nil all the same.
// It returns an error for anything that stops it earlier: a record failing
// with no dead-letter topic, a fence by a live twin, a setup problem.
func (p *Pipeline) Run(ctx context.Context) error {
	cfg := p.cfg
	p.health.beatTolerance = cfg.Checkpoint.Interval + 2*cfg.Checkpoint.Timeout + 30*time.Second
	p.health.state.Store(phaseStarting)
	defer p.health.state.Store(phaseStopped)
	base, err := ClientOpts(cfg, p.seeds, p.log)
	if err != nil {
		return err
	}
	seeds := p.seeds
	if len(seeds) == 0 {
		seeds = cfg.Brokers.Addrs
	}
	if err := dialCheck(ctx, seeds, 30*time.Second, p.log); err != nil {
		if ctx.Err() != nil {
			return nil // told to stop before it started: nothing ran
		}
		return err
	}
	admCl, err := kgo.NewClient(base...)
	if err != nil {
		return err
	}
	adm := kadm.NewClient(admCl)
	defer adm.Close()
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	stopSaying := sayWhileWaiting(p.log, "checking the cluster: the brokers' transaction limit, the topics, hanging transactions")
	lim, parts, err := prepare(sctx, adm, &rescaler{cl: admCl, base: base, cfg: cfg, g: p.g, log: p.log}, cfg, p.g, p.log)
	stopSaying()
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil // told to stop before it started: nothing ran
		}
		return err
	}
	hctx, stopWatching := context.WithCancel(ctx)
	defer p.watchHanging(hctx, adm)()
	defer stopWatching()

	rt := &runtime{
		p:          p,
		g:          p.g,
		cfg:        cfg,
		log:        p.log,
		tasks:      map[pipeline.TaskID]*task{},
		restores:   map[pipeline.TaskID]*restoring{},
		clientGen:  1, // a restoring's pausedBy starts at 0: no client
		parts:      map[pipeline.TaskID]map[string]bool{},
		stages:     make([]*stage, len(p.g.nodes)),
		track:      offsets.NewTracker(),
		runID:      newRunID(),
		changelogs: make([]string, len(p.g.nodes)),
		restoreCtx: context.WithoutCancel(ctx),
		restoreCl:  admCl,
		clientOpts: base,
		room:       make(chan struct{}, 1),
		limits:     lim,
		topicParts: parts,
		dlqLines:   rateLog{every: time.Second},
		lateLines:  rateLog{every: time.Second},
	}
	manual, marked := map[string]bool{}, map[string]bool{}
	for _, n := range p.g.nodes {
		switch {
		case n.repart != nil && n.repart.broadcast:
			manual[n.repart.topic] = true // each copy names its partition
		case n.repart != nil:
			marked[n.repart.topic] = true
		}
	}
	if cfg.Audit.Enabled {
		manual[cfg.Audit.Topic] = true
	}
	for _, n := range p.g.nodes {
		if n.stateful() != nil {
			rt.changelogs[n.idx] = wire.ChangelogTopic(cfg.Name, n.name)
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
		kgo.RecordPartitioner(manualPartitioner{manual: manual, marked: marked, byKey: kgo.StickyKeyPartitioner(nil)}))
	opts = append(opts, kgo.ProducerBatchMaxBytesFn(lim.batch),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { rt.assigned(m) }))
	if p.g.recycles {
		rt.pool = new(fetchpool.Pool)
		opts = append(opts, kgo.WithPools(rt.pool), kgo.WithDecompressor(lz4frame.NewDecompressor().WithAlloc(rt.pool.Bytes)))
	}
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
	rt.purge = newPurger(rt)
	p.running.Store(rt)
	err = rt.loop(ctx)
	p.running.Store(nil)
	gr.begin() // the loop may have stopped by itself: that shutdown is bounded too
	rt.shutdown()
	rt.purge.wait()
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
	// pool takes the fetched records' memory back, in a graph that
	// recycles it (Graph.recycles); nil otherwise.
	pool   *fetchpool.Pool
	stages []*stage // by node index
	track  *offsets.Tracker
	nextID wire.CheckpointID
	runID  string
	// cadence is when the last checkpoint stopped reading, if it read
	// for its whole interval and committed; zero otherwise. See nextDeadline.
	cadence time.Time
	// lastCommit is how long the last checkpoint's commit phase took, if
	// it committed; zero otherwise. See nextDeadline.
	lastCommit time.Duration

	// limits are the largest batches and records the written topics
	// take; nil without a cluster (tests running a graph offline).
	limits *limits
	// topicParts are the partitions of the topics the pipeline reads;
	// nil without a cluster.
	topicParts map[string]int32

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
	tasks    map[pipeline.TaskID]*task
	restores map[pipeline.TaskID]*restoring      // tasks restoring apart from the checkpoints (restore.go)
	parts    map[pipeline.TaskID]map[string]bool // topics assigned per partition number
	// kept is, after a rebuild, the tasks whose state was kept for the
	// new client; see assigned.
	kept map[pipeline.TaskID]bool
	// owned is when each partition assigned to this instance was
	// assigned, by partition number and topic (rt.own).
	owned map[pipeline.TaskID]map[string]time.Time
	// idleSent is, per key_by node, the partition numbers with no task
	// that this instance said are idle (committed, and in the open
	// checkpoint).
	idleSent, idleSentOpen map[int]map[pipeline.TaskID]bool

	// rebuilding is set while the client is rebuilt: its revoke callbacks
	// then keep the state. clientGen counts the clients (coordinator
	// only): a new one has no partition paused.
	rebuilding atomic.Bool
	clientGen  uint64

	fatalMu sync.Mutex
	fatal   error
	hasErr  atomic.Bool

	dlqLines  rateLog // "record sent to the dead-letter topic": at most one a second
	lateLines rateLog // "late record dropped": at most one a second

	// queued counts the records handed to tasks and not yet processed;
	// see waitForRoom. room gets a token when a task brings it to half
	// its bound or below.
	queued atomic.Int64
	room   chan struct{}

	// polled holds what the coordinator polled and has not handed out
	// yet (coordinator only).
	polled polled
	// lastWhole is how many records the last poll of everything
	// buffered returned (coordinator only; wholePoll).
	lastWhole int
	// handRate is the records per second the last checkpoint that read
	// any handed out while it read (coordinator only; wholePoll).
	handRate float64

	purge *purger // deletes consumed records of repartition topics

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
func (rt *runtime) recordFailed(e *pipeline.RecordError, r *pipeline.Record) {
	rt.recordFailedIn(nil, e, r)
}

// recordFailedIn is recordFailed for a record of the chunk h holds (nil
// for none): the dead letter may be the fetched bytes.
func (rt *runtime) recordFailedIn(h *chunkHold, e *pipeline.RecordError, r *pipeline.Record) {
	if rt.g.dlq == "" {
		rt.fail(fmt.Errorf("%w (no dead_letter topic is configured, so the pipeline stops; nothing after the last checkpoint is committed)", e))
		return
	}
	o := r.Origin()
	if o == nil {
		// A record an operator made of no input (a timer's output): the
		// dead letter holds it as it was when it failed.
		o = &kgo.Record{Topic: r.Source.Topic, Partition: r.Source.Partition, Offset: r.Source.Offset, Timestamp: r.Timestamp}
		o.Key, _ = r.KeyBytes()
		o.Value, _ = r.Value.Encode(pipeline.JSON)
	}
	kr := &kgo.Record{Topic: rt.g.dlq, Key: o.Key, Value: o.Value, Timestamp: o.Timestamp}
	kr.Headers = append(make([]kgo.RecordHeader, 0, len(o.Headers)+5), o.Headers...)
	kr.Headers = append(kr.Headers,
		kgo.RecordHeader{Key: wire.HeaderError, Value: []byte(e.Err.Error())},
		kgo.RecordHeader{Key: wire.HeaderStep, Value: []byte(e.Step)},
		kgo.RecordHeader{Key: wire.HeaderTopic, Value: []byte(o.Topic)},
		kgo.RecordHeader{Key: wire.HeaderPartition, Value: fmt.Appendf(nil, "%d", o.Partition)},
		kgo.RecordHeader{Key: wire.HeaderOffset, Value: fmt.Appendf(nil, "%d", o.Offset)},
	)
	// The input fitted its topic, but not necessarily the dead-letter
	// topic's limit with the error headers added: cut the value rather
	// than fail the transaction over and over.
	if limit, _ := rt.recordLimit(rt.g.dlq); limit > 0 {
		if size := outputSize(kr); size > limit {
			orig := len(kr.Value)
			kr.Value = kr.Value[:max(0, len(kr.Value)-(size-limit)-64)]
			kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: wire.HeaderTruncated, Value: fmt.Appendf(nil, "%d", orig)})
		}
	}
	if h != nil {
		h.tag(kr)
	}
	rt.Produce(kr)
	rt.p.stats.dead.Add(1)
	rt.p.figures.deadLetter(e.Step, deadLetterReason(e))
	rt.dlqLines.log(rt.log, slog.LevelWarn, "record sent to the dead-letter topic", "err", e, "dead_letter_topic", rt.g.dlq)
}

// dropLate counts a late record that step n drops.
func (rt *runtime) dropLate(n *node, r *pipeline.Record) {
	rt.p.stats.late.Add(1)
	rt.lateLines.log(rt.log, slog.LevelWarn, "late record dropped: it came after its window closed (past allowed_lateness); give the step `late: output` to keep such records",
		"step", n.name, "source", r.Source.String(), "event_time", r.Timestamp.UTC().Format(time.RFC3339Nano))
}

// loop runs checkpoints until ctx is done or something fatal happens. What
// follows a checkpoint that did not commit is recovery's decision.
func (rt *runtime) loop(ctx context.Context) error {
	rec := newRecovery(rt.cfg, rt.g, rt.log)
	for {
		cp := rt.checkpoint(ctx)
		rt.p.health.checkpointDone(cp, time.Now())
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

func (rt *runtime) rebuild(ctx context.Context) error {
	rt.p.stats.rebuilds.Add(1)
	cctx, cancel := context.WithTimeout(rt.hard, rt.cfg.Checkpoint.Timeout)
	defer cancel()
	// Before the new client exists: its first assignment may come at
	// once, and must find what was kept (see assigned).
	rt.mu.Lock()
	rt.kept = map[pipeline.TaskID]bool{}
	for id := range rt.tasks {
		rt.kept[id] = true
	}
	for id := range rt.restores {
		rt.kept[id] = true
	}
	rt.mu.Unlock()
	rt.rebuilding.Store(true)
	defer rt.rebuilding.Store(false)
	rt.p.health.rebuilding.Store(true)
	defer rt.p.health.rebuilding.Store(false)
	rt.dropTasks()
	rt.clientGen++
	return rt.sink.Rebuild(cctx)
}
