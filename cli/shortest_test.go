package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pipeline-run/pipeline/pipeline/ops"
)

// TestShortestFileRuns takes the shortest file of docs/config.md and does
// what the text beside it says: validate it, run it on the embedded
// broker, produce a few records to its input with pipeline produce, and
// read them from its output with pipeline consume.
func TestShortestFileRuns(t *testing.T) {
	data, err := os.ReadFile("../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	var body string
	for _, ex := range markdownExamples("docs/config.md", string(data)) {
		if strings.HasPrefix(ex.body, "name: copy\n") {
			body = ex.body
		}
	}
	if body == "" {
		t.Fatal("docs/config.md has no example starting name: copy")
	}
	path := writeFile(t, body)
	if code, out, errs := runCLI(t, "validate", "-c", path); code != 0 {
		t.Fatalf("validate: exit %d\n%s%s", code, out, errs)
	}
	// The port the example names may be taken here; the variable moves it.
	t.Setenv("PIPELINE_EMBEDDED_PORT", fmt.Sprint(freePort(t)))

	var out, errb syncBuffer
	e := &env{reg: ops.NewRegistry(), stdout: &out, stderr: &errb}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() { done <- e.main(ctx, []string{"run", "-c", path}) }()
	deadline := time.After(time.Minute)
	for !strings.Contains(errb.String(), "pipeline running") {
		select {
		case code := <-done:
			t.Fatalf("run ended with %d\nstdout: %s\nstderr: %s", code, out.String(), errb.String())
		case <-deadline:
			cancel()
			<-done
			t.Fatalf("the pipeline did not start\nstderr: %s", errb.String())
		case <-time.After(20 * time.Millisecond):
		}
	}

	var pout, perr bytes.Buffer
	p := &env{reg: ops.NewRegistry(), stdout: &pout, stderr: &perr, stdin: strings.NewReader("{\"n\": 1}\n{\"n\": 2}\n{\"n\": 3}\n")}
	if code := p.main(ctx, []string{"produce", "-c", path, "--topic", "input"}); code != 0 || !strings.Contains(pout.String(), "produced 3 records to input") {
		t.Fatalf("produce: exit %d\nstdout: %s\nstderr: %s", code, pout.String(), perr.String())
	}
	code, cout, cerr := runCLI(t, "consume", "-c", path, "--topic", "output", "--max", "3", "--timeout", "30s")
	if code != 0 {
		t.Fatalf("consume: exit %d\nstdout: %s\nstderr: %s\nrun's stderr: %s", code, cout, cerr, errb.String())
	}
	var ns []float64
	for _, line := range strings.Split(strings.TrimSpace(cout), "\n") {
		var r struct {
			Topic string
			Value struct{ N float64 }
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil || r.Topic != "output" {
			t.Fatalf("consume printed %q: %v", line, err)
		}
		ns = append(ns, r.Value.N)
	}
	slices.Sort(ns)
	if !slices.Equal(ns, []float64{1, 2, 3}) {
		t.Fatalf("consumed values %v, want 1, 2 and 3:\n%s", ns, cout)
	}

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("run exited %d on a stop\nstderr: %s", code, errb.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("run did not stop")
	}
}
