package bench

import "testing"

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
