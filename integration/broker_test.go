package integration

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The broker's own restarts are faults later tests inject; this shows they
// fire and that the broker comes back with its data, committed and aborted
// transactions included, on the same address.
func TestBrokerKeepsItsDataAcrossRestarts(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func(ctx context.Context, b Broker) error
	}{
		{"after a clean stop", func(ctx context.Context, b Broker) error { return b.Stop(ctx) }},
		{"after SIGKILL", func(_ context.Context, b Broker) error { return b.Kill() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			if !e.broker.CanRestart() {
				t.Skipf("the %s broker is not the suite's to restart", e.broker.Kind())
			}
			CreateTopics(t, e.adm, 2, e.input, e.output)
			ProduceInput(t, e.seeds, InputSpec{Topic: e.input, Records: 1000, Keys: 10})
			f := &fixture{t: t, seeds: e.seeds, adm: e.adm, out: e.output, group: e.group, partitions: 2}
			outs := []outRec{{0, "a", []byte("committed")}, {1, "b", []byte("committed")}}
			f.transact(kgo.TryCommit, outs)
			f.transact(kgo.TryAbort, outs)

			before := e.listed(e.input, e.output)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			if err := tc.stop(ctx, e.broker); err != nil {
				t.Fatalf("stopping the broker: %v", err)
			}
			if err := e.broker.Start(ctx); err != nil {
				t.Fatalf("restarting the broker: %v", err)
			}
			WaitFor(t, 30*time.Second, "the restarted broker to list offsets", func() (bool, string) {
				ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
				defer cancel()
				_, err := listPartitions(ctx, e.adm, e.input)
				return err == nil, errString(err)
			})
			after := e.listed(e.input, e.output)
			for what, want := range before {
				if got := after[what]; !maps.Equal(got, want) {
					t.Errorf("%s: %v before the restart, %v after", what, want, got)
				}
			}

			ctx, cancel = context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			ts, err := listPartitions(ctx, e.adm, e.input)
			if err != nil {
				t.Fatal(err)
			}
			recs, err := readTopic(ctx, e.cl, e.adm, ts, ts.lso, readCommitted)
			if err != nil {
				t.Fatal(err)
			}
			in, err := parseInput(recs)
			if err != nil {
				t.Fatal(err)
			}
			if len(in) != 1000 || in[0].Seq != 0 || in[999].Seq != 999 {
				t.Errorf("read back %d input records after the restart, want seqs 0..999", len(in))
			}
			out, err := listPartitions(ctx, e.adm, e.output)
			if err != nil {
				t.Fatal(err)
			}
			committed, err := readTopic(ctx, e.cl, e.adm, out, out.lso, readCommitted)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(committed[0]) + len(committed[1]); n != 2 {
				t.Errorf("read back %d committed output records after the restart, want 2 (and the aborted 2 hidden)", n)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// listed returns the start, end and last stable offsets of topics, keyed by
// "<topic> <which>".
func (e *env) listed(topics ...string) map[string]map[int32]int64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), 10*time.Second)
	defer cancel()
	out := make(map[string]map[int32]int64)
	for _, topic := range topics {
		ts, err := listPartitions(ctx, e.adm, topic)
		if err != nil {
			e.t.Fatal(err)
		}
		out[topic+" start offsets"] = ts.start
		out[topic+" high watermarks"] = ts.hwm
		out[topic+" last stable offsets"] = ts.lso
	}
	return out
}
