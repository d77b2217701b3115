package offsets

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// txnCluster starts a broker with a one-partition topic "cl", a
// transactional client writing to it and a plain client to read it.
func txnCluster(t *testing.T) (context.Context, *kgo.Client, *kgo.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "cl"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	tx, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("cl"), kgo.TransactionalID("w"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tx.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return ctx, tx, cl
}

// TestReadPartitionWaitsForOpenTransactions: records written in a
// transaction that is not decided yet sit above the last stable offset.
// A restore reading to that offset would miss them once they commit (their
// marker may come after the partition moved to a new owner), so
// ReadPartition waits for the decision, and then returns what committed
// and nothing of what aborted.
func TestReadPartitionWaitsForOpenTransactions(t *testing.T) {
	for _, commit := range []bool{true, false} {
		name := map[bool]string{true: "committed", false: "aborted"}[commit]
		t.Run(name, func(t *testing.T) {
			ctx, tx, cl := txnCluster(t)

			// One committed record, then three in an open transaction.
			if err := tx.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			if err := tx.ProduceSync(ctx, &kgo.Record{Value: []byte("before")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
				t.Fatal(err)
			}
			if err := tx.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			for _, v := range []string{"a", "b", "c"} {
				if err := tx.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}

			var decided atomic.Bool
			type result struct {
				got          []string
				afterDecided bool
				err          error
			}
			done := make(chan result, 1)
			go func() {
				var got []string
				err := ReadPartition(ctx, cl, "cl", 0, 0, func(recs []*kgo.Record, _ Progress) error {
					for _, r := range recs {
						got = append(got, string(r.Value))
					}
					return nil
				})
				done <- result{got, decided.Load(), err}
			}()
			select {
			case r := <-done:
				t.Fatalf("ReadPartition returned %q (err %v) while a transaction was open", r.got, r.err)
			case <-time.After(500 * time.Millisecond):
			}
			decided.Store(true)
			end := kgo.TryAbort
			if commit {
				end = kgo.TryCommit
			}
			if err := tx.EndTransaction(ctx, end); err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil {
				t.Fatal(r.err)
			}
			if !r.afterDecided {
				t.Fatal("ReadPartition returned before the transaction was decided")
			}
			want := []string{"before"}
			if commit {
				want = append(want, "a", "b", "c")
			}
			if len(r.got) != len(want) {
				t.Fatalf("read %q, want %q", r.got, want)
			}
			for i := range want {
				if r.got[i] != want[i] {
					t.Fatalf("read %q, want %q", r.got, want)
				}
			}
		})
	}
}

// TestReadPartitionStopsWaitingForAnAbandonedTransaction: a transaction
// nobody decides (its producer died) is waited for decideWait, then the
// read stops below it.
func TestReadPartitionStopsWaitingForAnAbandonedTransaction(t *testing.T) {
	old := decideWait
	decideWait = 400 * time.Millisecond
	defer func() { decideWait = old }()
	ctx, tx, cl := txnCluster(t)
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := tx.ProduceSync(ctx, &kgo.Record{Value: []byte("open")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	n := 0
	err := ReadPartition(ctx, cl, "cl", 0, 0, func(recs []*kgo.Record, _ Progress) error {
		n += len(recs)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("read %d records of a transaction still open", n)
	}
	if waited := time.Since(start); waited < decideWait {
		t.Fatalf("returned after %v, before giving the transaction %v to be decided", waited, decideWait)
	}
}
