package engine

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/internal/testkit"
)

// benchInput fills topic with n records of about size bytes each.
func benchInput(b *testing.B, k *testkit.Kafka, topic string, n, size int) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pad := make([]byte, max(0, size-40))
	for i := range pad {
		pad[i] = 'x'
	}
	batch := make([]*kgo.Record, 0, 10000)
	for i := 0; i < n; i++ {
		key := "k" + strconv.Itoa(i%10000)
		batch = append(batch, &kgo.Record{Topic: topic, Key: []byte(key), Value: fmt.Appendf(nil, `{"k":%q,"seq":%d,"p":"%s"}`, key, i, pad)})
		if len(batch) == cap(batch) || i == n-1 {
			if err := k.Client.ProduceSync(ctx, batch...).FirstErr(); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
}

// BenchmarkPipeline runs whole pipelines on an in-process embedded broker:
// records/s of a backlog read, processed and committed exactly once.
func BenchmarkPipeline(b *testing.B) {
	const n = 200000
	cases := []struct {
		name  string
		steps string
	}{
		{"pass-through", "[]"},
		{"filter+map", `[{filter: "value.seq % 10 != 3"}, {map: "{k: value.k, seq: value.seq, twice: value.seq * 2}"}]`},
		{"keyed-count", `[{aggregate: {fields: {n: count}, emit: checkpoint}}]`},
		{"keyed-count-every-update", `[{aggregate: {fields: {n: count}}}]`},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				k := testkit.NewKafka(b)
				k.Topic("in", 3)
				benchInput(b, k, "in", n, 100)
				body := fmt.Sprintf(`
instance_id: b
checkpoint: {interval: 1s, timeout: 10s}
transactions: {timeout: 30s}
sources: {in: {topics: [in]}}
steps: %s
sinks: {out: {topic: out}}
`, tc.steps)
				cfg := parseConfig(b, body)
				p, err := New(cfg, nil, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), WithSeedBrokers(k.Addr))
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				start := time.Now()
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- p.Run(ctx) }()
				wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Minute)
				werr := k.WaitCommitted(wctx, "t", "in")
				wcancel()
				elapsed := time.Since(start)
				cancel()
				if err := <-done; err != nil {
					b.Fatal(err)
				}
				if werr != nil {
					b.Fatal(werr)
				}
				b.ReportMetric(float64(n)/elapsed.Seconds(), "records/s")
				b.StopTimer()
			}
		})
	}
}
