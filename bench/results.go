package bench

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strconv"
	"time"
)

// ThroughputRun is one throughput run of one arm over the backlog.
type ThroughputRun struct {
	Arm        string  `json:"arm"`
	IntervalS  float64 `json:"interval_s"` // 0 for arms that do not commit on an interval
	Size       int     `json:"size"`
	Partitions int     `json:"partitions"`
	Round      int     `json:"round"`
	Records    int64   `json:"records"` // input records
	Outputs    int64   `json:"outputs"` // outputs expected
	// ProcessingS runs from the first batch fetched to the last output
	// acknowledged by the broker (for an arm that EndAtLastInput, such as
	// windowed-count, to that or to its polling the last input record,
	// whichever is later); records/s is Records, input records, over it.
	ProcessingS float64 `json:"processing_s"`
	// VisibleS runs from the first batch fetched to the commit that made
	// the last output visible: ProcessingS plus the wait for the last
	// checkpoint to end and commit.
	VisibleS float64 `json:"visible_s"`
	StartupS float64 `json:"startup_s"` // from the arm's start to its first fetched batch
	CPUS     float64 `json:"cpu_s"`     // process CPU time from the arm's start until it stopped
	Commits  int64   `json:"commits"`   // transactions committed with records
	// CommitS is the time those checkpoints spent in their barrier, flush
	// and commit, when reading stops (pipeline arms only).
	CommitS float64 `json:"commit_s,omitempty"`
	Aborts  int64   `json:"aborts"`
	PeakRSS int64   `json:"peak_rss_bytes"` // the process's, sampled during the run
	Load1   float64 `json:"load1"`          // the machine's 1-minute load average when the run ended
	Err     string  `json:"error,omitempty"`
	// Variant names the setting of a limit run (copyVariant).
	Variant string `json:"variant,omitempty"`
}

// RecordsPerSec is the run's throughput.
func (r ThroughputRun) RecordsPerSec() float64 {
	if r.ProcessingS <= 0 {
		return 0
	}
	return float64(r.Records) / r.ProcessingS
}

// LatencyRun is one arm fed at a fixed rate, with a read_committed reader
// timing each output.
type LatencyRun struct {
	Arm        string  `json:"arm"`
	IntervalS  float64 `json:"interval_s"` // the configuration's (copy arms ignore it)
	Size       int     `json:"size"`
	Partitions int     `json:"partitions"`
	Rate       float64 `json:"rate"`     // records/s asked for
	Achieved   float64 `json:"achieved"` // records/s sent, from the first to the last
	Sent       int64   `json:"sent"`     // records sent in all
	Commits    int64   `json:"commits"`  // transactions committed with records
	Aborts     int64   `json:"aborts"`
	Measured   int     `json:"measured"` // outputs timed: those sent in the window
	// DrainedAt is when everything sent before the first output was
	// visible, and MeasuredFrom when the window opened: the settle period
	// later, or once the arm kept up with the rate if that was later
	// (Unix microseconds).
	DrainedAt    int64   `json:"drained_us,omitempty"`
	MeasuredFrom int64   `json:"measured_from_us,omitempty"`
	P50Ms        float64 `json:"p50_ms"`
	P99Ms        float64 `json:"p99_ms"`
	MaxMs        float64 `json:"max_ms"`
	Err          string  `json:"error,omitempty"`
}

// Row is one arm in one configuration, over all rounds.
type Row struct {
	Broker        string  `json:"broker"`
	Arm           string  `json:"arm"`
	IntervalS     float64 `json:"interval_s"`
	Size          int     `json:"size"`
	Partitions    int     `json:"partitions"`
	Rounds        int     `json:"rounds"`
	RecordsPerSec float64 `json:"records_per_s"`  // median over rounds
	SpreadPct     float64 `json:"spread_pct"`     // half the range over the median
	MBPerSec      float64 `json:"mb_per_s"`       // of record values
	Ratio         float64 `json:"ratio_to_copy"`  // median of the per-round ratios; NaN without copy
	PeerRatio     float64 `json:"ratio_to_peer"`  // the same against the peer at the same interval; NaN without peer
	PassRatio     float64 `json:"ratio_to_pass"`  // the same against the pass-through at the same interval; NaN without pass
	LimitRatio    float64 `json:"ratio_to_limit"` // the same against the limit arm; NaN without limit
	// KStreamsRatio is the same against the Kafka Streams arm running the
	// same job (KStreamsOf) at the same commit interval; NaN without it.
	KStreamsRatio float64 `json:"ratio_to_kstreams"`
	CPUPerM       float64 `json:"cpu_s_per_million"`
	TxPerSec      float64 `json:"tx_per_s"` // commits over VisibleS
	PeakRSSMB     float64 `json:"peak_rss_mb"`
	Latency       bool    `json:"latency"`          // whether the latency fields hold a measurement
	Rate          float64 `json:"latency_rate"`     // records/s asked for
	Achieved      float64 `json:"latency_achieved"` // records/s the producer managed
	P50Ms         float64 `json:"p50_ms"`
	P99Ms         float64 `json:"p99_ms"`
	MaxMs         float64 `json:"max_ms"`
	Failed        string  `json:"failed,omitempty"` // why the arm is reported as FAILED
}

// Interval returns the row's checkpoint interval.
func (r Row) Interval() time.Duration { return time.Duration(r.IntervalS * float64(time.Second)) }

// Results is everything one invocation measured.
type Results struct {
	Broker     string          `json:"broker"`
	Command    string          `json:"command"`
	Machine    Machine         `json:"machine"`
	Started    time.Time       `json:"started"`
	Took       string          `json:"took"`
	Linger     string          `json:"linger,omitempty"` // every arm's producer linger
	Skipped    []string        `json:"skipped,omitempty"`
	Runs       []ThroughputRun `json:"runs"`
	Latencies  []LatencyRun    `json:"latencies,omitempty"`
	Restores   []RestoreRun    `json:"restores,omitempty"`
	Rows       []Row           `json:"rows"`
	ProcessRSS int64           `json:"process_max_rss_bytes"` // getrusage's, over the whole process
}

// jsonFloat writes NaN (no ratio) as null.
type jsonFloat float64

func (f jsonFloat) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
		return []byte("null"), nil
	}
	return json.Marshal(float64(f))
}

// MarshalJSON writes a Row with NaN ratios as null.
func (r Row) MarshalJSON() ([]byte, error) {
	type plain Row
	return json.Marshal(struct {
		plain
		Ratio     jsonFloat `json:"ratio_to_copy"`
		PeerRatio jsonFloat `json:"ratio_to_peer"`
		PassRatio jsonFloat `json:"ratio_to_pass"`
		Limit     jsonFloat `json:"ratio_to_limit"`
		KStreams  jsonFloat `json:"ratio_to_kstreams"`
	}{plain(r), jsonFloat(r.Ratio), jsonFloat(r.PeerRatio), jsonFloat(r.PassRatio), jsonFloat(r.LimitRatio), jsonFloat(r.KStreamsRatio)})
}

// UnmarshalJSON reads null ratios back as NaN, and absent ones (results
// written before a ratio existed) too.
func (r *Row) UnmarshalJSON(b []byte) error {
	type plain Row
	var v struct {
		plain
		Ratio     *float64 `json:"ratio_to_copy"`
		PeerRatio *float64 `json:"ratio_to_peer"`
		PassRatio *float64 `json:"ratio_to_pass"`
		Limit     *float64 `json:"ratio_to_limit"`
		KStreams  *float64 `json:"ratio_to_kstreams"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*r = Row(v.plain)
	r.Ratio, r.PeerRatio, r.PassRatio, r.LimitRatio, r.KStreamsRatio = math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN()
	if v.Limit != nil {
		r.LimitRatio = *v.Limit
	}
	if v.KStreams != nil {
		r.KStreamsRatio = *v.KStreams
	}
	if v.Ratio != nil {
		r.Ratio = *v.Ratio
	}
	if v.PeerRatio != nil {
		r.PeerRatio = *v.PeerRatio
	}
	if v.PassRatio != nil {
		r.PassRatio = *v.PassRatio
	}
	return nil
}

// WriteJSON writes res to path.
func WriteJSON(path string, res *Results) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// ReadJSON reads results written by WriteJSON.
func ReadJSON(path string) (*Results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var res Results
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &res, nil
}

// WriteCSV writes the summary rows to path, one line per arm and
// configuration.
func WriteCSV(path string, rows []Row) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"broker", "arm", "interval_s", "size", "partitions", "rounds", "records_per_s", "spread_pct", "mb_per_s",
		"ratio_to_copy", "ratio_to_peer", "ratio_to_pass", "ratio_to_limit", "ratio_to_kstreams", "cpu_s_per_million", "tx_per_s", "peak_rss_mb", "latency_rate", "latency_achieved", "p50_ms", "p99_ms", "max_ms", "failed"})
	num := func(v float64) string {
		if math.IsNaN(v) {
			return ""
		}
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	for _, r := range rows {
		lat := func(v float64) string {
			if !r.Latency {
				return ""
			}
			return num(v)
		}
		_ = w.Write([]string{r.Broker, r.Arm, num(r.IntervalS), strconv.Itoa(r.Size), strconv.Itoa(r.Partitions), strconv.Itoa(r.Rounds),
			num(r.RecordsPerSec), num(r.SpreadPct), num(r.MBPerSec), num(r.Ratio), num(r.PeerRatio), num(r.PassRatio), num(r.LimitRatio), num(r.KStreamsRatio), num(r.CPUPerM), num(r.TxPerSec), num(r.PeakRSSMB),
			lat(r.Rate), lat(r.Achieved), lat(r.P50Ms), lat(r.P99Ms), lat(r.MaxMs), r.Failed})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
