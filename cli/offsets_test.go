package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/internal/testkit"
	"github.com/pipeline-run/pipeline/offsets"
)

// TestOffsetsShowAfterACleanFinish runs a key_by pipeline to completion
// and expects no lag anywhere, on its repartition topic included: the
// group's offset there stops before the marker of the last transaction,
// which is not a record to read.
func TestOffsetsShowAfterACleanFinish(t *testing.T) {
	addr := testkit.NewKafka(t, kfake.SeedTopics(2, "in")).Addr
	path := writeFile(t, fmt.Sprintf(`name: lagk
brokers: [%s]
instance_id: i1
checkpoint: {interval: 100ms}
sources: {in: {topics: [in]}}
steps: [{name: k, key_by: value.k}]
sinks: {out: {topic: out}}
`, addr))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("in"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const n = 50
	for i := range n {
		cl.Produce(ctx, &kgo.Record{Key: fmt.Append(nil, i), Value: fmt.Appendf(nil, `{"k": "k%d"}`, i%7)}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	runUntil(t, ctx, path, func() (bool, error) {
		recs, err := offsets.ReadToEnd(ctx, cl, "out", true)
		return len(recs) == n, err
	})

	code, out, errs := runCLI(t, "offsets", "show", "-c", path)
	if code != 0 {
		t.Fatalf("offsets show: exit %d\n%s%s", code, out, errs)
	}
	rows := strings.Split(strings.TrimSpace(out), "\n")[1:]
	topics := map[string]int{}
	for _, row := range rows {
		f := strings.Fields(row)
		if len(f) != 5 {
			t.Fatalf("row %q has %d columns, want 5:\n%s", row, len(f), out)
		}
		topics[f[0]]++
		if f[4] != "0" {
			t.Errorf("%s/%s: lag %s after a clean finish, want 0:\n%s", f[0], f[1], f[4], out)
		}
	}
	if topics["in"] != 2 || topics["lagk-k-repartition"] != 2 {
		t.Errorf("rows per topic %v, want 2 of in and 2 of lagk-k-repartition:\n%s", topics, out)
	}
}
