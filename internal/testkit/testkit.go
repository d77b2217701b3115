// Package testkit is what the tests of every package share: an embedded
// broker with a client, input records, reading a topic back, waiting for a
// group to commit, a pipeline running in a goroutine, a fault that fires
// every n-th time, and the exactly-once check of an output.
//
// It imports no package of this module but offsets, so that the engine's
// own tests can use it as well as those of cli, audit and bench.
package testkit

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/offsets"
)

// Kafka is an in-process embedded broker for one test, with a
// read_committed client and an admin client on it. It closes with the test.
type Kafka struct {
	T       testing.TB
	Cluster *kfake.Cluster
	Client  *kgo.Client // read_committed
	Admin   *kadm.Client
	Addr    string
}

// NewKafka starts a one-broker cluster with opts.
func NewKafka(t testing.TB, opts ...kfake.Opt) *Kafka {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	k := &Kafka{T: t, Cluster: c, Admin: kadm.NewClient(cl), Client: cl, Addr: c.ListenAddrs()[0]}
	t.Cleanup(func() { cl.Close(); c.Close() })
	return k
}

// Topic creates a topic.
func (k *Kafka) Topic(name string, partitions int32) {
	k.T.Helper()
	if err := k.Cluster.CreateTopic(name, partitions, nil); err != nil {
		k.T.Fatal(err)
	}
}

// Produce writes records and returns when all are acknowledged.
func (k *Kafka) Produce(rs ...*kgo.Record) {
	k.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := k.Client.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		k.T.Fatal(err)
	}
}

// Input writes n records keyed k<i%keys> with value {"k":..,"seq":i}, in
// order, and returns when all are acknowledged. poison lists seqs written
// as broken JSON instead.
func (k *Kafka) Input(topic string, n, keys int, poison map[int]bool) {
	k.T.Helper()
	rs := make([]*kgo.Record, n)
	for i := range rs {
		key := "k" + strconv.Itoa(i%keys)
		v := fmt.Sprintf(`{"k":%q,"seq":%d}`, key, i)
		if poison[i] {
			v = `{"k":` + strconv.Quote(key) + `,"seq":`
		}
		rs[i] = &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte(v)}
	}
	k.Produce(rs...)
}

// ReadAll reads topic with read_committed from the start to its end.
func (k *Kafka) ReadAll(topic string) []*kgo.Record {
	k.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := offsets.ReadToEnd(ctx, k.Client, topic, true)
	if err != nil {
		k.T.Fatalf("reading %s: %v", topic, err)
	}
	return out
}

// WaitCommitted polls until group has committed, on every partition of
// topic, the offset after its last record visible to read_committed. (A
// topic written in transactions ends with a marker no consumer commits
// past.) The topic must not grow meanwhile.
func (k *Kafka) WaitCommitted(ctx context.Context, group, topic string) error {
	recs, err := offsets.ReadToEnd(ctx, k.Client, topic, true)
	if err != nil {
		return err
	}
	want := map[int32]int64{}
	for _, r := range recs {
		want[r.Partition] = r.Offset + 1
	}
	for {
		offs, err := k.Admin.FetchOffsets(ctx, group)
		if err == nil {
			done := true
			for p, o := range want {
				if c, ok := offs.Lookup(topic, p); !ok || c.At < o {
					done = false
				}
			}
			if done {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("group %s did not commit the end of %s: %w", group, topic, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Runner is what runs until its context ends: a pipeline.
type Runner interface {
	Run(ctx context.Context) error
}

// Start runs r in a goroutine. stop cancels it and returns Run's error;
// the test's end stops it too.
func Start(t testing.TB, r Runner) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var err error
	var stopped atomic.Bool
	stop = func() error {
		if stopped.CompareAndSwap(false, true) {
			cancel()
			err = <-done
		}
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// RunUntilCommitted runs r until group has committed the end of topic,
// then stops it; Run's error fails the test.
func RunUntilCommitted(t testing.TB, k *Kafka, r Runner, group, topic string) {
	t.Helper()
	stop := Start(t, r)
	wctx, wcancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer wcancel()
	werr := k.WaitCommitted(wctx, group, topic)
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
	if werr != nil {
		t.Fatal(werr)
	}
}

// WaitSettled polls until group has committed the end of every topic and
// the topics stopped growing: a pipeline that reads back what it writes
// (key_by's repartition topics) is done only when a round finds nothing new.
// It compares the topics' last stable offsets rather than reading them: a
// pipeline deletes what it consumed of a repartition topic, and a read from
// the start listed a moment before fails once that start is gone.
func (k *Kafka) WaitSettled(ctx context.Context, group string, topics ...string) error {
	ends := func() (int64, error) {
		listed, err := k.Admin.ListCommittedOffsets(ctx, topics...)
		if err == nil {
			err = listed.Error()
		}
		if err != nil {
			return 0, fmt.Errorf("listing the ends of %v: %w", topics, err)
		}
		var n int64
		listed.Each(func(o kadm.ListedOffset) { n += o.Offset })
		return n, nil
	}
	last := int64(-1)
	for {
		for _, topic := range topics {
			if err := k.WaitCommitted(ctx, group, topic); err != nil {
				return err
			}
		}
		n, err := ends()
		if err != nil {
			return err
		}
		if n == last {
			return nil
		}
		last = n
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// RunUntilSettled runs r until WaitSettled returns for group and topics.
func RunUntilSettled(t testing.TB, k *Kafka, r Runner, group string, topics ...string) {
	t.Helper()
	stop := Start(t, r)
	wctx, wcancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer wcancel()
	werr := k.WaitSettled(wctx, group, topics...)
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
	if werr != nil {
		t.Fatal(werr)
	}
}

// EveryNth is a fault that fires on every n-th call of Hit, and counts
// how often it fired, so that a test can show its fault happened.
type EveryNth struct {
	n            int64
	calls, fired atomic.Int64
}

// NewEveryNth returns a fault firing on calls n, 2n, 3n...
func NewEveryNth(n int) *EveryNth { return &EveryNth{n: int64(n)} }

// Hit counts a call and reports whether the fault fires on it.
func (e *EveryNth) Hit() bool {
	if e.calls.Add(1)%e.n != 0 {
		return false
	}
	e.fired.Add(1)
	return true
}

// Fired returns how many times the fault fired.
func (e *EveryNth) Fired() int64 { return e.fired.Load() }

// Logger is a logger for the code under test: silent, or debug output on
// stderr when PIPELINE_TEST_LOG is set.
func Logger(testing.TB) *slog.Logger {
	if os.Getenv("PIPELINE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// CheckExactlyOnce asserts that every input seq outside skip appears
// exactly once in out, and per key in increasing order (records as Input
// writes them).
func CheckExactlyOnce(t testing.TB, out []*kgo.Record, n int, skip map[int]bool) {
	t.Helper()
	if problems := ExactlyOnceProblems(out, n, skip); len(problems) > 0 {
		t.Fatal(strings.Join(problems, "\n"))
	}
}

// ExactlyOnceProblems is CheckExactlyOnce's findings, for a caller that
// polls.
func ExactlyOnceProblems(out []*kgo.Record, n int, skip map[int]bool) []string {
	var problems []string
	seen := make([]int, n)
	last := map[string]int{}
	for _, r := range out {
		var v struct {
			K   string `json:"k"`
			Seq int    `json:"seq"`
		}
		if err := json.Unmarshal(r.Value, &v); err != nil {
			return append(problems, fmt.Sprintf("output %s/%d@%d: %v", r.Topic, r.Partition, r.Offset, err))
		}
		if v.Seq < 0 || v.Seq >= n {
			return append(problems, fmt.Sprintf("output seq %d out of range", v.Seq))
		}
		seen[v.Seq]++
		if p, ok := last[v.K]; ok && v.Seq <= p {
			problems = append(problems, fmt.Sprintf("key %s: seq %d after %d (order broken) at %s/%d@%d", v.K, v.Seq, p, r.Topic, r.Partition, r.Offset))
		}
		last[v.K] = v.Seq
	}
	var lost, dup []int
	for i, c := range seen {
		switch {
		case skip[i] && c != 0:
			problems = append(problems, fmt.Sprintf("seq %d should not be in the output", i))
		case skip[i]:
		case c == 0:
			lost = append(lost, i)
		case c > 1:
			dup = append(dup, i)
		}
	}
	if len(lost) > 0 || len(dup) > 0 {
		problems = append(problems, fmt.Sprintf("%d lost (first %v), %d duplicated (first %v)", len(lost), first5(lost), len(dup), first5(dup)))
	}
	return problems
}

func first5(s []int) []int {
	if len(s) > 5 {
		return s[:5]
	}
	return s
}
