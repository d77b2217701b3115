package bench

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStatefulArms runs the keyed-count-cp, interval-join and table-join
// arms on the embedded broker: each passes its gate and is timed. The
// backlog has more records than keys, so that counts go past 1.
func TestStatefulArms(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a broker")
	}
	dir := t.TempDir()
	o := Options{
		Broker: "embedded", Records: 2*numKeys + 3000, Sizes: []int{100}, Partitions: []int{2},
		Intervals: []time.Duration{100 * time.Millisecond}, Rounds: 1,
		Arms: []string{"keyed-count-cp", "interval-join", "table-join"}, LatencyFor: 300 * time.Millisecond, MaxRecords: 200000, RunTimeout: 30 * time.Second,
		JSON: filepath.Join(dir, "r.json"),
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, msg strings.Builder
	if err := Run(ctx, o, &out, &msg); err != nil {
		t.Fatalf("Run: %v\n%s\n%s", err, out.String(), msg.String())
	}
	res, err := ReadJSON(o.JSON)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 3 {
		t.Fatalf("%d rows, want one per arm:\n%s", len(res.Rows), out.String())
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
