package config

import (
	"strings"
	"time"
)

// envPrefix is the prefix of the environment variables that override
// scalar settings: checkpoint.interval is PIPELINE_CHECKPOINT_INTERVAL.
const envPrefix = "PIPELINE"

// clusterKeys are the keys that would point a source, sink or the
// dead-letter topic at a cluster of its own. They are recognised (rather
// than reported as unknown) so that the error can say why that cannot be.
var clusterKeys = []string{"brokers", "bootstrap", "cluster"}

// setting is one scalar setting: read through viper, so it can come from
// the file, from the environment or from its default.
type setting struct {
	key string // dotted YAML path, lower case
	ptr any    // where it goes: *string, *bool, *int, *int16, *int32, *int64, *time.Duration or *Brokers
	def any    // default, of ptr's element type; nil for none (or a default computed later)
}

// settings lists every scalar setting of c. The sources, steps and sinks
// maps and topics.configs are not settings: they are read from the YAML
// tree and cannot be overridden from the environment.
func (c *Config) settings() []setting {
	const mib = 1 << 20
	return []setting{
		{"name", &c.Name, nil},
		{"brokers", &c.Brokers, nil},
		{"embedded.port", &c.Embedded.Port, 0},
		{"instance_id", &c.InstanceID, nil}, // default: os.Hostname()
		{"group", &c.Group, nil},            // default: name

		{"tls.enabled", &c.TLS.Enabled, false},
		{"tls.ca_file", &c.TLS.CAFile, nil},
		{"tls.cert_file", &c.TLS.CertFile, nil},
		{"tls.key_file", &c.TLS.KeyFile, nil},
		{"tls.server_name", &c.TLS.ServerName, nil},
		{"tls.insecure_skip_verify", &c.TLS.InsecureSkipVerify, false},

		{"sasl.mechanism", &c.SASL.Mechanism, nil},
		{"sasl.username", &c.SASL.Username, nil},
		{"sasl.password", &c.SASL.Password, nil},

		{"consumer.start_from", &c.Consumer.StartFrom, "earliest"},
		{"consumer.session_timeout", &c.Consumer.SessionTimeout, 10 * time.Second},
		{"consumer.rebalance_timeout", &c.Consumer.RebalanceTimeout, 60 * time.Second},
		{"consumer.fetch_max_bytes", &c.Consumer.FetchMaxBytes, int32(50 * mib)},
		{"consumer.fetch_max_partition_bytes", &c.Consumer.FetchMaxPartitionBytes, int32(1 * mib)},
		{"consumer.max_poll_records", &c.Consumer.MaxPollRecords, 10000},

		{"producer.compression", &c.Producer.Compression, "lz4"},
		{"producer.linger", &c.Producer.Linger, 50 * time.Millisecond},
		{"producer.batch_max_bytes", &c.Producer.BatchMaxBytes, int32(1 * mib)},
		{"producer.max_buffered_records", &c.Producer.MaxBufferedRecords, 100000},
		{"producer.max_buffered_bytes", &c.Producer.MaxBufferedBytes, int64(256 * mib)},

		{"checkpoint.interval", &c.Checkpoint.Interval, 1 * time.Second},
		{"checkpoint.timeout", &c.Checkpoint.Timeout, 30 * time.Second},
		{"checkpoint.max_records", &c.Checkpoint.MaxRecords, 1000000},
		{"checkpoint.failure_timeout", &c.Checkpoint.FailureTimeout, 5 * time.Minute},

		{"transactions.id_prefix", &c.Transactions.IDPrefix, nil}, // default: name
		{"transactions.timeout", &c.Transactions.Timeout, 60 * time.Second},

		{"topics.partitions", &c.Topics.Partitions, int32(0)},
		{"topics.replication_factor", &c.Topics.ReplicationFactor, int16(-1)},

		{"dead_letter.topic", &c.DeadLetter.Topic, nil},

		{"log.level", &c.Log.Level, "info"},
		{"log.format", &c.Log.Format, "text"},

		{"metrics.listen", &c.Metrics.Listen, nil},

		{"state.backend", &c.State.Backend, "memory"},
		{"state.dir", &c.State.Dir, nil},

		{"audit.enabled", &c.Audit.Enabled, true},
		{"audit.topic", &c.Audit.Topic, nil}, // default: name + "-progress"
		{"audit.source_positions", &c.Audit.SourcePositions, false},

		{"demo.topic", &c.Demo.Topic, nil},
		{"demo.rate", &c.Demo.Rate, 1000},
		{"demo.records", &c.Demo.Records, 10000},
		{"demo.sensors", &c.Demo.Sensors, 20},
		{"demo.partitions", &c.Demo.Partitions, int32(3)},
		{"demo.seed", &c.Demo.Seed, int64(0)},
		{"demo.kind", &c.Demo.Kind, nil},
		{"demo.payments_topic", &c.Demo.PaymentsTopic, nil},
		{"demo.customers_topic", &c.Demo.CustomersTopic, nil},
		{"demo.limits_topic", &c.Demo.LimitsTopic, nil},
		{"demo.time_step", &c.Demo.TimeStep, time.Duration(0)},
		{"demo.out_of_order", &c.Demo.OutOfOrder, 0},
		{"demo.disorder", &c.Demo.Disorder, time.Duration(0)},
		{"demo.late", &c.Demo.Late, 0},
	}
}

// envVar returns the environment variable that overrides key, the name
// viper derives with SetEnvPrefix(envPrefix) and a "." -> "_" replacer.
func envVar(key string) string {
	return envPrefix + "_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// knownKeys returns the keys allowed in the mapping at section ("" for the
// top level), in the order they are listed.
func knownKeys(section string) []string {
	var keys []string
	add := func(k string) {
		for _, have := range keys {
			if have == k {
				return
			}
		}
		keys = append(keys, k)
	}
	prefix := ""
	if section != "" {
		prefix = section + "."
	}
	for _, s := range (&Config{}).settings() {
		if rest, ok := strings.CutPrefix(s.key, prefix); ok {
			first, _, _ := strings.Cut(rest, ".")
			add(first)
		}
	}
	switch section {
	case "":
		for _, k := range []string{"sources", "steps", "sinks", "topics"} {
			add(k)
		}
	case "topics":
		add("configs")
		add("create")
	case "dead_letter":
		for _, k := range clusterKeys {
			add(k)
		}
	}
	return keys
}

// isSection reports whether the top-level key holds a mapping of settings.
func isSection(key string) bool {
	for _, s := range (&Config{}).settings() {
		if strings.HasPrefix(s.key, key+".") {
			return true
		}
	}
	return false
}
