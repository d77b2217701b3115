package config

import (
	"strings"
	"testing"
	"time"
)

// TestValidationRules has a row per rule: a document (base with some
// top-level sections replaced) and the error it must produce, path
// included, or "" for none.
func TestValidationRules(t *testing.T) {
	long := strings.Repeat("t", 250)
	tests := []struct {
		name    string
		yaml    string
		wantErr string
	}{
		{"the smallest configuration is valid", base, ""},

		// name, instance_id, group
		{"a missing name is required", "name: ~", "name (line 1): required"},
		{"an empty name is required", `name: ""`, "name (line 1): required"},
		{"a name with a space is rejected", `name: "my pipe"`, `name (line 1): "my pipe" is not a valid name`},
		{"a name with dots, dashes and underscores is accepted", "name: a.b-c_D9", ""},
		{"an instance id with a slash is rejected", "instance_id: a/b", `instance_id (line 7): "a/b" is not a valid name`},
		{"an explicit group and id prefix are accepted", "group: g\ntransactions: {id_prefix: tx}", ""},

		// brokers
		{"brokers are required", "brokers: ~", `brokers (line 2): required: a list of host:port addresses, or "embedded"`},
		{"an empty broker list is required", "brokers: []", "brokers (line 2): required"},
		{"embedded as a string is accepted", "brokers: embedded", ""},
		{"embedded as a one-item list is accepted", "brokers: [embedded]", ""},
		{"embedded mixed with addresses is rejected", "brokers: [embedded, a:9092]", `brokers[0] (line 2): "embedded" cannot be combined with broker addresses`},
		{"a broker without a port is rejected", "brokers: [kafka]", `brokers[0] (line 2): "kafka" is not a host:port address`},
		{"a broker with a port that is not a number is rejected", "brokers: [a:9092, 'kafka:http']", `brokers[1] (line 2): "kafka:http" is not a host:port address`},
		{"a broker with an out-of-range port is rejected", "brokers: [kafka:70000]", `brokers[0] (line 2): "kafka:70000" is not a host:port address`},
		{"brokers as a comma-separated string are accepted", `brokers: "a:1, b:2"`, ""},
		{"an IPv6 broker address is accepted", "brokers: ['[::1]:9092']", ""},
		{"brokers as a mapping are rejected", "brokers: {a: 1}", `brokers (line 2): expected a list of host:port addresses or "embedded", found a mapping`},

		// tls
		{"a missing CA file is rejected", "tls: {ca_file: testdata/missing.pem}", `tls.ca_file (line 7): cannot read "testdata/missing.pem": no such file or directory`},
		{"a directory as a CA file is rejected", "tls: {ca_file: testdata}", `tls.ca_file (line 7): "testdata" is a directory`},
		{"a certificate without its key is rejected", "tls: {cert_file: testdata/client.pem}", "tls.key_file (line 7): required with tls.cert_file"},
		{"a key without its certificate is rejected", "tls: {key_file: testdata/client.key}", "tls.cert_file (line 7): required with tls.key_file"},
		{"a certificate with its key and a CA file is accepted", "tls: {ca_file: testdata/ca.pem, cert_file: testdata/client.pem, key_file: testdata/client.key}", ""},
		{"server_name without TLS is rejected", "tls: {server_name: kafka}", "tls.server_name (line 7): has no effect unless tls.enabled is true"},
		{"insecure_skip_verify without TLS is rejected", "tls: {insecure_skip_verify: true}", "tls.insecure_skip_verify (line 7): has no effect unless tls.enabled is true"},
		{"insecure_skip_verify with TLS is accepted", "tls: {enabled: true, insecure_skip_verify: true, server_name: kafka}", ""},
		{"tls.enabled that is not a boolean is rejected", "tls: {enabled: maybe}", `tls.enabled (line 7): expected true or false, found "maybe"`},

		// sasl
		{"an unknown SASL mechanism is rejected", "sasl: {mechanism: GSSAPI, username: u, password: p}", `sasl.mechanism (line 7): must be one of PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, found "GSSAPI"`},
		{"a lower-case SASL mechanism is accepted", "sasl: {mechanism: scram-sha-512, username: u, password: p}", ""},
		{"SASL without a username is rejected", "sasl: {mechanism: PLAIN, password: p}", "sasl.username (line 7): required with sasl.mechanism PLAIN"},
		{"SASL without a password is rejected", "sasl: {mechanism: SCRAM-SHA-256, username: u}", "sasl.password (line 7): required with sasl.mechanism SCRAM-SHA-256"},
		{"a SASL username without a mechanism is rejected", "sasl: {username: u, password: p}", "sasl.mechanism (line 7): required when sasl.username is set"},

		// consumer
		{"start_from other than earliest or latest is rejected", "consumer: {start_from: beginning}", `consumer.start_from (line 7): must be one of earliest or latest, found "beginning"`},
		{"start_from latest is accepted", "consumer: {start_from: latest}", ""},
		{"a session timeout under 6s is rejected", "consumer: {session_timeout: 5s}", "consumer.session_timeout (line 7): 5s must be at least 6s"},
		{"a session timeout of exactly 6s is accepted", "consumer: {session_timeout: 6s}", ""},
		{"a zero rebalance timeout is rejected", "consumer: {rebalance_timeout: 0s}", "consumer.rebalance_timeout (line 7): must be positive, found 0s"},
		{"a zero fetch_max_bytes is rejected", "consumer: {fetch_max_bytes: 0}", "consumer.fetch_max_bytes (line 7): must be positive, found 0"},
		{"a fetch_max_bytes beyond 32 bits is rejected", "consumer: {fetch_max_bytes: 3000000000}", "consumer.fetch_max_bytes (line 7): 3000000000 is out of range (at most 2147483647)"},
		{"a negative fetch_max_partition_bytes is rejected", "consumer: {fetch_max_partition_bytes: -1}", "consumer.fetch_max_partition_bytes (line 7): must be positive, found -1"},
		{"a max_poll_records that is not a number is rejected", "consumer: {max_poll_records: lots}", `consumer.max_poll_records (line 7): expected a whole number, found "lots"`},
		{"a negative max_poll_records is rejected", "consumer: {max_poll_records: -1}", "consumer.max_poll_records (line 7): must be positive, found -1"},
		{"numbers with underscores are accepted", "consumer: {max_poll_records: 1_000}", ""},

		// producer
		{"an unknown compression is rejected", "producer: {compression: brotli}", `producer.compression (line 7): must be one of none, gzip, snappy, lz4 or zstd, found "brotli"`},
		{"zstd compression is accepted", "producer: {compression: zstd}", ""},
		{"a negative linger is rejected", "producer: {linger: -1ms}", "producer.linger (line 7): must not be negative, found -1ms"},
		{"a linger of a few milliseconds is accepted", "producer: {linger: 5ms}", ""},
		{"a zero batch_max_bytes is rejected", "producer: {batch_max_bytes: 0}", "producer.batch_max_bytes (line 7): must be positive"},
		{"a zero max_buffered_records is rejected", "producer: {max_buffered_records: 0}", "producer.max_buffered_records (line 7): must be positive"},
		{"a zero max_buffered_bytes is rejected", "producer: {max_buffered_bytes: 0}", "producer.max_buffered_bytes (line 7): must be positive"},

		// checkpoint and transactions
		{"a duration without a unit is rejected", "checkpoint: {interval: 5}", `checkpoint.interval (line 7): a duration needs a unit: found 5; write "5s", "5ms" or "5m" (units: ns, us, ms, s, m, h)`},
		{"a duration that is not one is rejected", "checkpoint: {interval: soon}", `checkpoint.interval (line 7): expected a duration such as "500ms", "1s" or "1h30m" (units: ns, us, ms, s, m, h), found "soon"`},
		{"a zero checkpoint interval is rejected", "checkpoint: {interval: 0s}", "checkpoint.interval (line 7): must be positive, found 0s"},
		{"a negative checkpoint timeout is rejected", "checkpoint: {timeout: -1s}", "checkpoint.timeout (line 7): must not be negative, found -1s"},
		{"a zero max_records is rejected", "checkpoint: {max_records: 0}", "checkpoint.max_records (line 7): must be positive, found 0"},
		{"a zero transaction timeout is rejected", "transactions: {timeout: 0s}", "transactions.timeout (line 7): must be positive, found 0s"},
		{
			"a transaction timeout below interval plus timeout is rejected",
			"checkpoint: {interval: 15s, timeout: 30s}\ntransactions: {timeout: 40s}",
			"transactions.timeout (line 8): transactions.timeout (40s) must be larger than checkpoint.interval (15s) + checkpoint.timeout (30s) = 45s",
		},
		{
			"a transaction timeout equal to interval plus timeout is rejected",
			"checkpoint: {interval: 15s, timeout: 30s}\ntransactions: {timeout: 45s}",
			"transactions.timeout (45s) must be larger than",
		},
		{"a transaction timeout just above interval plus timeout is accepted", "checkpoint: {interval: 15s, timeout: 30s}\ntransactions: {timeout: 46s}", ""},
		{
			"the default transaction timeout is checked against the checkpoint",
			"checkpoint: {interval: 45s}",
			"transactions.timeout: transactions.timeout (1m by default) must be larger than checkpoint.interval (45s) + checkpoint.timeout (30s by default) = 1m15s",
		},

		// topics
		{"negative topic partitions are rejected", "topics: {partitions: -1}", "topics.partitions (line 7): must not be negative"},
		{"a replication factor of 0 is rejected", "topics: {replication_factor: 0}", "topics.replication_factor (line 7): must be -1 (the broker's default) or at least 1, found 0"},
		{"a replication factor of 3 is accepted", "topics: {replication_factor: 3, partitions: 12}", ""},
		{"topic configs with dotted names are accepted", "topics:\n  configs: {cleanup.policy: compact, retention.ms: 1000}", ""},
		{"topic configs that are not a mapping are rejected", "topics: {configs: [a]}", "topics.configs (line 7): expected a mapping of topic config names to values, found a list"},
		{"a topic config with an empty name is rejected", "topics:\n  configs: {'': x, retention.ms: 1000}", "topics.configs (line 8): a topic config name is empty"},
		{"topics to create are accepted", "topics:\n  create:\n    - {name: input, partitions: 3, configs: {cleanup.policy: compact}}\n    - name: other", ""},
		{"a topic to create without a name is rejected", "topics:\n  create: [{partitions: 3}]", "topics.create[0].name (line 8): required: the topic to create"},
		{"a topic to create with a bad name is rejected", "topics:\n  create: [{name: 'a b'}]", `topics.create[0].name (line 8): "a b" is not a valid topic name`},
		{"a topic to create twice is rejected", "topics:\n  create:\n    - {name: a}\n    - {name: a, partitions: 2}", `topics.create[1].name (line 10): topic "a" is already in topics.create[0]`},
		{"a topic to create with negative partitions is rejected", "topics:\n  create: [{name: a, partitions: -1}]", "topics.create[0].partitions (line 8): must not be negative (0 means topics.partitions, or 1), found -1"},
		{"a topic to create with partitions that are not a number is rejected", "topics:\n  create: [{name: a, partitions: many}]", `topics.create[0].partitions (line 8): expected a whole number, found "many"`},
		{"a topic to create with an empty config name is rejected", "topics:\n  create: [{name: a, configs: {'': x}}]", "topics.create[0].configs (line 8): a topic config name is empty"},
		{"topics.create that is not a list is rejected", "topics:\n  create: input", `topics.create (line 8): expected a list of topics such as [{name: input, partitions: 3}], found "input"`},
		{"a topic to create that is only a name is rejected", "topics:\n  create: [input]", `topics.create[0] (line 8): expected a mapping such as {name: input, partitions: 3}, found "input"`},

		// embedded
		{"an embedded broker port is accepted", "brokers: embedded\nembedded: {port: 9092}", ""},
		{"an embedded broker port beyond 65535 is rejected", "brokers: embedded\nembedded: {port: 70000}", "embedded.port (line 7): 70000 is not a port: use 1 to 65535, or 0 for any free one"},

		// sources
		{"no sources is rejected", "sources: ~", "sources (line 3): at least one source is required"},
		{"an empty sources mapping is rejected", "sources: {}", "sources (line 3): at least one source is required"},
		{"sources as a list is rejected", "sources: [input]", "sources (line 3): expected a mapping of source names to sources, found a list"},
		{"a source that is not a mapping is rejected", "sources:\n  in: input", `sources.in (line 4): expected a mapping such as {topics: [...]}, found "input"`},
		{"a source without topics is rejected", "sources:\n  in: {format: json}", "sources.in.topics (line 4): required"},
		{"a null source is rejected for its missing topics", "sources:\n  in:", "sources.in.topics (line 4): required"},
		{"a source with an empty topic list is rejected", "sources:\n  in: {topics: []}", "sources.in.topics (line 4): required"},
		{"a source topic given as one string is accepted", "sources:\n  in: {topics: input}", ""},
		{"an invalid source topic name is rejected", "sources:\n  in: {topics: [ok, 'bad topic']}", `sources.in.topics[1] (line 4): "bad topic" is not a valid topic name`},
		{"a topic name longer than 249 characters is rejected", "sources:\n  in: {topics: [" + long + "]}", "sources.in.topics[0] (line 4): topic name is 250 characters long; Kafka allows at most 249"},
		{"a topic named .. is rejected", "sources:\n  in: {topics: ['..']}", `sources.in.topics[0] (line 4): ".." is not a valid topic name`},
		{
			"a topic read by two sources is rejected",
			"sources:\n  a: {topics: [x]}\n  b: {topics: [x]}\nsinks:\n  out: {from: a, topic: output}",
			`sources.b.topics[0] (line 5): topic "x" is already read by sources.a`,
		},
		{"an unknown source format is rejected", "sources:\n  in: {topics: [input], format: avro}", `sources.in.format (line 4): must be one of json, string or bytes, found "avro"`},
		{"an unknown source key format is rejected", "sources:\n  in: {topics: [input], key_format: int}", `sources.in.key_format (line 4): must be one of string, json or bytes, found "int"`},
		{"string and bytes source formats are accepted", "sources:\n  in: {topics: [input], format: string, key_format: bytes}", ""},
		{"a source name with a dot is rejected", "sources:\n  a.b: {topics: [input]}", `sources.a.b (line 4): "a.b" is not a valid source name`},

		// steps
		{"a step with two operators is rejected", "steps:\n  - filter: x\n  - map: {}\n    filter: y", `steps[1] (line 9): one operator expected, found "map" and "filter"`},
		{"a step with three operators names them all", "steps:\n  - {map: {}, filter: y, dedupe: z}", `steps[0] (line 8): one operator expected, found "map", "filter" and "dedupe"`},
		{"a step with no operator is rejected", "steps:\n  - name: x", "steps[0] (line 8): one operator expected, found none"},
		{"a step that is not a mapping is rejected", "steps:\n  - filter", `steps[0] (line 8): expected a mapping with one operator key, such as {filter: ...}, found "filter"`},
		{"steps as a mapping are rejected", "steps:\n  filter: x", "steps (line 7): expected a list of steps, found a mapping"},
		{
			"the first step without from is rejected when there are several sources",
			"sources:\n  a: {topics: [x]}\n  b: {topics: [y]}\nsteps:\n  - union: {}",
			"steps[0].from (line 9): required when there are several sources (a, b)",
		},
		{
			"the first step with from is accepted when there are several sources",
			"sources:\n  a: {topics: [x]}\n  b: {topics: [y]}\nsteps:\n  - {from: [a, b], union: {}}",
			"",
		},
		{"a step reading an unknown stream is rejected", "steps:\n  - {from: nowhere, filter: x}", `steps[0].from (line 8): unknown stream "nowhere": no source or step is named "nowhere" (there are: filter1, in)`},
		{"a step reading another step's named output is accepted", "steps:\n  - {name: route, split: {hot: x}}\n  - {from: route.hot, map: {}}", ""},
		{"a step reading a later step is left to the graph builder", "steps:\n  - {from: [in, b], union: {}}\n  - {name: b, map: {}}", ""},
		{"a step named like a source is rejected", "steps:\n  - {name: in, filter: x}", `steps[0].name (line 8): name "in" is already used by sources.in; sources, steps and sinks share one namespace`},
		{"two steps with the same name are rejected", "steps:\n  - {name: s, filter: x}\n  - {name: s, filter: y}", `steps[1].name (line 9): name "s" is already used by steps[0]`},
		{"a step named like another's default name is rejected", "steps:\n  - map: {}\n  - {name: map1, filter: y}", `steps[1].name (line 9): name "map1" is already used by steps[0]`},
		{"a step name with a dot is rejected", "steps:\n  - {name: a.b, filter: x}", `steps[0].name (line 8): "a.b" is not a valid step name`},
		{"from as a mapping is rejected", "steps:\n  - {from: {a: b}, filter: x}", "steps[0].from (line 8): expected a string or a list of strings, found a mapping"},
		{"an operator's own keys are not checked", "steps:\n  - map: {whatever: 1, nested: {anything: [1, {x: y}]}}", ""},
		{"an unknown operator kind is left to the graph builder", "steps:\n  - frobnicate: x", ""},

		// sinks
		{"no sinks is rejected", "sinks: ~", "sinks (line 5): at least one sink is required"},
		{"a sink without a topic is rejected", "sinks:\n  out: {from: in}", "sinks.out.topic (line 6): required"},
		{"a sink with an invalid topic is rejected", "sinks:\n  out: {topic: 'a/b'}", `sinks.out.topic (line 6): "a/b" is not a valid topic name`},
		{"a sink writing a source topic is rejected", "sinks:\n  out: {topic: input}", `sinks.out.topic (line 6): topic "input" is also read by sources.in: the pipeline would read its own output`},
		{"a sink reading an unknown stream is rejected", "sinks:\n  out: {from: ni, topic: output}", `sinks.out.from (line 6): unknown stream "ni"`},
		{
			"a sink without from is rejected when there are several sources and no steps",
			"sources:\n  a: {topics: [x]}\n  b: {topics: [y]}",
			"sinks.out.from (line 7): required when there are several sources and no steps (a, b)",
		},
		{"a sink named like a source is rejected", "sinks:\n  in: {topic: output}", `sinks.in (line 6): name "in" is already used by sources.in`},
		{"negative sink partitions are rejected", "sinks:\n  out: {topic: output, partitions: -2}", "sinks.out.partitions (line 6): must not be negative"},
		{"sink partitions that are not a number are rejected", "sinks:\n  out: {topic: output, partitions: many}", `sinks.out.partitions (line 6): expected a whole number, found "many"`},
		{"an unknown sink format is rejected", "sinks:\n  out: {topic: output, format: xml}", `sinks.out.format (line 6): must be one of json, string or bytes, found "xml"`},
		{"an unknown sink key format is rejected", "sinks:\n  out: {topic: output, key_format: xml}", `sinks.out.key_format (line 6): must be one of string, json or bytes`},
		{"sink headers that are not a mapping are rejected", "sinks:\n  out: {topic: output, headers: [a]}", "sinks.out.headers (line 6): expected a mapping of header names to expressions, found a list"},
		{"a sink expression that is not a string is rejected", "sinks:\n  out: {topic: output, value: {a: b}}", "sinks.out.value (line 6): expected a string, found a mapping"},
		{"a sink header without an expression is rejected", "sinks:\n  out: {topic: output, headers: {trace: ~}}", "sinks.out.headers.trace (line 6): an expression is required"},
		{"a misspelt step key is not taken for a second operator", "steps:\n  - {nmae: x, filter: y}", `steps[0].nmae (line 8): unknown key (did you mean "name"?)`},
		{"a sink with key, value and headers is accepted", "sinks:\n  out: {topic: output, key: value.id, value: value, headers: {trace: value.t}}", ""},
		{"two sinks writing one topic are accepted", "sinks:\n  a: {topic: output}\n  b: {topic: output}", ""},
		{"a sink that is not a mapping is rejected", "sinks:\n  out: output", `sinks.out (line 6): expected a mapping such as {topic: ...}, found "output"`},
		{"a sink header with an empty name is rejected", "sinks:\n  out: {topic: output, headers: {'': value.x}}", "sinks.out.headers (line 6): a header name is empty"},
		{"a sink name with a dot is rejected", "sinks:\n  a.b: {topic: output}", `sinks.a.b (line 6): "a.b" is not a valid sink name: use letters, digits, "_" and "-"`},

		// one cluster
		{
			"a sink on other brokers is rejected",
			"sinks:\n  out: {topic: output, brokers: [other:9092]}",
			"sinks.out.brokers (line 6): a Kafka transaction cannot span clusters; sources, sinks and the dead-letter topic must use the top-level brokers",
		},
		{"a source with a bootstrap key on other brokers is rejected", "sources:\n  in: {topics: [input], bootstrap: 'other:9092'}", "sources.in.bootstrap (line 4): a Kafka transaction cannot span clusters"},
		{"the dead-letter topic on another cluster is rejected", "dead_letter: {topic: dlq, cluster: embedded}", "dead_letter.cluster (line 7): a Kafka transaction cannot span clusters"},
		{"a sink repeating the top-level brokers is accepted", "sinks:\n  out: {topic: output, brokers: [localhost:9092]}", ""},
		{
			"a source repeating the brokers in another order and form is accepted",
			"brokers: [a:1, b:2]\nsources:\n  in: {topics: [input], brokers: 'b:2,a:1'}",
			"",
		},

		// dead letter
		{"a dead-letter topic is accepted", "dead_letter: {topic: dlq}", ""},
		{"a dead-letter topic equal to a source topic is rejected", "dead_letter: {topic: input}", `dead_letter.topic (line 7): topic "input" is also read by sources.in`},
		{"a dead-letter topic equal to a sink topic is rejected", "dead_letter: {topic: output}", `dead_letter.topic (line 7): topic "output" is also written by sinks.out`},
		{"an invalid dead-letter topic is rejected", "dead_letter: {topic: 'd l q'}", `dead_letter.topic (line 7): "d l q" is not a valid topic name`},

		// state
		{"an unknown state backend is rejected", "state: {backend: rocksdb}", `state.backend (line 7): must be memory or pebble, found "rocksdb"`},
		{"the pebble backend without a directory is rejected", "state: {backend: pebble}", "state.dir (line 7): required with state.backend pebble"},
		{"the pebble backend with a directory is accepted", "state: {backend: pebble, dir: /var/lib/pipeline}", ""},

		// audit
		{"an audit topic equal to a source topic is rejected", "audit: {topic: input}",
			`audit.topic (line 7): topic "input" is also read by sources.in: the pipeline would read its own output`},
		{"an audit topic equal to a sink topic is rejected", "audit: {topic: output}",
			`audit.topic (line 7): topic "output" is also written by sinks.out: progress records would mix with its output`},
		{"an audit topic equal to the dead-letter topic is rejected", "audit: {topic: dlq}\ndead_letter: {topic: dlq}",
			`audit.topic (line 7): topic "dlq" is also the dead-letter topic`},
		{"an audit topic is not checked when the audit is off", "audit: {enabled: false, topic: output}", ""},
		{"source positions are off by default and accepted on", "audit: {source_positions: true}", ""},
		{"source positions without progress records are rejected", "audit: {enabled: false, source_positions: true}",
			"audit.source_positions (line 7): needs audit.enabled: the positions are checked against the progress records"},
		{"an aggregate emitting at checkpoints is accepted without source positions",
			"steps:\n  - aggregate: {fields: {n: count}, emit: checkpoint}", ""},
		{"a sink header named like a source-position header is rejected with source positions",
			"audit: {source_positions: true}\nsinks:\n  out: {topic: output, headers: {pipeline.output: value.x}}",
			`sinks.out.headers.pipeline.output (line 6): header "pipeline.output" is the one audit.source_positions sets`},
		{"a sink header named pipeline.source is accepted without source positions",
			"sinks:\n  out: {topic: output, headers: {pipeline.source: value.x}}", ""},

		// log, metrics
		{"an unknown log level is rejected", "log: {level: verbose}", `log.level (line 7): must be one of debug, info, warn or error, found "verbose"`},
		{"an unknown log format is rejected", "log: {format: xml}", `log.format (line 7): must be one of text or json, found "xml"`},
		{"debug logs in JSON are accepted", "log: {level: debug, format: json}", ""},
		{"a metrics address without a port is rejected", "metrics: {listen: localhost}", `metrics.listen (line 7): "localhost" is not a host:port address`},
		{"a metrics address on all interfaces is accepted", "metrics: {listen: ':9090'}", ""},

		// demo
		{"a demo without a topic is rejected", "demo: {rate: 5}", "demo.topic (line 7): required when demo is present"},
		{"an empty demo section is rejected", "demo: {}", "demo.topic (line 7): required when demo is present"},
		{"a demo writing a topic no source reads is rejected", "demo: {topic: other}", `demo.topic (line 7): topic "other" is not read by any source`},
		{"a demo with a zero rate is rejected", "demo: {topic: input, rate: 0}", "demo.rate (line 7): must be positive, found 0"},
		{"a demo with zero records is rejected", "demo: {topic: input, records: 0}", "demo.records (line 7): must be positive"},
		{"a demo with zero sensors is rejected", "demo: {topic: input, sensors: 0}", "demo.sensors (line 7): must be positive"},
		{"a demo with zero partitions is rejected", "demo: {topic: input, partitions: 0}", "demo.partitions (line 7): must be positive"},
		{"a demo writing the source topic is accepted", "demo: {topic: input, rate: 10, records: 100, sensors: 3, partitions: 1, seed: 42}", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := withBase(tt.yaml)
			_, err := Parse([]byte(doc), "test.yaml", noEnv)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error:\n%v\ndocument:\n%s", err, doc)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("no error, want %q\ndocument:\n%s", tt.wantErr, doc)
			case tt.wantErr != "":
				fieldErrors(t, err)
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error:\n%v\nwant it to contain:\n%s\ndocument:\n%s", err, tt.wantErr, doc)
				}
			}
		})
	}
}

// TestUnknownKeys checks that a key the configuration does not know is an
// error at every depth, with a suggestion when one is close.
func TestUnknownKeys(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		wantErr string
	}{
		{"a misspelt top-level key suggests the right one", "nmae: x", `nmae (line 7): unknown key (did you mean "name"?)`},
		{"a top-level key in the wrong case suggests the right one", "Brokers: [a:1]", `Brokers (line 7): unknown key (did you mean "brokers"?)`},
		{"an unknown top-level key far from any lists the known ones", "zzzzzzzz: 1", "zzzzzzzz (line 7): unknown key (known keys: name, brokers, embedded, instance_id, group, tls, sasl, consumer, producer, checkpoint, transactions, topics, dead_letter, log, metrics, state, audit, demo, sources, steps, sinks)"},
		{"a misspelt checkpoint key suggests the right one", "checkpoint: {intervl: 2s}", `checkpoint.intervl (line 7): unknown key (did you mean "interval"?)`},
		{"a checkpoint key with a unit suffix suggests the right one", "checkpoint: {interval_ms: 2000}", `checkpoint.interval_ms (line 7): unknown key (did you mean "interval"?)`},
		{"a misspelt transactions key suggests the right one", "transactions: {timout: 90s}", `transactions.timout (line 7): unknown key (did you mean "timeout"?)`},
		{"a nested mapping inside a section is unknown", "consumer:\n  session:\n    timeout: 10s", `consumer.session (line 8): unknown key (did you mean "session_timeout"?)`},
		{"a misspelt topics key suggests the right one", "topics: {config: {a: b}}", `topics.config (line 7): unknown key (did you mean "configs"?)`},
		{"a misspelt key of a topic to create suggests the right one", "topics:\n  create: [{name: a, partitons: 2}]", `topics.create[0].partitons (line 8): unknown key (did you mean "partitions"?)`},
		{"a misspelt embedded key suggests the right one", "embedded: {prot: 9092}", `embedded.prot (line 7): unknown key (did you mean "port"?)`},
		{"a singular topic under a source suggests topics", "sources:\n  in: {topic: input}", `sources.in.topic (line 4): unknown key (did you mean "topics"?)`},
		{"a misspelt source format suggests the right one", "sources:\n  in: {topics: [input], fromat: json}", `sources.in.fromat (line 4): unknown key (did you mean "format"?)`},
		{"a plural topics under a sink suggests topic", "sinks:\n  out: {topics: output}", `sinks.out.topics (line 6): unknown key (did you mean "topic"?)`},
		{"swapped letters in a sink key suggest the right one", "sinks:\n  out: {form: in, topic: output}", `sinks.out.form (line 6): unknown key (did you mean "from"?)`},
		{"a misspelt dead-letter key suggests the right one", "dead_letter: {topik: dlq}", `dead_letter.topik (line 7): unknown key (did you mean "topic"?)`},
		{"a misspelt tls key suggests the right one", "tls: {ca_fil: x}", `tls.ca_fil (line 7): unknown key (did you mean "ca_file"?)`},
		{"a section that is not a mapping is rejected", "checkpoint: 1s", `checkpoint (line 7): expected a mapping of checkpoint settings, found "1s"`},
		{"a setting that is a mapping is rejected", "checkpoint:\n  interval: {seconds: 1}", `checkpoint.interval (line 8): expected a duration such as "500ms", "1s" or "1h30m" (units: ns, us, ms, s, m, h), found a mapping`},
		{"a name that is a list is rejected", "name: [a, b]", "name (line 1): expected a string, found a list"},
		{"keys inside an operator spec are free", "steps:\n  - map: {anything: goes}", ""},
		{"header names are free", "sinks:\n  out: {topic: output, headers: {X-Any-Thing: value.x}}", ""},
		{"topic config names are free", "topics: {configs: {min.insync.replicas: '2'}}", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := withBase(tt.yaml)
			_, err := Parse([]byte(doc), "test.yaml", noEnv)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error:\n%v\ndocument:\n%s", err, doc)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error:\n%v\nwant it to contain:\n%s\ndocument:\n%s", err, tt.wantErr, doc)
			}
			if n := len(fieldErrors(t, err)); n != 1 {
				t.Errorf("got %d errors, want only the unknown key:\n%v", n, err)
			}
		})
	}
}

func TestValidateHandBuiltConfig(t *testing.T) {
	c := &Config{
		Name:         "p",
		Brokers:      Brokers{Addrs: []string{"kafka:9092"}},
		InstanceID:   "i",
		Group:        "p",
		Consumer:     Consumer{StartFrom: "earliest", SessionTimeout: 45 * time.Second, RebalanceTimeout: time.Minute, FetchMaxBytes: 1, FetchMaxPartitionBytes: 1, MaxPollRecords: 1},
		Producer:     Producer{Compression: "none", BatchMaxBytes: 1, MaxBufferedRecords: 1, MaxBufferedBytes: 1},
		Checkpoint:   Checkpoint{Interval: time.Second, Timeout: time.Second, MaxRecords: 1, FailureTimeout: time.Minute},
		Transactions: Transactions{IDPrefix: "p", Timeout: 3 * time.Second},
		Topics:       Topics{ReplicationFactor: -1},
		Sources:      []Source{{Name: "in", Topics: []string{"input"}, Format: "json", KeyFormat: "string", Path: "sources.in"}},
		Steps:        []Step{{Name: "f", From: []string{"in"}, Kind: "filter", Spec: "true", Path: "steps[0]"}},
		Sinks:        []Sink{{Name: "out", From: "f", Topic: "output", Format: "json", KeyFormat: "string", Path: "sinks.out"}},
		Log:          Log{Level: "info", Format: "text"},
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}

	c.Transactions.Timeout = 2 * time.Second
	c.Sinks[0].Topic = "input"
	err := c.Validate()
	want := "sinks.out.topic: topic \"input\" is also read by sources.in: the pipeline would read its own output\n" +
		"transactions.timeout: transactions.timeout (2s) must be larger than checkpoint.interval (1s) + checkpoint.timeout (1s) = 2s"
	if err == nil || err.Error() != want {
		t.Fatalf("Validate = %v, want\n%s", err, want)
	}
	if c.Line("sinks.out.topic") != 0 {
		t.Errorf("Line of a hand-built config = %d, want 0", c.Line("sinks.out.topic"))
	}
}
