package main

import (
	"fmt"
	"math"
	"strings"
	"unicode/utf8"
)

// Verdict is how a measured figure compares with its target.
type Verdict string

const (
	Met    Verdict = "met"
	NotMet Verdict = "NOT MET"
	// Info marks a figure reported for context, with no target of its own.
	Info Verdict = "-"
	// Failed marks a figure that could not be measured; the row's Measured
	// says why.
	Failed Verdict = "NOT MEASURED"
)

// Check returns Met if ok, NotMet otherwise.
func Check(ok bool) Verdict {
	if ok {
		return Met
	}
	return NotMet
}

// Row is one line of the targets table.
type Row struct {
	Target   string // the target number, "1".."4"
	Figure   string
	Measured string
	Goal     string
	Verdict  Verdict
}

// FormatTable renders rows as a Markdown table whose columns are padded to
// line up, so that it reads the same in a terminal and in BENCHMARKS.md.
func FormatTable(rows []Row) string {
	header := []string{"#", "figure", "measured", "target", "result"}
	cells := make([][]string, 0, len(rows)+1)
	cells = append(cells, header)
	for _, r := range rows {
		cells = append(cells, []string{r.Target, r.Figure, r.Measured, r.Goal, string(r.Verdict)})
	}
	width := make([]int, len(header))
	for _, row := range cells {
		for i, c := range row {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	line := func(row []string) {
		b.WriteString("|")
		for i, c := range row {
			b.WriteString(" ")
			b.WriteString(c)
			b.WriteString(strings.Repeat(" ", width[i]-utf8.RuneCountInString(c)))
			b.WriteString(" |")
		}
		b.WriteString("\n")
	}
	line(cells[0])
	b.WriteString("|")
	for _, w := range width {
		b.WriteString(strings.Repeat("-", w+2))
		b.WriteString("|")
	}
	b.WriteString("\n")
	for _, row := range cells[1:] {
		line(row)
	}
	return b.String()
}

// Summary counts the verdicts: "5 met, 2 not met, 0 not measured".
func Summary(rows []Row) string {
	var met, not, failed int
	for _, r := range rows {
		switch r.Verdict {
		case Met:
			met++
		case NotMet:
			not++
		case Failed:
			failed++
		}
	}
	return fmt.Sprintf("%d met, %d not met, %d not measured", met, not, failed)
}

// Rate formats a per-second rate with an SI prefix and 3 significant
// digits: 2.51M, 403k, 950.
func Rate(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e6:
		return sig3(v/1e6) + "M"
	case a >= 1e3:
		return sig3(v/1e3) + "k"
	default:
		return sig3(v)
	}
}

// sig3 formats v with 3 significant digits and no exponent.
func sig3(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// MiB formats bytes in MiB with one decimal.
func MiB(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
