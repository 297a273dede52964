package bench

import (
	"encoding/csv"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// sweepHeader is the CSV header of the sweep.
var sweepHeader = []string{"key", "batch", "dup_pct", "records", "seconds", "records_per_s", "ns_per_record", "trials_ns_per_record"}

// WriteSweepCSV writes the sweep points as CSV with a header line, every
// trial included.
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

// FormatSweep is the sweep as a Markdown table: one row per key and batch
// size, one column per duplicate ratio, each cell the median ns per record
// (and records/s). A point the sweep did not reach is "-".
func FormatSweep(pts []SweepPoint) string {
	type row struct {
		key   string
		batch int
	}
	var rows []row
	var dups []int
	cell := map[row]map[int]SweepPoint{}
	for _, p := range pts {
		r := row{p.Key, p.Batch}
		if cell[r] == nil {
			rows = append(rows, r)
			cell[r] = map[int]SweepPoint{}
		}
		cell[r][p.DupPct] = p
		if !slices.Contains(dups, p.DupPct) {
			dups = append(dups, p.DupPct)
		}
	}
	slices.Sort(dups)
	var b strings.Builder
	b.WriteString("| key | batch |")
	for _, d := range dups {
		fmt.Fprintf(&b, " %d%% duplicates |", d)
	}
	b.WriteString("\n| --- | ---: |")
	for range dups {
		b.WriteString(" ---: |")
	}
	b.WriteString("\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d |", r.key, r.batch)
		for _, d := range dups {
			p, ok := cell[r][d]
			if !ok {
				b.WriteString(" - |")
				continue
			}
			fmt.Fprintf(&b, " %.0f ns (%s/s) |", p.NsPerRecord(), Rate(p.RecordsPerSecond()))
		}
		b.WriteString("\n")
	}
	return b.String()
}
