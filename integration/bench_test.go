package integration

import (
	"context"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pipeline-run/pipeline/bench"
)

// TestKafkaStreamsArms runs the bench's Kafka Streams arms beside the
// pipeline's on the real broker, as the sweep of docs/benchmarks.md does:
// the application is built by scripts/kstreams.sh, every arm passes its
// correctness gate (each count's value checked against the input, each
// window's count against an oracle of the input), and each pipeline arm
// gets its ratio to Kafka Streams running the same job.
func TestKafkaStreamsArms(t *testing.T) {
	b := requireBroker(t)
	if b.Kind() == "kfake-process" {
		t.Skip("Kafka Streams runs against Apache Kafka only")
	}
	pairs := map[string]string{}
	for p, ks := range bench.KStreamsOf {
		pairs[p] = ks
	}
	var armNames []string
	for _, p := range slices.Sorted(maps.Keys(pairs)) {
		armNames = append(armNames, p, pairs[p])
	}
	dir := t.TempDir()
	o := bench.Options{
		Broker: b.Addr(), Label: "kafka", Records: 250_000, Sizes: []int{100}, Partitions: []int{2},
		Intervals: []time.Duration{500 * time.Millisecond}, Rounds: 1, Arms: armNames,
		LatencyFor: 300 * time.Millisecond, MaxRecords: 1_000_000, Linger: 50 * time.Millisecond, RunTimeout: 3 * time.Minute,
		JSON: filepath.Join(dir, "r.json"), KStreams: filepath.Join("..", "scripts", "kstreams.sh"),
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var out, msg strings.Builder
	if err := bench.Run(ctx, o, &out, &msg); err != nil {
		t.Fatalf("bench: %v\n%s\n%s", err, out.String(), msg.String())
	}
	res, err := bench.ReadJSON(o.JSON)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Skipped) > 0 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("arms skipped: %v", res.Skipped)
		}
		t.Skipf("arms skipped: %v", res.Skipped)
	}
	rows := map[string]bench.Row{}
	for _, r := range res.Rows {
		rows[r.Arm] = r
	}
	for p, ks := range pairs {
		for _, a := range []string{p, ks} {
			r, ok := rows[a]
			if !ok || r.Failed != "" || r.RecordsPerSec <= 0 || r.CPUPerM <= 0 || r.PeakRSSMB <= 0 {
				t.Errorf("%s: %+v", a, r)
			}
		}
		if r := rows[p]; math.IsNaN(r.KStreamsRatio) || r.KStreamsRatio <= 0 {
			t.Errorf("%s has no ratio to %s: %+v", p, ks, r)
		}
	}
	t.Logf("\n%s", out.String())
}
