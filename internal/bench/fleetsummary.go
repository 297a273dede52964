package bench

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Ops of the shared tier's round trips, in the order tables show them.
var redisOps = []string{"claim", "recheck", "commit", "release"}

// RaceSummary is the racing-copies runs of one topology and request size.
type RaceSummary struct {
	Topology string
	Size     int
	Runs     int
	// RecordsPerSecond is the median run's distinct records per second.
	RecordsPerSecond float64
	// RoundP50, RoundP99: the rounds' durations over every run, seconds
	// (nearest rank).
	RoundP50, RoundP99 float64
	Refused            int64
	Exact              bool // every run let each record through once
	// Waits: settled and refused waits over every run, and the quantiles
	// of both together, seconds (from the histogram's buckets).
	Settled, RefusedWaits int64
	WaitP50, WaitP99      float64
	// RoundTripsPerBatch by op, and in all, over every run.
	RoundTripsPerBatch map[string]float64
	RoundTrips         float64
	// RedisUsPerKey: the median run's Redis CPU per distinct record, µs.
	RedisUsPerKey float64
	// NetBytesPerBatch: Redis traffic per request a collector took.
	NetBytesPerBatch float64
	Failed           int64 // round trips that failed (error, timeout, skipped)
}

// SummarizeRace groups runs by topology and size, in the order they first
// appear.
func SummarizeRace(rs []RaceResult) []RaceSummary {
	type key struct {
		topology string
		size     int
	}
	var order []key
	groups := map[key][]RaceResult{}
	for _, r := range rs {
		k := key{r.Topology, r.Size}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	out := make([]RaceSummary, 0, len(order))
	for _, k := range order {
		g := groups[k]
		s := RaceSummary{Topology: k.topology, Size: k.size, Runs: len(g), Exact: true, RoundTripsPerBatch: map[string]float64{}}
		var rps, usPerKey, rounds []float64
		var waits Histogram
		var batches, netBytes int64
		trips := map[string]int64{}
		for _, r := range g {
			rps = append(rps, r.RecordsPerSecond())
			usPerKey = append(usPerKey, r.CPU.Redis*1e6/float64(r.Records))
			rounds = append(rounds, r.RoundSeconds...)
			s.Refused += r.Refused
			s.Exact = s.Exact && r.Exact()
			s.Settled += int64(r.Counts.Waits["settled"].Count)
			s.RefusedWaits += int64(r.Counts.Waits["refused"].Count)
			if h, err := waits.Add(r.Counts.AllWaits()); err == nil {
				waits = h
			}
			batches += r.Batches()
			netBytes += r.Redis.NetBytes
			s.Failed += r.Counts.Failed()
			for _, op := range redisOps {
				trips[op] += r.Counts.Op(op)
			}
		}
		s.RecordsPerSecond, _ = Median(rps)
		s.RedisUsPerKey, _ = Median(usPerKey)
		s.RoundP50, s.RoundP99 = Percentile(rounds, 50), Percentile(rounds, 99)
		s.WaitP50, s.WaitP99 = waits.Quantile(0.5), waits.Quantile(0.99)
		for _, op := range redisOps {
			s.RoundTripsPerBatch[op] = float64(trips[op]) / float64(batches)
			s.RoundTrips += s.RoundTripsPerBatch[op]
		}
		s.NetBytesPerBatch = float64(netBytes) / float64(batches)
		out = append(out, s)
	}
	return out
}

// RaceRatios pairs the runs of one request size in order, the i-th
// standalone run with the i-th Cluster run, and returns each pair's
// Cluster / standalone records/s.
func RaceRatios(rs []RaceResult, size int) []float64 {
	var std, cl []float64
	for _, r := range rs {
		if r.Size != size {
			continue
		}
		switch r.Topology {
		case TopologyStandalone:
			std = append(std, r.RecordsPerSecond())
		case TopologyCluster:
			cl = append(cl, r.RecordsPerSecond())
		}
	}
	out := make([]float64, min(len(std), len(cl)))
	for i := range out {
		out[i] = cl[i] / std[i]
	}
	return out
}

// FormatRace is the racing-copies table: one row per topology and size,
// then, per size, the Cluster / standalone ratio.
func FormatRace(rs []RaceResult) string {
	var b strings.Builder
	b.WriteString("| topology | request | runs | distinct records/s (median) | round p50 / p99 | refused | each record once | waits settled / refused | wait p50 / p99 | round trips per batch (claim + recheck + commit + release) | Redis CPU per key | Redis bytes per batch |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	sizes := []int{}
	for _, s := range SummarizeRace(rs) {
		if !slices.Contains(sizes, s.Size) {
			sizes = append(sizes, s.Size)
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %s | %s / %s | %d | %s | %d / %d | %s / %s | %.2f (%.2f + %.2f + %.2f + %.2f) | %.2f µs | %s |\n",
			s.Topology, s.Size, s.Runs, Rate(s.RecordsPerSecond), Millis(s.RoundP50), Millis(s.RoundP99), s.Refused, yesNo(s.Exact),
			s.Settled, s.RefusedWaits, Millis(s.WaitP50), Millis(s.WaitP99), s.RoundTrips,
			s.RoundTripsPerBatch["claim"], s.RoundTripsPerBatch["recheck"], s.RoundTripsPerBatch["commit"], s.RoundTripsPerBatch["release"],
			s.RedisUsPerKey, Bytes(s.NetBytesPerBatch))
	}
	b.WriteString("\n")
	for _, size := range sizes {
		ratios := RaceRatios(rs, size)
		m, ok := Median(ratios)
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "Cluster / standalone, requests of %d: %.2fx (median of %d pairs: %s)\n", size, m, len(ratios), formatRatios(ratios))
	}
	return b.String()
}

// FormatScale is the fleet-scaling table, one row per run.
func FormatScale(rs []ScaleResult) string {
	var b strings.Builder
	b.WriteString("| topology | collectors | senders | records/s | distinct/s | CPU cores: collectors / Redis / senders / other processes | collector CPU per record | Redis CPU per key | round trips per batch | waits (refused) | refused requests | each record once | Redis bytes per batch | Redis memory per key |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range rs {
		w := r.Counts.Waits
		fmt.Fprintf(&b, "| %s | %d | %d | %s | %s | %.2f / %.2f / %.2f / %.2f | %.2f µs | %.2f µs | %.2f | %d (%d) | %d | %s | %s | %.0f B |\n",
			r.Topology, r.Collectors, r.Senders, Rate(r.RecordsPerSecond()), Rate(float64(r.Unique)/r.Seconds),
			r.CPU.Collectors/r.Seconds, r.CPU.Redis/r.Seconds, r.CPU.Driver/r.Seconds, r.CPU.Others/r.Seconds,
			r.CPU.Collectors*1e6/float64(r.Records), r.CPU.Redis*1e6/float64(r.Unique),
			float64(r.Counts.RoundTrips())/float64(r.Requests), int64(w["settled"].Count+w["refused"].Count), int64(w["refused"].Count),
			r.Refused, yesNo(r.Exact()), Bytes(float64(r.Redis.NetBytes)/float64(r.Requests)), float64(r.Redis.UsedMemory)/float64(r.Unique))
	}
	return b.String()
}

// FormatWaitCost is the wait-cost table: each case's request latency.
func FormatWaitCost(r WaitCostResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Two collectors on %s Redis exporting to a backend that holds every export %s; requests of %d records; a copy sent %s after its original.\n\n",
		r.Topology, r.Delay, r.Size, r.Offset)
	b.WriteString("| request | n | latency p50 | p90 | max | p50 over a request meeting no copy |\n| --- | --- | --- | --- | --- | --- |\n")
	row := func(name string, vs []float64, extra string) {
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s |\n", name, len(vs), Millis(Percentile(vs, 50)), Millis(Percentile(vs, 90)), Millis(Percentile(vs, 100)), extra)
	}
	for _, c := range WaitCases {
		extra := ""
		if c != WaitNoCopy {
			extra = signedMillis(r.waitCost(c))
		}
		row(c, r.Latency[c], extra)
	}
	row("the originals the copies met", r.Originals, "")
	w := r.Counts.Waits
	fmt.Fprintf(&b, "\nWaits: %d settled, %d refused (wait p50 %s, p99 %s); refused requests %d; the backend received each of %d records once: %s.\n",
		int64(w["settled"].Count), int64(w["refused"].Count), Millis(r.Counts.AllWaits().Quantile(0.5)), Millis(r.Counts.AllWaits().Quantile(0.99)),
		r.Refused, r.Distinct, yesNo(r.Exact()))
	return b.String()
}

// waitCost is the extra latency of a case's requests over a request that
// meets no copy (medians).
func (r WaitCostResult) waitCost(kase string) float64 {
	return Percentile(r.Latency[kase], 50) - Percentile(r.Latency[WaitNoCopy], 50)
}

// Millis formats seconds as milliseconds, 3 significant digits; "-" for
// NaN (no observation).
func Millis(s float64) string {
	if math.IsNaN(s) {
		return "-"
	}
	return sig3(s*1e3) + " ms"
}

// signedMillis is Millis with a sign.
func signedMillis(s float64) string {
	if s >= 0 {
		return "+" + Millis(s)
	}
	return "-" + Millis(-s)
}

// Bytes formats a byte count with a binary prefix.
func Bytes(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1<<30:
		return sig3(v/(1<<30)) + " GiB"
	case a >= 1<<20:
		return sig3(v/(1<<20)) + " MiB"
	case a >= 1<<10:
		return sig3(v/(1<<10)) + " KiB"
	default:
		return fmt.Sprintf("%.0f B", v)
	}
}

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "NO"
}

func formatRatios(rs []float64) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("%.2f", r)
	}
	return strings.Join(parts, ", ")
}
