package engine

import (
	"context"
	"testing"
	"time"

	"github.com/pipeline-run/pipeline/internal/testkit"
	"github.com/pipeline-run/pipeline/wire"
)

// TestCountersLeaveRepartitionTopicsOut runs a key_by pipeline to the end:
// every input record is written to the repartition topic and read back
// before it reaches the sink. The totals used to count both trips (records
// in twice the input, records out the outputs plus the repartition
// writes); they must count the pipeline's input and output only, with the
// records through repartition topics apart.
func TestCountersLeaveRepartitionTopicsOut(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("in", 2)
	const n = 1000
	k.Input("in", n, 20, nil)
	p := newPipeline(t, k, `
instance_id: i1
checkpoint: {interval: 100ms, timeout: 10s}
transactions: {timeout: 20s}
sources: {in: {topics: [in]}}
steps:
  - name: by_k
    key_by: value.k
  - map: "{k: value.k, seq: value.seq}"
sinks: {out: {topic: out}}
`, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	defer wcancel()
	// The input, then what it became in the repartition topic: it is
	// written only once the input is read.
	for _, topic := range []string{"in", wire.RepartitionTopic("t", "by_k")} {
		if err := k.WaitCommitted(wctx, "t", topic); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	out := k.ReadAll("out")
	testkit.CheckExactlyOnce(t, out, n, nil)
	st := p.Stats()
	if st.RecordsIn != n || st.Repartitioned != n || st.RecordsOut != int64(len(out)) {
		t.Fatalf("records in %d, repartitioned %d, out %d; want %d, %d and %d", st.RecordsIn, st.Repartitioned, st.RecordsOut, n, n, len(out))
	}
}
