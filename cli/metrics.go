package cli

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pipeline-run/pipeline/internal/engine"
)

// Metric names, with their units.
const (
	metricCheckpoints        = "pipeline_checkpoints_total"
	metricCheckpointDuration = "pipeline_checkpoint_duration_seconds"
	metricCommitDuration     = "pipeline_checkpoint_commit_duration_seconds"
	metricRecordsIn          = "pipeline_records_in_total"
	metricRecordsOut         = "pipeline_records_out_total"
	metricRepartitioned      = "pipeline_records_repartitioned_total"
	metricDeadLetters        = "pipeline_dead_letters_total"
	metricLateRecords        = "pipeline_late_records_total"
	metricRebuilds           = "pipeline_client_rebuilds_total"
	metricRestored           = "pipeline_state_restored_records_total"
	metricStateKeys          = "pipeline_state_keys"
	metricStateBytes         = "pipeline_state_memory_bytes"
	metricStateDisk          = "pipeline_state_disk_bytes"
	metricTasksRestoring     = "pipeline_tasks_restoring"
	metricBuildInfo          = "pipeline_build_info"
	metricCheckpointRecords  = "pipeline_checkpoint_records"
	metricCheckpointBytes    = "pipeline_checkpoint_bytes"
)

// metrics exposes a pipeline's figures to Prometheus. It lives at the edge:
// the runtime only reports checkpoints and keeps counters.
type metrics struct {
	health      func(time.Time) engine.Health // for /healthz and /readyz; nil: not served
	reg         *prometheus.Registry
	checkpoints *prometheus.CounterVec
	duration    prometheus.Histogram
	commit      prometheus.Histogram
	records     prometheus.Histogram
	bytes       prometheus.Histogram
}

func newMetrics(p func() engine.Stats) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		checkpoints: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricCheckpoints, Help: "Checkpoints finished, by outcome (committed or aborted).",
		}, []string{"outcome"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: metricCheckpointDuration, Help: "Time from a checkpoint's first poll to its commit.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
		}),
		commit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: metricCommitDuration, Help: "Time of a checkpoint's barrier, flush and commit.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
	}
	counter := func(name, help string, f func(engine.Stats) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f(p())) })
	}
	b := buildInfo()
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: metricBuildInfo, Help: "Always 1; the labels say which build runs: version, commit, Go release."},
		[]string{"version", "commit", "go_version"})
	info.WithLabelValues(b.Version, b.Commit, b.Go).Set(1)
	// Both outcomes from the start: an alert on the aborted rate needs the
	// series before the first abort.
	m.checkpoints.WithLabelValues("committed")
	m.checkpoints.WithLabelValues("aborted")
	m.records = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: metricCheckpointRecords, Help: "Records a checkpoint read (checkpoints that read records).",
		Buckets: prometheus.ExponentialBuckets(10, 4, 10),
	})
	m.bytes = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: metricCheckpointBytes, Help: "Bytes a checkpoint wrote: outputs, changelogs and repartition records (checkpoints that read records).",
		Buckets: prometheus.ExponentialBuckets(1024, 4, 12),
	})
	m.reg.MustRegister(info, m.checkpoints, m.duration, m.commit, m.records, m.bytes,
		counter(metricRecordsIn, "Source records covered by committed checkpoints, not those read back from repartition topics.", func(s engine.Stats) int64 { return s.RecordsIn }),
		counter(metricRecordsOut, "Records committed checkpoints wrote to sinks and the dead-letter topic.", func(s engine.Stats) int64 { return s.RecordsOut }),
		counter(metricRepartitioned, "Records committed checkpoints read back from key_by repartition topics.", func(s engine.Stats) int64 { return s.Repartitioned }),
		counter(metricDeadLetters, "Input records sent to the dead-letter topic.", func(s engine.Stats) int64 { return s.DeadLetters }),
		counter(metricLateRecords, "Records that came after their window closed (past allowed_lateness) and were dropped by steps with no late output.", func(s engine.Stats) int64 { return s.LateRecords }),
		counter(metricRebuilds, "Times the transactional client was rebuilt after an unknown outcome or a fence.", func(s engine.Stats) int64 { return s.Rebuilds }),
		counter(metricRestored, "Changelog records replayed into state stores.", func(s engine.Stats) int64 { return s.Restored }),
		gauge(p, metricStateKeys, "Keys in this instance's state stores as of the last checkpoint (-1: the backend does not count them).", func(s engine.Stats) int64 { return s.StateKeys }),
		gauge(p, metricStateBytes, "Memory held by this instance's state stores as of the last checkpoint.", func(s engine.Stats) int64 { return s.StateBytes }),
		gauge(p, metricStateDisk, "Bytes of state on disk (pebble) as of the last checkpoint.", func(s engine.Stats) int64 { return s.StateDisk }),
		gauge(p, metricTasksRestoring, "Tasks restoring their state apart from the checkpoints; their records wait until they are done.", func(s engine.Stats) int64 { return s.Restoring }),
		prometheus.NewGoCollector(),
		prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}),
	)
	return m
}

func (m *metrics) observe(cp engine.Checkpoint) {
	if !cp.Committed {
		m.checkpoints.WithLabelValues("aborted").Inc()
		return
	}
	m.checkpoints.WithLabelValues("committed").Inc()
	// Every committed checkpoint's duration: an idle one lasts its
	// interval, and one that read nothing because the process or the
	// broker stalled must still show how long it took.
	m.duration.Observe(cp.Duration.Seconds())
	m.commit.Observe(cp.Commit.Seconds())
	if cp.Records > 0 {
		m.records.Observe(float64(cp.Records))
		m.bytes.Observe(float64(cp.Bytes))
	}
}

// serve serves /metrics on ln until ctx is done.
func (m *metrics) serve(ctx context.Context, ln net.Listener, log *slog.Logger) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	if m.health != nil {
		mux.HandleFunc("/healthz", m.probe(func(h engine.Health) bool { return h.Live }))
		mux.HandleFunc("/readyz", m.probe(func(h engine.Health) bool { return h.Ready }))
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info("serving metrics", "addr", ln.Addr().String())
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// probe answers a Kubernetes probe: 200 "ok" when ok says the health is
// good, else 503 with the reason.
func (m *metrics) probe(ok func(engine.Health) bool) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		h := m.health(time.Now())
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if ok(h) {
			_, _ = io.WriteString(w, "ok\n")
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, h.Reason+"\n")
	}
}

func gauge(p func() engine.Stats, name, help string, f func(engine.Stats) int64) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return float64(f(p())) })
}
