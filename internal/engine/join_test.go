package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pipeline-run/pipeline/internal/codec"
	"github.com/pipeline-run/pipeline/internal/testkit"
	"github.com/pipeline-run/pipeline/wire"
)

// The interval join tests check results against an oracle computed from the
// two inputs alone: a left record a and a right record b of one key are a
// pair when a.ts+lower <= b.ts <= a.ts+upper; with type left (outer), a
// left (any) record in no pair comes alone. Each partition's records are
// out of order within the sources' bound, so none is late whatever order
// the two inputs interleave in; late records come in a second phase, once
// the watermark is far past them.

// joinOracle returns the results of the join as strings (see joinResults).
func joinOracle(left, right [][]event, lower, upper int64, kind string) []string {
	var out []string
	matchedR := map[event]bool{}
	for p := range left {
		for _, a := range left[p] {
			if a.key == "flush" {
				continue
			}
			found := false
			for _, b := range right[p] {
				if b.key == a.key && b.ts >= a.ts+lower && b.ts <= a.ts+upper {
					found = true
					matchedR[b] = true
					out = append(out, fmt.Sprintf("%s L%d R%d @%d", a.key, a.v, b.v, max(a.ts, b.ts)-t0))
				}
			}
			if !found && (kind == "left" || kind == "outer") {
				out = append(out, fmt.Sprintf("%s L%d - @%d", a.key, a.v, a.ts-t0))
			}
		}
	}
	if kind == "outer" {
		for p := range right {
			for _, b := range right[p] {
				if !matchedR[b] && b.key != "flush" {
					out = append(out, fmt.Sprintf("%s - R%d @%d", b.key, b.v, b.ts-t0))
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// genJoinEvents makes n events per partition over keys per partition, each
// with a unique v, out of order within bound.
func genJoinEvents(rng *rand.Rand, partitions, n, keys int, bound int64, v0 int) [][]event {
	parts := make([][]event, partitions)
	for p := range parts {
		maxSeen := t0
		for i := range n {
			ts := maxSeen + rng.Int64N(400)
			if rng.Float64() < 0.3 {
				ts = maxSeen - rng.Int64N(bound) // behind, but not behind the watermark
			}
			maxSeen = max(maxSeen, ts)
			parts[p] = append(parts[p], event{part: int32(p), key: fmt.Sprintf("p%dk%d", p, rng.IntN(keys)), ts: ts, v: v0 + p*n + i})
		}
	}
	return parts
}

// joinResults reads the join's results as the oracle writes them, leaving
// out the flush records'.
func joinResults(t *testing.T, k *testkit.Kafka, topic string) []string {
	t.Helper()
	var out []string
	for _, r := range k.ReadAll(topic) {
		x, err := codec.DecodeJSON(r.Value)
		if err != nil {
			t.Fatalf("result %s: %v", r.Value, err)
		}
		m := x.(map[string]any)
		key, _ := m["key"].(string)
		if key != string(r.Key) {
			t.Fatalf("result %s has record key %q", r.Value, r.Key)
		}
		if key == "flush" {
			continue
		}
		side := func(name, tag string) string {
			s, ok := m[name].(map[string]any)
			if !ok {
				if m[name] != nil {
					t.Fatalf("result %s: %s is neither an object nor null", r.Value, name)
				}
				return "-"
			}
			if s["k"] != key {
				t.Fatalf("result %s: its %s record has key %v", r.Value, name, s["k"])
			}
			return fmt.Sprintf("%s%d", tag, s["v"])
		}
		out = append(out, fmt.Sprintf("%s %s %s @%d", key, side("left", "L"), side("right", "R"), r.Timestamp.UnixMilli()-t0))
	}
	slices.Sort(out)
	return out
}

const joined = `
instance_id: i1
checkpoint: {interval: 50ms, timeout: 10s, max_records: 100}
transactions: {timeout: 20s}
consumer: {session_timeout: 6s}
sources:
  orders: {topics: [left], event_time: {from: value.ts, max_out_of_orderness: %[1]dms}}
  payments: {topics: [right], event_time: {from: value.ts, max_out_of_orderness: %[1]dms}}
steps:
  - name: j
    from: [orders, payments]
    interval_join: {lower: %[2]dms, upper: %[3]dms, type: %[4]s, late: output}
sinks:
  out: {topic: out, from: j}
  late: {topic: late, from: j.late}
dead_letter: {topic: dlq}
`

// runJoin runs a pipeline of body until the group has committed both
// inputs' ends.
func runJoin(t *testing.T, k *testkit.Kafka, body string, opts ...Option) *Pipeline {
	t.Helper()
	p := newPipeline(t, k, body, nil, opts...)
	stop := testkit.Start(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	werr := k.WaitCommitted(ctx, "t", "left")
	if werr == nil {
		werr = k.WaitCommitted(ctx, "t", "right")
	}
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
	if werr != nil {
		t.Fatal(werr)
	}
	return p
}

// TestIntervalJoinsMatchTheOracle runs inner, left and outer interval
// joins, on memory and pebble state, over two out-of-order inputs on three
// partitions, aborting every third checkpoint and restarting half-way;
// then feeds records far behind the watermark. Every pair and every
// unmatched record is the oracle's, each exactly once; the late records go
// to the late output and join nothing; the state left holds only what
// could still pair.
func TestIntervalJoinsMatchTheOracle(t *testing.T) {
	for _, tc := range []struct {
		kind   string
		pebble bool
	}{{"inner", false}, {"left", false}, {"outer", false}, {"left", true}} {
		name := tc.kind
		if tc.pebble {
			name += " on pebble"
		}
		t.Run(name, func(t *testing.T) {
			const bound, lower, upper = 1500, -1000, 2000
			rng := rand.New(rand.NewPCG(11, uint64(len(name))))
			left := withFlush(genJoinEvents(rng, 3, 400, 6, bound, 0), 100_000)
			right := withFlush(genJoinEvents(rng, 3, 400, 6, bound, 10_000), 100_000)
			want := joinOracle(left, right, lower, upper, tc.kind)
			pairs, alone := 0, 0
			for _, w := range want {
				if strings.Contains(w, " - ") {
					alone++
				} else {
					pairs++
				}
			}
			if pairs < 100 || (tc.kind != "inner" && alone < 10) {
				t.Fatalf("the input makes %d pairs and %d unmatched results: it tests too little", pairs, alone)
			}

			k := testkit.NewKafka(t)
			for _, topic := range []string{"left", "right", "out", "late", "dlq"} {
				k.Topic(topic, 3)
			}
			body := fmt.Sprintf(joined, bound, lower, upper, tc.kind)
			if tc.pebble {
				body += fmt.Sprintf("state: {backend: pebble, dir: %q}\n", t.TempDir())
			}
			produceEvents(t, k, "left", firstHalf(left))
			produceEvents(t, k, "right", firstHalf(right))
			every := testkit.NewEveryNth(3)
			runJoin(t, k, body, abortEvery(every))
			if every.Fired() == 0 {
				t.Fatal("no checkpoint was aborted")
			}
			produceEvents(t, k, "left", secondHalf(left))
			produceEvents(t, k, "right", secondHalf(right))
			second := runJoin(t, k, body)
			got := joinResults(t, k, "out")
			if !slices.Equal(got, want) {
				diff(t, got, want)
			}
			// Only the flush records can still pair: two per partition,
			// each an entry and a timer, and each task's event time.
			if keys := second.Stats().StateKeys; !tc.pebble && (keys <= 0 || keys > 3*(2*2+2)) {
				t.Fatalf("%d state entries left once every record but the flush ones expired", keys)
			}

			// Records far behind the watermark: late, joined with nothing.
			var late [][]event
			for p := range 3 {
				late = append(late, []event{
					{part: int32(p), key: fmt.Sprintf("p%dk0", p), ts: t0 + 1000, v: 90_000 + p},
					{part: int32(p), key: fmt.Sprintf("p%dk1", p), ts: t0 + 2000, v: 91_000 + p},
				})
			}
			produceEvents(t, k, "left", late)
			produceEvents(t, k, "right", late)
			runJoin(t, k, body)
			if got := joinResults(t, k, "out"); !slices.Equal(got, want) {
				diff(t, got, want)
			}
			if n := len(k.ReadAll("late")); n != 12 {
				t.Fatalf("%d records in the late output, want the 12 late ones", n)
			}
			t.Logf("%s join: %d pairs, %d unmatched results, %d aborted checkpoints, 12 late records", tc.kind, pairs, alone, every.Fired())
		})
	}
}

// abortEvery fails, before its commit, every checkpoint that holds records
// and on which every fires.
func abortEvery(every *testkit.EveryNth) Option {
	return WithBeforeCommit(func(cp Checkpoint) error {
		if cp.Records > 0 && every.Hit() {
			return errors.New("injected")
		}
		return nil
	})
}

// firstHalf and secondHalf split each partition's events in two.
func firstHalf(parts [][]event) [][]event {
	out := make([][]event, len(parts))
	for p := range parts {
		out[p] = parts[p][:len(parts[p])/2]
	}
	return out
}

func secondHalf(parts [][]event) [][]event {
	out := make([][]event, len(parts))
	for p := range parts {
		out[p] = parts[p][len(parts[p])/2:]
	}
	return out
}

// diff fails t with the first differences between got and want, both
// sorted.
func diff(t *testing.T, got, want []string) {
	t.Helper()
	var missing, extra []string
	for _, w := range want {
		if _, ok := slices.BinarySearch(got, w); !ok {
			missing = append(missing, w)
		}
	}
	for _, g := range got {
		if _, ok := slices.BinarySearch(want, g); !ok {
			extra = append(extra, g)
		}
	}
	t.Fatalf("%d results, the oracle has %d: %d missing (first: %v), %d not in it (first: %v)",
		len(got), len(want), len(missing), head(missing), len(extra), head(extra))
}

func head(s []string) []string { return s[:min(len(s), 5)] }

// TestJoinedStreamsMustBeCoPartitioned: a join of topics with other
// partition counts would pair nothing of keys that land in other
// partitions; it stops at start-up naming both topics and counts, and the
// YAML to add. Run with that YAML, the join gives the oracle's results.
func TestJoinedStreamsMustBeCoPartitioned(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("left", 3)
	k.Topic("right", 2)
	k.Topic("out", 3)
	k.Topic("late", 3)
	k.Topic("dlq", 3)
	const bound, lower, upper = 1000, 0, 1000
	body := fmt.Sprintf(joined, bound, lower, upper, "inner")
	p := newPipeline(t, k, body, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := p.Run(ctx)
	want := "steps[0]: step j keeps state over streams that are not co-partitioned: a key must be in the same partition number of every topic they come from, and left has 3, right has 2 partitions"
	suggested := `  - {name: orders_by_key, from: orders, key_by: key}
  - {name: payments_by_key, from: payments, key_by: key}
  - name: j
    from: [orders_by_key, payments_by_key]
`
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), suggested) {
		t.Fatalf("Run: %v\nwant an error holding %q and the YAML\n%s", err, want, suggested)
	}

	rng := rand.New(rand.NewPCG(5, 6))
	left := withFlush(genJoinEvents(rng, 3, 200, 4, bound, 0), 100_000)
	right := withFlush(genJoinEvents(rng, 2, 200, 4, bound, 10_000), 100_000)
	wantOut := joinOracle(left, append(right, nil), lower, upper, "inner")
	if len(wantOut) < 50 {
		t.Fatalf("the input makes %d pairs: it tests too little", len(wantOut))
	}
	produceEvents(t, k, "left", left)
	produceEvents(t, k, "right", right)
	fixed := strings.Replace(body, "  - name: j\n    from: [orders, payments]\n", suggested, 1)
	if fixed == body {
		t.Fatal("the test's YAML has no step j to replace")
	}
	testkit.RunUntilSettled(t, k, newPipeline(t, k, fixed, nil), "t", "left", "right",
		wire.RepartitionTopic("t", "orders_by_key"), wire.RepartitionTopic("t", "payments_by_key"))
	if got := joinResults(t, k, "out"); !slices.Equal(got, wantOut) {
		diff(t, got, wantOut)
	}
}
