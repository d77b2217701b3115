package cli

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"

	"github.com/pipeline-run/pipeline/internal/engine"
)

// Labelled metrics, computed from the pipeline at each scrape.
const (
	metricSourceRecords = "pipeline_source_records_total"
	metricStepRecords   = "pipeline_step_records_total"
	metricSinkRecords   = "pipeline_sink_records_total"
	metricDeadByReason  = "pipeline_dead_letters_by_reason_total"
	metricLag           = "pipeline_consumer_lag_records"
	metricTxnAge        = "pipeline_transaction_open_seconds"
	metricTxnTimeout    = "pipeline_transaction_timeout_seconds"
	metricRebalances    = "pipeline_rebalances_total"
	metricOwned         = "pipeline_partitions_owned"
	metricHeld          = "pipeline_output_partitions_held"
	metricStepKeys      = "pipeline_step_state_keys"
	metricStepBytes     = "pipeline_step_state_memory_bytes"
	metricRestoreLeft   = "pipeline_restore_remaining_offsets"
)

// figuresCollector exposes the pipeline's labelled figures and its lag.
type figuresCollector struct {
	figures func() engine.Figures
	lag     func(context.Context) ([]engine.PartitionLag, error)
	log     *slog.Logger
	lagLog  time.Time // last "lag unknown" line

	source, step, sink, dead, lagDesc  *prometheus.Desc
	stateKeys, stateBytes, restoreLeft *prometheus.Desc
}

func newFiguresCollector(figures func() engine.Figures, lag func(context.Context) ([]engine.PartitionLag, error), log *slog.Logger) *figuresCollector {
	return &figuresCollector{
		figures: figures, lag: lag, log: log,
		source:      prometheus.NewDesc(metricSourceRecords, "Records read from each source's topics, covered by committed checkpoints.", []string{"source"}, nil),
		step:        prometheus.NewDesc(metricStepRecords, "Records handed to each step, in committed checkpoints.", []string{"step"}, nil),
		sink:        prometheus.NewDesc(metricSinkRecords, "Records each sink wrote, in committed checkpoints.", []string{"sink"}, nil),
		dead:        prometheus.NewDesc(metricDeadByReason, "Records sent to the dead-letter topic, by the step (or source) they failed in and why: decode, too_large, event_time or error.", []string{"step", "reason"}, nil),
		stateKeys:   prometheus.NewDesc(metricStepKeys, "Keys in each stateful step's stores in this instance, as of the last checkpoint (-1: the backend does not count them).", []string{"step"}, nil),
		stateBytes:  prometheus.NewDesc(metricStepBytes, "Memory each stateful step's stores hold in this instance, as of the last checkpoint.", []string{"step"}, nil),
		restoreLeft: prometheus.NewDesc(metricRestoreLeft, "Changelog offsets a restore under way has still to read, per step and task; the series goes when the restore is done.", []string{"step", "task"}, nil),
		lagDesc:     prometheus.NewDesc(metricLag, "Records of each partition this instance owns that the group has not committed: the partition's last stable offset minus the committed offset.", []string{"topic", "partition"}, nil),
	}
}

func (c *figuresCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.source, c.step, c.sink, c.dead, c.lagDesc, c.stateKeys, c.stateBytes, c.restoreLeft} {
		ch <- d
	}
}

func (c *figuresCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.figures()
	for name, n := range f.Sources {
		ch <- prometheus.MustNewConstMetric(c.source, prometheus.CounterValue, float64(n), name)
	}
	for name, n := range f.Steps {
		ch <- prometheus.MustNewConstMetric(c.step, prometheus.CounterValue, float64(n), name)
	}
	for name, n := range f.Sinks {
		ch <- prometheus.MustNewConstMetric(c.sink, prometheus.CounterValue, float64(n), name)
	}
	for k, n := range f.DeadLetters {
		ch <- prometheus.MustNewConstMetric(c.dead, prometheus.CounterValue, float64(n), k.Step, k.Reason)
	}
	for step, s := range f.State {
		ch <- prometheus.MustNewConstMetric(c.stateKeys, prometheus.GaugeValue, float64(s.Keys), step)
		ch <- prometheus.MustNewConstMetric(c.stateBytes, prometheus.GaugeValue, float64(s.Bytes), step)
	}
	for k, p := range f.Restoring {
		ch <- prometheus.MustNewConstMetric(c.restoreLeft, prometheus.GaugeValue, float64(max(0, p.Total-p.Done)), k.Step, strconv.Itoa(int(k.Task)))
	}
	if c.lag == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lags, err := c.lag(ctx)
	if err != nil {
		// A scrape without lag, and a line at most once a minute.
		if time.Since(c.lagLog) > time.Minute {
			c.lagLog = time.Now()
			c.log.Warn("consumer lag unknown for this scrape", "err", err)
		}
		return
	}
	for _, l := range lags {
		ch <- prometheus.MustNewConstMetric(c.lagDesc, prometheus.GaugeValue, float64(l.Lag), l.Topic, strconv.Itoa(int(l.Partition)))
	}
}

// replacingRegisterer registers a collector in place of an equal one
// already there: the Kafka client's metrics (kprom) register again when the
// pipeline rebuilds its client.
type replacingRegisterer struct{ reg *prometheus.Registry }

func (r replacingRegisterer) Register(c prometheus.Collector) error {
	err := r.reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		r.reg.Unregister(are.ExistingCollector)
		err = r.reg.Register(c)
	}
	return err
}

func (r replacingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err) // a collector no registry takes: a programming error
		}
	}
}

func (r replacingRegisterer) Unregister(c prometheus.Collector) bool { return r.reg.Unregister(c) }

// clientHooks returns the hooks that export the Kafka client's own metrics
// (connections, requests, bytes, throttling, buffered records) as
// pipeline_kafka_*.
func (m *metrics) clientHooks() kgo.Opt {
	k := kprom.NewMetrics("pipeline", kprom.Subsystem("kafka"), kprom.Registerer(replacingRegisterer{m.reg}), kprom.Gatherer(m.reg))
	return kgo.WithHooks(k)
}

// watch adds the figures that need the running pipeline.
func (m *metrics) watch(p *engine.Pipeline, txnTimeout time.Duration, log *slog.Logger) {
	m.reg.MustRegister(
		newFiguresCollector(p.Figures, p.Lag, log),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: metricTxnAge, Help: "How long the open checkpoint's transaction has been open; the broker aborts it at pipeline_transaction_timeout_seconds."},
			func() float64 { return p.Stats().TransactionAge.Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: metricTxnTimeout, Help: "transactions.timeout: the age at which the broker aborts an open transaction."},
			func() float64 { return txnTimeout.Seconds() }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: metricRebalances, Help: "Partition assignments this instance received from the group."},
			func() float64 { return float64(p.Stats().Rebalances) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: metricOwned, Help: "Partitions (of sources and repartition topics) this instance owns."},
			func() float64 { return float64(p.Stats().PartitionsOwned) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: metricHeld, Help: "Output partitions whose last stable offset a transaction open longer than transactions.timeout held back at the last look (each minute)."},
			func() float64 { return float64(p.Stats().HeldPartitions) }),
	)
}
