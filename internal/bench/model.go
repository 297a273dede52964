package bench

import (
	"fmt"
	"strings"
	"time"
)

// Fit is a straight line y = A + B*x fitted by least squares.
type Fit struct{ A, B float64 }

// At is the line's value at x.
func (f Fit) At(x float64) float64 { return f.A + f.B*x }

// fitLine fits a line through the points (xs[i], ys[i]); with one distinct
// x it is flat at the mean of ys.
func fitLine(xs, ys []float64) Fit {
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

// crossShare is the share of a fleet's copies whose original went to
// another collector, when senders spread requests evenly over n
// collectors: (n-1)/n. A copy of a batch in flight on the same collector
// waits for a local settle; one on another collector rechecks Redis and may
// release and claim again, so per-batch costs grow with this share.
func crossShare(collectors int) float64 {
	return float64(collectors-1) / float64(collectors)
}

// FleetModel projects a fleet from the per-unit costs measured on small
// ones: each cost fitted as a line in the cross-collector share (see
// crossShare) over the measured points, and read off at the projected
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
		xs = append(xs, crossShare(p.Collectors))
		mem = append(mem, float64(p.Redis.UsedMemory)/float64(p.Unique))
		m.Points = append(m.Points, p.Collectors)
	}
	fit := func(f func(ScaleResult) float64) Fit {
		ys := make([]float64, len(points))
		for i, p := range points {
			ys[i] = f(p)
		}
		return fitLine(xs, ys)
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
func (m FleetModel) share() float64 { return crossShare(m.Collectors) }

// mastersUsed is the masters that receive keys: every key carries one of
// Tags hash tags, so at most Tags masters hold them.
func (m FleetModel) mastersUsed() int {
	if m.Tags > 0 {
		return min(m.Masters, m.Tags)
	}
	return m.Masters
}

// keysPerSecondPerMaster is what one master (one core: Redis runs commands
// on one thread) can claim per second.
func (m FleetModel) keysPerSecondPerMaster() float64 { return 1e6 / m.RedisUsPerKey.At(m.share()) }

// redisLimit is the fleet's records/s when the masters in use are saturated.
func (m FleetModel) redisLimit() float64 {
	return float64(m.mastersUsed()) * m.keysPerSecondPerMaster() / (1 - m.Duplicates)
}

// collectorLimit is the fleet's records/s when every collector saturates
// one core of its own.
func (m FleetModel) collectorLimit() float64 {
	return float64(m.Collectors) * 1e6 / m.CollectorUsPerRecord.At(m.share())
}

// saturation is the fleet's records/s and what limits it.
func (m FleetModel) saturation() (float64, string) {
	r, c := m.redisLimit(), m.collectorLimit()
	if r < c {
		return r, "the Redis masters"
	}
	return c, "the collectors"
}

// Format shows the model's arithmetic with its numbers.
func (m FleetModel) Format() string {
	var b strings.Builder
	x := m.share()
	rate, limit := m.saturation()
	keys := rate * (1 - m.Duplicates)
	perMaster := keys / float64(m.mastersUsed())
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
	fmt.Fprintf(&b, "- masters holding keys = min(%d masters, %s) = %d\n", m.Masters, tags, m.mastersUsed())
	fmt.Fprintf(&b, "- keys/s one master claims at saturation (one core) = 10^6 / %s µs = %s keys/s\n", sig3(redisUs), Rate(m.keysPerSecondPerMaster()))
	fmt.Fprintf(&b, "- fleet records/s when those masters saturate = %d x %s / (1 - %.2f) = %s records/s\n",
		m.mastersUsed(), Rate(m.keysPerSecondPerMaster()), m.Duplicates, Rate(m.redisLimit()))
	fmt.Fprintf(&b, "- fleet records/s when %d collectors saturate a core each = %d x 10^6 / %s µs = %s records/s\n",
		m.Collectors, m.Collectors, sig3(collUs), Rate(m.collectorLimit()))
	fmt.Fprintf(&b, "- it saturates at %s records/s, on %s; there:\n", Rate(rate), limit)
	fmt.Fprintf(&b, "  - keys/s per master = %s x (1 - %.2f) / %d = %s keys/s (%.0f%% of one core)\n",
		Rate(rate), m.Duplicates, m.mastersUsed(), Rate(perMaster), 100*perMaster*redisUs/1e6)
	fmt.Fprintf(&b, "  - Redis memory per master for a %s window = %s keys/s x %.0f s x %.0f B = %s\n",
		m.Window, Rate(perMaster), m.Window.Seconds(), m.MemoryPerKey, Bytes(perMaster*m.Window.Seconds()*m.MemoryPerKey))
	fmt.Fprintf(&b, "  - Redis traffic = %s batches/s x %s = %s/s in all, %s/s per master\n",
		Rate(batches), Bytes(netB), Bytes(batches*netB), Bytes(batches*netB/float64(m.mastersUsed())))
	fmt.Fprintf(&b, "  - round trips = %s batches/s x %s = %s/s\n", Rate(batches), sig3(trips), Rate(batches*trips))
	return b.String()
}

func formatShares(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = fmt.Sprintf("%.2f", crossShare(n))
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
		x := crossShare(p.Collectors)
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
