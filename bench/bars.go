package bench

import (
	"fmt"
	"image"
	"image/color"
	"math"
	"strings"
)

// Bar chart layout, in pixels.
const (
	barH      = 26 // a bar's height
	barGap    = 10 // between two bars
	barLen    = 520
	barPadR   = 240 // room for the value after the longest bar
	barPadTop = 70  // a panel's title and x tick labels
)

var (
	limitGray     = color.RGBA{35, 35, 35, 255}
	kstreamsColor = color.RGBA{230, 159, 0, 255}
)

// singleInterval says every row of results was run at one checkpoint
// interval: records/s against the interval would be points, not lines.
func singleInterval(results []*Results) bool {
	iv := math.NaN()
	for _, r := range results {
		for _, row := range r.Rows {
			if row.Arm == "limit" || row.Arm == "copy" || row.Arm == "copy-rc" || strings.HasPrefix(row.Arm, "kstreams-") {
				continue // their rows carry the interval of the round, not of a commit
			}
			if !math.IsNaN(iv) && row.IntervalS != iv {
				return false
			}
			iv = row.IntervalS
		}
	}
	return true
}

// barColor is an arm's bar colour: the limit dark gray, Kafka Streams
// orange, the pipeline's arms their line colour (blue if they have none).
func barColor(arm string) color.RGBA {
	switch {
	case arm == "limit":
		return limitGray
	case strings.HasPrefix(arm, "kstreams-"):
		return kstreamsColor
	}
	if c, ok := armColors[arm]; ok {
		return c
	}
	return armColors["pass"]
}

// Bars draws records/s per arm as horizontal bars, one row of panels per
// result, one panel per record size and partition count in it, arms in ArmNames
// order, the limit at the top, each bar labelled with its records/s and
// its ratio to the limit. A failed arm gets no bar but FAILED.
func Bars(results []*Results) *image.RGBA {
	_, rounds := groupsOf(results)
	cols := 1
	for _, r := range results {
		g, _ := groupsOf([]*Results{r})
		cols = max(cols, len(g))
	}
	arms := make([][]string, len(results)) // each result's, in ArmNames order
	most := 0
	for i, r := range results {
		for _, name := range ArmNames {
			if anyArm([]*Results{r}, name) {
				arms[i] = append(arms[i], name)
			}
		}
		most = max(most, len(arms[i]))
	}
	labelW := 0
	for _, as := range arms {
		for _, a := range as {
			labelW = max(labelW, textWidth(a, textScale))
		}
	}
	labelW += 20
	title := fmt.Sprintf("Throughput per arm: records/s, median of %d rounds", rounds)
	sub := "gray: the limit (the fastest plain copy); orange: Kafka Streams; colours: the pipeline"
	cellW := labelW + barLen + barPadR
	cellH := barPadTop + most*(barH+barGap) + 20
	w := max(cols*cellW+20, textWidth(title, 3)+40, textWidth(sub, textScale)+40)
	h := plotBanner + max(1, len(results))*cellH
	c := &canvas{image.NewRGBA(image.Rect(0, 0, w, h))}
	c.fill(0, 0, w, h, white)
	c.text(20, 14, title, black, 3)
	c.text(20, 44, sub, textGray, textScale)
	for i, res := range results {
		groups, _ := groupsOf([]*Results{res})
		for j, g := range groups {
			c.barPanel(10+j*cellW, plotBanner+i*cellH, labelW, res, g, arms[i])
		}
	}
	return c.img
}

func (c *canvas) barPanel(ox, oy, labelW int, res *Results, g group, arms []string) {
	rows := map[string]Row{}
	top := 0.0
	for _, r := range res.Rows {
		if r.Size == g.size && r.Partitions == g.parts {
			rows[r.Arm] = r
			if r.Failed == "" {
				top = max(top, r.RecordsPerSec)
			}
		}
	}
	c.text(ox, oy, fmt.Sprintf("%s: %d B, %d partition%s", res.Broker, g.size, g.parts, plural(g.parts)), black, textScale)
	step, xmax := NiceTicks(top)
	x0 := ox + labelW
	xpix := func(v float64) int { return x0 + int(math.Round(v/xmax*barLen)) }
	y0, y1 := oy+barPadTop-8, oy+barPadTop+len(arms)*(barH+barGap)
	for v := 0.0; v <= xmax+step/2; v += step {
		x := xpix(v)
		c.line(x, y0, x, y1, gridGray, 1, false)
		lbl := TickLabel(v)
		c.text(x-textWidth(lbl, textScale)/2, oy+30, lbl, textGray, textScale)
	}
	c.line(x0, y0, x0, y1, black, 2, false)
	for k, arm := range arms {
		y := oy + barPadTop + k*(barH+barGap)
		c.text(ox, y+barH/2-7, arm, black, textScale)
		r, ok := rows[arm]
		if !ok {
			continue
		}
		if r.Failed != "" || r.RecordsPerSec <= 0 {
			c.text(x0+8, y+barH/2-7, "FAILED", black, textScale)
			continue
		}
		x := xpix(r.RecordsPerSec)
		c.fill(x0+1, y, x, y+barH, barColor(arm))
		lbl := TickLabel(math.Round(r.RecordsPerSec/1e4) * 1e4)
		if arm != "limit" && r.LimitRatio > 0 && !math.IsNaN(r.LimitRatio) {
			lbl += fmt.Sprintf(", %.2fx limit", r.LimitRatio)
		}
		c.text(x+8, y+barH/2-7, lbl, textGray, textScale)
	}
}
