package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/pipeline-run/pipeline/offsets"
)

// The broadcast join under test looks each record of a generator stream
// (four partitions) up in a table of rows written by a second generator to
// a one-partition topic, broadcast to every task: row seq s is the version
// of key k(s%joinKeys) from then on.
func broadcastConfig(e *env, rows string, partitions int, instance, extra string) string {
	return fmt.Sprintf(`name: %q
brokers: [%q]
instance_id: %s
checkpoint: {interval: 300ms, timeout: 10s}
transactions: {timeout: 12s}
consumer: {session_timeout: 6s}
topics: {partitions: %d}
sources:
  stream: {topics: [%q]}
  rows: {topics: [%q]}
steps:
  - {name: everywhere, from: rows, broadcast: {}}
  - name: looked_up
    from: [stream, everywhere]
    broadcast_join: {key: value.k, type: left}
sinks:
  out: {topic: %q, from: looked_up}
%s`, e.group, e.seeds[0], instance, partitions, e.input, rows, e.output, extra)
}

// TestBroadcastJoinSurvivesRepeatedSIGKILL runs the broadcast join while
// the pipeline is SIGKILLed at random points, on memory and pebble state:
// every stream record comes out once, with its key's row or none, and the
// versions of a key each task saw never go back, across the restores.
func TestBroadcastJoinSurvivesRepeatedSIGKILL(t *testing.T) {
	// CPU-light (input at a fixed rate, the time is waiting): it runs
	// beside the suite's other parallel tests, after the serial ones.
	t.Parallel()
	for _, backend := range []string{"memory", "pebble"} {
		t.Run(backend, func(t *testing.T) {
			requireBinary(t)
			e := newEnv(t)
			const partitions, kills = 4, 5
			records := 40_000
			if testing.Short() {
				records = 15_000
			}
			rows := e.input + "-rows"
			CreateTopics(t, e.adm, partitions, e.input, e.output)
			CreateTopics(t, e.adm, 1, rows)
			extra := ""
			if backend == "pebble" {
				extra = fmt.Sprintf("state: {backend: pebble, dir: %q}\n", filepath.Join(e.logDir, "state"))
			}
			cfgPath := writeConfig(t, e, "broadcast.yaml", broadcastConfig(e, rows, partitions, "i1", extra))
			span := time.Duration(kills)*maxStopDelay + 5*time.Second
			rate := max(tableEvery, int(float64(records)/span.Seconds()))
			inS := StartInput(t, e.seeds, InputSpec{Topic: e.input, Records: records, Keys: joinKeys, Rate: rate})
			inR := StartInput(t, e.seeds, InputSpec{Topic: rows, Records: records / tableEvery, Keys: joinKeys, Rate: rate / tableEvery})
			start := time.Now()
			e.killRepeatedly(t, cfgPath, kills, records)
			p := e.startPipeline(cfgPath)
			inS.Wait(t)
			inR.Wait(t)
			e.waitJoinCommitted(t, rows, p)
			p.Term()
			found := checkBroadcast(t, e, records)
			// The audit counts what the pipeline consumed: the stream, the
			// rows, and each row once more in every task, less what the
			// pipeline deleted of the broadcast topic once consumed.
			e.audit(cfgPath, records+records/tableEvery+presentRecords(t, e, e.group+"-everywhere-repartition"))
			t.Logf("figures: %s backend, %d stream records (%d with a row), %d rows broadcast to %d tasks, %d SIGKILLs, %v",
				backend, records, found, records/tableEvery, partitions, kills, time.Since(start).Round(time.Millisecond))
		})
	}
}

// checkBroadcast reads the output back: every stream seq once, with a row
// of its own key or none, and per task (the output's partition: stream
// and output are keyed alike) and key, row versions that never go back.
func checkBroadcast(t *testing.T, e *env, records int) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out, err := offsets.ReadToEnd(ctx, e.cl, e.output, true)
	if err != nil {
		t.Fatal(err)
	}
	seen := make(map[int64]bool, records)
	last := map[int32]map[string]int64{}
	found := 0
	for _, r := range out {
		var v struct {
			Key  string `json:"key"`
			Left struct {
				K   string
				Seq int64
			}
			Right *struct {
				K   string
				Seq int64
			}
		}
		if err := json.Unmarshal(r.Value, &v); err != nil || v.Key != string(r.Key) || v.Left.K != v.Key {
			t.Fatalf("output %s/%d@%d: %s (%v)", r.Topic, r.Partition, r.Offset, r.Value, err)
		}
		if seen[v.Left.Seq] {
			t.Fatalf("stream seq %d emitted twice", v.Left.Seq)
		}
		seen[v.Left.Seq] = true
		version := int64(-1)
		if v.Right != nil {
			if v.Right.K != v.Key {
				t.Fatalf("stream seq %d (%s) got the row of %s", v.Left.Seq, v.Key, v.Right.K)
			}
			version = v.Right.Seq
			found++
		}
		if last[r.Partition] == nil {
			last[r.Partition] = map[string]int64{}
		}
		if prev, ok := last[r.Partition][v.Key]; ok && version < prev {
			t.Fatalf("task %d: stream seq %d saw version %d of %s after version %d", r.Partition, v.Left.Seq, version, v.Key, prev)
		}
		last[r.Partition][v.Key] = version
	}
	if len(seen) != records {
		t.Fatalf("%d of %d stream records in the output", len(seen), records)
	}
	if found < records/2 {
		t.Fatalf("only %d of %d stream records found a row", found, records)
	}
	t.Logf("checked %d stream records: each once, %d with their key's row, versions per task never going back", records, found)
	return found
}

// TestBroadcastJoinAcrossARebalance moves the broadcast join's tasks, each
// with its whole copy of the table, from one instance to two and back,
// with a SIGKILL: every stream record once, each task's view moving only
// forward.
func TestBroadcastJoinAcrossARebalance(t *testing.T) {
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
	rows := e.input + "-rows"
	CreateTopics(t, e.adm, partitions, e.input, e.output)
	CreateTopics(t, e.adm, 1, rows)
	cfg1 := writeConfig(t, e, "i1.yaml", broadcastConfig(e, rows, partitions, "i1", ""))
	cfg2 := writeConfig(t, e, "i2.yaml", broadcastConfig(e, rows, partitions, "i2", ""))
	start := time.Now()
	inS := StartInput(t, e.seeds, InputSpec{Topic: e.input, Records: records, Keys: joinKeys, Rate: records / 15})
	inR := StartInput(t, e.seeds, InputSpec{Topic: rows, Records: records / tableEvery, Keys: joinKeys, Rate: records / 15 / tableEvery})
	p1, p2 := e.oneTwoOne(t, cfg1, cfg2, records)
	inS.Wait(t)
	inR.Wait(t)
	e.waitJoinCommitted(t, rows, p1, p2)
	p1.Term()
	p2.Term()
	found := checkBroadcast(t, e, records)
	t.Logf("figures: %d stream records (%d with a row), %d rows broadcast, 1 → 2 → 1 instances with a SIGKILL, %v",
		records, found, records/tableEvery, time.Since(start).Round(time.Millisecond))
}
