package bench

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestGateWaitsForTheLastCommitsMarkers: an arm's last transaction may be
// committed without its markers written yet, its records above the last
// stable offset for a moment. The gate waits for them instead of counting
// them missing. Here the transaction is decided 300 ms after the gate
// began reading.
func TestGateWaitsForTheLastCommitsMarkers(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tx, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("out"), kgo.TransactionalID("arm"))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	const n = 100
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for seq := range int64(n) {
		r := &kgo.Record{Partition: int32(seq % 2), Value: Value(nil, seq, 0, 60)}
		if err := tx.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	gated := make(chan error, 1)
	go func() { gated <- gate(ctx, cl, "out", Expect{N: n}) }()
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
