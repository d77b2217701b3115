package bench

import (
	"strings"
	"testing"
	"time"
)

// TestRestoreRun times a restore on the embedded broker: a first run
// builds 20,000 keys of state, a fresh instance restores every one of
// them (its stores count them), and the run says how fast.
func TestRestoreRun(t *testing.T) {
	const keys = 20_000
	res, out := sweepWith(t, Options{
		Records: 2000, Sizes: []int{100}, Partitions: []int{2}, Broker: "embedded",
		Intervals: []time.Duration{100 * time.Millisecond}, Rounds: 1, Arms: []string{"pass"},
		MaxRecords: 1000000, RunTimeout: 30 * time.Second, Restore: keys, LatencyFor: time.Second,
	})
	if len(res.Restores) != 1 {
		t.Fatalf("%d restore runs, want 1:\n%s", len(res.Restores), out)
	}
	r := res.Restores[0]
	if r.Err != "" || r.Keys != keys || r.Restored < keys || r.Seconds <= 0 || r.CPUS <= 0 || r.PeakRSS <= 0 {
		t.Fatalf("restore run %+v", r)
	}
	t.Logf("restored %d changelog records in %.3f s: %.0f records/s", r.Restored, r.Seconds, r.RecordsPerSec())
	if !strings.Contains(out, "restore of 20,000 keys of 100 B state, 2p") {
		t.Errorf("the restore is not in the output:\n%s", out)
	}
}
