package engine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/pipeline-run/pipeline/internal/codec"
	"github.com/pipeline-run/pipeline/internal/testkit"
)

// windowJoinOracle returns the results of a window join of windows of size
// and slide: per key and window, every left × right pair, and with type
// left (outer) the left (any) records of a window with no record of the
// other side alone. Results are "key [start) Lv Rv".
func windowJoinOracle(left, right [][]event, size, slide int64, kind string) []string {
	type wk struct {
		key   string
		start int64
	}
	ls, rs := map[wk][]event{}, map[wk][]event{}
	add := func(m map[wk][]event, parts [][]event) {
		for _, evs := range parts {
			for _, e := range evs {
				if e.key == "flush" {
					continue
				}
				first := e.ts - ((e.ts%slide)+slide)%slide
				for start := first; start > e.ts-size; start -= slide {
					m[wk{e.key, start}] = append(m[wk{e.key, start}], e)
				}
			}
		}
	}
	add(ls, left)
	add(rs, right)
	var out []string
	for w, l := range ls {
		for _, a := range l {
			for _, b := range rs[w] {
				out = append(out, fmt.Sprintf("%s [%d) L%d R%d", w.key, w.start-t0, a.v, b.v))
			}
			if len(rs[w]) == 0 && kind != "inner" {
				out = append(out, fmt.Sprintf("%s [%d) L%d -", w.key, w.start-t0, a.v))
			}
		}
	}
	if kind == "outer" {
		for w, r := range rs {
			if len(ls[w]) > 0 {
				continue
			}
			for _, b := range r {
				out = append(out, fmt.Sprintf("%s [%d) - R%d", w.key, w.start-t0, b.v))
			}
		}
	}
	slices.Sort(out)
	return out
}

func windowJoinResults(t *testing.T, k *testkit.Kafka, size int64) []string {
	t.Helper()
	var out []string
	for _, r := range k.ReadAll("out") {
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
		start, end := int64(m["window_start"].(int)), int64(m["window_end"].(int))
		if end != start+size || r.Timestamp.UnixMilli() != end-1 {
			t.Fatalf("result %s stamped %d", r.Value, r.Timestamp.UnixMilli())
		}
		side := func(name, tag string) string {
			s, ok := m[name].(map[string]any)
			if !ok {
				return "-"
			}
			if s["k"] != key {
				t.Fatalf("result %s: its %s record has key %v", r.Value, name, s["k"])
			}
			return fmt.Sprintf("%s%d", tag, s["v"])
		}
		out = append(out, fmt.Sprintf("%s [%d) %s %s", key, start-t0, side("left", "L"), side("right", "R")))
	}
	slices.Sort(out)
	return out
}

const windowJoined = `
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
    window_join: {%[2]s, type: %[3]s, late: output}
sinks:
  out: {topic: out, from: j}
  late: {topic: late, from: j.late}
dead_letter: {topic: dlq}
`

// TestWindowJoinsMatchTheOracle runs tumbling and sliding window joins,
// inner, left and outer, over two out-of-order inputs on three partitions,
// aborting every third checkpoint and restarting half-way; then feeds
// records whose windows have closed. Every result is the oracle's, exactly
// once; the late records go to the late output.
func TestWindowJoinsMatchTheOracle(t *testing.T) {
	for _, tc := range []struct {
		spec        string
		size, slide int64
		kind        string
		pebble      bool
	}{
		{"tumbling: 2s", 2000, 2000, "inner", false},
		{"tumbling: 2s", 2000, 2000, "outer", false},
		{"sliding: {size: 3s, slide: 1s}", 3000, 1000, "left", false},
		{"sliding: {size: 3s, slide: 1s}", 3000, 1000, "outer", true},
	} {
		name := fmt.Sprintf("%s %s", strings.Fields(tc.spec)[0], tc.kind)
		if tc.pebble {
			name += " on pebble"
		}
		t.Run(name, func(t *testing.T) {
			const bound = 1500
			rng := rand.New(rand.NewPCG(17, uint64(len(name))))
			left := withFlush(genJoinEvents(rng, 3, 300, 10, bound, 0), 100_000)
			right := withFlush(genJoinEvents(rng, 3, 100, 10, bound, 10_000), 100_000)
			want := windowJoinOracle(left, right, tc.size, tc.slide, tc.kind)
			alone := 0
			for _, w := range want {
				if strings.HasSuffix(w, " -") || strings.Contains(w, ") - ") {
					alone++
				}
			}
			if len(want)-alone < 200 || (tc.kind != "inner" && alone < 10) {
				t.Fatalf("the input makes %d pairs and %d unmatched results: it tests too little", len(want)-alone, alone)
			}
			k := testkit.NewKafka(t)
			for _, topic := range []string{"left", "right", "out", "late", "dlq"} {
				k.Topic(topic, 3)
			}
			body := fmt.Sprintf(windowJoined, bound, tc.spec, tc.kind)
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
			runJoin(t, k, body)
			if got := windowJoinResults(t, k, tc.size); !slices.Equal(got, want) {
				diff(t, got, want)
			}
			var late [][]event
			for p := range 3 {
				late = append(late, []event{{part: int32(p), key: fmt.Sprintf("p%dk0", p), ts: t0 + 1000, v: 90_000 + p}})
			}
			produceEvents(t, k, "left", late)
			produceEvents(t, k, "right", late)
			runJoin(t, k, body)
			if got := windowJoinResults(t, k, tc.size); !slices.Equal(got, want) {
				diff(t, got, want)
			}
			if n := len(k.ReadAll("late")); n != 6 {
				t.Fatalf("%d records in the late output, want the 6 late ones", n)
			}
			t.Logf("%s: %d pairs, %d unmatched results, %d aborted checkpoints, 6 late records", name, len(want)-alone, alone, every.Fired())
		})
	}
}

// coGroupOracle returns each window's group of a co_group: "key [start)
// L[v…] R[v…]", each side in time order (of one time, in the order
// written).
func coGroupOracle(left, right [][]event, size, slide int64) []string {
	type wk struct {
		key   string
		start int64
	}
	groups := map[wk]*[2][]event{}
	add := func(side int, parts [][]event) {
		for _, evs := range parts {
			for _, e := range evs {
				if e.key == "flush" {
					continue
				}
				first := e.ts - ((e.ts%slide)+slide)%slide
				for start := first; start > e.ts-size; start -= slide {
					g := groups[wk{e.key, start}]
					if g == nil {
						g = &[2][]event{}
						groups[wk{e.key, start}] = g
					}
					g[side] = append(g[side], e)
				}
			}
		}
	}
	add(0, left)
	add(1, right)
	var out []string
	for w, g := range groups {
		var vs [2][]string
		for side := range 2 {
			slices.SortStableFunc(g[side], func(a, b event) int { return int(a.ts - b.ts) })
			for _, e := range g[side] {
				vs[side] = append(vs[side], fmt.Sprint(e.v))
			}
		}
		out = append(out, fmt.Sprintf("%s [%d) L%v R%v", w.key, w.start-t0, vs[0], vs[1]))
	}
	slices.Sort(out)
	return out
}

// TestCoGroupsMatchTheOracle runs co_group over tumbling and sliding
// windows, with aborted checkpoints and a restart: each window's group is
// emitted once, both sides in time order; with a value, the expression's
// result of it.
func TestCoGroupsMatchTheOracle(t *testing.T) {
	for _, tc := range []struct {
		spec        string
		size, slide int64
		value       string
	}{
		{"tumbling: 2s", 2000, 2000, ""},
		{"sliding: {size: 3s, slide: 1s}", 3000, 1000, ", value: '{key: value.key, window_start: value.window_start, l: len(value.left), r: len(value.right)}'"},
	} {
		t.Run(strings.Fields(tc.spec)[0], func(t *testing.T) {
			const bound = 1500
			rng := rand.New(rand.NewPCG(19, uint64(tc.size)))
			left := withFlush(genJoinEvents(rng, 3, 300, 10, bound, 0), 100_000)
			right := withFlush(genJoinEvents(rng, 3, 100, 10, bound, 10_000), 100_000)
			want := coGroupOracle(left, right, tc.size, tc.slide)
			if tc.value != "" {
				// The expression's result: the sizes of the sides.
				for i, w := range want {
					f := strings.Fields(w)
					l := strings.Count(w[strings.Index(w, "L["):strings.Index(w, " R[")], " ") + 1
					if strings.Contains(w, "L[]") {
						l = 0
					}
					r := strings.Count(w[strings.Index(w, "R["):], " ") + 1
					if strings.HasSuffix(w, "R[]") {
						r = 0
					}
					want[i] = fmt.Sprintf("%s %s l=%d r=%d", f[0], f[1], l, r)
				}
				slices.Sort(want)
			}
			k := testkit.NewKafka(t)
			for _, topic := range []string{"left", "right", "out", "late", "dlq"} {
				k.Topic(topic, 3)
			}
			body := strings.Replace(fmt.Sprintf(windowJoined, bound, tc.spec+tc.value, "inner"), "window_join: {", "co_group: {", 1)
			body = strings.Replace(body, ", type: inner", "", 1)
			produceEvents(t, k, "left", firstHalf(left))
			produceEvents(t, k, "right", firstHalf(right))
			every := testkit.NewEveryNth(3)
			runJoin(t, k, body, abortEvery(every))
			produceEvents(t, k, "left", secondHalf(left))
			produceEvents(t, k, "right", secondHalf(right))
			runJoin(t, k, body)
			var got []string
			for _, r := range k.ReadAll("out") {
				x, err := codec.DecodeJSON(r.Value)
				if err != nil {
					t.Fatal(err)
				}
				m := x.(map[string]any)
				if m["key"] == "flush" {
					continue
				}
				start := int64(m["window_start"].(int))
				if r.Timestamp.UnixMilli() != start+tc.size-1 || string(r.Key) != m["key"] {
					t.Fatalf("group %s stamped %d under key %s", r.Value, r.Timestamp.UnixMilli(), r.Key)
				}
				if tc.value != "" {
					got = append(got, fmt.Sprintf("%s [%d) l=%v r=%v", m["key"], start-t0, m["l"], m["r"]))
					continue
				}
				var vs [2][]string
				for side, name := range []string{"left", "right"} {
					for _, x := range m[name].([]any) {
						e := x.(map[string]any)
						if e["k"] != m["key"] {
							t.Fatalf("group %s holds a record of another key", r.Value)
						}
						vs[side] = append(vs[side], fmt.Sprint(e["v"]))
					}
				}
				got = append(got, fmt.Sprintf("%s [%d) L%v R%v", m["key"], start-t0, vs[0], vs[1]))
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				diff(t, got, want)
			}
			t.Logf("%s: %d groups, %d aborted checkpoints", tc.spec, len(want), every.Fired())
		})
	}
}

// joinSessions groups both sides' events per key into sessions of the
// given gap: events of either side no more than gap apart are one
// session, starting at its first. It returns each session's events by
// side, in the order written per partition.
func joinSessions(left, right [][]event, gap int64) map[wkey]*[2][]event {
	type tagged struct {
		e    event
		side int
		i    int
	}
	byKey := map[string][]tagged{}
	n := 0
	for side, parts := range [][][]event{left, right} {
		for _, evs := range parts {
			for _, e := range evs {
				if e.key != "flush" {
					byKey[e.key] = append(byKey[e.key], tagged{e, side, n})
					n++
				}
			}
		}
	}
	out := map[wkey]*[2][]event{}
	for key, ts := range byKey {
		slices.SortStableFunc(ts, func(a, b tagged) int { return int(a.e.ts - b.e.ts) })
		var cur *[2][]event
		var start, last int64
		for _, x := range ts {
			if cur == nil || x.e.ts > last+gap {
				cur = &[2][]event{}
				start = x.e.ts
				out[wkey{key: key, start: start, end: 0}] = cur
			}
			cur[x.side] = append(cur[x.side], x.e)
			last = max(last, x.e.ts)
		}
	}
	return out
}

// TestSessionWindowJoinsMatchTheOracle: window_join and co_group over
// session windows, which both sides' records open and merge.
func TestSessionWindowJoinsMatchTheOracle(t *testing.T) {
	const bound, gap = 1500, 600
	rng := rand.New(rand.NewPCG(29, 0))
	left := withFlush(genJoinEvents(rng, 3, 300, 10, bound, 0), 100_000)
	right := withFlush(genJoinEvents(rng, 3, 300, 10, bound, 10_000), 100_000)
	sessions := joinSessions(left, right, gap)
	var wantJoin, wantGroup []string
	for w, g := range sessions {
		for _, a := range g[0] {
			for _, b := range g[1] {
				wantJoin = append(wantJoin, fmt.Sprintf("%s [%d) L%d R%d", w.key, w.start-t0, a.v, b.v))
			}
			if len(g[1]) == 0 {
				wantJoin = append(wantJoin, fmt.Sprintf("%s [%d) L%d -", w.key, w.start-t0, a.v))
			}
		}
		var vs [2][]string
		for side := range 2 {
			slices.SortStableFunc(g[side], func(a, b event) int { return int(a.ts - b.ts) })
			for _, e := range g[side] {
				vs[side] = append(vs[side], fmt.Sprint(e.v))
			}
		}
		wantGroup = append(wantGroup, fmt.Sprintf("%s [%d) L%v R%v", w.key, w.start-t0, vs[0], vs[1]))
	}
	slices.Sort(wantJoin)
	slices.Sort(wantGroup)
	merged := 0
	for _, g := range sessions {
		if len(g[0]) > 0 && len(g[1]) > 0 {
			merged++
		}
	}
	if merged < 50 || len(sessions)-merged < 20 {
		t.Fatalf("%d sessions with both sides, %d with one: the input tests too little", merged, len(sessions)-merged)
	}
	for _, kind := range []string{"window_join", "co_group"} {
		t.Run(kind, func(t *testing.T) {
			k := testkit.NewKafka(t)
			for _, topic := range []string{"left", "right", "out", "late", "dlq"} {
				k.Topic(topic, 3)
			}
			body := fmt.Sprintf(windowJoined, bound, fmt.Sprintf("session: {gap: %dms}", gap), "left")
			if kind == "co_group" {
				body = strings.Replace(strings.Replace(body, "window_join: {", "co_group: {", 1), ", type: left", "", 1)
			}
			produceEvents(t, k, "left", left)
			produceEvents(t, k, "right", right)
			every := testkit.NewEveryNth(3)
			runJoin(t, k, body, abortEvery(every))
			var got []string
			for _, r := range k.ReadAll("out") {
				x, err := codec.DecodeJSON(r.Value)
				if err != nil {
					t.Fatal(err)
				}
				m := x.(map[string]any)
				if m["key"] == "flush" {
					continue
				}
				start := int64(m["window_start"].(int))
				side := func(name, tag string) string {
					s, ok := m[name].(map[string]any)
					if !ok {
						return "-"
					}
					return fmt.Sprintf("%s%v", tag, s["v"])
				}
				if kind == "window_join" {
					got = append(got, fmt.Sprintf("%s [%d) %s %s", m["key"], start-t0, side("left", "L"), side("right", "R")))
					continue
				}
				var vs [2][]string
				for i, name := range []string{"left", "right"} {
					for _, x := range m[name].([]any) {
						vs[i] = append(vs[i], fmt.Sprint(x.(map[string]any)["v"]))
					}
				}
				got = append(got, fmt.Sprintf("%s [%d) L%v R%v", m["key"], start-t0, vs[0], vs[1]))
			}
			slices.Sort(got)
			want := wantJoin
			if kind == "co_group" {
				want = wantGroup
			}
			if !slices.Equal(got, want) {
				diff(t, got, want)
			}
			t.Logf("%s over sessions: %d results (%d sessions, %d with both sides), %d aborted checkpoints", kind, len(want), len(sessions), merged, every.Fired())
		})
	}
}
