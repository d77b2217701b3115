package integration

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/offsets"
)

// The windows under test: event time is value.seq*10 ms, so a tumbling
// window of 10 s holds 1000 consecutive seqs (of every key).
const (
	windowMs = 10_000
	seqMs    = 10
)

// windowConfig is a per-key tumbling-window count and sum on event time
// value.seq*10: the exactly-once window state, watermarks and timers under
// test.
func windowConfig(e *env, partitions int, extra string) string {
	return fmt.Sprintf(`name: %q
brokers: [%q]
instance_id: i1
checkpoint: {interval: 300ms, timeout: 10s}
transactions: {timeout: 30s}
consumer: {session_timeout: 10s}
topics: {partitions: %d}
sources:
  in:
    topics: [%q]
    event_time: {from: "value.seq * %d", max_out_of_orderness: 0s}
steps:
  - name: per_window
    window:
      tumbling: %dms
      fields:
        n: count
        total: {sum: value.seq}
sinks:
  out: {topic: %q}
%s`, e.group, e.seeds[0], partitions, e.input, seqMs, windowMs, e.output, extra)
}

// createWindowTopics creates the input and output topics. The window
// results are stamped with their event time (window_end-1ms), here in
// January 1970: a broker's time retention (Kafka checks every minute in the
// suite's kafka-local broker) would delete them, so the output keeps its
// records for ever.
func createWindowTopics(t *testing.T, e *env, partitions int32) {
	t.Helper()
	CreateTopics(t, e.adm, partitions, e.input)
	forever := "-1"
	CreateTopicsWith(t, e.adm, partitions, map[string]*string{"retention.ms": &forever}, e.output)
}

// TestWindowedCountsSurviveRepeatedSIGKILL counts and sums per key and
// tumbling event-time window while the pipeline is SIGKILLed at random
// points, then checks every window that must have closed against the
// input: each emitted exactly once, with the exact count and sum, and none
// of those still open emitted at all.
func TestWindowedCountsSurviveRepeatedSIGKILL(t *testing.T) {
	// CPU-light (input at a fixed rate, the time is waiting): it runs
	// beside the suite's other parallel tests, after the serial ones.
	t.Parallel()
	for _, backend := range []string{"memory", "pebble"} {
		t.Run(backend, func(t *testing.T) { runWindowKills(t, backend) })
	}
}

func runWindowKills(t *testing.T, backend string) {
	requireBinary(t)
	e := newEnv(t)
	const partitions, keys, kills = 4, 50, 5
	records := 100_000
	if testing.Short() {
		records = 30_000
	}
	createWindowTopics(t, e, partitions)
	extra := ""
	if backend == "pebble" {
		extra = fmt.Sprintf("state: {backend: pebble, dir: %q}\n", filepath.Join(e.logDir, "state"))
	}
	cfgPath := filepath.Join(e.logDir, "window.yaml")
	if err := os.WriteFile(cfgPath, []byte(windowConfig(e, partitions, extra)), 0o644); err != nil {
		t.Fatal(err)
	}
	span := time.Duration(kills)*maxStopDelay + 5*time.Second
	input := StartInput(t, e.seeds, InputSpec{Topic: e.input, Records: records, Keys: keys, Rate: max(1, int(float64(records)/span.Seconds()))})
	start := time.Now()
	e.killRepeatedly(t, cfgPath, kills, records)
	p := e.startPipeline(cfgPath)
	input.Wait(t)
	end := e.inputEnd()
	e.waitInputCommitted(t, end, p)
	p.Term()
	w := checkWindows(t, e, records)
	e.audit(cfgPath, records)
	t.Logf("figures: %s backend, %d records, %d keys, %d closed windows checked (%d still open, none emitted; %d output records), %d SIGKILLs, %v, every window once with its exact count and sum",
		backend, records, keys, w.closed, w.open, w.outputs, kills, time.Since(start).Round(time.Millisecond))
}

// TestWindowedCountsAcrossARebalance runs the window pipeline on two
// instances: the second joins mid-stream, taking partitions (and their
// windows, timers and watermarks, restored from the changelogs) from the
// first; then the first is SIGKILLed and restarted, taking its partitions
// back. No window may be emitted twice, missed, or miscounted across the
// moves.
func TestWindowedCountsAcrossARebalance(t *testing.T) {
	// CPU-light (input at a fixed rate, the time is waiting): it runs
	// beside the suite's other parallel tests, after the serial ones.
	t.Parallel()
	requireBinary(t)
	e := newEnv(t)
	const partitions, keys = 4, 50
	records := 100_000
	if testing.Short() {
		records = 30_000
	}
	createWindowTopics(t, e, partitions)
	write := func(instance string) string {
		cfg := strings.Replace(windowConfig(e, partitions, ""), "instance_id: i1", "instance_id: "+instance, 1)
		cfg = strings.Replace(cfg, "session_timeout: 10s", "session_timeout: 6s", 1)
		cfg = strings.Replace(cfg, "transactions: {timeout: 30s}", "transactions: {timeout: 12s}", 1)
		path := filepath.Join(e.logDir, instance+".yaml")
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	cfg1, cfg2 := write("i1"), write("i2")
	start := time.Now()
	input := StartInput(t, e.seeds, InputSpec{Topic: e.input, Records: records, Keys: keys, Rate: records / 15})
	p1 := e.startPipeline(cfg1)
	WaitFor(t, time.Minute, "the first instance to commit something", func() (bool, string) {
		c, _, err := e.committed()
		return err == nil && c > 0, fmt.Sprintf("committed %d (%v)", c, err)
	})
	p2 := e.startPipeline(cfg2)
	WaitFor(t, time.Minute, "the second instance to restore state it took over", func() (bool, string) {
		return fileContains(p2.LogPath(), "state restored"), "no restore in i2's log yet"
	})
	c, _, _ := e.committed()
	if c >= int64(records) {
		t.Fatalf("the join did not happen mid-stream: %d of %d committed", c, records)
	}
	t.Logf("i2 restored state it took over: %d of %d input records committed", c, records)
	p1.sleepOrExit(t.Context(), 2*time.Second)
	p1.Kill()
	c, _, _ = e.committed()
	if c >= int64(records) {
		t.Fatalf("the kill did not happen mid-stream: %d of %d committed", c, records)
	}
	t.Logf("i1 SIGKILLed: %d of %d input records committed", c, records)
	// Restarted, the first instance takes its partitions back (static
	// membership) and restores their windows from the changelogs, which the
	// second instance wrote to meanwhile.
	p1 = e.startPipeline(cfg1)
	WaitFor(t, time.Minute, "the restarted first instance to restore its state", func() (bool, string) {
		return fileContains(p1.LogPath(), "state restored"), "no restore in the restarted i1's log yet"
	})
	input.Wait(t)
	end := e.inputEnd()
	e.waitInputCommitted(t, end, p1, p2)
	p1.Term()
	p2.Term()
	w := checkWindows(t, e, records)
	e.audit(cfg1, records)
	t.Logf("figures: %d records, %d keys, %d closed windows checked (%d still open, none emitted; %d output records), 1 → 2 → 1 instances with a SIGKILL, %v, every window once with its exact count and sum",
		records, keys, w.closed, w.open, w.outputs, time.Since(start).Round(time.Millisecond))
}

// windowCheck is what checkWindows found.
type windowCheck struct {
	closed  int // windows that must have closed, each checked
	open    int // windows with records that must still be open
	outputs int // output records read
}

// windowID names one window of one key.
type windowID struct {
	key   string
	start int64
}

// windowAcc is a window's count and sum of seq.
type windowAcc struct{ n, total int64 }

// windowResult is the value of a window result.
type windowResult struct {
	Key    string `json:"key"`
	Start  int64  `json:"window_start"`
	End    int64  `json:"window_end"`
	Timing string `json:"timing"`
	N      int64  `json:"n"`
	Total  int64  `json:"total"`
}

// checkWindows reads the input and the output of the window pipeline back
// (read_committed) and fails the test unless the output holds exactly the
// results the input calls for.
func checkWindows(t *testing.T, e *env, records int) windowCheck {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	in, err := offsets.ReadToEnd(ctx, e.cl, e.input, true)
	if err != nil {
		t.Fatalf("reading the input %s: %v", e.input, err)
	}
	if len(in) != records {
		t.Fatalf("the input %s holds %d records, the generator wrote %d", e.input, len(in), records)
	}
	out, err := offsets.ReadToEnd(ctx, e.cl, e.output, true)
	if err != nil {
		t.Fatalf("reading the output %s: %v", e.output, err)
	}
	w, diffs := windowDiffs(in, out)
	if len(diffs) > 0 {
		for _, d := range diffs[:min(len(diffs), 10)] {
			t.Error(d)
		}
		t.Fatalf("%d differences between the %d window results read and the %d closed windows the input calls for (%d windows still open)",
			len(diffs), len(out), w.closed, w.open)
	}
	t.Logf("checked %d closed windows over %d input records: each emitted once, on time, with its exact count and sum; %d still open, none emitted (%d output records read)",
		w.closed, len(in), w.open, len(out))
	return w
}

// windowDiffs computes, from the input records alone, the window results
// the pipeline must have emitted, and compares the output records with
// them. The watermark of each input partition's task is the latest event
// time in it (max_out_of_orderness is 0), so the windows of partition p
// that must have closed are those ending at or before 10*max seq in p, and
// the others must still be open. The differences come back with those of
// the input first, then those of the expected windows, in key and start
// order, then those of the output records, in offset order.
func windowDiffs(in, out []*kgo.Record) (windowCheck, []string) {
	var diffs []string
	// The input: each key's partition, each partition's watermark, each
	// window's count and sum.
	keyPart := map[string]int32{}
	mark := map[int32]int64{}
	all := map[windowID]*windowAcc{}
	for _, r := range in {
		var v struct {
			K   string `json:"k"`
			Seq *int64 `json:"seq"`
		}
		if err := json.Unmarshal(r.Value, &v); err != nil || v.Seq == nil || v.K != string(r.Key) {
			diffs = append(diffs, fmt.Sprintf("input %s/%d@%d: not a generator record: key %q value %s (%v)", r.Topic, r.Partition, r.Offset, r.Key, r.Value, err))
			continue
		}
		key, seq := string(r.Key), *v.Seq
		if p, ok := keyPart[key]; ok && p != r.Partition {
			diffs = append(diffs, fmt.Sprintf("input key %s is in partitions %d and %d: a window's close is then not defined by one partition", key, p, r.Partition))
		}
		keyPart[key] = r.Partition
		ts := seq * seqMs
		if cur, ok := mark[r.Partition]; !ok || ts > cur {
			mark[r.Partition] = ts
		}
		id := windowID{key, ts - ts%windowMs}
		a := all[id]
		if a == nil {
			a = &windowAcc{}
			all[id] = a
		}
		a.n++
		a.total += seq
	}
	want := map[windowID]windowAcc{}
	var w windowCheck
	for id, a := range all {
		if id.start+windowMs <= mark[keyPart[id.key]] {
			want[id] = *a
			w.closed++
		} else {
			w.open++
		}
	}

	// The output.
	w.outputs = len(out)
	var outDiffs []string
	got := map[windowID][]windowResult{}
	for _, r := range out {
		where := fmt.Sprintf("output %s/%d@%d", r.Topic, r.Partition, r.Offset)
		var v windowResult
		dec := json.NewDecoder(bytes.NewReader(r.Value))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&v); err != nil {
			outDiffs = append(outDiffs, fmt.Sprintf("%s: value %s is not a window result of this pipeline: %v", where, r.Value, err))
			continue
		}
		if string(r.Key) != v.Key {
			outDiffs = append(outDiffs, fmt.Sprintf("%s: record key %q, but value.key %q", where, r.Key, v.Key))
		}
		if ts, wantTs := r.Timestamp.UnixMilli(), v.End-1; ts != wantTs {
			outDiffs = append(outDiffs, fmt.Sprintf("%s: timestamp %d ms, want window_end-1 = %d (%s)", where, ts, wantTs, r.Value))
		}
		if v.End != v.Start+windowMs || v.Start%windowMs != 0 {
			outDiffs = append(outDiffs, fmt.Sprintf("%s: window [%d, %d) is not a tumbling window of %d ms (%s)", where, v.Start, v.End, windowMs, r.Value))
		}
		if v.Timing != "on_time" {
			outDiffs = append(outDiffs, fmt.Sprintf("%s: timing %q, want \"on_time\" (%s)", where, v.Timing, r.Value))
		}
		id := windowID{v.Key, v.Start}
		if _, ok := want[id]; !ok {
			why := "a window no input record belongs to"
			if _, ok := all[id]; ok {
				why = fmt.Sprintf("a window that must still be open: partition %d's watermark is %d ms", keyPart[id.key], mark[keyPart[id.key]])
			}
			outDiffs = append(outDiffs, fmt.Sprintf("%s: result for key %s window [%d, %d), %s (%s)", where, v.Key, v.Start, v.End, why, r.Value))
		}
		got[id] = append(got[id], v)
	}

	for _, id := range slices.SortedFunc(maps.Keys(want), compareWindowIDs) {
		a := want[id]
		rs := got[id]
		switch {
		case len(rs) == 0:
			diffs = append(diffs, fmt.Sprintf("key %s window [%d, %d): no result, want n=%d total=%d (partition %d's watermark is %d ms)",
				id.key, id.start, id.start+windowMs, a.n, a.total, keyPart[id.key], mark[keyPart[id.key]]))
			continue
		case len(rs) > 1:
			diffs = append(diffs, fmt.Sprintf("key %s window [%d, %d): %d results, want exactly one: %+v", id.key, id.start, id.start+windowMs, len(rs), rs))
		}
		for _, r := range rs {
			if r.N != a.n || r.Total != a.total {
				diffs = append(diffs, fmt.Sprintf("key %s window [%d, %d): n=%d total=%d, want n=%d total=%d",
					id.key, id.start, id.start+windowMs, r.N, r.Total, a.n, a.total))
			}
		}
	}
	return w, append(diffs, outDiffs...)
}

func compareWindowIDs(a, b windowID) int {
	return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.start, b.start))
}
