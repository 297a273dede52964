package bench

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
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
	b.WriteString("| request | n | latency p50 | p90 | max |\n| --- | --- | --- | --- | --- |\n")
	row := func(name string, vs []float64) {
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s |\n", name, len(vs), Millis(Percentile(vs, 50)), Millis(Percentile(vs, 90)), Millis(Percentile(vs, 100)))
	}
	for _, c := range WaitCases {
		row(c, r.Latency[c])
	}
	row("the originals the copies met", r.Originals)
	w := r.Counts.Waits
	fmt.Fprintf(&b, "\nWaits: %d settled, %d refused (wait p50 %s, p99 %s); refused requests %d; the backend received each of %d records once: %s.\n",
		int64(w["settled"].Count), int64(w["refused"].Count), Millis(r.Counts.AllWaits().Quantile(0.5)), Millis(r.Counts.AllWaits().Quantile(0.99)),
		r.Refused, r.Distinct, yesNo(r.Exact()))
	return b.String()
}

// WaitCost is the extra latency of a copy that meets its original's batch
// in flight, over a request that meets no copy (medians), per case.
func (r WaitCostResult) WaitCost(kase string) float64 {
	return Percentile(r.Latency[kase], 50) - Percentile(r.Latency[WaitNoCopy], 50)
}

// Fit is a straight line y = A + B*x fitted by least squares.
type Fit struct{ A, B float64 }

// At is the line's value at x.
func (f Fit) At(x float64) float64 { return f.A + f.B*x }

// FitLine fits a line through the points (xs[i], ys[i]); with one distinct
// x it is flat at the mean of ys.
func FitLine(xs, ys []float64) Fit {
	n := float64(len(xs))
	if n == 0 {
		return Fit{}
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	den := n*sxx - sx*sx
	if den == 0 {
		return Fit{A: sy / n}
	}
	b := (n*sxy - sx*sy) / den
	return Fit{A: (sy - b*sx) / n, B: b}
}

// CrossShare is the share of a fleet's copies whose original went to
// another collector, when senders spread requests evenly over n
// collectors: (n-1)/n. A copy of a batch in flight on the same collector
// waits for a local settle; one on another collector rechecks Redis and may
// release and claim again, so per-batch costs grow with this share.
func CrossShare(collectors int) float64 {
	return float64(collectors-1) / float64(collectors)
}

// FleetModel projects a fleet from the per-unit costs measured on small
// ones: each cost fitted as a line in the cross-collector share (see
// CrossShare) over the measured points, and read off at the projected
// fleet's share.
type FleetModel struct {
	// Fitted over the measured points.
	RedisUsPerKey        Fit // Redis CPU per distinct record, µs
	CollectorUsPerRecord Fit // collector CPU per record received, µs
	SenderUsPerRecord    Fit // the senders' CPU per record, µs
	NetBytesPerBatch     Fit // Redis traffic per request, bytes
	RoundTripsPerBatch   Fit
	MemoryPerKey         float64 // Redis used_memory per distinct record, bytes (median)
	Batch                int
	Duplicates           float64 // share of records that are copies
	Tags                 int     // hash tags the keys use (0: not measured)
	Points               []int   // the measured fleet sizes
	// The fleet projected.
	Collectors, Masters int
	Window              time.Duration
}

// Per-unit costs of one measured point.
func redisUsPerKey(p ScaleResult) float64     { return p.CPU.Redis * 1e6 / float64(p.Unique) }
func collectorUsPerRec(p ScaleResult) float64 { return p.CPU.Collectors * 1e6 / float64(p.Records) }
func senderUsPerRec(p ScaleResult) float64    { return p.CPU.Driver * 1e6 / float64(p.Records) }
func netBytesPerBatch(p ScaleResult) float64  { return float64(p.Redis.NetBytes) / float64(p.Requests) }
func tripsPerBatch(p ScaleResult) float64 {
	return float64(p.Counts.RoundTrips()) / float64(p.Requests)
}

// NewFleetModel fits the per-unit costs of points.
func NewFleetModel(points []ScaleResult, tags, collectors, masters int, window time.Duration) (FleetModel, error) {
	if len(points) == 0 {
		return FleetModel{}, fmt.Errorf("fleet model: no measured point")
	}
	m := FleetModel{Tags: tags, Collectors: collectors, Masters: masters, Window: window,
		Batch: int(points[0].Records / points[0].Requests), Duplicates: 1 - float64(points[0].Unique)/float64(points[0].Records)}
	var xs, mem []float64
	for _, p := range points {
		xs = append(xs, CrossShare(p.Collectors))
		mem = append(mem, float64(p.Redis.UsedMemory)/float64(p.Unique))
		m.Points = append(m.Points, p.Collectors)
	}
	fit := func(f func(ScaleResult) float64) Fit {
		ys := make([]float64, len(points))
		for i, p := range points {
			ys[i] = f(p)
		}
		return FitLine(xs, ys)
	}
	m.RedisUsPerKey = fit(redisUsPerKey)
	m.CollectorUsPerRecord = fit(collectorUsPerRec)
	m.SenderUsPerRecord = fit(senderUsPerRec)
	m.NetBytesPerBatch = fit(netBytesPerBatch)
	m.RoundTripsPerBatch = fit(tripsPerBatch)
	m.MemoryPerKey, _ = Median(mem)
	return m, nil
}

// share is the projected fleet's cross-collector share.
func (m FleetModel) share() float64 { return CrossShare(m.Collectors) }

// MastersUsed is the masters that receive keys: every key carries one of
// Tags hash tags, so at most Tags masters hold them.
func (m FleetModel) MastersUsed() int {
	if m.Tags > 0 {
		return min(m.Masters, m.Tags)
	}
	return m.Masters
}

// KeysPerSecondPerMaster is what one master (one core: Redis runs commands
// on one thread) can claim per second.
func (m FleetModel) KeysPerSecondPerMaster() float64 { return 1e6 / m.RedisUsPerKey.At(m.share()) }

// RedisLimit is the fleet's records/s when the masters in use are saturated.
func (m FleetModel) RedisLimit() float64 {
	return float64(m.MastersUsed()) * m.KeysPerSecondPerMaster() / (1 - m.Duplicates)
}

// CollectorLimit is the fleet's records/s when every collector saturates
// one core of its own.
func (m FleetModel) CollectorLimit() float64 {
	return float64(m.Collectors) * 1e6 / m.CollectorUsPerRecord.At(m.share())
}

// Saturation is the fleet's records/s and what limits it.
func (m FleetModel) Saturation() (float64, string) {
	r, c := m.RedisLimit(), m.CollectorLimit()
	if r < c {
		return r, "the Redis masters"
	}
	return c, "the collectors"
}

// Format shows the model's arithmetic with its numbers.
func (m FleetModel) Format() string {
	var b strings.Builder
	x := m.share()
	rate, limit := m.Saturation()
	keys := rate * (1 - m.Duplicates)
	perMaster := keys / float64(m.MastersUsed())
	batches := rate / float64(m.Batch)
	redisUs, collUs := m.RedisUsPerKey.At(x), m.CollectorUsPerRecord.At(x)
	netB, trips := m.NetBytesPerBatch.At(x), m.RoundTripsPerBatch.At(x)
	tags := "not measured: every master assumed to hold keys"
	if m.Tags > 0 {
		tags = fmt.Sprintf("%d hash tags seen in the Cluster's keys", m.Tags)
	}
	fmt.Fprintf(&b, "Per-unit costs, each a line a + b x s in the share s = (n-1)/n of copies whose original went to another of n collectors, fitted on the measured fleets of %v (s = %s), read at n = %d (s = %.2f):\n\n",
		m.Points, formatShares(m.Points), m.Collectors, x)
	line := func(name string, f Fit, unit string) {
		fmt.Fprintf(&b, "- %s = %s + %s x s = %s%s\n", name, sig3(f.A), sig3(f.B), sig3(f.At(x)), unit)
	}
	line("Redis CPU per key", m.RedisUsPerKey, " µs")
	line("collector CPU per record received", m.CollectorUsPerRecord, " µs")
	line("Redis traffic per batch", m.NetBytesPerBatch, " B")
	line("round trips per batch", m.RoundTripsPerBatch, "")
	fmt.Fprintf(&b, "- Redis memory per key (median) = %.0f B; batches of %d records, %.0f%% copies\n\n", m.MemoryPerKey, m.Batch, 100*m.Duplicates)
	fmt.Fprintf(&b, "- masters holding keys = min(%d masters, %s) = %d\n", m.Masters, tags, m.MastersUsed())
	fmt.Fprintf(&b, "- keys/s one master claims at saturation (one core) = 10^6 / %s µs = %s keys/s\n", sig3(redisUs), Rate(m.KeysPerSecondPerMaster()))
	fmt.Fprintf(&b, "- fleet records/s when those masters saturate = %d x %s / (1 - %.2f) = %s records/s\n",
		m.MastersUsed(), Rate(m.KeysPerSecondPerMaster()), m.Duplicates, Rate(m.RedisLimit()))
	fmt.Fprintf(&b, "- fleet records/s when %d collectors saturate a core each = %d x 10^6 / %s µs = %s records/s\n",
		m.Collectors, m.Collectors, sig3(collUs), Rate(m.CollectorLimit()))
	fmt.Fprintf(&b, "- it saturates at %s records/s, on %s; there:\n", Rate(rate), limit)
	fmt.Fprintf(&b, "  - keys/s per master = %s x (1 - %.2f) / %d = %s keys/s (%.0f%% of one core)\n",
		Rate(rate), m.Duplicates, m.MastersUsed(), Rate(perMaster), 100*perMaster*redisUs/1e6)
	fmt.Fprintf(&b, "  - Redis memory per master for a %s window = %s keys/s x %.0f s x %.0f B = %s\n",
		m.Window, Rate(perMaster), m.Window.Seconds(), m.MemoryPerKey, Bytes(perMaster*m.Window.Seconds()*m.MemoryPerKey))
	fmt.Fprintf(&b, "  - Redis traffic = %s batches/s x %s = %s/s in all, %s/s per master\n",
		Rate(batches), Bytes(netB), Bytes(batches*netB), Bytes(batches*netB/float64(m.MastersUsed())))
	fmt.Fprintf(&b, "  - round trips = %s batches/s x %s = %s/s\n", Rate(batches), sig3(trips), Rate(batches*trips))
	return b.String()
}

func formatShares(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = fmt.Sprintf("%.2f", CrossShare(n))
	}
	return strings.Join(parts, ", ")
}

// ModelCheck compares what the model says of one measured point with what
// was measured there.
type ModelCheck struct {
	Topology            string
	Collectors          int
	Quantity            string
	Predicted, Measured float64
}

// Check reads each point's per-unit costs off the model's lines, and its
// records/s on a machine of cores cores shared by the collectors, Redis and
// the senders (less what other processes used meanwhile) if the CPU is
// what limits it.
func (m FleetModel) Check(points []ScaleResult, cores int) []ModelCheck {
	var out []ModelCheck
	for _, p := range points {
		x := CrossShare(p.Collectors)
		add := func(q string, pred, meas float64) {
			out = append(out, ModelCheck{Topology: p.Topology, Collectors: p.Collectors, Quantity: q, Predicted: pred, Measured: meas})
		}
		add("Redis CPU per key, µs", m.RedisUsPerKey.At(x), redisUsPerKey(p))
		add("collector CPU per record, µs", m.CollectorUsPerRecord.At(x), collectorUsPerRec(p))
		add("Redis traffic per batch, B", m.NetBytesPerBatch.At(x), netBytesPerBatch(p))
		add("round trips per batch", m.RoundTripsPerBatch.At(x), tripsPerBatch(p))
		perRecord := (m.CollectorUsPerRecord.At(x) + m.SenderUsPerRecord.At(x) + m.RedisUsPerKey.At(x)*(1-m.Duplicates)) / 1e6
		free := float64(cores) - p.CPU.Others/p.Seconds
		add("records/s if CPU-bound", free/perRecord, p.RecordsPerSecond())
	}
	return out
}

// FormatModelChecks is the checks as a table.
func FormatModelChecks(cs []ModelCheck) string {
	var b strings.Builder
	b.WriteString("| topology | collectors | quantity | model | measured | measured / model |\n| --- | --- | --- | --- | --- | --- |\n")
	for _, c := range cs {
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %.2f |\n", c.Topology, c.Collectors, c.Quantity, sig3(c.Predicted), sig3(c.Measured), c.Measured/c.Predicted)
	}
	return b.String()
}

// Millis formats seconds as milliseconds, 3 significant digits; "-" for
// NaN (no observation).
func Millis(s float64) string {
	if math.IsNaN(s) {
		return "-"
	}
	return sig3(s*1e3) + " ms"
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
