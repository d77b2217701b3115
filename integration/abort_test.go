package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/internal/engine"
)

var errInjectedAbort = errors.New("checkpoint aborted on purpose by the test")

// Checkpoints aborted on purpose while input flows, on whichever broker the
// suite runs against: the abort-and-replay path end to end against the
// broker's own transaction coordinator. The pipeline runs in this process so
// that a before-commit hook can fail every third checkpoint that holds
// records; the broker-side fault hooks of the in-process kfake tests in
// pipeline/ exist on kfake only, this hook on every broker.
func TestAbortedCheckpointsReplayExactlyOnce(t *testing.T) {
	e := newEnv(t)
	const partitions, keys = 3, 300
	records := 30_000
	if testing.Short() {
		records = 6_000
	}
	CreateTopics(t, e.adm, partitions, e.input, e.output)
	pc := e.config(partitions)
	cfg, err := config.Parse([]byte(pc.YAML()), pc.Name+".yaml", func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	logPath := filepath.Join(e.logDir, "pipeline-in-process.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("in-process pipeline log tail (%s):\n%s", logPath, tailFile(logPath, 40))
		}
	})

	// Input keeps flowing for a while, so aborts land while there is more
	// to come, not only on a drained pipeline, even where checkpoints are
	// slow (a cold broker JVM on two cores: over a second each).
	const span = 15 * time.Second
	input := StartInput(t, e.seeds, InputSpec{Topic: e.input, Records: records, Keys: keys, Rate: int(float64(records) / span.Seconds())})

	var withRecords, fired, firedWhileFlowing atomic.Int64
	p, err := engine.New(cfg, nil,
		engine.WithSeedBrokers(e.seeds...),
		engine.WithLogger(slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: e2eLogLevel()}))),
		engine.WithBeforeCommit(func(cp engine.Checkpoint) error {
			// Every third checkpoint that has records: an empty one
			// aborted would prove nothing.
			if cp.Records == 0 || withRecords.Add(1)%3 != 0 {
				return nil
			}
			fired.Add(1)
			select {
			case <-input.Done():
			default:
				firedWhileFlowing.Add(1)
			}
			return errInjectedAbort
		}),
	)
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	// However the test ends, Run is over before it returns.
	stopped := false
	stop := func() error {
		cancel()
		if stopped {
			return nil
		}
		stopped = true
		return <-done
	}
	defer stop()

	input.Wait(t)
	end := e.inputEnd()
	WaitFor(t, drainBound, "the group's committed offsets to reach the input end", func() (bool, string) {
		select {
		case err := <-done:
			stopped = true
			t.Fatalf("the pipeline stopped on its own: %v", err)
		default:
		}
		_, committed, err := e.committed()
		if err != nil {
			return false, err.Error()
		}
		return offsetsReached(committed, end), fmt.Sprintf("committed %v, input end %v", sorted(committed), sorted(end))
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}

	st := p.Stats()
	switch {
	case fired.Load() == 0:
		t.Fatal("no checkpoint was aborted: the fault never fired")
	case firedWhileFlowing.Load() == 0:
		t.Fatalf("all %d aborts came after the input was complete: none hit a pipeline with input still coming", fired.Load())
	case st.Aborted < fired.Load():
		t.Fatalf("%d checkpoints aborted on purpose, but the pipeline counts %d aborted", fired.Load(), st.Aborted)
	case st.Rebuilds != 0:
		t.Fatalf("a clean abort rebuilt the transactional client %d times; it should replay with the same client", st.Rebuilds)
	}
	r := CheckRun(t, e.seeds, CheckSpec{Input: e.input, Output: e.output, Group: e.group, InputRecords: records})
	e.audit(pc.Write(t, e.logDir), records)
	t.Logf("figures: %d records, %d checkpoints aborted on purpose (%d while input flowed), %d aborted and %d committed in all, %v; %d aborted-transaction records (%d abort, %d commit markers)",
		records, fired.Load(), firedWhileFlowing.Load(), st.Aborted, st.Committed, time.Since(start).Round(time.Millisecond),
		r.AbortedRecords, r.AbortMarkers, r.CommitMarkers)
}

// e2eLogLevel is the level of in-process pipelines' logs: E2E_LOG_LEVEL
// (debug, info, warn, error), info by default. At debug the Kafka client
// logs every request.
func e2eLogLevel() slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(os.Getenv("E2E_LOG_LEVEL"))); err != nil {
		return slog.LevelInfo
	}
	return l
}
