package bench

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestFitLine(t *testing.T) {
	// y = 2 + 8x through three points: exact.
	f := fitLine([]float64{0, 0.5, 0.75}, []float64{2, 6, 8})
	if math.Abs(f.A-2) > 1e-12 || math.Abs(f.B-8) > 1e-12 || math.Abs(f.At(0.98)-9.84) > 1e-12 {
		t.Errorf("fit %+v, at 0.98 %v; want 2 + 8x", f, f.At(0.98))
	}
	// Least squares through (0,1), (1,2), (2,6): slope 2.5, intercept 0.5.
	f = fitLine([]float64{0, 1, 2}, []float64{1, 2, 6})
	if math.Abs(f.A-0.5) > 1e-12 || math.Abs(f.B-2.5) > 1e-12 {
		t.Errorf("fit %+v, want 0.5 + 2.5x", f)
	}
	if f := fitLine([]float64{0.5, 0.5}, []float64{3, 5}); f != (Fit{A: 4}) {
		t.Errorf("one distinct x: %+v, want flat at 4", f)
	}
	if got := []float64{crossShare(1), crossShare(2), crossShare(4), crossShare(50)}; !slices.Equal(got, []float64{0, 0.5, 0.75, 0.98}) {
		t.Errorf("cross shares %v", got)
	}
}

func TestFleetModel(t *testing.T) {
	// Per-unit costs on lines in s = (n-1)/n: Redis 4 + 8s µs, collector
	// 3 + 4s µs, 2 + 8s round trips, 20000 + 200000s bytes per batch.
	var points []ScaleResult
	for _, n := range []int{1, 2, 4} {
		s := crossShare(n)
		points = append(points, scalePoint(n, 4+8*s, 3+4*s, 2+8*s, 20000+200000*s))
	}
	m, err := NewFleetModel(points, 12, 50, 30, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-6*math.Abs(want) }
	if !near(m.RedisUsPerKey.At(0.98), 11.84) || !near(m.CollectorUsPerRecord.At(0.98), 6.92) || !near(m.RoundTripsPerBatch.At(0.98), 9.84) ||
		m.MemoryPerKey != 200 || m.Batch != 1000 || math.Abs(m.Duplicates-0.3) > 1e-12 || m.mastersUsed() != 12 {
		t.Fatalf("model %+v", m)
	}
	// 12 masters x 10^6/11.84 keys/s / 0.7 = 1.448M records/s < 50 x
	// 10^6/6.92 = 7.23M: Redis saturates first.
	rate, limit := m.saturation()
	if !near(rate, 12*1e6/11.84/0.7) || limit != "the Redis masters" || !near(m.collectorLimit(), 50e6/6.92) {
		t.Errorf("saturation %v on %s; collector limit %v", rate, limit, m.collectorLimit())
	}
	f := m.Format()
	for _, want := range []string{
		"- Redis CPU per key = 4.00 + 8.00 x s = 11.8 µs\n",
		"- masters holding keys = min(30 masters, 12 hash tags seen in the Cluster's keys) = 12\n",
		"- keys/s one master claims at saturation (one core) = 10^6 / 11.8 µs = 84.5k keys/s\n",
		"- fleet records/s when those masters saturate = 12 x 84.5k / (1 - 0.30) = 1.45M records/s\n",
		"- it saturates at 1.45M records/s, on the Redis masters; there:\n",
		"  - keys/s per master = 1.45M x (1 - 0.30) / 12 = 84.5k keys/s (100% of one core)\n",
		"  - Redis memory per master for a 10m0s window = 84.5k keys/s x 600 s x 200 B = 9.44 GiB\n",
	} {
		if !strings.Contains(f, want) {
			t.Errorf("Format lacks %q:\n%s", want, f)
		}
	}
	// The points lie on the lines: the model meets each exactly.
	for _, c := range m.Check(points, 2) {
		if c.Quantity != "records/s if CPU-bound" && !near(c.Measured, c.Predicted) {
			t.Errorf("%d collectors, %s: model %v, measured %v", c.Collectors, c.Quantity, c.Predicted, c.Measured)
		}
	}
	// CPU-bound: (2 cores - 0.4 s of others in 2 s) / (3 collector + 2
	// senders + 4 x 0.7 Redis) µs per record.
	cs := m.Check(points[:1], 2)
	if last := cs[len(cs)-1]; last.Quantity != "records/s if CPU-bound" || !near(last.Predicted, 1.8/7.8e-6) || last.Measured != 50_000 {
		t.Errorf("CPU-bound check %+v", last)
	}
	if !strings.Contains(FormatModelChecks(cs), "| cluster | 1 | round trips per batch | 2.00 | 2.00 | 1.00 |\n") {
		t.Errorf("FormatModelChecks:\n%s", FormatModelChecks(cs))
	}
	untagged, _ := NewFleetModel(points, 0, 50, 30, 10*time.Minute)
	if untagged.mastersUsed() != 30 {
		t.Errorf("no tags measured: %d masters used, want all 30", untagged.mastersUsed())
	}
	if _, err := NewFleetModel(nil, 12, 50, 30, time.Minute); err == nil {
		t.Error("no points: no error")
	}
}
