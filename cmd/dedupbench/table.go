package main

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/perf/benchfmt"
)

// The verdicts of a row of the targets table.
const (
	Met    = "met"
	NotMet = "NOT MET"
	Info   = "-"            // a figure reported for context, with no target of its own
	Failed = "NOT MEASURED" // the row's Measured says why
)

// verdict is a target's verdict by whether it was met.
var verdict = map[bool]string{true: Met, false: NotMet}

// Row is one line of the targets table (BENCHMARKS.md#targets).
type Row struct{ Target, Figure, Measured, Goal, Verdict string }

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
	// measured is r, or when !ok the row of r's figure not measured.
	measured := func(ok bool, phase string, r Row) Row {
		if !ok {
			return missing(r.Target, r.Figure, r.Goal, phase)
		}
		return r
	}
	// A ratio is taken within each round, of a mode's figure over the
	// pass-through's; the row reports the median of those.
	ratioRow := func(target, mode string, dup int, fig string, bound float64, goal string) Row {
		rs := paired(res.Runs[dup], mode, func(r, pass Run) float64 { return r.CPUPerRecord() / pass.CPUPerRecord() })
		mr, ok := Median(rs)
		if !ok {
			return missing(target, fig, goal, "e2e")
		}
		m, _ := median(res.Runs[dup], mode, Run.CPUPerRecord)
		p, _ := median(res.Runs[dup], ModePassThrough, Run.CPUPerRecord)
		return Row{target, fmt.Sprintf("%s; median of %d paired runs", fig, len(rs)),
			fmt.Sprintf("%.2fx (%.2f µs / %.2f µs)", mr, m*1e6, p*1e6), goal, verdict[mr <= bound]}
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
		ns, ok := Median(res.GoBench[name]["ns/record"])
		allocs, _ := Median(res.GoBench[name]["allocs/op"])
		if !ok {
			rows = append(rows, missing("4", fig, goal4, "gotest"))
			continue
		}
		rows = append(rows, Row{"4", fmt.Sprintf("%s; median of %d", fig, len(res.GoBench[name]["ns/record"])),
			fmt.Sprintf("%.0f ns/record, %.3f allocs/record", ns, allocs/batch), goal4, verdict[ns <= 150 && allocs/batch < 0.01]})
	}
	// Every record of the 0% runs is a key in the window: the median over
	// rounds of (local peak RSS - pass-through peak RSS) / keys.
	perKey := paired(res.Runs[0], ModeLocal, func(r, pass Run) float64 { return float64(r.PeakRSS-pass.PeakRSS) / float64(r.Load.Unique) })
	over, ok := Median(perKey)
	rows = append(rows, measured(ok, "e2e", Row{"5", "peak RSS, local tier over the pass-through, per key in the window (0% copies: every record a key)",
		fmt.Sprintf("%.0f bytes/key", over), "<= 64 bytes/key", verdict[over <= 64]}))
	if mb, ok := Median(res.GoBench["BenchmarkMemoryPerKey"]["bytes/key"]); ok {
		rows = append(rows, Row{"5", "local cache heap per key at 10^6 keys (BenchmarkMemoryPerKey)", fmt.Sprintf("%.1f bytes/key", mb), "", Info})
	}
	// Source attribution: the hot path's time with source.key on over off,
	// the geometric mean over the variants (meter, key, copies).
	var logRatio float64
	n := 0
	for name, on := range res.GoBench {
		off, ok := res.GoBench[strings.Replace(name, "/sources=on/", "/sources=off/", 1)]
		if !strings.Contains(name, "/sources=on/") || !ok {
			continue
		}
		a, okA := Median(on["ns/record"])
		b, okB := Median(off["ns/record"])
		if okA && okB && b > 0 {
			logRatio += math.Log(a / b)
			n++
		}
	}
	geomean := math.Exp(logRatio / float64(n))
	rows = append(rows, measured(n > 0, "gotest", Row{"S", "BenchmarkConsumeLogs, copies traced to their source (on) over not (off), geomean of 8 variants",
		fmt.Sprintf("%.3fx", geomean), "<= 1.10x", verdict[geomean <= 1.10]}))
	cpu, ok := Median(res.GoBench["BenchmarkClientPath"]["client-cpu-ns/record"])
	allocs, _ := Median(res.GoBench["BenchmarkClientPath"]["allocs/op"])
	rows = append(rows, measured(ok, "gotest", Row{"C", "the Redis client's CPU, claim + commit of batches of 1000 against redis-server (BenchmarkClientPath)",
		fmt.Sprintf("%.3f µs/record, %.0f allocs/batch", cpu/1e3, allocs), "<= 0.15 µs/record, O(1) allocs/batch", verdict[cpu <= 150]}))
	for _, w := range []string{"1h0m0s", "168h0m0s"} {
		name := "BenchmarkLayout/window=" + w
		fig := fmt.Sprintf("Redis used_memory per record, 10^7 records, window %s (BenchmarkLayout)", strings.TrimSuffix(strings.TrimSuffix(w, "0s"), "0m"))
		b, ok := Median(res.GoBench[name]["redis-B/record"])
		cpu, _ := Median(res.GoBench[name]["redis-cpu-ns/record"])
		rows = append(rows, measured(ok, "gotest", Row{"R", fig, fmt.Sprintf("%.1f bytes/record, Redis CPU %.2f µs/record", b, cpu/1e3), "<= 32 bytes/record", verdict[b <= 32]}))
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

// paired is fig of every run of mode and the pass-through run of its round,
// which a round runs first.
func paired(runs []Run, mode string, fig func(r, pass Run) float64) []float64 {
	var vs []float64
	var pass *Run
	for _, r := range runs {
		if r.Mode == ModePassThrough {
			pass = &r
		} else if r.Mode == mode && pass != nil {
			vs = append(vs, fig(r, *pass))
		}
	}
	return vs
}

// redisRows are what the shared tier costs, beside what these cores allow.
func redisRows(res *results) []Row {
	runs := res.Runs[30]
	redisCPU, ok := median(runs, ModeRedis, func(r Run) float64 { return r.Redis.CPUSeconds / float64(r.Load.Sent) })
	if !ok {
		return nil
	}
	collector, _ := median(runs, ModeRedis, Run.CPUPerRecord)
	pass, _ := median(runs, ModePassThrough, Run.CPUPerRecord)
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
		perOp, ops = append(perOp, c.CPUPerOp), append(ops, c.OpsPerSecond)
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

// FormatTable renders rows as a Markdown table, then counts the verdicts:
// "5 met, 2 not met, 0 not measured".
func FormatTable(rows []Row) string {
	b, n := "| # | figure | measured | target | result |\n| --- | --- | --- | --- | --- |\n", map[string]int{}
	for _, r := range rows {
		b += fmt.Sprintf("| %s | %s | %s | %s | %s |\n", r.Target, r.Figure, r.Measured, r.Goal, r.Verdict)
		n[r.Verdict]++
	}
	return b + fmt.Sprintf("\n%d met, %d not met, %d not measured\n", n[Met], n[NotMet], n[Failed])
}

// Rate formats a per-second rate with an SI prefix and 3 significant
// digits: 2.51M, 403k, 950.
func Rate(v float64) string {
	unit := ""
	if a := math.Abs(v); a >= 1e6 {
		v, unit = v/1e6, "M"
	} else if a >= 1e3 {
		v, unit = v/1e3, "k"
	}
	// 3 significant digits: as many decimals as the integer part leaves.
	digits := max(0, 3-len(strconv.Itoa(int(math.Abs(v)))))
	return strconv.FormatFloat(v, 'f', digits, 64) + unit
}

// GoBench is the values of `go test -bench` results by benchmark name (one
// CPU: no -GOMAXPROCS suffix) and unit ("ns/op", "allocs/op" and every
// b.ReportMetric unit: "ns/record", "bytes/key", ...).
type GoBench map[string]map[string][]float64

// ParseGoBench reads `go test -bench` output; a bad result is an error.
func ParseGoBench(r io.Reader) (GoBench, error) {
	out := GoBench{}
	for br := benchfmt.NewReader(r, "gotest.txt"); br.Scan(); {
		switch rec := br.Result().(type) {
		case *benchfmt.SyntaxError:
			return nil, rec
		case *benchfmt.Result:
			name := "Benchmark" + rec.Name.String()
			if out[name] == nil {
				out[name] = map[string][]float64{}
			}
			for _, v := range rec.Values {
				if v.OrigUnit != "" { // as written, not tidied to sec/op
					v.Value, v.Unit = v.OrigValue, v.OrigUnit
				}
				out[name][v.Unit] = append(out[name][v.Unit], v.Value)
			}
		}
	}
	return out, nil
}

// Median is the median of vs (the mean of the middle two for an even
// count), as benchstat's; ok is false for no values.
func Median(vs []float64) (m float64, ok bool) {
	if len(vs) == 0 {
		return 0, false
	}
	s := slices.Sorted(slices.Values(vs))
	return (s[(len(s)-1)/2] + s[len(s)/2]) / 2, true
}

// FuncCPU is one function's CPU time in a profile: Flat in the function
// itself, Cum with what it calls.
type FuncCPU struct{ Flat, Cum time.Duration }

// ParsePprofTop reads `go tool pprof -top` output into CPU time by function.
func ParsePprofTop(r io.Reader) (map[string]FuncCPU, error) {
	out := map[string]FuncCPU{}
	sc := bufio.NewScanner(r)
	header := false
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if !header || len(f) < 6 { // the lines up to the header, then all but functions'
			header = header || len(f) >= 5 && f[0] == "flat" && f[1] == "flat%"
			continue
		}
		flat, err1 := time.ParseDuration(f[0])
		cum, err2 := time.ParseDuration(f[3])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("pprof -top: bad line %q", sc.Text())
		}
		name := shortName(strings.Join(f[5:], " "))
		prev := out[name]
		out[name] = FuncCPU{Flat: prev.Flat + flat, Cum: max(prev.Cum, cum)}
	}
	if !header {
		return nil, fmt.Errorf("pprof -top: no header line")
	}
	return out, sc.Err()
}

// PprofTotalBytes reads the total of `go tool pprof -top` output of an
// allocation profile ("Showing nodes accounting for 1.50GB, 97% of 1.54GB
// total") in bytes.
func PprofTotalBytes(top []byte) (float64, error) {
	m := regexp.MustCompile(`of ([0-9.]+)([kMGT]?B) total`).FindSubmatch(top)
	if m == nil {
		return 0, fmt.Errorf("pprof -top: no total in %q", top[:min(len(top), 400)])
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	unit := map[string]float64{"B": 1, "kB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}[string(m[2])]
	return v * unit, err
}

// shortName drops a generic function's type arguments ("queue.(*q[...]).Start")
// and pprof's " (inline)" mark, so that an inlined copy adds to its function.
func shortName(name string) string {
	var b strings.Builder
	depth := 0
	for _, r := range strings.TrimSuffix(name, " (inline)") {
		switch {
		case r == '[':
			if depth == 0 {
				b.WriteString("[...]")
			}
			depth++
		case r == ']':
			depth--
		case depth == 0:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// ProfileDiff is the table of the n functions whose CPU per record (flat,
// or cumulative if cum) differs most between each mode's profile and the
// first mode's (the pass-through), in ns per record of each mode's run,
// after a row of all functions' flat CPU.
func ProfileDiff(modes []string, profiles []map[string]FuncCPU, records []int64, n int, cum bool) string {
	per := func(i int, name string) float64 {
		d := profiles[i][name].Flat
		if cum {
			d = profiles[i][name].Cum
		}
		return float64(d.Nanoseconds()) / float64(records[i])
	}
	names, kind := map[string]bool{}, map[bool]string{false: "flat", true: "cumulative"}[cum]
	b := fmt.Sprintf("| function (%s CPU, ns per record) | %s |\n| --- |%s\n| **all functions** |", kind,
		strings.Join(modes, " | "), strings.Repeat(" ---: |", len(modes)))
	for i, p := range profiles {
		var total time.Duration
		for name, fc := range p {
			names[name] = true
			total += fc.Flat
		}
		b += fmt.Sprintf(" **%.0f** |", float64(total.Nanoseconds())/float64(records[i]))
	}
	diff := func(name string) float64 {
		d := 0.0
		for i := 1; i < len(profiles); i++ {
			d = max(d, math.Abs(per(i, name)-per(0, name)))
		}
		return d
	}
	sorted := slices.SortedFunc(maps.Keys(names), func(a, b string) int { return cmp.Or(cmp.Compare(diff(b), diff(a)), strings.Compare(a, b)) })
	for _, name := range sorted[:min(n, len(sorted))] {
		b += "\n| `" + name + "` |"
		for i := range profiles {
			b += fmt.Sprintf(" %.1f |", per(i, name))
		}
	}
	return b + "\n"
}
