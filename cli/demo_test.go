package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/broker"
	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/pipeline/ops"
)

// TestDemoWaitsForRepartitionTopics checks when the demo counts the
// pipeline's input as consumed: once the group has committed the demo
// topic's end and, on a repartition topic written in transactions, the
// offset after its last record, short of the commit marker that follows.
func TestDemoWaitsForRepartitionTopics(t *testing.T) {
	b, err := broker.Start(broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`name: d
brokers: [%s]
demo: {topic: in, partitions: 1}
sources: {in: {topics: [in]}}
steps:
  - key_by: value.sensor
sinks: {out: {topic: out}}
`, b.Addrs()[0])), "d.yaml", func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := newDemo(ctx, cfg, b.Addrs(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()

	const repart = "d-key_by1-repartition"
	if _, err := d.adm.CreateTopic(ctx, 1, 1, nil, repart); err != nil {
		t.Fatal(err)
	}
	if err := d.cl.ProduceSync(ctx, &kgo.Record{Topic: "in", Value: []byte("{}")}, &kgo.Record{Topic: "in", Value: []byte("{}")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	tx, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.TransactionalID("d-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		tx.Produce(ctx, &kgo.Record{Topic: repart, Value: []byte("{}")}, nil)
	}
	if err := tx.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	// The repartition topic holds offsets 0-2 and the marker at 3.

	topics := []string{"in", repart}
	for _, tc := range []struct {
		name         string
		in, repart   int64 // committed offsets; -1: none
		wantConsumed bool
	}{
		{"nothing committed", -1, -1, false},
		{"the demo topic's end, nothing of the repartition topic", 2, -1, false},
		{"the demo topic's end, one short on the repartition topic", 2, 2, false},
		{"the demo topic's end, past the last record on the repartition topic", 2, 3, true},
		{"one short on the demo topic", 1, 3, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			group := fmt.Sprintf("g-%d-%d", tc.in, tc.repart)
			var offs kadm.Offsets
			if tc.in >= 0 {
				offs.Add(kadm.Offset{Topic: "in", Partition: 0, At: tc.in})
			}
			if tc.repart >= 0 {
				offs.Add(kadm.Offset{Topic: repart, Partition: 0, At: tc.repart})
			}
			if len(offs) > 0 {
				if err := d.adm.CommitAllOffsets(ctx, group, offs); err != nil {
					t.Fatal(err)
				}
			}
			got, err := d.consumed(ctx, group, topics)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.wantConsumed {
				t.Errorf("consumed = %v, want %v", got, tc.wantConsumed)
			}
		})
	}
}

// TestDemoStoppedBySignalExitsZero stops the quick start while its feeder
// is still writing, as SIGTERM does (Main cancels the context), and
// expects a clean stop: exit 0, the pipeline's stop line, and the report
// saying the demo was stopped early.
func TestDemoStoppedBySignalExitsZero(t *testing.T) {
	data, err := os.ReadFile("../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// Slow enough that it cannot finish before the stop.
	body := strings.Replace(string(data), "rate: 10000", "rate: 200", 1)
	if body == string(data) {
		t.Fatal("quickstart.yaml no longer has rate: 10000; update the test")
	}
	var out, errb syncBuffer
	e := &env{reg: ops.NewRegistry(), stdout: &out, stderr: &errb}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() { done <- e.main(ctx, []string{"run", "-c", writeFile(t, body)}) }()

	// Stop once a checkpoint has committed records, mid-feed.
	deadline := time.After(time.Minute)
	for !strings.Contains(errb.String(), "pipeline running") {
		select {
		case code := <-done:
			t.Fatalf("the run ended with %d before it was stopped\nstdout: %s\nstderr: %s", code, out.String(), errb.String())
		case <-deadline:
			cancel()
			<-done
			t.Fatalf("the pipeline did not start\nstderr: %s", errb.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != ExitOK {
			t.Fatalf("exit %d after a stop, want 0\nstdout: %s\nstderr: %s", code, out.String(), errb.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("the run did not stop")
	}
	if !strings.Contains(errb.String(), "pipeline stopped") {
		t.Errorf("stderr lacks the stop line:\n%s", errb.String())
	}
	if !strings.Contains(out.String(), "stopped before the demo finished: ") {
		t.Errorf("the report does not say the demo was stopped early:\n%s", out.String())
	}
}
