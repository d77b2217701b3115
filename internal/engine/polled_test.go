package engine

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/internal/testkit"
	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/ops"
)

func fetchOf(topic string, parts map[int32]int) kgo.Fetches {
	ft := kgo.FetchTopic{Topic: topic}
	for p, n := range parts {
		rs := make([]*kgo.Record, n)
		for i := range rs {
			rs[i] = &kgo.Record{Topic: topic, Partition: p, Offset: int64(100 + i)}
		}
		ft.Partitions = append(ft.Partitions, kgo.FetchPartition{Partition: p, Records: rs})
	}
	return kgo.Fetches{{Topics: []kgo.FetchTopic{ft}}}
}

// TestTakeSharesPolledRecordsInOrder: take never returns more than asked,
// gives every partition a share, and hands each partition's records out in
// offset order, each exactly once.
func TestTakeSharesPolledRecordsInOrder(t *testing.T) {
	var b polled
	b.add(fetchOf("in", map[int32]int{0: 250, 1: 7, 2: 40}))
	b.add(fetchOf("in", map[int32]int{0: 0})) // nothing: ignored
	if b.n != 297 || len(b.parts) != 3 {
		t.Fatalf("%d records in %d parts, want 297 in 3", b.n, len(b.parts))
	}
	next := map[int32]int64{0: 100, 1: 100, 2: 100}
	first := true
	for b.n > 0 {
		before := b.n
		got := b.take(30)
		total := 0
		seen := map[int32]bool{}
		for _, p := range got {
			seen[p.Partition] = true
			for _, r := range p.Records {
				if r.Offset != next[p.Partition] {
					t.Fatalf("partition %d: offset %d handed out, want %d", p.Partition, r.Offset, next[p.Partition])
				}
				next[p.Partition]++
				total++
			}
		}
		if total == 0 || total > 30 || b.n != before-total {
			t.Fatalf("take(30) gave %d records; %d were left, now %d", total, before, b.n)
		}
		if first && len(seen) != 3 {
			t.Fatalf("the first take served partitions %v, want all three", seen)
		}
		first = false
	}
	if next[0] != 350 || next[1] != 107 || next[2] != 140 || len(b.parts) != 0 {
		t.Fatalf("handed out up to %v, %d parts left", next, len(b.parts))
	}
	if got := b.take(10); len(got) != 0 {
		t.Fatalf("an empty backlog gave %d parts", len(got))
	}
}

// TestPolledRecordsLeftAtACheckpointAreReadAgain polls whole fetches of
// thousands of records while the tasks may be handed at most 100 at a time
// and a checkpoint reads at most 2,000: every checkpoint stops with records
// polled and not handed out, and every third one aborts. The tasks must never
// hold more than max_poll_records, what was left must be read again (and
// was), and the output must be exactly the input.
func TestPolledRecordsLeftAtACheckpointAreReadAgain(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("in", 3)
	const n = 20000
	k.Input("in", n, 100, nil)
	every := testkit.NewEveryNth(3)
	var most int64
	p := newPipeline(t, k, strings.Replace(passThrough, "consumer: {session_timeout: 6s}", "consumer: {session_timeout: 6s, max_poll_records: 100}", 1), nil,
		WithBeforeCommit(func(cp Checkpoint) error {
			if cp.Records > 0 && every.Hit() {
				return errors.New("injected")
			}
			return nil
		}))
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if rt := p.running.Load(); rt != nil {
				most = max(most, rt.queued.Load())
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	testkit.RunUntilCommitted(t, k, p, "t", "in")
	close(stop)
	<-sampled
	st := p.Stats()
	if every.Fired() == 0 || st.Aborted < every.Fired() {
		t.Fatalf("%d faults fired, %d checkpoints aborted", every.Fired(), st.Aborted)
	}
	if p.stats.reread.Load() == 0 {
		t.Fatal("no checkpoint ended with polled records left: the case was not exercised")
	}
	if most > 100 {
		t.Fatalf("the tasks held %d records; consumer.max_poll_records is 100", most)
	}
	testkit.CheckExactlyOnce(t, k.ReadAll("out"), n, nil)
	t.Logf("%d records left polled and read again; %d checkpoints committed, %d aborted; the tasks held at most %d",
		p.stats.reread.Load(), st.Committed, st.Aborted, most)
}

// TestWholePollsOnlyWhatCanBeHandedOut: a checkpoint polls everything
// buffered while, at the lower of the last checkpoint's rate and its own so
// far, it would hand it all out before it stops reading and within
// max_records; otherwise, and with no rate yet, it polls in pieces.
func TestWholePollsOnlyWhatCanBeHandedOut(t *testing.T) {
	for _, c := range []struct {
		size, records, max int
		read, left         time.Duration
		last               float64
		want               bool
	}{
		{size: 50000, records: 0, max: 1000000, left: time.Second, want: false},                                                     // no rate yet
		{size: 50000, records: 0, max: 1000000, left: time.Second, last: 100000, want: true},                                        // 0.5 s of work, 1 s to go
		{size: 50000, records: 0, max: 1000000, left: time.Second, last: 20000, want: false},                                        // 2.5 s of work
		{size: 50000, records: 960000, max: 1000000, read: time.Second, left: time.Second, last: 1e6, want: false},                  // past max_records
		{size: 50000, records: 1000000, max: 2000000, read: time.Second, left: 60 * time.Millisecond, want: true},                   // this checkpoint's rate
		{size: 50000, records: 1000000, max: 2000000, read: time.Second, left: 40 * time.Millisecond, want: false},                  // 50 ms of work left, 40 ms to go
		{size: 50000, records: 10000, max: 2000000, read: time.Millisecond, left: 500 * time.Millisecond, last: 50000, want: false}, // a full first hand-out says little
		{size: 50000, records: 1000000, max: 2000000, read: time.Second, left: 60 * time.Millisecond, last: 1e7, want: true},
		{size: 0, records: 10, max: 100, read: time.Second, left: 0, want: true},
	} {
		if got := wholePoll(c.size, c.records, c.max, c.read, c.left, c.last); got != c.want {
			t.Errorf("wholePoll(%d buffered, %d read in %v, max %d, %v left, last %v/s) = %v, want %v", c.size, c.records, c.read, c.max, c.left, c.last, got, c.want)
		}
	}
}

// TestSlowTasksAreNotPolledMoreThanTheyTake: tasks that handle a few
// thousand records a second, a backlog the client fetches in one response,
// 100 ms checkpoints. A checkpoint that polled everything buffered would
// hand out a tenth of it and read the rest again, checkpoint after
// checkpoint (several times the input in all); going by the rate of the
// last checkpoint, the coordinator polls in pieces instead.
func TestSlowTasksAreNotPolledMoreThanTheyTake(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("in", 2)
	const n = 4000
	k.Input("in", n, 100, nil)
	reg := ops.NewRegistry()
	if err := reg.Register("slow", func(*pipeline.Spec) (pipeline.Definition, error) {
		return slow{d: 100 * time.Microsecond}, nil
	}); err != nil {
		t.Fatal(err)
	}
	body := strings.Replace(passThrough, "max_records: 2000", "max_records: 1000000", 1)
	body = strings.Replace(body, "consumer: {session_timeout: 6s}", "consumer: {session_timeout: 6s, max_poll_records: 200}", 1)
	body = strings.Replace(body, `steps: [{map: "{k: value.k, seq: value.seq}"}]`, `steps: [{slow: {}}]`, 1)
	p := newPipeline(t, k, body, reg)
	testkit.RunUntilCommitted(t, k, p, "t", "in")
	st := p.Stats()
	reread := p.stats.reread.Load()
	if reread > n/4 {
		t.Fatalf("%d records were polled and read again for an input of %d (%d checkpoints)", reread, n, st.Committed)
	}
	testkit.CheckExactlyOnce(t, k.ReadAll("out"), n, nil)
	t.Logf("%d records read again; %d checkpoints", reread, st.Committed)
}
