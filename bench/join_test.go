package bench

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestStatefulArms runs the keyed-count-cp, interval-join and table-join
// arms on the embedded broker: each passes its gate and is timed. The
// backlog has more records than keys, so that counts go past 1.
func TestStatefulArms(t *testing.T) {
	res, out := sweep(t, 2*numKeys+3000, false, "keyed-count-cp", "interval-join", "table-join")
	if len(res.Rows) != 3 {
		t.Fatalf("%d rows, want one per arm:\n%s", len(res.Rows), out)
	}
	for _, r := range res.Rows {
		if r.Failed != "" || r.RecordsPerSec <= 0 || r.TxPerSec <= 0 {
			t.Errorf("%s: %+v", r.Arm, r)
		}
	}
}

// TestPairsItself: the join arms' check of an output.
func TestPairsItself(t *testing.T) {
	for v, want := range map[string]bool{
		`{"key":"k5","left":{"seq":5,"ts":1},"right":{"seq":5,"ts":1}}`:     true,
		`{"key":"k5","left":{"seq":5,"ts":1},"right":{"seq":10005,"ts":1}}`: false,
		`{"key":"k5","left":{"seq":5,"ts":1},"right":null}`:                 false,
	} {
		if got := pairsItself(5, []byte(v)); got != want {
			t.Errorf("pairsItself(5, %s) = %v", v, got)
		}
	}
}

// TestTableDue: the table-join arm waits for the watermark, so the records
// of a partition's latest millisecond have no output; Kafka Streams' arm
// (every) joins each record as it reads it.
func TestTableDue(t *testing.T) {
	rec := func(part int32, seq, ms int64) *kgo.Record {
		return &kgo.Record{Partition: part, Value: Value(nil, seq, ms, 60), Timestamp: time.UnixMilli(ms)}
	}
	recs := []*kgo.Record{rec(0, 1, 10), rec(0, 2, 20), rec(0, 3, 20), rec(1, 4, 15), rec(1, 5, 5)}
	for _, tc := range []struct {
		every bool
		want  []int64
	}{
		{false, []int64{1, 5}},
		{true, []int64{1, 2, 3, 4, 5}},
	} {
		due, err := tableDue(recs, tc.every)
		if err != nil {
			t.Fatal(err)
		}
		if len(due) != len(tc.want) {
			t.Errorf("every=%v: due %v, want %v", tc.every, due, tc.want)
		}
		for _, seq := range tc.want {
			if !due[seq] {
				t.Errorf("every=%v: seq %d not due (due: %v)", tc.every, seq, due)
			}
		}
	}
	if _, err := tableDue([]*kgo.Record{{Value: []byte(`{}`)}}, true); err == nil {
		t.Error("an input record without a seq passed")
	}
}
