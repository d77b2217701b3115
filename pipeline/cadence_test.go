package pipeline

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestNextDeadline(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const iv = time.Second
	for _, c := range []struct {
		name           string
		cadence, start time.Time
		want           time.Time
	}{
		{"first checkpoint", time.Time{}, t0, t0.Add(iv)},
		{"after a 30 ms commit", t0, t0.Add(30 * time.Millisecond), t0.Add(iv)},
		{"after a commit of 999 ms", t0, t0.Add(999 * time.Millisecond), t0.Add(iv)},
		{"after a commit as long as the interval", t0, t0.Add(iv), t0.Add(2 * iv)},
		{"after a commit longer than the interval", t0, t0.Add(1500 * time.Millisecond), t0.Add(2500 * time.Millisecond)},
	} {
		if got := nextDeadline(c.cadence, c.start, iv); !got.Equal(c.want) {
			t.Errorf("%s: deadline %s after t0, want %s", c.name, got.Sub(t0), c.want.Sub(t0))
		}
	}
}

// TestCheckpointsKeepTheIntervalsCadence: a checkpoint that begins when its
// predecessor's commit ends reads only for the rest of the interval, so a
// commit does not stretch the cycle. The commits are slowed by a hook to a
// half of the interval; without the cadence every checkpoint reads for a
// whole interval (the read loop ends only once the deadline has passed),
// and the cycle is 1.5 intervals.
func TestCheckpointsKeepTheIntervalsCadence(t *testing.T) {
	k := newCluster(t)
	k.topic("in", 1)
	const interval, commit = 400 * time.Millisecond, 200 * time.Millisecond
	body := strings.Replace(passThrough, "interval: 100ms", "interval: 400ms", 1)
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
	// empty one's commit takes the client half a second by itself.
	fed := make(chan struct{})
	go func() {
		defer close(fed)
		for i := 0; ctx.Err() == nil; i++ {
			v := fmt.Sprintf(`{"k":"k%d","seq":%d}`, i%10, i)
			k.cl.ProduceSync(ctx, &kgo.Record{Topic: "in", Value: []byte(v)})
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
	// The first checkpoint has no predecessor, and the last was cut short.
	short := 0
	for i, cp := range cps[1 : len(cps)-1] {
		if !cp.Committed || cp.Commit < commit {
			t.Fatalf("checkpoint %d: committed %v, commit took %s (slowed to %s)", i+1, cp.Committed, cp.Commit, commit)
		}
		read := cp.Duration - cp.Commit
		t.Logf("checkpoint %d read for %s, committed in %s", cp.ID, read.Round(time.Millisecond), cp.Commit.Round(time.Millisecond))
		if read < interval-commit/2 {
			short++
		}
	}
	// Each read for interval-commit, plus how late the poll returned.
	if want := (len(cps) - 2) / 2; short < want {
		t.Fatalf("%d of %d checkpoints read for less than %s, want at least %d: the commit stretched the cycle", short, len(cps)-2, interval-commit/2, want)
	}
}

// TestIdleCheckpointsCommitAtOnce: a checkpoint that read and wrote nothing
// has nothing to commit, and must not take the client's half-second wait
// after a commit without offsets (see txsink.Sink.Commit). Records that come
// after the idle stretch are written exactly once, in the transaction the
// idle checkpoints kept open.
func TestIdleCheckpointsCommitAtOnce(t *testing.T) {
	k := newCluster(t)
	k.topic("in", 2)
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
				k.input("in", n, 10, nil)
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
	werr := k.waitCommitted(wctx, "t", "in")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if werr != nil {
		t.Fatal(werr)
	}
	checkExactlyOnce(t, k.readAll("out"), n, nil)
	mu.Lock()
	defer mu.Unlock()
	sorted := slices.Sorted(slices.Values(idle))
	median := sorted[len(sorted)/2]
	t.Logf("%d idle checkpoints, commit median %s, max %s", len(idle), median, sorted[len(sorted)-1])
	if median >= 250*time.Millisecond {
		t.Fatalf("an idle checkpoint's commit took %s (median of %d); the client's wait after an empty commit is 500 ms", median, len(idle))
	}
}
