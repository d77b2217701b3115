package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/internal/engine"
	"github.com/pipeline-run/pipeline/internal/testkit"
	"github.com/pipeline-run/pipeline/offsets"
	"github.com/pipeline-run/pipeline/wire"
)

// TestAuditFollowsConsumerStartFrom runs a pipeline with
// consumer.start_from: latest over an input that already holds records, so
// its group skips them, then audits that one history under the config it
// ran with and under the same config with start_from: earliest. The skip is
// deliberate under latest (a note, exit 0) and a gap under earliest (a
// finding per partition, exit 1): only consumer.start_from tells them apart.
func TestAuditFollowsConsumerStartFrom(t *testing.T) {
	const partitions = 2
	addr := testkit.NewKafka(t, kfake.SeedTopics(partitions, "in")).Addr
	cfgFor := func(startFrom string) string {
		return fmt.Sprintf(`name: lt
brokers: [%s]
instance_id: i1
consumer: {start_from: %s}
checkpoint: {interval: 100ms}
sources: {in: {topics: [in]}}
sinks: {out: {topic: out}}
`, addr, startFrom)
	}
	latest, earliest := writeFile(t, cfgFor("latest")), writeFile(t, cfgFor("earliest"))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("in"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produced := make([]int64, partitions)
	produce := func(n int) {
		t.Helper()
		var recs []*kgo.Record
		for p := range int32(partitions) {
			for range n {
				recs = append(recs, &kgo.Record{Partition: p, Value: fmt.Append(nil, produced[p])})
				produced[p]++
			}
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// Before the group exists: a group starting from latest never reads these.
	const before = 50
	produce(before)

	cfg, err := config.Load(latest)
	if err != nil {
		t.Fatal(err)
	}
	p, err := engine.New(cfg, nil, engine.WithSeedBrokers(addr), engine.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()
	// halt stops the pipeline and waits for it, once; deferred too, so a
	// failing test leaves no pipeline running.
	var halted bool
	var runErr error
	halt := func() error {
		if !halted {
			stop()
			runErr, halted = <-done, true
		}
		return runErr
	}
	defer halt()
	// When the consumer takes its place at the end is not visible from
	// outside: produce one record a partition at a time until a checkpoint
	// has consumed on every partition, then a batch, then wait until the
	// group has caught up. Records produced before it took its place are
	// skipped as well; the expected head is read from the progress records
	// below.
	adm := kadm.NewClient(cl)
	const after = 100
	positioned := false
	for {
		var caught bool
		var err error
		if !positioned {
			var committed kadm.OffsetResponses
			committed, err = adm.FetchOffsets(ctx, "lt")
			positioned = err == nil
			for p := range int32(partitions) {
				o, ok := committed.Lookup("in", p)
				positioned = positioned && ok && o.Err == nil && o.At > before
			}
			if positioned {
				produce(after)
			} else {
				produce(1)
			}
		} else {
			var lags kadm.DescribedGroupLags
			lags, err = adm.Lag(ctx, "lt")
			caught = err == nil && lags["lt"].FetchErr == nil && len(lags["lt"].Lag["in"]) == partitions && lags["lt"].Lag.Total() == 0
		}
		if caught {
			break
		}
		select {
		case <-ctx.Done():
			halt()
			t.Fatalf("the pipeline did not consume every partition and catch up (positioned %v, produced %v): %v", positioned, produced, err)
		case err := <-done:
			halted = true
			t.Fatalf("the pipeline stopped before it caught up: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := halt(); err != nil {
		t.Fatal(err)
	}

	// The head of each partition: what lies before its first checkpoint.
	progress, err := offsets.ReadToEnd(ctx, cl, "lt-progress", true)
	if err != nil {
		t.Fatal(err)
	}
	head := map[int32]int64{}
	checkpoints := 0
	for _, rec := range progress {
		var pr wire.Progress
		if err := json.Unmarshal(rec.Value, &pr); err != nil {
			t.Fatal(err)
		}
		checkpoints++
		for _, in := range pr.Inputs {
			if f, ok := head[in.Partition]; !ok || in.First < f {
				head[in.Partition] = in.First
			}
		}
	}
	var total, skipped int64
	for p := range int32(partitions) {
		// The records that were there before the group started were skipped.
		if head[p] < before {
			t.Fatalf("in/%d: the first checkpoint starts at %d, before the %d records produced ahead of the group (heads %v)", p, head[p], before, head)
		}
		total += produced[p]
		skipped += head[p]
	}
	// The batch produced once every partition was consumed is in the audit.
	if total-skipped < partitions*after {
		t.Fatalf("checkpoints consumed %d input records, want at least %d", total-skipped, partitions*after)
	}
	t.Logf("%d checkpoints, produced %v, skipped heads %v", checkpoints, produced, head)

	code, out, errs := runCLI(t, "audit", "-c", latest)
	if want := fmt.Sprintf("lt: %d committed checkpoints, %d input records", checkpoints, total-skipped); code != 0 ||
		!strings.Contains(out, want) || !strings.Contains(out, "\nnote: consumer.start_from is latest: ") ||
		!strings.Contains(out, "\nok: no input skipped or consumed twice") {
		t.Fatalf("audit with start_from latest: exit %d, want 0 with %q and the start_from note\nstdout: %s\nstderr: %s", code, want, out, errs)
	}
	t.Logf("start_from latest:\n%s", out)

	code, out, errs = runCLI(t, "audit", "-c", earliest)
	var findings int
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, "  ") {
			findings++
		}
	}
	if code != ExitFailure || findings != partitions || strings.Contains(out, "note: consumer.start_from is latest") ||
		!strings.Contains(errs, fmt.Sprintf("audit found violations: %d", partitions)) {
		t.Fatalf("audit with start_from earliest: exit %d with %d findings, want %d with one gap per partition and no start_from note\nstdout: %s\nstderr: %s",
			code, findings, ExitFailure, out, errs)
	}
	for p := range int32(partitions) {
		want := fmt.Sprintf("  gap in/%d@0: %d records (offsets 0..%d, from the log start) lie before checkpoint ", p, head[p], head[p]-1)
		if !strings.Contains(out, want) {
			t.Errorf("audit with start_from earliest does not name the gap on in/%d: want %q\nstdout: %s", p, want, out)
		}
	}
	t.Logf("start_from earliest:\n%s", out)
}
