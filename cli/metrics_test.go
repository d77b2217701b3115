package cli

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/internal/engine"
	"github.com/pipeline-run/pipeline/internal/testkit"
)

// TestMetricsSayWhatHappened runs a keyed pipeline with poison records and
// every third checkpoint aborted on purpose, and checks the metrics against
// what happened: the aborts, the records per source, step and sink, the
// dead letters by reason, the lag falling to 0, the partitions owned, and
// the Kafka client's own metrics.
func TestMetricsSayWhatHappened(t *testing.T) {
	k := testkit.NewKafka(t)
	for _, topic := range []string{"in", "out", "dlq"} {
		k.Topic(topic, 2)
	}
	const n = 3000
	k.Input("in", n, 30, map[int]bool{7: true, 1500: true})
	body := `name: m
brokers: [` + k.Addr + `]
instance_id: i1
checkpoint: {interval: 100ms, timeout: 10s, max_records: 400}
transactions: {timeout: 20s}
sources: {in: {topics: [in]}}
steps:
  - {name: by_k, key_by: value.k}
  - {name: count, aggregate: {fields: {n: count}}}
sinks: {out: {topic: out}}
dead_letter: {topic: dlq}
`
	cfg, err := config.Parse([]byte(body), "m.yaml", func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	var p *engine.Pipeline
	m := newMetrics(func() engine.Stats { return p.Stats() })
	every := testkit.NewEveryNth(3)
	p, err = engine.New(cfg, nil, engine.WithLogger(testkit.Logger(t)), engine.WithClientOpts(m.clientHooks()),
		engine.WithCheckpointObserver(m.observe),
		engine.WithBeforeCommit(func(cp engine.Checkpoint) error {
			if cp.Records > 0 && every.Hit() {
				return errors.New("injected")
			}
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	m.watch(p, cfg.Transactions.Timeout, testkit.Logger(t))

	stop := testkit.Start(t, p)
	// Lag falls to 0 once everything is committed: wait for it on the
	// metric itself.
	deadline := time.Now().Add(60 * time.Second)
	var got map[string]float64
	for {
		got = gather(t, m)
		if got[`pipeline_consumer_lag_records{partition="0",topic="in"}`] == 0 && got[`pipeline_consumer_lag_records{partition="1",topic="in"}`] == 0 &&
			got[`pipeline_source_records_total{source="in"}`] == n && got[`pipeline_sink_records_total{sink="out"}`] == n-2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run did not catch up: %v", got)
		}
		time.Sleep(100 * time.Millisecond)
	}
	checkMetricsDocumented(t, m)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	st := p.Stats()
	after := gather(t, m)
	got[`pipeline_checkpoints_total{outcome="aborted"}`] = after[`pipeline_checkpoints_total{outcome="aborted"}`]
	if every.Fired() == 0 {
		t.Fatal("no abort was injected")
	}
	want := map[string]float64{
		`pipeline_checkpoints_total{outcome="aborted"}`: float64(st.Aborted),
		`pipeline_source_records_total{source="in"}`:    n,
		`pipeline_step_records_total{step="by_k"}`:      n, // the poison records fail in it
		`pipeline_step_records_total{step="count"}`:     n - 2,
		`pipeline_sink_records_total{sink="out"}`:       n - 2,
		// Sent once per attempt, like pipeline_dead_letters_total: a
		// poison record whose checkpoint aborted is sent again. The two
		// committed ones are in records_out.
		`pipeline_dead_letters_by_reason_total{reason="decode",step="by_k"}`: float64(st.DeadLetters),
		`pipeline_records_out_total`:                                         n, // n-2 outputs and 2 dead letters
		`pipeline_partitions_owned`:                                          4, // in and the repartition topic, 2 partitions each
		`pipeline_transaction_timeout_seconds`:                               20,
		`pipeline_output_partitions_held`:                                    0,
		`pipeline_consumer_lag_records{partition="0",topic="in"}`:            0,
		`pipeline_consumer_lag_records{partition="1",topic="in"}`:            0,
	}
	if st.DeadLetters < 2 {
		t.Fatalf("%d dead letters sent for 2 poison records", st.DeadLetters)
	}
	if st.Aborted < every.Fired() {
		t.Fatalf("%d aborts injected, %d counted", every.Fired(), st.Aborted)
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, w)
		}
	}
	if got[`pipeline_step_state_keys{step="count"}`] < 30 || got[`pipeline_step_state_memory_bytes{step="count"}`] <= 0 {
		t.Errorf("state of step count: %v keys, %v bytes; it counts 30 keys", got[`pipeline_step_state_keys{step="count"}`], got[`pipeline_step_state_memory_bytes{step="count"}`])
	}
	if got["pipeline_rebalances_total"] < 1 || got[`pipeline_checkpoints_total{outcome="committed"}`] < 1 {
		t.Errorf("rebalances %v, committed %v", got["pipeline_rebalances_total"], got[`pipeline_checkpoints_total{outcome="committed"}`])
	}
	kafka := 0
	for name := range got {
		if strings.HasPrefix(name, "pipeline_kafka_") {
			kafka++
		}
	}
	if kafka == 0 {
		t.Error("no pipeline_kafka_* client metric")
	}
	t.Logf("%d aborts injected; %d series, %d of the Kafka client", every.Fired(), len(got), kafka)
	var seen []string
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if strings.HasPrefix(k, "pipeline_") && !strings.HasPrefix(k, "pipeline_kafka_") {
			seen = append(seen, fmt.Sprintf("%s %v", k, got[k]))
		}
	}
	t.Logf("caught up (aborted: after the stop; histograms: their counts):\n%s", strings.Join(seen, "\n"))
}

// checkMetricsDocumented checks the metrics table of docs/operations.md
// against what m exposes: every pipeline_* family documented, every
// documented one exposed (a restore's series only while one is under
// way).
func checkMetricsDocumented(t *testing.T, m *metrics) {
	t.Helper()
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	name := regexp.MustCompile("`(pipeline_[a-z_]+)[{`*]")
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(line, "| `pipeline_") {
			continue
		}
		cell := strings.Split(line, "|")[1]
		for _, m := range name.FindAllStringSubmatch(cell, -1) {
			documented[m[1]] = true
		}
	}
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	exposed := map[string]bool{}
	for _, f := range fams {
		n := f.GetName()
		if !strings.HasPrefix(n, "pipeline_") {
			continue
		}
		if strings.HasPrefix(n, "pipeline_kafka_") {
			n = "pipeline_kafka_"
		}
		exposed[n] = true
		if !documented[n] {
			t.Errorf("%s is exposed but not in the metrics table of docs/operations.md", n)
		}
	}
	for n := range documented {
		if !exposed[n] && n != "pipeline_restore_remaining_offsets" {
			t.Errorf("docs/operations.md documents %s, which is not exposed", n)
		}
	}
	if len(documented) < 20 {
		t.Fatalf("found only %d metrics in docs/operations.md: the table's form changed", len(documented))
	}
}

// gather returns every series of m as name{labels} → value (histograms by
// their count).
func gather(t *testing.T, m *metrics) map[string]float64 {
	t.Helper()
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, mt := range f.GetMetric() {
			out[seriesName(f.GetName(), mt)] = value(mt)
		}
	}
	return out
}

func seriesName(name string, m *dto.Metric) string {
	if len(m.GetLabel()) == 0 {
		return name
	}
	var ls []string
	for _, l := range m.GetLabel() {
		ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	return name + "{" + strings.Join(ls, ",") + "}"
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

// TestRestoreAndStateSeries: a restore under way is a series of the offsets
// it has left, per step and task; state is per step.
func TestRestoreAndStateSeries(t *testing.T) {
	m := newMetrics(func() engine.Stats { return engine.Stats{} })
	m.reg.MustRegister(newFiguresCollector(func() engine.Figures {
		return engine.Figures{
			State:     map[string]engine.StepState{"per_key": {Keys: 12, Bytes: 3400}},
			Restoring: map[engine.StepTask]engine.RestoreProgress{{Step: "per_key", Task: 3}: {Done: 250, Total: 1000}},
		}
	}, nil, testkit.Logger(t)))
	got := gather(t, m)
	for k, w := range map[string]float64{
		`pipeline_step_state_keys{step="per_key"}`:                    12,
		`pipeline_step_state_memory_bytes{step="per_key"}`:            3400,
		`pipeline_restore_remaining_offsets{step="per_key",task="3"}`: 750,
	} {
		if got[k] != w {
			t.Errorf("%s = %v, want %v", k, got[k], w)
		}
	}
}

// TestEveryCommittedCheckpointHasADuration: a checkpoint that read nothing
// (its process was paused while it waited for records) still shows how long
// it lasted; only the records and bytes histograms leave it out.
func TestEveryCommittedCheckpointHasADuration(t *testing.T) {
	m := newMetrics(func() engine.Stats { return engine.Stats{} })
	m.observe(engine.Checkpoint{ID: 1, Committed: true, Records: 10, Bytes: 900, Duration: 300 * time.Millisecond, Commit: 5 * time.Millisecond})
	m.observe(engine.Checkpoint{ID: 2, Committed: true, Duration: 5600 * time.Millisecond, Commit: 2 * time.Millisecond})
	m.observe(engine.Checkpoint{ID: 3, Duration: 7 * time.Second})
	got := gather(t, m)
	for k, w := range map[string]float64{
		`pipeline_checkpoints_total{outcome="committed"}`: 2,
		`pipeline_checkpoints_total{outcome="aborted"}`:   1,
		`pipeline_checkpoint_duration_seconds`:            2,
		`pipeline_checkpoint_commit_duration_seconds`:     2,
		`pipeline_checkpoint_records`:                     1,
		`pipeline_checkpoint_bytes`:                       1,
	} {
		if got[k] != w {
			t.Errorf("%s = %v, want %v", k, got[k], w)
		}
	}
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != metricCheckpointDuration {
			continue
		}
		if sum := f.GetMetric()[0].GetHistogram().GetSampleSum(); sum < 5.89 || sum > 5.91 {
			t.Errorf("%s sums %v s, want 5.9 (the paused checkpoint's 5.6 s counted)", metricCheckpointDuration, sum)
		}
	}
}
