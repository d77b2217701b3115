package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pipeline-run/pipeline/offsets"
)

// The table join under test enriches a generator stream (event time
// value.seq*10 ms) with a table written by a second generator, ten times
// sparser and ten times faster in event time (value.seq*100 ms), so both
// span the same time: the row of key k in force at time t is the table
// record of the largest seq s' with s' % joinKeys == k and s'*100 <= t.
const tableEvery = 10

func tableConfig(e *env, table string, partitions int, instance, extra string) string {
	return fmt.Sprintf(`name: %q
brokers: [%q]
instance_id: %s
checkpoint: {interval: 300ms, timeout: 10s}
transactions: {timeout: 12s}
consumer: {session_timeout: 6s}
topics: {partitions: %d}
sources:
  stream:
    topics: [%q]
    event_time: {from: "value.seq * %d", max_out_of_orderness: 0s}
  table:
    topics: [%q]
    event_time: {from: "value.seq * %d", max_out_of_orderness: 0s}
steps:
  - name: enriched
    from: [stream, table]
    table_join: {type: left}
sinks:
  out: {topic: %q}
%s`, e.group, e.seeds[0], instance, partitions, e.input, seqMs, table, seqMs*tableEvery, e.output, extra)
}

// TestTableJoinSurvivesRepeatedSIGKILL enriches a stream from a table while
// the pipeline is SIGKILLed at random points, on memory and pebble state,
// then checks the output against the rows the inputs call for.
func TestTableJoinSurvivesRepeatedSIGKILL(t *testing.T) {
	// CPU-light (input at a fixed rate, the time is waiting): it runs
	// beside the suite's other parallel tests, after the serial ones.
	t.Parallel()
	for _, backend := range []string{"memory", "pebble"} {
		t.Run(backend, func(t *testing.T) { runTableKills(t, backend) })
	}
}

func runTableKills(t *testing.T, backend string) {
	requireBinary(t)
	e := newEnv(t)
	const partitions, kills = 4, 5
	records := 40_000
	if testing.Short() {
		records = 15_000
	}
	table := e.input + "-table"
	createJoinTopics(t, e, table, partitions)
	extra := ""
	if backend == "pebble" {
		extra = fmt.Sprintf("state: {backend: pebble, dir: %q}\n", filepath.Join(e.logDir, "state"))
	}
	cfgPath := writeConfig(t, e, "table.yaml", tableConfig(e, table, partitions, "i1", extra))
	span := time.Duration(kills)*maxStopDelay + 5*time.Second
	rate := max(tableEvery, int(float64(records)/span.Seconds()))
	inS := StartInput(t, e.seeds, InputSpec{Topic: e.input, Records: records, Keys: joinKeys, Rate: rate})
	inT := StartInput(t, e.seeds, InputSpec{Topic: table, Records: records / tableEvery, Keys: joinKeys, Rate: rate / tableEvery})
	start := time.Now()
	e.killRepeatedly(t, cfgPath, kills, records)
	p := e.startPipeline(cfgPath)
	inS.Wait(t)
	inT.Wait(t)
	e.waitJoinCommitted(t, table, p)
	p.Term()
	n := checkTable(t, e, table, records)
	e.audit(cfgPath, records+records/tableEvery)
	t.Logf("figures: %s backend, %d stream records, %d table rows, %d results, %d SIGKILLs, %v, every result once with the row in force",
		backend, records, records/tableEvery, n, kills, time.Since(start).Round(time.Millisecond))
}

// TestTableJoinAcrossARebalance moves the table join's tasks (their
// waiting records and table versions) from one instance to two and back,
// with a SIGKILL: no result may be lost, doubled or wrong.
func TestTableJoinAcrossARebalance(t *testing.T) {
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
	table := e.input + "-table"
	createJoinTopics(t, e, table, partitions)
	cfg1 := writeConfig(t, e, "i1.yaml", tableConfig(e, table, partitions, "i1", ""))
	cfg2 := writeConfig(t, e, "i2.yaml", tableConfig(e, table, partitions, "i2", ""))
	start := time.Now()
	inS := StartInput(t, e.seeds, InputSpec{Topic: e.input, Records: records, Keys: joinKeys, Rate: records / 15})
	inT := StartInput(t, e.seeds, InputSpec{Topic: table, Records: records / tableEvery, Keys: joinKeys, Rate: records / 15 / tableEvery})
	p1, p2 := e.oneTwoOne(t, cfg1, cfg2, records)
	inS.Wait(t)
	inT.Wait(t)
	e.waitJoinCommitted(t, table, p1, p2)
	p1.Term()
	p2.Term()
	n := checkTable(t, e, table, records)
	t.Logf("figures: %d stream records, %d table rows, %d results, 1 → 2 → 1 instances with a SIGKILL, %v, every result once with the row in force",
		records, records/tableEvery, n, time.Since(start).Round(time.Millisecond))
}

// checkTable reads the inputs and the output back and fails the test unless
// the output holds, exactly once each, the stream records the watermark of
// their partition passed (the earlier of the two topics' latest event
// times there), each with its key's row in force at its time ("right":
// null before the key's first row), and nothing else.
func checkTable(t *testing.T, e *env, table string, records int) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	type rec struct {
		k    string
		seq  int64
		part int32
	}
	read := func(topic string, want int) []rec {
		rs, err := offsets.ReadToEnd(ctx, e.cl, topic, true)
		if err != nil {
			t.Fatalf("reading %s: %v", topic, err)
		}
		if len(rs) != want {
			t.Fatalf("%s holds %d records, the generator wrote %d", topic, len(rs), want)
		}
		out := make([]rec, len(rs))
		for i, r := range rs {
			var v struct {
				K   string `json:"k"`
				Seq int64  `json:"seq"`
			}
			if err := json.Unmarshal(r.Value, &v); err != nil || v.K != string(r.Key) {
				t.Fatalf("%s/%d@%d: not a generator record: %s", r.Topic, r.Partition, r.Offset, r.Value)
			}
			out[i] = rec{v.K, v.Seq, r.Partition}
		}
		return out
	}
	stream, rows := read(e.input, records), read(table, records/tableEvery)
	latest := map[string]map[int32]int64{"s": {}, "t": {}}
	rowsOf := map[string][]int64{} // per key, table seqs
	for _, r := range stream {
		latest["s"][r.part] = max(latest["s"][r.part], r.seq*seqMs)
	}
	for _, r := range rows {
		latest["t"][r.part] = max(latest["t"][r.part], r.seq*seqMs*tableEvery)
		rowsOf[r.k] = append(rowsOf[r.k], r.seq)
	}
	want := map[int64]string{} // stream seq → "k R<seq>" or "k -"
	for _, r := range stream {
		ts := r.seq * seqMs
		if ts >= min(latest["s"][r.part], latest["t"][r.part]) {
			continue // the watermark has not passed it
		}
		row := "-"
		best := int64(-1)
		for _, s := range rowsOf[r.k] {
			if s*seqMs*tableEvery <= ts && s > best {
				best, row = s, fmt.Sprintf("R%d", s)
			}
		}
		want[r.seq] = r.k + " " + row
	}
	out, err := offsets.ReadToEnd(ctx, e.cl, e.output, true)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	var bad []string
	for _, r := range out {
		var v struct {
			Key   string `json:"key"`
			Left  struct{ Seq int64 }
			Right *struct{ Seq int64 }
		}
		if err := json.Unmarshal(r.Value, &v); err != nil || v.Key != string(r.Key) {
			bad = append(bad, fmt.Sprintf("output %s/%d@%d: %s (%v)", r.Topic, r.Partition, r.Offset, r.Value, err))
			continue
		}
		got := v.Key + " -"
		if v.Right != nil {
			got = fmt.Sprintf("%s R%d", v.Key, v.Right.Seq)
		}
		w, ok := want[v.Left.Seq]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("a result for stream seq %d, which the watermark has not passed or does not exist: %s", v.Left.Seq, r.Value))
		case seen[v.Left.Seq]:
			bad = append(bad, fmt.Sprintf("stream seq %d emitted twice", v.Left.Seq))
		case got != w:
			bad = append(bad, fmt.Sprintf("stream seq %d: %s, want %s", v.Left.Seq, got, w))
		case r.Timestamp.UnixMilli() != v.Left.Seq*seqMs:
			bad = append(bad, fmt.Sprintf("stream seq %d stamped %d", v.Left.Seq, r.Timestamp.UnixMilli()))
		}
		seen[v.Left.Seq] = true
	}
	for s := range want {
		if !seen[s] {
			bad = append(bad, fmt.Sprintf("missing: stream seq %d (%s)", s, want[s]))
		}
	}
	if len(bad) > 0 {
		t.Fatalf("%d differences from the %d results the inputs call for (%d output records):\n%s", len(bad), len(want), len(out), strings.Join(bad[:min(len(bad), 10)], "\n"))
	}
	nulls := 0
	for _, w := range want {
		if strings.HasSuffix(w, " -") {
			nulls++
		}
	}
	if nulls == 0 || nulls == len(want) {
		t.Fatalf("%d of %d results without a row: the input tests too little", nulls, len(want))
	}
	t.Logf("checked %d results (%d before their key's first row) of %d stream records: each once with the row in force", len(want), nulls, records)
	return len(want)
}
