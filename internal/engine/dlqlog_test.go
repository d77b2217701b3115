package engine

import (
	"bytes"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pipeline-run/pipeline/internal/testkit"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestDeadLettersAreLoggedAtABoundedRateAndCheckpointsCapped sends a
// thousand poison records through: each reaches the dead-letter topic,
// but the log gets at most about one line a second, each saying how many
// went unlogged. The same run checks that checkpoint.max_records ends a
// checkpoint early and is never exceeded.
func TestDeadLettersAreLoggedAtABoundedRateAndCheckpointsCapped(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("in", 3)
	const n, maxRecords = 3000, 300
	poison := map[int]bool{}
	for i := 0; i < n; i += 3 {
		poison[i] = true
	}
	k.Input("in", n, 50, poison)
	var logs lockedBuffer
	var mu sync.Mutex
	var sizes []int
	body := strings.Replace(passThrough, "checkpoint: {interval: 100ms, timeout: 10s, max_records: 2000}",
		"checkpoint: {interval: 1s, timeout: 10s, max_records: "+strconv.Itoa(maxRecords)+"}", 1)
	if body == passThrough {
		t.Fatal("the checkpoint line of passThrough changed; update this test")
	}
	p := newPipeline(t, k, body, nil,
		WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))),
		WithCheckpointObserver(func(cp Checkpoint) {
			mu.Lock()
			sizes = append(sizes, cp.Records)
			mu.Unlock()
		}))
	start := time.Now()
	testkit.RunUntilCommitted(t, k, p, "t", "in")
	elapsed := time.Since(start)

	testkit.CheckExactlyOnce(t, k.ReadAll("out"), n, poison)
	if dlq := k.ReadAll("dlq"); len(dlq) != len(poison) {
		t.Fatalf("%d dead letters, want %d", len(dlq), len(poison))
	}

	lines := regexp.MustCompile(`msg="record sent to the dead-letter topic".*not_logged_since=(\d+)`).FindAllStringSubmatch(logs.String(), -1)
	if len(lines) == 0 {
		t.Fatalf("no dead letter was logged:\n%s", logs.String())
	}
	if limit := int(elapsed/time.Second) + 2; len(lines) > limit {
		t.Fatalf("%d dead-letter log lines in %v, want at most %d (one a second)", len(lines), elapsed, limit)
	}
	unlogged := 0
	for _, l := range lines[1:] {
		v, _ := strconv.Atoi(l[1])
		unlogged += v
	}
	if len(lines)+unlogged > len(poison) {
		t.Fatalf("%d lines and %d reported unlogged, but only %d dead letters", len(lines), unlogged, len(poison))
	}

	mu.Lock()
	defer mu.Unlock()
	full := 0
	for _, s := range sizes {
		if s > maxRecords {
			t.Fatalf("a checkpoint read %d records, more than checkpoint.max_records %d (all: %v)", s, maxRecords, sizes)
		}
		if s == maxRecords {
			full++
		}
	}
	if full == 0 {
		t.Fatalf("no checkpoint was ended by max_records: %v", sizes)
	}
	t.Logf("%d dead letters, %d log lines in %v; %d checkpoints, %d ended by max_records", len(poison), len(lines), elapsed.Round(time.Millisecond), len(sizes), full)
}
