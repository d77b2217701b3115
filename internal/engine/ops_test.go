package engine

import (
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/offsets"
	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/ops"
	"github.com/pipeline-run/pipeline/wire"
)

func noEnv(string) (string, bool) { return "", false }

// parseConfig parses a test pipeline: body is everything but name and brokers.
func parseConfig(t testing.TB, body string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte("name: t\nbrokers: [127.0.0.1:9]\n"+body), "test.yaml", noEnv)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// offline runs records through a graph without Kafka: what the sinks and the
// dead-letter topic would produce is collected instead.
type offline struct {
	rt  *runtime
	mu  sync.Mutex
	out []*kgo.Record
}

func newOffline(t testing.TB, body string, reg *pipeline.Registry) *offline {
	t.Helper()
	cfg := parseConfig(t, body)
	g, err := Build(cfg, reg)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	p := &Pipeline{cfg: cfg, g: g, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	o := &offline{}
	o.rt = &runtime{p: p, g: g, cfg: cfg, log: p.log, tasks: map[pipeline.TaskID]*task{}, parts: map[pipeline.TaskID]map[string]bool{},
		stages: make([]*stage, len(g.nodes)), track: offsets.NewTracker()}
	o.rt.produce = func(r *kgo.Record) {
		o.mu.Lock()
		o.out = append(o.out, r)
		o.mu.Unlock()
	}
	for _, n := range g.nodes {
		if n.parallel != nil {
			st, err := startStage(o.rt, n.parallel)
			if err != nil {
				t.Fatal(err)
			}
			o.rt.stages[n.idx] = st
		}
	}
	t.Cleanup(o.rt.shutdown)
	return o
}

// feed hands records to their tasks as one poll would, then runs the
// barrier, and returns what was produced since the last call.
func (o *offline) feed(recs ...*kgo.Record) []*kgo.Record {
	byTP := map[string]map[int32][]*kgo.Record{}
	for _, r := range recs {
		if byTP[r.Topic] == nil {
			byTP[r.Topic] = map[int32][]*kgo.Record{}
		}
		byTP[r.Topic][r.Partition] = append(byTP[r.Topic][r.Partition], r)
	}
	var ps []kgo.FetchTopicPartition
	for topic, parts := range byTP {
		for p, rs := range parts {
			ps = append(ps, kgo.FetchTopicPartition{Topic: topic, FetchPartition: kgo.FetchPartition{Partition: p, Records: rs}})
		}
	}
	o.rt.dispatch(ps)
	o.rt.barrier()
	o.mu.Lock()
	defer o.mu.Unlock()
	out := o.out
	o.out = nil
	return out
}

func rec(topic string, p int32, off int64, key, value string) *kgo.Record {
	r := &kgo.Record{Topic: topic, Partition: p, Offset: off, Value: []byte(value)}
	if key != "" {
		r.Key = []byte(key)
	}
	return r
}

// show renders produced records as "topic key value" lines, sorted.
func show(rs []*kgo.Record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		s := fmt.Sprintf("%s %s %s", r.Topic, r.Key, r.Value)
		for _, h := range r.Headers {
			if h.Key == wire.HeaderError {
				continue
			}
			s += fmt.Sprintf(" %s=%s", h.Key, h.Value)
		}
		out[i] = s
	}
	sort.Strings(out)
	return out
}

func TestOperators(t *testing.T) {
	const src = "sources: {in: {topics: [in]}}\nsinks: {out: {topic: out}}\ndead_letter: {topic: dlq}\n"
	tests := []struct {
		name  string
		steps string
		in    []*kgo.Record
		want  []string
	}{{
		name:  "a filter keeps only the records its predicate holds for",
		steps: `[{filter: "value.t > 30"}]`,
		in:    []*kgo.Record{rec("in", 0, 0, "a", `{"t":31}`), rec("in", 0, 1, "b", `{"t":5}`)},
		want:  []string{`out a {"t":31}`},
	}, {
		name:  "a map sets key and value from the record as it came in",
		steps: `[{map: {key: value.id, value: "{id: value.id, k: key}"}}]`,
		in:    []*kgo.Record{rec("in", 0, 0, "old", `{"id":"x"}`)},
		want:  []string{`out x {"id":"x","k":"old"}`},
	}, {
		name:  "a map given a bare string replaces the value only",
		steps: `[{map: "value.n * 2"}]`,
		in:    []*kgo.Record{rec("in", 0, 0, "k", `{"n":21}`)},
		want:  []string{`out k 42`},
	}, {
		name:  "a map sets headers",
		steps: `[{map: {headers: {src: "topic + '/' + string(partition)"}}}]`,
		in:    []*kgo.Record{rec("in", 3, 0, "k", `1`)},
		want:  []string{`out k 1 src=in/3`},
	}, {
		name:  "a flat_map emits one record per element and keeps the key",
		steps: `[{flat_map: "value.items"}]`,
		in:    []*kgo.Record{rec("in", 0, 0, "k", `{"items":[1,2,3]}`)},
		want:  []string{`out k 1`, `out k 2`, `out k 3`},
	}, {
		name:  "a flat_map with a key expression re-keys each element",
		steps: `[{flat_map: {values: "value.items", key: "value.id"}}]`,
		in:    []*kgo.Record{rec("in", 0, 0, "k", `{"items":[{"id":"a"},{"id":"b"}]}`)},
		want:  []string{`out a {"id":"a"}`, `out b {"id":"b"}`},
	}, {
		name:  "a pass-through writes the input bytes untouched",
		steps: `[]`,
		in:    []*kgo.Record{rec("in", 0, 0, "k", `{ "spaced" :  1 }`)},
		want:  []string{`out k { "spaced" :  1 }`},
	}, {
		name:  "an undecodable value goes to the dead-letter topic with its position",
		steps: `[{filter: "value.t > 1"}]`,
		in:    []*kgo.Record{rec("in", 2, 7, "k", `{"t":`), rec("in", 2, 8, "k", `{"t":2}`)},
		want: []string{`dlq k {"t": pipeline.step=filter1 pipeline.source.topic=in pipeline.source.partition=2 pipeline.source.offset=7`,
			`out k {"t":2}`},
	}, {
		name:  "an expression failing at run time goes to the dead-letter topic",
		steps: `[{map: "value.a.b.c"}]`,
		in:    []*kgo.Record{rec("in", 0, 4, "k", `{"a":1}`)},
		want:  []string{`dlq k {"a":1} pipeline.step=map1 pipeline.source.topic=in pipeline.source.partition=0 pipeline.source.offset=4`},
	}, {
		name:  "a filter whose predicate is not a bool sends the record to the dead-letter topic",
		steps: `[{filter: "value.t"}]`,
		in:    []*kgo.Record{rec("in", 0, 0, "k", `{"t":3}`)},
		want:  []string{`dlq k {"t":3} pipeline.step=filter1 pipeline.source.topic=in pipeline.source.partition=0 pipeline.source.offset=0`},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := newOffline(t, src+"steps: "+tc.steps+"\n", nil)
			got := show(o.feed(tc.in...))
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
		})
	}
}

func TestSplitRouteAndUnion(t *testing.T) {
	const cfg = `
sources: {in: {topics: [in]}}
steps:
  - name: s
    split: {hot: "value > 30", odd: "value % 2 == 1"}
  - name: r
    from: in
    route: [{big: "value > 100"}, {hot: "value > 30"}]
  - name: all
    from: [s.hot, r.big]
    union: {}
sinks:
  hot: {from: s.hot, topic: hot}
  odd: {from: s.odd, topic: odd}
  cold: {from: s.default, topic: cold}
  rbig: {from: r.big, topic: rbig}
  rhot: {from: r.hot, topic: rhot}
  rrest: {from: r, topic: rrest}
  everything: {from: all, topic: all}
`
	o := newOffline(t, cfg, nil)
	got := show(o.feed(rec("in", 0, 0, "a", "31"), rec("in", 0, 1, "b", "4"), rec("in", 0, 2, "c", "101")))
	want := []string{
		"all a 31", "all c 101", "all c 101", // s.hot and r.big both carry c
		"cold b 4",
		"hot a 31", "hot c 101",
		"odd a 31", "odd c 101",
		"rbig c 101", "rhot a 31", "rrest b 4",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestBuildErrorsNameTheYAMLPath(t *testing.T) {
	tests := []struct {
		name string
		body string
		want []string
	}{{
		name: "an expression that does not compile names its path and the parser's message",
		body: "sources: {in: {topics: [in]}}\nsteps:\n  - filter: \"value.t >\"\nsinks: {out: {topic: out}}\n",
		want: []string{"steps[0].filter (line 5): expression \"value.t >\""},
	}, {
		name: "an unknown operator lists the known ones",
		body: "sources: {in: {topics: [in]}}\nsteps: [{mapp: x}]\nsinks: {out: {topic: out}}\n",
		want: []string{"steps[0].mapp", `unknown operator "mapp" (known: aggregate, broadcast, broadcast_join, co_group, connect, dedupe, filter, flat_map, interval_join, key_by, map, parallel, route, split, table_join, union, window, window_join)`},
	}, {
		name: "a sink reading an output that does not exist lists the outputs",
		body: "sources: {in: {topics: [in]}}\nsteps: [{name: s, split: {hot: \"true\"}}]\nsinks: {out: {from: s.cold, topic: out}}\n",
		want: []string{"sinks.out.from", `s has no output "cold" (outputs: hot)`},
	}, {
		name: "a step reading a later step is refused",
		body: "sources: {in: {topics: [in]}}\nsteps: [{name: a, from: b, map: x}, {name: b, map: x}]\nsinks: {out: {from: a, topic: out}}\n",
		want: []string{"steps[0].from", `no source or earlier step named "b"`},
	}, {
		name: "a step nobody reads is reported",
		body: "sources: {in: {topics: [in]}}\nsteps: [{name: a, map: x}, {name: b, from: in, map: x}]\nsinks: {out: {from: b, topic: out}}\n",
		want: []string{"steps[0]", `nothing reads the output of step "a"`},
	}, {
		name: "a parallel stage after another is refused",
		body: "sources: {in: {topics: [in]}}\nsteps: [{parallel: {map: x}}, {parallel: {map: x}}]\nsinks: {out: {topic: out}}\n",
		want: []string{"steps[1].parallel", "cannot read the output of another parallel stage"},
	}, {
		name: "a parallel stage needs exactly one step",
		body: "sources: {in: {topics: [in]}}\nsteps: [{parallel: {workers: 2}}]\nsinks: {out: {topic: out}}\n",
		want: []string{"steps[0].parallel", "expected exactly one step"},
	}, {
		name: "unknown keys in an operator's settings are refused",
		body: "sources: {in: {topics: [in]}}\nsteps: [{map: {vaule: x}}]\nsinks: {out: {topic: out}}\n",
		want: []string{"steps[0].map.vaule", "unknown key"},
	}, {
		name: "a bad sink expression names the sink",
		body: "sources: {in: {topics: [in]}}\nsinks: {out: {topic: out, key: \"value.(\"}}\n",
		want: []string{"sinks.out.key"},
	}, {
		name: "every problem is reported, not just the first",
		body: "sources: {in: {topics: [in]}}\nsteps: [{filter: \"1 +\"}, {map: {vaule: x}}]\nsinks: {out: {topic: out, value: \"(\"}}\n",
		want: []string{"steps[0].filter", "steps[1].map.vaule", "sinks.out.value"},
	}, {
		name: "source positions with an aggregate emitting at checkpoints are refused",
		body: "audit: {source_positions: true}\nsources: {in: {topics: [in]}}\nsteps:\n  - aggregate:\n      fields: {n: count}\n      emit: checkpoint\nsinks: {out: {topic: out}}\n",
		want: []string{"steps[0].aggregate.emit (line 8): emit: checkpoint writes one record for many inputs, which has no single source position",
			"(use emit: update, or turn audit.source_positions off)"},
	}, {
		name: "a window on a stream a map re-keyed is refused",
		body: "sources: {in: {topics: [in]}}\nsteps:\n  - {name: m, map: {key: value.user}}\n  - window: {tumbling: 1m, fields: {n: count}}\nsinks: {out: {topic: out}}\n",
		want: []string{"steps[1] (line 6): its records were re-keyed by step \"m\"", "re-key with a key_by step"},
	}, {
		name: "a sliding window's slide larger than its size",
		body: "sources: {in: {topics: [in]}}\nsteps:\n  - window:\n      sliding: {size: 1m, slide: 5m}\n      fields: {n: count}\nsinks: {out: {topic: out}}\n",
		want: []string{"steps[0].window.sliding.slide (line 6): the slide (5m0s) is larger than the size (1m0s)"},
	}, {
		name: "a session gap of 0",
		body: "sources: {in: {topics: [in]}}\nsteps:\n  - window:\n      session: {gap: 0}\n      fields: {n: count}\nsinks: {out: {topic: out}}\n",
		want: []string{"steps[0].window.session.gap", "the session gap must be at least 1ms"},
	}, {
		name: "a lateness without event time",
		body: "sources: {in: {topics: [in]}}\nsteps:\n  - window:\n      tumbling: 1m\n      time: processing\n      allowed_lateness: 10s\n      fields: {n: count}\nsinks: {out: {topic: out}}\n",
		want: []string{"steps[0].window.allowed_lateness (line 8): allowed_lateness needs event time"},
	}, {
		name: "a window needs exactly one kind, and fields not named like the result's own",
		body: "sources: {in: {topics: [in]}}\nsteps:\n  - window:\n      tumbling: 1m\n      session: {gap: 1m}\n      emit: sometimes\n      fields: {key: count}\nsinks: {out: {topic: out}}\n",
		want: []string{"steps[0].window (line 5): give exactly one window kind", "steps[0].window.emit (line 8): expected close or {early: 10s}",
			`steps[0].window.fields.key (line 9): "key" is a name of the result itself`},
	}, {
		name: "a window reading a parallel stage is refused",
		body: "sources: {in: {topics: [in]}}\nsteps:\n  - parallel: {map: \"value\"}\n  - window: {tumbling: 1m, fields: {n: count}}\nsinks: {out: {topic: out}}\n",
		want: []string{"steps[1] (line 6): a step on event time cannot read from a parallel stage", "put a key_by between them"},
	}, {
		name: "session windows refuse reduce",
		body: "sources: {in: {topics: [in]}}\nsteps:\n  - window:\n      session: {gap: 1m}\n      fields: {r: {reduce: \"state + 1\", init: \"0\"}}\nsinks: {out: {topic: out}}\n",
		want: []string{"steps[0].window.fields.r", "reduce cannot be used in session windows"},
	}, {
		name: "an interval join reads two streams, lower before upper, of a known type",
		body: "sources: {in: {topics: [in]}}\nsteps:\n  - interval_join: {lower: 5m, upper: -1m, type: sideways, late: keep}\nsinks: {out: {topic: out}}\n",
		want: []string{"steps[0].interval_join (line 5): an interval join reads two streams, the left and the right, keyed alike: give them as from: [left, right] (found 1)",
			"steps[0].interval_join.upper (line 5): upper (-1m0s) is before lower (5m0s)",
			`steps[0].interval_join.type (line 5): must be inner (pairs only), left (and left records that found no pair) or outer`,
			`steps[0].interval_join.late (line 5): must be drop`},
	}, {
		name: "an interval join needs its bounds",
		body: "sources: {a: {topics: [a]}, b: {topics: [b]}}\nsteps:\n  - {from: [a, b], interval_join: {upper: 1m}}\nsinks: {out: {topic: out}}\n",
		want: []string{"steps[0].interval_join.lower: required: the earliest a right record may be after a left one"},
	}, {
		name: "a table join reads a stream and a table, of a known type",
		body: "sources: {in: {topics: [in]}}\nsteps:\n  - table_join: {type: outer, late: keep}\nsinks: {out: {topic: out}}\n",
		want: []string{"steps[0].table_join (line 5): a table join reads two streams, the stream and the table's changelog, keyed alike: give them as from: [stream, table] (found 1)",
			`steps[0].table_join.type (line 5): must be inner (records whose key has a row) or left`,
			`steps[0].table_join.late (line 5): must be drop`},
	}, {
		name: "a window join reads two streams, a session gap is more than 0, a co_group has no type",
		body: "sources: {in: {topics: [in]}}\nsteps:\n  - window_join: {session: {gap: 0}, type: full}\n  - co_group: {tumbling: 1m, type: left}\nsinks: {out: {topic: out}}\n",
		want: []string{"steps[0].window_join (line 5): a window join reads two streams",
			"steps[0].window_join.session.gap (line 5): the session gap must be at least 1ms",
			`steps[0].window_join.type (line 5): must be inner`,
			"steps[1].co_group.type (line 6): a co_group has no type"},
	}, {
		name: "connect needs state fields and a rule per input that does something",
		body: "sources: {a: {topics: [a]}, b: {topics: [b]}}\nsteps:\n  - from: [a, b]\n    connect:\n      state: [limit]\n      on:\n        - set: {limt: value.max}\n        - when: value.temp > 1\nsinks: {out: {topic: out}}\n",
		want: []string{`steps[0].connect.on[0].set.limt (line 9): "limt" is not a state field (state: [limit])`,
			"steps[0].connect.on[1] (line 10): a rule that neither sets a field nor emits does nothing"},
	}, {
		name: "connect reads two streams, a rule each",
		body: "sources: {a: {topics: [a]}}\nsteps:\n  - connect: {state: [x], on: [{emit: value}, {emit: value}]}\nsinks: {out: {topic: out}}\n",
		want: []string{"steps[0].connect (line 5): connect reads two or more streams", "steps[0].connect.on (line 5): one rule per input, in the order of from: found 2 rules for 1 inputs"},
	}, {
		name: "broadcast takes no settings; a broadcast join reads two streams",
		body: "sources: {in: {topics: [in]}}\nsteps:\n  - {name: b, broadcast: {partitions: 3}}\n  - {from: in, broadcast_join: {type: outer}}\nsinks: {out: {topic: out}}\n",
		want: []string{"steps[0].broadcast (line 5): broadcast takes no settings",
			"steps[1].broadcast_join (line 6): a broadcast join reads two streams",
			`steps[1].broadcast_join.type (line 6): must be inner`},
	}, {
		name: "a broadcast join's table must come through a broadcast step",
		body: "sources: {in: {topics: [in]}, limits: {topics: [limits]}}\nsteps:\n  - {from: [in, limits], broadcast_join: {key: value.sensor}}\nsinks: {out: {topic: out}}\n",
		want: []string{"steps[0] (line 5): its second input, limits, is not a broadcast step", "broadcast: {}"},
	}, {
		name: "a source's event time expression is compiled",
		body: "sources: {in: {topics: [in], event_time: {from: \"value.ts +\"}}}\nsinks: {out: {topic: out}}\n",
		want: []string{"sources.in.event_time.from (line 3)"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := parseConfig(t, tc.body)
			_, err := Build(cfg, nil)
			if err == nil {
				t.Fatal("Build succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not mention %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestSourcePositionsAcceptStepsWritingARecordPerInput(t *testing.T) {
	cfg := parseConfig(t, "audit: {source_positions: true}\nsources: {in: {topics: [in]}}\nsteps:\n  - flat_map: value.items\n"+
		"  - {name: r, split: {a: \"value.n > 1\"}}\n  - {from: r.a, aggregate: {fields: {n: count}, emit: update}}\nsinks: {out: {topic: out}}\n")
	if _, err := Build(cfg, nil); err != nil {
		t.Fatal(err)
	}
}

// upper is a custom operator registered through the public API.
type upper struct{}

func (upper) Outputs() []string                                      { return nil }
func (upper) NewOperator(pipeline.TaskID) (pipeline.Operator, error) { return upperOp{}, nil }
func (upperOp) Process(ctx pipeline.Context, r *pipeline.Record) error {
	v, err := r.Value.Get()
	if err != nil {
		return err
	}
	s, ok := v.(string)
	if !ok {
		return fmt.Errorf("want a string, got %T", v)
	}
	r.Value.Set(strings.ToUpper(s))
	ctx.Emit(r)
	return nil
}

type upperOp struct{}

func TestCustomOperatorsUseTheSameAPI(t *testing.T) {
	reg := ops.NewRegistry()
	if err := reg.Register("upper", func(s *pipeline.Spec) (pipeline.Definition, error) { return upper{}, nil }); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register("map", func(s *pipeline.Spec) (pipeline.Definition, error) { return upper{}, nil }); err == nil {
		t.Fatal("registering a built-in kind twice succeeded")
	}
	o := newOffline(t, "sources: {in: {topics: [in], format: string}}\nsteps: [{upper: {}}, {parallel: {workers: 3, upper: {}}}]\nsinks: {out: {topic: out, format: string}}\n", reg)
	got := show(o.feed(rec("in", 0, 0, "k", "hello")))
	if len(got) != 1 || got[0] != "out k HELLO" {
		t.Fatalf("got %v", got)
	}
}

// recH is rec with headers, given as name, value pairs.
func recH(topic string, off int64, key, value string, headers ...string) *kgo.Record {
	r := rec(topic, 0, off, key, value)
	for i := 0; i+1 < len(headers); i += 2 {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: headers[i], Value: []byte(headers[i+1])})
	}
	return r
}

// showExact renders produced records as "topic key value" lines with the
// key and value quoted, then every header in order, the error included.
func showExact(rs []*kgo.Record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		s := fmt.Sprintf("%s %q %q", r.Topic, r.Key, r.Value)
		for _, h := range r.Headers {
			s += fmt.Sprintf(" %s=%s", h.Key, h.Value)
		}
		out[i] = s
	}
	return out
}

func TestFormatsAndHeaders(t *testing.T) {
	const in = "sources: {in: {topics: [in]}}\n"
	const dlq = "dead_letter: {topic: dlq}\n"
	const pos = " pipeline.source.topic=in pipeline.source.partition=0 pipeline.source.offset=0"
	tests := []struct {
		name string
		body string
		in   []*kgo.Record
		want []string
	}{{
		name: "a bytes source hands raw bytes to expressions and a bytes sink writes them unchanged",
		body: "sources: {in: {topics: [in], format: bytes}}\nsteps: [{filter: \"len(value) == 3\"}, {map: value}]\nsinks: {out: {topic: out, format: bytes}}\n",
		in:   []*kgo.Record{rec("in", 0, 0, "k", "\xff\x00{"), rec("in", 0, 1, "k", "ab")},
		want: []string{`out "k" "\xff\x00{"`},
	}, {
		name: "a string source reads text that is not JSON and a JSON sink quotes it",
		body: "sources: {in: {topics: [in], format: string}}\nsteps: [{map: \"value + '!'\"}]\nsinks: {out: {topic: out}}\n",
		in:   []*kgo.Record{rec("in", 0, 0, "k", "hi")},
		want: []string{`out "k" "\"hi!\""`},
	}, {
		name: "a string sink writes a string result as it is",
		body: in + "steps: [{map: value.name}]\nsinks: {out: {topic: out, format: string}}\n",
		in:   []*kgo.Record{rec("in", 0, 0, "k", `{"name":"ann"}`)},
		want: []string{`out "k" "ann"`},
	}, {
		name: "key_format json decodes the key for expressions and an unchanged key is written as read",
		body: "sources: {in: {topics: [in], key_format: json}}\nsteps: [{filter: \"key.id == 'a'\"}]\nsinks: {out: {topic: out}}\n",
		in:   []*kgo.Record{rec("in", 0, 0, `{"id": "a"}`, `1`), rec("in", 0, 1, `{"id":"b"}`, `2`)},
		want: []string{`out "{\"id\": \"a\"}" "1"`},
	}, {
		name: "a key read as json and re-keyed from a field is written as a string",
		body: "sources: {in: {topics: [in], key_format: json}}\nsteps: [{map: {key: key.id}}]\nsinks: {out: {topic: out}}\n",
		in:   []*kgo.Record{rec("in", 0, 0, `{"id":"a"}`, `1`)},
		want: []string{`out "a" "1"`},
	}, {
		name: "a record without a key has the key '' as a string",
		body: in + "steps: [{filter: \"key == ''\"}]\nsinks: {out: {topic: out}}\n",
		in:   []*kgo.Record{rec("in", 0, 0, "", `1`), rec("in", 0, 1, "k", `2`)},
		want: []string{`out "" "1"`},
	}, {
		name: "a record without a key has the key nil as JSON",
		body: "sources: {in: {topics: [in], key_format: json}}\nsteps: [{filter: \"key == nil\"}]\nsinks: {out: {topic: out}}\n",
		in:   []*kgo.Record{rec("in", 0, 0, "", `1`), rec("in", 0, 1, `"k"`, `2`)},
		want: []string{`out "" "1"`},
	}, {
		name: "a sink with key_format json encodes a new key as JSON",
		body: in + "steps: [{map: {key: \"{id: value.id}\"}}]\nsinks: {out: {topic: out, key_format: json}}\n",
		in:   []*kgo.Record{rec("in", 0, 0, "k", `{"id":"x"}`)},
		want: []string{`out "{\"id\":\"x\"}" "{\"id\":\"x\"}"`},
	}, {
		name: "a filter reads headers, the last of a repeated one counting",
		body: in + "steps: [{filter: \"headers.h == 'x'\"}]\nsinks: {out: {topic: out}}\n",
		in: []*kgo.Record{recH("in", 0, "a", "1", "h", "x"), recH("in", 1, "b", "2", "h", "y"), recH("in", 2, "c", "3"),
			recH("in", 3, "d", "4", "h", "y", "h", "x"), recH("in", 4, "e", "5", "h", "x", "h", "y"), recH("in", 5, "f", "6", "g", "x")},
		want: []string{`out "a" "1" h=x`, `out "d" "4" h=y h=x`},
	}, {
		name: "a missing header reads as an empty string",
		body: in + "steps: [{filter: \"headers.h == ''\"}]\nsinks: {out: {topic: out}}\n",
		in:   []*kgo.Record{recH("in", 0, "a", "1"), recH("in", 1, "b", "2", "h", "x"), recH("in", 2, "c", "3", "g", "x")},
		want: []string{`out "a" "1"`, `out "c" "3" g=x`},
	}, {
		name: "a sink writes its key and header expressions after the record's own headers",
		body: in + "sinks: {out: {topic: out, key: value.id, headers: {trace: headers.h, n: value.n}}}\n",
		in:   []*kgo.Record{recH("in", 0, "old", `{"id":"a","n":3}`, "h", "x")},
		want: []string{`out "a" "{\"id\":\"a\",\"n\":3}" h=x n=3 trace=x`},
	}, {
		name: "a sink header named like a record header is added, not replaced",
		body: in + "sinks: {out: {topic: out, headers: {h: \"'new'\"}}}\n",
		in:   []*kgo.Record{recH("in", 0, "k", `1`, "h", "old")},
		want: []string{`out "k" "1" h=old h=new`},
	}, {
		name: "a string sink writes a map with Go's %v, as documented",
		body: in + "steps: [{map: \"{a: value.n}\"}]\nsinks: {out: {topic: out, format: string}}\n",
		in:   []*kgo.Record{rec("in", 0, 0, "k", `{"n":1}`)},
		want: []string{`out "k" "map[a:1]"`},
	}, {
		name: "a bytes sink given a map sends the input to the dead-letter topic",
		body: in + "steps: [{map: \"{a: value.n}\"}]\nsinks: {out: {topic: out, format: bytes}}\n" + dlq,
		in:   []*kgo.Record{recH("in", 0, "k", `{"n":1}`, "h", "x")},
		want: []string{`dlq "k" "{\"n\":1}" h=x pipeline.error=value: cannot write map[string]interface {} as bytes pipeline.step=out` + pos},
	}, {
		name: "a bytes sink whose value expression yields a number sends the input to the dead-letter topic",
		body: in + "sinks: {out: {topic: out, value: value.n, format: bytes}}\n" + dlq,
		in:   []*kgo.Record{rec("in", 0, 0, "k", `{"n":1}`)},
		want: []string{`dlq "k" "{\"n\":1}" pipeline.error=value: cannot write int as bytes pipeline.step=out` + pos},
	}, {
		name: "a bytes key_format sink given a map key sends the input to the dead-letter topic",
		body: in + "sinks: {out: {topic: out, key: value, key_format: bytes}}\n" + dlq,
		in:   []*kgo.Record{rec("in", 0, 0, "k", `{"n":1}`)},
		want: []string{`dlq "k" "{\"n\":1}" pipeline.error=key: cannot write map[string]interface {} as bytes pipeline.step=out` + pos},
	}, {
		name: "a key that is not JSON under key_format json sends the input to the dead-letter topic",
		body: "sources: {in: {topics: [in], key_format: json}}\nsteps: [{filter: \"key.id == 'a'\"}]\nsinks: {out: {topic: out}}\n" + dlq,
		in:   []*kgo.Record{rec("in", 0, 0, "a", `1`)},
		want: []string{`dlq "a" "1" pipeline.error=key: decoding: invalid JSON at byte 0: unexpected character 'a' pipeline.step=filter1` + pos},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := newOffline(t, tc.body, nil)
			got := showExact(o.feed(tc.in...))
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
		})
	}
}
