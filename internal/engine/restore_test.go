package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pipeline-run/pipeline/internal/codec"
	"github.com/pipeline-run/pipeline/internal/testkit"
	"github.com/pipeline-run/pipeline/offsets"
	"github.com/pipeline-run/pipeline/pipeline/state"
	"github.com/pipeline-run/pipeline/wire"
)

const restoringCount = `
instance_id: i1
checkpoint: {interval: 100ms, timeout: 1s}
transactions: {timeout: 2s}
consumer: {session_timeout: 6s}
sources: {in: {topics: [in]}}
steps:
  - name: per_key
    aggregate:
      fields: {n: count}
      emit: update
sinks: {out: {topic: out}}
`

// produceTo writes keys[i] with value {"seq":i} to partition p of in.
func produceTo(k *testkit.Kafka, p int32, keys []string, from int) {
	k.T.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		k.T.Fatal(err)
	}
	defer cl.Close()
	rs := make([]*kgo.Record, len(keys))
	for i, key := range keys {
		rs[i] = &kgo.Record{Topic: "in", Partition: p, Key: []byte(key), Value: fmt.Appendf(nil, `{"seq":%d}`, from+i)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		k.T.Fatal(err)
	}
}

func keysOf(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// TestALongRestoreKeepsNoOtherPartitionWaiting restarts a keyed count whose
// partition 0 has 4,000 keys of state and partition 1 a few, with every
// fetch of partition 0's changelog held for 5 s: its restore outlasts
// transactions.timeout (2 s) twice over. The restore used to run inside the
// checkpoint that first read the partition, with partition 1's outputs in
// the open transaction: nothing committed until it ended, and past the
// time-out the broker aborted the transaction, the client was rebuilt and
// the restore began again. Now partition 1 must commit while partition 0
// restores, no checkpoint may abort, and the counts must be exact.
func TestALongRestoreKeepsNoOtherPartitionWaiting(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("in", 2)
	big, small := keysOf("a", 4000), keysOf("b", 5)
	produceTo(k, 0, big, 0)
	produceTo(k, 1, small, 0)
	testkit.RunUntilCommitted(t, k, newPipeline(t, k, restoringCount, nil), "t", "in")

	changelog := wire.ChangelogTopic("t", "per_key")
	id := k.Cluster.TopicInfo(changelog).TopicID
	var held atomic.Int64
	var restoreFetched atomic.Int64 // unix nanos the last held fetch was let go
	k.Cluster.ControlKey(int16(kmsg.Fetch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		k.Cluster.KeepControl()
		for _, rt := range kreq.(*kmsg.FetchRequest).Topics {
			if rt.Topic != changelog && rt.TopicID != id {
				continue
			}
			for _, rp := range rt.Partitions {
				if rp.Partition == 0 {
					held.Add(1)
					k.Cluster.SleepControl(func() { time.Sleep(5 * time.Second) })
					restoreFetched.Store(time.Now().UnixNano())
					return nil, nil, false
				}
			}
		}
		return nil, nil, false
	})

	// Ten records a poll at most, five a partition: most of partition 0's
	// records reach the coordinator with its task restoring and are not
	// handed out.
	p := newPipeline(t, k, strings.Replace(restoringCount, "session_timeout: 6s", "session_timeout: 6s, max_poll_records: 10", 1), nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	started := time.Now()
	go func() { done <- p.Run(ctx) }()
	ended := make(chan struct{})
	var runErr error
	go func() { runErr = <-done; close(ended) }()
	produceTo(k, 0, big[:100], 2000)
	waitFor(t, ended, 20*time.Second, "partition 0 restoring apart", func() bool { return p.Stats().Restoring == 1 })
	produceTo(k, 1, small, 1000)
	// Partition 1 ends at 10 records and a marker after each of the two
	// runs' transactions that wrote it: its committed offset passes 10.
	waitFor(t, ended, 20*time.Second, "partition 1's new records committed", func() bool {
		offs, err := k.Admin.FetchOffsets(ctx, "t")
		if err != nil {
			return false
		}
		o, ok := offs.Lookup("in", 1)
		return ok && o.At >= 10
	})
	p1Committed := time.Now()
	if p.Stats().Restoring != 1 {
		t.Fatalf("partition 1's new records were committed only after partition 0's restore ended (%d restoring, %d fetches held, %v after the start)", p.Stats().Restoring, held.Load(), time.Since(started))
	}
	waitFor(t, ended, 30*time.Second, "the restore to end", func() bool { return p.Stats().Restoring == 0 })
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	if err := k.WaitCommitted(wctx, "t", "in"); err != nil {
		t.Fatal(err)
	}
	restored := time.Unix(0, restoreFetched.Load())
	cancel()
	<-ended
	if runErr != nil {
		t.Fatalf("run: %v", runErr)
	}
	if held.Load() == 0 {
		t.Fatal("no fetch of partition 0's changelog was held: the restore was not slowed")
	}
	// While its task restores, a partition is paused: its 100 new
	// records are polled once, or twice if a fetch was under way, not
	// again and again.
	if h := p.stats.heldRecords.Load(); h == 0 || h > 200 {
		t.Fatalf("%d records polled and held for the restoring task; partition 0 got 100", h)
	}
	if took := restored.Sub(started); took < 2*2*time.Second {
		t.Fatalf("the restore took %v, not the twice transactions.timeout the test needs", took)
	}
	if st := p.Stats(); st.Aborted != 0 || st.Rebuilds != 0 {
		t.Fatalf("%d checkpoints aborted, %d rebuilds; a restore must not hold a transaction open", st.Aborted, st.Rebuilds)
	}
	want := map[string]int{}
	for _, key := range big {
		want[key] = 1
	}
	for _, key := range big[:100] {
		want[key] = 2
	}
	for _, key := range small {
		want[key] = 2
	}
	got := map[string]int{}
	for _, r := range k.ReadAll("out") {
		x, err := codec.DecodeJSON(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		got[string(r.Key)] = int(x.(map[string]any)["n"].(int))
	}
	var wrong []string
	for key, n := range want {
		if got[key] != n {
			wrong = append(wrong, fmt.Sprintf("%s: %d, want %d", key, got[key], n))
		}
	}
	if len(wrong) > 0 || len(got) != len(want) {
		t.Fatalf("%d keys counted, %d wanted; wrong: %s", len(got), len(want), strings.Join(wrong[:min(10, len(wrong))], "; "))
	}
	t.Logf("%d changelog fetches held 5 s; %d records polled and held for the restoring task; partition 1 committed %v after the start, the restore ended after %v; 0 aborted",
		held.Load(), p.stats.heldRecords.Load(), p1Committed.Sub(started).Round(time.Millisecond), restored.Sub(started).Round(time.Millisecond))
}

// TestARebuildKeepsTheRestoredState makes the broker fail one EndTxn, so the
// outcome of a checkpoint is unknown and the client is rebuilt. The old
// client gives its partitions up as it closes; the memory backend used to
// drop the state of every task then, and the new client restored all of it
// from the changelog again (on a large state, a restore as long as the
// first). Now the state is kept and only the changelog's tail is read.
func TestARebuildKeepsTheRestoredState(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("in", 1)
	keys := keysOf("a", 3000)
	produceTo(k, 0, keys, 0)
	p := newPipeline(t, k, restoringCount, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	ended := make(chan struct{})
	var runErr error
	go func() { runErr = <-done; close(ended) }()
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if err := k.WaitCommitted(wctx, "t", "in"); err != nil {
		t.Fatal(err)
	}
	before := p.Stats()
	h := k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, Err: kerr.RequestTimedOut})
	defer h.Remove()
	produceTo(k, 0, keys[:10], 5000)
	waitFor(t, ended, 30*time.Second, "a rebuild", func() bool { return p.Stats().Rebuilds > before.Rebuilds })
	produceTo(k, 0, keys[:10], 6000)
	if err := k.WaitCommitted(wctx, "t", "in"); err != nil {
		t.Fatal(err)
	}
	after := p.Stats()
	cancel()
	<-ended
	if runErr != nil {
		t.Fatalf("run: %v", runErr)
	}
	if h.Hits() == 0 {
		t.Fatal("no EndTxn failed: the fault did not fire")
	}
	if n := after.Restored - before.Restored; n >= int64(len(keys)) {
		t.Fatalf("the rebuild restored %d changelog records: the state of %d keys was thrown away and read again", n, len(keys))
	}
	for _, r := range k.ReadAll("out") {
		x, err := codec.DecodeJSON(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		if n := x.(map[string]any)["n"].(int); n > 3 {
			t.Fatalf("key %s counted %d times, at most 3 inputs", r.Key, n)
		}
	}
	t.Logf("%d rebuilds, %d changelog records read again for %d keys", after.Rebuilds-before.Rebuilds, after.Restored-before.Restored, len(keys))
}

// TestNoClientCachesATopicListWithoutTheChangelog runs a keyed count on a
// fresh input and checks that no client asked for the metadata of every
// topic before set-up created the changelog. The start-up check listed the
// brokers with such a request, and the admin client, which also reads the
// changelogs, kept the answer: it held no changelog, and the first restore
// waited out the client's metadata age (5 s) before it found it. Every
// stateful pipeline started about 5 s late, and the benchmark's keyed count
// ran at a third of its speed.
func TestNoClientCachesATopicListWithoutTheChangelog(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("in", 2)
	produceTo(k, 0, keysOf("a", 50), 0)
	changelog := wire.ChangelogTopic("t", "per_key")
	var stale, asked atomic.Int64
	k.Cluster.ControlKey(int16(kmsg.Metadata), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		k.Cluster.KeepControl()
		asked.Add(1)
		if kreq.(*kmsg.MetadataRequest).Topics == nil && k.Cluster.TopicInfo(changelog) == nil {
			stale.Add(1)
		}
		return nil, nil, false
	})
	testkit.RunUntilCommitted(t, k, newPipeline(t, k, restoringCount, nil), "t", "in")
	if asked.Load() == 0 {
		t.Fatal("the broker saw no metadata request: the check watched nothing")
	}
	if n := stale.Load(); n != 0 {
		t.Errorf("%d metadata requests asked for every topic before %s existed; want none", n, changelog)
	}
}

// TestTheApplierAppliesInOrderAndReportsTheFirstFailure: a restore's
// batches are applied in the order read, each after the one before has
// returned; a failure stops the applying, is returned by a later apply or
// by close, and nothing after it is applied.
func TestTheApplierAppliesInOrderAndReportsTheFirstFailure(t *testing.T) {
	var applied []int64
	release := make(chan struct{})
	bad := errors.New("corrupt record")
	ap := startApplier(func(recs []state.ChangelogRecord, last int64) error {
		<-release
		if last == 3 {
			return bad
		}
		applied = append(applied, last)
		return nil
	}, func(int, offsets.Progress) {})
	batch := []state.ChangelogRecord{{}}
	go func() {
		for range 3 {
			release <- struct{}{}
		}
	}()
	var err error
	for last := int64(1); last <= 6 && err == nil; last++ {
		err = ap.apply(batch, last, offsets.Progress{})
	}
	if cerr := ap.close(); err == nil {
		err = cerr
	}
	if !errors.Is(err, bad) {
		t.Fatalf("error %v, want the failed batch's", err)
	}
	if !slices.Equal(applied, []int64{1, 2}) {
		t.Fatalf("applied %v, want 1 and 2 and nothing after the failure", applied)
	}
}

// TestTheApplierDrainsOnClose: close returns once every batch queued is
// applied.
func TestTheApplierDrainsOnClose(t *testing.T) {
	var n atomic.Int64
	ap := startApplier(func([]state.ChangelogRecord, int64) error {
		time.Sleep(time.Millisecond)
		return nil
	}, func(k int, _ offsets.Progress) { n.Add(int64(k)) })
	for i := range 20 {
		if err := ap.apply(make([]state.ChangelogRecord, 3), int64(i), offsets.Progress{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := ap.close(); err != nil || n.Load() != 60 {
		t.Fatalf("close: %v with %d records applied, want 60", err, n.Load())
	}
}

// TestChangelogBoundsOutlastABrokerRestart drops the connection of the
// first listings of a changelog's offsets, as a broker going down and
// coming back does, with a client that does not retry itself (a restart can
// outlast the tries of a real one). The task that was opening its store
// took the reset for fatal, and the pipeline exited.
func TestChangelogBoundsOutlastABrokerRestart(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "cl"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var dropped atomic.Int32
	c.ControlKey(kmsg.ListOffsets.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		if dropped.Add(1) > 3 {
			return nil, nil, false
		}
		c.KeepControl()
		return nil, errors.New("broker restarting"), true // closes the connection
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RequestRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := changelogBounds(ctx, cl, "cl", 1)
	if err != nil {
		t.Fatalf("changelogBounds: %v", err)
	}
	if n := dropped.Load(); n <= 3 {
		t.Fatalf("%d listings reached the broker, want the 3 dropped and the ones after", n)
	}
	if !b.ok || b.start != 0 || b.end != 0 || b.stable != 0 {
		t.Fatalf("bounds %+v, want an empty partition that exists", b)
	}

	// A refusal is not retried: it names what is wrong at once.
	c.ControlKey(kmsg.ListOffsets.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
		for _, rt := range req.(*kmsg.ListOffsetsRequest).Topics {
			st := kmsg.NewListOffsetsResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewListOffsetsResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.TopicAuthorizationFailed.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	start := time.Now()
	if _, err := changelogBounds(ctx, cl, "cl", 1); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("changelogBounds = %v, want TOPIC_AUTHORIZATION_FAILED", err)
	} else if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("a refusal took %s to return: it was retried", d)
	}
}
