package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/internal/codec"
	"github.com/pipeline-run/pipeline/internal/testkit"
)

// The table join tests check results against an oracle computed from the
// inputs alone: a stream record at time t joins the last version of its
// key's row (in time, then in the order written) at or before t, none if
// that version is a tombstone. Event times are the records' timestamps;
// each partition's records are out of order within the bound, so none is
// late whatever order the two inputs interleave in.

// tableEvent is a table record: v < 0 is a tombstone.
func tableOracle(stream, table [][]event, left bool) []string {
	var out []string
	for p := range stream {
		for _, s := range stream[p] {
			if s.key == "flush" {
				continue
			}
			row, found := "", false
			var at int64
			for _, v := range table[p] {
				if v.key == s.key && v.ts <= s.ts && (!found || v.ts >= at) {
					at, found = v.ts, true
					row = fmt.Sprintf("R%d", v.v)
					if v.v < 0 {
						row = "-"
					}
				}
			}
			switch {
			case found && row != "-":
				out = append(out, fmt.Sprintf("%s L%d %s @%d", s.key, s.v, row, s.ts-t0))
			case left:
				out = append(out, fmt.Sprintf("%s L%d - @%d", s.key, s.v, s.ts-t0))
			}
		}
	}
	slices.Sort(out)
	return out
}

// genTable makes n versions per partition over keys, a tenth of them
// tombstones (v < 0), out of order within bound.
func genTable(rng *rand.Rand, partitions, n, keys int, bound int64) [][]event {
	parts := genJoinEvents(rng, partitions, n, keys, bound, 20_000)
	for p := range parts {
		for i := range parts[p] {
			if rng.IntN(10) == 0 {
				parts[p][i].v = -parts[p][i].v
			}
		}
	}
	return parts
}

// produceTimed writes each event to its partition, stamped with its time;
// a negative v is a tombstone.
func produceTimed(t *testing.T, k *testkit.Kafka, topic string, parts [][]event) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var rs []*kgo.Record
	for _, evs := range parts {
		for _, e := range evs {
			r := &kgo.Record{Topic: topic, Partition: e.part, Key: []byte(e.key), Timestamp: time.UnixMilli(e.ts)}
			if e.v >= 0 {
				r.Value = eventValue(e)
			}
			rs = append(rs, r)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

const tabled = `
instance_id: i1
checkpoint: {interval: 50ms, timeout: 10s, max_records: 100}
transactions: {timeout: 20s}
consumer: {session_timeout: 6s}
sources:
  orders: {topics: [left], event_time: {max_out_of_orderness: %[1]dms}}
  customers: {topics: [right], event_time: {max_out_of_orderness: %[1]dms}}
steps:
  - name: j
    from: [orders, customers]
    table_join: {type: %[2]s, late: output}
sinks:
  out: {topic: out, from: j}
  late: {topic: late, from: j.late}
dead_letter: {topic: dlq}
`

// TestTableJoinsMatchTheOracle runs inner and left table joins, on memory
// and pebble state, over a stream and a table with tombstones on three
// partitions, the table's changes racing the stream, aborting every third
// checkpoint and restarting half-way; then feeds records far behind the
// watermark. Every result is the oracle's, exactly once; the late records
// go to the late output; the state left holds what the watermark has not
// passed, and each key's row in force.
func TestTableJoinsMatchTheOracle(t *testing.T) {
	for _, tc := range []struct {
		kind   string
		pebble bool
	}{{"inner", false}, {"left", false}, {"left", true}} {
		name := tc.kind
		if tc.pebble {
			name += " on pebble"
		}
		t.Run(name, func(t *testing.T) {
			const bound = 1500
			rng := rand.New(rand.NewPCG(13, uint64(len(name))))
			stream := withFlush(genJoinEvents(rng, 3, 400, 6, bound, 0), 100_000)
			table := withFlush(genTable(rng, 3, 150, 6, bound), 100_000)
			want := tableOracle(stream, table, tc.kind == "left")
			rows, none := 0, 0
			for _, w := range want {
				if strings.Contains(w, " - ") {
					none++
				} else {
					rows++
				}
			}
			if rows < 500 || (tc.kind == "left" && none < 20) {
				t.Fatalf("the input makes %d joined results and %d without a row: it tests too little", rows, none)
			}

			k := testkit.NewKafka(t)
			for _, topic := range []string{"left", "right", "out", "late", "dlq"} {
				k.Topic(topic, 3)
			}
			body := fmt.Sprintf(tabled, bound, tc.kind)
			if tc.pebble {
				body += fmt.Sprintf("state: {backend: pebble, dir: %q}\n", t.TempDir())
			}
			produceTimed(t, k, "left", firstHalf(stream))
			produceTimed(t, k, "right", firstHalf(table))
			every := testkit.NewEveryNth(3)
			runJoin(t, k, body, abortEvery(every))
			if every.Fired() == 0 {
				t.Fatal("no checkpoint was aborted")
			}
			produceTimed(t, k, "left", secondHalf(stream))
			produceTimed(t, k, "right", secondHalf(table))
			second := runJoin(t, k, body)
			got := tableResults(t, k)
			if !slices.Equal(got, want) {
				diff(t, got, want)
			}
			// Left: the flush records and each key's row in force (at most
			// 6 keys per partition), with their timers, and event time.
			if keys := second.Stats().StateKeys; !tc.pebble && (keys <= 0 || keys > 3*(2*8+2)) {
				t.Fatalf("%d state entries left once the watermark passed every record but the flush ones", keys)
			}
			var late [][]event
			for p := range 3 {
				late = append(late, []event{{part: int32(p), key: fmt.Sprintf("p%dk0", p), ts: t0 + 1000, v: 90_000 + p}})
			}
			produceTimed(t, k, "left", late)
			produceTimed(t, k, "right", late)
			runJoin(t, k, body)
			if got := tableResults(t, k); !slices.Equal(got, want) {
				diff(t, got, want)
			}
			if n := len(k.ReadAll("dlq")); n != 0 {
				t.Fatalf("%d dead letters: tombstones and rows must all be read", n)
			}
			if n := len(k.ReadAll("late")); n != 6 {
				t.Fatalf("%d records in the late output, want the 6 late ones", n)
			}
			t.Logf("%s table join: %d results with a row, %d without, %d aborted checkpoints, 6 late records", tc.kind, rows, none, every.Fired())
		})
	}
}

// tableResults reads the table join's results as the oracle writes them.
func tableResults(t *testing.T, k *testkit.Kafka) []string {
	t.Helper()
	var out []string
	last := map[string]int64{} // each key's results come in time order
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
		l, _ := m["left"].(map[string]any)
		if l == nil || l["k"] != key {
			t.Fatalf("result %s: no stream record of its key", r.Value)
		}
		row := "-"
		if rt, ok := m["right"].(map[string]any); ok {
			if rt["k"] != key {
				t.Fatalf("result %s: a row of another key", r.Value)
			}
			row = fmt.Sprintf("R%v", rt["v"])
		} else if m["right"] != nil {
			t.Fatalf("result %s: right is neither a row nor null", r.Value)
		}
		ts := r.Timestamp.UnixMilli()
		if ts < last[key] {
			t.Fatalf("result %s at %d after one of its key at %d: a key's results come in time order", r.Value, ts-t0, last[key]-t0)
		}
		last[key] = ts
		out = append(out, fmt.Sprintf("%s L%v %s @%d", key, l["v"], row, ts-t0))
	}
	slices.Sort(out)
	return out
}
