package bench

import (
	"encoding/csv"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Series is one line of a panel.
type Series struct {
	Label string
	Color color.RGBA
	X, Y  []float64
}

// Panel is one plot of a chart; the panels of a chart share their axes.
type Panel struct {
	Title  string
	Series []Series
}

// Chart is a line chart of one or more panels side by side, drawn with the
// standard library only.
type Chart struct {
	Width, Height  int
	Title          string
	Footer         string
	XLabel, YLabel string
	XMin, XMax     float64
	XTicks         []float64
	XTickLabel     func(float64) string
	// YMax is the top of the y axis; 0 picks a round number above the data
	// and HLine. The y axis starts at 0.
	YMax float64
	// HLine, if > 0, is drawn dashed across every panel, labelled HLineLabel.
	HLine      float64
	HLineLabel string
	Panels     []Panel
}

// Palette of the chart.
var (
	colBackground = color.RGBA{255, 255, 255, 255}
	colText       = color.RGBA{20, 20, 20, 255}
	colAxis       = color.RGBA{60, 60, 60, 255}
	colGrid       = color.RGBA{225, 225, 225, 255}
	colTarget     = color.RGBA{200, 30, 30, 255}
	// SeriesColors are distinct for up to 6 series.
	SeriesColors = []color.RGBA{
		{31, 119, 180, 255},  // blue
		{255, 127, 14, 255},  // orange
		{44, 160, 44, 255},   // green
		{148, 103, 189, 255}, // purple
		{140, 86, 75, 255},   // brown
		{23, 190, 207, 255},  // cyan
	}
)

// NiceCeil returns the smallest of 1, 2, 2.5, 5 times a power of ten that is
// >= v (v > 0): a round step between ticks.
func NiceCeil(v float64) float64 { return ceilOf(v, []float64{1, 2, 2.5, 5, 10}) }

// NiceTop returns the smallest of 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 times a
// power of ten that is >= v (v > 0): a round top for an axis.
func NiceTop(v float64) float64 {
	return ceilOf(v, []float64{1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10})
}

func ceilOf(v float64, mults []float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range mults {
		if m*p >= v*(1-1e-12) {
			return m * p
		}
	}
	return 10 * p
}

// Draw renders the chart.
func (c Chart) Draw() (*image.RGBA, error) {
	if c.Width < 200 || c.Height < 200 {
		return nil, fmt.Errorf("chart: %dx%d is too small", c.Width, c.Height)
	}
	if len(c.Panels) == 0 {
		return nil, errors.New("chart: no panels")
	}
	if !(c.XMax > c.XMin) {
		return nil, fmt.Errorf("chart: x range [%g, %g] is empty", c.XMin, c.XMax)
	}
	ymax := c.YMax
	if ymax <= 0 {
		top := c.HLine
		for _, p := range c.Panels {
			for _, s := range p.Series {
				if len(s.X) != len(s.Y) {
					return nil, fmt.Errorf("chart: series %q has %d x and %d y", s.Label, len(s.X), len(s.Y))
				}
				for _, y := range s.Y {
					top = max(top, y)
				}
			}
		}
		ymax = NiceTop(top * 1.08)
	}
	step := NiceCeil(ymax / 6)
	xlabel := c.XTickLabel
	if xlabel == nil {
		xlabel = func(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }
	}

	img := image.NewRGBA(image.Rect(0, 0, c.Width, c.Height))
	draw.Draw(img, img.Bounds(), &image.Uniform{colBackground}, image.Point{}, draw.Src)

	const scale, small = 2, 2
	top := 16
	DrawText(img, (c.Width-TextWidth(c.Title, 3))/2, top, c.Title, 3, colText)
	top += TextHeight(3) + 22

	legendH := TextHeight(small) + 24
	footerH := 0
	if c.Footer != "" {
		footerH = TextHeight(1) + 14
	}
	// Below the plot: tick labels, x label, legend, footer.
	bottom := c.Height - legendH - footerH - 2*TextHeight(small) - 44
	panelW := (c.Width - 20) / len(c.Panels)
	for i, p := range c.Panels {
		x0 := 10 + i*panelW
		left := x0 + TextWidth("0000", small) + 20
		right := x0 + panelW - 20
		ptop := top + 2*(TextHeight(small)+14)
		DrawText(img, (left+right-TextWidth(p.Title, scale))/2, top, p.Title, scale, colText)
		px := func(x float64) int {
			return left + int(math.Round((x-c.XMin)/(c.XMax-c.XMin)*float64(right-left)))
		}
		py := func(y float64) int {
			return bottom - int(math.Round(y/ymax*float64(bottom-ptop)))
		}
		// Grid and y ticks.
		for y := 0.0; y <= ymax*(1+1e-9); y += step {
			yy := py(y)
			hline(img, left, right, yy, colGrid)
			lab := strconv.FormatFloat(y, 'f', -1, 64)
			DrawText(img, left-8-TextWidth(lab, small), yy-TextHeight(small)/2, lab, small, colText)
		}
		for _, x := range c.XTicks {
			xx := px(x)
			vline(img, xx, ptop, bottom, colGrid)
			vline(img, xx, bottom, bottom+6, colAxis)
			lab := xlabel(x)
			DrawText(img, xx-TextWidth(lab, small)/2, bottom+12, lab, small, colText)
		}
		// Axes.
		vline(img, left, ptop, bottom, colAxis)
		hline(img, left, right, bottom, colAxis)
		if c.YLabel != "" {
			DrawText(img, x0+4, ptop-TextHeight(small)-12, c.YLabel, small, colText)
		}
		if c.XLabel != "" {
			DrawText(img, (left+right-TextWidth(c.XLabel, small))/2, bottom+24+TextHeight(small), c.XLabel, small, colText)
		}
		// Target line.
		if c.HLine > 0 && c.HLine <= ymax {
			yy := py(c.HLine)
			for x := left; x < right; x += 14 {
				for t := -1; t <= 0; t++ {
					hline(img, x, min(x+8, right), yy+t, colTarget)
				}
			}
			if c.HLineLabel != "" {
				DrawText(img, right-TextWidth(c.HLineLabel, small)-4, yy-TextHeight(small)-6, c.HLineLabel, small, colTarget)
			}
		}
		// Series.
		for _, s := range p.Series {
			for k := 1; k < len(s.X); k++ {
				thickLine(img, px(s.X[k-1]), py(s.Y[k-1]), px(s.X[k]), py(s.Y[k]), s.Color)
			}
			for k := range s.X {
				square(img, px(s.X[k]), py(s.Y[k]), 4, s.Color)
			}
		}
	}
	// Legend: the series of the first panel.
	ly := c.Height - legendH - footerH
	var items []Series
	items = append(items, c.Panels[0].Series...)
	total := 0
	for _, s := range items {
		total += 14 + 8 + TextWidth(s.Label, small) + 30
	}
	x := (c.Width - total) / 2
	for _, s := range items {
		square(img, x+7, ly+TextHeight(small)/2, 7, s.Color)
		x += 22
		DrawText(img, x, ly, s.Label, small, colText)
		x += TextWidth(s.Label, small) + 30
	}
	if c.Footer != "" {
		DrawText(img, (c.Width-TextWidth(c.Footer, 1))/2, c.Height-TextHeight(1)-8, c.Footer, 1, colAxis)
	}
	return img, nil
}

func hline(img *image.RGBA, x0, x1, y int, c color.RGBA) {
	for x := x0; x <= x1; x++ {
		img.SetRGBA(x, y, c)
	}
}

func vline(img *image.RGBA, x, y0, y1 int, c color.RGBA) {
	for y := y0; y <= y1; y++ {
		img.SetRGBA(x, y, c)
	}
}

func square(img *image.RGBA, cx, cy, r int, c color.RGBA) {
	for y := cy - r; y <= cy+r; y++ {
		for x := cx - r; x <= cx+r; x++ {
			img.SetRGBA(x, y, c)
		}
	}
}

// thickLine draws a 3-pixel line (Bresenham, widened).
func thickLine(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	err := dx + dy
	for {
		square(img, x0, y0, 1, c)
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * err
		if e2 >= dy {
			err += dy
			x0 += sx
		}
		if e2 <= dx {
			err += dx
			y0 += sy
		}
	}
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

// WritePNG encodes img as PNG.
func WritePNG(w io.Writer, img image.Image) error { return png.Encode(w, img) }

// sweepHeader is the CSV header of the sweep.
var sweepHeader = []string{"key", "batch", "dup_pct", "records", "seconds", "records_per_s", "ns_per_record", "trials_ns_per_record"}

// WriteSweepCSV writes the sweep points as CSV with a header line.
func WriteSweepCSV(w io.Writer, pts []SweepPoint) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(sweepHeader); err != nil {
		return err
	}
	for _, p := range pts {
		if err := cw.Write([]string{
			p.Key, strconv.Itoa(p.Batch), strconv.Itoa(p.DupPct), strconv.FormatInt(p.Records, 10),
			strconv.FormatFloat(p.Seconds, 'f', 6, 64),
			strconv.FormatFloat(p.RecordsPerSecond(), 'f', 0, 64),
			strconv.FormatFloat(p.NsPerRecord(), 'f', 1, 64),
			formatTrials(p.TrialNs),
		}); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

func formatTrials(ns []float64) string {
	parts := make([]string, len(ns))
	for i, v := range ns {
		parts[i] = strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strings.Join(parts, " ")
}

// ReadSweepCSV reads what WriteSweepCSV wrote (the derived columns are
// recomputed from records and seconds).
func ReadSweepCSV(r io.Reader) ([]SweepPoint, error) {
	recs, err := csv.NewReader(r).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 || !slices.Equal(recs[0], sweepHeader) {
		return nil, fmt.Errorf("sweep csv: want header %v", sweepHeader)
	}
	var pts []SweepPoint
	for i, rec := range recs[1:] {
		var p SweepPoint
		var err1, err2, err3, err4 error
		p.Key = rec[0]
		p.Batch, err1 = strconv.Atoi(rec[1])
		p.DupPct, err2 = strconv.Atoi(rec[2])
		p.Records, err3 = strconv.ParseInt(rec[3], 10, 64)
		p.Seconds, err4 = strconv.ParseFloat(rec[4], 64)
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			return nil, fmt.Errorf("sweep csv line %d: %w", i+2, err)
		}
		if p.Records <= 0 || p.Seconds <= 0 {
			return nil, fmt.Errorf("sweep csv line %d: records and seconds must be > 0", i+2)
		}
		for _, f := range strings.Fields(rec[7]) {
			v, err := strconv.ParseFloat(f, 64)
			if err != nil {
				return nil, fmt.Errorf("sweep csv line %d: trials: %w", i+2, err)
			}
			p.TrialNs = append(p.TrialNs, v)
		}
		pts = append(pts, p)
	}
	return pts, nil
}

// SweepChart is the chart of a sweep: one panel per key mode, throughput
// (million records/s) against duplicate ratio, one line per batch size,
// and the target as a dashed line.
func SweepChart(pts []SweepPoint, targetPerSecond float64, footer string) Chart {
	var keys []string
	var batches []int
	var dups []float64
	for _, p := range pts {
		if !slices.Contains(keys, p.Key) {
			keys = append(keys, p.Key)
		}
		if !slices.Contains(batches, p.Batch) {
			batches = append(batches, p.Batch)
		}
		if !slices.Contains(dups, float64(p.DupPct)) {
			dups = append(dups, float64(p.DupPct))
		}
	}
	slices.Sort(batches)
	slices.Sort(dups)
	c := Chart{
		Width: 1400, Height: 640,
		Title:      "DEDUP PROCESSOR, LOCAL TIER, ONE CORE: THROUGHPUT VS DUPLICATE RATIO",
		Footer:     footer,
		XLabel:     "DUPLICATES (% OF RECORDS)",
		YLabel:     "MILLION RECORDS/S",
		XMin:       0,
		XMax:       100,
		XTicks:     dups,
		XTickLabel: func(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) + "%" },
		HLine:      targetPerSecond / 1e6,
		HLineLabel: fmt.Sprintf("TARGET %s RECORDS/S (%.0f NS/RECORD)", strings.TrimSuffix(strings.TrimSuffix(Rate(targetPerSecond), ".00M"), "M")+"M", 1e9/targetPerSecond),
	}
	if len(dups) > 0 {
		c.XMax = max(dups[len(dups)-1]+5, 10)
	}
	for _, k := range keys {
		title := "KEY: " + k
		if k == KeyContent {
			title = "KEY: WHOLE CONTENT (DEFAULT)"
		} else if k == KeyEventID {
			title = `KEY: ATTRIBUTES["EVENT.ID"]`
		}
		panel := Panel{Title: title}
		for i, b := range batches {
			s := Series{Label: "BATCH " + strconv.Itoa(b), Color: SeriesColors[i%len(SeriesColors)]}
			for _, p := range pts {
				if p.Key == k && p.Batch == b {
					s.X = append(s.X, float64(p.DupPct))
					s.Y = append(s.Y, p.RecordsPerSecond()/1e6)
				}
			}
			panel.Series = append(panel.Series, s)
		}
		c.Panels = append(c.Panels, panel)
	}
	return c
}
