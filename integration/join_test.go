package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pipeline-run/pipeline/offsets"
)

// The interval join under test pairs the records of two generator topics
// (left: the test's input, right: a second one), keyed alike, whose event
// time is value.seq*10 ms, when the right one is within ±600 ms of the left
// one. Keys repeat every joinKeys seqs (500 ms), so a left seq s pairs with
// the right seqs s-50, s and s+50 that exist: up to three pairs each.
const (
	joinKeys   = 50
	joinWithin = 600 // ms either way
)

func joinConfig(e *env, right string, partitions int, instance, extra string) string {
	return fmt.Sprintf(`name: %q
brokers: [%q]
instance_id: %s
checkpoint: {interval: 300ms, timeout: 10s}
transactions: {timeout: 12s}
consumer: {session_timeout: 6s}
topics: {partitions: %d}
sources:
  left:
    topics: [%q]
    event_time: {from: "value.seq * %d", max_out_of_orderness: 0s}
  right:
    topics: [%q]
    event_time: {from: "value.seq * %d", max_out_of_orderness: 0s}
steps:
  - name: pairs
    from: [left, right]
    interval_join: {lower: -%dms, upper: %dms}
sinks:
  out: {topic: %q}
%s`, e.group, e.seeds[0], instance, partitions, e.input, seqMs, right, seqMs, joinWithin, joinWithin, e.output, extra)
}

// TestIntervalJoinSurvivesRepeatedSIGKILL joins two streams while the
// pipeline is SIGKILLed at random points, on memory and pebble state, then
// checks the output against the pairs the inputs make: each exactly once.
func TestIntervalJoinSurvivesRepeatedSIGKILL(t *testing.T) {
	// CPU-light (input at a fixed rate, the time is waiting): it runs
	// beside the suite's other parallel tests, after the serial ones.
	t.Parallel()
	for _, backend := range []string{"memory", "pebble"} {
		t.Run(backend, func(t *testing.T) { runJoinKills(t, backend) })
	}
}

func runJoinKills(t *testing.T, backend string) {
	requireBinary(t)
	e := newEnv(t)
	const partitions, kills = 4, 5
	records := 40_000
	if testing.Short() {
		records = 15_000
	}
	right := e.input + "-right"
	createJoinTopics(t, e, right, partitions)
	extra := ""
	if backend == "pebble" {
		extra = fmt.Sprintf("state: {backend: pebble, dir: %q}\n", filepath.Join(e.logDir, "state"))
	}
	cfgPath := writeConfig(t, e, "join.yaml", joinConfig(e, right, partitions, "i1", extra))
	span := time.Duration(kills)*maxStopDelay + 5*time.Second
	rate := max(1, int(float64(records)/span.Seconds()))
	inL := StartInput(t, e.seeds, InputSpec{Topic: e.input, Records: records, Keys: joinKeys, Rate: rate})
	inR := StartInput(t, e.seeds, InputSpec{Topic: right, Records: records, Keys: joinKeys, Rate: rate})
	start := time.Now()
	e.killRepeatedly(t, cfgPath, kills, records)
	p := e.startPipeline(cfgPath)
	inL.Wait(t)
	inR.Wait(t)
	e.waitJoinCommitted(t, right, p)
	p.Term()
	n := checkJoin(t, e, right, records)
	e.audit(cfgPath, 2*records)
	t.Logf("figures: %s backend, %d records on each side, %d pairs, %d SIGKILLs, %v, every pair once",
		backend, records, n, kills, time.Since(start).Round(time.Millisecond))
}

// TestIntervalJoinAcrossARebalance runs the join on one instance, then two
// (the second restores the buffered records and timers of the partitions
// it takes over), then one again after the first is SIGKILLed and
// restarted: no pair may be lost or emitted twice across the moves.
func TestIntervalJoinAcrossARebalance(t *testing.T) {
	// CPU-light (input at a fixed rate, the time is waiting): it runs
	// beside the suite's other parallel tests, after the serial ones.
	t.Parallel()
	requireBinary(t)
	e := newEnv(t)
	const partitions = 4
	records := 40_000
	if testing.Short() {
		records = 15_000
	}
	right := e.input + "-right"
	createJoinTopics(t, e, right, partitions)
	cfg1 := writeConfig(t, e, "i1.yaml", joinConfig(e, right, partitions, "i1", ""))
	cfg2 := writeConfig(t, e, "i2.yaml", joinConfig(e, right, partitions, "i2", ""))
	start := time.Now()
	inL := StartInput(t, e.seeds, InputSpec{Topic: e.input, Records: records, Keys: joinKeys, Rate: records / 15})
	inR := StartInput(t, e.seeds, InputSpec{Topic: right, Records: records, Keys: joinKeys, Rate: records / 15})
	p1, p2 := e.oneTwoOne(t, cfg1, cfg2, records)
	inL.Wait(t)
	inR.Wait(t)
	e.waitJoinCommitted(t, right, p1, p2)
	p1.Term()
	p2.Term()
	n := checkJoin(t, e, right, records)
	t.Logf("figures: %d records on each side, %d pairs, 1 → 2 → 1 instances with a SIGKILL, %v, every pair once",
		records, n, time.Since(start).Round(time.Millisecond))
}

// oneTwoOne runs the pipeline on instance 1 (cfg1) until it commits, then
// on 2 as well until the second has restored state it took over, then
// SIGKILLs the first and starts it again until it has restored its own
// state, all before the group has committed the input's records. It
// returns both running processes.
func (e *env) oneTwoOne(t *testing.T, cfg1, cfg2 string, records int) (p1, p2 *Process) {
	t.Helper()
	p1 = e.startPipeline(cfg1)
	WaitFor(t, time.Minute, "the first instance to commit something", func() (bool, string) {
		c, _, err := e.committed()
		return err == nil && c > 0, fmt.Sprintf("committed %d (%v)", c, err)
	})
	p2 = e.startPipeline(cfg2)
	WaitFor(t, time.Minute, "the second instance to restore state it took over", func() (bool, string) {
		return fileContains(p2.LogPath(), "state restored"), "no restore in i2's log yet"
	})
	if c, _, _ := e.committed(); c >= int64(records) {
		t.Fatalf("the second instance joined after the input was consumed: %d of %d committed", c, records)
	}
	p1.sleepOrExit(t.Context(), 2*time.Second)
	p1.Kill()
	if c, _, _ := e.committed(); c >= int64(records) {
		t.Fatalf("the kill came after the input was consumed: %d of %d committed", c, records)
	}
	p1 = e.startPipeline(cfg1)
	WaitFor(t, time.Minute, "the restarted first instance to restore its state", func() (bool, string) {
		return fileContains(p1.LogPath(), "state restored"), "no restore in the restarted i1's log yet"
	})
	return p1, p2
}

// killRepeatedly starts the pipeline of cfgPath and SIGKILLs it kills
// times, each after a random delay, while the input flows; every kill must
// come before the group has committed all records of the input, and the
// kills together after it committed some.
func (e *env) killRepeatedly(t *testing.T, cfgPath string, kills, records int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(e2eSeed(t), 0))
	var last int64
	for i := range kills {
		p := e.startPipeline(cfgPath)
		delay := minStopDelay + time.Duration(rng.Int64N(int64(maxStopDelay-minStopDelay)))
		p.sleepOrExit(t.Context(), delay)
		p.Kill()
		// A broker started moments ago may not have its group
		// coordinator ready yet; that is not what this test is about.
		var committed int64
		WaitFor(t, 30*time.Second, "the group's committed offsets", func() (bool, string) {
			c, _, err := e.committed()
			committed = c
			return err == nil, fmt.Sprint(err)
		})
		if committed >= int64(records) {
			t.Fatalf("SIGKILL %d came after everything was committed", i+1)
		}
		t.Logf("SIGKILL %d/%d after %v: %d input records committed (+%d)", i+1, kills, delay.Round(time.Millisecond), committed, committed-last)
		last = committed
	}
	if last == 0 {
		t.Fatal("nothing was committed across the kills: none hit a pipeline at work")
	}
}

func createJoinTopics(t *testing.T, e *env, right string, partitions int32) {
	t.Helper()
	CreateTopics(t, e.adm, partitions, e.input, right)
	// The pairs are stamped with their event time, in January 1970: no
	// time retention for them.
	forever := "-1"
	CreateTopicsWith(t, e.adm, partitions, map[string]*string{"retention.ms": &forever}, e.output)
}

func writeConfig(t *testing.T, e *env, name, body string) string {
	t.Helper()
	path := filepath.Join(e.logDir, name)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// waitJoinCommitted waits until the group has committed the ends of both
// inputs.
func (e *env) waitJoinCommitted(t *testing.T, right string, procs ...*Process) {
	t.Helper()
	e.waitInputCommitted(t, e.inputEnd(), procs...)
	re := *e
	re.input = right
	re.waitInputCommitted(t, re.inputEnd(), procs...)
}

// checkJoin reads both inputs and the output back and fails the test unless
// the output holds each pair the inputs make exactly once, and nothing
// else; it returns the number of pairs.
func checkJoin(t *testing.T, e *env, right string, records int) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	seqs := func(topic string) map[int64]string {
		recs, err := offsets.ReadToEnd(ctx, e.cl, topic, true)
		if err != nil {
			t.Fatalf("reading %s: %v", topic, err)
		}
		out := map[int64]string{}
		for _, r := range recs {
			var v struct {
				K   string `json:"k"`
				Seq int64  `json:"seq"`
			}
			if err := json.Unmarshal(r.Value, &v); err != nil || v.K != string(r.Key) {
				t.Fatalf("%s/%d@%d: not a generator record: %s", r.Topic, r.Partition, r.Offset, r.Value)
			}
			out[v.Seq] = v.K
		}
		if len(out) != records {
			t.Fatalf("%s holds %d seqs, the generator wrote %d", topic, len(out), records)
		}
		return out
	}
	left, rightSeqs := seqs(e.input), seqs(right)
	want := map[string]bool{}
	for s, k := range left {
		for _, d := range []int64{-joinKeys, 0, joinKeys} {
			if rk, ok := rightSeqs[s+d]; ok && rk == k && abs(d*seqMs) <= joinWithin {
				want[fmt.Sprintf("%s L%d R%d", k, s, s+d)] = true
			}
		}
	}
	out, err := offsets.ReadToEnd(ctx, e.cl, e.output, true)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var bad []string
	for _, r := range out {
		var v struct {
			Key   string `json:"key"`
			Left  struct{ Seq int64 }
			Right struct{ Seq int64 }
		}
		if err := json.Unmarshal(r.Value, &v); err != nil || v.Key != string(r.Key) {
			bad = append(bad, fmt.Sprintf("output %s/%d@%d: %s (%v)", r.Topic, r.Partition, r.Offset, r.Value, err))
			continue
		}
		pair := fmt.Sprintf("%s L%d R%d", v.Key, v.Left.Seq, v.Right.Seq)
		switch {
		case !want[pair]:
			bad = append(bad, "a pair the inputs do not make: "+pair)
		case seen[pair]:
			bad = append(bad, "a pair emitted twice: "+pair)
		case r.Timestamp.UnixMilli() != max(v.Left.Seq, v.Right.Seq)*seqMs:
			bad = append(bad, fmt.Sprintf("%s stamped %d", pair, r.Timestamp.UnixMilli()))
		}
		seen[pair] = true
	}
	for pair := range want {
		if !seen[pair] {
			bad = append(bad, "missing: "+pair)
		}
	}
	if len(bad) > 0 {
		t.Fatalf("%d differences from the %d pairs the inputs make (%d output records):\n%s", len(bad), len(want), len(out), strings.Join(bad[:min(len(bad), 10)], "\n"))
	}
	t.Logf("checked %d pairs over %d records on each side: each emitted once", len(want), records)
	return len(want)
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
