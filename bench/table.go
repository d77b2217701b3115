package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// FormatTable writes the rows of one configuration as a Markdown table
// under a heading.
func FormatTable(w io.Writer, heading string, rows []Row) {
	fmt.Fprintf(w, "%s\n\n", heading)
	// Ratios to the limit arm when it ran, else to the copy; and to Kafka
	// Streams when it ran.
	base, ratio := "× copy", func(r Row) float64 { return r.Ratio }
	var ks bool
	for _, r := range rows {
		if r.Arm == "limit" {
			base, ratio = "× limit", func(r Row) float64 { return r.LimitRatio }
		}
		ks = ks || r.KStreamsRatio > 0 // NaN or unset: none
	}
	head := []string{"arm", "records/s", "±", "MB/s", base, "CPU s/M rec", "tx/s", "sent/s", "p50 ms", "p99 ms", "max ms", "peak RSS MB"}
	if ks {
		head = append(head, "× Kafka Streams")
	}
	t := [][]string{append(head, "gate")}
	for _, r := range rows {
		if r.Failed != "" {
			line := make([]string, len(head)+1)
			line[0], line[1], line[len(head)] = r.Arm, "FAILED", "FAILED: "+r.Failed
			t = append(t, line)
			continue
		}
		lat := []string{"–", "–", "–", "–"}
		if r.Latency {
			lat = []string{thousands(r.Achieved), fmtMs(r.P50Ms), fmtMs(r.P99Ms), fmtMs(r.MaxMs)}
		}
		tx := "–"
		if r.TxPerSec > 0 {
			tx = strconv.FormatFloat(r.TxPerSec, 'f', 1, 64)
		}
		line := append(append([]string{
			r.Arm,
			thousands(r.RecordsPerSec),
			fmt.Sprintf("%.0f%%", r.SpreadPct),
			strconv.FormatFloat(r.MBPerSec, 'f', 1, 64),
			fmtRatio(ratio(r)),
			strconv.FormatFloat(r.CPUPerM, 'f', 1, 64),
			tx,
		}, lat...), fmt.Sprintf("%.0f", r.PeakRSSMB))
		if ks {
			line = append(line, fmtRatio(r.KStreamsRatio))
		}
		t = append(t, append(line, "ok"))
	}
	writeMarkdown(w, t, "l"+strings.Repeat("r", len(head)-1)+"l")
}

// FormatRatios writes one line per configuration with every arm's
// records/s relative to the copy arm of the same rounds, the pipeline
// pass-through relative to the peer at the same cadence, and the arms of
// passRatioArms relative to the pass-through at the same cadence (all
// medians of per-round ratios).
func FormatRatios(w io.Writer, arms []string, rows []Row) {
	head := []string{"size", "partitions", "interval"}
	base, ratio := baseArm(arms), func(r Row) float64 { return r.Ratio }
	if base == "limit" {
		ratio = func(r Row) float64 { return r.LimitRatio }
	}
	for _, a := range arms {
		if a != base {
			head = append(head, a+" × "+base)
		}
	}
	head = append(head, "pass ÷ peer")
	var toKS []string
	for _, a := range arms {
		if ks, ok := KStreamsOf[a]; ok && slices.Contains(arms, ks) {
			toKS = append(toKS, a)
			head = append(head, a+" ÷ "+ks)
		}
	}
	var toPass []string
	for _, a := range arms {
		if slices.Contains(passRatioArms, a) {
			toPass = append(toPass, a)
			head = append(head, a+" ÷ pass")
		}
	}
	t := [][]string{head}
	align := strings.Repeat("r", len(head))
	type key struct {
		size, parts int
		iv          float64
	}
	var order []key
	byKey := map[key]map[string]Row{}
	for _, r := range rows {
		k := key{r.Size, r.Partitions, r.IntervalS}
		if byKey[k] == nil {
			byKey[k] = map[string]Row{}
			order = append(order, k)
		}
		byKey[k][r.Arm] = r
	}
	for _, k := range order {
		m := byKey[k]
		line := []string{fmt.Sprintf("%d B", k.size), strconv.Itoa(k.parts), fmtInterval(time.Duration(k.iv * float64(time.Second)))}
		// cell is arm a's ratio f, or why there is none.
		cell := func(a string, f func(Row) float64) string {
			r, ok := m[a]
			switch {
			case !ok:
				return "–"
			case r.Failed != "":
				return "FAILED"
			}
			return fmtRatio(f(r))
		}
		for _, a := range arms {
			if a != base {
				line = append(line, cell(a, ratio))
			}
		}
		if pass, ok := m["pass"]; ok && pass.Failed == "" {
			line = append(line, fmtRatio(pass.PeerRatio))
		} else {
			line = append(line, "–")
		}
		for _, a := range toKS {
			line = append(line, cell(a, func(r Row) float64 { return r.KStreamsRatio }))
		}
		for _, a := range toPass {
			line = append(line, cell(a, func(r Row) float64 { return r.PassRatio }))
		}
		t = append(t, line)
	}
	writeMarkdown(w, t, align)
}

// passRatioArms are the arms the ratio table also compares with the
// pass-through: what a step costs over the pipeline that only copies.
var passRatioArms = []string{"filter-map", "keyed-count", "keyed-count-cp", "windowed-count"}

// writeMarkdown writes t (a header row and data rows) as a Markdown table
// with padded columns; align holds l or r per column.
func writeMarkdown(w io.Writer, t [][]string, align string) {
	widths := make([]int, len(t[0]))
	for _, row := range t {
		for i, c := range row {
			widths[i] = max(widths[i], len([]rune(c)), 3)
		}
	}
	line := func(row []string) {
		var b strings.Builder
		b.WriteString("|")
		for i, c := range row {
			pad := strings.Repeat(" ", widths[i]-len([]rune(c)))
			if align[i] == 'r' {
				b.WriteString(" " + pad + c + " |")
			} else {
				b.WriteString(" " + c + pad + " |")
			}
		}
		fmt.Fprintln(w, b.String())
	}
	line(t[0])
	var b strings.Builder
	b.WriteString("|")
	for i, wd := range widths {
		if align[i] == 'r' {
			b.WriteString(" " + strings.Repeat("-", wd-1) + ": |")
		} else {
			b.WriteString(" " + strings.Repeat("-", wd) + " |")
		}
	}
	fmt.Fprintln(w, b.String())
	for _, row := range t[1:] {
		line(row)
	}
	fmt.Fprintln(w)
}

// thousands formats v rounded to a whole number with comma separators.
func thousands(v float64) string {
	s := strconv.FormatInt(int64(math.Round(v)), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func fmtRatio(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// fmtMs shows milliseconds with one decimal below 10 ms, whole above.
func fmtMs(v float64) string {
	if v < 10 {
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return thousands(v)
}
