package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/pipeline/ops"
)

// inRec returns an input record of key in partition p stamped at ms.
func inRec(key string, p int32, ms int64) *kgo.Record {
	return &kgo.Record{Key: []byte(key), Partition: p, Timestamp: time.UnixMilli(ms)}
}

// windowOut returns the window step's result for window [start, start+1000)
// of key, in partition p.
func windowOut(key string, p int32, start, count int64) *kgo.Record {
	return &kgo.Record{Key: []byte(key), Partition: p, Timestamp: time.UnixMilli(start + windowMs - 1),
		Value: fmt.Appendf(nil, `{"count":%d,"key":%q,"timing":"on_time","window_end":%d,"window_start":%d}`, count, key, start+windowMs, start)}
}

func reversed(rs []*kgo.Record) []*kgo.Record {
	slices.Reverse(rs)
	return rs
}

// windowInput is two partitions of input: partition 0 (keys a and b)
// reaches 3500 ms, so the windows [1000, 2000) and [2000, 3000) closed and
// [3000, 4000) is open; partition 1 (key c) reaches 1999 ms only, so its
// window [1000, 2000) is open.
func windowInput() []*kgo.Record {
	return []*kgo.Record{
		inRec("a", 0, 1000), inRec("b", 0, 1500), inRec("a", 0, 1999),
		inRec("c", 1, 1200), inRec("c", 1, 1999),
		inRec("b", 0, 2500), inRec("a", 0, 3000), inRec("b", 0, 3500),
	}
}

func TestWindowOracle(t *testing.T) {
	o, err := NewWindowOracle(windowInput(), windowMs)
	if err != nil {
		t.Fatal(err)
	}
	want := map[windowID]int64{{"a", 1000}: 2, {"b", 1000}: 1, {"b", 2000}: 1}
	if len(o.Closed) != len(want) {
		t.Errorf("closed windows %v, want %v", o.Closed, want)
	}
	for id, n := range want {
		if o.Closed[id] != n {
			t.Errorf("%s: count %d, want %d", id, o.Closed[id], n)
		}
	}
	for _, id := range []windowID{{"a", 3000}, {"b", 3000}, {"c", 1000}} {
		if !o.Open[id] {
			t.Errorf("%s is not open", id)
		}
	}
	if o.Records != 8 || o.Late != 0 || o.Watermark[0] != 3500 || o.Watermark[1] != 1999 {
		t.Errorf("records %d, late %d, watermarks %v", o.Records, o.Late, o.Watermark)
	}

	t.Run("a record behind a closed window is late, not counted", func(t *testing.T) {
		o, err := NewWindowOracle(append(windowInput(), inRec("a", 0, 1999)), windowMs)
		if err != nil {
			t.Fatal(err)
		}
		if o.Late != 1 || o.Closed[windowID{"a", 1000}] != 2 {
			t.Errorf("late %d, count of a's first window %d; want 1 and 2", o.Late, o.Closed[windowID{"a", 1000}])
		}
	})
	t.Run("a key in two partitions is refused", func(t *testing.T) {
		if _, err := NewWindowOracle(append(windowInput(), inRec("a", 1, 1000)), windowMs); err == nil {
			t.Error("no error")
		}
	})
}

func TestCheckWindows(t *testing.T) {
	o, err := NewWindowOracle(windowInput(), windowMs)
	if err != nil {
		t.Fatal(err)
	}
	right := func() []*kgo.Record {
		return []*kgo.Record{windowOut("a", 0, 1000, 2), windowOut("b", 0, 1000, 1), windowOut("b", 0, 2000, 1)}
	}
	tests := []struct {
		name    string
		outs    []*kgo.Record
		want    *GateError // nil: passes; Example is checked to contain example
		example string
	}{
		{"every closed window once passes", right(), nil, ""},
		{"order does not matter", reversed(right()), nil, ""},
		{"a duplicate fails", append(right(), windowOut("b", 0, 2000, 1)),
			&GateError{Want: 3, Got: 4, Duplicates: 1}, `a second result for key "b", window [2000, 3000)`},
		{"a missing window fails", right()[1:],
			&GateError{Want: 3, Got: 2, Missing: 1}, `no result for key "a", window [1000, 2000), which closed with 2 records`},
		{"a wrong count fails", []*kgo.Record{windowOut("a", 0, 1000, 3), windowOut("b", 0, 1000, 1), windowOut("b", 0, 2000, 1)},
			&GateError{Want: 3, Got: 3, Wrong: 1}, "count 3, want 2"},
		{"a result for a window still open fails", append(right(), windowOut("c", 1, 1000, 2)),
			&GateError{Want: 3, Got: 4, Unexpected: 1}, `key "c", window [1000, 2000), which is still open (the watermark of its partition is 1999)`},
		{"a result for a window without records fails", append(right(), windowOut("a", 0, 5000, 1)),
			&GateError{Want: 3, Got: 4, Unexpected: 1}, "which no input record falls in"},
		{"an early result fails", func() []*kgo.Record {
			outs := right()
			outs[0].Value = []byte(strings.Replace(string(outs[0].Value), "on_time", "early", 1))
			return outs
		}(), &GateError{Want: 3, Got: 3, Wrong: 1}, `timing "early"`},
		{"a result under another record key fails", func() []*kgo.Record {
			outs := right()
			outs[0].Key = []byte("b")
			return outs
		}(), &GateError{Want: 3, Got: 3, Wrong: 1}, `record key "b", want "a"`},
		{"a result not stamped at its window's end fails", func() []*kgo.Record {
			outs := right()
			outs[0].Timestamp = time.UnixMilli(1999 + 1)
			return outs
		}(), &GateError{Want: 3, Got: 3, Wrong: 1}, "record timestamp 2000, want 1999"},
		{"a value that is no result fails", append(right(), &kgo.Record{Value: []byte(`{"seq":1}`)}),
			&GateError{Want: 3, Got: 4, Unreadable: 1}, "unreadable result"},
		{"nothing at all fails", nil, &GateError{Want: 3, Missing: 3}, `no result for key "a", window [1000, 2000)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckWindows(tc.outs, o, windowMs)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("CheckWindows = %v, want it to pass", err)
				}
				return
			}
			var ge *GateError
			if !errors.As(err, &ge) {
				t.Fatalf("CheckWindows = %v, want a *GateError", err)
			}
			got := *ge
			got.Example = ""
			if got != *tc.want {
				t.Errorf("CheckWindows = %+v, want %+v", got, *tc.want)
			}
			if !strings.Contains(err.Error(), "first: ") || !strings.Contains(ge.Example, tc.example) {
				t.Errorf("CheckWindows = %q, want it to name %q", err, tc.example)
			}
		})
	}

	t.Run("no closed window and no result passes", func(t *testing.T) {
		o, err := NewWindowOracle([]*kgo.Record{inRec("a", 0, 1000), inRec("a", 0, 1999)}, windowMs)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckWindows(nil, o, windowMs); err != nil {
			t.Error(err)
		}
	})
}

// TestBacklogTimes: the backlog stands for a stream of backlogRate records
// per second of event time, starting on a second and ending by now, so
// that the windowed-count arm closes windows as it reads any backlog of
// more than backlogRate records.
func TestBacklogTimes(t *testing.T) {
	now := time.UnixMilli(1_700_000_123_456)
	const n = 250000
	base := backlogBase(now, n)
	if base.UnixMilli()%1000 != 0 {
		t.Errorf("the first record is stamped %d, not on a second", base.UnixMilli())
	}
	if last := BacklogTime(base, n-1); last.After(now) {
		t.Errorf("the last record is stamped %v after now", last.Sub(now))
	}
	if d := BacklogTime(base, backlogRate).Sub(BacklogTime(base, 0)); d != time.Second {
		t.Errorf("%d records span %v of event time, want 1s", backlogRate, d)
	}
	var recs []*kgo.Record
	for seq := range int64(n) {
		recs = append(recs, &kgo.Record{Key: Key(nil, seq), Timestamp: BacklogTime(base, seq)})
	}
	o, err := NewWindowOracle(recs, windowMs)
	if err != nil {
		t.Fatal(err)
	}
	// 2.5 s of event time: two windows of every key closed, with 10
	// records each; the third is open.
	if len(o.Closed) != 2*numKeys || len(o.Open) != numKeys || o.Late != 0 {
		t.Errorf("%d windows closed, %d open, %d late records; want %d, %d, 0", len(o.Closed), len(o.Open), o.Late, 2*numKeys, numKeys)
	}
	for id, c := range o.Closed {
		if c != backlogRate/numKeys {
			t.Fatalf("%s: %d records, want %d", id, c, backlogRate/numKeys)
		}
	}
}

// TestLatencyRefusesAWindowedArm: a windowed arm has no latency runs; asked
// for one anyway, the harness says why without running anything.
func TestLatencyRefusesAWindowedArm(t *testing.T) {
	as, _ := arms([]string{"windowed-count"}, ops.NewRegistry(), "", "")
	if len(as) != 1 {
		t.Skip("the pipeline has no window operator")
	}
	h := &harness{}
	l := h.latency(context.Background(), as[0], Case{Interval: time.Second, Size: 100, Partitions: 1}, 1000)
	if !strings.Contains(l.Err, "windowed-count has no latency runs") {
		t.Errorf("latency run: %+v", l)
	}
}

// TestWindowedCountOnTheEmbeddedBroker runs the windowed-count arm and the
// pass-through end to end on an in-process broker, over a backlog of 1.5 s
// of event time: every key's first window closes, the gate checks its
// result, and the arm is timed and compared with the pass-through; the
// latency runs skip it.
func TestWindowedCountOnTheEmbeddedBroker(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a broker")
	}
	if !slices.Contains(ops.NewRegistry().Kinds(), "window") {
		t.Skip("the pipeline has no window operator")
	}
	// The pass-through's latency run is only there to show windowed-count
	// has none: at a rate the two cores carry whatever else runs, under
	// -race, next to other packages' tests (half the slowest arm's
	// throughput, 30,000 records/s, once fell behind for a minute).
	o := sweepOptions(backlogRate*3/2, true, "pass", "windowed-count")
	o.LatencyRate = 2000
	res, out := sweepWith(t, o)
	if !strings.Contains(out, "windowed-count: no latency runs") {
		t.Errorf("the output does not say windowed-count has no latency runs:\n%s", out)
	}
	if !strings.Contains(out, "windowed-count ÷ pass") {
		t.Errorf("the ratio table has no windowed-count ÷ pass:\n%s", out)
	}
	if len(res.Rows) != 2 {
		t.Fatalf("%d rows, want 2:\n%s", len(res.Rows), out)
	}
	for _, r := range res.Rows {
		if r.Failed != "" || r.RecordsPerSec <= 0 || r.TxPerSec <= 0 || r.PeakRSSMB <= 0 {
			t.Errorf("%s: %+v", r.Arm, r)
		}
		switch r.Arm {
		case "pass":
			if !r.Latency || r.P99Ms <= 0 {
				t.Errorf("pass was not timed: %+v", r)
			}
		case "windowed-count":
			if r.Latency {
				t.Errorf("windowed-count has latencies: %+v", r)
			}
			if math.IsNaN(r.PassRatio) || r.PassRatio <= 0 {
				t.Errorf("windowed-count ÷ pass is %v", r.PassRatio)
			}
		}
	}
	for _, r := range res.Runs {
		if r.Arm == "windowed-count" && r.Outputs != numKeys {
			t.Errorf("windowed-count expected %d outputs, want %d: every key's first window", r.Outputs, numKeys)
		}
	}
	t.Logf("\n%s", out)
}
