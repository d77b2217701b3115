package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/internal/engine"
	"github.com/pipeline-run/pipeline/internal/lz4frame"
	"github.com/pipeline-run/pipeline/pipeline"
)

// Arm is one way of copying the input topic to an output topic.
type Arm struct {
	Name string
	// PerInterval says the arm commits on the checkpoint interval, so it
	// runs once per interval swept; the others run once per round.
	PerInterval bool
	// Keep is the arm's filter on input seqs; nil keeps every record.
	Keep func(seq int64) bool
	// Valid checks an output's value beyond its seq; nil checks nothing.
	Valid func(seq int64, value []byte) bool
	// Gate, when set, is the arm's correctness gate instead of the
	// seq-based one (Expect): for an arm whose outputs are not one per
	// input seq, it reads the input topic in back to know what the output
	// topic out must hold. Outputs then says how many outputs that is.
	Gate    func(ctx context.Context, cl *kgo.Client, in, out string) error
	Outputs func(ctx context.Context, cl *kgo.Client, in string) (int64, error)
	// EndAtLastInput says the arm's last output may come before its last
	// input is processed (a window's results come as windows close, and
	// the last ones stay open), so its processing time runs to the later
	// of the moment it polled its last input record and the moment its
	// last output was acknowledged, not to that last output alone.
	EndAtLastInput bool
	// NoLatency, when set, says why latency runs skip the arm.
	NoLatency string
	run       func(ctx context.Context, e *env) error
	// variants, for the limit arm, are the copies each round runs to keep
	// the fastest.
	variants []copyVariant
}

// Expect returns what the arm must write for an input of n records.
func (a *Arm) Expect(n int64) Expect { return Expect{N: n, Keep: a.Keep, Valid: a.Valid} }

// filterMapSteps is the filter-map arm's pipeline: a filter and a map on
// the JSON value. The map keeps seq and ts (for the gate and the latency)
// and the padding (so the output is as large as the input).
const filterMapSteps = `[{filter: "value.seq % 10 != 3"}, {map: "{seq: value.seq, ts: value.ts, pad: value.pad, twice: value.seq * 2}"}]`

// keyedCountSteps is the keyed-count arm's pipeline: a count per key (the
// input's key, by which it is partitioned), emitted on every update with
// the seq and send time of the record that made it, so the gate can check
// each output and the latency can be timed.
const keyedCountSteps = `[{name: count, aggregate: {fields: {count: count, seq: {last: value.seq}, ts: {last: value.ts}}}}]`

// countIsRight checks a keyed-count output: record seq is the
// (seq/numKeys+1)-th of its key, so that is its key's count once every
// record before it was counted exactly once.
func countIsRight(seq int64, v []byte) bool {
	n, ok := intField(v, "count")
	return ok && n == seq/numKeys+1
}

// arms returns the arms named, and why any named arm cannot run.
//
// kstreams is the script that runs the Kafka Streams arms, and noKStreams
// why they cannot run ("" when they can).
func arms(names []string, reg *pipeline.Registry, kstreams, noKStreams string) ([]*Arm, []string) {
	all := map[string]*Arm{
		"limit":      limitArm(),
		"copy":       {Name: "copy", run: runCopyVariant(limitVariants[0])},
		"copy-rc":    {Name: "copy-rc", run: runCopyVariant(copyVariant{name: "copy-rc", opts: []kgo.Opt{kgo.FetchIsolationLevel(kgo.ReadCommitted())}})},
		"peer":       {Name: "peer", PerInterval: true, run: runPeer},
		"pass":       {Name: "pass", PerInterval: true, run: runPipeline("[]")},
		"filter-map": {Name: "filter-map", PerInterval: true, Keep: filterKeeps, run: runPipeline(filterMapSteps)},
	}
	var out []*Arm
	var skipped []string
	for _, n := range names {
		if a, ok := all[n]; ok {
			out = append(out, a)
			continue
		}
		if _, ok := kstreamsArms[n]; ok {
			if noKStreams != "" {
				skipped = append(skipped, n+": skipped: "+noKStreams)
			} else {
				out = append(out, kstreamsArm(n, kstreams))
			}
			continue
		}
		switch n {
		case "keyed-count":
			if slices.Contains(reg.Kinds(), "aggregate") {
				out = append(out, &Arm{Name: n, PerInterval: true, Valid: countIsRight, run: runPipeline(keyedCountSteps)})
			} else {
				skipped = append(skipped, "keyed-count: skipped: the pipeline has no aggregate operator yet (operators: "+strings.Join(reg.Kinds(), ", ")+")")
			}
		case "keyed-count-cp":
			if slices.Contains(reg.Kinds(), "aggregate") {
				var g finalCountGate
				out = append(out, &Arm{Name: n, PerInterval: true, Gate: g.check, Outputs: g.outputs,
					NoLatency: "a key's output comes once per checkpoint, for the last of its records, so most records have no output to time",
					run:       runPipeline(keyedCountCheckpointSteps)})
			} else {
				skipped = append(skipped, "keyed-count-cp: skipped: the pipeline has no aggregate operator (operators: "+strings.Join(reg.Kinds(), ", ")+")")
			}
		case "interval-join":
			if slices.Contains(reg.Kinds(), "interval_join") {
				out = append(out, &Arm{Name: n, PerInterval: true, Valid: pairsItself, run: runPipeline(intervalJoinSteps)})
			} else {
				skipped = append(skipped, "interval-join: skipped: the pipeline has no interval_join operator (operators: "+strings.Join(reg.Kinds(), ", ")+")")
			}
		case "table-join":
			if slices.Contains(reg.Kinds(), "table_join") {
				g := &tableGate{}
				out = append(out, &Arm{Name: n, PerInterval: true, Gate: g.check, Outputs: g.outputs, EndAtLastInput: true,
					NoLatency: "a record waits for the watermark to pass its time, which the input's last records never see",
					run:       runPipeline(tableJoinSteps)})
			} else {
				skipped = append(skipped, "table-join: skipped: the pipeline has no table_join operator (operators: "+strings.Join(reg.Kinds(), ", ")+")")
			}
		case "windowed-count":
			if slices.Contains(reg.Kinds(), "window") {
				g := &windowGate{size: windowMs}
				out = append(out, &Arm{Name: n, PerInterval: true, Gate: g.check, Outputs: g.outputs, EndAtLastInput: true,
					NoLatency: "a window's result stands for every record of the window, so no output times one input record",
					run:       runPipeline(windowedCountSteps)})
			} else {
				skipped = append(skipped, "windowed-count: skipped: the pipeline has no window operator yet (operators: "+strings.Join(reg.Kinds(), ", ")+")")
			}
		}
	}
	return out, skipped
}

// env is what one arm run gets: where to read and write, its identity,
// and the counters the harness watches.
type env struct {
	seeds      []string
	in, out    string
	name       string // unique per run: group, transactional id, pipeline name
	interval   time.Duration
	maxRecords int
	linger     time.Duration
	hooks      *hooks
	lastInput  *lastInputHook // for arms that EndAtLastInput; nil for the others
	log        *slog.Logger

	target    int64         // input records that complete the run; 0: none
	done      chan struct{} // closed once target records are visible
	doneOnce  sync.Once
	doneAt    atomic.Int64 // Unix nanoseconds
	committed atomic.Int64 // input records whose outputs are visible to read_committed readers
	// extCPU and extRSS are the CPU time and peak RSS of an arm run as its
	// own process (Kafka Streams), which stand for the bench process's.
	extCPU  time.Duration
	extRSS  int64
	commits atomic.Int64 // transactions committed with records in them
	commitT atomic.Int64 // their barrier, flush and commit (pipeline arms), in nanoseconds
	aborts  atomic.Int64
}

func newEnv(target int64) *env {
	return &env{target: target, done: make(chan struct{})}
}

// commit counts n more input records whose outputs are visible.
func (e *env) commit(n int64) {
	if c := e.committed.Add(n); e.target > 0 && c >= e.target {
		e.doneOnce.Do(func() {
			e.doneAt.Store(time.Now().UnixNano())
			close(e.done)
		})
	}
}

// hooks timestamps the first batch fetched from the input and the moment
// the last expected output was acknowledged. The same hooks go on every
// arm's client, so every arm is timed alike, from its first fetched batch
// (its start-up, the group join and the pipeline's checks, left out).
type hooks struct {
	in, out    string
	wantAcks   int64
	firstFetch atomic.Int64 // Unix nanoseconds
	acked      atomic.Int64
	lastAck    atomic.Int64 // Unix nanoseconds
}

var (
	_ kgo.HookFetchBatchRead          = (*hooks)(nil)
	_ kgo.HookProduceRecordUnbuffered = (*hooks)(nil)
)

func (h *hooks) OnFetchBatchRead(_ kgo.BrokerMetadata, topic string, _ int32, m kgo.FetchBatchMetrics) {
	if topic == h.in && m.NumRecords > 0 && h.firstFetch.Load() == 0 {
		h.firstFetch.CompareAndSwap(0, time.Now().UnixNano())
	}
}

func (h *hooks) OnProduceRecordUnbuffered(r *kgo.Record, err error) {
	if err == nil && r.Topic == h.out {
		if h.acked.Add(1) == h.wantAcks {
			h.lastAck.Store(time.Now().UnixNano())
		}
	}
}

// lastInputHook notes when an arm polled the last of the input records
// it must process (the want-th polled from topic). It goes only on the
// clients of arms that EndAtLastInput: a hook on every polled record costs
// a little.
type lastInputHook struct {
	topic  string
	want   int64
	polled atomic.Int64
	at     atomic.Int64 // Unix nanoseconds
}

var _ kgo.HookFetchRecordUnbuffered = (*lastInputHook)(nil)

func (h *lastInputHook) OnFetchRecordUnbuffered(r *kgo.Record, polled bool) {
	if polled && r.Topic == h.topic && h.polled.Add(1) == h.want {
		h.at.Store(time.Now().UnixNano())
	}
}

// clientHooks returns the hooks that go on every client of the arm.
func (e *env) clientHooks() []kgo.Hook {
	if e.lastInput != nil {
		return []kgo.Hook{e.hooks, e.lastInput}
	}
	return []kgo.Hook{e.hooks}
}

// processedAt returns when the run's processing ended (Unix
// nanoseconds): the last expected output acknowledged, or, for an arm that
// EndAtLastInput, the later of that and its polling the last input record;
// never after every output was visible, nor without them.
func (e *env) processedAt() int64 {
	done := e.doneAt.Load()
	last := e.hooks.lastAck.Load()
	if e.lastInput != nil {
		last = max(last, e.lastInput.at.Load())
	}
	if last == 0 || last > done {
		last = done
	}
	return last
}

// tuning is the clients' producer and fetch settings, the pipeline's
// defaults (config/settings.go) but for the linger, which -linger sets for
// every arm, given to the baseline arms too so that every arm compresses,
// batches and buffers alike. franz-go's own defaults differ (snappy, a 10
// ms linger, 50,000 buffered records).
func tuning(linger time.Duration) []kgo.Opt {
	return []kgo.Opt{
		kgo.WithCompressor(lz4frame.NewCompressor()),
		kgo.ProducerLinger(linger),
		kgo.ProducerBatchMaxBytes(1 << 20),
		kgo.MaxBufferedRecords(100000),
		kgo.MaxBufferedBytes(256 << 20),
		kgo.FetchMaxBytes(50 << 20),
	}
}

func (e *env) clientOpts() []kgo.Opt {
	opts := append([]kgo.Opt{kgo.SeedBrokers(e.seeds...), kgo.ClientID("bench-" + e.name), kgo.WithHooks(e.clientHooks()...)}, tuning(e.linger)...)
	// The pipeline's decoder, so that the baselines decode as it does.
	return append(opts, kgo.ConsumerGroup(e.name), kgo.ConsumeTopics(e.in), kgo.WithDecompressor(lz4frame.NewDecompressor()))
}

// fetchErr returns the first error of a poll that is not its context
// ending. The client retries transient errors itself.
func fetchErr(f kgo.Fetches) error {
	for _, fe := range f.Errors() {
		if errors.Is(fe.Err, context.Canceled) || errors.Is(fe.Err, context.DeadlineExceeded) {
			continue
		}
		return fmt.Errorf("consuming %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
	}
	return nil
}

// firstErr keeps the first error reported from several goroutines.
type firstErr struct {
	mu  sync.Mutex
	err error
}

func (f *firstErr) set(err error) {
	if err == nil {
		return
	}
	f.mu.Lock()
	if f.err == nil {
		f.err = err
	}
	f.mu.Unlock()
}

func (f *firstErr) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// runPeer is franz-go's exactly-once copy loop as its
// examples/transactions/eos example writes it (GroupTransactSession,
// read_committed, RequireStableFetchOffsets; produce every record with an
// AbortingFirstErrPromise; End commits unless a produce failed), except
// that one transaction spans the checkpoint interval instead of one poll:
// it keeps polling and producing until the interval has passed or
// maxRecords were read, then ends. That is the pipeline's cadence.
func runPeer(ctx context.Context, e *env) error {
	opts := append(e.clientOpts(),
		kgo.TransactionalID(e.name),
		kgo.TransactionTimeout(60*time.Second), // the pipeline's transactions.timeout
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
	)
	sess, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		return err
	}
	defer sess.Close()
	pctx := context.WithoutCancel(ctx)
	for ctx.Err() == nil {
		if err := sess.Begin(); err != nil {
			return fmt.Errorf("beginning a transaction: %w", err)
		}
		promise := kgo.AbortingFirstErrPromise(sess.Client())
		deadline := time.Now().Add(e.interval)
		var n int
		var ferr error
		for n < e.maxRecords && ctx.Err() == nil {
			dctx, cancel := context.WithDeadline(ctx, deadline)
			fs := sess.PollRecords(dctx, e.maxRecords-n)
			cancel()
			if ferr = fetchErr(fs); ferr != nil {
				break
			}
			fs.EachRecord(func(r *kgo.Record) {
				sess.Produce(pctx, &kgo.Record{Topic: e.out, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}, promise.Promise())
				n++
			})
			if !time.Now().Before(deadline) {
				break
			}
		}
		ectx, cancel := context.WithTimeout(pctx, 30*time.Second)
		committed, err := sess.End(ectx, kgo.TransactionEndTry(promise.Err() == nil && ferr == nil))
		cancel()
		switch {
		case err != nil:
			return fmt.Errorf("ending a transaction: %w", err)
		case ferr != nil:
			return ferr
		case committed && n > 0:
			e.commits.Add(1)
			e.commit(int64(n))
		case !committed:
			e.aborts.Add(1)
		}
	}
	return nil
}

// pipelineConfig is the config of a pipeline arm named e.name running
// steps (YAML) from e.in to e.out, every setting at its default but the
// checkpoint interval, max_records and the producer linger.
func pipelineConfig(e *env, steps string) (*config.Config, error) {
	quoted := make([]string, len(e.seeds))
	for i, s := range e.seeds {
		quoted[i] = fmt.Sprintf("%q", s)
	}
	y := fmt.Sprintf(`name: %s
brokers: [%s]
instance_id: bench
checkpoint: {interval: %s, max_records: %d}
sources: {in: {topics: [%s]}}
steps: %s
sinks: {out: {topic: %s}}
producer: {linger: %s}
`, e.name, strings.Join(quoted, ", "), e.interval, e.maxRecords, e.in, steps, e.out, e.linger)
	noEnv := func(string) (string, bool) { return "", false }
	cfg, err := config.Parse([]byte(y), e.name+".yaml", noEnv)
	if err != nil {
		return nil, fmt.Errorf("the bench's pipeline config: %w", err)
	}
	return cfg, nil
}

// runPipeline runs this repository's pipeline in the process, with the
// config pipelineConfig gives.
func runPipeline(steps string) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error {
		cfg, err := pipelineConfig(e, steps)
		if err != nil {
			return err
		}
		p, err := engine.New(cfg, nil,
			engine.WithLogger(e.log),
			engine.WithSeedBrokers(e.seeds...),
			engine.WithClientOpts(kgo.WithHooks(e.clientHooks()...)),
			engine.WithCheckpointObserver(func(cp engine.Checkpoint) {
				switch {
				case cp.Committed && cp.Records > 0:
					e.commits.Add(1)
					e.commitT.Add(int64(cp.Commit))
					e.commit(int64(cp.Records))
				case !cp.Committed:
					e.aborts.Add(1)
				}
			}),
		)
		if err != nil {
			return err
		}
		return p.Run(ctx)
	}
}

// pipelineTopics are the topics a pipeline arm named name makes besides
// its output: the progress topic and the changelog of the keyed-count and
// windowed-count arms' step (both named count).
func pipelineTopics(name string) []string {
	return []string{name + "-progress", name + "-count-changelog"}
}
