package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/internal/codec"
	"github.com/pipeline-run/pipeline/internal/testkit"
	"github.com/pipeline-run/pipeline/wire"
)

// The window tests check results against an oracle computed from the input
// alone: for each partition, in order, the watermark is the latest event
// time seen minus the bound, and a record is late once its window's end
// plus the lateness is at or behind it. Nothing of the implementation is
// used.

const t0 = int64(1_700_000_000_000) // event times start here (Unix ms)

// event is one input record: its partition, key, event time and value.
type event struct {
	part int32
	key  string
	ts   int64
	v    int
}

// wkey names one window of one key.
type wkey struct {
	key        string
	start, end int64
}

func (w wkey) String() string {
	return fmt.Sprintf("%s[%d,%d)", w.key, w.start-t0, w.end-t0)
}

// emission is one result of a window.
type emission struct {
	n, sum int
	timing string
}

func (e emission) String() string { return fmt.Sprintf("%s n=%d sum=%d", e.timing, e.n, e.sum) }

// windowOracle computes the results of tumbling (slide == size) or
// sliding windows over parts, each partition's events in order, and the
// events that are late data.
func windowOracle(parts [][]event, size, slide, bound, lateness int64) (map[wkey][]emission, []event) {
	out := map[wkey][]emission{}
	var late []event
	for _, evs := range parts {
		type win struct {
			n, sum int
			fired  bool
		}
		open := map[wkey]*win{}
		wm := int64(math.MinInt64)
		for _, e := range evs {
			wm = max(wm, e.ts-bound)
			// Windows whose end the watermark reached close, in any order:
			// each window's own results are what is compared.
			for k, w := range open {
				if !w.fired && k.end <= wm {
					w.fired = true
					out[k] = append(out[k], emission{w.n, w.sum, "on_time"})
				}
			}
			took := false
			first := e.ts - ((e.ts%slide)+slide)%slide
			for start := first; start > e.ts-size; start -= slide {
				k := wkey{e.key, start, start + size}
				if k.end+lateness <= wm {
					continue
				}
				took = true
				w := open[k]
				if w == nil {
					w = &win{}
					open[k] = w
				}
				w.n++
				w.sum += e.v
				if w.fired || k.end <= wm {
					w.fired = true
					out[k] = append(out[k], emission{w.n, w.sum, "late"})
				}
			}
			if !took {
				late = append(late, e)
			}
		}
	}
	return out, late
}

// sessionOracle computes session windows of the given gap from events that
// all came on time: per key, events no more than gap apart in event time
// are one session, [first, last+gap).
func sessionOracle(parts [][]event, gap int64) map[wkey][]emission {
	byKey := map[string][]event{}
	for _, evs := range parts {
		for _, e := range evs {
			byKey[e.key] = append(byKey[e.key], e)
		}
	}
	out := map[wkey][]emission{}
	for key, evs := range byKey {
		slices.SortFunc(evs, func(a, b event) int { return int(a.ts - b.ts) })
		var cur wkey
		var em emission
		for i, e := range evs {
			if i > 0 && e.ts > cur.end {
				out[cur] = []emission{em}
				em = emission{}
			}
			if i == 0 || e.ts > cur.end {
				cur = wkey{key, e.ts, e.ts + gap}
			}
			cur.end = max(cur.end, e.ts+gap)
			em.n++
			em.sum += e.v
			em.timing = "on_time"
		}
		out[cur] = []emission{em}
	}
	return out
}

// genEvents makes n events per partition over keys per partition: mostly
// moving forward, some out of order within bound, and, when late > 0,
// that share of them further behind (late data, or within the lateness).
func genEvents(rng *rand.Rand, partitions, n, keys int, bound int64, late float64, reach int64) [][]event {
	parts := make([][]event, partitions)
	for p := range parts {
		maxSeen := t0
		for i := range n {
			ts := maxSeen + rng.Int64N(700)
			switch x := rng.Float64(); {
			case x < late:
				ts = maxSeen - bound - rng.Int64N(reach)
			case x < late+0.3:
				ts = maxSeen - rng.Int64N(bound) // on time: after the watermark
			}
			maxSeen = max(maxSeen, ts)
			parts[p] = append(parts[p], event{part: int32(p), key: fmt.Sprintf("p%dk%d", p, rng.IntN(keys)), ts: ts, v: i%7 + 1})
		}
	}
	return parts
}

// withFlush adds to each partition a last record, keyed "flush", ahead in
// event time of the others by ahead: it closes every window before it.
// Results of key "flush" are left out of the comparisons.
func withFlush(parts [][]event, ahead int64) [][]event {
	out := make([][]event, len(parts))
	for p, evs := range parts {
		maxSeen := t0
		for _, e := range evs {
			maxSeen = max(maxSeen, e.ts)
		}
		out[p] = append(slices.Clip(evs), event{part: int32(p), key: "flush", ts: maxSeen + ahead})
	}
	return out
}

func eventValue(e event) []byte { return fmt.Appendf(nil, `{"k":%q,"ts":%d,"v":%d}`, e.key, e.ts, e.v) }

// produceEvents writes each event to its partition.
func produceEvents(t *testing.T, k *testkit.Kafka, topic string, parts [][]event) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var rs []*kgo.Record
	for _, evs := range parts {
		for _, e := range evs {
			rs = append(rs, &kgo.Record{Topic: topic, Partition: e.part, Key: []byte(e.key),
				Value: eventValue(e)})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// windowResults reads a window step's results from topic: each window's
// emissions in the order they were written.
func windowResults(t *testing.T, k *testkit.Kafka, topic string) map[wkey][]emission {
	t.Helper()
	got := map[wkey][]emission{}
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
		w := wkey{key, int64(m["window_start"].(int)), int64(m["window_end"].(int))}
		if want := w.end - 1; r.Timestamp.UnixMilli() != want {
			t.Fatalf("result of %v stamped %d, want end-1 = %d", w, r.Timestamp.UnixMilli()-t0, want-t0)
		}
		n, _ := m["n"].(int)
		sum, _ := m["sum"].(int)
		got[w] = append(got[w], emission{n, sum, m["timing"].(string)})
	}
	return got
}

func compareWindows(t *testing.T, got, want map[wkey][]emission) {
	t.Helper()
	for k := range want {
		if k.key == "flush" {
			delete(want, k)
		}
	}
	var keys []wkey
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	bad := 0
	for _, k := range keys {
		if fmt.Sprint(got[k]) != fmt.Sprint(want[k]) {
			if bad++; bad <= 5 {
				t.Errorf("window %v:\n got %v\nwant %v", k, got[k], want[k])
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d windows differ from the oracle", bad, len(keys))
	}
}

const windowed = `
instance_id: i1
checkpoint: {interval: 50ms, timeout: 10s, max_records: 100}
transactions: {timeout: 20s}
consumer: {session_timeout: 6s}
sources: {in: {topics: [in], event_time: {from: value.ts, max_out_of_orderness: %dms}}}
steps:
  - name: w
    window:
      %s
      allowed_lateness: %dms
      fields: {n: count, sum: {sum: value.v}}
      late: output
sinks:
  out: {topic: out, from: w}
  late: {topic: late, from: w.late}
dead_letter: {topic: dlq}
`

// TestWindowsMatchTheOracle runs tumbling and sliding windows over
// out-of-order and late records on three partitions, aborting every third
// checkpoint and restarting the pipeline half-way: every window's results,
// early closes, corrections and late data included, are the oracle's,
// each exactly once.
func TestWindowsMatchTheOracle(t *testing.T) {
	for _, tc := range []struct {
		name        string
		spec        string
		size, slide int64
		pebble      bool
	}{
		{"tumbling", "tumbling: 2s", 2000, 2000, false},
		{"sliding", "sliding: {size: 3s, slide: 1s}", 3000, 1000, false},
		{"sliding on pebble", "sliding: {size: 3s, slide: 1s}", 3000, 1000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const bound, lateness = 1500, 1000
			rng := rand.New(rand.NewPCG(7, uint64(len(tc.name))))
			parts := withFlush(genEvents(rng, 3, 600, 5, bound, 0.08, 4000), 100*tc.size)
			want, late := windowOracle(parts, tc.size, tc.slide, bound, lateness)
			corrections := 0
			for _, em := range want {
				corrections += len(em) - 1
			}
			if len(late) == 0 || corrections == 0 {
				t.Fatalf("the input has %d late records and %d corrections: it tests nothing", len(late), corrections)
			}

			k := testkit.NewKafka(t)
			for _, topic := range []string{"in", "out", "late", "dlq"} {
				k.Topic(topic, 3)
			}
			body := fmt.Sprintf(windowed, bound, tc.spec, lateness)
			if tc.pebble {
				body += fmt.Sprintf("state: {backend: pebble, dir: %q}\n", t.TempDir())
			}
			// The first half, with every third checkpoint aborted.
			half := make([][]event, len(parts))
			rest := make([][]event, len(parts))
			for p := range parts {
				half[p], rest[p] = parts[p][:len(parts[p])/2], parts[p][len(parts[p])/2:]
			}
			produceEvents(t, k, "in", half)
			every := testkit.NewEveryNth(3)
			first := newPipeline(t, k, body, nil, WithBeforeCommit(func(cp Checkpoint) error {
				if cp.Records > 0 && every.Hit() {
					return errors.New("injected")
				}
				return nil
			}))
			// The client's fetched memory goes back to it as the
			// windows go (chunkHold): the oracle checks that too.
			if !first.g.recycles {
				t.Fatal("the windowed graph does not recycle what it fetches")
			}
			testkit.RunUntilCommitted(t, k, first, "t", "in")
			if every.Fired() == 0 {
				t.Fatal("no checkpoint was aborted")
			}
			// The rest, on a new pipeline that restores the state and the
			// watermarks from the changelog.
			produceEvents(t, k, "in", rest)
			second := newPipeline(t, k, body, nil)
			testkit.RunUntilCommitted(t, k, second, "t", "in")
			// State holds the open windows only: the flush record's, with
			// their timers, and each task's event time.
			if keys := second.Stats().StateKeys; !tc.pebble && (keys <= 0 || keys > int64(len(parts))*(2*tc.size/tc.slide+1)) {
				t.Fatalf("%d state entries left once every window but the last closed", keys)
			}

			compareWindows(t, windowResults(t, k, "out"), want)
			gotLate := k.ReadAll("late")
			if len(gotLate) != len(late) {
				t.Fatalf("%d records in the late output, the oracle has %d late", len(gotLate), len(late))
			}
			var gl, wl []string
			for _, r := range gotLate {
				gl = append(gl, string(r.Key)+string(r.Value))
			}
			for _, e := range late {
				wl = append(wl, e.key+string(eventValue(e)))
			}
			slices.Sort(gl)
			slices.Sort(wl)
			if !slices.Equal(gl, wl) {
				t.Fatalf("late output differs from the oracle's late records")
			}
			t.Logf("%d windows, %d corrections, %d late records, %d aborted checkpoints", len(want), corrections, len(late), every.Fired())
		})
	}
}

// TestSessionWindowsMatchTheOracle: sessions merge as out-of-order records
// bridge them, and each final session is emitted once.
func TestSessionWindowsMatchTheOracle(t *testing.T) {
	const bound, gap = 1500, 1200
	rng := rand.New(rand.NewPCG(11, 3))
	parts := withFlush(genEvents(rng, 2, 500, 4, bound, 0, 1), 100*gap)
	want := sessionOracle(parts, gap)
	if len(want) < 20 {
		t.Fatalf("only %d sessions", len(want))
	}
	k := testkit.NewKafka(t)
	for _, topic := range []string{"in", "out", "late", "dlq"} {
		k.Topic(topic, 2)
	}
	body := fmt.Sprintf(windowed, bound, fmt.Sprintf("session: {gap: %dms}", gap), 0)
	produceEvents(t, k, "in", parts)
	every := testkit.NewEveryNth(4)
	p := newPipeline(t, k, body, nil, WithBeforeCommit(func(cp Checkpoint) error {
		if cp.Records > 0 && every.Hit() {
			return errors.New("injected")
		}
		return nil
	}))
	testkit.RunUntilCommitted(t, k, p, "t", "in")
	compareWindows(t, windowResults(t, k, "out"), want)
	if n := len(k.ReadAll("late")); n != 0 {
		t.Fatalf("%d late records from an input with none", n)
	}
	t.Logf("%d sessions, %d aborted checkpoints", len(want), every.Fired())
}

// TestWindowResultShape pins the JSON of a result: the documented shape.
func TestWindowResultShape(t *testing.T) {
	k := testkit.NewKafka(t)
	for _, topic := range []string{"in", "out", "late", "dlq"} {
		k.Topic(topic, 1)
	}
	body := strings.Replace(fmt.Sprintf(windowed, 0, "tumbling: 1m", 0), "fields: {n: count, sum: {sum: value.v}}",
		"fields: {n: count, sum: {sum: value.v}, mean: {avg: value.v}, hi: {max: value.v}}", 1)
	produceEvents(t, k, "in", withFlush([][]event{{{0, "s1", t0 + 1000, 3}, {0, "s1", t0 + 2000, 4}}}, 120_000))
	testkit.RunUntilCommitted(t, k, newPipeline(t, k, body, nil), "t", "in")
	var out []*kgo.Record
	for _, r := range k.ReadAll("out") {
		if string(r.Key) != "flush" {
			out = append(out, r)
		}
	}
	if len(out) != 1 {
		t.Fatalf("%d results, want 1", len(out))
	}
	start := t0 - t0%60000
	var got, want any
	_ = json.Unmarshal(out[0].Value, &got)
	_ = json.Unmarshal(fmt.Appendf(nil, `{"key":"s1","window_start":%d,"window_end":%d,"timing":"on_time","n":2,"sum":7,"mean":3.5,"hi":4}`, start, start+60000), &want)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("result %s", out[0].Value)
	}
	if string(out[0].Key) != "s1" || out[0].Timestamp.UnixMilli() != start+60000-1 {
		t.Fatalf("result key %q, timestamp %d", out[0].Key, out[0].Timestamp.UnixMilli())
	}
}

const windowedByKey = `
instance_id: i1
checkpoint: {interval: 50ms, timeout: 10s, max_records: 200}
transactions: {timeout: 20s}
consumer: {session_timeout: 6s}
sources: {in: {topics: [in], event_time: {from: value.ts, max_out_of_orderness: %dms%s}}}
steps:
  - name: by_k
    key_by: value.k
  - name: w
    window:
      tumbling: 2s
      fields: {n: count, sum: {sum: value.v}}
      late: output
sinks:
  out: {topic: out, from: w}
  late: {topic: late, from: w.late}
dead_letter: {topic: dlq}
`

// spread makes events of keys k0..k4 on one partition, from event time
// from to to, in order but for disorder within bound.
func spread(rng *rand.Rand, part int32, from, to, bound int64) []event {
	var evs []event
	maxSeen := from
	for ts := from; ts < to; ts += 50 + rng.Int64N(100) {
		e := ts
		if rng.IntN(4) == 0 {
			e = max(from, maxSeen-rng.Int64N(bound))
		}
		maxSeen = max(maxSeen, e)
		evs = append(evs, event{part: part, key: fmt.Sprintf("k%d", rng.IntN(5)), ts: e, v: rng.IntN(9) + 1})
	}
	return evs
}

// allOnTime is what windows of size over every event say when none is
// late: each window's one result.
func allOnTime(parts [][]event, size int64) map[wkey][]emission {
	var all []event
	for _, evs := range parts {
		all = append(all, evs...)
	}
	slices.SortStableFunc(all, func(a, b event) int { return int(a.ts - b.ts) })
	want, late := windowOracle([][]event{withFlush([][]event{all}, 10*size)[0]}, size, size, 0, 0)
	if len(late) > 0 {
		panic("sorted events cannot be late")
	}
	return want
}

// TestWatermarksCrossKeyByAtTheSlowestWriter: a window after a key_by sees
// records of one key from every upstream partition. One upstream partition
// is far behind: the window must wait for it, so that its records, when
// they come, are on time, not late, even across a restart of the pipeline.
func TestWatermarksCrossKeyByAtTheSlowestWriter(t *testing.T) {
	const bound = 1000
	rng := rand.New(rand.NewPCG(5, 5))
	fast := spread(rng, 0, t0, t0+60_000, bound)
	slowHead := spread(rng, 1, t0, t0+5_000, bound)
	slowTail := spread(rng, 1, t0+5_000, t0+60_000, bound)
	want := allOnTime([][]event{fast, slowHead, slowTail}, 2000)

	k := testkit.NewKafka(t)
	for _, topic := range []string{"in", "out", "late", "dlq"} {
		k.Topic(topic, 2)
	}
	body := fmt.Sprintf(windowedByKey, bound, "")
	repart := wire.RepartitionTopic("t", "by_k")
	produceEvents(t, k, "in", [][]event{fast, slowHead})
	testkit.RunUntilSettled(t, k, newPipeline(t, k, body, nil), "t", "in", repart)
	early := windowResults(t, k, "out")
	held := slowHead[len(slowHead)-1].ts - bound
	for _, e := range slowHead {
		held = max(held, e.ts-bound)
	}
	if len(early) == 0 {
		t.Fatal("no window closed before the slow partition caught up: the test shows nothing")
	}
	for w := range early {
		if w.end > held {
			t.Fatalf("window %v closed, but the slow partition's watermark is at %d", w, held-t0)
		}
	}

	// The slow partition catches up, on a new pipeline. (Only it gets a
	// flush event: one on the fast partition, far behind where that
	// partition already was, would be late or not as the race between
	// the two writers went.)
	produceEvents(t, k, "in", [][]event{withFlush([][]event{nil, slowTail}, 20_000)[1]})
	last := fast[len(fast)-1]
	for _, e := range fast {
		last.ts = max(last.ts, e.ts)
	}
	produceEvents(t, k, "in", [][]event{{{part: 0, key: "flush", ts: last.ts + 20_000}}})
	testkit.RunUntilSettled(t, k, newPipeline(t, k, body, nil), "t", "in", repart)
	if n := len(k.ReadAll("late")); n != 0 {
		t.Fatalf("%d records were late: a window closed before the slow partition passed it", n)
	}
	compareWindows(t, windowResults(t, k, "out"), want)
	t.Logf("%d windows; %d had closed while the slow partition was behind", len(want), len(early))
}

// TestIdlePartitionsStopHoldingTheWatermark: one upstream partition stops
// early and another never has a record; with idle_timeout they stop
// holding the window back after a key_by.
func TestIdlePartitionsStopHoldingTheWatermark(t *testing.T) {
	const bound = 500
	rng := rand.New(rand.NewPCG(9, 9))
	busy := spread(rng, 0, t0, t0+30_000, bound)
	quiet := spread(rng, 1, t0, t0+3_000, bound)
	all := allOnTime([][]event{busy, quiet}, 2000)
	wm := t0
	for _, e := range busy {
		wm = max(wm, e.ts-bound)
	}
	want := map[wkey][]emission{}
	for w, em := range all {
		if w.end <= wm {
			want[w] = em
		}
	}

	k := testkit.NewKafka(t)
	for _, topic := range []string{"in", "out", "late", "dlq"} {
		k.Topic(topic, 3) // partition 2 never has a record
	}
	produceEvents(t, k, "in", [][]event{busy, quiet})
	p := newPipeline(t, k, fmt.Sprintf(windowedByKey, bound, ", idle_timeout: 300ms"), nil)
	stop := testkit.Start(t, p)
	deadline := time.Now().Add(60 * time.Second)
	var got map[wkey][]emission
	for {
		got = windowResults(t, k, "out")
		if len(got) >= len(want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	compareWindows(t, got, want)

	// The quiet partition comes back: a record ahead of the watermark is
	// on time and counted; one behind it is late. Then both partitions
	// move far ahead, which closes the new record's window.
	ahead := event{part: 1, key: "k0", ts: wm + 5_000, v: 7}
	behind := event{part: 1, key: "k1", ts: t0 + 1_000, v: 8}
	produceEvents(t, k, "in", [][]event{{{part: 0, key: "flush", ts: wm + 60_000}}, {ahead, behind, {part: 1, key: "flush", ts: wm + 60_000}}})
	aw := wkey{"k0", ahead.ts - ahead.ts%2000, ahead.ts - ahead.ts%2000 + 2000}
	waitWindows(t, k, "out", aw, "[on_time n=1 sum=7]")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	late := k.ReadAll("late")
	if len(late) != 1 || string(late[0].Value) != string(eventValue(behind)) {
		t.Fatalf("late output %d records; want the one record behind the watermark", len(late))
	}
	t.Logf("%d windows closed on the busy partition alone; the quiet one rejoined", len(want))
}

// waitWindows polls topic until some window's results are want.
func waitWindows(t *testing.T, k *testkit.Kafka, topic string, w wkey, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := windowResults(t, k, topic)[w]
		if fmt.Sprint(got) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("window %v: results %v, want %s", w, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestEarlyResultsFollowTheProcessingClock: with emit: {early: 10s} an
// open window's changes come out at most every 10 s of processing time,
// then its final result at the close; a processing-time timer fires only
// once its time came.
func TestEarlyResultsFollowTheProcessingClock(t *testing.T) {
	k := testkit.NewKafka(t)
	for _, topic := range []string{"in", "out", "late", "dlq"} {
		k.Topic(topic, 1)
	}
	body := strings.Replace(fmt.Sprintf(windowed, 0, "tumbling: 1m\n      emit: {early: 10s}", 0), "max_records: 100", "max_records: 100000", 1)
	clock := newManualClock()
	p := newPipeline(t, k, body, nil, WithClock(clock))
	testkit.Start(t, p)
	w := wkey{"a", t0 - t0%60000, t0 - t0%60000 + 60000}
	send := func(vs ...int) {
		var evs []event
		for _, v := range vs {
			evs = append(evs, event{0, "a", w.start + int64(v)*100, v})
		}
		produceEvents(t, k, "in", [][]event{evs})
		wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := k.WaitCommitted(wctx, "t", "in"); err != nil {
			t.Fatal(err)
		}
	}
	send(1, 2, 3)
	time.Sleep(300 * time.Millisecond) // checkpoints pass: the clock has not moved, nothing is due
	if got := windowResults(t, k, "out")[w]; len(got) != 0 {
		t.Fatalf("results %v before the early timer's time", got)
	}
	clock.advance(11 * time.Second)
	waitWindows(t, k, "out", w, "[early n=3 sum=6]")
	clock.advance(11 * time.Second) // unchanged since: nothing more
	time.Sleep(300 * time.Millisecond)
	send(4, 5)
	clock.advance(11 * time.Second)
	waitWindows(t, k, "out", w, "[early n=3 sum=6 early n=5 sum=15]")
	produceEvents(t, k, "in", [][]event{{{0, "flush", w.end + 60000, 0}}})
	waitWindows(t, k, "out", w, "[early n=3 sum=6 early n=5 sum=15 on_time n=5 sum=15]")
}

// TestProcessingTimeWindows: windows of the processing clock take records
// by when they are processed and close when the clock passes their end.
func TestProcessingTimeWindows(t *testing.T) {
	k := testkit.NewKafka(t)
	for _, topic := range []string{"in", "out", "late", "dlq"} {
		k.Topic(topic, 1)
	}
	body := strings.Replace(fmt.Sprintf(windowed, 0, "tumbling: 1m\n      time: processing", 0), "\n      allowed_lateness: 0ms", "", 1)
	clock := newManualClock()
	p := newPipeline(t, k, body, nil, WithClock(clock))
	testkit.Start(t, p)
	now := clock.Now().UnixMilli()
	w := wkey{"a", now - now%60000, now - now%60000 + 60000}
	// Event times far in the past do not matter.
	produceEvents(t, k, "in", [][]event{{{0, "a", 5, 1}, {0, "a", 7, 2}}})
	wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := k.WaitCommitted(wctx, "t", "in"); err != nil {
		t.Fatal(err)
	}
	if got := windowResults(t, k, "out")[w]; len(got) != 0 {
		t.Fatalf("results %v before the window's end", got)
	}
	clock.advance(time.Minute)
	waitWindows(t, k, "out", w, "[on_time n=2 sum=3]")
	if n := len(k.ReadAll("late")); n != 0 {
		t.Fatalf("%d late records", n)
	}
}

// FuzzWindows is the property: for random event-time streams (random
// disorder and late records, one to three partitions, tumbling, sliding or
// session windows), random aborted checkpoints and restarts of the
// pipeline at random points, the results are the oracle's, each once. `go
// test` runs the seeds below; `go test -fuzz FuzzWindows` searches on.
func FuzzWindows(f *testing.F) {
	f.Add(uint64(1), uint8(0), uint8(2), uint16(800), uint16(500), uint8(2))
	f.Add(uint64(2), uint8(1), uint8(1), uint16(0), uint16(0), uint8(0))
	f.Add(uint64(3), uint8(2), uint8(3), uint16(1500), uint16(0), uint8(3))
	f.Add(uint64(4), uint8(1), uint8(3), uint16(2000), uint16(3000), uint8(1))
	f.Fuzz(func(t *testing.T, seed uint64, kind, partitions uint8, bound, lateness uint16, restarts uint8) {
		rng := rand.New(rand.NewPCG(seed, 99))
		parts := int(partitions%3) + 1
		b, l := int64(bound%3000)+1, int64(lateness%4000)
		var spec string
		var want map[wkey][]emission
		var late []event
		switch kind % 3 {
		case 0, 1:
			size := int64(500 + rng.IntN(3000))
			slide := size
			spec = fmt.Sprintf("tumbling: %dms", size)
			if kind%3 == 1 {
				slide = int64(100 + rng.IntN(int(size)-99)) // up to the size
				spec = fmt.Sprintf("sliding: {size: %dms, slide: %dms}", size, slide)
			}
			evs := withFlush(genEvents(rng, parts, 150+rng.IntN(250), 1+rng.IntN(6), b, rng.Float64()*0.15, 1+rng.Int64N(6000)), 100*size+l)
			want, late = windowOracle(evs, size, slide, b, l)
			runWindowsFuzz(t, rng, evs, fmt.Sprintf(windowed, b, spec, l), int(restarts%4), want, late)
		default:
			gap := int64(200 + rng.IntN(2000))
			evs := withFlush(genEvents(rng, parts, 150+rng.IntN(250), 1+rng.IntN(6), b, 0, 1), 100*gap)
			want = sessionOracle(evs, gap)
			runWindowsFuzz(t, rng, evs, fmt.Sprintf(windowed, b, fmt.Sprintf("session: {gap: %dms}", gap), 0), int(restarts%4), want, nil)
		}
	})
}

func runWindowsFuzz(t *testing.T, rng *rand.Rand, evs [][]event, body string, restarts int, want map[wkey][]emission, late []event) {
	k := testkit.NewKafka(t)
	for _, topic := range []string{"in", "out", "late", "dlq"} {
		k.Topic(topic, int32(len(evs)))
	}
	// Each run of the pipeline gets a random share of every partition.
	chunks := make([][][]event, restarts+1)
	for _, pe := range evs {
		cuts := []int{0, len(pe)}
		for range restarts {
			cuts = append(cuts, rng.IntN(len(pe)+1))
		}
		slices.Sort(cuts)
		for i := range chunks {
			chunks[i] = append(chunks[i], pe[cuts[i]:cuts[i+1]])
		}
	}
	body = strings.Replace(body, "max_records: 100", "max_records: 40", 1)
	aborted := 0
	for _, chunk := range chunks {
		produceEvents(t, k, "in", chunk)
		every := testkit.NewEveryNth(2 + rng.IntN(4))
		p := newPipeline(t, k, body, nil, WithBeforeCommit(func(cp Checkpoint) error {
			if cp.Records > 0 && every.Hit() {
				return errors.New("injected")
			}
			return nil
		}))
		testkit.RunUntilCommitted(t, k, p, "t", "in")
		aborted += int(every.Fired())
	}
	compareWindows(t, windowResults(t, k, "out"), want)
	if n := len(k.ReadAll("late")); n != len(late) {
		t.Fatalf("%d records in the late output, the oracle has %d", n, len(late))
	}
	t.Logf("%d windows, %d late, %d runs, %d aborted checkpoints", len(want), len(late), len(chunks), aborted)
}

// TestDroppedLateRecordsAreCounted: with no late output, a late record is
// counted (Stats.LateRecords, the metric's source) and logged, not lost
// silently.
func TestDroppedLateRecordsAreCounted(t *testing.T) {
	k := testkit.NewKafka(t)
	for _, topic := range []string{"in", "out", "late", "dlq"} {
		k.Topic(topic, 1)
	}
	body := strings.Replace(fmt.Sprintf(windowed, 0, "tumbling: 2s", 0), "      late: output\n", "", 1)
	body = strings.Replace(body, "  late: {topic: late, from: w.late}\n", "", 1)
	var logs strings.Builder
	var mu sync.Mutex
	p := newPipeline(t, k, body, nil, WithLogger(slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))))
	produceEvents(t, k, "in", [][]event{{{0, "a", t0 + 10_000, 1}, {0, "a", t0 + 20_000, 2}, {0, "a", t0 + 1_000, 3}, {0, "a", t0 + 20_500, 4}}})
	testkit.RunUntilCommitted(t, k, p, "t", "in")
	if n := p.Stats().LateRecords; n != 1 {
		t.Fatalf("%d late records counted, want 1", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), "late record dropped") || !strings.Contains(logs.String(), "source=in/0@2") {
		t.Fatalf("no log line names the late record:\n%s", logs.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// TestRepartitionTopicsKeepOldRecordsAndDropConsumedOnes: a repartition
// topic has no time-based retention (its records carry event times, which
// may be years old), and what committed checkpoints consumed of it is
// deleted instead.
func TestRepartitionTopicsKeepOldRecordsAndDropConsumedOnes(t *testing.T) {
	k := testkit.NewKafka(t)
	for _, topic := range []string{"in", "out", "late", "dlq"} {
		k.Topic(topic, 2)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	// Event times in 1970: records a retention of days would delete.
	old := func(p int32) []event {
		evs := spread(rng, p, 0, 30_000, 500)
		return evs
	}
	produceEvents(t, k, "in", [][]event{old(0), old(1)})
	p := newPipeline(t, k, fmt.Sprintf(windowedByKey, 500, ""), nil)
	p.purgeEvery = time.Millisecond
	repart := wire.RepartitionTopic("t", "by_k")
	// Made by an older version, with the broker's default retention: the
	// pipeline sets it.
	if err := k.Cluster.CreateTopic(repart, 2, map[string]string{"retention.ms": "604800000"}); err != nil {
		t.Fatal(err)
	}
	testkit.RunUntilSettled(t, k, p, "t", "in", repart)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfgs, err := k.Admin.DescribeTopicConfigs(ctx, repart)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := cfgs.On(repart, nil)
	if err != nil {
		t.Fatal(err)
	}
	retention := ""
	for _, c := range rc.Configs {
		if c.Key == "retention.ms" && c.Value != nil {
			retention = *c.Value
		}
	}
	if retention != "-1" {
		t.Fatalf("%s has retention.ms %q, want -1", repart, retention)
	}
	starts, err := k.Admin.ListStartOffsets(ctx, repart)
	if err != nil {
		t.Fatal(err)
	}
	deleted := int64(0)
	starts.Each(func(o kadm.ListedOffset) { deleted += o.Offset })
	if deleted == 0 {
		t.Fatalf("nothing of %s was deleted although its records were consumed and committed", repart)
	}
	if len(windowResults(t, k, "out")) == 0 {
		t.Fatal("no window closed")
	}
	t.Logf("%d consumed records of %s deleted", deleted, repart)
}
