package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/broker"
	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/ops"
	"github.com/pipeline-run/pipeline/pipeline/optest"
	"github.com/pipeline-run/pipeline/pipeline/state"
	"github.com/pipeline-run/pipeline/runner"
)

// The table test calls apply, which is Process without the Emit, on
// records built with pipeline.RawValue; TestMaskProcessEmits calls Process
// with optest's recording Context; TestMaskInARunningPipeline runs it in a
// pipeline on the embedded broker.

func newTestMask(t *testing.T, fields ...string) *mask {
	t.Helper()
	m := &mask{with: defaultMask}
	for _, f := range fields {
		m.fields = append(m.fields, f)
		m.paths = append(m.paths, strings.Split(f, "."))
	}
	return m
}

func TestMask(t *testing.T) {
	tests := []struct {
		name    string
		fields  []string
		value   string
		want    string // the bytes written; "" with wantErr
		wantErr string
	}{
		{
			name:   "a top-level field is replaced",
			fields: []string{"email"},
			value:  `{"email":"ada@example.com","n":1}`,
			want:   `{"email":"***","n":1}`,
		},
		{
			name:   "a nested field is replaced and its siblings kept",
			fields: []string{"card.number"},
			value:  `{"card":{"number":"4111111111111111","brand":"visa"},"id":7}`,
			want:   `{"card":{"brand":"visa","number":"***"},"id":7}`,
		},
		{
			name:   "a field of any type is replaced whole",
			fields: []string{"address"},
			value:  `{"address":{"street":"1 Main St"}}`,
			want:   `{"address":"***"}`,
		},
		{
			name:   "a record with nothing to mask is written byte for byte",
			fields: []string{"email", "card.number"},
			value:  `{ "id" : 7,  "card": null }`,
			want:   `{ "id" : 7,  "card": null }`,
		},
		{
			name:   "a null value passes",
			fields: []string{"email"},
			value:  ``,
			want:   ``,
		},
		{
			name:    "a value that is not an object fails the record",
			fields:  []string{"email"},
			value:   `["ada@example.com"]`,
			wantErr: "mask: the value is a list, not a JSON object",
		},
		{
			name:    "a path through a string fails the record",
			fields:  []string{"card.number"},
			value:   `{"card":"4111111111111111"}`,
			wantErr: "mask card.number: card is a string, not an object",
		},
		{
			name:    "a value that is not JSON fails the record",
			fields:  []string{"email"},
			value:   `{"email":`,
			wantErr: "value: decoding: invalid JSON at byte 9: unexpected end of input",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newTestMask(t, tt.fields...)
			var raw []byte
			if tt.value != "" {
				raw = []byte(tt.value)
			}
			r := &pipeline.Record{Value: pipeline.RawValue(raw, pipeline.JSON)}
			err := m.apply(r)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("apply: got error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("apply: %v", err)
			}
			got, err := r.Value.Encode(pipeline.JSON)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Fatalf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func TestMaskLeavesSharedValuesAlone(t *testing.T) {
	// Record.Clone shares the decoded value: a split sends the same
	// object down two branches. Masking one must not change the other.
	m := newTestMask(t, "card.number")
	r := &pipeline.Record{Value: pipeline.RawValue([]byte(`{"card":{"number":"4111"}}`), pipeline.JSON)}
	if _, err := r.Value.Get(); err != nil {
		t.Fatal(err)
	}
	c := r.Clone()
	if err := m.apply(c); err != nil {
		t.Fatal(err)
	}
	orig, _ := r.Value.Encode(pipeline.JSON)
	masked, _ := c.Value.Encode(pipeline.JSON)
	if string(orig) != `{"card":{"number":"4111"}}` || string(masked) != `{"card":{"number":"***"}}` {
		t.Fatalf("original %s, masked %s", orig, masked)
	}
}

func TestMaskProcessEmits(t *testing.T) {
	m := newTestMask(t, "email")
	ctx := optest.NewContext(t)
	for _, v := range []string{`{"email":"a@b","n":1}`, `{"n":2}`} {
		if err := m.Process(ctx, &pipeline.Record{Value: pipeline.RawValue([]byte(v), pipeline.JSON)}); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, r := range ctx.Emitted("") {
		b, err := r.Value.Encode(pipeline.JSON)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(b))
	}
	if want := []string{`{"email":"***","n":1}`, `{"n":2}`}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("emitted %q, want %q", got, want)
	}
}

func buildWithMask(t *testing.T, yaml string) error {
	t.Helper()
	reg := ops.NewRegistry()
	if err := reg.Register("mask", newMask); err != nil {
		t.Fatal(err)
	}
	_, err := runner.Parse([]byte(yaml), "test.yaml", func(string) (string, bool) { return "", false }, reg)
	return err
}

func TestMaskSpecErrorsNameTheYAMLPath(t *testing.T) {
	const head = "name: t\nbrokers: embedded\nsources: {in: {topics: [in]}}\nsinks: {out: {topic: out}}\nsteps:\n"
	tests := []struct {
		name string
		step string
		want string // "" for a valid spec; a path absent from the file has no line
	}{
		{"fields and a mask string are accepted", `  - mask: {fields: [email, card.number], with: "[hidden]"}`, ""},
		{"with may be empty", `  - mask: {fields: [email], with: ""}`, ""},
		{"fields are required", `  - mask: {}`, `steps[0].mask.fields (line 6): required: the fields to mask`},
		{"an unknown key is named", `  - mask: {fields: [email], whith: x}`, `steps[0].mask.whith (line 6): unknown key`},
		{"a list instead of a map is refused", `  - mask: [email]`, `steps[0].mask (line 6): expected a map, got a list`},
		{"an empty path segment is refused", `  - mask: {fields: [email, card..number]}`, `steps[0].mask.fields[1] (line 6): "card..number" is not a field path`},
		{"a field listed twice is refused", `  - mask: {fields: [email, email]}`, `steps[0].mask.fields[1] (line 6): "email" is already listed as fields[0]`},
		{"a field inside a masked one is refused", `  - mask: {fields: [card.number, card]}`, `steps[0].mask.fields[0] (line 6): "card.number" is inside "card"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := buildWithMask(t, head+tt.step+"\n")
			if tt.want == "" {
				if err != nil {
					t.Fatalf("build: %v", err)
				}
				return
			}
			var ce config.Errors
			if !errors.As(err, &ce) {
				t.Fatalf("build: got %v, want config.Errors", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("build: got\n%v\nwant it to contain\n%s", err, tt.want)
			}
		})
	}
}

func TestMaskInARunningPipeline(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker and a pipeline")
	}
	b, err := broker.Start(broker.Options{Topics: []string{"people", "people-masked", "people-dlq"}, Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeTopics("people-masked", "people-dlq"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	in := []string{
		`{"name":"ada","email":"ada@example.com"}`,
		`{"name":"bob"}`,
		`{"name":`, // not JSON: the dead-letter topic
	}
	for _, v := range in {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "people", Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	cfg, err := config.Parse([]byte(`
name: people
brokers: embedded
instance_id: test-0
checkpoint: {interval: 100ms}
consumer: {session_timeout: 6s}
sources: {in: {topics: [people]}}
steps: [{mask: {fields: [email]}}]
sinks: {out: {topic: people-masked}}
dead_letter: {topic: people-dlq}
`), "test.yaml", func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	_, stop := start(ctx, t, cfg, b.Addrs(), "mask", newMask)

	got := map[string][]string{}
	for len(got["people-masked"])+len(got["people-dlq"]) < len(in) && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			got[r.Topic] = append(got[r.Topic], string(r.Value))
		})
	}
	stop()
	want := []string{`{"email":"***","name":"ada"}`, `{"name":"bob"}`}
	if strings.Join(got["people-masked"], "\n") != strings.Join(want, "\n") {
		t.Errorf("people-masked: got %q, want %q", got["people-masked"], want)
	}
	if len(got["people-dlq"]) != 1 || got["people-dlq"][0] != in[2] {
		t.Errorf("people-dlq: got %q, want %q", got["people-dlq"], in[2:])
	}
}

// TestLimitCheck drives the two-input operator with optest's Context over
// a memory state store: limits of the first input, readings of the second.
func TestLimitCheck(t *testing.T) {
	def := &limitCheck{field: "temp"}
	st, err := state.Open(state.NewMemory(), "t/alerts", 0, def.Fingerprint(), nil)
	if err != nil {
		t.Fatal(err)
	}
	op, err := def.NewStatefulOperator(0, st)
	if err != nil {
		t.Fatal(err)
	}
	ctx := optest.NewContext(t)
	rec := func(key, value string) *pipeline.Record {
		return &pipeline.Record{Key: pipeline.RawValue([]byte(key), pipeline.String), Value: pipeline.RawValue([]byte(value), pipeline.JSON)}
	}
	for _, step := range []struct {
		input      int
		key, value string
		alert      bool
	}{
		{1, "s1", `{"temp": 40}`, false}, // no limit yet
		{0, "s1", `{"max": 30}`, false},
		{1, "s1", `{"temp": 25}`, false},
		{1, "s1", `{"temp": 31.5}`, true},
		{1, "s2", `{"temp": 99}`, false}, // another key: no limit
		{0, "s1", `{"max": 35}`, false},
		{1, "s1", `{"temp": 31.5}`, false},
	} {
		ctx.Reset()
		ctx.In = step.input
		if err := op.Process(ctx, rec(step.key, step.value)); err != nil {
			t.Fatal(err)
		}
		if got := len(ctx.All()); got != map[bool]int{false: 0, true: 1}[step.alert] {
			t.Fatalf("input %d %s %s: %d records emitted, want alert %v", step.input, step.key, step.value, got, step.alert)
		}
	}
	ctx.In = 0
	if err := op.Process(ctx, rec("s1", `{"max": "high"}`)); err == nil {
		t.Fatal("a limit that is not a number was taken")
	}
}
