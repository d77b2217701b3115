package engine

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/pipeline-run/pipeline/internal/testkit"
)

// flow counts, through client hooks, what enters and leaves the pipeline's
// client, and catches the client itself to read its buffer gauges.
type flow struct {
	sinkClient
	in, out string
	polled  atomic.Int64 // input records the pipeline took from the client
	settled atomic.Int64 // output records the producer is done with: acknowledged or failed
	// reread counts the records polled, not handed out when a
	// checkpoint stopped reading, and polled again: counted twice.
	reread func() int64
}

func (f *flow) OnFetchRecordUnbuffered(r *kgo.Record, polled bool) {
	if polled && r.Topic == f.in {
		f.polled.Add(1)
	}
}

func (f *flow) OnProduceRecordUnbuffered(r *kgo.Record, _ error) {
	if r.Topic == f.out {
		f.settled.Add(1)
	}
}

// peaks are the largest values the sampler saw.
type peaks struct {
	samples                  int
	produce                  int64 // BufferedProduceRecords: buffered, plus produces blocked waiting for room
	fetchRecords, fetchBytes int64
	inside                   int64 // polled but not settled
}

// sample reads f's gauges every few milliseconds until stop is closed.
func sample(f *flow, stop <-chan struct{}) *peaks {
	var pk peaks
	for {
		if cl := f.get(); cl != nil {
			pk.samples++
			pk.produce = max(pk.produce, cl.BufferedProduceRecords())
			pk.fetchRecords = max(pk.fetchRecords, cl.BufferedFetchRecords())
			pk.fetchBytes = max(pk.fetchBytes, cl.BufferedFetchBytes())
			// settled first: read the other way, a record settled
			// between the two reads would be counted as inside.
			settled := f.settled.Load()
			polled := f.polled.Load()
			var reread int64
			if f.reread != nil {
				reread = f.reread()
			}
			pk.inside = max(pk.inside, polled-reread-settled)
		}
		select {
		case <-stop:
			return &pk
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// inputSmallBatches writes n records like cluster.input, in batches of at
// most batchBytes, so that no single batch exceeds the consumer's fetch
// limit (a broker returns a larger first batch whole). They are not
// compressed: the fetch limit counts bytes as sent, the client's gauge
// bytes as decompressed. It returns the smallest record's key and value
// bytes.
func inputSmallBatches(t *testing.T, k *testkit.Kafka, topic string, n, keys, batchBytes int) int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Addr), kgo.ProducerBatchMaxBytes(int32(batchBytes)),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	smallest := 1 << 30
	rs := make([]*kgo.Record, n)
	for i := range rs {
		key := "k" + strconv.Itoa(i%keys)
		v := fmt.Sprintf(`{"k":%q,"seq":%d}`, key, i)
		rs[i] = &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte(v)}
		smallest = min(smallest, len(key)+len(v))
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return smallest
}

const backPressureConfig = `
instance_id: i1
checkpoint: {interval: 200ms, timeout: 10s, max_records: 5000}
transactions: {timeout: 30s}
consumer: {session_timeout: 6s, max_poll_records: 50, fetch_max_bytes: 65536}
producer: {max_buffered_records: 200, linger: 5ms}
sources: {in: {topics: [in]}}
steps: [{map: "{k: value.k, seq: value.seq}"}]
sinks: {out: {topic: out}}
dead_letter: {topic: dlq}
`

// TestSlowBrokerSlowsTheSource runs the same pipeline over the same input
// twice: against a broker answering at once, and against one that delays
// every produce request to the output. Throughout, the producer's buffer,
// the consumer's buffered fetch and the records between the two stay within
// their configured bounds, and with the slow broker the source reads much
// more slowly: back-pressure reaches it instead of the heap growing.
func TestSlowBrokerSlowsTheSource(t *testing.T) {
	// Registered first, so it runs after the brokers have closed.
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) })

	const (
		n          = 20000
		partitions = 2 // one task each
		delay      = time.Second
		window     = 5 * time.Second
	)
	cfg := parseConfig(t, backPressureConfig)
	buffer := int64(cfg.Producer.MaxBufferedRecords)
	poll := int64(cfg.Consumer.MaxPollRecords)
	fetchBytes := int64(cfg.Consumer.FetchMaxBytes)
	// A task blocked in Produce counts on top of the buffer, as does the
	// coordinator writing progress records.
	produceBound := buffer + partitions + 1
	// Between the poll and the producer: what the coordinator polled and
	// has not handed out (at most what the client had buffered), and at
	// most max_poll_records handed to the tasks and not yet processed
	// (waitForRoom), whatever the number of tasks. (Before that bound,
	// four queued batches per task and the one in process: here up to
	// 720 records were inside.)
	insideBound := func(smallest int) int64 { return fetchBytes/int64(smallest) + poll + produceBound }

	// check runs the pipeline on k until its input is committed, sampling
	// the gauges, and checks the bounds and the output. during, if set,
	// runs while the pipeline does and may stop early whatever slows it.
	check := func(t *testing.T, k *testkit.Kafka, smallest int, f *flow, during func()) *peaks {
		t.Helper()
		p := newPipeline(t, k, backPressureConfig, nil, WithClientOpts(kgo.WithHooks(f)))
		f.reread = p.stats.reread.Load
		stop := make(chan struct{})
		got := make(chan *peaks, 1)
		go func() { got <- sample(f, stop) }()
		ctx, cancel := context.WithCancel(context.Background())
		var runErr error
		ended := make(chan struct{})
		go func() { runErr = p.Run(ctx); close(ended) }()
		var pk *peaks
		finish := func() {
			if pk == nil {
				cancel()
				<-ended
				close(stop)
				pk = <-got
			}
		}
		defer finish() // when during fails the test
		if during != nil {
			during()
		}
		wctx, wcancel := context.WithTimeout(context.Background(), 120*time.Second)
		werr := k.WaitCommitted(wctx, "t", "in")
		wcancel()
		finish()
		if runErr != nil || werr != nil {
			t.Fatalf("run: %v, wait: %v", runErr, werr)
		}
		// The unthrottled run lasts a fraction of a second, a few
		// milliseconds a sample; the throttled one, thousands.
		if pk.samples < 10 {
			t.Fatalf("only %d samples of the gauges", pk.samples)
		}
		if pk.produce > produceBound {
			t.Errorf("the producer held %d records (buffered and blocked); producer.max_buffered_records %d allows %d", pk.produce, buffer, produceBound)
		}
		// One response per broker (here one) is buffered. When a
		// checkpoint moves the fetch position back, to read again what
		// it polled and did not hand out, the client's gauges count the
		// response it drops until it has, while the next may arrive.
		if pk.fetchBytes > 2*fetchBytes {
			t.Errorf("the consumer buffered %d fetched bytes; consumer.fetch_max_bytes is %d", pk.fetchBytes, fetchBytes)
		}
		if limit := 2 * fetchBytes / int64(smallest); pk.fetchRecords > limit {
			t.Errorf("the consumer buffered %d fetched records; twice %d bytes of records of at least %d bytes are at most %d", pk.fetchRecords, fetchBytes, smallest, limit)
		}
		if pk.inside > insideBound(smallest) {
			// A checkpoint that aborts has its records read again, which
			// the hooks count twice: say whether one did.
			st := p.Stats()
			t.Errorf("%d records were read and not yet settled by the producer; the bounds allow %d (checkpoints: %d committed, %d aborted; %d client rebuilds)",
				pk.inside, insideBound(smallest), st.Committed, st.Aborted, st.Rebuilds)
		}
		testkit.CheckExactlyOnce(t, k.ReadAll("out"), n, nil)
		return pk
	}

	// Unthrottled: how fast the source reads when nothing holds it back.
	fast := testkit.NewKafka(t)
	fast.Topic("in", partitions)
	smallest := inputSmallBatches(t, fast, "in", n, 50, 8<<10)
	ff := &flow{in: "in", out: "out"}
	var fastRate float64
	fastPeaks := check(t, fast, smallest, ff, func() {
		var first time.Time
		waitFor(t, nil, 120*time.Second, "input read", func() bool {
			if first.IsZero() && ff.polled.Load() > 0 {
				first = time.Now()
			}
			return ff.polled.Load() >= n
		})
		fastRate = float64(ff.polled.Load()) / time.Since(first).Seconds()
	})

	// Throttled: every produce request to the output waits delay.
	slow := testkit.NewKafka(t)
	slow.Topic("in", partitions)
	slow.Topic("out", partitions)
	inputSmallBatches(t, slow, "in", n, 50, 8<<10)
	outID := slow.Cluster.TopicInfo("out").TopicID
	var throttle atomic.Bool
	throttle.Store(true)
	unthrottled := make(chan struct{})
	var once sync.Once
	unthrottle := func() { once.Do(func() { throttle.Store(false); close(unthrottled) }) }
	defer unthrottle() // the broker cannot close while it holds a request
	var held atomic.Int64
	slow.Cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if !throttle.Load() || !producesTo(req, "out", outID) {
			return nil, nil, false
		}
		held.Add(1)
		slow.Cluster.SleepControl(func() {
			select {
			case <-time.After(delay):
			case <-unthrottled:
			}
		})
		return nil, nil, false
	})
	sf := &flow{in: "in", out: "out"}
	var slowRate float64
	var heldInWindow int64
	slowPeaks := check(t, slow, smallest, sf, func() {
		// Measure once the pipeline has filled up, not while it does.
		waitFor(t, nil, 120*time.Second, "throttled produce requests", func() bool { return held.Load() >= 3 })
		from, h0, start := sf.polled.Load(), held.Load(), time.Now()
		time.Sleep(window)
		slowRate = float64(sf.polled.Load()-from) / time.Since(start).Seconds()
		heldInWindow = held.Load() - h0
		if sf.polled.Load() >= n {
			t.Errorf("the whole input was read within the window; the throttle did not hold the source back")
		}
		unthrottle()
	})

	if heldInWindow == 0 {
		t.Fatal("no produce request was throttled while the slow rate was measured")
	}
	if slowPeaks.produce < buffer {
		t.Errorf("the producer's buffer never filled (at most %d of %d records) under the throttle: back-pressure was not exercised", slowPeaks.produce, buffer)
	}
	if fastRate < 4*slowRate {
		t.Errorf("the source read %.0f records/s against the slow broker and %.0f against the fast one: want at least 4 times slower", slowRate, fastRate)
	}
	t.Logf("fast: %.0f records/s read, peaks %+v", fastRate, *fastPeaks)
	// A window can fall within one checkpoint's commit, which reads nothing.
	times := "none read in the window"
	if slowRate > 0 {
		times = fmt.Sprintf("%.1f times slower", fastRate/slowRate)
	}
	t.Logf("slow (%s per produce request, %d held in the %s window, %d in all): %.0f records/s read (%s), peaks %+v",
		delay, heldInWindow, window, held.Load(), slowRate, times, *slowPeaks)
	t.Logf("bounds: producer %d, fetch %d bytes, read and not settled %d", produceBound, fetchBytes, insideBound(smallest))
}

// TestReadingWaitsForTheTasks: with max_poll_records records handed out
// and unprocessed, reading waits until the tasks are down to half of that,
// then may read up to the bound again; it gives up when its context ends.
func TestReadingWaitsForTheTasks(t *testing.T) {
	cfg := parseConfig(t, "sources: {in: {topics: [in]}}\nsinks: {out: {topic: out}}\nconsumer: {max_poll_records: 100}\n")
	rt := &runtime{cfg: cfg, room: make(chan struct{}, 1)}
	if got := rt.waitForRoom(context.Background()); got != 100 {
		t.Fatalf("with nothing handed out: room for %d, want 100", got)
	}
	rt.queued.Add(100)
	got := make(chan int, 1)
	go func() { got <- rt.waitForRoom(context.Background()) }()
	rt.processed(30) // 70 left: still more than half
	select {
	case n := <-got:
		t.Fatalf("reading went on with 70 of 100 records unprocessed (room %d)", n)
	case <-time.After(50 * time.Millisecond):
	}
	rt.processed(25) // 45 left
	select {
	case n := <-got:
		if n != 55 {
			t.Fatalf("room for %d with 45 unprocessed, want 55", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reading still waits with 45 of 100 records unprocessed")
	}
	rt.queued.Add(55)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if n := rt.waitForRoom(ctx); n != 0 {
		t.Fatalf("with the bound reached and the context ended: room %d, want 0", n)
	}
}
