package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
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

// realRun writes n input records to a 3-partition topic in (those whose
// number poison says are not JSON), runs the pipeline body (everything but
// name and brokers; the name is its group) until its group has consumed
// them all, aborting every third checkpoint on purpose, and returns a
// client of the cluster and how many checkpoints were aborted. prepare, if
// not nil, runs after the input is written and before the pipeline starts.
func realRun(t *testing.T, name, body string, n int, poison func(int) bool, prepare func(context.Context, *kgo.Client)) (*kgo.Client, int64) {
	t.Helper()
	k := testkit.NewKafka(t, kfake.SeedTopics(3, "in"))
	addr := k.Addr
	// The audit reads with this client as it is given: read_uncommitted.
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("in"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var rs []*kgo.Record
	for i := range n {
		v := fmt.Appendf(nil, `{"seq":%d}`, i)
		if poison != nil && poison(i) {
			v = []byte("not json")
		}
		rs = append(rs, &kgo.Record{Key: []byte("k" + strconv.Itoa(i%50)), Value: v})
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if prepare != nil {
		prepare(ctx, cl)
	}
	cfg, err := config.Parse(fmt.Appendf(nil, "name: %s\nbrokers: [%s]\n%s", name, addr, body), name+".yaml", func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	every := testkit.NewEveryNth(3)
	p, err := engine.New(cfg, nil, engine.WithSeedBrokers(addr), engine.WithLogger(testkit.Logger(t)),
		engine.WithBeforeCommit(func(cp engine.Checkpoint) error {
			if cp.Records > 0 && every.Hit() {
				return fmt.Errorf("injected")
			}
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	stop := testkit.Start(t, p)
	adm := kadm.NewClient(cl)
	for {
		lags, err := adm.Lag(ctx, name)
		if err == nil && lags[name].Lag.Total() == 0 && lags[name].FetchErr == nil && len(lags[name].Lag) > 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the pipeline did not catch up: %v (run: %v)", err, stop())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if every.Fired() == 0 {
		t.Fatal("no checkpoint was aborted")
	}
	return cl, every.Fired()
}

// TestAuditOfARealRun runs a pipeline that aborts every third checkpoint on
// purpose, then audits it: the aborted checkpoints' progress records and
// outputs must be invisible, and everything else accounted for.
func TestAuditOfARealRun(t *testing.T) {
	const n = 20000
	cl, aborted := realRun(t, "audited", `
instance_id: i1
checkpoint: {interval: 100ms, timeout: 10s, max_records: 1500}
transactions: {timeout: 20s}
sources: {in: {topics: [in]}}
steps: [{filter: "value.seq % 7 != 0"}, {map: "{seq: value.seq}"}]
sinks: {out: {topic: out}}
dead_letter: {topic: dlq}
`, n, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := Run(ctx, cl, Spec{Group: "audited", Inputs: []string{"in"}, Outputs: []string{"out", "dlq"}, Progress: "audited-progress", TxnTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() {
		t.Fatalf("findings: %v", r.Findings)
	}
	if r.InputRecords != n || r.OutputRecords != n-(n+6)/7 {
		t.Fatalf("audit accounted for %d inputs and %d outputs, want %d and %d", r.InputRecords, r.OutputRecords, n, n-(n+6)/7)
	}
	t.Logf("%d checkpoints audited, %d aborted on purpose; %d inputs, %d outputs accounted for", r.Checkpoints, aborted, r.InputRecords, r.OutputRecords)
}

// TestAuditOfARealRunWithSourcePositions runs a one-to-zero, one-to-many,
// fanned-out pipeline with source positions on, its flat_map on a parallel
// stage's workers (so one sink gets different inputs' outputs interleaved),
// two sinks sharing a topic and some dead letters, aborting every third
// checkpoint. The audit must find each input's outputs exactly once, for
// the whole history and for a window starting halfway.
func TestAuditOfARealRunWithSourcePositions(t *testing.T) {
	const n = 6000
	poison := func(i int) bool { return i%1000 == 999 }
	cl, aborted := realRun(t, "sourced", `
instance_id: i1
checkpoint: {interval: 100ms, timeout: 10s, max_records: 700}
transactions: {timeout: 20s}
audit: {source_positions: true}
sources: {in: {topics: [in]}}
steps:
  - filter: "value.seq % 7 != 0"
  - name: fan
    parallel: {workers: 3, flat_map: "value.seq % 3 == 0 ? [value.seq, value.seq + 0.5] : [value.seq]"}
  - {name: route, from: fan, split: {even: "int(value) % 2 == 0"}}
sinks:
  all: {from: fan, topic: out}
  evens: {from: route.even, topic: evens}
  odds: {from: route, topic: out}
dead_letter: {topic: dlq}
`, n, poison, nil)
	// Per input: nothing for a multiple of 7, a dead letter for poison,
	// else k = 2 for a multiple of 3 (1 otherwise) records from sink all
	// and k more from evens or odds.
	outputs, deadLetters, inputsWithOutputs := int64(0), int64(0), int64(0)
	for i := range n {
		switch {
		case poison(i):
			deadLetters++
		case i%7 == 0:
			continue
		case i%3 == 0:
			outputs += 4
		default:
			outputs += 2
		}
		inputsWithOutputs++
	}
	spec := Spec{Group: "sourced", Inputs: []string{"in"}, Outputs: []string{"dlq", "evens", "out"}, Progress: "sourced-progress",
		TxnTimeout: 20 * time.Second, Positioned: []string{"out", "evens"}, DeadLetter: "dlq"}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := Run(ctx, cl, spec)
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() {
		t.Fatalf("findings: %v", r.Findings)
	}
	if r.InputRecords != n || r.OutputRecords != outputs+deadLetters || r.Sourced != outputs+deadLetters || r.Sources != inputsWithOutputs {
		t.Fatalf("audit accounted for %d inputs, %d outputs, %d outputs by source from %d inputs; want %d, %d, %d from %d",
			r.InputRecords, r.OutputRecords, r.Sourced, r.Sources, n, outputs+deadLetters, outputs+deadLetters, inputsWithOutputs)
	}
	// How often the workers interleaved different inputs' outputs on a
	// partition: the case a per-input count is needed for. Scheduling
	// decides it, so it is reported, not required (the pipeline package
	// forces it in a test of its own).
	outs, err := offsets.ReadToEnd(ctx, cl, "out", true)
	if err != nil {
		t.Fatal(err)
	}
	interleaved, prev, seen := 0, map[int32]string{}, map[string]bool{}
	for _, rec := range outs {
		src, _ := lastHeader(rec, wire.HeaderSource)
		if src != prev[rec.Partition] && seen[src] {
			interleaved++
		}
		prev[rec.Partition], seen[src] = src, true
	}
	t.Logf("whole history: %d checkpoints audited, %d aborted on purpose; %d inputs, %d outputs (%d dead letters) checked by source position; %d outputs of out came after another input's",
		r.Checkpoints, aborted, r.InputRecords, r.Sourced, deadLetters, interleaved)

	// From the middle checkpoint on.
	progress, err := offsets.ReadToEnd(ctx, cl, "sourced-progress", true)
	if err != nil {
		t.Fatal(err)
	}
	var mid wire.Progress
	if err := json.Unmarshal(progress[len(progress)/2].Value, &mid); err != nil {
		t.Fatal(err)
	}
	spec.Window.From = Bound{Checkpoint: fmt.Sprintf("%s/%s/%d", mid.Instance, mid.Run, mid.Checkpoint)}
	w, err := Run(ctx, cl, spec)
	if err != nil {
		t.Fatal(err)
	}
	if !w.OK() {
		t.Fatalf("findings from %s: %v", spec.Window.From, w.Findings)
	}
	if w.Checkpoints != r.Checkpoints-len(progress)/2 || w.InputRecords == 0 || w.InputRecords >= r.InputRecords || w.Sourced == 0 || w.Sourced >= r.Sourced {
		t.Fatalf("from %s: %d checkpoints, %d inputs, %d outputs by source; the whole history has %d, %d, %d",
			spec.Window.From, w.Checkpoints, w.InputRecords, w.Sourced, r.Checkpoints, r.InputRecords, r.Sourced)
	}
	t.Logf("from %s: %d checkpoints, %d inputs, %d outputs checked by source position", spec.Window.From, w.Checkpoints, w.InputRecords, w.Sourced)
}

// TestAuditOfARealRunPastHandCommittedOffsets commits the group's offsets
// by hand at 50 on each input partition before the pipeline ever runs,
// then runs it to the end: the first 50 records of each partition are
// never processed, and the audit must say so, per partition, with the
// count.
func TestAuditOfARealRunPastHandCommittedOffsets(t *testing.T) {
	const n, ahead = 3000, 50
	var moved int
	cl, _ := realRun(t, "ahead", `
instance_id: i1
checkpoint: {interval: 100ms, timeout: 10s, max_records: 500}
transactions: {timeout: 20s}
sources: {in: {topics: [in]}}
steps: [{map: "{seq: value.seq}"}]
sinks: {out: {topic: out}}
`, n, nil, func(ctx context.Context, cl *kgo.Client) {
		adm := kadm.NewClient(cl)
		ends, err := adm.ListEndOffsets(ctx, "in")
		if err != nil {
			t.Fatal(err)
		}
		os := kadm.Offsets{}
		ends.Each(func(o kadm.ListedOffset) {
			if o.Err != nil || o.Offset < ahead {
				t.Errorf("in/%d ends at %d (%v): fewer than %d records", o.Partition, o.Offset, o.Err, ahead)
				return
			}
			os.AddOffset("in", o.Partition, ahead, -1)
			moved++
		})
		resp, err := adm.CommitOffsets(ctx, "ahead", os)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			t.Fatal(err)
		}
	})
	if moved != 3 {
		t.Fatalf("offsets committed by hand on %d partitions, want 3", moved)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := Run(ctx, cl, Spec{Group: "ahead", Inputs: []string{"in"}, Outputs: []string{"out"}, Progress: "ahead-progress", TxnTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for p := range 3 {
		want = append(want, fmt.Sprintf("gap in/%d@0: %d records (offsets 0..%d, from the log start) lie before checkpoint i1/", p, ahead, ahead-1))
	}
	expectFindings(t, r, want)
	if r.InputRecords != n-3*ahead {
		t.Fatalf("audit accounted for %d inputs, want %d", r.InputRecords, n-3*ahead)
	}
	t.Logf("%d checkpoints, %d inputs accounted for", r.Checkpoints, r.InputRecords)
	for _, f := range r.Findings {
		t.Log(f)
	}
}
