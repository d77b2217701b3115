package integration

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pipeline-run/pipeline/offsets"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// The proxy's own tests run against an in-process kfake: they need no
// binary and no package broker.

func startProxy(t *testing.T, seeds []string) *Proxy {
	t.Helper()
	p, err := NewProxy(seeds)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Close()
		if open := p.Stats().Open; open != 0 {
			t.Errorf("%d proxy connections still open after Close", open)
		}
	})
	return p
}

func newKfake(t *testing.T, brokers int, topics ...string) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(brokers), kfake.SeedTopics(3, topics...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// connRecorder records where a client's connections went.
type connRecorder struct {
	mu    sync.Mutex
	conns []recordedConn
}

type recordedConn struct {
	node   int32  // negative for a seed
	meta   string // the address the client meant to reach
	remote string // the address it reached
}

func (r *connRecorder) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, conn net.Conn, err error) {
	if err != nil || conn == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.conns = append(r.conns, recordedConn{
		node:   meta.NodeID,
		meta:   net.JoinHostPort(meta.Host, strconv.Itoa(int(meta.Port))),
		remote: conn.RemoteAddr().String(),
	})
}

func (r *connRecorder) all() []recordedConn {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.conns)
}

// TestProxyKeepsClientsOnItsListeners seeds clients with the proxy's
// address only, on a three-broker cluster, at the newest protocol versions
// and at Kafka 2.4's (FindCoordinator v3 with its single coordinator,
// non-flexible and flexible headers). They produce, consume in a group and
// ask for the cluster; every connection must go to one of the proxy's
// listeners, never to a broker's own address.
func TestProxyKeepsClientsOnItsListeners(t *testing.T) {
	for _, tc := range []struct {
		name     string
		versions *kversion.Versions
	}{
		{"latest versions", nil},
		{"Kafka 2.4 versions", kversion.V2_4_0()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const topic, records = "t", 300
			c := newKfake(t, 3, topic)
			p := startProxy(t, c.ListenAddrs()[:1])
			rec := &connRecorder{}
			opts := []kgo.Opt{
				kgo.SeedBrokers(p.Addrs()...),
				kgo.WithHooks(rec),
				kgo.DefaultProduceTopic(topic),
				kgo.ConsumeTopics(topic),
				kgo.ConsumerGroup("g"),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			}
			if tc.versions != nil {
				opts = append(opts, kgo.MaxVersions(tc.versions))
			}
			cl, err := kgo.NewClient(opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()

			for i := range records {
				cl.Produce(ctx, &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: []byte("v")}, nil)
			}
			if err := cl.Flush(ctx); err != nil {
				t.Fatalf("producing through the proxy: %v", err)
			}
			seen := 0
			last := map[int32]*kgo.Record{}
			for seen < records {
				fs := cl.PollFetches(ctx)
				if err := ctx.Err(); err != nil {
					t.Fatalf("consumed %d of %d records through the proxy: %v", seen, records, err)
				}
				fs.EachError(func(topic string, part int32, err error) { t.Fatalf("fetching %s/%d: %v", topic, part, err) })
				fs.EachRecord(func(r *kgo.Record) { last[r.Partition] = r })
				seen += fs.NumRecords()
			}
			// Commit what was read explicitly: committing "the uncommitted"
			// sends nothing when a rebalance under load already committed
			// it, and this test must see an OffsetCommit go through.
			if err := cl.CommitRecords(ctx, slices.Collect(maps.Values(last))...); err != nil {
				t.Fatalf("committing through the proxy: %v", err)
			}
			if tc.versions == nil {
				resp, err := kmsg.NewPtrDescribeClusterRequest().RequestWith(ctx, cl)
				if err != nil {
					t.Fatalf("DescribeCluster: %v", err)
				}
				for _, b := range resp.Brokers {
					if addr := net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))); !p.Listening(addr) {
						t.Errorf("DescribeCluster names broker %d at %s, not a proxy listener", b.NodeID, addr)
					}
				}
			}

			brokers := c.ListenAddrs()
			conns := rec.all()
			nodes := make(map[int32]bool)
			for _, rc := range conns {
				if slices.Contains(brokers, rc.remote) || slices.Contains(brokers, rc.meta) {
					t.Errorf("the client reached a broker directly: node %d at %s (meant %s)", rc.node, rc.remote, rc.meta)
				}
				if !p.Listening(rc.remote) {
					t.Errorf("the client connected to %s (node %d), not a proxy listener", rc.remote, rc.node)
				}
				if rc.node >= 0 {
					nodes[rc.node] = true
				}
			}
			st := p.Stats()
			t.Logf("%d client connections (%d to discovered nodes %v); proxy: %v", len(conns), len(nodes), nodes, st)
			if len(nodes) == 0 {
				t.Error("the client never connected to a broker it learned from metadata")
			}
			if st.Listeners < len(brokers) {
				t.Errorf("the proxy listens on %d addresses for %d brokers", st.Listeners, len(brokers))
			}
			// Every connection the client made is one the proxy joined.
			if st.Connections < int64(len(conns)) {
				t.Errorf("the client made %d connections, the proxy joined only %d", len(conns), st.Connections)
			}
			for _, k := range []kmsg.Key{kmsg.Metadata, kmsg.FindCoordinator, kmsg.Produce, kmsg.Fetch, kmsg.OffsetCommit} {
				if p.RequestsOf(k) == 0 {
					t.Errorf("no %s request went through the proxy", kmsg.NameForKey(int16(k)))
				}
			}
			if st.Rewritten == 0 {
				t.Error("the proxy rewrote no response")
			}
			if err := p.Err(); err != nil {
				t.Errorf("proxy error: %v", err)
			}
		})
	}
}

// TestProxyCutsConnections cuts a producing client's connections once by
// hand and then on a schedule; every cut is counted, and the client's
// retries get every record through exactly once.
func TestProxyCutsConnections(t *testing.T) {
	const topic = "t"
	c := newKfake(t, 1, topic)
	p := startProxy(t, c.ListenAddrs())
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.Addrs()...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	produced := 0
	produce := func() {
		t.Helper()
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(strconv.Itoa(produced))}).FirstErr(); err != nil {
			t.Fatalf("producing record %d through the proxy: %v", produced, err)
		}
		produced++
	}
	produce()
	if p.Stats().Open == 0 {
		t.Fatal("no connection open through the proxy after a produce")
	}
	cut := int64(p.CutAll())
	if cut == 0 {
		t.Fatal("CutAll closed no connection")
	}
	before := p.Stats().Connections
	produce()
	if st := p.Stats(); st.Cuts != 1 || st.ConnsCut != cut || st.Connections <= before {
		t.Fatalf("after one cut of %d connections and a produce: %v", cut, st)
	}

	var befores, afters atomic.Int64
	stop := p.StartCuts(CutSchedule{
		// Gaps shorter than the client's retry backoff would mostly find
		// nothing open.
		Min: 100 * time.Millisecond, Max: 300 * time.Millisecond, Seed: 1,
		Before: func(int) { befores.Add(1) },
		After:  func(int) { afters.Add(1) },
	})
	for p.Stats().Cuts < 6 {
		produce()
	}
	fired := stop()
	if again := stop(); again != fired {
		t.Fatalf("a second stop reports %d cuts, the first %d", again, fired)
	}
	produce() // the client is still healthy once the cutting stops
	st := p.Stats()
	if fired < 5 || st.Cuts != int64(1+fired) || befores.Load() != int64(fired) || afters.Load() != int64(fired) {
		t.Fatalf("the schedule reports %d cuts (hooks %d before, %d after); proxy: %v", fired, befores.Load(), afters.Load(), st)
	}
	if st.ConnsCut <= cut {
		t.Fatalf("the scheduled cuts closed no connection: %v", st)
	}

	// The records arrived once each: the proxy neither lost nor doubled a
	// frame the client did not resend itself (an idempotent producer's
	// resends are deduplicated by the broker).
	direct, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	ends, err := kadm.NewClient(direct).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	if total != int64(produced) {
		t.Fatalf("%d records produced, %d in the topic", produced, total)
	}
	if err := p.Err(); err != nil {
		t.Fatalf("proxy error: %v", err)
	}
	t.Logf("%d records through %d cuts; proxy: %v", produced, st.Cuts, st)
}

// TestProxyLosesAnswersAndFailsRequests ends transactions through the
// proxy while it drops EndTxn requests (the broker never sees them) and
// EndTxn answers (the broker commits, the client never hears). Each fault
// is counted, and whatever the client reports must agree with the broker:
// a commit it reports is visible to read_committed.
func TestProxyLosesAnswersAndFailsRequests(t *testing.T) {
	const topic = "t"
	c := newKfake(t, 1, topic)
	p := startProxy(t, c.ListenAddrs())
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(p.Addrs()...),
		kgo.DefaultProduceTopic(topic),
		kgo.TransactionalID("proxy-test"),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	// A read_committed reader straight from the broker: what the
	// transactions really did, whatever the client was told.
	reader, err := kgo.NewClient(
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	var read int64
	committedRecords := func() int64 {
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		read += int64(reader.PollFetches(pctx).NumRecords())
		return read
	}
	const perTxn = 10
	txn := func(endCtx context.Context, what string) error {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatalf("%s: begin: %v", what, err)
		}
		for i := range perTxn {
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "%s %d", what, i)}).FirstErr(); err != nil {
				t.Fatalf("%s: producing: %v", what, err)
			}
		}
		return cl.EndTransaction(endCtx, kgo.TryCommit)
	}

	// A clean transaction first: the baseline of what a commit looks like.
	if err := txn(ctx, "clean"); err != nil {
		t.Fatalf("a transaction with no fault: %v", err)
	}
	WaitFor(t, 10*time.Second, "the clean transaction to be readable", func() (bool, string) {
		n := committedRecords()
		return n == perTxn, fmt.Sprintf("%d committed records", n)
	})

	for _, fault := range []struct {
		name string
		lose bool  // lose answers, else fail requests
		n    int   // the budget given
		want int64 // times the fault must fire; 0: at least twice
		heal bool  // heal once the client gives up
	}{
		{name: "EndTxn request failed", n: 1, want: 1},
		{name: "EndTxn answer lost", lose: true, n: 1, want: 1},
		// Every answer lost, retries included, until the client gives up:
		// it cannot know the outcome and must not claim a commit.
		{name: "every EndTxn answer lost", lose: true, n: 1000, heal: true},
	} {
		firedOf := func(s ProxyStats) int64 {
			if fault.lose {
				return s.AnswersLost
			}
			return s.RequestsFailed
		}
		before := committedRecords()
		endTxns := p.RequestsOf(kmsg.EndTxn)
		firedBefore := firedOf(p.Stats())
		if fault.lose {
			p.LoseAnswers(kmsg.EndTxn, fault.n)
		} else {
			p.FailRequests(kmsg.EndTxn, fault.n)
		}
		endCtx, endCancel := context.WithTimeout(ctx, 3*time.Second)
		err := txn(endCtx, fault.name)
		endCancel()
		if fault.heal {
			if left, _ := p.Heal(kmsg.EndTxn); left == 0 {
				t.Fatalf("%s: the whole budget of lost answers was used: the client never gave up", fault.name)
			}
			if err == nil {
				t.Fatalf("%s: the client reports a commit it never heard confirmed", fault.name)
			}
		}
		fired := firedOf(p.Stats()) - firedBefore
		if (fault.want > 0 && fired != fault.want) || (fault.want == 0 && fired < 2) {
			t.Fatalf("%s: the fault fired %d times (%v)", fault.name, fired, p.Stats())
		}
		if err != nil {
			// An unconfirmed end: the documented way out is an abort,
			// which must settle the transaction one way or the other.
			t.Logf("%s: the client reports %v; aborting", fault.name, err)
			if aerr := cl.EndTransaction(ctx, kgo.TryAbort); aerr != nil {
				t.Fatalf("%s: abort after an unconfirmed end: %v", fault.name, aerr)
			}
		}
		// A client that reports a commit must be right; one that reports
		// an error may find either outcome, but never half of one.
		WaitFor(t, 10*time.Second, fault.name+": the transaction to settle", func() (bool, string) {
			n := committedRecords() - before
			return (err == nil && n == perTxn) || (err != nil && (n == 0 || n == perTxn)), fmt.Sprintf("%d new committed records", n)
		})
		n := committedRecords() - before
		t.Logf("%s: fired %d times; client error %v; %d new committed records; %d EndTxn requests reached the broker; proxy: %v",
			fault.name, fired, err, n, p.RequestsOf(kmsg.EndTxn)-endTxns, p.Stats())
		if fault.lose && n != perTxn {
			// The proxy dropped the broker's answer to an EndTxn commit:
			// the broker did receive it.
			t.Fatalf("%s: the broker received the EndTxn commit, yet nothing was committed", fault.name)
		}
	}
	if err := txn(ctx, "after the faults"); err != nil {
		t.Fatalf("a transaction after the faults: %v", err)
	}
	if err := p.Err(); err != nil {
		t.Fatalf("proxy error: %v", err)
	}
}

// TestProxyCorruptsProduceRequests breaks one batch of a produce request on
// its way, with flexible and non-flexible request headers: the broker must
// refuse it (CORRUPT_MESSAGE) and write nothing of it, while requests before
// and after go through untouched.
func TestProxyCorruptsProduceRequests(t *testing.T) {
	for _, tc := range []struct {
		name string
		max  *kversion.Versions
	}{
		{"newest", nil},
		{"produce v8 (non-flexible)", kversion.V2_4_0()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const topic = "t"
			c := newKfake(t, 1, topic)
			p := startProxy(t, c.ListenAddrs())
			opts := []kgo.Opt{kgo.SeedBrokers(p.Addrs()...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner())}
			if tc.max != nil {
				opts = append(opts, kgo.MaxVersions(tc.max))
			}
			cl, err := kgo.NewClient(opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			produce := func(v string) error {
				return cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr()
			}
			if err := produce("before"); err != nil {
				t.Fatalf("producing with no fault: %v", err)
			}
			p.CorruptProduceRequests(1)
			err = produce("corrupted")
			if !errors.Is(err, kerr.CorruptMessage) {
				t.Fatalf("producing through a corrupted request: %v, want CORRUPT_MESSAGE", err)
			}
			if got := p.Corrupted(); got != 1 {
				t.Fatalf("%d requests corrupted, want 1", got)
			}
			if err := produce("after"); err != nil {
				t.Fatalf("producing after the fault: %v", err)
			}
			recs, err := offsets.ReadToEnd(ctx, newDirectClient(t, c), topic, false)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range recs {
				got = append(got, string(r.Value))
			}
			if !slices.Equal(got, []string{"before", "after"}) {
				t.Fatalf("the broker holds %q, want [before after]", got)
			}
			if err := p.Err(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func newDirectClient(t *testing.T, c *kfake.Cluster) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}
