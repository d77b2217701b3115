package bench

import (
	"math"
	"testing"
	"time"
)

func ms10(ns ...int) []time.Duration {
	out := make([]time.Duration, len(ns))
	for i, n := range ns {
		out[i] = time.Duration(n) * time.Millisecond
	}
	return out
}

func TestPercentile(t *testing.T) {
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"no samples give zero", nil, 50, 0},
		{"one sample is every percentile", ms10(7), 99, 7 * time.Millisecond},
		{"the median of an odd count is the middle", ms10(1, 2, 3), 50, 2 * time.Millisecond},
		{"the median of an even count is the lower middle (nearest rank)", ms10(1, 2, 3, 4), 50, 2 * time.Millisecond},
		{"p99 of 1..100 is 99", hundred, 99, 99 * time.Millisecond},
		{"p50 of 1..100 is 50", hundred, 50, 50 * time.Millisecond},
		{"p100 is the maximum", hundred, 100, 100 * time.Millisecond},
		{"p99 of ten samples is the largest", ms10(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 99, 10 * time.Millisecond},
		{"a tiny percentile is the smallest", ms10(5, 6, 7), 0.1, 5 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Percentile(tc.sorted, tc.p); got != tc.want {
				t.Errorf("Percentile(%v, %v) = %v, want %v", tc.sorted, tc.p, got, tc.want)
			}
		})
	}
}

func TestSummarizeSortsAndReportsTheMaximum(t *testing.T) {
	l := Summarize(ms10(30, 10, 20, 50, 40))
	want := Latencies{Samples: 5, P50: 30 * time.Millisecond, P99: 50 * time.Millisecond, Max: 50 * time.Millisecond}
	if l != want {
		t.Errorf("Summarize = %+v, want %+v", l, want)
	}
}

func TestMedianAndSpread(t *testing.T) {
	tests := []struct {
		name         string
		xs           []float64
		median, sprd float64
	}{
		{"an odd count takes the middle", []float64{3, 1, 2}, 2, 50},
		{"an even count averages the two middles", []float64{4, 1, 3, 2}, 2.5, 60},
		{"one value has no spread", []float64{7}, 7, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Median(tc.xs); got != tc.median {
				t.Errorf("Median(%v) = %v, want %v", tc.xs, got, tc.median)
			}
			if got := Spread(tc.xs); math.Abs(got-tc.sprd) > 1e-9 {
				t.Errorf("Spread(%v) = %v, want %v", tc.xs, got, tc.sprd)
			}
		})
	}
	if !math.IsNaN(Median(nil)) {
		t.Error("Median(nil) is not NaN")
	}
	xs := []float64{3, 1, 2}
	Median(xs)
	if xs[0] != 3 {
		t.Error("Median sorted its argument")
	}
}
