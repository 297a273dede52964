package bench

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/otelcol-dedup/otelcol-dedup/internal/e2e"
)

// waitBuckets renders the wait_duration histogram of one result as a
// collector exposes it: cumulative counts for the processor's bounds.
func waitBuckets(result string, cumulative [13]int, sum float64) string {
	bounds := []string{"0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "+Inf"}
	var b strings.Builder
	for i, le := range bounds {
		fmt.Fprintf(&b, "otelcol_processor_dedup_wait_duration_bucket{otel_signal=\"logs\",processor=\"dedup\",result=%q,le=%q} %d\n", result, le, cumulative[i])
	}
	fmt.Fprintf(&b, "otelcol_processor_dedup_wait_duration_sum{otel_signal=\"logs\",processor=\"dedup\",result=%q} %g\n", result, sum)
	fmt.Fprintf(&b, "otelcol_processor_dedup_wait_duration_count{otel_signal=\"logs\",processor=\"dedup\",result=%q} %d\n", result, cumulative[12])
	return b.String()
}

// collectorScrape is one collector's metrics after a run: 10 batches of 100
// records, 600 unique and 400 duplicates, 12 waits settled and 1 refused.
const collectorScrape = `# HELP otelcol_processor_dedup_records Records the dedup processor saw.
# TYPE otelcol_processor_dedup_records counter
otelcol_processor_dedup_records{otel_signal="logs",outcome="unique",processor="dedup"} 600
otelcol_processor_dedup_records{otel_signal="logs",outcome="duplicate",processor="dedup"} 400
otelcol_processor_dedup_duplicates{otel_signal="logs",processor="dedup",tier="redis"} 300
otelcol_processor_dedup_duplicates{otel_signal="logs",processor="dedup",tier="local"} 100
otelcol_processor_dedup_released{otel_signal="logs",processor="dedup"} 7
otelcol_processor_dedup_redis_requests{op="claim",otel_signal="logs",processor="dedup",result="ok"} 10
otelcol_processor_dedup_redis_requests{op="claim",otel_signal="logs",processor="dedup",result="timeout"} 1
otelcol_processor_dedup_redis_requests{op="recheck",otel_signal="logs",processor="dedup",result="ok"} 4
otelcol_processor_dedup_redis_requests{op="commit",otel_signal="logs",processor="dedup",result="ok"} 8
otelcol_processor_dedup_redis_requests{op="release",otel_signal="logs",processor="dedup",result="ok"} 2
otelcol_processor_dedup_redis_duration_bucket{op="claim",otel_signal="logs",processor="dedup",le="+Inf"} 11
otelcol_processor_dedup_redis_duration_sum{op="claim",otel_signal="logs",processor="dedup"} 0.5
otelcol_processor_dedup_redis_duration_count{op="claim",otel_signal="logs",processor="dedup"} 11
otelcol_processor_dedup_redis_duration_sum{op="commit",otel_signal="logs",processor="dedup"} 0.25
otelcol_processor_dedup_redis_duration_count{op="commit",otel_signal="logs",processor="dedup"} 8
`

func scrape(t *testing.T, text string) e2e.Scrape {
	t.Helper()
	sc, err := e2e.ParsePrometheusText(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func TestHistogramQuantile(t *testing.T) {
	//               1ms 2.5 5  10 25 50 100 250 500 1s 2.5 5 +Inf
	settled := [13]int{0, 0, 2, 4, 10, 10, 10, 10, 10, 10, 10, 10, 10}
	refused := [13]int{0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 2}
	sc := scrape(t, waitBuckets("settled", settled, 0.1)+waitBuckets("refused", refused, 2.5))
	h, err := histogramOf(sc, metricWaitDuration, e2e.Labels{"result": "settled"})
	if err != nil {
		t.Fatal(err)
	}
	if h.Count != 10 || h.Sum != 0.1 || len(h.Bounds) != 13 || !math.IsInf(h.Bounds[12], 1) || h.Bounds[0] != 0.001 {
		t.Fatalf("settled: %+v", h)
	}
	// Ranks are q x 10; a rank's bucket is the first whose cumulative count
	// reaches it, and the rank is placed linearly between the bucket's
	// bounds by the observations below it and in it.
	for _, c := range []struct{ q, want float64 }{
		{0.5, 0.01 + 0.015*(5-4)/6.0},  // rank 5 in (0.01, 0.025]: 4 below, 6 in it
		{0.3, 0.005 + 0.005*(3-2)/2.0}, // rank 3 in (0.005, 0.01]: 2 below, 2 in it
		{0.2, 0.005},                   // rank 2: the top of (0.0025, 0.005]
		{0.1, 0.0025 + 0.0025*(1-0)/2}, // rank 1 in (0.0025, 0.005]: 0 below, 2 in it
		{1, 0.025},                     // rank 10: the top of (0.01, 0.025]
	} {
		if got := h.Quantile(c.q); math.Abs(got-c.want) > 1e-15 {
			t.Errorf("settled q%.2f = %v, want %v", c.q, got, c.want)
		}
	}
	r, err := histogramOf(sc, metricWaitDuration, e2e.Labels{"result": "refused"})
	if err != nil {
		t.Fatal(err)
	}
	// Rank 2 of 2 is in the +Inf bucket: the highest finite bound.
	if got := r.Quantile(0.99); got != 5 {
		t.Errorf("refused q0.99 = %v, want 5", got)
	}
	// Rank 1 of 2: the only observation of (0.5, 1], so its top.
	if got := r.Quantile(0.5); got != 1 {
		t.Errorf("refused q0.5 = %v, want 1", got)
	}
	all, err := h.Add(r)
	if err != nil {
		t.Fatal(err)
	}
	if all.Count != 12 || all.Sum != 2.6 || all.Cumulative[12] != 12 || all.Cumulative[9] != 11 {
		t.Fatalf("settled + refused: %+v", all)
	}
	back, err := all.Sub(r)
	if err != nil || !slices.Equal(back.Cumulative, h.Cumulative) || back.Count != h.Count {
		t.Fatalf("(settled + refused) - refused = %+v, %v; want %+v", back, err, h)
	}
	if got := (Histogram{}).Quantile(0.5); !math.IsNaN(got) {
		t.Errorf("an empty histogram's median = %v, want NaN", got)
	}
	if _, err := h.Sub(Histogram{Bounds: []float64{1, math.Inf(1)}, Cumulative: []float64{1, 1}}); err == nil {
		t.Error("subtracting other buckets: no error")
	}
}

func TestDedupCounts(t *testing.T) {
	settled := [13]int{0, 0, 2, 4, 10, 10, 10, 10, 10, 10, 10, 10, 12}
	refused := [13]int{0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1}
	c, err := dedupCountsOf(scrape(t, collectorScrape+waitBuckets("settled", settled, 0.2)+waitBuckets("refused", refused, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if c.Records["unique"] != 600 || c.Records["duplicate"] != 400 || c.ByTier["redis"] != 300 || c.ByTier["local"] != 100 || c.Released != 7 {
		t.Errorf("records %v, by tier %v, released %d", c.Records, c.ByTier, c.Released)
	}
	if c.Op("claim") != 11 || c.Op("recheck") != 4 || c.Op("commit") != 8 || c.Op("release") != 2 || c.RoundTrips() != 25 || c.Failed() != 1 {
		t.Errorf("requests %v: claim %d recheck %d commit %d release %d, all %d, failed %d",
			c.RedisRequests, c.Op("claim"), c.Op("recheck"), c.Op("commit"), c.Op("release"), c.RoundTrips(), c.Failed())
	}
	if c.RedisSeconds["claim"] != 0.5 || c.RedisSeconds["commit"] != 0.25 || len(c.RedisSeconds) != 2 {
		t.Errorf("redis seconds %v", c.RedisSeconds)
	}
	// The commits are sent after the sender is answered: not waited for.
	if w := c.WaitedRedisSeconds(); w != 0.5 {
		t.Errorf("waited redis seconds %v, want 0.5 (the claims', not the commits')", w)
	}
	if w := c.AllWaits(); w.Count != 13 || w.Cumulative[12] != 13 || c.Waits["refused"].Count != 1 {
		t.Errorf("waits: all %+v, refused %+v", w, c.Waits["refused"])
	}
	// Two collectors read twice: the sum of the deltas.
	two, err := c.Add(c)
	if err != nil {
		t.Fatal(err)
	}
	d, err := two.Sub(c)
	if err != nil {
		t.Fatal(err)
	}
	if d.Records["unique"] != 600 || d.RoundTrips() != 25 || d.Released != 7 || d.RedisSeconds["claim"] != 0.5 || d.AllWaits().Count != 13 {
		t.Errorf("(c + c) - c = %+v", d)
	}
	// A collector that has not waited yet exposes no wait series.
	none, err := dedupCountsOf(scrape(t, collectorScrape))
	if err != nil {
		t.Fatal(err)
	}
	if none.AllWaits().Count != 0 || !math.IsNaN(none.AllWaits().Quantile(0.5)) {
		t.Errorf("no waits: %+v", none.AllWaits())
	}
	if later, err := c.Sub(none); err != nil || later.AllWaits().Count != 13 {
		t.Errorf("waits since before the first wait: %+v, %v", later.AllWaits(), err)
	}
}

const redisInfo = "# Server\r\nredis_version:7.0.15\r\n# Memory\r\nused_memory:2500000\r\n# Stats\r\n" +
	"total_net_input_bytes:1000000\r\ntotal_net_output_bytes:250000\r\n# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:3.500000\r\n" +
	"# Commandstats\r\ncmdstat_evalsha:calls=10,usec=20000,usec_per_call=2000.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_set:calls=10010,usec=15000,usec_per_call=1.50,rejected_calls=0,failed_calls=0\r\n" +
	"# Keyspace\r\ndb0:keys=10020,expires=10020,avg_ttl=599000\r\n"

func TestParseRedisCounts(t *testing.T) {
	c, err := parseRedisCounts(ParseRedisInfo(redisInfo))
	if err != nil {
		t.Fatal(err)
	}
	if c.CPUSeconds != 4.75 || c.NetBytes != 1_250_000 || c.UsedMemory != 2_500_000 || c.Keys != 10020 ||
		c.Calls["evalsha"] != 10 || c.Usec["evalsha"] != 20000 || c.Calls["set"] != 10010 || c.Calls["get"] != 0 {
		t.Fatalf("%+v", c)
	}
	sum := c.add(c)
	if sum.NetBytes != 2_500_000 || sum.Keys != 20040 || sum.Calls["set"] != 20020 || sum.Usec["set"] != 30000 || sum.CPUSeconds != 9.5 {
		t.Errorf("sum of two nodes: %+v", sum)
	}
	if d := sum.sub(c); d.Keys != 10020 || d.Calls["evalsha"] != 10 || d.UsedMemory != 2_500_000 {
		t.Errorf("difference: %+v", d)
	}
	empty := strings.Replace(redisInfo, "db0:keys=10020,expires=10020,avg_ttl=599000\r\n", "", 1)
	if c, err := parseRedisCounts(ParseRedisInfo(empty)); err != nil || c.Keys != 0 {
		t.Errorf("an empty server: %+v, %v", c, err)
	}
	for _, bad := range []string{
		strings.Replace(redisInfo, "used_memory:2500000", "used_memory:lots", 1),
		strings.Replace(redisInfo, "total_net_output_bytes:250000\r\n", "", 1),
		strings.Replace(redisInfo, "keys=10020", "kees=10020", 1),
		strings.Replace(redisInfo, "keys=10020", "keys=many", 1),
	} {
		if _, err := parseRedisCounts(ParseRedisInfo(bad)); err == nil {
			t.Errorf("no error for %q", bad)
		}
	}
}

func TestHashTag(t *testing.T) {
	for key, want := range map[string]string{
		"dedup:0a1b2c3d:{b}\x01\x02":       "b",
		"dedup:0a1b2c3d:{tag7}claim:tok}x": "tag7",
		"dedup:0a1b2c3d:\x01{\x02}\x03":    "\x02", // a standalone digest's bytes: meaningless there
		"dedup:0a1b2c3d:{}{b}":             "",     // an empty tag: the whole key is hashed
		"dedup:0a1b2c3d:{open":             "",
		"dedup:0a1b2c3d:plain":             "",
		"}{a}":                             "a",
	} {
		if got := hashTag(key); got != want {
			t.Errorf("hashTag(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestPercentile(t *testing.T) {
	vs := []float64{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for p, want := range map[float64]float64{50: 5, 90: 9, 99: 10, 100: 10, 10: 1, 0: 1, 11: 2} {
		if got := Percentile(vs, p); got != want {
			t.Errorf("p%v = %v, want %v", p, got, want)
		}
	}
	if !math.IsNaN(Percentile(nil, 50)) {
		t.Error("no values: not NaN")
	}
	if !slices.Equal(vs, []float64{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}) {
		t.Error("Percentile reordered its input")
	}
}

func TestHistogramJSON(t *testing.T) {
	h := Histogram{Bounds: []float64{0.005, 1, math.Inf(1)}, Cumulative: []float64{1, 3, 4}, Count: 4, Sum: 2.5}
	js, err := json.Marshal(struct{ Waits Histogram }{h})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"Waits":{"Bounds":["0.005","1","+Inf"],"Cumulative":[1,3,4],"Count":4,"Sum":2.5}}`
	if string(js) != want {
		t.Fatalf("JSON = %s, want %s", js, want)
	}
}
