package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/internal/testkit"
)

func TestNextDeadline(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const iv, ms = time.Second, time.Millisecond
	for _, c := range []struct {
		name           string
		cadence, start time.Time
		lastCommit     time.Duration
		want           time.Time
	}{
		{"first checkpoint", time.Time{}, t0, 0, t0.Add(iv)},
		{"after a 30 ms commit", t0, t0.Add(30 * ms), 30 * ms, t0.Add(iv)},
		{"after a commit of 400 ms", t0, t0.Add(400 * ms), 400 * ms, t0.Add(iv)},
		{"after a commit of half the interval", t0, t0.Add(500 * ms), 500 * ms, t0.Add(iv)},
		{"after a commit of 700 ms: read as long", t0, t0.Add(700 * ms), 700 * ms, t0.Add(1400 * ms)},
		{"after a commit as long as the interval", t0, t0.Add(iv), iv, t0.Add(2 * iv)},
		{"after a commit of 1.5 intervals: read as long", t0, t0.Add(1500 * ms), 1500 * ms, t0.Add(3000 * ms)},
		{"after a checkpoint cut short, a short commit", time.Time{}, t0, 30 * ms, t0.Add(iv)},
		{"after a checkpoint cut short, a slow commit", time.Time{}, t0, 1200 * ms, t0.Add(1200 * ms)},
	} {
		if got := nextDeadline(c.cadence, c.start, iv, c.lastCommit); !got.Equal(c.want) {
			t.Errorf("%s: deadline %s after t0, want %s", c.name, got.Sub(t0), c.want.Sub(t0))
		}
	}
}

// runSlowCommits runs a pass-through whose commits a hook slows to commit,
// with records coming all the time, and returns the checkpoints from the
// second to the last but one (the first has no predecessor, and the last is
// cut short).
func runSlowCommits(t *testing.T, interval, commit time.Duration) []Checkpoint {
	k := testkit.NewKafka(t)
	k.Topic("in", 1)
	body := strings.Replace(passThrough, "interval: 100ms", "interval: "+interval.String(), 1)
	var mu sync.Mutex
	var cps []Checkpoint
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slowed := 0
	p := newPipeline(t, k, body, nil, WithBeforeCommit(func(Checkpoint) error {
		slowed++ // the hooks and the observer run on the coordinator goroutine
		time.Sleep(commit)
		return nil
	}), WithCheckpointObserver(func(cp Checkpoint) {
		mu.Lock()
		defer mu.Unlock()
		cps = append(cps, cp)
		if len(cps) == 9 {
			cancel()
		}
	}))
	// Records keep coming, so that every checkpoint commits offsets: an
	// idle one is not committed at all.
	fed := make(chan struct{})
	go func() {
		defer close(fed)
		for i := 0; ctx.Err() == nil; i++ {
			v := fmt.Sprintf(`{"k":"k%d","seq":%d}`, i%10, i)
			k.Client.ProduceSync(ctx, &kgo.Record{Topic: "in", Value: []byte(v)})
			time.Sleep(10 * time.Millisecond)
		}
	}()
	err := p.Run(ctx)
	cancel()
	<-fed
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if slowed < 8 {
		t.Fatalf("the commit was slowed %d times, want at least 8", slowed)
	}
	cps = cps[1 : len(cps)-1]
	for _, cp := range cps {
		if !cp.Committed || cp.Commit < commit {
			t.Fatalf("checkpoint %d: committed %v, commit took %s (slowed to %s)", cp.ID, cp.Committed, cp.Commit, commit)
		}
		t.Logf("checkpoint %d read for %s, committed in %s", cp.ID, (cp.Duration - cp.Commit).Round(time.Millisecond), cp.Commit.Round(time.Millisecond))
	}
	return cps
}

// TestCheckpointsKeepTheIntervalsCadence: a checkpoint that begins when its
// predecessor's commit ends reads only for the rest of the interval, so a
// commit does not stretch the cycle. Commits are slowed by a hook to a
// third of the interval; without the cadence every checkpoint reads for a
// whole interval (the read loop ends only once the deadline has passed),
// and the cycle is 1.33 intervals.
func TestCheckpointsKeepTheIntervalsCadence(t *testing.T) {
	const interval, commit = 600 * time.Millisecond, 200 * time.Millisecond
	cps := runSlowCommits(t, interval, commit)
	short := 0
	for _, cp := range cps {
		if cp.Duration-cp.Commit < interval-commit/2 {
			short++
		}
	}
	// Each read for interval-commit, plus how late the poll returned.
	if short < len(cps)/2 {
		t.Fatalf("%d of %d checkpoints read for less than %s: the commits stretched the cycle", short, len(cps), interval-commit/2)
	}
}

// TestSlowCommitsGetAsLongToRead: when committing takes longer than the
// interval, a checkpoint reads at least as long as the last commit took,
// so that commits, during which nothing is read, take at most half the
// time. Without that it reads for one interval and commits for longer.
func TestSlowCommitsGetAsLongToRead(t *testing.T) {
	const interval, commit = 100 * time.Millisecond, 300 * time.Millisecond
	cps := runSlowCommits(t, interval, commit)
	for i, cp := range cps[1:] {
		if read, last := cp.Duration-cp.Commit, cps[i].Commit; read < last {
			t.Fatalf("checkpoint %d read for %s after a commit of %s", cp.ID, read, last)
		}
	}
}

// TestIdleCheckpointsCommitAtOnce: a checkpoint that read and wrote nothing
// has nothing to commit, and must not take the client's half-second wait
// after a commit without offsets (see txsink.Sink.Commit). Records that come
// after the idle stretch are written exactly once, in the transaction the
// idle checkpoints kept open.
func TestIdleCheckpointsCommitAtOnce(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("in", 2)
	const n = 500
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var idle []time.Duration
	var fed sync.WaitGroup
	feeding := false
	p := newPipeline(t, k, passThrough, nil, WithCheckpointObserver(func(cp Checkpoint) {
		mu.Lock()
		defer mu.Unlock()
		if cp.Records == 0 && cp.Committed {
			idle = append(idle, cp.Commit)
		}
		if len(idle) == 10 && !feeding {
			feeding = true
			fed.Add(1)
			go func() {
				defer fed.Done()
				k.Input("in", n, 10, nil)
			}()
		}
	}))
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	wctx, wcancel := context.WithTimeout(context.Background(), time.Minute)
	defer wcancel()
	for {
		mu.Lock()
		started := len(idle) >= 10
		mu.Unlock()
		if started {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	fed.Wait()
	werr := k.WaitCommitted(wctx, "t", "in")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if werr != nil {
		t.Fatal(werr)
	}
	testkit.CheckExactlyOnce(t, k.ReadAll("out"), n, nil)
	mu.Lock()
	defer mu.Unlock()
	sorted := slices.Sorted(slices.Values(idle))
	median := sorted[len(sorted)/2]
	t.Logf("%d idle checkpoints, commit median %s, max %s", len(idle), median, sorted[len(sorted)-1])
	if median >= 250*time.Millisecond {
		t.Fatalf("an idle checkpoint's commit took %s (median of %d); the client's wait after an empty commit is 500 ms", median, len(idle))
	}
}
