package ops_test

import (
	"testing"
	"time"

	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/optest"
	"github.com/pipeline-run/pipeline/pipeline/state"
)

// TestWindowKeepsWindowsRight drives a tumbling window (which keeps the
// windows changed since the last checkpoint decoded, and writes them at the
// checkpoint or before a timer of their key reads them) through a record
// whose second field fails, a checkpoint, an abort, a rollback, a restart
// and a timer firing with changes not yet written: the result must be what
// the records that counted make.
func TestWindowKeepsWindowsRight(t *testing.T) {
	open := statefulOpener(t, "win", "window", map[string]any{"tumbling": "1s",
		"fields": map[string]any{"n": "count", "total": map[string]any{"sum": "value.x"}}})
	st, op := open()
	ctx := optest.NewContext(t)
	feed := func(v string, wantErr bool) {
		t.Helper()
		r := jsonRecord(v)
		r.Key = pipeline.RawValue([]byte("k"), pipeline.String)
		r.Timestamp = time.UnixMilli(100)
		if err := op.Process(ctx, r); (err != nil) != wantErr {
			t.Fatalf("record %s: error %v", v, err)
		}
	}
	checkpoint := func(commit bool) {
		t.Helper()
		if err := op.(pipeline.Flusher).Flush(ctx); err != nil {
			t.Fatal(err)
		}
		st.Changes()
		var err error
		if commit {
			err = st.Commit(-1)
		} else {
			err = st.Abort()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	feed(`{"x":1}`, false)
	feed(`{"x":"a"}`, true) // counted by n, then failed in total: undone
	feed(`{"x":2}`, false)
	checkpoint(true)
	feed(`{"x":10}`, false)
	checkpoint(false) // aborted: the record above is replayed
	feed(`{"x":10}`, false)
	feed(`{"x":5}`, false)
	if err := st.Abort(); err != nil { // rolled back without a checkpoint
		t.Fatal(err)
	}
	feed(`{"x":10}`, false)
	checkpoint(true)
	_ = st.Close()
	st, op = open()
	feed(`{"x":100}`, false)
	checkpoint(true)
	feed(`{"x":7}`, false) // not written to the store when the timer fires

	tm := st.Timers()[0]
	at, ok, err := tm.Next(state.EventTime)
	if err != nil || !ok || at != 1000 {
		t.Fatalf("the window's close timer: at %d, set %v, %v; want at 1000", at, ok, err)
	}
	ctx.WM = time.UnixMilli(1000)
	timer, ok, err := tm.Pop(state.EventTime, 1000)
	if err != nil || !ok {
		t.Fatalf("popping the close timer: %v %v", ok, err)
	}
	if err := op.(pipeline.TimerHandler).OnTimer(ctx, timer); err != nil {
		t.Fatal(err)
	}
	want := `{"key":"k","n":5,"timing":"on_time","total":120,"window_end":1000,"window_start":0}`
	if got := values(t, ctx.Emitted("")); got != want {
		t.Fatalf("the window's result: %s, want %s", got, want)
	}
}
