package bench

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// backlogRate is the rate, in records per second of event time, of the
// stream a backlog stands for: its records' timestamps advance by 1 s
// every backlogRate records. Each of the numKeys keys then has 10 records
// in a second, and the windows of the windowed-count arm close as it reads
// the backlog, as they would in a stream at that rate (rather than never
// within a backlog produced in less than a second).
const backlogRate = 100000

// BacklogTime returns the timestamp (the event time) of record seq of a
// backlog whose first record is stamped base.
func BacklogTime(base time.Time, seq int64) time.Time {
	return base.Add(time.Duration(seq) * time.Second / backlogRate)
}

// backlogBase returns the timestamp of the first record of a backlog of n
// records filled now: the start of a second, such that the last record is
// stamped at most now (brokers may refuse timestamps in the future).
func backlogBase(now time.Time, n int64) time.Time {
	first := now.Add(-time.Duration(n) * time.Second / backlogRate)
	return first.Truncate(time.Second)
}

// prefill writes n keyed records of size bytes to topic, seqs 0 to n-1,
// stamped as BacklogTime says, and waits until every one is acknowledged.
func prefill(ctx context.Context, cl *kgo.Client, topic string, n int64, size int) error {
	var perr firstErr
	done := func(_ *kgo.Record, err error) { perr.set(err) }
	now := time.Now()
	base, sent := backlogBase(now, n), now.UnixMicro()
	for seq := range n {
		cl.Produce(ctx, &kgo.Record{Topic: topic, Key: Key(nil, seq), Value: Value(nil, seq, sent, size), Timestamp: BacklogTime(base, seq)}, done)
		if seq%10000 == 0 {
			if err := perr.get(); err != nil {
				break
			}
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	if err := perr.get(); err != nil {
		return fmt.Errorf("filling %s: %w", topic, err)
	}
	return nil
}

// rateProducer sends records to a topic at a fixed rate, each value
// stamped with the time it is handed to the client.
type rateProducer struct {
	stop    chan struct{}
	wg      sync.WaitGroup
	sent    atomic.Int64
	hold    atomic.Bool // tests: while set, nothing is sent (and then what fell due meanwhile, at once)
	err     firstErr
	elapsed time.Duration // from the start to the last tick; set when it stops
}

// startRate starts sending to topic at rate records/s, seqs from 0, until
// Stop. It catches up in whole milliseconds: each tick sends what is due.
func startRate(ctx context.Context, cl *kgo.Client, topic string, rate float64, size int) *rateProducer {
	p := &rateProducer{stop: make(chan struct{})}
	done := func(_ *kgo.Record, err error) { p.err.set(err) }
	p.wg.Go(func() {
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		start := time.Now()
		defer func() { p.elapsed = time.Since(start) }()
		var seq int64
		for {
			select {
			case <-ctx.Done():
				return
			case <-p.stop:
				return
			case now := <-t.C:
				if p.hold.Load() {
					continue
				}
				// Produce blocks when the client's buffer is full: a broker
				// that cannot keep up shows as an achieved rate below rate.
				due := int64(rate * now.Sub(start).Seconds())
				ts := time.Now().UnixMicro()
				for ; seq < due; seq++ {
					cl.Produce(ctx, &kgo.Record{Topic: topic, Key: Key(nil, seq), Value: Value(nil, seq, ts, size)}, done)
				}
				p.sent.Store(seq)
			}
		}
	})
	return p
}

// Stop stops sending, waits until everything sent is acknowledged, and
// returns how many records were sent. Achieved is valid after it.
func (p *rateProducer) Stop(ctx context.Context, cl *kgo.Client) (int64, error) {
	close(p.stop)
	p.wg.Wait()

	if err := cl.Flush(ctx); err != nil {
		return p.sent.Load(), err
	}
	return p.sent.Load(), p.err.get()
}

// observer times when each output of an arm becomes visible to
// read_committed readers. A read_committed consumer notes each output and
// its place (partition, offset); a second client samples the topic's last
// stable offsets every lsoEvery. An output is visible from the first sample
// past its offset, or from its polling if that came first. Reading a whole
// transaction takes the reader time too (a 100 MB checkpoint is 100 MB to
// fetch); the samples keep that cost, which is the reader's, out of the
// pipeline's latency. Only its own goroutines write arrivals, sent, where
// and stable; read them after Stop.
type observer struct {
	cl       *kgo.Client
	adm      *kadm.Client
	topic    string
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	keep     func(seq int64) bool // the arm's filter; nil: every seq has an output
	arrivals []int64              // by seq: Unix microseconds it was polled; 0: not yet
	sent     []int64              // by seq: the send time in its value
	where    []place              // by seq: where the output is
	stable   map[int32][]lsoSample
	distinct atomic.Int64
	// complete is the lowest seq whose output is still to come: every
	// output below it has appeared.
	complete atomic.Int64
	firstAt  atomic.Int64 // Unix microseconds of the first output
	err      firstErr
	// afterPoll, if set before start, runs after each poll (tests slow the
	// reader with it).
	afterPoll func()
}

type place struct {
	partition int32
	offset    int64
}

// lsoSample is a partition's last stable offset as of a moment (Unix
// microseconds, taken when the answer came).
type lsoSample struct {
	at, lso int64
}

const lsoEvery = 10 * time.Millisecond

func startObserver(ctx context.Context, seeds []string, topic string, keep func(int64) bool) (*observer, error) {
	o, err := newObserver(seeds, topic, keep)
	if err != nil {
		return nil, err
	}
	o.start(ctx)
	return o, nil
}

func newObserver(seeds []string, topic string, keep func(int64) bool) (*observer, error) {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(seeds...),
		kgo.ClientID("bench-observer"),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(500*time.Millisecond),
		// Small fetches: the limits are of compressed bytes, and the
		// bench's padded values compress 4 to 50 times; at 64 MiB a
		// fetch decompressed to gigabytes, decoded in bursts on the
		// cores the arm runs on. The output's visibility is timed by
		// the stable offsets it samples (sampleStable), not by when a
		// fetch brings the records.
		kgo.FetchMaxBytes(8<<20),
		kgo.FetchMaxPartitionBytes(1<<20),
	)
	if err != nil {
		return nil, err
	}
	return &observer{cl: cl, adm: kadm.NewClient(cl), topic: topic, keep: keep, stable: map[int32][]lsoSample{}}, nil
}

func (o *observer) start(ctx context.Context) {
	ctx, o.cancel = context.WithCancel(ctx)
	o.wg.Go(func() { o.sampleStable(ctx) })
	o.wg.Go(func() {
		for {
			fs := o.cl.PollFetches(ctx)
			if ctx.Err() != nil {
				return
			}
			if err := fetchErr(fs); err != nil {
				o.err.set(err)
			}
			now := time.Now().UnixMicro()
			fs.EachRecord(func(r *kgo.Record) {
				seq, ok1 := Seq(r.Value)
				ts, ok2 := SentAt(r.Value)
				if !ok1 || !ok2 || seq < 0 {
					return
				}
				for int64(len(o.arrivals)) <= seq {
					o.arrivals = append(o.arrivals, 0)
					o.sent = append(o.sent, 0)
					o.where = append(o.where, place{})
				}
				if o.arrivals[seq] == 0 {
					o.arrivals[seq], o.sent[seq] = now, ts
					o.where[seq] = place{r.Partition, r.Offset}
					o.distinct.Add(1)
				}
			})
			if o.distinct.Load() > 0 {
				o.firstAt.CompareAndSwap(0, now)
			}
			low := o.complete.Load()
			for low < int64(len(o.arrivals)) && (o.arrivals[low] != 0 || (o.keep != nil && !o.keep(low))) {
				low++
			}
			o.complete.Store(low)
			if o.afterPoll != nil {
				o.afterPoll()
			}
		}
	})
}

// sampleStable notes every rise of each partition's last stable offset.
func (o *observer) sampleStable(ctx context.Context) {
	t := time.NewTicker(lsoEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		lsos, err := o.adm.ListCommittedOffsets(ctx, o.topic)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			continue // a missed sample only makes outputs look later
		}
		now := time.Now().UnixMicro()
		lsos.Each(func(lo kadm.ListedOffset) {
			if lo.Err != nil {
				return
			}
			s := o.stable[lo.Partition]
			if n := len(s); n == 0 || s[n-1].lso < lo.Offset {
				o.stable[lo.Partition] = append(s, lsoSample{now, lo.Offset})
			}
		})
	}
}

// visibleAt returns when the output of seq became visible: the first
// sample of its partition's last stable offset past it, or its polling if
// that was earlier.
func (o *observer) visibleAt(seq int64) int64 {
	at, w := o.arrivals[seq], o.where[seq]
	s := o.stable[w.partition]
	i := sort.Search(len(s), func(i int) bool { return s[i].lso > w.offset })
	if i < len(s) && s[i].at < at {
		at = s[i].at
	}
	return at
}

// Stop stops the observer and closes its client.
func (o *observer) Stop() {
	o.cancel()
	o.wg.Wait()
	o.cl.Close()
}

// latencies returns, for every seq below n sent at or after from (Unix
// microseconds), the time from its sending to its becoming visible.
func (o *observer) latencies(from, n int64) []time.Duration {
	var out []time.Duration
	for seq := int64(0); seq < n && seq < int64(len(o.arrivals)); seq++ {
		if o.arrivals[seq] == 0 || o.sent[seq] < from {
			continue
		}
		out = append(out, time.Duration(o.visibleAt(seq)-o.sent[seq])*time.Microsecond)
	}
	return out
}

// Achieved returns the rate actually sent at, once stopped.
func (p *rateProducer) Achieved() float64 {
	if p.elapsed <= 0 {
		return 0
	}
	return float64(p.sent.Load()) / p.elapsed.Seconds()
}
