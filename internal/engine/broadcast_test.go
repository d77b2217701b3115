package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/internal/codec"
	"github.com/pipeline-run/pipeline/internal/testkit"
	"github.com/pipeline-run/pipeline/wire"
)

const broadcasted = `
instance_id: i1
checkpoint: {interval: 50ms, timeout: 10s, max_records: 100}
transactions: {timeout: 20s}
consumer: {session_timeout: 6s}
sources:
  readings: {topics: [left]}
  limits: {topics: [right]}
steps:
  - {name: everywhere, from: limits, broadcast: {}}
  - name: checked
    from: [readings, everywhere]
    broadcast_join: {key: value.sensor, type: left}
sinks:
  out: {topic: out, from: checked}
dead_letter: {topic: dlq}
`

// TestBroadcastJoinMatchesTheOracle broadcasts a one-partition table of
// limits to every task of a three-partition stream of readings keyed by
// reading, not by sensor: each reading finds its sensor's row whatever
// task it is in. In phases whose order is known (rows, readings with every
// third checkpoint aborted, rows changed and deleted, readings on a
// restarted pipeline), every result is the oracle's, exactly once.
func TestBroadcastJoinMatchesTheOracle(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("left", 3)
	k.Topic("right", 1)
	k.Topic("out", 3)
	k.Topic("dlq", 3)
	rng := rand.New(rand.NewPCG(31, 0))
	send := func(rs []*kgo.Record) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(k.Addr))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	rows := map[string]int{} // sensor → limit; absent: no row
	setRows := func(share float64) {
		var rs []*kgo.Record
		for i := range 10 {
			s := fmt.Sprintf("s%d", i)
			if rng.Float64() >= share {
				continue
			}
			r := &kgo.Record{Topic: "right", Key: []byte(s)}
			if rng.IntN(6) == 0 {
				delete(rows, s) // a tombstone
			} else {
				rows[s] = 20 + rng.IntN(10)
				r.Value = fmt.Appendf(nil, `{"sensor": %q, "max": %d}`, s, rows[s])
			}
			rs = append(rs, r)
		}
		send(rs)
	}
	var want []string
	seq := 0
	readings := func(n int) {
		var rs []*kgo.Record
		for range n {
			s := fmt.Sprintf("s%d", rng.IntN(12)) // s10 and s11 never have a row
			row := "-"
			if m, ok := rows[s]; ok {
				row = fmt.Sprint(m)
			}
			want = append(want, fmt.Sprintf("r%d %s %s", seq, s, row))
			rs = append(rs, &kgo.Record{Topic: "left", Key: fmt.Appendf(nil, "r%d", seq), Value: fmt.Appendf(nil, `{"sensor": %q, "n": %d}`, s, seq)})
			seq++
		}
		send(rs)
	}
	run := func(opts ...Option) {
		t.Helper()
		p := newPipeline(t, k, broadcasted, nil, opts...)
		stop := testkit.Start(t, p)
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		werr := k.WaitSettled(ctx, "t", "left", "right", wire.RepartitionTopic("t", "everywhere"))
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if werr != nil {
			t.Fatal(werr)
		}
	}
	setRows(1)
	run()
	readings(400)
	every := testkit.NewEveryNth(3)
	run(abortEvery(every))
	if every.Fired() == 0 {
		t.Fatal("no checkpoint was aborted")
	}
	setRows(0.6)
	run()
	readings(400)
	run()

	var got []string
	tasks := map[int32]bool{}
	for _, r := range k.ReadAll("out") {
		x, err := codec.DecodeJSON(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		m := x.(map[string]any)
		l := m["left"].(map[string]any)
		row := "-"
		if rt, ok := m["right"].(map[string]any); ok {
			if rt["sensor"] != l["sensor"] {
				t.Fatalf("result %s: the row of another sensor", r.Value)
			}
			row = fmt.Sprint(rt["max"])
		}
		if m["key"] != string(r.Key) || fmt.Sprintf("r%v", l["n"]) != string(r.Key) {
			t.Fatalf("result %s under key %s", r.Value, r.Key)
		}
		got = append(got, fmt.Sprintf("%s %s %s", r.Key, l["sensor"], row))
		if row != "-" {
			// Readings and results are partitioned alike, by their key:
			// the result's partition is the task that found the row.
			tasks[r.Partition] = true
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		diff(t, got, want)
	}
	if len(tasks) != 3 {
		t.Fatalf("rows were found in %d of the 3 tasks' outputs", len(tasks))
	}
	if n := len(k.ReadAll("dlq")); n != 0 {
		t.Fatalf("%d dead letters", n)
	}
	t.Logf("%d readings looked up in a broadcast table (set, changed, deleted) from 3 tasks, each once; %d aborted checkpoints", len(want), every.Fired())
}

// TestBroadcastRowsRacingTheStream changes rows while readings flow, with
// every third checkpoint aborted: which version a reading sees depends on
// the order the two streams arrive in, but every reading is emitted once,
// with a version its sensor had (or none before its first), and within a
// task the versions seen of each sensor never go back.
func TestBroadcastRowsRacingTheStream(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("left", 3)
	k.Topic("right", 1)
	k.Topic("out", 3)
	k.Topic("dlq", 3)
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const readings, sensors = 6000, 8
	every := testkit.NewEveryNth(3)
	p := newPipeline(t, k, broadcasted, nil, abortEvery(every))
	stop := testkit.Start(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	versions := map[string]int{}
	for i := range readings {
		if i%20 == 0 {
			s := fmt.Sprintf("s%d", (i/20)%sensors)
			versions[s]++
			cl.Produce(ctx, &kgo.Record{Topic: "right", Key: []byte(s), Value: fmt.Appendf(nil, `{"sensor": %q, "version": %d}`, s, versions[s])}, nil)
		}
		s := fmt.Sprintf("s%d", i%sensors)
		cl.Produce(ctx, &kgo.Record{Topic: "left", Key: fmt.Appendf(nil, "r%d", i), Value: fmt.Appendf(nil, `{"sensor": %q, "n": %d}`, s, i)}, nil)
		if i%500 == 0 {
			time.Sleep(20 * time.Millisecond) // let checkpoints fall in between
		}
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	werr := k.WaitSettled(ctx, "t", "left", "right", wire.RepartitionTopic("t", "everywhere"))
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if werr != nil {
		t.Fatal(werr)
	}
	if every.Fired() == 0 {
		t.Fatal("no checkpoint was aborted")
	}
	seen := map[string]bool{}
	last := map[int32]map[string]int{} // per task and sensor, the version seen last
	saw := 0
	for _, r := range k.ReadAll("out") {
		x, err := codec.DecodeJSON(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		m := x.(map[string]any)
		l := m["left"].(map[string]any)
		s := l["sensor"].(string)
		if seen[string(r.Key)] {
			t.Fatalf("reading %s emitted twice", r.Key)
		}
		seen[string(r.Key)] = true
		v := 0
		if rt, ok := m["right"].(map[string]any); ok {
			if rt["sensor"] != s {
				t.Fatalf("%s: the row of another sensor", r.Value)
			}
			v = rt["version"].(int)
			saw++
		}
		if last[r.Partition] == nil {
			last[r.Partition] = map[string]int{}
		}
		if v < last[r.Partition][s] || v > versions[s] {
			t.Fatalf("task %d: reading %s saw version %d of %s after version %d (versions written: %d)", r.Partition, r.Key, v, s, last[r.Partition][s], versions[s])
		}
		last[r.Partition][s] = v
	}
	if len(seen) != readings || saw < readings/2 {
		t.Fatalf("%d of %d readings emitted, %d with a row", len(seen), readings, saw)
	}
	t.Logf("%d readings, each once, %d with a row; versions seen per task only move forward; %d aborted checkpoints", readings, saw, every.Fired())
}

// TestABroadcastTableNeedsNoCoPartitioning: a table topic with more
// partitions than the stream is broadcast to as many, and every reading
// still finds its row.
func TestABroadcastTableNeedsNoCoPartitioning(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("left", 2)
	k.Topic("right", 5)
	k.Topic("out", 2)
	k.Topic("dlq", 2)
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var rows []*kgo.Record
	for i := range 10 {
		rows = append(rows, &kgo.Record{Topic: "right", Key: fmt.Appendf(nil, "s%d", i), Value: fmt.Appendf(nil, `{"sensor": "s%d", "max": %d}`, i, 20+i)})
	}
	if err := cl.ProduceSync(ctx, rows...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	p := newPipeline(t, k, broadcasted, nil)
	stop := testkit.Start(t, p)
	if err := k.WaitSettled(ctx, "t", "left", "right", wire.RepartitionTopic("t", "everywhere")); err != nil {
		t.Fatal(err)
	}
	var readings []*kgo.Record
	for i := range 200 {
		readings = append(readings, &kgo.Record{Topic: "left", Key: fmt.Appendf(nil, "r%d", i), Value: fmt.Appendf(nil, `{"sensor": "s%d", "n": %d}`, i%10, i)})
	}
	if err := cl.ProduceSync(ctx, readings...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	werr := k.WaitSettled(ctx, "t", "left", "right", wire.RepartitionTopic("t", "everywhere"))
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if werr != nil {
		t.Fatal(werr)
	}
	out := k.ReadAll("out")
	for _, r := range out {
		x, err := codec.DecodeJSON(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		if x.(map[string]any)["right"] == nil {
			t.Fatalf("%s found no row", r.Value)
		}
	}
	if len(out) != 200 {
		t.Fatalf("%d results, want 200", len(out))
	}
}
