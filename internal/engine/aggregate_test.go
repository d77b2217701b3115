package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pipeline-run/pipeline/internal/codec"
	"github.com/pipeline-run/pipeline/internal/testkit"
	"github.com/pipeline-run/pipeline/offsets"
	"github.com/pipeline-run/pipeline/wire"
)

const aggregating = `
instance_id: i1
checkpoint: {interval: 100ms, timeout: 10s, max_records: 1500}
transactions: {timeout: 20s}
consumer: {session_timeout: 6s}
sources: {in: {topics: [in]}}
steps:
  - name: per_key
    aggregate:
      fields:
        n: count
        total: {sum: value.seq}
        hi: {max: value.seq}
        lo: {min: value.seq}
        mean: {avg: value.seq}
        first: {first: value.seq}
        last: {last: value.seq}
        recent: {collect: value.seq, max: 3}
        product_mod: {reduce: "(state * 31 + value.seq) %% 1000003", init: "7"}
      emit: %s
sinks: {out: {topic: out}}
dead_letter: {topic: dlq}
`

// expected computes, from the input alone, what the aggregate must say for
// each key once every input record was counted exactly once.
func expected(n, keys int) map[string]map[string]any {
	want := map[string]map[string]any{}
	for i := range n {
		k := "k" + strconv.Itoa(i%keys)
		w, ok := want[k]
		if !ok {
			w = map[string]any{"n": 0, "total": 0, "hi": i, "lo": i, "first": i, "recent": []any{}, "product_mod": 7}
			want[k] = w
		}
		w["n"] = w["n"].(int) + 1
		w["total"] = w["total"].(int) + i
		w["hi"] = max(w["hi"].(int), i)
		w["lo"] = min(w["lo"].(int), i)
		w["last"] = i
		r := append(w["recent"].([]any), i)
		if len(r) > 3 {
			r = r[1:]
		}
		w["recent"] = r
		w["product_mod"] = (w["product_mod"].(int)*31 + i) % 1000003
	}
	for _, w := range want {
		w["mean"] = float64(w["total"].(int)) / float64(w["n"].(int))
	}
	return want
}

// latest reads the output and returns each key's last value.
func latest(t *testing.T, k *testkit.Kafka) map[string]map[string]any {
	t.Helper()
	got := map[string]map[string]any{}
	for _, r := range k.ReadAll("out") {
		x, err := codec.DecodeJSON(r.Value)
		if err != nil {
			t.Fatalf("output %s: %v", r.Value, err)
		}
		got[string(r.Key)] = x.(map[string]any)
	}
	return got
}

func compareAggregates(t *testing.T, got, want map[string]map[string]any) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d keys in the output, want %d", len(got), len(want))
	}
	bad := 0
	for k, w := range want {
		g := got[k]
		gb, _ := json.Marshal(g)
		wb, _ := json.Marshal(w)
		if string(gb) != string(wb) {
			if bad++; bad <= 3 {
				t.Errorf("key %s:\n got %s\nwant %s", k, gb, wb)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d keys wrong", bad, len(want))
	}
}

func TestAggregateIsExactlyOnceThroughAborts(t *testing.T) {
	for _, emit := range []string{"update", "checkpoint"} {
		t.Run("emit "+emit, func(t *testing.T) {
			k := testkit.NewKafka(t)
			k.Topic("in", 3)
			const n, keys = 20000, 200
			k.Input("in", n, keys, nil)
			// Produce faults and aborted checkpoints: state changes of an
			// aborted checkpoint must vanish with its outputs.
			h := k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "out", Err: kerr.InvalidRecord, Count: 3})
			var aborted atomic.Int64
			// bound is what emit: checkpoint may write at most: per
			// committed checkpoint, one record per key changed, and no
			// more keys than it read records (the observer runs on the
			// coordinator goroutine, read after Run returned).
			var committed, bound int
			p := newPipeline(t, k, fmt.Sprintf(aggregating, emit), nil, WithBeforeCommit(func(cp Checkpoint) error {
				if cp.ID%4 == 0 && cp.Records > 0 {
					aborted.Add(1)
					return errors.New("injected")
				}
				return nil
			}), WithCheckpointObserver(func(cp Checkpoint) {
				if cp.Committed && cp.Records > 0 {
					committed++
					bound += min(keys, cp.Records)
				}
			}))
			testkit.RunUntilCommitted(t, k, p, "t", "in")
			if h.Hits() == 0 || aborted.Load() == 0 {
				t.Fatalf("faults fired: %d produce, %d checkpoints", h.Hits(), aborted.Load())
			}
			out := k.ReadAll("out")
			compareAggregates(t, latest(t, k), expected(n, keys))
			switch emit {
			case "update":
				// One output per input record, each exactly once.
				if len(out) != n {
					t.Fatalf("emit: update wrote %d records for %d inputs", len(out), n)
				}
			case "checkpoint":
				// Each key at most once per committed checkpoint: an
				// operator emitting on every update would write n.
				if len(out) > bound || len(out) > keys*committed || 2*len(out) > n {
					t.Fatalf("emit: checkpoint wrote %d records for %d inputs over %d keys and %d committed checkpoints (at most %d)",
						len(out), n, keys, committed, bound)
				}
			}
			t.Logf("%d outputs for %d inputs, %d committed checkpoints, %d produce faults, %d checkpoints aborted on purpose, stats %+v",
				len(out), n, committed, h.Hits(), aborted.Load(), p.Stats())
		})
	}
}

// TestAggregateStateSurvivesRestarts stops the pipeline halfway and runs a
// new one: with the memory backend the new run restores every key from the
// changelog; with pebble, after a clean stop, it has nothing to replay.
func TestAggregateStateSurvivesRestarts(t *testing.T) {
	for _, backend := range []string{"memory", "pebble"} {
		t.Run(backend, func(t *testing.T) {
			k := testkit.NewKafka(t)
			k.Topic("in", 3)
			const n, keys = 10000, 100
			body := fmt.Sprintf(aggregating, "checkpoint")
			if backend == "pebble" {
				body += fmt.Sprintf("state: {backend: pebble, dir: %q}\n", t.TempDir())
			}
			k.Input("in", n/2, keys, nil)
			first := newPipeline(t, k, body, nil)
			testkit.RunUntilCommitted(t, k, first, "t", "in")

			// The second half continues the same sequence.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var rs []*kgo.Record
			for i := n / 2; i < n; i++ {
				key := "k" + strconv.Itoa(i%keys)
				rs = append(rs, &kgo.Record{Topic: "in", Key: []byte(key), Value: fmt.Appendf(nil, `{"k":%q,"seq":%d}`, key, i)})
			}
			if err := k.Client.ProduceSync(ctx, rs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			second := newPipeline(t, k, body, nil)
			testkit.RunUntilCommitted(t, k, second, "t", "in")
			compareAggregates(t, latest(t, k), expected(n, keys))
			restored := second.Stats().Restored
			switch backend {
			case "memory":
				if st := second.Stats(); st.StateKeys < keys || st.StateBytes <= 0 {
					t.Fatalf("the memory backend's footprint is not reported: %d keys, %d bytes", st.StateKeys, st.StateBytes)
				}
				if restored < keys {
					t.Fatalf("the second run restored %d changelog records; a memory backend starts empty and must replay every key (%d)", restored, keys)
				}
			case "pebble":
				if restored != 0 {
					t.Fatalf("the second run replayed %d changelog records; pebble had applied them all before the clean stop", restored)
				}
			}
			t.Logf("%s: second run restored %d changelog records", backend, restored)
		})
	}
}

func TestAggregateRefusesStateOfAnotherDefinition(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("in", 1)
	k.Input("in", 100, 10, nil)
	first := newPipeline(t, k, fmt.Sprintf(aggregating, "update"), nil)
	testkit.RunUntilCommitted(t, k, first, "t", "in")
	changed := strings.Replace(fmt.Sprintf(aggregating, "update"), "total: {sum: value.seq}", "total: {sum: value.seq * 2}", 1)
	k.Input("in", 10, 10, nil)
	second := newPipeline(t, k, changed, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := second.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "per_key") || !strings.Contains(err.Error(), "fingerprint") {
		t.Fatalf("got %v", err)
	}
}

func TestAggregateBuildErrors(t *testing.T) {
	tests := []struct{ name, steps, want string }{
		{"re-keying before an aggregate is refused",
			`[{map: {key: value.k}}, {aggregate: {fields: {n: count}}}]`, `re-keyed by step "map1"`},
		{"re-keying before an aggregate points to key_by",
			`[{map: {key: value.k}}, {aggregate: {fields: {n: count}}}]`, "re-key with a key_by step"},
		{"a map re-keying after a key_by is still refused",
			`[{key_by: value.k}, {map: {key: value.seq}}, {aggregate: {fields: {n: count}}}]`, `re-keyed by step "map2"`},
		{"an aggregate inside a parallel stage is refused",
			`[{parallel: {aggregate: {fields: {n: count}}}}]`, "cannot run inside a parallel stage"},
		{"an unknown aggregation is named",
			`[{aggregate: {fields: {n: {median: value.x}}}}]`, "steps[0].aggregate.fields.n.median"},
		{"reduce needs init",
			`[{aggregate: {fields: {n: {reduce: "state + 1"}}}}]`, "steps[0].aggregate.fields.n.init"},
		{"ttl_update must name a policy",
			`[{aggregate: {fields: {n: count}, ttl: 1h, ttl_update: sometimes}}]`, "steps[0].aggregate.ttl_update"},
		{"emit must be update or checkpoint",
			`[{aggregate: {fields: {n: count}, emit: sometimes}}]`, "steps[0].aggregate.emit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := parseConfig(t, "sources: {in: {topics: [in]}}\nsteps: "+tc.steps+"\nsinks: {out: {topic: out}}\n")
			_, err := Build(cfg, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

func TestAggregateTTLForgetsIdleKeys(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("in", 1)
	body := strings.Replace(fmt.Sprintf(aggregating, "update"), "      emit: update", "      emit: update\n      ttl: 400ms", 1)
	p := newPipeline(t, k, body, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	write := func(from, to int) {
		wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer wcancel()
		for i := from; i < to; i++ {
			if err := k.Client.ProduceSync(wctx, &kgo.Record{Topic: "in", Key: []byte("k"), Value: fmt.Appendf(nil, `{"k":"k","seq":%d}`, i)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := k.WaitCommitted(wctx, "t", "in"); err != nil {
			t.Fatal(err)
		}
	}
	write(0, 10)
	// Idle for longer than the TTL: the key's state expires (the wait is
	// the fault under test, not a measurement).
	time.Sleep(time.Second)
	write(10, 15)
	got := latest(t, k)["k"]
	if got["n"] != 5 || got["first"] != 10 {
		t.Fatalf("after the TTL the key should start afresh at seq 10 with 5 records; got %v", got)
	}
}

func TestCorruptChangelogIsAStartupErrorNamingWhere(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("in", 1)
	k.Input("in", 50, 5, nil)
	first := newPipeline(t, k, fmt.Sprintf(aggregating, "update"), nil)
	testkit.RunUntilCommitted(t, k, first, "t", "in")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	changelog := wire.ChangelogTopic("t", "per_key")
	bad := &kgo.Record{Topic: changelog, Partition: 0, Key: []byte{0x01, 0xff}, Value: []byte("garbage")}
	res := k.Client.ProduceSync(ctx, bad)
	if err := res.FirstErr(); err != nil {
		t.Fatal(err)
	}
	off := res[0].Record.Offset
	k.Input("in", 5, 5, nil)
	second := newPipeline(t, k, fmt.Sprintf(aggregating, "update"), nil)
	err := second.Run(ctx)
	want := []string{"step per_key", "task 0", changelog, fmt.Sprintf("offset %d", off)}
	for _, w := range want {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Fatalf("error does not name %q: %v", w, err)
		}
	}
}

// TestRekeyedAggregateIsExactlyOnce partitions input by user and counts by
// region: key_by moves each record through the repartition topic to the
// task that owns its region. Checkpoints abort on purpose along the way.
func TestRekeyedAggregateIsExactlyOnce(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("in", 3)
	const n, users, regions = 12000, 50, 7
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var rs []*kgo.Record
	want := map[string][2]int{}
	for i := range n {
		user, region := "u"+strconv.Itoa(i%users), "r"+strconv.Itoa(i%regions)
		rs = append(rs, &kgo.Record{Topic: "in", Key: []byte(user), Value: fmt.Appendf(nil, `{"user":%q,"region":%q,"seq":%d}`, user, region, i)})
		w := want[region]
		want[region] = [2]int{w[0] + 1, w[1] + i}
	}
	if err := k.Client.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	body := `
instance_id: i1
checkpoint: {interval: 100ms, timeout: 10s, max_records: 1500}
transactions: {timeout: 20s}
sources: {in: {topics: [in]}}
steps:
  - name: by_region
    key_by: value.region
  - name: per_region
    aggregate:
      fields: {n: count, total: {sum: value.seq}}
      emit: checkpoint
sinks: {out: {topic: out}}
`
	var aborted atomic.Int64
	p := newPipeline(t, k, body, nil, WithBeforeCommit(func(cp Checkpoint) error {
		if cp.ID%3 == 0 && cp.Records > 0 {
			aborted.Add(1)
			return errors.New("injected")
		}
		return nil
	}))
	if s := p.Graph().Summary(); !strings.Contains(s, "key_by by_region<-in->t-by_region-repartition") {
		t.Fatalf("summary %s", s)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()
	// Done when the group has committed the end of the input and, on the
	// repartition topic, the offset after its last record (a transactional
	// topic ends with a marker no consumer commits past).
	wctx, wcancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer wcancel()
	if err := k.WaitCommitted(wctx, "t", "in"); err != nil {
		t.Fatal(err)
	}
	repart := wire.RepartitionTopic("t", "by_region")
	for {
		recs, err := offsets.ReadToEnd(wctx, k.Client, repart, true)
		if err != nil {
			t.Fatal(err)
		}
		next := map[int32]int64{}
		for _, r := range recs {
			next[r.Partition] = r.Offset + 1
		}
		offs, err := k.Admin.FetchOffsets(wctx, "t")
		done := len(recs) == n && err == nil
		for p, o := range next {
			if c, ok := offs.Lookup(repart, p); !ok || c.At < o {
				done = false
			}
		}
		if done {
			break
		}
		select {
		case <-wctx.Done():
			t.Fatalf("the group did not consume the repartition topic: %d records there, offsets %v", len(recs), offs)
		case <-time.After(100 * time.Millisecond):
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if aborted.Load() == 0 {
		t.Fatal("no checkpoint was aborted")
	}
	got := latest(t, k)
	if len(got) != regions {
		t.Fatalf("%d regions in the output, want %d: %v", len(got), regions, got)
	}
	for region, w := range want {
		g := got[region]
		if g["n"] != w[0] || g["total"] != w[1] {
			t.Errorf("region %s: n %v total %v, want %d and %d", region, g["n"], g["total"], w[0], w[1])
		}
	}
	t.Logf("%d records re-keyed by region through the repartition topic, %d checkpoints aborted on purpose", n, aborted.Load())
}

func TestDedupeDropsDuplicatesExactlyOnce(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("in", 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Every event is sent twice, in a row, under its key.
	const events, keys = 4000, 20
	var rs []*kgo.Record
	for e := range events {
		key := "k" + strconv.Itoa(e%keys)
		for copy := range 2 {
			rs = append(rs, &kgo.Record{Topic: "in", Key: []byte(key), Value: fmt.Appendf(nil, `{"k":%q,"seq":%d,"event":%d}`, key, 2*e+copy, e)})
		}
	}
	if err := k.Client.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	body := strings.Replace(passThrough, `steps: [{map: "{k: value.k, seq: value.seq}"}]`, `steps: [{dedupe: {id: value.event, ttl: 1h}}]`, 1)
	var aborted atomic.Int64
	p := newPipeline(t, k, body, nil, WithBeforeCommit(func(cp Checkpoint) error {
		if cp.ID%3 == 0 && cp.Records > 0 {
			aborted.Add(1)
			return errors.New("injected")
		}
		return nil
	}))
	testkit.RunUntilCommitted(t, k, p, "t", "in")
	if aborted.Load() == 0 {
		t.Fatal("no checkpoint was aborted")
	}
	// Only the first copy of each event (even seq) may come out, once.
	skip := map[int]bool{}
	for s := 1; s < 2*events; s += 2 {
		skip[s] = true
	}
	testkit.CheckExactlyOnce(t, k.ReadAll("out"), 2*events, skip)
}

// logEntries returns the JSON log lines of buf whose msg is msg.
func logEntries(t *testing.T, buf *lockedBuffer, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(buf.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// TestStateRestoreIsLoggedAndCounted restarts an aggregate on the memory
// backend, which replays the whole changelog: every task logs one "state
// restored" line with its count and rate, the counts add up to the
// changelog, and Stats().Restored (the restored-records metric) agrees. The
// broker holds the first changelog fetch for longer than the 2 s progress
// interval, so a "restoring state" progress line must appear too.
func TestStateRestoreIsLoggedAndCounted(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("in", 3)
	const n, keys = 3000, 300
	k.Input("in", n, keys, nil)
	body := fmt.Sprintf(aggregating, "update")
	testkit.RunUntilCommitted(t, k, newPipeline(t, k, body, nil), "t", "in")
	changelog := wire.ChangelogTopic("t", "per_key")
	length := len(k.ReadAll(changelog))
	if length < keys {
		t.Fatalf("%d changelog records for %d keys", length, keys)
	}

	id := k.Cluster.TopicInfo(changelog).TopicID
	var held atomic.Int64
	k.Cluster.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		k.Cluster.KeepControl()
		for _, rt := range req.(*kmsg.FetchRequest).Topics {
			if (rt.Topic == changelog || rt.TopicID == id) && held.Add(1) == 1 {
				k.Cluster.SleepControl(func() { time.Sleep(2500 * time.Millisecond) })
			}
		}
		return nil, nil, false
	})

	// One more record per key, so every task opens (and restores).
	k.Input("in", keys, keys, nil)
	var logs lockedBuffer
	second := newPipeline(t, k, body, nil, WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
	testkit.RunUntilCommitted(t, k, second, "t", "in")
	if held.Load() == 0 {
		t.Fatalf("no changelog fetch was held: the restore did not read the changelog (%d records restored); log:\n%s", second.Stats().Restored, logs.String())
	}

	tasks := map[float64]bool{}
	var sum int64
	for _, l := range logEntries(t, &logs, "state restored") {
		records, _ := l["records"].(float64)
		rate, _ := l["records_per_s"].(float64)
		task, _ := l["task"].(float64)
		if l["step"] != "per_key" || l["changelog"] != changelog || l["from_offset"] != 0.0 || records <= 0 || rate <= 0 || l["duration"] == nil || tasks[task] {
			t.Errorf("state restored line %v: want step per_key, changelog %s, from_offset 0, positive records and records_per_s, a duration, once per task", l, changelog)
		}
		tasks[task] = true
		sum += int64(records)
	}
	if len(tasks) != 3 {
		t.Errorf("%d tasks logged a restore, want 3", len(tasks))
	}
	if st := second.Stats(); sum != int64(length) || st.Restored != int64(length) {
		t.Errorf("restored %d records by the log and %d by the stats; the changelog holds %d, all of which a memory backend replays", sum, st.Restored, length)
	}
	progress := logEntries(t, &logs, "restoring state")
	if len(progress) == 0 {
		t.Errorf("no progress line during a restore held for more than 2 s")
	}
	for _, l := range progress {
		pct, _ := l["percent"].(float64)
		records, _ := l["records"].(float64)
		if l["step"] != "per_key" || pct <= 0 || pct > 100 || records <= 0 || l["records_per_s"] == nil {
			t.Errorf("progress line %v: want step per_key, a percent in (0, 100], records and records_per_s", l)
		}
	}
	// The restored state is what the new records were counted on.
	for key, v := range latest(t, k) {
		if v["n"] != n/keys+1 {
			t.Fatalf("key %s: count %v after the restart, want %d", key, v["n"], n/keys+1)
		}
	}
	t.Logf("%d changelog records restored over %d tasks, %d progress lines", sum, len(tasks), len(progress))
}
