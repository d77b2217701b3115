package engine

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pipeline-run/pipeline/internal/testkit"
)

// TestATransactionLeftOpenWithOffsetsIsTakenOverAtOnce leaves what a
// predecessor that died mid-commit leaves (a broker crash between the
// offsets joining the transaction and its end, or a kill of the
// pipeline there): a transaction still open under the pipeline's
// transactional id, holding output and the group's offsets. Until it ends,
// the broker refuses the group's committed offsets to a read_committed
// consumer (UNSTABLE_OFFSET_COMMIT), so a client that initialises its
// producer only to produce never reads, never produces, and waits out
// transactions.timeout for the broker to abort it. The pipeline must take
// the transactional id over as it starts, abort the transaction and run on
// well within that time-out.
func TestATransactionLeftOpenWithOffsetsIsTakenOverAtOnce(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("in", 2)
	k.Topic("out", 2)
	const n = 400
	k.Input("in", n, 20, nil)
	cfg := parseConfig(t, passThrough) // transactions.timeout 20s

	// The group exists, as it does once a pipeline has committed.
	var start0 kadm.Offsets
	for p := range int32(2) {
		start0.Add(kadm.Offset{Topic: "in", Partition: p, At: 0, LeaderEpoch: -1})
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := k.Admin.CommitAllOffsets(ctx, cfg.Group, start0); err != nil {
		t.Fatal(err)
	}

	// The predecessor: it produced and put offsets into its transaction,
	// then stopped, the transaction open.
	prev, err := kgo.NewClient(kgo.SeedBrokers(k.Addr), kgo.TransactionalID(cfg.Transactions.ID(cfg.InstanceID)),
		kgo.TransactionTimeout(cfg.Transactions.Timeout), kgo.DefaultProduceTopic("out"))
	if err != nil {
		t.Fatal(err)
	}
	defer prev.Close()
	if err := prev.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := prev.ProduceSync(ctx, &kgo.Record{Value: []byte(`{"left":"open"}`)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	pid, epoch, err := prev.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = cfg.Transactions.ID(cfg.InstanceID), pid, epoch, cfg.Group
	addResp, err := add.RequestWith(ctx, prev)
	if err == nil {
		err = kerr.ErrorForCode(addResp.ErrorCode)
	}
	if err != nil {
		t.Fatalf("adding offsets to the predecessor's transaction: %v", err)
	}
	commit := kmsg.NewPtrTxnOffsetCommitRequest()
	commit.TransactionalID, commit.Group, commit.ProducerID, commit.ProducerEpoch = cfg.Transactions.ID(cfg.InstanceID), cfg.Group, pid, epoch
	commit.Generation, commit.MemberID = -1, ""
	topics, err := k.Admin.ListTopics(ctx, "in")
	if err != nil {
		t.Fatal(err)
	}
	topic := kmsg.NewTxnOffsetCommitRequestTopic()
	topic.Topic, topic.TopicID = "in", topics["in"].ID
	for p := range int32(2) {
		part := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		part.Partition, part.Offset, part.LeaderEpoch = p, 10, -1
		topic.Partitions = append(topic.Partitions, part)
	}
	commit.Topics = append(commit.Topics, topic)
	commitResp, err := commit.RequestWith(ctx, prev)
	if err != nil {
		t.Fatalf("committing offsets in the predecessor's transaction: %v", err)
	}
	for _, tt := range commitResp.Topics {
		for _, pp := range tt.Partitions {
			if err := kerr.ErrorForCode(pp.ErrorCode); err != nil {
				t.Fatalf("committing offsets in the predecessor's transaction, partition %d: %v", pp.Partition, err)
			}
		}
	}
	// The fault fired: the group's offsets are held by the open
	// transaction.
	fetched, err := k.Admin.FetchOffsets(kadm.RequireStable(ctx), cfg.Group)
	if err == nil {
		err = fetched.Error()
	}
	if !errors.Is(err, kerr.UnstableOffsetCommit) {
		t.Fatalf("a stable offset fetch of group %s returned %v, want UNSTABLE_OFFSET_COMMIT: the predecessor's transaction does not hold the offsets", cfg.Group, err)
	}

	// The pipeline's first producer id requests fail, as they do while a
	// broker restarts: the client begins its transaction without one and
	// asks again only when it next produces, which, its offsets held, it
	// never does.
	var failed atomic.Int64
	const failures = 3 // the first try and both of the client's retries
	k.Cluster.ControlKey(int16(kmsg.InitProducerID), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if failed.Load() >= failures {
			return nil, nil, false
		}
		k.Cluster.KeepControl()
		failed.Add(1)
		resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode = kerr.CoordinatorLoadInProgress.Code
		return resp, nil, true
	})
	p := newPipeline(t, k, passThrough, nil, WithClientOpts(kgo.RequestRetries(failures-1),
		kgo.RetryBackoffFn(func(int) time.Duration { return 10 * time.Millisecond })))
	start := time.Now()
	stop := testkit.Start(t, p)
	// A third of transactions.timeout: the broker's own abort comes later.
	wctx, wcancel := context.WithTimeout(t.Context(), cfg.Transactions.Timeout/3)
	werr := k.WaitCommitted(wctx, cfg.Group, "in")
	wcancel()
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
	if werr != nil {
		t.Fatalf("the pipeline did not take the open transaction over: %v (transactions.timeout %s)", werr, cfg.Transactions.Timeout)
	}
	if failed.Load() < failures {
		t.Fatalf("%d producer id requests failed, want %d: the fault did not fire", failed.Load(), failures)
	}
	t.Logf("committed the whole input %v after the start", time.Since(start).Round(time.Millisecond))
	out := k.ReadAll("out")
	for _, r := range out {
		if string(r.Value) == `{"left":"open"}` {
			t.Fatal("the predecessor's record is visible: its transaction committed instead of aborting")
		}
	}
	testkit.CheckExactlyOnce(t, out, n, nil)
}
