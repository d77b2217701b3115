package integration

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The broker's own restarts are faults later tests inject; this shows they
// fire and that the broker comes back with its data, committed and aborted
// transactions included, on the same address.
func TestBrokerKeepsItsDataAcrossRestarts(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func(ctx context.Context, b Broker) error
	}{
		{"after a clean stop", func(ctx context.Context, b Broker) error { return b.Stop(ctx) }},
		{"after SIGKILL", func(_ context.Context, b Broker) error { return b.Kill() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			if !e.broker.CanRestart() {
				t.Skipf("the %s broker is not the suite's to restart", e.broker.Kind())
			}
			CreateTopics(t, e.adm, 2, e.input, e.output)
			ProduceInput(t, e.seeds, InputSpec{Topic: e.input, Records: 1000, Keys: 10})
			f := &fixture{t: t, seeds: e.seeds, adm: e.adm, out: e.output, group: e.group, partitions: 2}
			outs := []outRec{{0, "a", []byte("committed")}, {1, "b", []byte("committed")}}
			f.transact(kgo.TryCommit, outs)
			f.transact(kgo.TryAbort, outs)

			// Kafka writes a transaction's markers after it answers
			// EndTxn (kfake before): let them land, or "before" would
			// catch the aborted transaction still open.
			WaitFor(t, 30*time.Second, "the output's transactions to settle", func() (bool, string) {
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				defer cancel()
				ts, err := listPartitions(ctx, e.adm, e.output)
				if err != nil {
					return false, err.Error()
				}
				return maps.Equal(ts.lso, ts.hwm), fmt.Sprintf("last stable offsets %v, high watermarks %v", ts.lso, ts.hwm)
			})
			before := e.listed(e.input, e.output)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			if err := tc.stop(ctx, e.broker); err != nil {
				t.Fatalf("stopping the broker: %v", err)
			}
			if err := e.broker.Start(ctx); err != nil {
				t.Fatalf("restarting the broker: %v", err)
			}
			WaitFor(t, 30*time.Second, "the restarted broker to list offsets", func() (bool, string) {
				ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
				defer cancel()
				_, err := listPartitions(ctx, e.adm, e.input)
				return err == nil, errString(err)
			})
			after := e.listed(e.input, e.output)
			for what, want := range before {
				if got := after[what]; !maps.Equal(got, want) {
					t.Errorf("%s: %v before the restart, %v after", what, want, got)
				}
			}

			ctx, cancel = context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			ts, err := listPartitions(ctx, e.adm, e.input)
			if err != nil {
				t.Fatal(err)
			}
			recs, err := readTopic(ctx, e.cl, e.adm, ts, ts.lso, readCommitted)
			if err != nil {
				t.Fatal(err)
			}
			in, err := parseInput(recs)
			if err != nil {
				t.Fatal(err)
			}
			if len(in) != 1000 || in[0].Seq != 0 || in[999].Seq != 999 {
				t.Errorf("read back %d input records after the restart, want seqs 0..999", len(in))
			}
			out, err := listPartitions(ctx, e.adm, e.output)
			if err != nil {
				t.Fatal(err)
			}
			committed, err := readTopic(ctx, e.cl, e.adm, out, out.lso, readCommitted)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(committed[0]) + len(committed[1]); n != 2 {
				t.Errorf("read back %d committed output records after the restart, want 2 (and the aborted 2 hidden)", n)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// listed returns the start, end and last stable offsets of topics, keyed by
// "<topic> <which>".
func (e *env) listed(topics ...string) map[string]map[int32]int64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), 10*time.Second)
	defer cancel()
	out := make(map[string]map[int32]int64)
	for _, topic := range topics {
		ts, err := listPartitions(ctx, e.adm, topic)
		if err != nil {
			e.t.Fatal(err)
		}
		out[topic+" start offsets"] = ts.start
		out[topic+" high watermarks"] = ts.hwm
		out[topic+" last stable offsets"] = ts.lso
	}
	return out
}

// kfakeCrashKeepsTxnOpen explains the embedded broker's one known fault in
// crash recovery, which TestTransactionOpenAtABrokerCrashIsAborted pins.
const kfakeCrashKeepsTxnOpen = "kfake, restarted after a crash, marks a transaction that was open at the crash as aborted " +
	"in its index of aborted transactions but writes no abort marker to the partition; read_committed clients " +
	"(franz-go's as Kafka's Java one) skip a producer listed as aborted until they meet its abort marker, so " +
	"every later transaction of that producer, committed or not, stays hidden from them for good"

// A transaction left open by a broker crash must end aborted once the
// broker is back, with an abort marker in its partitions, so that the same
// producer's later transactions are visible to read_committed: Kafka's
// transaction coordinator aborts it when the producer's next instance
// initialises. The embedded broker does not (kfakeCrashKeepsTxnOpen); on it
// this test expects that difference, and fails once it is gone so that the
// tolerance in TestPipelineRidesOutBrokerRestarts can go too.
func TestTransactionOpenAtABrokerCrashIsAborted(t *testing.T) {
	e := newEnv(t)
	if !e.broker.CanRestart() {
		t.Skipf("the %s broker is not the suite's to restart", e.broker.Kind())
	}
	CreateTopics(t, e.adm, 1, e.output)
	f := &fixture{t: t, seeds: e.seeds, adm: e.adm, out: e.output, group: e.group, partitions: 1}
	txnID := e.group + "-crash"
	producer := func() *kgo.Client {
		cl, err := kgo.NewClient(
			kgo.SeedBrokers(e.seeds...),
			kgo.TransactionalID(txnID),
			kgo.TransactionTimeout(time.Minute),
			kgo.DefaultProduceTopic(e.output),
			kgo.RecordPartitioner(kgo.ManualPartitioner()),
		)
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	rec := func(v string) []outRec { return []outRec{{0, "k", []byte(v)}} }

	before := producer()
	f.produceInTxn(before, rec("committed before the crash"))
	if err := before.EndTransaction(t.Context(), kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	f.produceInTxn(before, rec("open at the crash")) // acknowledged, so in the log
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := e.broker.Kill(); err != nil {
		t.Fatalf("killing the broker: %v", err)
	}
	before.Close()
	if err := e.broker.Start(ctx); err != nil {
		t.Fatalf("restarting the broker: %v", err)
	}

	after := producer()
	defer after.Close()
	f.produceInTxn(after, rec("committed after the crash"))
	if err := after.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}

	var ts *topicState
	WaitFor(t, time.Minute, "the output's last stable offset to reach its end", func() (bool, string) {
		var err error
		if ts, err = listPartitions(ctx, e.adm, e.output); err != nil {
			return false, err.Error()
		}
		return ts.lso[0] == ts.hwm[0], fmt.Sprintf("last stable offset %d, high watermark %d", ts.lso[0], ts.hwm[0])
	})
	committed, err := readTopic(ctx, e.cl, e.adm, ts, ts.lso, readCommitted)
	if err != nil {
		t.Fatal(err)
	}
	var visible []string
	for _, r := range committed[0] {
		visible = append(visible, string(r.Value))
	}
	all, err := readTopic(ctx, e.cl, e.adm, ts, ts.hwm, readUncommittedWithMarkers)
	if err != nil {
		t.Fatal(err)
	}
	h := &history{uncommitted: all}
	var r Report
	h.classify(&r, 0)
	t.Logf("read_committed sees %q; the log holds %d commit and %d abort markers", visible, r.CommitMarkers, r.AbortMarkers)

	want := []string{"committed before the crash", "committed after the crash"}
	if e.broker.Kind() == "kfake-process" {
		if slices.Equal(visible, want) {
			t.Fatalf("kfake now aborts a transaction open at a crash as Kafka does: remove kfakeCrashKeepsTxnOpen, this branch and the tolerance in TestPipelineRidesOutBrokerRestarts")
		}
		if !slices.Equal(visible, want[:1]) || r.AbortMarkers != 0 {
			t.Fatalf("kfake after a crash: read_committed sees %q with %d abort markers; want the known difference (%q only, no abort marker): %s",
				visible, r.AbortMarkers, want[:1], kfakeCrashKeepsTxnOpen)
		}
		t.Logf("known kfake difference, as expected: %s", kfakeCrashKeepsTxnOpen)
		return
	}
	if !slices.Equal(visible, want) {
		t.Errorf("read_committed sees %q, want %q", visible, want)
	}
	if r.AbortMarkers != 1 {
		t.Errorf("%d abort markers, want 1: the transaction open at the crash must end with one", r.AbortMarkers)
	}
}

// The two providers of real Kafka run one release, so that a run on Docker
// and a run on Java test the same broker.
func TestKafkaProvidersRunOneRelease(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	pom, err := os.ReadFile(filepath.Join(root, "scripts", "kafka", "pom.xml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`<kafka\.version>([^<]+)</kafka\.version>`).FindSubmatch(pom)
	if m == nil {
		t.Fatal("no kafka.version in scripts/kafka/pom.xml")
	}
	if want := "apache/kafka:" + string(m[1]); kafkaImage != want {
		t.Errorf("testcontainers runs %s, scripts/kafka-local.sh runs Kafka %s: pin kafkaImage to %s", kafkaImage, m[1], want)
	}
}
