package bench

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"slices"
	"strconv"
)

// Plot layout, in pixels.
const (
	plotW      = 420 // a panel's plotting area
	plotH      = 270
	plotPadL   = 84 // room for the y tick labels
	plotPadR   = 36
	plotPadT   = 44 // room for the panel's title
	plotPadB   = 64 // room for the x tick labels and the axis name
	plotBanner = 96 // the title and the legend
	textScale  = 2  // the 5×7 font drawn at twice its size
)

var (
	white     = color.RGBA{255, 255, 255, 255}
	black     = color.RGBA{0, 0, 0, 255}
	gridGray  = color.RGBA{225, 225, 225, 255}
	textGray  = color.RGBA{70, 70, 70, 255}
	armColors = map[string]color.RGBA{
		"copy":           {60, 60, 60, 255},
		"copy-rc":        {150, 150, 150, 255},
		"peer":           {230, 159, 0, 255},
		"pass":           {0, 114, 178, 255},
		"filter-map":     {0, 158, 115, 255},
		"keyed-count":    {204, 121, 167, 255},
		"keyed-count-cp": {117, 112, 179, 255},
		"windowed-count": {213, 94, 0, 255},
		"interval-join":  {0, 158, 115, 255},
		"table-join":     {86, 180, 233, 255},
	}
)

// WritePlot draws records/s against checkpoint interval, one panel per
// broker (rows) and record size and partition count (columns), one line
// per arm, and writes it to path as a PNG. Results of one interval are
// drawn as bars per arm instead (Bars).
func WritePlot(path string, results []*Results) error {
	img := Plot(results)
	if singleInterval(results) {
		img = Bars(results)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

type group struct{ size, parts int }

// Plot draws WritePlot's figure.
func Plot(results []*Results) *image.RGBA {
	groups, rounds := groupsOf(results)
	title := fmt.Sprintf("Throughput against checkpoint interval: records/s, median of %d rounds", rounds)
	sub := "dashed: copy and copy-rc, which do not commit on an interval; the peer commits at the pipeline's cadence"
	var legend []string
	legendW := 0
	for _, arm := range ArmNames {
		if _, ok := armColors[arm]; ok && anyArm(results, arm) {
			legend = append(legend, arm)
			legendW += 46 + textWidth(arm, textScale) + 36
		}
	}
	cellW, cellH := plotPadL+plotW+plotPadR, plotPadT+plotH+plotPadB
	w := max(max(1, len(groups))*cellW+20, textWidth(title, 3)+40, textWidth(sub, textScale)+40, legendW+40)
	h := plotBanner + max(1, len(results))*cellH + 10
	c := &canvas{image.NewRGBA(image.Rect(0, 0, w, h))}
	c.fill(0, 0, w, h, white)

	c.text(20, 14, title, black, 3)
	c.text(20, 44, sub, textGray, textScale)
	x := 20
	for _, arm := range legend {
		col := armColors[arm]
		c.line(x, 80, x+36, 80, col, 3, isFlat(arm))
		c.disc(x+18, 80, 5, col)
		c.text(x+46, 73, arm, black, textScale)
		x += 46 + textWidth(arm, textScale) + 36
	}

	for i, res := range results {
		for j, g := range groups {
			ox, oy := 10+j*cellW+plotPadL, plotBanner+i*cellH+plotPadT
			c.panel(ox, oy, res, g)
		}
	}
	return c.img
}

// groupsOf returns the record sizes and partition counts of results, in
// order, and the most rounds of a row.
func groupsOf(results []*Results) (groups []group, rounds int) {
	for _, r := range results {
		for _, row := range r.Rows {
			if g := (group{row.Size, row.Partitions}); !slices.Contains(groups, g) {
				groups = append(groups, g)
			}
			rounds = max(rounds, row.Rounds)
		}
	}
	slices.SortFunc(groups, func(a, b group) int {
		if a.size != b.size {
			return a.size - b.size
		}
		return a.parts - b.parts
	})
	return groups, rounds
}

func anyArm(results []*Results, arm string) bool {
	for _, r := range results {
		for _, row := range r.Rows {
			if row.Arm == arm {
				return true
			}
		}
	}
	return false
}

// isFlat says an arm does not depend on the interval.
func isFlat(arm string) bool { return arm == "copy" || arm == "copy-rc" }

func (c *canvas) panel(ox, oy int, res *Results, g group) {
	var rows []Row
	var ivs []float64
	top := 0.0
	for _, r := range res.Rows {
		if r.Size != g.size || r.Partitions != g.parts {
			continue
		}
		rows = append(rows, r)
		if !slices.Contains(ivs, r.IntervalS) {
			ivs = append(ivs, r.IntervalS)
		}
		if r.Failed == "" {
			top = max(top, r.RecordsPerSec)
		}
	}
	slices.Sort(ivs)
	c.text(ox, oy-34, fmt.Sprintf("%s: %d B, %d partition%s", res.Broker, g.size, g.parts, plural(g.parts)), black, textScale)
	step, ymax := NiceTicks(top)
	ypix := func(v float64) int { return oy + plotH - int(math.Round(v/ymax*plotH)) }
	for v := 0.0; v <= ymax+step/2; v += step {
		y := ypix(v)
		c.line(ox, y, ox+plotW, y, gridGray, 1, false)
		lbl := TickLabel(v)
		c.text(ox-10-textWidth(lbl, textScale), y-7, lbl, textGray, textScale)
	}
	c.line(ox, oy, ox, oy+plotH, black, 2, false)
	c.line(ox, oy+plotH, ox+plotW, oy+plotH, black, 2, false)
	xpix := func(k int) int { return ox + int(float64(plotW)*(float64(k)+0.5)/float64(max(1, len(ivs)))) }
	for k, iv := range ivs {
		lbl := ivName(iv)
		c.line(xpix(k), oy+plotH, xpix(k), oy+plotH+6, black, 2, false)
		c.text(xpix(k)-textWidth(lbl, textScale)/2, oy+plotH+12, lbl, textGray, textScale)
	}
	name := "checkpoint interval"
	c.text(ox+plotW/2-textWidth(name, textScale)/2, oy+plotH+36, name, textGray, textScale)

	for _, arm := range ArmNames {
		col, ok := armColors[arm]
		if !ok {
			continue
		}
		px, py := -1, -1
		for k, iv := range ivs {
			i := slices.IndexFunc(rows, func(r Row) bool { return r.Arm == arm && r.IntervalS == iv })
			if i < 0 {
				continue
			}
			r := rows[i]
			if r.Failed != "" || r.RecordsPerSec <= 0 {
				// A failed arm is no number: a cross on the axis.
				x, y := xpix(k), oy+plotH
				c.line(x-6, y-6, x+6, y+6, col, 3, false)
				c.line(x-6, y+6, x+6, y-6, col, 3, false)
				px = -1
				continue
			}
			x, y := xpix(k), ypix(r.RecordsPerSec)
			if px >= 0 {
				c.line(px, py, x, y, col, 3, isFlat(arm))
			}
			c.disc(x, y, 5, col)
			px, py = x, y
		}
	}
}

// NiceTicks returns a tick step of 1, 2 or 5 times a power of ten that
// splits 0..top into at most six steps, and the axis top, a multiple of it
// at or above top.
func NiceTicks(top float64) (step, axisTop float64) {
	if top <= 0 || math.IsNaN(top) {
		return 1, 1
	}
	raw := top / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		step = m * mag
		if top/step <= 6 {
			break
		}
	}
	return step, math.Ceil(top/step-1e-9) * step
}

// TickLabel formats an axis value: 0, 500, 50k, 1.5M.
func TickLabel(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// canvas draws on an RGBA image.
type canvas struct{ img *image.RGBA }

func (c *canvas) fill(x0, y0, x1, y1 int, col color.RGBA) {
	for y := y0; y < y1; y++ {
		for x := x0; x < x1; x++ {
			c.img.SetRGBA(x, y, col)
		}
	}
}

// line draws from (x0,y0) to (x1,y1), width pixels wide (Bresenham with a
// square brush); dashed leaves gaps of 7 pixels every 14.
func (c *canvas) line(x0, y0, x1, y1 int, col color.RGBA, width int, dashed bool) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for i := 0; ; i++ {
		if !dashed || i%14 < 7 {
			c.fill(x0-width/2, y0-width/2, x0-width/2+width, y0-width/2+width, col)
		}
		if x0 == x1 && y0 == y1 {
			return
		}
		if e2 := 2 * e; e2 >= dy {
			e += dy
			x0 += sx
		} else {
			e += dx
			y0 += sy
		}
	}
}

func (c *canvas) disc(cx, cy, r int, col color.RGBA) {
	for y := -r; y <= r; y++ {
		for x := -r; x <= r; x++ {
			if x*x+y*y <= r*r {
				c.img.SetRGBA(cx+x, cy+y, col)
			}
		}
	}
}

// text draws s with its top-left corner at (x, y); characters the font
// lacks are drawn as '?'.
func (c *canvas) text(x, y int, s string, col color.RGBA, scale int) {
	for _, r := range s {
		if r < 0x20 || r > 0x7e {
			r = '?'
		}
		g := font5x7[r-0x20]
		for cx := range 5 {
			for cy := range 8 {
				if g[cx]&(1<<cy) != 0 {
					c.fill(x+cx*scale, y+cy*scale, x+(cx+1)*scale, y+(cy+1)*scale, col)
				}
			}
		}
		x += 6 * scale
	}
}

func textWidth(s string, scale int) int { return len([]rune(s)) * 6 * scale }

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v < 0:
		return -1
	case v > 0:
		return 1
	}
	return 0
}
