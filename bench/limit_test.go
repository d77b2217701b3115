package bench

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLimitArm runs the limit arm and the pass-through on the embedded
// broker: every variant runs and passes its gate, the limit is the fastest
// of them, and the pass-through is measured against it.
func TestLimitArm(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a broker")
	}
	dir := t.TempDir()
	o := Options{
		Broker: "embedded", Records: 3000, Sizes: []int{100}, Partitions: []int{2},
		Intervals: []time.Duration{100 * time.Millisecond}, Rounds: 1,
		Arms: []string{"limit", "pass"}, LatencyFor: 300 * time.Millisecond, MaxRecords: 200000, RunTimeout: 30 * time.Second,
		JSON: filepath.Join(dir, "r.json"),
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, msg strings.Builder
	if err := Run(ctx, o, &out, &msg); err != nil {
		t.Fatalf("Run: %v\n%s\n%s", err, out.String(), msg.String())
	}
	res, err := ReadJSON(o.JSON)
	if err != nil {
		t.Fatal(err)
	}
	tried := map[string]float64{}
	var limit *ThroughputRun
	for i, r := range res.Runs {
		switch {
		case r.Arm == "limit":
			limit = &res.Runs[i]
		case strings.HasPrefix(r.Arm, "limit: "):
			if r.Err != "" {
				t.Errorf("%s: %s", r.Arm, r.Err)
			}
			tried[r.Variant] = r.RecordsPerSec()
		}
	}
	if len(tried) != len(limitVariants) {
		t.Fatalf("%d variants ran, want %d: %v", len(tried), len(limitVariants), tried)
	}
	if limit == nil {
		t.Fatal("no limit run")
	}
	for v, rps := range tried {
		if rps > limit.RecordsPerSec() {
			t.Errorf("variant %q ran %.0f records/s, above the limit's %.0f (%s)", v, rps, limit.RecordsPerSec(), limit.Variant)
		}
	}
	if tried[limit.Variant] != limit.RecordsPerSec() {
		t.Errorf("the limit run names variant %q, which ran %.0f records/s, not its %.0f", limit.Variant, tried[limit.Variant], limit.RecordsPerSec())
	}
	for _, r := range res.Rows {
		if r.Arm == "pass" && (math.IsNaN(r.LimitRatio) || r.LimitRatio <= 0) {
			t.Errorf("pass has no ratio to the limit: %+v", r)
		}
	}
	if !strings.Contains(out.String(), "pass × limit") {
		t.Errorf("the ratio table does not measure pass against the limit:\n%s", out.String())
	}
}
