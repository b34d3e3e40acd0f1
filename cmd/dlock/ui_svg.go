package main

import (
	"cmp"
	"fmt"
	"html"
	"math"
	"strings"
)

// Charts and the deadlock graph are SVG drawn here, on the server: the
// page inserts them as they come, with no chart library. Every text from
// Redis is escaped. Colours are classes of style.css (the page's Content
// Security Policy allows no inline style).

const (
	chartW, chartH                   = 560, 190
	padL, padR, padT, padB           = 48, 12, 30, 26
	graphW, graphRowH, nodeW, nodeH  = 720, 180, 190, 46
	graphRadiusX, graphRadiusY       = 230, 80
	chartTicks                       = 4
	arrowGap                         = 6.0
	labelRunes                       = 28
	deadlockHint, noDeadlockGraphMsg = "each arrow: waits for a lock the next owner holds", "no deadlocks among the recorded waits"
)

// chartLine is one series of a chart: a CSS class and values (NaN: no
// point).
type chartLine struct {
	label, class string
	values       []float64
}

// chartSVG draws lines over histWindow with a y axis in unit.
func chartSVG(title, unit string, lines []chartLine) string {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="%s">`, chartW, chartH, html.EscapeString(title))
	fmt.Fprintf(&b, `<text class="chart-title" x="%d" y="16">%s</text>`, padL, html.EscapeString(title))
	top := niceCeil(maxOf(lines))
	plotW, plotH := float64(chartW-padL-padR), float64(chartH-padT-padB)
	for i := 0; i <= chartTicks; i++ {
		y := float64(padT) + plotH*float64(i)/chartTicks
		v := top * float64(chartTicks-i) / chartTicks
		fmt.Fprintf(&b, `<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/>`, padL, chartW-padR, y, y)
		fmt.Fprintf(&b, `<text class="tick" x="%d" y="%.1f" text-anchor="end">%s</text>`, padL-6, y+4, tickText(v, unit))
	}
	for i, l := range []string{"-15m", "-10m", "-5m", "now"} {
		x := float64(padL) + plotW*float64(i)/3
		fmt.Fprintf(&b, `<text class="tick" x="%.1f" y="%d" text-anchor="middle">%s</text>`, x, chartH-8, l)
	}
	for i, l := range lines {
		d := linePath(l.values, top, plotW, plotH)
		fmt.Fprintf(&b, `<path class="line %s" d="%s"/>`, l.class, d)
		if strings.Contains(d, "h0.01") {
			fmt.Fprintf(&b, `<path class="line dot %s" d="%s"/>`, l.class, d)
		}
		lx := chartW - padR - 70*(len(lines)-i)
		fmt.Fprintf(&b, `<rect class="swatch %s" x="%d" y="8" width="10" height="10" rx="2"/><text class="legend" x="%d" y="17">%s</text>`, l.class, lx, lx+14, html.EscapeString(l.label))
	}
	if maxOf(lines) == 0 {
		fmt.Fprintf(&b, `<text class="no-data" x="%.1f" y="%.1f" text-anchor="middle">nothing seen in the last 15 minutes</text>`, float64(padL)+plotW/2, float64(padT)+plotH/2)
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// linePath is the path of values scaled to a plot of w by h with top as
// its maximum; a NaN breaks the line.
func linePath(values []float64, top, w, h float64) string {
	var b strings.Builder
	pen := "M"
	step := w / float64(max(len(values)-1, 1))
	for i, v := range values {
		if math.IsNaN(v) {
			pen = "M"
			continue
		}
		x := float64(padL) + step*float64(i)
		y := float64(padT) + h - h*v/top
		fmt.Fprintf(&b, "%s%.1f %.1f ", pen, x, y)
		if pen == "M" && (i+1 == len(values) || math.IsNaN(values[i+1])) {
			// A lone point: a dot, the line's round caps at stroke
			// width 6 (see .line.dot in style.css).
			fmt.Fprintf(&b, "h0.01 ")
		}
		pen = "L"
	}
	return strings.TrimSpace(b.String())
}

func maxOf(lines []chartLine) float64 {
	m := 0.0
	for _, l := range lines {
		for _, v := range l.values {
			if !math.IsNaN(v) {
				m = max(m, v)
			}
		}
	}
	return m
}

// niceCeil is the smallest of 1, 2, 2.5, 5 times a power of ten at
// least v (1 for nothing).
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// tickText formats an axis value: "1.5/s", "250ms", "3.2s".
func tickText(v float64, unit string) string {
	if unit == "ms" && v >= 1000 {
		return trimZero(fmt.Sprintf("%.1f", v/1000)) + "s"
	}
	s := trimZero(fmt.Sprintf("%.2f", v))
	return s + unit
}

func trimZero(s string) string {
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// chartsSVG draws the two charts of series s, of the locks whose name
// starts with prefix.
func chartsSVG(s uiSeries, prefix string) (acqs, waits string) {
	of := ""
	if prefix != "" {
		of = " of " + shorten(prefix) + "*"
	}
	acqs = chartSVG(fmt.Sprintf("Acquisitions/s%s (%d in 15 min)", of, s.Total), "/s",
		[]chartLine{{"acq/s", "c-acq", s.Acqs}})
	waits = chartSVG(fmt.Sprintf("Fair-queue wait%s (%d waits in 15 min)", of, s.Waits), "ms",
		[]chartLine{{"p50", "c-p50", s.P50}, {"p90", "c-p90", s.P90}, {"p99", "c-p99", s.P99}})
	return acqs, waits
}

// deadlockSVG draws each wait-for cycle as a ring of owners, an arrow
// from each waiter to the owner that holds what it waits for, labelled
// with that lock; "" when there is none.
func deadlockSVG(cycles []deadlockJSON) string {
	if len(cycles) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="graph" viewBox="0 0 %d %d" role="img" aria-label="deadlock cycles">`, graphW, graphRowH*len(cycles))
	b.WriteString(`<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" markerHeight="8" orient="auto-start-reverse"><path class="arrowhead" d="M0 0L10 5L0 10z"/></marker></defs>`)
	for i, c := range cycles {
		drawCycle(&b, i, c)
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// drawCycle draws cycle number i in its row of the graph.
func drawCycle(b *strings.Builder, i int, c deadlockJSON) {
	n := len(c.Waits)
	cx, cy := float64(graphW)/2, float64(i*graphRowH)+graphRowH/2+10
	pos := make([][2]float64, n)
	for k := range c.Waits {
		a := -math.Pi/2 + 2*math.Pi*float64(k)/float64(n)
		if n == 2 {
			a = math.Pi * float64(k) // side by side
		}
		pos[k] = [2]float64{cx + graphRadiusX*math.Cos(a+math.Pi), cy + graphRadiusY*math.Sin(a+math.Pi)}
	}
	fmt.Fprintf(b, `<g class="deadlock-cycle" data-owners="%d">`, n)
	fmt.Fprintf(b, `<text class="cycle-title" x="12" y="%d">Cycle %d: %d owners (%s)</text>`, i*graphRowH+20, i+1, n, deadlockHint)
	for k, w := range c.Waits {
		drawEdge(b, pos[k], pos[(k+1)%n], w.Lock, n == 2 && k == 1)
	}
	for k, w := range c.Waits {
		drawNode(b, pos[k], w)
	}
	b.WriteString(`</g>`)
}

// drawEdge draws the arrow from owner box p to owner box q, labelled
// "waits for LOCK"; below the line when under (the second arrow of a
// pair, drawn as a curve).
func drawEdge(b *strings.Builder, p, q [2]float64, lock string, under bool) {
	from, to := boxEdge(p, q), boxEdge(q, p)
	mx, my := (from[0]+to[0])/2, (from[1]+to[1])/2
	bend := -38.0
	if under {
		bend = 38
	}
	fmt.Fprintf(b, `<path class="edge" d="M%.1f %.1f Q%.1f %.1f %.1f %.1f" marker-end="url(#arrow)"/>`, from[0], from[1], mx, my+bend*2, to[0], to[1])
	// The label clears the curve, whose apex is bend from the middle.
	fmt.Fprintf(b, `<text class="edge-label" x="%.1f" y="%.1f" text-anchor="middle">waits for %s</text>`, mx, my+bend*1.45+4, html.EscapeString(shorten(lock)))
}

// boxEdge is where the line from the centre p towards q leaves p's box.
func boxEdge(p, q [2]float64) [2]float64 {
	dx, dy := q[0]-p[0], q[1]-p[1]
	sx, sy := math.Inf(1), math.Inf(1)
	if dx != 0 {
		sx = (nodeW/2 + arrowGap) / math.Abs(dx)
	}
	if dy != 0 {
		sy = (nodeH/2 + arrowGap) / math.Abs(dy)
	}
	s := math.Min(sx, sy)
	return [2]float64{p[0] + dx*s, p[1] + dy*s}
}

// drawNode draws one owner: its process and its owner id.
func drawNode(b *strings.Builder, p [2]float64, w deadlockWaitJSON) {
	x, y := p[0]-nodeW/2, p[1]-nodeH/2
	who := w.Label
	if who == "" {
		who = w.Program
	}
	proc := unknownHolder
	if w.Host != "" {
		proc = fmt.Sprintf("%s pid %d", w.Host, w.PID)
	}
	fmt.Fprintf(b, `<rect class="node" x="%.1f" y="%.1f" width="%d" height="%d" rx="8"/>`, x, y, nodeW, nodeH)
	fmt.Fprintf(b, `<text class="node-title" x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, p[0], y+19, html.EscapeString(shorten(cmp.Or(who, shortOwner(w.Owner)))))
	fmt.Fprintf(b, `<text class="node-sub" x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, p[0], y+36, html.EscapeString(shorten(proc)))
}

// shorten cuts s to labelRunes runes for a label.
func shorten(s string) string {
	r := []rune(printable(s))
	if len(r) <= labelRunes {
		return string(r)
	}
	return string(r[:labelRunes-1]) + "…"
}
