package bench

import (
	"math"
	"strings"
	"testing"
)

// TestLimitArm runs the limit arm and the pass-through on the embedded
// broker: every variant runs and passes its gate, the limit is the fastest
// of them, and the pass-through is measured against it.
func TestLimitArm(t *testing.T) {
	res, out := sweep(t, 3000, false, "limit", "pass")
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
	if !strings.Contains(out, "pass × limit") {
		t.Errorf("the ratio table does not measure pass against the limit:\n%s", out)
	}
}
