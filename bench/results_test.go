package bench

import (
	"encoding/json"
	"math"
	"testing"
)

// TestRowRatiosRoundTrip: a ratio that is not there (NaN) is written as
// null and read back as NaN, and so is one a result file written before
// the ratio existed lacks.
func TestRowRatiosRoundTrip(t *testing.T) {
	b, err := json.Marshal(Row{Arm: "windowed-count", Ratio: 0.25, PeerRatio: math.NaN(), PassRatio: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	var r Row
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if r.Ratio != 0.25 || !math.IsNaN(r.PeerRatio) || r.PassRatio != 0.5 {
		t.Errorf("%s read back as %+v", b, r)
	}
	var old Row
	if err := json.Unmarshal([]byte(`{"arm":"pass","ratio_to_copy":0.9,"ratio_to_peer":null}`), &old); err != nil {
		t.Fatal(err)
	}
	if old.Ratio != 0.9 || !math.IsNaN(old.PeerRatio) || !math.IsNaN(old.PassRatio) {
		t.Errorf("an old row read back as %+v", old)
	}
}
