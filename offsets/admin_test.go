package offsets

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDescribeLagSkipsMarkers writes to partition 0 a committed
// transaction, to partition 1 a plain record and an aborted transaction,
// to partition 2 two plain records; the group has consumed every data
// record of 0 and 1, and one of 2. The transaction markers (and the
// aborted records) after the committed offsets are not lag: a
// read_committed consumer has nothing left to read there.
func TestDescribeLagSkipsMarkers(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seeds := c.ListenAddrs()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic("t"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	txn := func(partition int32, n int, commit kgo.TransactionEndTry) {
		t.Helper()
		p, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic("t"), kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.TransactionalID("w"), kgo.TransactionTimeout(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for range n {
			if err := p.ProduceSync(ctx, &kgo.Record{Partition: partition, Value: []byte("x")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	plain := func(partition int32, n int) {
		t.Helper()
		for range n {
			if err := cl.ProduceSync(ctx, &kgo.Record{Partition: partition, Value: []byte("x")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	txn(0, 3, kgo.TryCommit) // offsets 0-2, marker 3
	plain(1, 1)              // offset 0
	txn(1, 2, kgo.TryAbort)  // offsets 1-2 aborted, marker 3
	plain(2, 2)              // offsets 0-1
	adm := kadm.NewClient(cl)
	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: "t", Partition: 0, At: 3})
	os.Add(kadm.Offset{Topic: "t", Partition: 1, At: 1})
	os.Add(kadm.Offset{Topic: "t", Partition: 2, At: 1})
	if resp, err := adm.CommitOffsets(ctx, "g", os); err != nil || resp.Error() != nil {
		t.Fatalf("committing: %v %v", err, resp.Error())
	}

	lags, err := Describe(ctx, cl, "g", "t")
	if err != nil {
		t.Fatal(err)
	}
	want := []Lag{
		{Topic: "t", Partition: 0, Committed: 3, End: 4, Lag: 0},
		{Topic: "t", Partition: 1, Committed: 1, End: 4, Lag: 0},
		{Topic: "t", Partition: 2, Committed: 1, End: 2, Lag: 1},
	}
	if len(lags) != len(want) {
		t.Fatalf("lags = %+v, want %+v", lags, want)
	}
	for i := range want {
		if lags[i] != want[i] {
			t.Errorf("partition %d: %+v, want %+v", i, lags[i], want[i])
		}
	}
}
