package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/internal/engine"
	"github.com/pipeline-run/pipeline/internal/testkit"
	"github.com/pipeline-run/pipeline/offsets"
	"github.com/pipeline-run/pipeline/pipeline/state"
)

func TestOffsetsAndHangingTransactions(t *testing.T) {
	k := testkit.NewKafka(t, kfake.SeedTopics(2, "in", "out"))
	c, addr := k.Cluster, k.Addr
	cfg := writeFile(t, fmt.Sprintf("name: tools\nbrokers: [%s]\nsources: {in: {topics: [in]}}\nsinks: {out: {topic: out}}\n", addr))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 10 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "in", Partition: int32(i % 2), Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	code, out, errs := runCLI(t, "offsets", "show", "-c", cfg)
	if code != 0 || !strings.Contains(out, "TOPIC") || strings.Count(out, "\nin ") != 2 {
		t.Fatalf("offsets show: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs = runCLI(t, "offsets", "reset", "-c", cfg, "--to", "latest")
	if code != 0 || !strings.Contains(out, "in/0 -> ") {
		t.Fatalf("offsets reset: exit %d\n%s%s", code, out, errs)
	}
	adm := kadm.NewClient(cl)
	offs, err := adm.FetchOffsets(ctx, "tools")
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	offs.Each(func(o kadm.OffsetResponse) { total += o.At })
	if total != 10 {
		t.Fatalf("after reset to latest the group has %d committed in total, want 10", total)
	}
	if code, _, errs := runCLI(t, "offsets", "reset", "-c", cfg, "--to", "somewhere"); code != 2 {
		t.Fatalf("a bad --to: exit %d %s", code, errs)
	}

	// A transaction begun and never ended: what a crashed producer leaves.
	txn, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.TransactionalID("stuck"), kgo.TransactionTimeout(10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := txn.ProduceSync(ctx, &kgo.Record{Topic: "out", Partition: 1, Value: []byte("stuck")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)

	// While its coordinator has it as ongoing, the transaction is live,
	// however old its last write: aborting it would lose data.
	code, out, errs = runCLI(t, "transactions", "hanging", "-c", cfg, "--older-than", "1ms")
	if code != 0 || !strings.Contains(out, "no transaction open") {
		t.Fatalf("a live transaction was reported as hanging: exit %d\n%s%s", code, out, errs)
	}
	// Now the coordinator forgets it, as after the bugs that leave
	// transactions hanging: it answers that the transaction is over.
	pid := pidOf(t, ctx, adm)
	c.ControlKey(int16(kmsg.DescribeTransactions), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		resp := req.(*kmsg.DescribeTransactionsRequest).ResponseKind().(*kmsg.DescribeTransactionsResponse)
		for _, id := range req.(*kmsg.DescribeTransactionsRequest).TransactionalIDs {
			st := kmsg.NewDescribeTransactionsResponseTransactionState()
			st.TransactionalID, st.State, st.ProducerID = id, "CompleteAbort", pid
			resp.TransactionStates = append(resp.TransactionStates, st)
		}
		return resp, nil, true
	})
	code, out, errs = runCLI(t, "transactions", "hanging", "-c", cfg, "--older-than", "1ms")
	if code != 0 || !strings.Contains(out, ": producer ") || !strings.Contains(out, "the coordinator has the transaction as CompleteAbort") {
		t.Fatalf("transactions hanging: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs = runCLI(t, "transactions", "hanging", "-c", cfg, "--older-than", "1ms", "--abort")
	if code != 0 || !strings.Contains(out, "aborted out/") {
		t.Fatalf("transactions hanging --abort: exit %d\n%s%s", code, out, errs)
	}
	// The abort must unpin the last stable offset: a read_committed reader
	// reaches the high watermark again.
	rc, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	stable, err := kadm.NewClient(rc).ListEndOffsets(ctx, "out")
	if err != nil {
		t.Fatal(err)
	}
	hwm, err := adm.ListEndOffsets(ctx, "out")
	if err != nil {
		t.Fatal(err)
	}
	stable.Each(func(o kadm.ListedOffset) {
		if h, _ := hwm.Lookup("out", o.Partition); o.Offset != h.Offset {
			t.Errorf("out/%d: last stable offset %d, high watermark %d after the abort", o.Partition, o.Offset, h.Offset)
		}
	})
}

// pidOf returns the producer id of the one open transaction on out.
func pidOf(t *testing.T, ctx context.Context, adm *kadm.Client) int64 {
	d, err := adm.DescribeProducers(ctx, kadm.TopicsSet{"out": {0: {}, 1: {}}})
	if err != nil {
		t.Error(err)
		return -1
	}
	var pid int64 = -1
	d.EachProducer(func(p kadm.DescribedProducer) {
		if p.CurrentTxnStartOffset >= 0 {
			pid = p.ProducerID
		}
	})
	return pid
}

// runToEnd runs the pipeline of cfgPath until its group has consumed every
// record of its input, then stops it.
func runToEnd(t *testing.T, ctx context.Context, adm *kadm.Client, cfgPath, group string) {
	t.Helper()
	runUntil(t, ctx, cfgPath, func() (bool, error) {
		lags, err := adm.Lag(ctx, group)
		if err != nil {
			return false, err
		}
		return lags[group].FetchErr == nil && len(lags[group].Lag) > 0 && lags[group].Lag.Total() == 0, nil
	})
}

// runUntil runs the pipeline of cfgPath until done says so, then stops it.
func runUntil(t *testing.T, ctx context.Context, cfgPath string, done func() (bool, error)) {
	t.Helper()
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	p, err := engine.New(cfg, nil, engine.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	stopped := make(chan error, 1)
	go func() { stopped <- p.Run(runCtx) }()
	for {
		ok, err := done()
		if ok {
			break
		}
		select {
		case <-ctx.Done():
			stop()
			<-stopped
			t.Fatalf("the pipeline did not catch up: %v", err)
		case err := <-stopped:
			t.Fatalf("the pipeline stopped before it caught up: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	stop()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
}

// TestStateReset seeds pebble state for two tasks of two stateful steps,
// resets one step, and checks that its stores and changelog are gone, that
// the other step's are intact, and that the next run counts the reset step
// from zero while the other carries on. Then, as on a second instance
// after the first deleted the changelog, it resets local state with the
// changelog already gone: every task must be reset, not only task 0.
func TestStateReset(t *testing.T) {
	k := testkit.NewKafka(t, kfake.SeedTopics(2, "in"))
	c, addr := k.Cluster, k.Addr
	dir := t.TempDir()
	cfg := writeFile(t, fmt.Sprintf(`name: st
brokers: [%s]
instance_id: i1
checkpoint: {interval: 100ms}
state: {backend: pebble, dir: %q}
sources: {in: {topics: [in]}}
steps:
  - {name: per_key, aggregate: {fields: {n: count}}}
  - {name: other, from: in, aggregate: {fields: {m: count}}}
sinks:
  out: {from: per_key, topic: out}
  out2: {from: other, topic: out2}
`, addr, dir))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	const keys = 10
	produce := func(n int) {
		for i := range n {
			k := "k" + strconv.Itoa(i%keys)
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "in", Key: []byte(k), Value: []byte("{}")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	// tasks returns which tasks of step hold local state.
	tasks := func(step string) []int32 {
		t.Helper()
		b, err := state.OpenPebble(dir, state.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		var out []int32
		for task := range int32(2) {
			has, err := hasState(b, "st/"+step, task)
			if err != nil {
				t.Fatal(err)
			}
			if has {
				out = append(out, task)
			}
		}
		return out
	}
	both := []int32{0, 1}
	// last returns each key's last output on topic, field f.
	last := func(topic, f string) map[string]int {
		t.Helper()
		recs, err := offsets.ReadToEnd(ctx, cl, topic, true)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, r := range recs {
			var v map[string]int
			if err := json.Unmarshal(r.Value, &v); err != nil {
				t.Fatalf("%s: %s: %v", topic, r.Value, err)
			}
			out[string(r.Key)] = v[f]
		}
		return out
	}

	if code, _, errs := runCLI(t, "state", "reset", "-c", cfg, "--step", "nope"); code != 2 || !strings.Contains(errs, `not a stateful step of this pipeline; its stateful steps are per_key and other`) {
		t.Fatalf("a bad step: exit %d %s", code, errs)
	}

	produce(100)
	runToEnd(t, ctx, adm, cfg, "st")
	if got := tasks("per_key"); !slices.Equal(got, both) {
		t.Fatalf("seeding: step per_key has local state in tasks %v, want both", got)
	}
	if got := tasks("other"); !slices.Equal(got, both) {
		t.Fatalf("seeding: step other has local state in tasks %v, want both", got)
	}

	code, out, errs := runCLI(t, "state", "reset", "-c", cfg, "--step", "per_key")
	if code != 0 || !strings.Contains(out, "deleted changelog topic st-per_key-changelog (2 partitions)") || !strings.Contains(out, "reset the local state of step per_key in "+dir+": tasks 0, 1") {
		t.Fatalf("state reset: exit %d\n%s%s", code, out, errs)
	}
	if c.TopicInfo("st-per_key-changelog") != nil {
		t.Fatal("the changelog topic still exists")
	}
	if got := tasks("per_key"); len(got) != 0 {
		t.Fatalf("after the reset step per_key still has local state in tasks %v", got)
	}
	if got := tasks("other"); !slices.Equal(got, both) || c.TopicInfo("st-other-changelog") == nil {
		t.Fatalf("the reset of per_key touched step other: local state in tasks %v, changelog there: %v", got, c.TopicInfo("st-other-changelog") != nil)
	}

	// The next run: per_key counts from zero, other from where it was.
	produce(100)
	runToEnd(t, ctx, adm, cfg, "st")
	n, m := last("out", "n"), last("out2", "m")
	for i := range keys {
		k := "k" + strconv.Itoa(i)
		if n[k] != 10 || m[k] != 20 {
			t.Fatalf("key %s after the reset: per_key counted %d (want 10, the records since the reset), other %d (want 20)", k, n[k], m[k])
		}
	}

	// A second instance's turn: the changelog is gone already, and its
	// local state must go all the same, in every task.
	if got := tasks("per_key"); !slices.Equal(got, both) {
		t.Fatalf("reseeding: step per_key has local state in tasks %v, want both", got)
	}
	if resp, err := adm.DeleteTopic(ctx, "st-per_key-changelog"); err != nil || resp.Err != nil {
		t.Fatalf("deleting the changelog: %v %v", err, resp.Err)
	}
	code, out, errs = runCLI(t, "state", "reset", "-c", cfg, "--step", "per_key")
	if code != 0 || !strings.Contains(out, "changelog topic st-per_key-changelog does not exist") || !strings.Contains(out, "reset the local state of step per_key in "+dir+": tasks 0, 1") {
		t.Fatalf("state reset without a changelog: exit %d\n%s%s", code, out, errs)
	}
	if got := tasks("per_key"); len(got) != 0 {
		t.Fatalf("after the reset without a changelog, step per_key still has local state in tasks %v", got)
	}
	if got := tasks("other"); !slices.Equal(got, both) {
		t.Fatalf("the second reset touched step other: local state in tasks %v", got)
	}
	code, out, _ = runCLI(t, "state", "reset", "-c", cfg, "--step", "per_key")
	if code != 0 || !strings.Contains(out, "does not exist") || !strings.Contains(out, "no local state of step per_key") {
		t.Fatalf("a reset with nothing left: exit %d\n%s", code, out)
	}
}

// TestStateMetrics checks that the state figures reach their metrics.
func TestStateMetrics(t *testing.T) {
	m := newMetrics(func() engine.Stats {
		return engine.Stats{Restored: 1234, StateKeys: 56, StateBytes: 7890, StateDisk: 4321, Restoring: 3, LateRecords: 9}
	})
	families, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"pipeline_state_restored_records_total": 1234,
		"pipeline_state_keys":                   56,
		"pipeline_state_memory_bytes":           7890,
		"pipeline_state_disk_bytes":             4321,
		"pipeline_tasks_restoring":              3,
		"pipeline_late_records_total":           9,
		"pipeline_build_info":                   1,
	}
	for _, f := range families {
		w, ok := want[f.GetName()]
		if !ok {
			continue
		}
		var got float64
		if mt := f.GetMetric()[0]; mt.Counter != nil {
			got = mt.Counter.GetValue()
		} else {
			got = mt.Gauge.GetValue()
		}
		if got != w {
			t.Errorf("%s = %v, want %v", f.GetName(), got, w)
		}
		if f.GetName() == "pipeline_build_info" {
			labels := map[string]string{}
			for _, l := range f.GetMetric()[0].GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["go_version"] != runtime.Version() || labels["version"] == "" || labels["commit"] == "" {
				t.Errorf("pipeline_build_info labels %v", labels)
			}
		}
		delete(want, f.GetName())
	}
	if len(want) > 0 {
		t.Errorf("metrics missing: %v", want)
	}
}
