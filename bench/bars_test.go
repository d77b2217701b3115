package bench

import (
	"image"
	"image/color"
	"math"
	"testing"
)

// colourCount counts the pixels of img in colour c.
func colourCount(img image.Image, c color.RGBA) int {
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if uint8(r>>8) == c.R && uint8(g>>8) == c.G && uint8(bl>>8) == c.B {
				n++
			}
		}
	}
	return n
}

// TestWritePlotDrawsOneIntervalAsBarsToScale: results of a single
// checkpoint interval are drawn as bars whose lengths are in the ratio of
// the arms' records/s, and a failed arm gets none.
func TestWritePlotDrawsOneIntervalAsBarsToScale(t *testing.T) {
	res := &Results{Broker: "kafka"}
	for _, parts := range []int{1, 6} {
		res.Rows = append(res.Rows,
			Row{Arm: "limit", IntervalS: 0, Size: 100, Partitions: parts, Rounds: 3, RecordsPerSec: 2_000_000},
			Row{Arm: "pass", IntervalS: 1, Size: 100, Partitions: parts, Rounds: 3, RecordsPerSec: 1_000_000, LimitRatio: 0.5},
			Row{Arm: "keyed-count", IntervalS: 1, Size: 100, Partitions: parts, Rounds: 3, Failed: "gate"},
			Row{Arm: "kstreams-pass", IntervalS: 1, Size: 100, Partitions: parts, Rounds: 3, RecordsPerSec: 500_000, LimitRatio: 0.25},
		)
	}
	if !singleInterval([]*Results{res}) {
		t.Fatal("one checkpoint interval taken for several")
	}
	img := writtenPlot(t, []*Results{res})
	limit := colourCount(img, limitGray)
	if limit == 0 {
		t.Fatal("no limit bar drawn")
	}
	for _, c := range []struct {
		arm  string
		col  color.RGBA
		want float64
	}{{"pass", armColors["pass"], 0.5}, {"kstreams-pass", kstreamsColor, 0.25}, {"keyed-count", armColors["keyed-count"], 0}} {
		got := float64(colourCount(img, c.col)) / float64(limit)
		if math.Abs(got-c.want) > 0.01 {
			t.Errorf("%s: a bar %.3f of the limit's, want %.2f", c.arm, got, c.want)
		}
	}

	res.Rows = append(res.Rows, Row{Arm: "pass", IntervalS: 5, Size: 100, Partitions: 1, Rounds: 3, RecordsPerSec: 1})
	if singleInterval([]*Results{res}) {
		t.Fatal("two checkpoint intervals taken for one")
	}
}
