package bench

import (
	"bytes"
	"image/color"
	"image/png"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestGlyphs(t *testing.T) {
	for r, g := range glyphs {
		for i, row := range g {
			if len(row) != glyphW || strings.Trim(row, ".#") != "" {
				t.Errorf("glyph %q row %d = %q: want %d of '.' and '#'", r, i, row, glyphW)
			}
		}
	}
	// Every character the chart writes has a glyph (lower case as upper).
	for _, s := range []string{
		"DEDUP PROCESSOR, LOCAL TIER, ONE CORE: THROUGHPUT VS DUPLICATE RATIO",
		`KEY: ATTRIBUTES["EVENT.ID"]`, "duplicates (% of records)", "TARGET 5M RECORDS/S (200 NS/RECORD)",
		"0123456789", "batch 10000", "10^6 keys; go1.26.8 = 2.5",
	} {
		for _, r := range s {
			if !HasGlyph(r) {
				t.Errorf("no glyph for %q (in %q)", r, s)
			}
		}
	}
	if HasGlyph('€') {
		t.Error("HasGlyph('€')")
	}
	if TextWidth("AB", 2) != 22 || TextWidth("", 2) != 0 || TextHeight(3) != 21 {
		t.Errorf("TextWidth/TextHeight: %d %d %d", TextWidth("AB", 2), TextWidth("", 2), TextHeight(3))
	}
}

func TestNice(t *testing.T) {
	for v, want := range map[float64]float64{0.7: 1, 1: 1, 1.1: 2, 2.2: 2.5, 3: 5, 7: 10, 13: 20, 0.03: 0.05} {
		if got := NiceCeil(v); got != want {
			t.Errorf("NiceCeil(%v) = %v, want %v", v, got, want)
		}
	}
	for v, want := range map[float64]float64{5.4: 6, 4.3: 5, 1.1: 1.2, 7: 8, 9: 10, 0.33: 0.4} {
		if got := NiceTop(v); got != want {
			t.Errorf("NiceTop(%v) = %v, want %v", v, got, want)
		}
	}
}

func samplePoints() []SweepPoint {
	var pts []SweepPoint
	for _, k := range []string{KeyContent, KeyEventID} {
		for i, b := range []int{10, 100, 1000, 10000} {
			for j, d := range []int{0, 10, 30, 50, 90} {
				// records/s = (2 + i/2 + j/10) M
				rps := (2 + float64(i)/2 + float64(j)/10) * 1e6
				pts = append(pts, SweepPoint{Key: k, Batch: b, DupPct: d, Records: 1_000_000, Seconds: 1e6 / rps})
			}
		}
	}
	return pts
}

func TestSweepCSVRoundTrip(t *testing.T) {
	pts := samplePoints()[:2]
	pts[1].TrialNs = []float64{480.25, 476.19, 470}
	var buf bytes.Buffer
	if err := WriteSweepCSV(&buf, pts); err != nil {
		t.Fatal(err)
	}
	want := "key,batch,dup_pct,records,seconds,records_per_s,ns_per_record,trials_ns_per_record\n" +
		"content,10,0,1000000,0.500000,2000000,500.0,\n" +
		"content,10,10,1000000,0.476190,2100000,476.2,480.2 476.2 470.0\n"
	if buf.String() != want {
		t.Fatalf("csv\n%s\nwant\n%s", buf.String(), want)
	}
	got, err := ReadSweepCSV(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[1].Key != KeyContent || got[1].Batch != 10 || got[1].DupPct != 10 || got[1].Records != 1_000_000 || got[1].Seconds != 0.47619 ||
		!slices.Equal(got[1].TrialNs, []float64{480.2, 476.2, 470}) || got[0].TrialNs != nil {
		t.Fatalf("read back %+v", got)
	}
	const h = "key,batch,dup_pct,records,seconds,records_per_s,ns_per_record,trials_ns_per_record\n"
	for _, bad := range []string{"", "a,b\n", h + "content,x,0,1,1,1,1,\n", h + "content,10,0,1,0,1,1,\n", h + "content,10,0,1,1,1,1,fast\n"} {
		if _, err := ReadSweepCSV(strings.NewReader(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestSweepChartPNG(t *testing.T) {
	c := SweepChart(samplePoints(), 5e6, "footer 2026-11-22")
	if len(c.Panels) != 2 || len(c.Panels[0].Series) != 4 || len(c.Panels[0].Series[3].X) != 5 {
		t.Fatalf("chart shape: %d panels, %d series", len(c.Panels), len(c.Panels[0].Series))
	}
	if s := c.Panels[1].Series[2]; s.Label != "BATCH 1000" || math.Abs(s.Y[2]-3.2) > 1e-9 || s.X[4] != 90 {
		t.Fatalf("series %+v", s)
	}
	if c.HLine != 5 || c.HLineLabel != "TARGET 5M RECORDS/S (200 NS/RECORD)" {
		t.Fatalf("target line %v %q", c.HLine, c.HLineLabel)
	}
	img, err := c.Draw()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WritePNG(&buf, img); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(buf.Bytes(), []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatal("no PNG signature")
	}
	dec, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if b := dec.Bounds(); b.Dx() != 1400 || b.Dy() != 640 {
		t.Fatalf("size %v, want 1400x640", b)
	}
	count := map[color.RGBA]int{}
	for y := range 640 {
		for x := range 1400 {
			r, g, b, a := dec.At(x, y).RGBA()
			count[color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), uint8(a >> 8)}]++
		}
	}
	if count[colBackground] < 1400*640/2 {
		t.Errorf("background covers %d pixels, want most", count[colBackground])
	}
	for i, col := range SeriesColors[:4] {
		if count[col] < 500 {
			t.Errorf("series %d color %v: %d pixels, want its lines and markers", i, col, count[col])
		}
	}
	if count[colTarget] < 500 {
		t.Errorf("target color: %d pixels", count[colTarget])
	}
	if count[colText] < 1000 {
		t.Errorf("text color: %d pixels", count[colText])
	}
	if count[SeriesColors[4]] != 0 {
		t.Errorf("a fifth series color appears on a 4-series chart")
	}
}

func TestChartErrors(t *testing.T) {
	ok := Chart{Width: 400, Height: 300, XMin: 0, XMax: 1, Panels: []Panel{{Series: []Series{{X: []float64{0, 1}, Y: []float64{1, 2}}}}}}
	if _, err := ok.Draw(); err != nil {
		t.Fatalf("minimal chart: %v", err)
	}
	for name, c := range map[string]Chart{
		"small":     {Width: 100, Height: 300, XMax: 1, Panels: ok.Panels},
		"no panels": {Width: 400, Height: 300, XMax: 1},
		"empty x":   {Width: 400, Height: 300, XMin: 1, XMax: 1, Panels: ok.Panels},
		"ragged":    {Width: 400, Height: 300, XMax: 1, Panels: []Panel{{Series: []Series{{X: []float64{0}, Y: []float64{1, 2}}}}}},
	} {
		if _, err := c.Draw(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
