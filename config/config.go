// Package config turns a pipeline's YAML file, plus PIPELINE_* environment
// overrides, into a typed and validated Config.
//
// The file is read twice over: yaml.v3 parses it into a node tree, which
// gives every setting its line and lets unknown keys be reported, and viper
// layers the scalar settings (file, then environment, then defaults). The
// sources, steps and sinks maps are read from the node tree directly: they
// are not overridable from the environment, and viper would lower-case
// their keys (stream names, header names, operator specs).
//
// viper is used only inside this package.
package config

import "time"

// Config is one pipeline's configuration, with defaults applied. Build it
// with Load or Parse; a Config built by hand can be checked with Validate.
type Config struct {
	Name         string  // required; [A-Za-z0-9._-]+
	Brokers      Brokers // required
	Embedded     Embedded
	InstanceID   string // `instance_id`; default os.Hostname(); same charset as Name
	Group        string // consumer group id; default Name
	TLS          TLS
	SASL         SASL
	Consumer     Consumer
	Producer     Producer
	Checkpoint   Checkpoint
	Transactions Transactions
	Topics       Topics     // defaults for the topics the pipeline creates
	Sources      []Source   // from the YAML map `sources:`, sorted by name
	Steps        []Step     // from the YAML list `steps:`, in order
	Sinks        []Sink     // from the YAML map `sinks:`, sorted by name
	DeadLetter   DeadLetter // `dead_letter`
	Log          Log
	Metrics      Metrics
	Audit        Audit
	State        State
	Demo         Demo // the built-in demo feeder; the zero value when absent

	lines    map[string]int    // YAML path -> line, from the parsed file
	env      map[string]string // YAML path -> the environment variable that set it
	clusters []clusterRef      // brokers named again under a source, sink or dead_letter
	reported map[string]bool   // paths Parse found a problem at, when it returned Errors
}

// Brokers is where Kafka is: a list of host:port addresses, or the embedded
// broker. Exactly one of the two is set in a valid Config.
type Brokers struct {
	Embedded bool
	Addrs    []string
}

// Embedded configures the embedded broker `pipeline run` starts with
// brokers: embedded; unused otherwise.
type Embedded struct {
	// Port is where it listens on 127.0.0.1, for the other commands
	// (produce, consume, topics, offsets) to reach it while the run
	// lasts; 0 picks a free port, which the run logs.
	Port int
}

// TLS configures TLS to the brokers. Setting any file implies Enabled.
// Relative file names are relative to the working directory.
type TLS struct {
	Enabled            bool
	CAFile             string // `ca_file`; default: the system roots
	CertFile           string // `cert_file`; client certificate, with KeyFile
	KeyFile            string // `key_file`
	ServerName         string // `server_name`; default: the broker's host
	InsecureSkipVerify bool   // `insecure_skip_verify`
}

// SASL configures SASL authentication. An empty Mechanism turns it off.
type SASL struct {
	Mechanism string // PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (normalised to upper case)
	Username  string
	Password  string
}

// Consumer tunes the source consumer. Isolation is always read_committed.
type Consumer struct {
	StartFrom        string        // `start_from`: earliest (default) or latest, when the group has no offsets
	SessionTimeout   time.Duration // `session_timeout`; default 10s; >= 6s
	RebalanceTimeout time.Duration // `rebalance_timeout`; default 60s
	FetchMaxBytes    int32         // `fetch_max_bytes`; default 50 MiB
	// FetchMaxPartitionBytes is `fetch_max_partition_bytes`, the most a
	// fetch takes of one partition (as sent); default 1 MiB.
	FetchMaxPartitionBytes int32
	MaxPollRecords         int // `max_poll_records`; default 10000
}

// Producer tunes the transactional producer.
type Producer struct {
	Compression        string        // none, gzip, snappy, lz4 (default) or zstd
	Linger             time.Duration // default 50ms: outputs show at the commit, whose flush stops lingering
	BatchMaxBytes      int32         // `batch_max_bytes`; default 1 MiB
	MaxBufferedRecords int           // `max_buffered_records`; default 100000
	MaxBufferedBytes   int64         // `max_buffered_bytes`; default 256 MiB
}

// Checkpoint says how often the pipeline commits.
type Checkpoint struct {
	Interval   time.Duration // default 1s
	Timeout    time.Duration // default 30s: how long barrier, prepare and commit may take
	MaxRecords int           // `max_records`; default 1000000: a checkpoint starts early after this many records
	// FailureTimeout (`failure_timeout`; default 5m) is how long
	// checkpoints may keep failing, none committing, before the pipeline
	// gives up and exits.
	FailureTimeout time.Duration
}

// Transactions configures the transactional producer's identity and
// time-out. Timeout must exceed Checkpoint.Interval + Checkpoint.Timeout,
// or the broker could abort a transaction the pipeline still means to
// commit.
type Transactions struct {
	IDPrefix string        // `id_prefix`; default Name
	Timeout  time.Duration // default 60s
}

// ID returns the transactional id of the instance instanceID.
func (t Transactions) ID(instanceID string) string { return t.IDPrefix + "-" + instanceID }

// Topics holds the defaults for the topics the pipeline creates (sinks,
// the dead-letter topic, changelogs and repartition topics), and the
// topics to create on the embedded broker.
type Topics struct {
	Partitions        int32             // default 0: as many as the largest source topic
	ReplicationFactor int16             // `replication_factor`; default -1: the broker's default
	Configs           map[string]string // extra topic configs, e.g. compression.type
	// Create lists topics `pipeline run` creates on the embedded broker
	// at start-up, before its checks: that broker starts empty, so the
	// sources' topics must come from somewhere. Unused with other brokers.
	Create []TopicSpec
}

// TopicSpec is a topic of topics.create.
type TopicSpec struct {
	Name       string
	Partitions int32             // 0: topics.partitions, or 1
	Configs    map[string]string // topic configs, e.g. cleanup.policy
	Path       string            // "topics.create[<index>]", for messages
}

// PartitionsOr returns the partitions to create t with, given
// topics.partitions.
func (t TopicSpec) PartitionsOr(defaults int32) int32 {
	switch {
	case t.Partitions > 0:
		return t.Partitions
	case defaults > 0:
		return defaults
	}
	return 1
}

// Source reads one or more topics into one stream, named Name.
type Source struct {
	Name      string
	Topics    []string
	Format    string // value format: json (default), string or bytes
	KeyFormat string // `key_format`: string (default), json or bytes
	EventTime *EventTime
	Path      string // "sources.<name>", for messages
}

// EventTime says where a source's records get their event time and how far
// out of order they may come (`sources.<name>.event_time`). A source without
// it uses the Kafka record timestamp with no disorder allowed.
type EventTime struct {
	// From is an expression giving the event time (Unix milliseconds or an
	// RFC 3339 string); "" or "timestamp" for the Kafka record timestamp.
	From string
	// MaxOutOfOrderness is how far behind the latest event time seen a
	// record may be and still count as on time: the partition's watermark
	// is the latest event time seen minus this.
	MaxOutOfOrderness time.Duration
	// IdleTimeout is how long a partition may go without records before
	// it stops holding the watermark back; 0: never.
	IdleTimeout time.Duration
	Path        string // "sources.<name>.event_time"
}

// Step is one operator of the pipeline, as configured. Config knows the
// shape of a step, not its kinds: the graph builder checks Kind and Spec.
type Step struct {
	Name string   // default "<kind><index+1>", e.g. "map2"
	From []string // the streams it reads; defaulted to the step above (or the only source)
	Kind string   // the operator key, e.g. "filter"
	Spec any      // the value under Kind as plain Go values: string, int, float64, bool, nil, []any, map[string]any
	Path string   // "steps[<index>]", for messages
}

// Sink writes one stream to one topic.
type Sink struct {
	Name       string
	From       string            // default: the last step (or the only source when there are no steps)
	Topic      string            // required
	Key        string            // optional expression for the record key
	Value      string            // optional expression for the record value
	Headers    map[string]string // optional header name -> expression
	Format     string            // json (default), string or bytes
	KeyFormat  string            // `key_format`: string (default), json or bytes
	Partitions int32             // 0: Topics.Partitions
	Path       string            // "sinks.<name>", for messages
}

// DeadLetter names the topic that receives records failing to decode or
// process. An empty Topic means there is none: such a record stops the
// pipeline.
type DeadLetter struct {
	Topic string
}

// Log configures the service's own log.
type Log struct {
	Level  string // debug, info (default), warn or error
	Format string // text (default) or json
}

// State configures where stateful operators keep their state between
// checkpoints. The durable truth is always the changelog topics; a backend
// is a cache of them.
type State struct {
	Backend string // memory (default) or pebble
	Dir     string // pebble's directory; required with pebble
}

// Audit configures the progress records `pipeline audit` checks: every
// checkpoint writes one, inside its own transaction, to Topic.
type Audit struct {
	Enabled bool   // default true
	Topic   string // default "<name>-progress"
	// SourcePositions stamps every sink record with the position of the
	// input record it derives from and its ordinal among that input's
	// outputs (headers pipeline.source and pipeline.output), so that
	// `pipeline audit` checks each input's outputs one by one. Default
	// false; it needs Enabled and steps that write each record for one
	// input (no aggregate with emit: checkpoint).
	SourcePositions bool
}

// Metrics configures the Prometheus endpoint.
type Metrics struct {
	Listen string // host:port serving /metrics; empty: none
}

// Demo configures the built-in feeder that writes fake sensor readings to a
// source topic. It is the zero value when the file has no `demo:` section.
type Demo struct {
	Topic      string // the topic the feeder writes; one of the source topics
	Rate       int    // records per second; default 1000
	Records    int    // records in all; default 10000. The run ends once they are processed
	Sensors    int    // distinct sensor ids; default 20
	Partitions int32  // partitions of the demo topic; default 3
	Seed       int64  // random seed
	// Kind is what the feeder writes: "readings" (the default: sensor
	// readings keyed by sensor), "clicks" (page views keyed by user) or
	// "orders" (orders keyed by order id, and their payments, keyed
	// alike, to PaymentsTopic).
	Kind string
	// PaymentsTopic is where the orders feeder writes payments, and
	// CustomersTopic the customers table (rows keyed by customer id,
	// stamped with their event time; tombstones delete). Either or both
	// may be empty.
	PaymentsTopic, CustomersTopic string
	// LimitsTopic is where the readings feeder writes each sensor's
	// temperature limit, {sensor, max} keyed by sensor, before the first
	// reading and changed now and then while it writes them.
	LimitsTopic string
	// TimeStep is how far the event time (the records' ts) moves per
	// record; 0: the wall clock. With it, a run of a few seconds spans
	// hours of event time, for windows.
	TimeStep time.Duration
	// OutOfOrder is the percentage of records stamped up to Disorder
	// behind the latest, and Late the percentage stamped ten minutes
	// behind: late data for windows.
	OutOfOrder int
	Disorder   time.Duration
	Late       int
}

// Line returns the line of the YAML file that holds the setting at path, a
// dotted path such as "sinks.alerts.topic" or "steps[2].map.value", or 0
// when it is not in the file.
func (c *Config) Line(path string) int {
	return c.lines[path]
}
