package main

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"slices"
	"sort"
	"strings"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Plot geometry, in pixels.
const (
	plotW, plotH                       = 1000, 560
	marginL, marginR, marginT, marginB = 70, 250, 50, 60
	innerW, innerH                     = plotW - marginL - marginR, plotH - marginT - marginB
	legendX                            = plotW - marginR + 20
)

// seriesColors tell the libraries apart (as many as the hot-lock
// scenario has); dlock is first.
var seriesColors = []color.RGBA{
	{0xd6, 0x27, 0x28, 0xff}, // red
	{0x1f, 0x77, 0xb4, 0xff}, // blue
	{0x2c, 0xa0, 0x2c, 0xff}, // green
	{0xff, 0x7f, 0x0e, 0xff}, // orange
	{0x94, 0x67, 0xbd, 0xff}, // purple
	{0x8c, 0x56, 0x4b, 0xff}, // brown
	{0x17, 0xbe, 0xcf, 0xff}, // cyan
	{0xe3, 0x77, 0xc2, 0xff}, // pink
	{0x7f, 0x7f, 0x7f, 0xff}, // grey
	{0xbc, 0xbd, 0x22, 0xff}, // olive
	{0x00, 0x33, 0x80, 0xff}, // navy
	{0x00, 0x80, 0x60, 0xff}, // teal
}

// plotWaits draws, for each library's hot-lock run, the cumulative
// distribution of its waits on a logarithmic time axis, and writes it as a
// PNG to path.
func plotWaits(path string, runs []*hotResult) error {
	img := image.NewRGBA(image.Rect(0, 0, plotW, plotH))
	fill(img, img.Bounds(), color.RGBA{0xff, 0xff, 0xff, 0xff})

	// The x axis spans whole decades around every wait.
	lo, hi := math.Inf(1), 0.0
	for _, r := range runs {
		for _, v := range r.Waits {
			if v > 0 {
				lo, hi = math.Min(lo, float64(v)), math.Max(hi, float64(v))
			}
		}
	}
	if hi == 0 {
		return fmt.Errorf("bench: no waits to plot")
	}
	loDec, hiDec := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if hiDec == loDec {
		hiDec++
	}
	xOf := func(ns float64) int {
		return marginL + int(math.Round((math.Log10(ns)-loDec)/(hiDec-loDec)*innerW))
	}
	yOf := func(frac float64) int { return marginT + innerH - int(math.Round(frac*innerH)) }

	grid := color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
	minor := color.RGBA{0xf0, 0xf0, 0xf0, 0xff}
	black := color.RGBA{0, 0, 0, 0xff}
	for dec := loDec; dec <= hiDec; dec++ {
		if dec < hiDec {
			for m := 2.0; m < 10; m++ {
				x := xOf(m * math.Pow(10, dec))
				line(img, x, marginT, x, marginT+innerH, minor, 1)
			}
		}
		x := xOf(math.Pow(10, dec))
		line(img, x, marginT, x, marginT+innerH, grid, 1)
		label := decadeLabel(int(dec))
		text(img, x-len(label)*7/2, marginT+innerH+18, label, black)
	}
	for q := 0; q <= 4; q++ {
		y := yOf(float64(q) / 4)
		line(img, marginL, y, marginL+innerW, y, grid, 1)
		label := fmt.Sprintf("%d%%", q*25)
		text(img, marginL-8-len(label)*7, y+4, label, black)
	}
	line(img, marginL, marginT+innerH, marginL+innerW, marginT+innerH, black, 1)
	line(img, marginL, marginT, marginL, marginT+innerH, black, 1)
	text(img, marginL, 22, "Hot lock: wait for Lock, cumulative share of acquisitions (log time axis)", black)
	text(img, marginL+innerW/2-60, plotH-18, "wait (Lock call to return)", black)

	for i, r := range runs {
		c := seriesColors[i%len(seriesColors)]
		s := slices.Clone(r.Waits)
		slices.Sort(s)
		if len(s) == 0 {
			continue
		}
		px, py := -1, -1
		for x := marginL; x <= marginL+innerW; x++ {
			v := math.Pow(10, loDec+float64(x-marginL)/innerW*(hiDec-loDec))
			n := sort.Search(len(s), func(k int) bool { return float64(s[k]) > v })
			y := yOf(float64(n) / float64(len(s)))
			if px >= 0 {
				line(img, px, py, x, y, c, 2)
			}
			px, py = x, y
		}
		ly := marginT + 10 + i*36
		fill(img, image.Rect(legendX, ly-4, legendX+24, ly), c)
		text(img, legendX+32, ly+2, r.Lib, black)
		text(img, legendX+32, ly+16, strings.ReplaceAll(fmt.Sprintf("p50 %s, p99 %s", fmtDur(r.Wait.P50), fmtDur(r.Wait.P99)), "µ", "u"), color.RGBA{0x55, 0x55, 0x55, 0xff})
	}

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// decadeLabel names 10^dec nanoseconds.
func decadeLabel(dec int) string {
	units := []string{"ns", "us", "ms", "s"} // basicfont has no µ
	u := min(dec/3, len(units)-1)
	return fmt.Sprintf("%d %s", int(math.Pow(10, float64(dec-3*u))), units[u])
}

func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			img.SetRGBA(x, y, c)
		}
	}
}

// line draws from (x0, y0) to (x1, y1) with Bresenham's algorithm, w
// pixels wide.
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA, w int) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for {
		fill(img, image.Rect(x0, y0, x0+w, y0+w), c)
		if x0 == x1 && y0 == y1 {
			return
		}
		if 2*e >= dy {
			e += dy
			x0 += sx
		}
		if 2*e <= dx {
			e += dx
			y0 += sy
		}
	}
}

func text(img *image.RGBA, x, y int, s string, c color.RGBA) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

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
