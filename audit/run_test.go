package audit

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestAuditOfARealRun runs a pipeline that aborts every third checkpoint on
// purpose, then audits it: the aborted checkpoints' progress records and
// outputs must be invisible, and everything else accounted for.
func TestAuditOfARealRun(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "in"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addr := c.ListenAddrs()[0]
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("in"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 20000
	var rs []*kgo.Record
	for i := range n {
		rs = append(rs, &kgo.Record{Key: []byte("k" + strconv.Itoa(i%50)), Value: fmt.Appendf(nil, `{"seq":%d}`, i)})
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
name: audited
brokers: [%s]
instance_id: i1
checkpoint: {interval: 100ms, timeout: 10s, max_records: 1500}
transactions: {timeout: 20s}
sources: {in: {topics: [in]}}
steps: [{filter: "value.seq %% 7 != 0"}, {map: "{seq: value.seq}"}]
sinks: {out: {topic: out}}
dead_letter: {topic: dlq}
`, addr)), "audited.yaml", func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	var aborted atomic.Int64
	p, err := pipeline.New(cfg, nil, pipeline.WithSeedBrokers(addr), pipeline.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		pipeline.WithBeforeCommit(func(cp pipeline.Checkpoint) error {
			if cp.ID%3 == 0 && cp.Records > 0 {
				aborted.Add(1)
				return fmt.Errorf("injected")
			}
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()
	adm := kadm.NewClient(cl)
	for {
		lags, err := adm.Lag(ctx, "audited")
		if err == nil && lags["audited"].Lag.Total() == 0 && lags["audited"].FetchErr == nil && len(lags["audited"].Lag) > 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the pipeline did not catch up: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if aborted.Load() == 0 {
		t.Fatal("no checkpoint was aborted")
	}
	r, err := Run(ctx, cl, Spec{Group: "audited", Inputs: []string{"in"}, Outputs: []string{"out", "dlq"}, Progress: "audited-progress", TxnTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() {
		t.Fatalf("findings: %v", r.Findings)
	}
	if r.InputRecords != n || r.OutputRecords != n-(n+6)/7 {
		t.Fatalf("audit accounted for %d inputs and %d outputs, want %d and %d", r.InputRecords, r.OutputRecords, n, n-(n+6)/7)
	}
	t.Logf("%d checkpoints audited, %d aborted on purpose; %d inputs, %d outputs accounted for", r.Checkpoints, aborted.Load(), r.InputRecords, r.OutputRecords)
}
