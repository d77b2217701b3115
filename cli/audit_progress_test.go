package cli

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/internal/testkit"
	"github.com/pipeline-run/pipeline/offsets"
	"github.com/pipeline-run/pipeline/pipeline/ops"
)

// TestAuditShowsProgress audits a finished pipeline and expects progress
// on stderr: with no interval, a line for each topic it reads, saying
// how far; with a long one, a single line; stdout unchanged either way.
func TestAuditShowsProgress(t *testing.T) {
	addr := testkit.NewKafka(t, kfake.SeedTopics(2, "in")).Addr
	path := writeFile(t, fmt.Sprintf(`name: ap
brokers: [%s]
instance_id: i1
checkpoint: {interval: 100ms}
sources: {in: {topics: [in]}}
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
	const n = 40
	for i := range n {
		cl.Produce(ctx, &kgo.Record{Key: fmt.Append(nil, i), Value: fmt.Append(nil, i)}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	runUntil(t, ctx, path, func() (bool, error) {
		recs, err := offsets.ReadToEnd(ctx, cl, "out", true)
		return len(recs) == n, err
	})

	audit := func(every time.Duration) (string, string) {
		t.Helper()
		var out, errb bytes.Buffer
		e := &env{reg: ops.NewRegistry(), stdout: &out, stderr: &errb, progressEvery: every}
		if code := e.main(ctx, []string{"audit", "-c", path}); code != 0 {
			t.Fatalf("audit: exit %d\nstdout: %s\nstderr: %s", code, out.String(), errb.String())
		}
		return out.String(), errb.String()
	}
	out, errs := audit(time.Nanosecond)
	for _, w := range []string{
		"audit: reading the progress topic ap-progress (topic 1 of 4): 0 of ",
		"audit: reading input in (topic 2 of 4): 0 of 40 offsets (0%)",
		"audit: reading input in (topic 2 of 4): 40 of 40 offsets (100%)",
		"audit: reading output dlq (topic 3 of 4): 0 of 0 offsets (100%)",
		"audit: reading output out (topic 4 of 4): ",
	} {
		if !strings.Contains(errs, w) {
			t.Errorf("stderr lacks %q:\n%s", w, errs)
		}
	}
	if !strings.Contains(out, "ok: ") || strings.Contains(out, "audit: reading") {
		t.Errorf("stdout:\n%s", out)
	}
	_, errs = audit(time.Hour)
	if lines := strings.Split(strings.TrimSpace(errs), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "audit: reading the progress topic") {
		t.Errorf("with an hour between lines, stderr has %d lines, want the first alone:\n%s", len(lines), errs)
	}
}
