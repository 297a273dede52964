package bench

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// hist is a wait histogram over the processor's bounds with n observations
// in the bucket of bound le.
func hist(le float64, n int) Histogram {
	bounds := []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, math.Inf(1)}
	h := Histogram{Bounds: bounds, Cumulative: make([]float64, len(bounds)), Count: float64(n)}
	for i, b := range bounds {
		if b >= le {
			h.Cumulative[i] = float64(n)
		}
	}
	return h
}

func raceRun(topology string, size, rounds int, seconds, redisCPU float64, waits int, trips map[string]int64) RaceResult {
	records := int64(size * rounds)
	r := RaceResult{Topology: topology, Collectors: 2, Size: size, Rounds: rounds, Records: records, Seconds: seconds,
		Counts: DedupCounts{Records: map[string]int64{"unique": records, "duplicate": records}, RedisRequests: trips,
			Waits: map[string]Histogram{"settled": hist(0.01, waits), "refused": {}}},
		Redis: RedisCounts{NetBytes: int64(rounds) * 2 * 50_000}, CPU: CPUSplit{Redis: redisCPU}}
	for i := range rounds {
		r.RoundSeconds = append(r.RoundSeconds, seconds/float64(rounds)*float64(1+i%2)/1.5)
	}
	return r
}

func TestRaceSummary(t *testing.T) {
	trips := map[string]int64{"claim/ok": 20, "commit/ok": 10, "recheck/ok": 4, "release/ok": 2}
	rs := []RaceResult{
		raceRun(TopologyStandalone, 1000, 10, 0.25, 0.05, 4, trips), // 40k/s
		raceRun(TopologyCluster, 1000, 10, 0.5, 0.08, 6, trips),     // 20k/s
		raceRun(TopologyStandalone, 1000, 10, 0.2, 0.05, 4, trips),  // 50k/s
		raceRun(TopologyCluster, 1000, 10, 0.25, 0.06, 6, trips),    // 40k/s
	}
	bad := raceRun(TopologyCluster, 8192, 2, 0.4, 0.1, 0, map[string]int64{"claim/ok": 4, "claim/timeout": 1, "commit/ok": 2})
	bad.Counts.Records["unique"]++ // one record through twice
	bad.Refused = 1
	rs = append(rs, bad, raceRun(TopologyStandalone, 8192, 2, 0.5, 0.1, 0, map[string]int64{"claim/ok": 4, "commit/ok": 2}))

	if got := RaceRatios(rs, 1000); !slices.Equal(got, []float64{0.5, 0.8}) {
		t.Errorf("ratios at 1000: %v, want [0.5 0.8]", got)
	}
	if got := RaceRatios(rs, 8192); len(got) != 1 || math.Abs(got[0]-1.25) > 1e-12 {
		t.Errorf("ratios at 8192: %v, want [1.25]", got)
	}
	sums := SummarizeRace(rs)
	if len(sums) != 4 || sums[0].Topology != TopologyStandalone || sums[1].Topology != TopologyCluster || sums[2].Size != 8192 || sums[2].Topology != TopologyCluster {
		t.Fatalf("groups %+v", sums)
	}
	s := sums[0]
	if s.Runs != 2 || s.RecordsPerSecond != 45000 || s.Refused != 0 || !s.Exact || s.Settled != 8 || s.RefusedWaits != 0 ||
		s.RoundTrips != 1.8 || s.RoundTripsPerBatch["claim"] != 1 || s.RoundTripsPerBatch["recheck"] != 0.2 ||
		s.NetBytesPerBatch != 50_000 || s.RedisUsPerKey != 5 || s.WaitP50 != 0.0075 || s.WaitP99 != 0.005+0.005*0.99 {
		t.Errorf("standalone/1000: %+v", s)
	}
	if b := sums[2]; b.Exact || b.Refused != 1 || b.Failed != 1 || b.RoundTrips != 7.0/4 || !math.IsNaN(b.WaitP50) {
		t.Errorf("cluster/8192: %+v", b)
	}
	short := rs[0]
	short.Counts.Records = map[string]int64{"unique": short.Records, "duplicate": short.Records - 1}
	if short.Exact() {
		t.Error("one copy not dropped: still exact")
	}
	got := FormatRace(rs)
	for _, want := range []string{
		"| standalone | 1000 | 2 | 45.0k | 16.7 ms / 33.3 ms | 0 | yes | 8 / 0 | 7.50 ms / 9.95 ms | 1.80 (1.00 + 0.20 + 0.50 + 0.10) | 5.00 µs | 48.8 KiB |\n",
		"| cluster | 8192 | 1 | 41.0k | 133 ms / 267 ms | 1 | NO | 0 / 0 | - / - | 1.75 (1.25 + 0.00 + 0.50 + 0.00) | 6.10 µs | 48.8 KiB |\n",
		"Cluster / standalone, requests of 1000: 0.65x (median of 2 pairs: 0.50, 0.80)\n",
		"Cluster / standalone, requests of 8192: 1.25x (median of 1 pairs: 1.25)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("FormatRace lacks %q:\n%s", want, got)
		}
	}
}

// scalePoint is a fleet-scaling run of n collectors whose per-unit costs
// are the given ones: 100,000 records, 30% copies, batches of 1000.
func scalePoint(n int, redisUs, collUs, trips, netPerBatch float64) ScaleResult {
	r := ScaleResult{Topology: TopologyCluster, Collectors: n, Senders: 2 * n, Records: 100_000, Unique: 70_000, Requests: 100, Seconds: 2}
	r.CPU = CPUSplit{Collectors: collUs * 1e-6 * 100_000, Redis: redisUs * 1e-6 * 70_000, Driver: 0.2, Others: 0.4}
	r.Counts = DedupCounts{Records: map[string]int64{"unique": 70_000, "duplicate": 30_000},
		RedisRequests: map[string]int64{"claim/ok": int64(trips * 100)}, Waits: map[string]Histogram{"settled": hist(0.05, 3), "refused": hist(1, 1)}}
	r.Redis = RedisCounts{NetBytes: int64(netPerBatch * 100), UsedMemory: 14_000_000}
	return r
}

func TestFormatScale(t *testing.T) {
	r := scalePoint(2, 5, 4, 3, 40960)
	r.Refused = 2
	got := FormatScale([]ScaleResult{r})
	want := "| cluster | 2 | 4 | 50.0k | 35.0k | 0.20 / 0.17 / 0.10 / 0.20 | 4.00 µs | 5.00 µs | 3.00 | 4 (1) | 2 | yes | 40.0 KiB | 200 B |\n"
	if !strings.HasSuffix(got, want) {
		t.Errorf("FormatScale:\n%s\nwant its last line\n%s", got, want)
	}
	r.Counts.Records["unique"] = 69_999
	if r.Exact() {
		t.Error("a record lost: still exact")
	}
}

func TestFormatWaitCost(t *testing.T) {
	r := WaitCostResult{Topology: TopologyStandalone, Delay: 50 * time.Millisecond, Offset: 10 * time.Millisecond, Size: 1000,
		Latency: map[string][]float64{
			WaitNoCopy:        {0.060, 0.070, 0.065},
			WaitCopyOther:     {0.080, 0.090, 0.085},
			WaitCopySame:      {0.060, 0.062, 0.061},
			WaitCopyCommitted: {0.010, 0.012, 0.011},
		},
		Originals: []float64{0.07, 0.07},
		Counts:    DedupCounts{Waits: map[string]Histogram{"settled": hist(0.1, 6), "refused": {}}},
		Delivered: 5000, Distinct: 5000, DeliveredN: map[int]int64{1: 5000}}
	got := FormatWaitCost(r)
	for _, want := range []string{
		"| copy, other collector | 3 | 85.0 ms | 90.0 ms | 90.0 ms | +20.0 ms |\n",
		"| copy, original delivered | 3 | 11.0 ms | 12.0 ms | 12.0 ms | -54.0 ms |\n",
		"| no copy in flight | 3 | 65.0 ms | 70.0 ms | 70.0 ms |  |\n",
		"Waits: 6 settled, 0 refused (wait p50 75.0 ms, p99 99.5 ms); refused requests 0; the backend received each of 5000 records once: yes.",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("FormatWaitCost lacks %q:\n%s", want, got)
		}
	}
	if c := r.waitCost(WaitCopyOther); math.Abs(c-0.020) > 1e-12 {
		t.Errorf("wait cost of a copy on the other collector: %v, want 20 ms", c)
	}
	r.DeliveredN = map[int]int64{1: 4998, 2: 1, 0: 1}
	if r.Exact() {
		t.Error("one record twice, one never: still exact")
	}
}

func TestDeliveries(t *testing.T) {
	id := func(i uint64) string { return "evt-" + string(rune('a'+i)) }
	// Identities 0-4: a once, b twice, c never, d and e once; f is another
	// run's.
	received := map[string]int{"evt-a": 1, "evt-b": 2, "evt-d": 1, "evt-e": 1, "evt-f": 3}
	n, by := deliveries(received, id, 5)
	if n != 5 || len(by) != 3 || by[1] != 3 || by[2] != 1 || by[0] != 1 {
		t.Errorf("deliveries = %d, %v; want 5, map[0:1 1:3 2:1]", n, by)
	}
}
