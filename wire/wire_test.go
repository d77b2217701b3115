package wire

import (
	"math"
	"testing"
)

func TestWatermarkRoundTrips(t *testing.T) {
	for _, c := range []struct {
		w    int32
		wm   int64
		idle bool
	}{{0, 1700000000000, false}, {5, -3, false}, {2, math.MinInt64, true}, {7, 42, true}} {
		w, wm, idle, err := ParseWatermark(FormatWatermark(c.w, c.wm, c.idle))
		if err != nil || w != c.w || wm != c.wm || idle != c.idle {
			t.Errorf("%+v came back as %d %d %v %v", c, w, wm, idle, err)
		}
	}
	for _, bad := range []string{"", "1", "x 5", "1 2 3", "1 idle x", "-1 5"} {
		if _, _, _, err := ParseWatermark([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
