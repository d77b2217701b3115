package bench

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Case is one configuration of the sweep.
type Case struct {
	Interval   time.Duration
	Size       int
	Partitions int
}

func (c Case) String() string {
	return fmt.Sprintf("%s checkpoint, %d B records, %d partition%s", fmtInterval(c.Interval), c.Size, c.Partitions, plural(c.Partitions))
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func fmtInterval(d time.Duration) string { return d.String() }

// runsOf returns the throughput runs of arm in configuration c, by round.
// Arms that do not commit on an interval ran once per round, whatever the
// interval.
func runsOf(runs []ThroughputRun, arm string, perInterval bool, c Case) []ThroughputRun {
	var out []ThroughputRun
	for _, r := range runs {
		if r.Arm != arm || r.Size != c.Size || r.Partitions != c.Partitions {
			continue
		}
		if perInterval != (r.IntervalS != 0) || (perInterval && r.IntervalS != c.Interval.Seconds()) {
			continue
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b ThroughputRun) int { return a.Round - b.Round })
	return out
}

// Summary builds the row of each arm in configuration c from the runs
// and latency runs: medians over rounds, each round's ratio to the copy
// arm, to the peer and to the pass-through of the same round, and FAILED
// for an arm that failed any run.
func Summary(broker string, as []*Arm, c Case, runs []ThroughputRun, lats []LatencyRun) []Row {
	byRound := func(arm string, perInterval bool) map[int]ThroughputRun {
		m := map[int]ThroughputRun{}
		for _, r := range runsOf(runs, arm, perInterval, c) {
			if r.Err == "" && r.RecordsPerSec() > 0 {
				m[r.Round] = r
			}
		}
		return m
	}
	copyRuns, peerRuns, passRuns, limitRuns := byRound("copy", false), byRound("peer", true), byRound("pass", true), byRound("limit", false)
	var rows []Row
	for _, a := range as {
		rs := runsOf(runs, a.Name, a.PerInterval, c)
		row := Row{Broker: broker, Arm: a.Name, IntervalS: c.Interval.Seconds(), Size: c.Size, Partitions: c.Partitions,
			Rounds: len(rs), Ratio: math.NaN(), PeerRatio: math.NaN(), PassRatio: math.NaN(), LimitRatio: math.NaN(), KStreamsRatio: math.NaN()}
		var ksRuns map[int]ThroughputRun
		if ks, ok := KStreamsOf[a.Name]; ok {
			ksRuns = byRound(ks, true)
		}
		var rps, ratios, peerRatios, passRatios, limitRatios, ksRatios, cpu, tx []float64
		for _, r := range rs {
			if r.Err != "" {
				if row.Failed == "" {
					row.Failed = fmt.Sprintf("round %d: %s", r.Round, r.Err)
				}
				continue
			}
			rps = append(rps, r.RecordsPerSec())
			if cr, ok := copyRuns[r.Round]; ok {
				ratios = append(ratios, r.RecordsPerSec()/cr.RecordsPerSec())
			}
			if pr, ok := peerRuns[r.Round]; ok {
				peerRatios = append(peerRatios, r.RecordsPerSec()/pr.RecordsPerSec())
			}
			if pr, ok := passRuns[r.Round]; ok {
				passRatios = append(passRatios, r.RecordsPerSec()/pr.RecordsPerSec())
			}
			if lr, ok := limitRuns[r.Round]; ok {
				limitRatios = append(limitRatios, r.RecordsPerSec()/lr.RecordsPerSec())
			}
			if kr, ok := ksRuns[r.Round]; ok {
				ksRatios = append(ksRatios, r.RecordsPerSec()/kr.RecordsPerSec())
			}
			cpu = append(cpu, r.CPUS/(float64(r.Records)/1e6))
			if r.VisibleS > 0 {
				tx = append(tx, float64(r.Commits)/r.VisibleS)
			}
			row.PeakRSSMB = max(row.PeakRSSMB, float64(r.PeakRSS)/1e6)
		}
		if len(rs) == 0 {
			row.Failed = "not run"
		}
		for _, l := range lats {
			if l.Arm != a.Name || l.Size != c.Size || l.Partitions != c.Partitions || l.IntervalS != c.Interval.Seconds() {
				continue
			}
			if l.Err != "" {
				if row.Failed == "" {
					row.Failed = "latency run: " + l.Err
				}
				break
			}
			row.Latency, row.Rate, row.Achieved, row.P50Ms, row.P99Ms, row.MaxMs = true, l.Rate, l.Achieved, l.P50Ms, l.P99Ms, l.MaxMs
		}
		if row.Failed == "" {
			row.RecordsPerSec = Median(rps)
			row.SpreadPct = Spread(rps)
			row.MBPerSec = row.RecordsPerSec * float64(c.Size) / 1e6
			if len(ratios) > 0 {
				row.Ratio = Median(ratios)
			}
			if len(peerRatios) > 0 {
				row.PeerRatio = Median(peerRatios)
			}
			if len(passRatios) > 0 {
				row.PassRatio = Median(passRatios)
			}
			if len(limitRatios) > 0 {
				row.LimitRatio = Median(limitRatios)
			}
			if len(ksRatios) > 0 {
				row.KStreamsRatio = Median(ksRatios)
			}
			row.CPUPerM = Median(cpu)
			if len(tx) > 0 {
				row.TxPerSec = Median(tx)
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// latencyRate is the fixed rate of the latency runs of one configuration:
// half the throughput of its slowest arm, so that every arm runs at half
// its own maximum or less. 0 when no arm has a throughput.
func latencyRate(rows []Row) float64 {
	slowest := math.Inf(1)
	for _, r := range rows {
		if r.Failed == "" && r.RecordsPerSec > 0 {
			slowest = min(slowest, r.RecordsPerSec)
		}
	}
	if math.IsInf(slowest, 1) {
		return 0
	}
	return slowest / 2
}

// KStreamsOf maps a pipeline arm to the Kafka Streams arm running the same
// job at the same commit interval: the keyed count emitting every update
// against Kafka Streams with its record cache off, the one emitting once
// per checkpoint against Kafka Streams with it on.
var KStreamsOf = map[string]string{
	"pass":           "kstreams-pass",
	"keyed-count":    "kstreams-count",
	"keyed-count-cp": "kstreams-count-cached",
	"windowed-count": "kstreams-windowed-count",
	"table-join":     "kstreams-table-join",
}
