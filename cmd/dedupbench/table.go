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
	Info   Verdict = "-"            // a figure reported for context, with no target of its own
	Failed Verdict = "NOT MEASURED" // the row's Measured says why
)

// Check returns Met if ok, NotMet otherwise.
func Check(ok bool) Verdict {
	if ok {
		return Met
	}
	return NotMet
}

// Row is one line of the targets table (BENCHMARKS.md#targets).
type Row struct {
	Target, Figure, Measured, Goal string
	Verdict                        Verdict
}

// targetRows builds the table; a figure not measured says which phase
// failed or did not run.
func targetRows(res *results) []Row {
	missing := func(target, fig, goal, phase string) Row {
		why := "phase " + phase + " not run"
		if e, ok := res.Errors[phase]; ok {
			why = "phase " + phase + " failed: " + strings.SplitN(e, "\n", 2)[0]
		}
		return Row{target, fig, why, goal, Failed}
	}
	cpu := func(r Run) float64 { return r.CPUPerRecord() }
	// A ratio is taken within each round, of a mode's figure over the
	// pass-through's; the row reports the median of those.
	ratioRow := func(target, mode string, dup int, fig string, bound float64, goal string) Row {
		var rs []float64
		var pass float64
		for _, r := range res.Runs[dup] {
			if r.Mode == ModePassThrough {
				pass = cpu(r)
			} else if r.Mode == mode && pass > 0 {
				rs = append(rs, cpu(r)/pass)
			}
		}
		mr, ok := Median(rs)
		if !ok {
			return missing(target, fig, goal, "e2e")
		}
		m, _ := median(res.Runs[dup], mode, cpu)
		p, _ := median(res.Runs[dup], ModePassThrough, cpu)
		return Row{target, fmt.Sprintf("%s; median of %d paired runs", fig, len(rs)),
			fmt.Sprintf("%.2fx (%.2f µs / %.2f µs)", mr, m*1e6, p*1e6), goal, Check(mr <= bound)}
	}
	rows := []Row{
		ratioRow("1", ModeLocal, 30, "collector CPU per record, local tier / pass-through, 30% copies", 1.00, "<= 1.00x"),
		ratioRow("1", ModeLocal, 30, "the same, stretch goal", 0.90, "<= 0.90x"),
		ratioRow("2", ModeLocal, 0, "collector CPU per record, local tier / pass-through, 0% copies", 1.08, "<= 1.08x"),
		ratioRow("3", ModeRedis, 30, "collector CPU per record, Redis tier / pass-through, 30% copies", 1.20, "<= 1.20x"),
	}
	const goal4 = "<= 150 ns/record, 0 allocs/record"
	for _, key := range []string{"content", "event.id"} {
		name := "BenchmarkConsumeLogs/cache=empty/key=" + key + "/batch=1000/dup=30%"
		fig := fmt.Sprintf("BenchmarkConsumeLogs, empty cache, key %s, batch 1000, 30%% copies, 1 core", key)
		ns, n, ok := MedianOf(res.GoBench, name, "ns/record")
		allocs, _, _ := MedianOf(res.GoBench, name, "allocs/op")
		if !ok {
			rows = append(rows, missing("4", fig, goal4, "gotest"))
			continue
		}
		rows = append(rows, Row{"4", fmt.Sprintf("%s; median of %d", fig, n),
			fmt.Sprintf("%.0f ns/record, %.3f allocs/record", ns, allocs/batch), goal4, Check(ns <= 150 && allocs/batch < 0.01)})
	}
	// Every record of the 0% runs is a key in the window: the median over
	// rounds of (local peak RSS - pass-through peak RSS) / keys.
	const figRSS = "peak RSS, local tier over the pass-through, per key in the window (0% copies: every record a key)"
	var perKey []float64
	var pass Run
	for _, r := range res.Runs[0] {
		if r.Mode == ModePassThrough {
			pass = r
		} else if r.Mode == ModeLocal && pass.Load.Unique > 0 {
			perKey = append(perKey, float64(r.PeakRSS-pass.PeakRSS)/float64(r.Load.Unique))
		}
	}
	if over, ok := Median(perKey); ok {
		rows = append(rows, Row{"5", figRSS, fmt.Sprintf("%.0f bytes/key", over), "<= 64 bytes/key", Check(over <= 64)})
	} else {
		rows = append(rows, missing("5", figRSS, "<= 64 bytes/key", "e2e"))
	}
	if mb, _, ok := MedianOf(res.GoBench, "BenchmarkMemoryPerKey", "bytes/key"); ok {
		rows = append(rows, Row{"5", "local cache heap per key at 10^6 keys (BenchmarkMemoryPerKey)", fmt.Sprintf("%.1f bytes/key", mb), "", Info})
	}
	return append(rows, redisRows(res)...)
}

// median is the median of fig over the runs of mode.
func median(runs []Run, mode string, fig func(Run) float64) (float64, bool) {
	var vs []float64
	for _, r := range runs {
		if r.Mode == mode {
			vs = append(vs, fig(r))
		}
	}
	return Median(vs)
}

// redisRows are what the shared tier costs, beside what these cores allow.
func redisRows(res *results) []Row {
	runs := res.Runs[30]
	redisCPU, ok := median(runs, ModeRedis, func(r Run) float64 { return r.Redis.CPUSeconds / float64(r.Load.Sent) })
	if !ok {
		return nil
	}
	collector, _ := median(runs, ModeRedis, func(r Run) float64 { return r.CPUPerRecord() })
	pass, _ := median(runs, ModePassThrough, func(r Run) float64 { return r.CPUPerRecord() })
	lat := func(q func(Run) float64) string {
		var parts []string
		for _, mode := range []string{ModeLocal, ModeRedis} {
			m, _ := median(runs, mode, q)
			p, _ := median(runs, ModePassThrough, q)
			parts = append(parts, fmt.Sprintf("%s %+.2f ms", mode, (m-p)*1e3))
		}
		return strings.Join(parts, ", ")
	}
	trips, _ := median(runs, ModeRedis, func(r Run) float64 { return float64(r.RoundTrips) / float64(r.Load.Requests) })
	calls, _ := median(runs, ModeRedis, func(r Run) float64 { return float64(r.Redis.Calls) / float64(r.Load.Requests) })
	rows := []Row{
		{"R", "Redis tier, 30% copies: collector CPU per record; Redis CPU per record (INFO cpu)",
			fmt.Sprintf("%.2f µs (pass-through %.2f µs); Redis %.2f µs", collector*1e6, pass*1e6, redisCPU*1e6), "", Info},
		{"R", "latency added per request over the pass-through, p50 (load tool, request to acknowledgement)",
			lat(func(r Run) float64 { return r.Load.LatencyP50 }), "", Info},
		{"R", "latency added per request over the pass-through, p99", lat(func(r Run) float64 { return r.Load.LatencyP99 }), "", Info},
		{"R", "round trips to Redis per request of 1000 records (otelcol_processor_dedup_redis_requests); Redis commands per request (INFO commandstats, scripts' own commands included)",
			fmt.Sprintf("%.2f; %.2f", trips, calls), "", Info},
	}
	var perOp, ops []float64
	for _, c := range res.Ceiling {
		perOp, ops = append(perOp, c.CPUPerOp()), append(ops, c.OpsPerSecond)
	}
	if p, ok := Median(perOp); ok {
		o, _ := Median(ops)
		unique := 1 - float64(dupPcts[0])/100
		rows = append(rows, Row{"R",
			fmt.Sprintf("ceiling: redis-benchmark SET NX PX, -c %d -P %d, Redis CPU per op; the records/s one Redis core allows at that cost per unique record vs at the tier's", senders, batch),
			fmt.Sprintf("%.2f µs/op (%s ops/s); %s vs %s records/s", p*1e6, Rate(o), Rate(1/(p*unique)), Rate(1/redisCPU)), "", Info})
	}
	return rows
}

// FormatTable renders rows as a Markdown table whose columns are padded to
// line up, so that it reads the same in a terminal and in BENCHMARKS.md.
func FormatTable(rows []Row) string {
	cells := [][]string{{"#", "figure", "measured", "target", "result"}}
	for _, r := range rows {
		cells = append(cells, []string{r.Target, r.Figure, r.Measured, r.Goal, string(r.Verdict)})
	}
	width := make([]int, 5)
	for _, row := range cells {
		for i, c := range row {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for n, row := range cells {
		for i, c := range row {
			fmt.Fprintf(&b, "| %s%s ", c, strings.Repeat(" ", width[i]-utf8.RuneCountInString(c)))
		}
		b.WriteString("|\n")
		if n == 0 {
			for _, w := range width {
				b.WriteString("|" + strings.Repeat("-", w+2))
			}
			b.WriteString("|\n")
		}
	}
	return b.String()
}

// Summary counts the verdicts: "5 met, 2 not met, 0 not measured".
func Summary(rows []Row) string {
	n := map[Verdict]int{}
	for _, r := range rows {
		n[r.Verdict]++
	}
	return fmt.Sprintf("%d met, %d not met, %d not measured", n[Met], n[NotMet], n[Failed])
}

// Rate formats a per-second rate with an SI prefix and 3 significant
// digits: 2.51M, 403k, 950.
func Rate(v float64) string {
	unit := ""
	switch a := math.Abs(v); {
	case a >= 1e6:
		v, unit = v/1e6, "M"
	case a >= 1e3:
		v, unit = v/1e3, "k"
	}
	switch a := math.Abs(v); {
	case a >= 100:
		return fmt.Sprintf("%.0f%s", v, unit)
	case a >= 10:
		return fmt.Sprintf("%.1f%s", v, unit)
	}
	return fmt.Sprintf("%.2f%s", v, unit)
}

// MiB formats bytes in MiB with one decimal.
func MiB(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
