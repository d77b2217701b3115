package bench

import (
	"math"
	"strings"
	"testing"
)

func TestFormatTable(t *testing.T) {
	rows := []Row{
		{Arm: "copy", RecordsPerSec: 412345.6, SpreadPct: 3.2, MBPerSec: 41.2, Ratio: 1, CPUPerM: 3.46, PeakRSSMB: 45.4,
			Latency: true, Achieved: 50123, P50Ms: 0.74, P99Ms: 12.6, MaxMs: 1234.5},
		{Arm: "peer", RecordsPerSec: 1000, Ratio: math.NaN(), TxPerSec: 9.95, CPUPerM: 4},
		{Arm: "pass", Failed: "round 2: gate: read 9 of 10 records: 1 missing"},
	}
	var b strings.Builder
	FormatTable(&b, "#### a heading", rows)
	want := `#### a heading

| arm  | records/s |   ± | MB/s | × copy | CPU s/M rec | tx/s | sent/s | p50 ms | p99 ms | max ms | peak RSS MB | gate                                                   |
| ---- | --------: | --: | ---: | -----: | ----------: | ---: | -----: | -----: | -----: | -----: | ----------: | ------------------------------------------------------ |
| copy |   412,346 |  3% | 41.2 |   1.00 |         3.5 |    – | 50,123 |    0.7 |     13 |  1,235 |          45 | ok                                                     |
| peer |     1,000 |  0% |  0.0 |      – |         4.0 |  9.9 |      – |      – |      – |      – |           0 | ok                                                     |
| pass |    FAILED |     |      |        |             |      |        |        |        |        |             | FAILED: round 2: gate: read 9 of 10 records: 1 missing |

`
	if got := b.String(); got != want {
		t.Errorf("FormatTable wrote\n%s\nwant\n%s", got, want)
	}
}

func TestFormatRatiosComparesEveryArmWithCopyAndPassWithPeer(t *testing.T) {
	rows := []Row{
		{Arm: "copy", Size: 100, Partitions: 1, IntervalS: 1, RecordsPerSec: 100, Ratio: 1},
		{Arm: "peer", Size: 100, Partitions: 1, IntervalS: 1, RecordsPerSec: 80, Ratio: 0.8},
		{Arm: "pass", Size: 100, Partitions: 1, IntervalS: 1, RecordsPerSec: 90, Ratio: 0.9, PeerRatio: 1.125},
		{Arm: "copy", Size: 100, Partitions: 1, IntervalS: 0.1, RecordsPerSec: 100, Ratio: 1},
		{Arm: "peer", Size: 100, Partitions: 1, IntervalS: 0.1, Failed: "x"},
		{Arm: "pass", Size: 100, Partitions: 1, IntervalS: 0.1, RecordsPerSec: 50, Ratio: 0.5, PeerRatio: math.NaN()},
	}
	var b strings.Builder
	FormatRatios(&b, []string{"copy", "peer", "pass"}, rows)
	want := `|  size | partitions | interval | peer × copy | pass × copy | pass ÷ peer |
| ----: | ---------: | -------: | ----------: | ----------: | ----------: |
| 100 B |          1 |       1s |        0.80 |        0.90 |        1.12 |
| 100 B |          1 |    100ms |      FAILED |        0.50 |           – |

`
	if got := b.String(); got != want {
		t.Errorf("FormatRatios wrote\n%s\nwant\n%s", got, want)
	}
}

func TestThousands(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 999.4: "999", 999.5: "1,000", 1234567: "1,234,567", -1234: "-1,234", 100000: "100,000"} {
		if got := thousands(v); got != want {
			t.Errorf("thousands(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestFormatRatiosComparesWindowedCountWithPass(t *testing.T) {
	rows := []Row{
		{Arm: "copy", Size: 100, Partitions: 1, IntervalS: 1, RecordsPerSec: 100, Ratio: 1},
		{Arm: "pass", Size: 100, Partitions: 1, IntervalS: 1, RecordsPerSec: 90, Ratio: 0.9, PeerRatio: math.NaN(), PassRatio: 1},
		{Arm: "windowed-count", Size: 100, Partitions: 1, IntervalS: 1, RecordsPerSec: 30, Ratio: 0.3, PeerRatio: math.NaN(), PassRatio: 1.0 / 3},
		{Arm: "copy", Size: 100, Partitions: 1, IntervalS: 0.1, RecordsPerSec: 100, Ratio: 1},
		{Arm: "pass", Size: 100, Partitions: 1, IntervalS: 0.1, RecordsPerSec: 50, Ratio: 0.5, PeerRatio: math.NaN(), PassRatio: 1},
		{Arm: "windowed-count", Size: 100, Partitions: 1, IntervalS: 0.1, Failed: "x"},
	}
	var b strings.Builder
	FormatRatios(&b, []string{"copy", "pass", "windowed-count"}, rows)
	want := `|  size | partitions | interval | pass × copy | windowed-count × copy | pass ÷ peer | windowed-count ÷ pass |
| ----: | ---------: | -------: | ----------: | --------------------: | ----------: | --------------------: |
| 100 B |          1 |       1s |        0.90 |                  0.30 |           – |                  0.33 |
| 100 B |          1 |    100ms |        0.50 |                FAILED |           – |                FAILED |

`
	if got := b.String(); got != want {
		t.Errorf("FormatRatios wrote\n%s\nwant\n%s", got, want)
	}
}
