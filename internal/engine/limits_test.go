package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/internal/testkit"
	"github.com/pipeline-run/pipeline/wire"
)

// TestRecordsTooLargeForTheOutputTopicGoToTheDeadLetterTopic writes to an
// output topic whose max.message.bytes (2,000) is far below
// producer.batch_max_bytes, with 1 % of the outputs padded to 2.4 KB. The
// broker refuses any batch over the topic's limit, and used to refuse
// every batch holding one of those records, normal ones included: after
// ten aborted checkpoints the pipeline stopped with no output at all. Now
// batches are sized by the topic's limit and the oversized records go to
// the dead-letter topic, once, with nothing aborted.
func TestRecordsTooLargeForTheOutputTopicGoToTheDeadLetterTopic(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("in", 2)
	if err := k.Cluster.CreateTopic("out", 2, map[string]string{"max.message.bytes": "2000"}); err != nil {
		t.Fatal(err)
	}
	const n = 3000
	big := map[int]bool{}
	var rs []*kgo.Record
	for i := range n {
		pad := ""
		if i%100 == 37 {
			pad = strings.Repeat("x", 2400)
			big[i] = true
		}
		key := fmt.Sprintf("k%d", i%50)
		rs = append(rs, &kgo.Record{Topic: "in", Key: []byte(key), Value: fmt.Appendf(nil, `{"k":%q,"seq":%d,"pad":%q}`, key, i, pad)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := k.Client.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	body := strings.Replace(passThrough, `steps: [{map: "{k: value.k, seq: value.seq}"}]`, `steps: [{map: "{k: value.k, seq: value.seq, pad: value.pad}"}]`, 1)
	// A checkpoint may abort for reasons of its own on a loaded machine (a
	// rebalance while the group forms): what must not happen is one refused
	// for its size, as every batch holding a big record was before.
	var mu sync.Mutex
	var aborts []error
	p := newPipeline(t, k, body, nil, WithCheckpointObserver(func(cp Checkpoint) {
		if !cp.Committed {
			mu.Lock()
			aborts = append(aborts, cp.Err)
			mu.Unlock()
		}
	}))
	testkit.RunUntilCommitted(t, k, p, "t", "in")
	testkit.CheckExactlyOnce(t, k.ReadAll("out"), n, big)
	dlq := k.ReadAll("dlq")
	seen := map[int]int{}
	for _, r := range dlq {
		var v struct{ Seq int }
		if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Fatalf("dead letter at %d: %v", r.Offset, err)
		}
		seen[v.Seq]++
		if e, _ := headerOf(r, wire.HeaderError); !strings.Contains(e, "larger than the max.message.bytes (2000) of topic out") {
			t.Errorf("dead letter of seq %d says %q; want the topic's limit named", v.Seq, e)
		}
	}
	for seq := range big {
		if seen[seq] != 1 {
			t.Errorf("seq %d is in the dead-letter topic %d times, want once", seq, seen[seq])
		}
	}
	if len(dlq) != len(big) {
		t.Errorf("%d dead letters, want the %d oversized records", len(dlq), len(big))
	}
	mu.Lock()
	defer mu.Unlock()
	for _, err := range aborts {
		if errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge) || strings.Contains(fmt.Sprint(err), "too large") {
			t.Errorf("a checkpoint aborted for its size; no batch should have reached the broker over the topic's limit: %v", err)
		} else {
			t.Logf("a checkpoint aborted for another reason: %v", err)
		}
	}
}

func TestLimitsAreTheSmallerOfTheProducersAndTheTopics(t *testing.T) {
	l := &limits{batchMax: 1 << 20, topics: map[string]int32{"small": 2000, "large": 8 << 20, "tiny": 100}}
	for _, tc := range []struct {
		topic string
		batch int32
		rec   int
		says  string
	}{
		{"small", 2000, 2000 - batchHeader, "the max.message.bytes (2000) of topic small"},
		{"large", 1 << 20, 1<<20 - batchHeader, "producer.batch_max_bytes (1048576)"},
		{"unknown", 1 << 20, 1<<20 - batchHeader, "producer.batch_max_bytes (1048576)"},
		// The client takes no batch limit under 512 bytes; records are
		// still held to the topic's own limit.
		{"tiny", minBatch, 100 - batchHeader, "the max.message.bytes (100) of topic tiny"},
	} {
		if got := l.batch(tc.topic); got != tc.batch {
			t.Errorf("batch(%s) = %d, want %d", tc.topic, got, tc.batch)
		}
		if got, says := l.record(tc.topic); got != tc.rec || says != tc.says {
			t.Errorf("record(%s) = %d, %q; want %d, %q", tc.topic, got, says, tc.rec, tc.says)
		}
	}
}
