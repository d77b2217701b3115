package engine

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pipeline-run/pipeline/internal/testkit"
)

// TestARunningPipelineReportsOutputsHeldBack: a transaction left open on
// an output partition by someone else, which its coordinator no longer has,
// holds back that partition's last stable offset; the running pipeline
// counts the partition (Stats.HeldPartitions, the metric's source).
func TestARunningPipelineReportsOutputsHeldBack(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("in", 2)
	k.Topic("out", 2)
	k.Input("in", 100, 10, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// A crashed producer's transaction on out/1.
	stuck, err := kgo.NewClient(kgo.SeedBrokers(k.Addr), kgo.TransactionalID("stuck"), kgo.TransactionTimeout(10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	if err := stuck.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := stuck.ProduceSync(ctx, &kgo.Record{Topic: "out", Partition: 1, Value: []byte("stuck")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	d, err := k.Admin.DescribeProducers(ctx, kadm.TopicsSet{"out": {1: {}}})
	if err != nil {
		t.Fatal(err)
	}
	var pid int64 = -1
	d.EachProducer(func(p kadm.DescribedProducer) {
		if p.CurrentTxnStartOffset >= 0 {
			pid = p.ProducerID
		}
	})
	// Its coordinator forgets it, as after the bugs that leave transactions
	// hanging.
	k.Cluster.ControlKey(int16(kmsg.DescribeTransactions), func(req kmsg.Request) (kmsg.Response, error, bool) {
		k.Cluster.KeepControl()
		resp := req.(*kmsg.DescribeTransactionsRequest).ResponseKind().(*kmsg.DescribeTransactionsResponse)
		for _, id := range req.(*kmsg.DescribeTransactionsRequest).TransactionalIDs {
			st := kmsg.NewDescribeTransactionsResponseTransactionState()
			st.TransactionalID, st.State, st.ProducerID = id, "CompleteAbort", pid
			resp.TransactionStates = append(resp.TransactionStates, st)
		}
		return resp, nil, true
	})

	body := `
instance_id: i1
checkpoint: {interval: 100ms, timeout: 1s}
transactions: {timeout: 2s}
sources: {in: {topics: [in]}}
sinks: {out: {topic: out}}
`
	p := newPipeline(t, k, body, nil)
	p.hangingEvery = 200 * time.Millisecond
	stop := testkit.Start(t, p)
	deadline := time.Now().Add(30 * time.Second)
	for p.Stats().HeldPartitions != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("held partitions %d, want 1 (out/1)", p.Stats().HeldPartitions)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
