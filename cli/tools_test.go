package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestOffsetsAndHangingTransactions(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "in", "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addr := c.ListenAddrs()[0]
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

func TestStateReset(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "in", "st-per_key-changelog"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dir := t.TempDir()
	cfg := writeFile(t, fmt.Sprintf(`name: st
brokers: [%s]
state: {backend: pebble, dir: %q}
sources: {in: {topics: [in]}}
steps: [{name: per_key, aggregate: {fields: {n: count}}}]
sinks: {out: {topic: out}}
`, c.ListenAddrs()[0], dir))
	if code, _, errs := runCLI(t, "state", "reset", "-c", cfg, "--step", "nope"); code != 2 || !strings.Contains(errs, `not a stateful step of this pipeline (stateful: [per_key])`) {
		t.Fatalf("a bad step: exit %d %s", code, errs)
	}
	code, out, errs := runCLI(t, "state", "reset", "-c", cfg, "--step", "per_key")
	if code != 0 || !strings.Contains(out, "deleted changelog topic st-per_key-changelog (2 partitions)") || !strings.Contains(out, "reset the local state of step per_key") {
		t.Fatalf("state reset: exit %d\n%s%s", code, out, errs)
	}
	if c.TopicInfo("st-per_key-changelog") != nil {
		t.Fatal("the changelog topic still exists")
	}
	code, out, _ = runCLI(t, "state", "reset", "-c", cfg, "--step", "per_key")
	if code != 0 || !strings.Contains(out, "does not exist") {
		t.Fatalf("second reset: exit %d\n%s", code, out)
	}
}
