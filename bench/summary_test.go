package bench

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestSummary(t *testing.T) {
	c := Case{Interval: time.Second, Size: 100, Partitions: 1}
	run := func(arm string, iv float64, round int, secs float64, err string) ThroughputRun {
		return ThroughputRun{Arm: arm, IntervalS: iv, Size: 100, Partitions: 1, Round: round, Records: 1000,
			ProcessingS: secs, VisibleS: secs * 2, CPUS: secs / 2, Commits: 4, PeakRSS: int64(round) * 1e6, Err: err}
	}
	runs := []ThroughputRun{
		// copy: 1000, 500, 250 records/s in rounds 1 to 3.
		run("copy", 0, 1, 1, ""), run("copy", 0, 2, 2, ""), run("copy", 0, 3, 4, ""),
		// pass at 1s: half the copy's speed in every round, however fast.
		run("pass", 1, 1, 2, ""), run("pass", 1, 2, 4, ""), run("pass", 1, 3, 8, ""),
		// pass at another interval, and on another partition count: not this case.
		run("pass", 0.1, 1, 100, ""), {Arm: "pass", IntervalS: 1, Size: 100, Partitions: 6, Round: 1, Records: 1, ProcessingS: 1},
		// peer fails one round.
		run("peer", 1, 1, 1, ""), run("peer", 1, 2, 1, "gate: read 9 of 10 records: 1 missing"), run("peer", 1, 3, 1, ""),
	}
	lats := []LatencyRun{
		{Arm: "pass", IntervalS: 1, Size: 100, Partitions: 1, Rate: 125, P50Ms: 500, P99Ms: 990, MaxMs: 1000},
		{Arm: "pass", IntervalS: 0.1, Size: 100, Partitions: 1, Rate: 1, P50Ms: 1},
	}
	as := []*Arm{{Name: "copy"}, {Name: "peer", PerInterval: true}, {Name: "pass", PerInterval: true}}
	rows := Summary("embedded", as, c, runs, lats)
	if len(rows) != 3 {
		t.Fatalf("got %d rows, want 3", len(rows))
	}
	cp, peer, pass := rows[0], rows[1], rows[2]

	t.Run("the copy arm's rounds count at every interval", func(t *testing.T) {
		if cp.Rounds != 3 || cp.RecordsPerSec != 500 || cp.Ratio != 1 {
			t.Errorf("copy: %+v", cp)
		}
	})
	t.Run("the ratio is the median of each round's ratio, not a ratio of medians", func(t *testing.T) {
		if pass.Ratio != 0.5 || pass.RecordsPerSec != 250 {
			t.Errorf("pass: ratio %v, records/s %v; want 0.5 and 250", pass.Ratio, pass.RecordsPerSec)
		}
	})
	t.Run("the ratio to the peer pairs rounds too, skipping the peer's failed one", func(t *testing.T) {
		// pass: 500 and 125 records/s in rounds 1 and 3, the peer 1000 in both.
		if pass.PeerRatio != 0.3125 {
			t.Errorf("pass ÷ peer %v, want 0.3125", pass.PeerRatio)
		}
		// copy: 1000 and 250 records/s in rounds 1 and 3.
		if cp.PeerRatio != 0.625 {
			t.Errorf("copy ÷ peer %v, want 0.625", cp.PeerRatio)
		}
	})
	t.Run("the ratio to the pass-through pairs rounds at the same interval", func(t *testing.T) {
		// copy: 1000, 500, 250 records/s; pass at 1s: 500, 250, 125.
		if cp.PassRatio != 2 || pass.PassRatio != 1 {
			t.Errorf("copy ÷ pass %v, pass ÷ pass %v; want 2 and 1", cp.PassRatio, pass.PassRatio)
		}
		// The peer failed a round: it has no figures at all.
		if !math.IsNaN(peer.PassRatio) {
			t.Errorf("peer ÷ pass %v, want none", peer.PassRatio)
		}
	})
	t.Run("the other numbers are medians, RSS the largest", func(t *testing.T) {
		if pass.CPUPerM != 2000 || pass.TxPerSec != 0.5 || pass.PeakRSSMB != 3 || pass.MBPerSec != 0.025 {
			t.Errorf("pass: %+v", pass)
		}
		if math.Abs(pass.SpreadPct-75) > 1e-9 {
			t.Errorf("spread %v, want 75 ((500-125)/2 over 250)", pass.SpreadPct)
		}
	})
	t.Run("latency comes from the run at the same interval", func(t *testing.T) {
		if !pass.Latency || pass.P99Ms != 990 || pass.Rate != 125 {
			t.Errorf("pass: %+v", pass)
		}
		if cp.Latency {
			t.Errorf("copy has a latency without a latency run")
		}
	})
	t.Run("an arm failing one round is FAILED, with no numbers", func(t *testing.T) {
		if !strings.HasPrefix(peer.Failed, "round 2: gate:") || peer.RecordsPerSec != 0 {
			t.Errorf("peer: %+v", peer)
		}
	})
	t.Run("the latency rate is half the slowest arm that did not fail", func(t *testing.T) {
		if got := latencyRate(rows); got != 125 {
			t.Errorf("latencyRate = %v, want 125", got)
		}
	})
}

func TestSummaryWithoutCopyHasNoRatio(t *testing.T) {
	c := Case{Interval: time.Second, Size: 100, Partitions: 1}
	runs := []ThroughputRun{{Arm: "pass", IntervalS: 1, Size: 100, Partitions: 1, Round: 1, Records: 10, ProcessingS: 1}}
	rows := Summary("x", []*Arm{{Name: "pass", PerInterval: true}}, c, runs, nil)
	if !math.IsNaN(rows[0].Ratio) {
		t.Errorf("ratio %v without a copy arm", rows[0].Ratio)
	}
}

func TestReportRecomputesRowsFromRuns(t *testing.T) {
	res := &Results{Broker: "kafka"}
	for round := 1; round <= 2; round++ {
		for _, size := range []int{100, 1024} {
			res.Runs = append(res.Runs,
				ThroughputRun{Arm: "copy", Size: size, Partitions: 1, Round: round, Records: 100, ProcessingS: 1},
				ThroughputRun{Arm: "pass", IntervalS: 0.1, Size: size, Partitions: 1, Round: round, Records: 100, ProcessingS: 2},
				ThroughputRun{Arm: "pass", IntervalS: 1, Size: size, Partitions: 1, Round: round, Records: 100, ProcessingS: 1.25},
			)
		}
	}
	res.Rows = []Row{{Arm: "stale"}}
	var b strings.Builder
	Report(&b, res)
	if len(res.Rows) != 8 {
		t.Fatalf("%d rows, want 2 sizes × 2 intervals × 2 arms", len(res.Rows))
	}
	for _, r := range res.Rows {
		if r.Arm == "pass" && r.IntervalS == 1 && r.Ratio != 0.8 {
			t.Errorf("pass at 1s: ratio %v, want 0.8", r.Ratio)
		}
	}
	for _, want := range []string{"#### kafka, 100ms checkpoint, 1024 B records, 1 partition: 100 records, 2 rounds", "| 1024 B |          1 |       1s |        0.80 |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, b.String())
		}
	}
}
