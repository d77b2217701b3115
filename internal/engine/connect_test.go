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
)

const connected = `
instance_id: i1
checkpoint: {interval: 50ms, timeout: 10s, max_records: 100}
transactions: {timeout: 20s}
consumer: {session_timeout: 6s}
sources:
  limits: {topics: [left]}
  readings: {topics: [right]}
steps:
  - name: alerts
    from: [limits, readings]
    connect:
      state: [limit, changes]
      on:
        - set: {limit: value.max, changes: '(state.changes ?? 0) + 1'}
        - when: state.limit != nil && value.temp > state.limit
          emit: '{sensor: key, temp: value.temp, limit: state.limit, changes: state.changes}'
sinks:
  out: {topic: out, from: alerts}
dead_letter: {topic: dlq}
`

// TestConnectMatchesTheOracle runs a connect step that keeps the latest
// limit per sensor from one stream and checks the readings of another
// against it, in phases so that the order the two streams arrive in is
// known: limits, readings (every third checkpoint aborted), changed and
// removed limits, readings again on a restarted pipeline. Every alert is
// the oracle's, exactly once.
func TestConnectMatchesTheOracle(t *testing.T) {
	k := testkit.NewKafka(t)
	for _, topic := range []string{"left", "right", "out", "dlq"} {
		k.Topic(topic, 3)
	}
	rng := rand.New(rand.NewPCG(23, 0))
	limits := map[string]*int{}
	changes := map[string]int{}
	produce := func(topic string, part int32, key string, value string) *kgo.Record {
		return &kgo.Record{Topic: topic, Partition: part, Key: []byte(key), Value: []byte(value)}
	}
	send := func(rs []*kgo.Record) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(k.Addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
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
	setLimits := func(share float64) {
		var rs []*kgo.Record
		for p := range 3 {
			for i := range 10 {
				key := fmt.Sprintf("p%dk%d", p, i)
				if rng.Float64() >= share {
					continue
				}
				v := `{"max": null}`
				if rng.IntN(8) == 0 {
					limits[key] = nil
				} else {
					m := 20 + rng.IntN(10)
					limits[key] = &m
					v = fmt.Sprintf(`{"max": %d}`, m)
				}
				changes[key]++
				rs = append(rs, produce("left", int32(p), key, v))
			}
		}
		send(rs)
	}
	var want []string
	readings := func(n int) {
		var rs []*kgo.Record
		for p := range 3 {
			for range n {
				key := fmt.Sprintf("p%dk%d", p, rng.IntN(12)) // k10 and k11 never get a limit
				temp := 15 + rng.IntN(20)
				if m := limits[key]; m != nil && temp > *m {
					want = append(want, fmt.Sprintf("%s %d>%d after %d changes", key, temp, *m, changes[key]))
				}
				rs = append(rs, produce("right", int32(p), key, fmt.Sprintf(`{"temp": %d}`, temp)))
			}
		}
		send(rs)
	}
	run := func(opts ...Option) {
		t.Helper()
		p := newPipeline(t, k, connected, nil, opts...)
		stop := testkit.Start(t, p)
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		werr := k.WaitCommitted(ctx, "t", "left")
		if werr == nil {
			werr = k.WaitCommitted(ctx, "t", "right")
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if werr != nil {
			t.Fatal(werr)
		}
	}
	setLimits(1)
	run()
	readings(300)
	every := testkit.NewEveryNth(3)
	run(abortEvery(every))
	if every.Fired() == 0 {
		t.Fatal("no checkpoint was aborted")
	}
	setLimits(0.5)
	run()
	readings(300)
	run()

	var got []string
	for _, r := range k.ReadAll("out") {
		x, err := codec.DecodeJSON(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		m := x.(map[string]any)
		if m["sensor"] != string(r.Key) {
			t.Fatalf("alert %s under key %s", r.Value, r.Key)
		}
		got = append(got, fmt.Sprintf("%s %v>%v after %v changes", m["sensor"], m["temp"], m["limit"], m["changes"]))
	}
	slices.Sort(got)
	slices.Sort(want)
	if len(want) < 100 {
		t.Fatalf("the input makes %d alerts: it tests too little", len(want))
	}
	if !slices.Equal(got, want) {
		diff(t, got, want)
	}
	if n := len(k.ReadAll("dlq")); n != 0 {
		t.Fatalf("%d dead letters", n)
	}
	t.Logf("%d alerts, each once, against limits set, changed and removed; %d aborted checkpoints", len(want), every.Fired())
}
