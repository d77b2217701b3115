package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

// full sets every setting to something other than its default.
const full = `name: sensor-alerts
brokers: [kafka-0:9092, kafka-1:9092]
instance_id: replica-0
group: alerts-group
tls:
  ca_file: testdata/ca.pem
  cert_file: testdata/client.pem
  key_file: testdata/client.key
  server_name: kafka.internal
sasl: {mechanism: scram-sha-256, username: svc, password: pw}
consumer: {start_from: latest, session_timeout: 10s, rebalance_timeout: 20s, fetch_max_bytes: 1048576, fetch_max_partition_bytes: 65536, max_poll_records: 500}
producer: {compression: zstd, linger: 5ms, batch_max_bytes: 2097152, max_buffered_records: 1000, max_buffered_bytes: 1073741824}
checkpoint: {interval: 500ms, timeout: 10s, max_records: 5000}
transactions: {id_prefix: alerts, timeout: 2m}
topics:
  partitions: 6
  replication_factor: 3
  configs: {compression.type: zstd}
sources:
  readings: {topics: [sensor-readings], format: json, key_format: string}
  extra: {topics: [extra-a, extra-b], format: bytes, key_format: bytes}
steps:
  - from: [readings, extra]
    union: {}
  - map: {key: value.sensor, value: "{id: value.sensor, temp: value.temperature}"}
  - name: route
    split: {hot: "value.temp > 30"}
  - name: per_sensor
    from: route.default
    aggregate: {count: "count()", max_temp: "max(value.temp)"}
sinks:
  stats: {from: per_sensor, topic: sensor-stats, format: string, key_format: json, partitions: 12}
  alerts:
    from: route.hot
    topic: sensor-alerts
    key: value.id
    value: value
    headers: {X-Source: '"pipeline"'}
dead_letter: {topic: sensor-dlq}
log: {level: debug, format: json}
metrics: {listen: ":9090"}
demo: {topic: sensor-readings, rate: 50, records: 500, sensors: 5, partitions: 2, seed: 7}
`

// public returns c without its unexported bookkeeping, for comparisons.
func public(c *Config) Config {
	p := *c
	p.lines, p.env, p.clusters, p.reported = nil, nil, nil, nil
	return p
}

func TestParseReadsEverySetting(t *testing.T) {
	c := mustParse(t, full)
	want := Config{
		Name:       "sensor-alerts",
		Brokers:    Brokers{Addrs: []string{"kafka-0:9092", "kafka-1:9092"}},
		InstanceID: "replica-0",
		Group:      "alerts-group",
		TLS: TLS{Enabled: true, CAFile: "testdata/ca.pem", CertFile: "testdata/client.pem", KeyFile: "testdata/client.key",
			ServerName: "kafka.internal"},
		SASL:         SASL{Mechanism: "SCRAM-SHA-256", Username: "svc", Password: "pw"},
		Consumer:     Consumer{StartFrom: "latest", SessionTimeout: 10 * time.Second, RebalanceTimeout: 20 * time.Second, FetchMaxBytes: 1 << 20, FetchMaxPartitionBytes: 64 << 10, MaxPollRecords: 500},
		Producer:     Producer{Compression: "zstd", Linger: 5 * time.Millisecond, BatchMaxBytes: 2 << 20, MaxBufferedRecords: 1000, MaxBufferedBytes: 1 << 30},
		Checkpoint:   Checkpoint{Interval: 500 * time.Millisecond, Timeout: 10 * time.Second, MaxRecords: 5000, FailureTimeout: 5 * time.Minute},
		Transactions: Transactions{IDPrefix: "alerts", Timeout: 2 * time.Minute},
		Topics:       Topics{Partitions: 6, ReplicationFactor: 3, Configs: map[string]string{"compression.type": "zstd"}},
		Sources: []Source{
			{Name: "extra", Topics: []string{"extra-a", "extra-b"}, Format: "bytes", KeyFormat: "bytes", Path: "sources.extra"},
			{Name: "readings", Topics: []string{"sensor-readings"}, Format: "json", KeyFormat: "string", Path: "sources.readings"},
		},
		Steps: []Step{
			{Name: "union1", From: []string{"readings", "extra"}, Kind: "union", Spec: map[string]any{}, Path: "steps[0]"},
			{Name: "map2", From: []string{"union1"}, Kind: "map", Path: "steps[1]",
				Spec: map[string]any{"key": "value.sensor", "value": "{id: value.sensor, temp: value.temperature}"}},
			{Name: "route", From: []string{"map2"}, Kind: "split", Spec: map[string]any{"hot": "value.temp > 30"}, Path: "steps[2]"},
			{Name: "per_sensor", From: []string{"route.default"}, Kind: "aggregate", Path: "steps[3]",
				Spec: map[string]any{"count": "count()", "max_temp": "max(value.temp)"}},
		},
		Sinks: []Sink{
			{Name: "alerts", From: "route.hot", Topic: "sensor-alerts", Key: "value.id", Value: "value",
				Headers: map[string]string{"X-Source": `"pipeline"`}, Format: "json", KeyFormat: "string", Path: "sinks.alerts"},
			{Name: "stats", From: "per_sensor", Topic: "sensor-stats", Format: "string", KeyFormat: "json", Partitions: 12, Path: "sinks.stats"},
		},
		DeadLetter: DeadLetter{Topic: "sensor-dlq"},
		Log:        Log{Level: "debug", Format: "json"},
		Metrics:    Metrics{Listen: ":9090"},
		Audit:      Audit{Enabled: true, Topic: "sensor-alerts-progress"},
		State:      State{Backend: "memory"},
		Demo:       Demo{Topic: "sensor-readings", Rate: 50, Records: 500, Sensors: 5, Partitions: 2, Seed: 7},
	}
	if got := public(c); !reflect.DeepEqual(got, want) {
		t.Errorf("Parse =\n%+v\nwant\n%+v", got, want)
	}
}

func TestParseAppliesDefaults(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Skipf("no host name to default instance_id to: %v", err)
	}
	c := mustParse(t, base)
	want := Config{
		Name:         "p",
		Brokers:      Brokers{Addrs: []string{"localhost:9092"}},
		InstanceID:   host,
		Group:        "p",
		Consumer:     Consumer{StartFrom: "earliest", SessionTimeout: 10 * time.Second, RebalanceTimeout: 60 * time.Second, FetchMaxBytes: 50 << 20, FetchMaxPartitionBytes: 1 << 20, MaxPollRecords: 10000},
		Producer:     Producer{Compression: "lz4", Linger: 50 * time.Millisecond, BatchMaxBytes: 1 << 20, MaxBufferedRecords: 100000, MaxBufferedBytes: 256 << 20},
		Checkpoint:   Checkpoint{Interval: time.Second, Timeout: 30 * time.Second, MaxRecords: 1000000, FailureTimeout: 5 * time.Minute},
		Transactions: Transactions{IDPrefix: "p", Timeout: 60 * time.Second},
		Topics:       Topics{Partitions: 0, ReplicationFactor: -1},
		Sources:      []Source{{Name: "in", Topics: []string{"input"}, Format: "json", KeyFormat: "string", Path: "sources.in"}},
		Sinks:        []Sink{{Name: "out", From: "in", Topic: "output", Format: "json", KeyFormat: "string", Path: "sinks.out"}},
		Log:          Log{Level: "info", Format: "text"},
		Audit:        Audit{Enabled: true, Topic: "p-progress"},
		State:        State{Backend: "memory"},
	}
	if got := public(c); !reflect.DeepEqual(got, want) {
		t.Errorf("Parse =\n%+v\nwant\n%+v", got, want)
	}
}

func TestParseDemoDefaults(t *testing.T) {
	c := mustParse(t, withBase("demo: {topic: input}"))
	want := Demo{Topic: "input", Rate: 1000, Records: 10000, Sensors: 20, Partitions: 3}
	if c.Demo != want {
		t.Errorf("Demo = %+v, want %+v", c.Demo, want)
	}
}

func TestParseNormalises(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		got  func(*Config) any
		want any
	}{
		{"a TLS file turns TLS on", "tls: {ca_file: testdata/ca.pem}", func(c *Config) any { return c.TLS.Enabled }, true},
		{"TLS is off without files or enabled", "tls: {}", func(c *Config) any { return c.TLS.Enabled }, false},
		{"the SASL mechanism is upper-cased", "sasl: {mechanism: plain, username: u, password: p}", func(c *Config) any { return c.SASL.Mechanism }, "PLAIN"},
		{"embedded brokers have no addresses", "brokers: embedded", func(c *Config) any { return c.Brokers }, Brokers{Embedded: true}},
		{"embedded is case-insensitive", "brokers: [Embedded]", func(c *Config) any { return c.Brokers }, Brokers{Embedded: true}},
		{"a broker string is split on commas", `brokers: "a:1, b:2,"`, func(c *Config) any { return c.Brokers }, Brokers{Addrs: []string{"a:1", "b:2"}}},
		{"the group and id prefix default to the name", "name: other", func(c *Config) any { return c.Group + " " + c.Transactions.IDPrefix }, "other other"},
		{"a number with a leading zero is decimal", "consumer: {max_poll_records: 010}", func(c *Config) any { return c.Consumer.MaxPollRecords }, 10},
		{"a number with underscores is read", "consumer: {max_poll_records: 1_000}", func(c *Config) any { return c.Consumer.MaxPollRecords }, 1000},
		{"sources are sorted by name", "sources:\n  b: {topics: [y]}\n  a: {topics: [x]}\nsinks:\n  out: {from: a, topic: output}",
			func(c *Config) any { return c.Sources[0].Name + c.Sources[1].Name }, "ab"},
		{"sinks are sorted by name", "sinks:\n  z: {topic: o1}\n  y: {topic: o2}", func(c *Config) any { return c.Sinks[0].Name + c.Sinks[1].Name }, "yz"},
		{"a sink reads the last step by default", "steps:\n  - filter: a\n  - {name: last, map: b}", func(c *Config) any { return c.Sinks[0].From }, "last"},
		{"a sink reads the only source when there are no steps", base, func(c *Config) any { return c.Sinks[0].From }, "in"},
		{"the first step reads the only source", "steps:\n  - filter: a", func(c *Config) any { return c.Steps[0].From }, []string{"in"}},
		{"a step reads the step above", "steps:\n  - {name: a, filter: x}\n  - filter: y", func(c *Config) any { return c.Steps[1].From }, []string{"a"}},
		{"from may be one string", "steps:\n  - {from: in, filter: x}", func(c *Config) any { return c.Steps[0].From }, []string{"in"}},
		{"a step's default name is its kind and position", "steps:\n  - {name: a, filter: x}\n  - flat_map: y", func(c *Config) any { return c.Steps[1].Name }, "flat_map2"},
		{"header names keep their case", "sinks:\n  out: {topic: output, headers: {X-Trace-ID: value.t}}",
			func(c *Config) any { return c.Sinks[0].Headers }, map[string]string{"X-Trace-ID": "value.t"}},
		{"a sink repeating the top-level brokers is read as usual", "sinks:\n  out: {topic: output, brokers: localhost:9092}",
			func(c *Config) any { return c.Sinks[0].Topic }, "output"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustParse(t, withBase(tt.yaml))
			if got := tt.got(c); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestStepSpecIsPlainGoValues(t *testing.T) {
	c := mustParse(t, withBase(`steps:
  - name: s
    custom:
      Case: kept
      cleanup.policy: dotted keys stay whole
      int: 3
      float: 2.5
      bool: true
      none: ~
      list: [1, two, {three: 3}]
      1: numeric key
      when: 2024-01-02
  - filter: "value.x > 1"
`))
	want := map[string]any{
		"Case":           "kept",
		"cleanup.policy": "dotted keys stay whole",
		"int":            3,
		"float":          2.5,
		"bool":           true,
		"none":           nil,
		"list":           []any{1, "two", map[string]any{"three": 3}},
		"1":              "numeric key",
		"when":           "2024-01-02",
	}
	if s := c.Steps[0]; s.Kind != "custom" || !reflect.DeepEqual(s.Spec, want) {
		t.Errorf("step 0 = %s %#v, want custom %#v", s.Kind, s.Spec, want)
	}
	if s := c.Steps[1]; s.Kind != "filter" || s.Spec != "value.x > 1" {
		t.Errorf("step 1 = %s %#v, want filter %q", s.Kind, s.Spec, "value.x > 1")
	}
}

func TestAnchorsAndMergeKeys(t *testing.T) {
	c := mustParse(t, withBase(`sinks:
  a: &common {topic: out-a, format: string, headers: {h: value.h}}
  b:
    <<: *common
    topic: out-b
`))
	b := c.Sinks[1]
	if b.Name != "b" || b.Topic != "out-b" || b.Format != "string" || b.Headers["h"] != "value.h" {
		t.Errorf("merged sink = %+v, want topic out-b, format string and header h", b)
	}
	if got := c.Line("sinks.b.format"); got != 6 {
		t.Errorf(`Line("sinks.b.format") = %d, want 6, where the anchored mapping says it`, got)
	}
	if got := c.Line("sinks.b.topic"); got != 9 {
		t.Errorf(`Line("sinks.b.topic") = %d, want 9`, got)
	}
}

func TestDocumentShapeErrors(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		wantErr string
	}{
		{"a repeated key is rejected", "sinks:\n  out: {topic: output, topic: other}", "sinks.out.topic (line 6): duplicate key (first at line 6)"},
		{"a repeated top-level key is rejected", "log: {level: debug}\nlog: {format: json}", "log (line 8): duplicate key (first at line 7)"},
		{"an alias that contains itself is rejected", "steps: &s\n  - map: *s", "(line 8): alias *s refers to itself"},
		{"a mapping as a key is rejected", "topics:\n  configs: {? {a: b} : c}", "topics.configs (line 8): keys must be plain strings, found a mapping"},
		{"a merge of a scalar is rejected", "sinks:\n  out: {<<: x, topic: output}", `sinks.out (line 6): << must merge a mapping or a list of mappings, found "x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := withBase(tt.yaml)
			_, err := Parse([]byte(doc), "test.yaml", noEnv)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error:\n%v\nwant it to contain:\n%s\ndocument:\n%s", err, tt.wantErr, doc)
			}
			fieldErrors(t, err)
		})
	}
}

func TestEnvironmentOverrides(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		vars map[string]string
		got  func(*Config) any
		want any
	}{
		{"a duration overrides the file", "checkpoint: {interval: 5s}", map[string]string{"PIPELINE_CHECKPOINT_INTERVAL": "2s"},
			func(c *Config) any { return c.Checkpoint.Interval }, 2 * time.Second},
		{"a duration sets a key absent from the file", base, map[string]string{"PIPELINE_TRANSACTIONS_TIMEOUT": "90s"},
			func(c *Config) any { return c.Transactions.Timeout }, 90 * time.Second},
		{"a comma-separated list overrides the brokers", base, map[string]string{"PIPELINE_BROKERS": "a:9092,b:9092"},
			func(c *Config) any { return c.Brokers }, Brokers{Addrs: []string{"a:9092", "b:9092"}}},
		{"embedded overrides the brokers", base, map[string]string{"PIPELINE_BROKERS": "embedded"},
			func(c *Config) any { return c.Brokers }, Brokers{Embedded: true}},
		{"a string sets a key absent from the file", base, map[string]string{"PIPELINE_INSTANCE_ID": "x"},
			func(c *Config) any { return c.InstanceID }, "x"},
		{"a secret completes the file", "sasl: {mechanism: PLAIN, username: u}", map[string]string{"PIPELINE_SASL_PASSWORD": "s3cret"},
			func(c *Config) any { return c.SASL.Password }, "s3cret"},
		{"a boolean is read", base, map[string]string{"PIPELINE_TLS_ENABLED": "true"},
			func(c *Config) any { return c.TLS.Enabled }, true},
		{"a number is read", base, map[string]string{"PIPELINE_CONSUMER_MAX_POLL_RECORDS": "500"},
			func(c *Config) any { return c.Consumer.MaxPollRecords }, 500},
		{"a name override carries the defaults that follow it", base, map[string]string{"PIPELINE_NAME": "other"},
			func(c *Config) any { return c.Name + " " + c.Group + " " + c.Transactions.IDPrefix }, "other other other"},
		{"an empty variable is ignored", base, map[string]string{"PIPELINE_NAME": ""},
			func(c *Config) any { return c.Name }, "p"},
		{"a demo topic turns the demo on", base, map[string]string{"PIPELINE_DEMO_TOPIC": "input"},
			func(c *Config) any { return c.Demo }, Demo{Topic: "input", Rate: 1000, Records: 10000, Sensors: 20, Partitions: 3}},
	}
	for _, tt := range tests {
		doc := withBase(tt.yaml)
		t.Run(tt.name+" (env func)", func(t *testing.T) {
			c, err := Parse([]byte(doc), "test.yaml", envOf(tt.vars))
			if err != nil {
				t.Fatal(err)
			}
			if got := tt.got(c); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v, want %#v", got, tt.want)
			}
		})
		t.Run(tt.name+" (process environment)", func(t *testing.T) {
			for k, v := range tt.vars {
				t.Setenv(k, v)
			}
			c, err := Parse([]byte(doc), "test.yaml", nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := tt.got(c); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestEnvironmentErrorsNameTheVariable(t *testing.T) {
	tests := []struct {
		name string
		vars map[string]string
		want string
	}{
		{
			"a value that does not parse",
			map[string]string{"PIPELINE_CHECKPOINT_INTERVAL": "soon"},
			`checkpoint.interval: expected a duration such as "500ms", "1s" or "1h30m" (units: ns, us, ms, s, m, h), found "soon" (set by PIPELINE_CHECKPOINT_INTERVAL)`,
		},
		{
			"a bare number",
			map[string]string{"PIPELINE_CHECKPOINT_INTERVAL": "5"},
			`checkpoint.interval: a duration needs a unit: found 5; write "5s", "5ms" or "5m" (units: ns, us, ms, s, m, h) (set by PIPELINE_CHECKPOINT_INTERVAL)`,
		},
		{
			"a value that breaks a rule",
			map[string]string{"PIPELINE_CHECKPOINT_TIMEOUT": "0s"},
			"checkpoint.timeout: must be positive, found 0s (set by PIPELINE_CHECKPOINT_TIMEOUT)",
		},
		{
			"a value in a cross-field rule",
			map[string]string{"PIPELINE_CHECKPOINT_INTERVAL": "59s"},
			"transactions.timeout (line 8): transactions.timeout (31s) must be larger than checkpoint.interval (59s from PIPELINE_CHECKPOINT_INTERVAL) + checkpoint.timeout (2s) = 1m1s",
		},
		{
			"a value that does not parse, alone even where a rule reads it",
			map[string]string{"PIPELINE_CHECKPOINT_TIMEOUT": "forever"}, // its default, 30s, would break the transactions rule
			`checkpoint.timeout: expected a duration such as "500ms", "1s" or "1h30m" (units: ns, us, ms, s, m, h), found "forever" (set by PIPELINE_CHECKPOINT_TIMEOUT)`,
		},
		{
			"a broker list that is not addresses",
			map[string]string{"PIPELINE_BROKERS": "a:1,kafka"},
			`brokers: "kafka" is not a host:port address (set by PIPELINE_BROKERS)`,
		},

		// Variables that set nothing.
		{
			"a misspelt variable suggests the right one",
			map[string]string{"PIPELINE_CHECKPOINT_INTERVL": "5s"},
			"PIPELINE_CHECKPOINT_INTERVL: unknown environment variable (did you mean PIPELINE_CHECKPOINT_INTERVAL?)",
		},
		{
			"a variable with a unit suffix suggests the right one",
			map[string]string{"PIPELINE_TRANSACTIONS_TIMEOUT_MS": "90000"},
			"PIPELINE_TRANSACTIONS_TIMEOUT_MS: unknown environment variable (did you mean PIPELINE_TRANSACTIONS_TIMEOUT?)",
		},
		{
			"a variable in lower case suggests the upper-case one",
			map[string]string{"pipeline_log_level": "debug"},
			"pipeline_log_level: unknown environment variable (did you mean PIPELINE_LOG_LEVEL?)",
		},
		{
			"a misspelt non-setting variable suggests it",
			map[string]string{"PIPELINE_CRASH_AT_": "before-commit:1"},
			"PIPELINE_CRASH_AT_: unknown environment variable (did you mean PIPELINE_CRASH_AT?)",
		},
		{
			"a variable in a section but far from its settings says how variables are named",
			map[string]string{"PIPELINE_CHECKPOINT_FROBNICATE": "1"},
			`PIPELINE_CHECKPOINT_FROBNICATE: unknown environment variable: no setting has this name (a setting's variable is PIPELINE_ and its path in upper case with "_" for ".", such as PIPELINE_CHECKPOINT_INTERVAL)`,
		},
		{
			"another program's variable, near no setting and in no section, is left alone",
			map[string]string{"PIPELINE_WORKSPACE": "/agent/work", "PIPELINE_FROBNICATE": "1"},
			"",
		},
		{
			"a misspelt variable is reported with the problems of the others",
			map[string]string{"PIPELINE_CHEKPOINT_TIMEOUT": "1s", "PIPELINE_CHECKPOINT_TIMEOUT": "0s"},
			"PIPELINE_CHEKPOINT_TIMEOUT: unknown environment variable (did you mean PIPELINE_CHECKPOINT_TIMEOUT?)\n" +
				"checkpoint.timeout: must be positive, found 0s (set by PIPELINE_CHECKPOINT_TIMEOUT)",
		},
		{
			"sources cannot be set from the environment",
			map[string]string{"PIPELINE_SOURCES": "x"},
			"PIPELINE_SOURCES: sources cannot be set from the environment: it is the pipeline's shape and belongs in the file",
		},
		{
			"a source's topics cannot be set from the environment",
			map[string]string{"PIPELINE_SOURCES_IN_TOPICS": "other"},
			"PIPELINE_SOURCES_IN_TOPICS: sources cannot be set from the environment: it is the pipeline's shape and belongs in the file",
		},
		{
			"steps cannot be set from the environment",
			map[string]string{"PIPELINE_STEPS": "[]"},
			"PIPELINE_STEPS: steps cannot be set from the environment: it is the pipeline's shape and belongs in the file",
		},
		{
			"a sink's topic cannot be set from the environment",
			map[string]string{"PIPELINE_SINKS_OUT_TOPIC": "other"},
			"PIPELINE_SINKS_OUT_TOPIC: sinks cannot be set from the environment: it is the pipeline's shape and belongs in the file",
		},
		{
			"topic configs cannot be set from the environment",
			map[string]string{"PIPELINE_TOPICS_CONFIGS_RETENTION_MS": "1000"},
			"PIPELINE_TOPICS_CONFIGS_RETENTION_MS: topics.configs cannot be set from the environment: it is the pipeline's shape and belongs in the file",
		},
		{
			"the variables the binary reads besides settings are accepted",
			map[string]string{"PIPELINE_CRASH_AT": "before-commit:3", "PIPELINE_TEST_LOG": "1"},
			"",
		},
		{
			"a misspelt variable set to the empty string is ignored, as a setting's is",
			map[string]string{"PIPELINE_CHECKPOINT_INTERVL": ""},
			"",
		},
		{
			"variables without the PIPELINE_ prefix are not ours",
			map[string]string{"PIPELINES_NAME": "x", "PIPELINE": "y", "HOME": "/root"},
			"",
		},
	}
	doc := withBase("checkpoint: {interval: 1s, timeout: 2s}\ntransactions: {timeout: 31s}")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parse([]byte(doc), "test.yaml", listedEnv(tt.vars))
			switch {
			case tt.want == "":
				if err != nil {
					t.Fatalf("unexpected error:\n%v", err)
				}
			case err == nil || err.Error() != tt.want:
				t.Fatalf("error:\n%v\nwant:\n%s", err, tt.want)
			default:
				fieldErrors(t, err)
			}
		})
	}
}

func TestEnvFuncReplacesTheProcessEnvironment(t *testing.T) {
	t.Setenv("PIPELINE_NAME", "from-process")
	c := mustParse(t, base)
	if c.Name != "p" {
		t.Errorf("Name = %q, want the file's %q: the env func alone is the environment", c.Name, "p")
	}
}

func TestLine(t *testing.T) {
	c := mustParse(t, full)
	tests := []struct {
		path string
		want int
	}{
		{"name", 1},
		{"brokers", 2},
		{"brokers[1]", 2},
		{"tls.cert_file", 7},
		{"consumer.session_timeout", 11},
		{"topics.configs.compression.type", 18},
		{"sources.extra.topics[1]", 21},
		{"steps[0]", 23},
		{"steps[0].from[1]", 23},
		{"steps[0].union", 24},
		{"steps[1].map.value", 25},
		{"steps[3].aggregate.max_temp", 30},
		{"sinks.alerts", 33},
		{"sinks.alerts.topic", 35},
		{"sinks.alerts.headers.X-Source", 38},
		{"demo.seed", 42},
		{"", 0},
		{"sinks.nope", 0},
		{"checkpoint.nope", 0},
		{"steps[9]", 0},
	}
	for _, tt := range tests {
		if got := c.Line(tt.path); got != tt.want {
			t.Errorf("Line(%q) = %d, want %d", tt.path, got, tt.want)
		}
	}
	if got := (&Config{}).Line("name"); got != 0 {
		t.Errorf("Line on a hand-built Config = %d, want 0", got)
	}
}

func TestAllProblemsAreReportedSortedByLine(t *testing.T) {
	doc := `brokers: [kafka]
checkpoint:
  intervl: 2s
  timeout: 0s
sources:
  in: {topics: [input], format: xml}
sinks:
  out: {topic: input}
`
	_, err := Parse([]byte(doc), "test.yaml", noEnv)
	want := strings.Join([]string{
		"name: required",
		`brokers[0] (line 1): "kafka" is not a host:port address`,
		`checkpoint.intervl (line 3): unknown key (did you mean "interval"?)`,
		"checkpoint.timeout (line 4): must be positive, found 0s",
		`sources.in.format (line 6): must be one of json, string or bytes, found "xml"`,
		`sinks.out.topic (line 8): topic "input" is also read by sources.in: the pipeline would read its own output`,
	}, "\n")
	if err == nil || err.Error() != want {
		t.Fatalf("error:\n%v\nwant:\n%s", err, want)
	}
	if n := len(fieldErrors(t, err)); n != 6 {
		t.Errorf("got %d FieldErrors, want 6", n)
	}
}

func TestUnreadableDocuments(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string
	}{
		{"a syntax error names the file and line", "name: p\nbrokers: [a:1]\nsources: in: x\n", "parsing test.yaml: yaml: line 3: mapping values are not allowed in this context"},
		{"a syntax error on the first line says line 1", "name: p: q\n", "parsing test.yaml: line 1: yaml: mapping values are not allowed in this context"},
		{"an unknown alias names its line", "name: p\nbrokers: *nope\n", "parsing test.yaml: line 2: yaml: unknown anchor 'nope' referenced"},
		{"a second document is rejected", "name: p\n---\nname: q\n", "parsing test.yaml: line 2: a second YAML document; the file must hold one"},
		{"a list at the top level is rejected", "- name: p\n", `parsing test.yaml: line 1: the top level must be a mapping of settings such as "name: ...", found a list`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml), "test.yaml", noEnv)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("error:\n%v\nwant:\n%s", err, tt.want)
			}
			var errs Errors
			if errors.As(err, &errs) {
				t.Errorf("a document that cannot be read gave Errors: %v", errs)
			}
		})
	}
}

func TestEmptyDocumentReportsWhatIsRequired(t *testing.T) {
	for _, doc := range []string{"", "# nothing\n", "~\n"} {
		_, err := Parse([]byte(doc), "test.yaml", noEnv)
		want := "brokers: required: a list of host:port addresses, or \"embedded\"\nname: required\nsinks: at least one sink is required\nsources: at least one source is required"
		if err == nil || err.Error() != want {
			t.Errorf("Parse(%q) error:\n%v\nwant:\n%s", doc, err, want)
		}
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}

	t.Run("a valid file loads", func(t *testing.T) {
		c, err := Load(write("ok.yaml", base))
		if err != nil {
			t.Fatal(err)
		}
		if c.Name != "p" || c.Line("sinks.out.topic") != 6 {
			t.Errorf("Load = name %q, sinks.out.topic on line %d; want p on line 6", c.Name, c.Line("sinks.out.topic"))
		}
	})
	t.Run("the process environment overrides the file", func(t *testing.T) {
		t.Setenv("PIPELINE_CHECKPOINT_INTERVAL", "3s")
		c, err := Load(write("env.yaml", base))
		if err != nil {
			t.Fatal(err)
		}
		if c.Checkpoint.Interval != 3*time.Second {
			t.Errorf("checkpoint.interval = %v, want 3s", c.Checkpoint.Interval)
		}
	})
	t.Run("a misspelt variable of the process environment is an error", func(t *testing.T) {
		t.Setenv("PIPELINE_CHECKPOINT_INTERVL", "3s")
		_, err := Load(write("typo.yaml", base))
		want := "PIPELINE_CHECKPOINT_INTERVL: unknown environment variable (did you mean PIPELINE_CHECKPOINT_INTERVAL?)"
		if err == nil || err.Error() != want {
			t.Fatalf("Load = %v, want %s", err, want)
		}
	})
	t.Run("a missing file is a not-exist error", func(t *testing.T) {
		_, err := Load(filepath.Join(dir, "missing.yaml"))
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Load = %v, want fs.ErrNotExist", err)
		}
	})
	t.Run("a syntax error names the file", func(t *testing.T) {
		path := write("bad.yaml", "name: p\nsinks: [\n")
		_, err := Load(path)
		if err == nil || !strings.Contains(err.Error(), "parsing "+path+": ") || !strings.Contains(err.Error(), "line ") {
			t.Fatalf("Load = %v, want the file name and a line", err)
		}
	})
	t.Run("invalid settings are Errors", func(t *testing.T) {
		_, err := Load(write("invalid.yaml", withBase("log: {level: loud}")))
		if errs := fieldErrors(t, err); len(errs) != 1 || errs[0].Path != "log.level" || errs[0].Line != 7 {
			t.Fatalf("Load = %v, want one problem at log.level on line 7", err)
		}
	})
}

func TestTransactionsID(t *testing.T) {
	if got := (Transactions{IDPrefix: "alerts"}).ID("replica-0"); got != "alerts-replica-0" {
		t.Errorf("ID = %q, want alerts-replica-0", got)
	}
}

// TestParseIsSafeConcurrently runs Parse from several goroutines: each has
// its own viper, so -race finds nothing shared.
func TestParseIsSafeConcurrently(t *testing.T) {
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			_, err := Parse([]byte(full), "test.yaml", noEnv)
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// aliasBomb returns a file whose anchors, each used ten times by the next,
// expand to 10^9 values.
func aliasBomb() string {
	var b strings.Builder
	b.WriteString("steps:\n  - map:\n      l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i <= 8; i++ {
		fmt.Fprintf(&b, "      l%d: &l%d [*l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d]\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	return withBase(b.String())
}

func TestTopicsToCreate(t *testing.T) {
	c := mustParse(t, withBase("brokers: embedded\nembedded: {port: 19092}\ntopics:\n  partitions: 4\n  create:\n    - {name: input, partitions: 3, configs: {cleanup.policy: compact}}\n    - name: other\n"))
	want := []TopicSpec{
		{Name: "input", Partitions: 3, Configs: map[string]string{"cleanup.policy": "compact"}, Path: "topics.create[0]"},
		{Name: "other", Path: "topics.create[1]"},
	}
	if !reflect.DeepEqual(c.Topics.Create, want) {
		t.Errorf("topics.create = %+v, want %+v", c.Topics.Create, want)
	}
	if c.Embedded.Port != 19092 {
		t.Errorf("embedded.port = %d, want 19092", c.Embedded.Port)
	}
	if got := c.Topics.Create[1].PartitionsOr(c.Topics.Partitions); got != 4 {
		t.Errorf("a topic to create without partitions gets %d, want topics.partitions (4)", got)
	}
	if got := (TopicSpec{}).PartitionsOr(0); got != 1 {
		t.Errorf("with neither, a topic to create gets %d partitions, want 1", got)
	}

	c, err := Parse([]byte(withBase("brokers: embedded")), "test.yaml", envOf(map[string]string{"PIPELINE_EMBEDDED_PORT": "19093"}))
	if err != nil || c.Embedded.Port != 19093 {
		t.Fatalf("PIPELINE_EMBEDDED_PORT: port %v, %v", c, err)
	}
	_, err = parse([]byte(base), "test.yaml", listedEnv(map[string]string{"PIPELINE_TOPICS_CREATE": "input"}))
	wantErr := "PIPELINE_TOPICS_CREATE: topics.create cannot be set from the environment: it is the pipeline's shape and belongs in the file"
	if err == nil || err.Error() != wantErr {
		t.Errorf("PIPELINE_TOPICS_CREATE: %v, want %s", err, wantErr)
	}
}

// TestOversizedDocumentsGiveOneError checks that a file too large, or one
// that aliases make too large, is refused with one error saying which,
// and nothing after it: no "found null" for the values left unread, no
// "at least one sink is required" for the sections after them.
func TestOversizedDocumentsGiveOneError(t *testing.T) {
	var flat strings.Builder
	flat.WriteString(base + "demo:\n")
	for i := 0; flat.Len() < MaxFileSize/2; i++ {
		fmt.Fprintf(&flat, "  k%d: [1, 2, 3, 4, 5, 6, 7, 8, 9]\n", i)
	}
	tests := []struct {
		name string
		doc  string
		want string
	}{
		{"a file beyond the size limit", strings.Repeat("# padding\n", 1_000_000),
			"parsing test.yaml: the file is 10000000 bytes; a pipeline file may be at most 1048576 bytes (1 MiB)"},
		{"a file within the size limit holding too many values", flat.String(),
			// base's 13 values, demo's mapping, then 10 a line: the
			// 100001st is on line 7 + 9999.
			"parsing test.yaml: line 10006: the document holds more than 100000 values; a pipeline file may hold at most 100000"},
		{"an alias bomb", aliasBomb(),
			// l4, on line 13, is the first anchor to expand past the limit.
			"parsing test.yaml: line 13: the document is too large once its aliases are expanded: more than 100000 values (each use of an alias repeats all its anchor holds)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			c, err := Parse([]byte(tt.doc), "test.yaml", noEnv)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("error:\n%.2000v\nwant exactly:\n%s", err, tt.want)
			}
			var errs Errors
			if errors.As(err, &errs) || c != nil {
				t.Errorf("the document was read on after its limit: Config %v, Errors %d", c != nil, len(errs))
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("refusing it took %v", d)
			}
		})
	}
}

// TestLoadReadsNoMoreThanTheLimit checks that Load refuses a file beyond
// MaxFileSize without reading it into memory: a 9 MB file costs no more
// than the limit.
func TestLoadReadsNoMoreThanTheLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(path, []byte(strings.Repeat("k: [v, v, v, v, v, v]\n", 450_000)), 0o600); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := Load(path)
	runtime.ReadMemStats(&after)
	want := "parsing " + path + ": the file is 9900000 bytes; a pipeline file may be at most 1048576 bytes (1 MiB)"
	if err == nil || err.Error() != want {
		t.Fatalf("Load error:\n%.2000v\nwant exactly:\n%s", err, want)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 2*MaxFileSize {
		t.Errorf("refusing a 9.9 MB file allocated %d bytes; want at most %d", alloc, 2*MaxFileSize)
	}
}

// TestErrorsComeWithThePartlyFilledConfig checks that Parse returns what it
// could read along with Errors, for the graph builder to check further.
func TestErrorsComeWithThePartlyFilledConfig(t *testing.T) {
	doc := withBase("checkpoint: {intervl: 1s}\nsteps:\n  - filter: \"value.x >\"\nsinks:\n  out: {}")
	c, err := Parse([]byte(doc), "test.yaml", noEnv)
	fieldErrors(t, err)
	if c == nil {
		t.Fatal("Parse returned no Config with its Errors")
	}
	if c.Name != "p" || len(c.Sources) != 1 || len(c.Steps) != 1 || c.Steps[0].Spec != "value.x >" || len(c.Sinks) != 1 {
		t.Errorf("partly filled Config = %+v, want the name, the source, the step with its spec and the sink", public(c))
	}
	if c.Checkpoint.Interval != time.Second || c.Line("steps[0].filter") != 9 {
		t.Errorf("interval %v, steps[0].filter on line %d; want the default 1s and line 9", c.Checkpoint.Interval, c.Line("steps[0].filter"))
	}

	if c, err := Parse([]byte("name: p: q\n"), "test.yaml", noEnv); c != nil || err == nil {
		t.Errorf("an unreadable document gave a Config (%v) or no error (%v)", c, err)
	}
}

// TestReportedCoversWhatParseFound checks which paths a further check of a
// partly filled Config leaves out as already reported.
func TestReportedCoversWhatParseFound(t *testing.T) {
	doc := withBase(`steps:
  - {name: r, split: {hot: x}, filter: y}
  - {name: "a b", from: r, map: {}}
  - {name: m, from: [in, r.hot, "a b"], union: {}}
  - {name: ok, from: in, filter: x}
sinks:
  out: {topik: output, from: r.hot}
  fine: {from: ok, topic: other, format: xml}
  good: {from: ok, topic: third}`)
	c, err := Parse([]byte(doc), "test.yaml", noEnv)
	fieldErrors(t, err)
	tests := []struct {
		path string
		want bool
	}{
		{"steps[0]", true},                  // the error itself: two operators
		{"steps[0].", true},                 // below it: the builder's unknown operator ""
		{"steps[1].name", true},             // an invalid name
		{"steps[1]", true},                  // above a problem, inside one step: the builder's duplicate name
		{"steps[1].map", false},             // beside a problem: the step's own spec is still checked
		{"sinks.out.topic", true},           // the key a misspelt one stands for
		{"sinks.out.from", true},            // reads the output of a broken step
		{"steps[2].from[1]", true},          // reads r.hot
		{"steps[2].from[2]", true},          // reads "a b", whose name is broken
		{"steps[2].from[0]", false},         // reads the source
		{"sinks.fine.format", true},         // the error itself
		{"sinks.fine.from", false},          // reads a sound step
		{"sinks.good.key", false},           // nothing reported
		{"steps[3].filter", false},          // nothing reported
		{"sinks", false},                    // a section is not covered by its entries' problems
		{"sources", false},                  // nor a section with none
		{"topics.partitions", false},        // a setting with none
		{"checkpoint.interval.more", false}, // nothing reported there
	}
	for _, tt := range tests {
		if got := c.Reported(tt.path); got != tt.want {
			t.Errorf("Reported(%q) = %v, want %v\nerrors:\n%v", tt.path, got, tt.want, err)
		}
	}

	// Without sources, a from left out has no default: the builder's
	// "required" there is the missing sources again.
	c, err = Parse([]byte("name: p\nbrokers: embedded\nsteps:\n  - filter: x\n  - {name: last, filter: y}\nsinks:\n  out: {topic: o}\n"), "test.yaml", noEnv)
	fieldErrors(t, err)
	for path, want := range map[string]bool{"steps[0].from": true, "steps[1].from": false, "sinks.out.from": false, "steps[0].filter": false} {
		if got := c.Reported(path); got != want {
			t.Errorf("without sources, Reported(%q) = %v, want %v\nerrors:\n%v", path, got, want, err)
		}
	}

	if ok := mustParse(t, base); ok.Reported("sinks.out.topic") || ok.Reported("") {
		t.Error("a valid Config reports problems")
	}
}

func TestEventTime(t *testing.T) {
	doc := withBase("sources:\n  in:\n    topics: [in]\n    event_time: {from: value.ts, max_out_of_orderness: 5s, idle_timeout: 1m}\n  plain: {topics: [p], event_time: timestamp}\nsinks:\n  out: {from: in, topic: out}")
	cfg, err := Parse([]byte(doc), "test.yaml", noEnv)
	if err != nil {
		t.Fatal(err)
	}
	var in, plain *EventTime
	for _, s := range cfg.Sources {
		switch s.Name {
		case "in":
			in = s.EventTime
		case "plain":
			plain = s.EventTime
		}
	}
	if in == nil || in.From != "value.ts" || in.MaxOutOfOrderness != 5*time.Second || in.IdleTimeout != time.Minute || in.Path != "sources.in.event_time" {
		t.Fatalf("event_time read as %+v", in)
	}
	if plain == nil || plain.From != "timestamp" {
		t.Fatalf("event_time: timestamp read as %+v", plain)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"sources:\n  in: {topics: [in], event_time: {from: value.ts, max_out_of_order: 5s}}", "sources.in.event_time.max_out_of_order (line 4): unknown key (known keys: from, max_out_of_orderness, idle_timeout)"},
		{"sources:\n  in: {topics: [in], event_time: {idle_timeout: 5}}", "sources.in.event_time.idle_timeout (line 4): a duration needs a unit"},
		{"sources:\n  in: {topics: [in], event_time: {max_out_of_orderness: -2s}}", "sources.in.event_time.max_out_of_orderness (line 4): must not be negative"},
		{"sources:\n  in: {topics: [in], event_time: [value.ts]}", "sources.in.event_time (line 4): expected a mapping such as {from: value.ts, max_out_of_orderness: 5s}"},
	} {
		_, err := Parse([]byte(withBase(tc.yaml)), "test.yaml", noEnv)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error:\n%v\nwant it to contain:\n%s", err, tc.want)
		}
	}
}
