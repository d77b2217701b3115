package bench

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/broker"
	"github.com/pipeline-run/pipeline/pipeline/ops"
)

// TestRunOnTheEmbeddedBroker runs a small sweep end to end on an
// in-process broker: every arm copies, passes its gate, and is timed.
func TestRunOnTheEmbeddedBroker(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a broker")
	}
	dir := t.TempDir()
	o := Options{
		Broker: "embedded", Records: 3000, Sizes: []int{100}, Partitions: []int{2},
		Intervals: []time.Duration{100 * time.Millisecond}, Rounds: 1,
		Arms:    []string{"copy", "peer", "pass", "filter-map", "keyed-count"},
		Latency: true, LatencyFor: 300 * time.Millisecond, MaxRecords: 200000, RunTimeout: 30 * time.Second,
		JSON: filepath.Join(dir, "r.json"), CSV: filepath.Join(dir, "r.csv"), Plot: filepath.Join(dir, "r.png"),
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, msg strings.Builder
	if err := Run(ctx, o, &out, &msg); err != nil {
		t.Fatalf("Run: %v\n%s\n%s", err, out.String(), msg.String())
	}
	want := 4
	if slices.Contains(ops.NewRegistry().Kinds(), "aggregate") {
		want++
	} else if !strings.Contains(out.String(), "keyed-count: skipped") {
		t.Errorf("the output does not say keyed-count was skipped:\n%s", out.String())
	}
	res, err := ReadJSON(o.JSON)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != want {
		t.Fatalf("%d rows, want %d, one per arm that ran:\n%s", len(res.Rows), want, out.String())
	}
	for _, r := range res.Rows {
		if r.Failed != "" || r.RecordsPerSec <= 0 || !r.Latency || r.P99Ms <= 0 {
			t.Errorf("%s: %+v", r.Arm, r)
		}
		if r.Arm != "copy" && r.TxPerSec <= 0 {
			t.Errorf("%s counted no transactions", r.Arm)
		}
	}
	for _, f := range []string{o.CSV, o.Plot} {
		if st, err := os.Stat(f); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestGateReadsBackCommittedRecords checks the gate against a real topic:
// records of an aborted transaction do not count, duplicates do.
func TestGateReadsBackCommittedRecords(t *testing.T) {
	ctx, cl, _ := gateTopic(t)
	txn := func(commit kgo.TransactionEndTry, seqs ...int64) {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, s := range seqs {
			if err := cl.ProduceSync(ctx, &kgo.Record{Key: Key(nil, s), Value: Value(nil, s, 0, 100)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := cl.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	txn(kgo.TryCommit, 0, 1, 2)
	txn(kgo.TryAbort, 3, 4) // a read_committed reader never sees these
	if err := gate(ctx, cl, "g", Expect{N: 3}); err != nil {
		t.Fatalf("gate after an aborted transaction: %v", err)
	}
	txn(kgo.TryCommit, 2)
	var ge *GateError
	if err := gate(ctx, cl, "g", Expect{N: 3}); !errors.As(err, &ge) || ge.Duplicates != 1 {
		t.Fatalf("gate with a duplicate: %v", err)
	}
}

// gateTopic starts an in-process broker with a two-partition topic "g" and
// a transactional client writing to it, and returns them with the broker's
// addresses.
func gateTopic(t *testing.T) (context.Context, *kgo.Client, []string) {
	t.Helper()
	b, err := broker.Start(broker.Options{Topics: []string{"g"}, Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.TransactionalID("gate-test"), kgo.DefaultProduceTopic("g"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return ctx, cl, b.Addrs()
}

// TestGateWaitsForTheLastCommitsMarkers: an arm's last transaction may be
// committed without its markers written yet, its records above the last
// stable offset for a moment. The gate waits for them instead of counting
// them missing. Here the transaction is decided 300 ms after the gate
// began reading.
func TestGateWaitsForTheLastCommitsMarkers(t *testing.T) {
	ctx, tx, addrs := gateTopic(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	const n = 100
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for seq := range int64(n) {
		if err := tx.ProduceSync(ctx, &kgo.Record{Value: Value(nil, seq, 0, 60)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	gated := make(chan error, 1)
	go func() { gated <- gate(ctx, cl, "g", Expect{N: n}) }()
	time.Sleep(300 * time.Millisecond)
	select {
	case err := <-gated:
		t.Fatalf("the gate returned before the transaction was decided: %v", err)
	default:
	}
	if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if err := <-gated; err != nil {
		t.Fatal(err)
	}
}

// TestBriefSaysOutputsOnlyWhenKnown: a run line gives the outputs of an
// arm that writes other than one per input, and nothing for one whose
// outputs are not known in advance (Outputs 0), rather than "0 outputs".
func TestBriefSaysOutputsOnlyWhenKnown(t *testing.T) {
	if got := brief(ThroughputRun{Records: 10, Outputs: 9, ProcessingS: 1}); !strings.Contains(got, "(9 outputs)") {
		t.Errorf("9 outputs of 10 records: %s", got)
	}
	if got := brief(ThroughputRun{Records: 10, ProcessingS: 1}); strings.Contains(got, "outputs") {
		t.Errorf("outputs not known: %s", got)
	}
}
