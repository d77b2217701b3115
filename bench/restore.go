package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/internal/engine"
)

// RestoreRun is one restore of a keyed state from its changelog: a fresh
// instance (memory backend) reads back the state a first run of the same
// pipeline left, one changelog record of about the record size per key.
type RestoreRun struct {
	Size       int   `json:"size"`
	Partitions int   `json:"partitions"`
	Round      int   `json:"round"`
	Keys       int64 `json:"keys"`     // keys of state, one changelog record each
	Restored   int64 `json:"restored"` // changelog records read, the stores' metadata included
	// Seconds runs from the moment a task began restoring to the moment
	// the last one was done.
	Seconds float64 `json:"seconds"`
	CPUS    float64 `json:"cpu_s"`          // process CPU time over Seconds
	PeakRSS int64   `json:"peak_rss_bytes"` // the process's, sampled during the restore
	Err     string  `json:"error,omitempty"`
}

// RecordsPerSec is the restore's speed in changelog records per second.
func (r RestoreRun) RecordsPerSec() float64 {
	if r.Seconds <= 0 {
		return 0
	}
	return float64(r.Restored) / r.Seconds
}

// restoreSteps keeps the latest pad of each key: every input record has
// a key of its own, so its state is one changelog record of about the
// record's size.
const restoreSteps = `[{name: latest, aggregate: {fields: {pad: {last: value.pad}}, emit: checkpoint}}]`

// restore measures one restore of keys keys of size-byte state over parts
// partitions. A first run of the pipeline builds the state from an input
// of its own (a key per record); once it committed every record, it stops,
// and a second instance of the same pipeline, with empty stores, restores
// them. The gate: the stores of the second instance hold every key.
func (h *harness) restore(ctx context.Context, keys int64, size, parts, round int) RestoreRun {
	r := RestoreRun{Size: size, Partitions: parts, Round: round, Keys: keys}
	name := h.name("restore")
	in, out := name+"-in", name+"-out"
	defer h.cleanup(name, in, out)
	err := h.createTopics(ctx, parts, in, out)
	if err == nil {
		err = h.fillDistinct(ctx, in, keys, size)
	}
	if err == nil {
		// Build the state: the first run stops once every input record
		// is committed, its state with it.
		a := &Arm{Name: "restore", run: runPipeline(restoreSteps)}
		e := h.env(a, name, in, out, time.Second, keys)
		err = h.runUntilDone(ctx, a, e)
	}
	if err == nil {
		// A task starts, and restores, when its partition has a record
		// for it: one more per partition, each of a key of its own.
		err = h.wake(ctx, in, parts)
	}
	if err == nil {
		prof := ""
		if h.o.RestoreProfile != "" && round == h.o.Rounds {
			ext := filepath.Ext(h.o.RestoreProfile)
			prof = fmt.Sprintf("%s-%d-%dp%s", strings.TrimSuffix(h.o.RestoreProfile, ext), size, parts, ext)
		}
		err = h.timeRestore(ctx, &r, name, in, out, keys+int64(parts), prof)
	}
	if err != nil {
		r.Err = err.Error()
	}
	return r
}

// fillDistinct writes n records of size bytes to topic, record seq with
// key "r<seq>": no two share a key.
func (h *harness) fillDistinct(ctx context.Context, topic string, n int64, size int) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(h.seeds...), kgo.ClientID("bench-fill")}, tuning(h.o.Linger)...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	var perr firstErr
	done := func(_ *kgo.Record, err error) { perr.set(err) }
	sent := time.Now().UnixMicro()
	for seq := range n {
		cl.Produce(ctx, &kgo.Record{Topic: topic, Key: strconv.AppendInt([]byte("r"), seq, 10), Value: Value(nil, seq, sent, size)}, done)
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	if err := perr.get(); err != nil {
		return fmt.Errorf("filling %s: %w", topic, err)
	}
	return nil
}

// wake writes record "w<p>" to every partition p of topic.
func (h *harness) wake(ctx context.Context, topic string, parts int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.seeds...), kgo.ClientID("bench-fill"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer cl.Close()
	var rs []*kgo.Record
	sent := time.Now().UnixMicro()
	for p := range parts {
		rs = append(rs, &kgo.Record{Topic: topic, Partition: int32(p), Key: fmt.Appendf(nil, "w%d", p), Value: Value(nil, int64(p), sent, 100)})
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		return fmt.Errorf("writing to %s: %w", topic, err)
	}
	return nil
}

// timeRestore starts the restoring instance and times it by polling its
// counters: from the first moment a task is restoring (or a record was
// restored) to the first moment none is and every key's record was read;
// then it waits for a checkpoint to count the stores' keys: want. With a
// profile path, the CPU profile of the process from the instance's start
// to the restore's end is written there.
func (h *harness) timeRestore(ctx context.Context, r *RestoreRun, name, in, out string, want int64, profile string) error {
	cfg, err := pipelineConfig(h.env(&Arm{}, name, in, out, 100*time.Millisecond, 0), restoreSteps)
	if err != nil {
		return err
	}
	p, err := engine.New(cfg, nil, engine.WithLogger(h.log), engine.WithSeedBrokers(h.seeds...))
	if err != nil {
		return err
	}
	runtime.GC()
	debug.FreeOSMemory()
	var prof bytes.Buffer
	profiling := false
	if profile != "" {
		if err := pprof.StartCPUProfile(&prof); err != nil {
			return err
		}
		profiling = true
		defer func() {
			if profiling {
				pprof.StopCPUProfile()
			}
		}()
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- p.Run(rctx) }()
	stop := func() error {
		cancel()
		select {
		case err := <-errc:
			return err
		case <-time.After(time.Minute):
			return errors.New("did not stop within a minute of being told to")
		}
	}
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(h.o.RunTimeout)
	var t0 time.Time
	var cpu0 time.Duration
	var rss *rssSampler
	for {
		select {
		case err := <-errc:
			if err == nil {
				err = errors.New("the pipeline stopped")
			}
			return fmt.Errorf("restoring: %w", err)
		case <-deadline:
			s := p.Stats()
			_ = stop()
			return fmt.Errorf("not done after %s: %d changelog records restored, %d keys in the stores", h.o.RunTimeout, s.Restored, s.StateKeys)
		case <-ctx.Done():
			_ = stop()
			return ctx.Err()
		case <-tick.C:
		}
		s := p.Stats()
		now := time.Now()
		if t0.IsZero() && (s.Restoring > 0 || s.Restored > 0) {
			t0, cpu0, rss = now, cpuTime(), startRSS(20*time.Millisecond)
		}
		if !t0.IsZero() && r.Seconds == 0 && s.Restoring == 0 && s.Restored >= r.Keys {
			r.Seconds, r.CPUS, r.PeakRSS = now.Sub(t0).Seconds(), (cpuTime() - cpu0).Seconds(), rss.Stop()
			r.Restored = s.Restored
			if profiling {
				pprof.StopCPUProfile()
				profiling = false
				if err := os.WriteFile(profile, prof.Bytes(), 0o644); err != nil {
					_ = stop()
					return err
				}
				fmt.Fprintf(h.msg, "restore profile: %s\n", profile)
			}
		}
		if r.Seconds > 0 && s.StateKeys == want {
			return stop()
		}
		if r.Seconds > 0 && s.StateKeys > want {
			_ = stop()
			return fmt.Errorf("the stores hold %d keys after the restore, want %d", s.StateKeys, want)
		}
	}
}

// FormatRestores prints the restore runs of one record size and partition
// count: the median speed over rounds, its CPU and peak RSS.
func FormatRestores(w io.Writer, runs []RestoreRun) {
	if len(runs) == 0 {
		return
	}
	var rates []float64
	var cpu, restored float64
	var rss int64
	var failed string
	for _, r := range runs {
		if r.Err != "" {
			failed = r.Err
			continue
		}
		rates = append(rates, r.RecordsPerSec())
		cpu += r.CPUS
		restored += float64(r.Restored)
		rss = max(rss, r.PeakRSS)
	}
	c := runs[0]
	fmt.Fprintf(w, "restore of %s keys of %d B state, %dp, memory backend, %d rounds: ", thousands(float64(c.Keys)), c.Size, c.Partitions, len(runs))
	if len(rates) == 0 {
		fmt.Fprintf(w, "FAILED: %s\n\n", failed)
		return
	}
	slices.Sort(rates)
	fmt.Fprintf(w, "%s changelog records/s (median; %s–%s), %.2f CPU-s per million, peak RSS %.0f MB", thousands(rates[len(rates)/2]), thousands(rates[0]), thousands(rates[len(rates)-1]), cpu/restored*1e6, float64(rss)/1e6)
	if failed != "" {
		fmt.Fprintf(w, "; a round FAILED: %s", failed)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w)
}
