package bench

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestLimitArm runs the limit arm and the pass-through on the embedded
// broker: every variant runs and passes its gate, the limit is a run of
// its own of the fastest of them, and the pass-through is measured
// against it.
func TestLimitArm(t *testing.T) {
	res, out, msg := sweepMessages(t, sweepOptions(3000, false, "limit", "pass"))
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
	if limit.Err != "" {
		t.Fatalf("the limit run failed: %s", limit.Err)
	}
	for v, rps := range tried {
		if rps > tried[limit.Variant] {
			t.Errorf("variant %q ran %.0f records/s, faster than %q (%.0f), which the limit ran", v, rps, limit.Variant, tried[limit.Variant])
		}
	}
	if limit.RecordsPerSec() == tried[limit.Variant] && limit.ProcessingS == res.Runs[slices.IndexFunc(res.Runs, func(r ThroughputRun) bool { return r.Arm == "limit: "+limit.Variant })].ProcessingS {
		t.Errorf("the limit is the search's own run of %q, not a run of its own", limit.Variant)
	}
	// The limit is the median of limitRuns fresh runs of the variant, as
	// the messages report them.
	var fresh []float64
	for line := range strings.Lines(msg) {
		if _, after, ok := strings.Cut(line, fmt.Sprintf(" of %d: %s", limitRuns, limit.Variant)); ok && strings.Contains(line, "limit, run ") {
			rps, err := strconv.ParseFloat(strings.ReplaceAll(strings.Fields(after)[0], ",", ""), 64)
			if err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			fresh = append(fresh, rps)
		}
	}
	if len(fresh) != limitRuns {
		t.Fatalf("%d fresh runs of %q reported, want %d:\n%s", len(fresh), limit.Variant, limitRuns, msg)
	}
	slices.Sort(fresh)
	if got := thousands(limit.RecordsPerSec()); got != thousands(fresh[limitRuns/2]) {
		t.Errorf("the limit ran %s records/s, not the median of its fresh runs %v", got, fresh)
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
