package ops_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/optest"
	"github.com/pipeline-run/pipeline/pipeline/state"
	"github.com/twmb/franz-go/pkg/kgo"
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

// TestWindowKeepsNoRecord folds records into tumbling and session windows
// through one Record whose key and value bytes are rewritten for every
// record, as the engine reuses a record's memory once Process returns in a
// graph of Forgetters; a late record goes on before Process returns. Every
// result must be what an oracle over the inputs says: a window that kept
// any of a record's memory would show a later record's key or value.
func TestWindowKeepsNoRecord(t *testing.T) {
	for _, kind := range []string{"tumbling", "session"} {
		args := map[string]any{"fields": map[string]any{"n": "count", "s": map[string]any{"last": "value.s"}, "sum": map[string]any{"sum": "value.seq"}},
			"late": "output"}
		if kind == "tumbling" {
			args["tumbling"] = "1s"
		} else {
			args["session"] = map[string]any{"gap": "300ms"}
		}
		open := statefulOpener(t, "win", "window", args)
		st, op := open()
		ctx := optest.NewContext(t)
		dec := pipeline.NewDecoding(pipeline.String, pipeline.JSON, pipeline.ValueReads{Fields: []string{"s", "seq"}})
		// oracle: per key, the windows' aggregates by start (tumbling)
		// or the records' times (session: merged below).
		type rec struct {
			ts, seq int
			s       string
		}
		type agg struct {
			n, sum, last int
			s            string // of the last record in processing order
		}
		add := func(a agg, x rec) agg {
			if a.n == 0 || x.seq > a.last {
				a.last, a.s = x.seq, x.s
			}
			a.n++
			a.sum += x.seq
			return a
		}
		byKey := map[string][]rec{}
		kb, vb := make([]byte, 3), make([]byte, 0, 64)
		var r pipeline.Record
		lateSeen := 0
		for seq := range 900 {
			k := fmt.Sprintf("k%02d", seq*7%13)
			ts := 2000 + seq*5 + (seq%11)*40 // out of order within a key
			s := fmt.Sprintf("s%d-%s", seq, strings.Repeat("x", seq%9))
			late := seq%97 == 50
			if late {
				ts = 0 // behind the watermark below: late
			}
			copy(kb, k)
			vb = fmt.Appendf(vb[:0], `{"s":%q,"seq":%d}`, s, seq)
			r = pipeline.Record{}
			r.Read(&kgo.Record{Key: kb, Value: vb, Timestamp: time.UnixMilli(int64(ts))}, dec)
			ctx.WM = time.UnixMilli(1500)
			if err := op.Process(ctx, &r); err != nil {
				t.Fatal(err)
			}
			if late {
				lateSeen++
				continue
			}
			byKey[k] = append(byKey[k], rec{ts, seq, s})
		}
		// Late records went out as they were, while they were whole.
		lates := ctx.Emitted("late")
		if len(lates) != lateSeen || lateSeen == 0 {
			t.Fatalf("%s: %d late outputs, want %d", kind, len(lates), lateSeen)
		}
		if err := op.(pipeline.Flusher).Flush(ctx); err != nil {
			t.Fatal(err)
		}
		st.Changes()
		if err := st.Commit(-1); err != nil {
			t.Fatal(err)
		}
		ctx.Reset()
		fireTimers(t, ctx, st, op, 1<<40)
		want := map[string]agg{}
		for k, rs := range byKey {
			slices.SortStableFunc(rs, func(a, b rec) int { return a.ts - b.ts })
			if kind == "tumbling" {
				for _, x := range rs {
					start := x.ts - x.ts%1000
					id := fmt.Sprintf("%s/%d/%d", k, start, start+1000)
					want[id] = add(want[id], x)
				}
				continue
			}
			// Sessions: records within the gap of the session so far.
			start, end := rs[0].ts, rs[0].ts+300
			var a agg
			flush := func() { want[fmt.Sprintf("%s/%d/%d", k, start, end)] = a }
			for _, x := range rs {
				if x.ts > end {
					flush()
					start, end, a = x.ts, x.ts+300, agg{}
				}
				end = max(end, x.ts+300)
				a = add(a, x)
			}
			flush()
		}
		out := ctx.Emitted("")
		if len(out) != len(want) {
			t.Fatalf("%s: %d results, want %d", kind, len(out), len(want))
		}
		for _, o := range out {
			b, _ := o.Value.Encode(pipeline.JSON)
			var v struct {
				Key   string `json:"key"`
				Start int    `json:"window_start"`
				End   int    `json:"window_end"`
				N     int    `json:"n"`
				Sum   int    `json:"sum"`
				S     string `json:"s"`
			}
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatal(err)
			}
			id := fmt.Sprintf("%s/%d/%d", v.Key, v.Start, v.End)
			w, ok := want[id]
			if !ok || v.N != w.n || v.Sum != w.sum || v.S != w.s || string(o.Key.Raw()) != v.Key {
				t.Errorf("%s: result %s (key %s); want n %d sum %d s %q (known %v)", kind, b, o.Key.Raw(), w.n, w.sum, w.s, ok)
			}
		}
		_ = st.Close()
	}
}
