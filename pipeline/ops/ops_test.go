package ops_test

import (
	"strings"
	"testing"

	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/ops"
	"github.com/pipeline-run/pipeline/pipeline/optest"
)

// build makes an operator of kind from its spec through the public
// Registry, as the engine does, and fails the test on any problem.
func build(t *testing.T, kind string, spec any) pipeline.Operator {
	t.Helper()
	f, ok := ops.NewRegistry().Lookup(kind)
	if !ok {
		t.Fatalf("no built-in kind %q", kind)
	}
	s := pipeline.NewSpec("s", kind, "steps[0]."+kind, spec, 1, func(string) int { return 0 })
	def, err := f(s)
	if err != nil || len(s.Problems()) > 0 || def == nil {
		t.Fatalf("building %s: %v %v", kind, err, s.Problems())
	}
	op, err := def.NewOperator(0)
	if err != nil {
		t.Fatal(err)
	}
	return op
}

func jsonRecord(v string) *pipeline.Record {
	return &pipeline.Record{Value: pipeline.RawValue([]byte(v), pipeline.JSON)}
}

func values(t testing.TB, rs []*pipeline.Record) string {
	t.Helper()
	var out []string
	for _, r := range rs {
		b, err := r.Value.Encode(pipeline.JSON)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	}
	return strings.Join(out, " ")
}

// TestBuiltInsRunOnThePublicAPI runs built-in operators the way a user's
// operator is run in a test: made through the Registry from a Spec, and
// called with optest's Context. Nothing of the engine is involved.
func TestBuiltInsRunOnThePublicAPI(t *testing.T) {
	in := []string{`{"t":40}`, `{"t":10}`, `{"t":31}`}

	split := build(t, "split", map[string]any{"hot": "value.t > 30"})
	ctx := optest.NewContext(t)
	for _, v := range in {
		if err := split.Process(ctx, jsonRecord(v)); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := values(t, ctx.Emitted("hot")), `{"t":40} {"t":31}`; got != want {
		t.Errorf("split, hot: got %s, want %s", got, want)
	}
	if got, want := values(t, ctx.Emitted("")), `{"t":10}`; got != want {
		t.Errorf("split, default: got %s, want %s", got, want)
	}

	m := build(t, "map", "{t: value.t, hot: value.t > 30}")
	ctx = optest.NewContext(t)
	if err := m.Process(ctx, jsonRecord(in[1])); err != nil {
		t.Fatal(err)
	}
	if got, want := values(t, ctx.Emitted("")), `{"hot":false,"t":10}`; got != want {
		t.Errorf("map: got %s, want %s", got, want)
	}

	filter := build(t, "filter", "value.t > 30")
	ctx = optest.NewContext(t)
	if err := filter.Process(ctx, jsonRecord(`{"x":1}`)); err == nil {
		t.Errorf("filter on a record without t: got %d outputs and no error", len(ctx.All()))
	}
}
