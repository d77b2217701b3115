package cli

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pipeline-run/pipeline/pipeline"
)

// TestDemoStoppedBySignalExitsZero stops the quick start while its feeder
// is still writing, as SIGTERM does (Main cancels the context), and
// expects a clean stop: exit 0, the pipeline's stop line, and the report
// saying the demo was stopped early.
func TestDemoStoppedBySignalExitsZero(t *testing.T) {
	data, err := os.ReadFile("../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// Slow enough that it cannot finish before the stop.
	body := strings.Replace(string(data), "rate: 10000", "rate: 200", 1)
	if body == string(data) {
		t.Fatal("quickstart.yaml no longer has rate: 10000; update the test")
	}
	var out, errb syncBuffer
	e := &env{reg: pipeline.NewRegistry(), stdout: &out, stderr: &errb}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() { done <- e.main(ctx, []string{"run", "-c", writeFile(t, body)}) }()

	// Stop once a checkpoint has committed records, mid-feed.
	deadline := time.After(time.Minute)
	for !strings.Contains(errb.String(), "pipeline running") {
		select {
		case code := <-done:
			t.Fatalf("the run ended with %d before it was stopped\nstdout: %s\nstderr: %s", code, out.String(), errb.String())
		case <-deadline:
			cancel()
			<-done
			t.Fatalf("the pipeline did not start\nstderr: %s", errb.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != ExitOK {
			t.Fatalf("exit %d after a stop, want 0\nstdout: %s\nstderr: %s", code, out.String(), errb.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("the run did not stop")
	}
	if !strings.Contains(errb.String(), "pipeline stopped") {
		t.Errorf("stderr lacks the stop line:\n%s", errb.String())
	}
	if !strings.Contains(out.String(), "stopped before the demo finished: ") {
		t.Errorf("the report does not say the demo was stopped early:\n%s", out.String())
	}
}
