package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/internal/testkit"
)

// TestConsume writes a plain record, then a transaction left open, and
// reads the topic as each flag says.
func TestConsume(t *testing.T) {
	addr := testkit.NewKafka(t, kfake.SeedTopics(1, "t")).Addr
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	at := time.Date(2026, 3, 1, 12, 0, 0, 250e6, time.UTC)
	if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte("k1"), Value: []byte(`{"n": 1}`), Timestamp: at,
		Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("v")}}}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	txn, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("t"), kgo.TransactionalID("open"), kgo.TransactionTimeout(10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := txn.ProduceSync(ctx, &kgo.Record{Value: []byte("not json")}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	// read_committed: the open transaction holds the rest back.
	code, out, errs := runCLI(t, "consume", "--brokers", addr, "--topic", "t", "--max", "1", "--timeout", "20s")
	if code != 0 {
		t.Fatalf("consume: exit %d\n%s%s", code, out, errs)
	}
	m := decodeJSON(t, out, "topic", "partition", "offset", "key", "value", "headers", "timestamp")
	if m["topic"] != "t" || m["partition"] != 0.0 || m["offset"] != 0.0 || m["key"] != "k1" ||
		m["value"].(map[string]any)["n"] != 1.0 || m["headers"].(map[string]any)["h"] != "v" || m["timestamp"] != "2026-03-01T12:00:00.250Z" {
		t.Errorf("consume printed %v", m)
	}
	code, out, errs = runCLI(t, "consume", "--brokers", addr, "--topic", "t", "--max", "2", "--timeout", "1s")
	if code != ExitFailure || strings.Count(out, "\n") != 1 || !strings.Contains(errs, "consume: 1 of 2 records of t after --timeout 1s") {
		t.Errorf("read_committed past an open transaction: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	// read_uncommitted sees the open transaction's record.
	code, out, errs = runCLI(t, "consume", "--brokers", addr, "--topic", "t", "--isolation", "uncommitted", "--max", "2", "--timeout", "20s")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 {
		t.Fatalf("consume --isolation uncommitted: exit %d\n%s%s", code, out, errs)
	}
	var second struct {
		Key   any
		Value any
	}
	if err := json.Unmarshal([]byte(lines[1]), &second); err != nil || second.Key != nil || second.Value != "not json" {
		t.Errorf("the second record printed as %s (%v): want a null key and the value as a string", lines[1], err)
	}
	// latest: nothing new arrives, and without --max the timeout is the end.
	code, out, errs = runCLI(t, "consume", "--brokers", addr, "--topic", "t", "--from", "latest", "--timeout", "300ms")
	if code != 0 || out != "" {
		t.Errorf("consume --from latest: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--topic", "nope", "--timeout", "1s"}, ExitFailure, `topic "nope" does not exist`},
		{[]string{"--topic", "t", "--from", "middle"}, ExitUsage, `consume: --from "middle": must be earliest or latest`},
		{[]string{"--topic", "t", "--isolation", "dirty"}, ExitUsage, `consume: --isolation "dirty": must be committed or uncommitted`},
		{[]string{"--topic", "t", "--timeout", "5"}, ExitUsage, "a duration needs a unit"},
		{[]string{}, ExitUsage, "consume: --topic is required"},
	} {
		code, out, errs := runCLI(t, append([]string{"consume", "--brokers", addr}, tc.args...)...)
		if code != tc.code || !strings.Contains(errs, tc.want) {
			t.Errorf("consume %v: exit %d, want %d with %q\nstdout: %s\nstderr: %s", tc.args, code, tc.code, tc.want, out, errs)
		}
	}
}
