package bench

import (
	"math"
	"slices"
	"time"
)

// Percentile returns the p-th percentile (0 < p <= 100) of sorted by the
// nearest-rank method: the smallest sample with at least p% of the samples
// at or below it. It returns 0 for no samples.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(n)))
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}

// Latencies summarises end-to-end latencies.
type Latencies struct {
	Samples int
	P50     time.Duration
	P99     time.Duration
	Max     time.Duration
}

// Summarize sorts ds in place and returns its percentiles.
func Summarize(ds []time.Duration) Latencies {
	slices.Sort(ds)
	l := Latencies{Samples: len(ds), P50: Percentile(ds, 50), P99: Percentile(ds, 99)}
	if len(ds) > 0 {
		l.Max = ds[len(ds)-1]
	}
	return l
}

// Median returns the median of xs (the mean of the two middle values for
// an even count), or NaN for none. xs is not modified.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// Spread returns half the range of xs relative to its median, in percent:
// how far the rounds strayed. 0 for fewer than two values.
func Spread(xs []float64) float64 {
	if len(xs) < 2 {
		return 0
	}
	med := Median(xs)
	if med == 0 {
		return 0
	}
	return (slices.Max(xs) - slices.Min(xs)) / 2 / med * 100
}
