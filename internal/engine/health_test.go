package engine

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pipeline-run/pipeline/internal/testkit"
)

// TestHealthFollowsTheRun: starting is live but not ready; running is
// ready; three failed checkpoints in a row make it not ready, a commit
// ready again; stopped is neither.
func TestHealthFollowsTheRun(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("in", 2)
	k.Input("in", 100, 10, nil)
	var failing atomic.Bool
	p := newPipeline(t, k, passThrough, nil, WithBeforeCommit(func(Checkpoint) error {
		if failing.Load() {
			return errors.New("injected")
		}
		return nil
	}))
	if h := p.Health(time.Now()); !h.Live || h.Ready || !strings.Contains(h.Reason, "starting") {
		t.Fatalf("before it runs: %+v", h)
	}
	stop := testkit.Start(t, p)
	waitHealth := func(what string, ok func(Health) bool) Health {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			h := p.Health(time.Now())
			if ok(h) {
				return h
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: health stayed %+v", what, h)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitHealth("ready once running", func(h Health) bool { return h.Live && h.Ready && h.Reason == "" })
	failing.Store(true)
	h := waitHealth("not ready after failed checkpoints", func(h Health) bool { return !h.Ready })
	if !h.Live || !strings.Contains(h.Reason, "checkpoints failed") || !strings.Contains(h.Reason, "injected") {
		t.Fatalf("after failed checkpoints: %+v", h)
	}
	if p.Stats().Aborted < failedForNotReady {
		t.Fatalf("not ready after %d aborts", p.Stats().Aborted)
	}
	failing.Store(false)
	waitHealth("ready again once a checkpoint commits", func(h Health) bool { return h.Ready })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if h := p.Health(time.Now()); h.Live || h.Ready {
		t.Fatalf("after Run returned: %+v", h)
	}
}

// TestHealthReasons covers the states a run passes through briefly.
func TestHealthReasons(t *testing.T) {
	p := &Pipeline{}
	p.health.beatTolerance = time.Minute
	now := time.Now()
	p.health.checkpointDone(Checkpoint{Committed: true}, now)
	if h := p.Health(now); !h.Ready {
		t.Fatalf("running: %+v", h)
	}
	p.stats.restoring.Store(2)
	if h := p.Health(now); !h.Live || h.Ready || h.Reason != "2 tasks restoring their state" {
		t.Fatalf("restoring: %+v", h)
	}
	p.stats.restoring.Store(0)
	p.health.rebuilding.Store(true)
	if h := p.Health(now); !h.Live || h.Ready || !strings.Contains(h.Reason, "rebuilding") {
		t.Fatalf("rebuilding: %+v", h)
	}
	p.health.rebuilding.Store(false)
	if h := p.Health(now.Add(2 * time.Minute)); h.Live || !strings.Contains(h.Reason, "no checkpoint finished for 2m0s") {
		t.Fatalf("a stuck loop: %+v", h)
	}
}

// TestRestoreProgressIsForgottenWhenDone: a restore's progress shows in
// Figures while it runs, and goes when it ends.
func TestRestoreProgressIsForgottenWhenDone(t *testing.T) {
	p := &Pipeline{g: &Graph{}}
	k := StepTask{"per_key", 2}
	p.figures.restoreProgress(k, RestoreProgress{Done: 10, Total: 40}, false)
	if got := p.Figures().Restoring[k]; got != (RestoreProgress{10, 40}) {
		t.Fatalf("under way: %+v", got)
	}
	p.figures.restoreProgress(k, RestoreProgress{}, true)
	if _, ok := p.Figures().Restoring[k]; ok {
		t.Fatal("a finished restore still shows")
	}
}
