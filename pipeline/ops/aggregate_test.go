package ops_test

import (
	"testing"

	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/ops"
	"github.com/pipeline-run/pipeline/pipeline/optest"
	"github.com/pipeline-run/pipeline/pipeline/state"
)

// TestAggregateKeepsAccumulatorsRight drives an aggregate (which keeps the
// accumulators of the keys changed since the last checkpoint decoded, and
// writes them at the checkpoint) through a record whose second field
// fails, a checkpoint, an abort and a restore: every output must be what
// the records that counted make.
func TestAggregateKeepsAccumulatorsRight(t *testing.T) {
	f, _ := ops.NewRegistry().Lookup("aggregate")
	s := pipeline.NewSpec("agg", "aggregate", "steps[0].aggregate",
		map[string]any{"fields": map[string]any{"n": "count", "total": map[string]any{"sum": "value.x"}}}, 1, func(string) int { return 0 })
	def, err := f(s)
	if err != nil || len(s.Problems()) > 0 {
		t.Fatalf("building: %v %v", err, s.Problems())
	}
	sd := def.(pipeline.StatefulDefinition)
	mem := state.NewMemory()
	open := func() (*state.Store, pipeline.Operator) {
		st, err := state.Open(mem, "t/agg", 0, sd.Fingerprint(), nil)
		if err != nil {
			t.Fatal(err)
		}
		op, err := sd.NewStatefulOperator(0, st)
		if err != nil {
			t.Fatal(err)
		}
		return st, op
	}
	st, op := open()
	ctx := optest.NewContext(t)
	feed := func(v string, wantErr bool) string {
		t.Helper()
		r := jsonRecord(v)
		r.Key = pipeline.RawValue([]byte("k"), pipeline.String)
		n := len(ctx.Emitted(""))
		err := op.Process(ctx, r)
		if (err != nil) != wantErr {
			t.Fatalf("record %s: error %v", v, err)
		}
		if wantErr {
			return ""
		}
		return values(t, ctx.Emitted("")[n:])
	}
	checkpoint := func(commit bool) {
		t.Helper()
		if err := op.(pipeline.Flusher).Flush(ctx); err != nil {
			t.Fatal(err)
		}
		st.Changes()
		if commit {
			err = st.Commit(-1)
		} else {
			err = st.Abort()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := feed(`{"x":1}`, false); got != `{"n":1,"total":1}` {
		t.Fatalf("first record: %s", got)
	}
	feed(`{"x":"a"}`, true) // counted by n, then failed in total: undone
	if got := feed(`{"x":2}`, false); got != `{"n":2,"total":3}` {
		t.Fatalf("after a failed record: %s, want n 2 total 3", got)
	}
	checkpoint(true)
	if got := feed(`{"x":10}`, false); got != `{"n":3,"total":13}` {
		t.Fatalf("after a checkpoint: %s", got)
	}
	checkpoint(false) // aborted: the record above is replayed
	if got := feed(`{"x":10}`, false); got != `{"n":3,"total":13}` {
		t.Fatalf("replayed after an abort: %s, want n 3 total 13", got)
	}
	feed(`{"x":5}`, false)
	st.Abort() // rolled back without a checkpoint (the task's state restored)
	if got := feed(`{"x":10}`, false); got != `{"n":3,"total":13}` {
		t.Fatalf("after a rollback: %s, want n 3 total 13", got)
	}
	checkpoint(true)
	_ = st.Close()
	st, op = open()
	if got := feed(`{"x":100}`, false); got != `{"n":4,"total":113}` {
		t.Fatalf("after a restart: %s, want n 4 total 113", got)
	}
}
