package bench

import (
	"bytes"
	"image"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"
)

func TestNiceTicks(t *testing.T) {
	tests := []struct {
		top, step, axis float64
	}{
		{420000, 100000, 500000},
		{95000, 20000, 100000},
		{1, 0.2, 1},
		{12, 2, 12},
		{0, 1, 1},
		{math.NaN(), 1, 1},
	}
	for _, tc := range tests {
		step, axis := NiceTicks(tc.top)
		if math.Abs(step-tc.step) > 1e-9 || math.Abs(axis-tc.axis) > 1e-9 {
			t.Errorf("NiceTicks(%v) = %v, %v; want %v, %v", tc.top, step, axis, tc.step, tc.axis)
		}
		if axis < tc.top {
			t.Errorf("NiceTicks(%v): axis %v below the top", tc.top, axis)
		}
	}
}

func TestTickLabel(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 500: "500", 50000: "50k", 1500000: "1.5M", 120000: "120k"} {
		if got := TickLabel(v); got != want {
			t.Errorf("TickLabel(%v) = %q, want %q", v, got, want)
		}
	}
}

// writtenPlot is the image WritePlot writes for results, read back.
func writtenPlot(t *testing.T, results []*Results) image.Image {
	t.Helper()
	path := filepath.Join(t.TempDir(), "plot.png")
	if err := WritePlot(path, results); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func TestWritePlotDrawsEveryArmInItsColour(t *testing.T) {
	res := &Results{Broker: "embedded"}
	for _, iv := range []float64{0.1, 1, 5} {
		for _, g := range []group{{100, 1}, {1024, 6}} {
			res.Rows = append(res.Rows,
				Row{Arm: "copy", IntervalS: iv, Size: g.size, Partitions: g.parts, Rounds: 3, RecordsPerSec: 400000},
				Row{Arm: "pass", IntervalS: iv, Size: g.size, Partitions: g.parts, Rounds: 3, RecordsPerSec: 100000 * iv},
				Row{Arm: "peer", IntervalS: iv, Size: g.size, Partitions: g.parts, Rounds: 3, Failed: "x"},
			)
		}
	}
	img := writtenPlot(t, []*Results{res, res})
	if w, h := img.Bounds().Dx(), img.Bounds().Dy(); w < 2*(plotPadL+plotW) || h < plotBanner+2*plotH {
		t.Errorf("a 2×2 grid drawn on %d×%d pixels", w, h)
	}
	found := map[string]bool{}
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			for arm, c := range armColors {
				if uint8(r>>8) == c.R && uint8(g>>8) == c.G && uint8(b>>8) == c.B {
					found[arm] = true
				}
			}
		}
	}
	for _, arm := range []string{"copy", "pass", "peer"} {
		if !found[arm] {
			t.Errorf("no pixel in %s's colour", arm)
		}
	}
	if found["filter-map"] {
		t.Error("an arm without rows is drawn")
	}
}
