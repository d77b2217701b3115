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

func TestAuditWindowFlagsAreCheckedBeforeAnythingRuns(t *testing.T) {
	cfg := writeFile(t, "name: v\nbrokers: [127.0.0.1:9]\nsources: {in: {topics: [a]}}\nsinks: {out: {topic: b}}\n")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"a --from that is neither a time nor a checkpoint", []string{"--from", "yesterday"},
			`--from: "yesterday" is neither an RFC 3339 time such as 2026-03-01T12:00:00Z nor a checkpoint instance/run/id`},
		{"a time without a zone", []string{"--to", "2026-03-01T12:00:00"}, "--to: \"2026-03-01T12:00:00\" is neither an RFC 3339 time"},
		{"checkpoint 0", []string{"--to", "i1/r/0"}, `--to: "i1/r/0": a checkpoint id is a whole number from 1`},
		{"times in the wrong order", []string{"--from", "2026-03-02T00:00:00Z", "--to", "2026-03-01T00:00:00Z"},
			"--from 2026-03-02T00:00:00Z: is after --to 2026-03-01T00:00:00Z"},
		{"a --from with no value", []string{"--from"}, "flag needs an argument: -from"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runCLI(t, append([]string{"audit", "-c", cfg}, tc.args...)...)
			if code != ExitUsage || !strings.Contains(errs, tc.want) {
				t.Fatalf("exit %d, want %d with %q\nstdout: %s\nstderr: %s", code, ExitUsage, tc.want, out, errs)
			}
		})
	}
}

// TestAuditWithSourcePositions runs a pipeline with source positions on,
// audits it whole and from a checkpoint on, then copies one output into the
// output topic, headers and all, as a duplicate would appear.
func TestAuditWithSourcePositions(t *testing.T) {
	addr := testkit.NewKafka(t, kfake.SeedTopics(2, "in")).Addr
	path := writeFile(t, fmt.Sprintf(`name: sp
brokers: [%s]
instance_id: i1
checkpoint: {interval: 100ms, max_records: 300}
audit: {source_positions: true}
sources: {in: {topics: [in]}}
steps: [{filter: "value %% 5 != 0"}, {flat_map: "[value, value]"}]
sinks: {out: {topic: out}}
dead_letter: {topic: dlq}
`, addr))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("in"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const n = 1000
	for i := range n {
		cl.Produce(ctx, &kgo.Record{Key: fmt.Append(nil, i%7), Value: fmt.Append(nil, i)}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
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
	adm := kadm.NewClient(cl)
	for {
		lags, err := adm.Lag(ctx, "sp")
		if err == nil && lags["sp"].FetchErr == nil && len(lags["sp"].Lag) > 0 && lags["sp"].Lag.Total() == 0 {
			break
		}
		select {
		case <-ctx.Done():
			stop()
			<-done
			t.Fatalf("the pipeline did not catch up: %v", err)
		case err := <-done:
			t.Fatalf("the pipeline stopped before it caught up: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	outputs := 2 * (n - n/5)
	code, out, errs := runCLI(t, "audit", "-c", path)
	if want := fmt.Sprintf("source positions: %d outputs of %d inputs checked one by one", outputs, n-n/5); code != 0 || !strings.Contains(out, want) ||
		!strings.Contains(out, "each input's outputs written once") {
		t.Fatalf("audit: exit %d, want 0 and %q\nstdout: %s\nstderr: %s", code, want, out, errs)
	}
	t.Logf("whole history:\n%s", out)

	progress, err := offsets.ReadToEnd(ctx, cl, "sp-progress", true)
	if err != nil || len(progress) < 2 {
		t.Fatalf("%d progress records (%v), want at least 2", len(progress), err)
	}
	var last wire.Progress
	if err := json.Unmarshal(progress[len(progress)-1].Value, &last); err != nil {
		t.Fatal(err)
	}
	from := fmt.Sprintf("i1/%s/%d", last.Run, last.Checkpoint)
	code, out, errs = runCLI(t, "audit", "-c", path, "--from", from)
	if code != 0 || !strings.Contains(out, "sp: 1 committed checkpoints") || !strings.Contains(out, "window: from "+from+" to the last") {
		t.Fatalf("audit --from %s: exit %d\nstdout: %s\nstderr: %s", from, code, out, errs)
	}
	code, out, errs = runCLI(t, "audit", "-c", path, "--to", fmt.Sprintf("i1/%s/%d", last.Run, last.Checkpoint+1))
	if code != ExitUsage || !strings.Contains(errs, fmt.Sprintf("--to i1/%s/%d: no committed checkpoint of this pipeline has that id", last.Run, last.Checkpoint+1)) {
		t.Fatalf("audit --to a checkpoint that never was: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	code, out, errs = runCLI(t, "audit", "-c", path, "--from", "2000-01-01T00:00:00Z", "--to", "2000-01-02T00:00:00Z")
	if code != ExitUsage || !strings.Contains(errs, "--from 2000-01-01T00:00:00Z: no committed checkpoint lies in the window") {
		t.Fatalf("audit of an empty window: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}

	// One output again, in a transaction of its own.
	outs, err := offsets.ReadToEnd(ctx, cl, "out", true)
	if err != nil || len(outs) != outputs {
		t.Fatalf("%d outputs (%v), want %d", len(outs), err, outputs)
	}
	victim := outs[len(outs)/3]
	src, _ := header(victim, wire.HeaderSource)
	txn, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.TransactionalID("tamper"))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	dup := &kgo.Record{Topic: "out", Partition: victim.Partition, Key: victim.Key, Value: victim.Value, Headers: victim.Headers}
	if err := txn.ProduceSync(ctx, dup).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	code, out, errs = runCLI(t, "audit", "-c", path)
	if code != ExitFailure || !strings.Contains(out, "  duplicate "+src+": its output ") || !strings.Contains(out, "  misplaced "+src+": ") {
		t.Fatalf("audit after the copy of %s: exit %d, want %d naming %s\nstdout: %s\nstderr: %s", src, code, ExitFailure, src, out, errs)
	}
	t.Logf("after the copy:\n%s", out)
}

func header(r *kgo.Record, k string) (string, bool) {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if r.Headers[i].Key == k {
			return string(r.Headers[i].Value), true
		}
	}
	return "", false
}
