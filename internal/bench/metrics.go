package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/otelcol-dedup/otelcol-dedup/internal/e2e"
)

// The dedup processor's instruments a fleet run reads from each collector's
// metrics endpoint (processor/dedupprocessor/README.md#telemetry).
const (
	metricRecords       = "otelcol_processor_dedup_records"
	metricDuplicates    = "otelcol_processor_dedup_duplicates"
	metricReleased      = "otelcol_processor_dedup_released"
	metricWaitDuration  = "otelcol_processor_dedup_wait_duration"
	metricRedisRequests = "otelcol_processor_dedup_redis_requests"
	metricRedisDuration = "otelcol_processor_dedup_redis_duration"
)

// Histogram is a Prometheus histogram, possibly summed over several series
// (collectors, label values) with the same buckets: cumulative counts by
// upper bound, +Inf last.
type Histogram struct {
	Bounds     []float64
	Cumulative []float64
	Count, Sum float64
}

// MarshalJSON writes the bounds as Prometheus writes its le labels ("+Inf"
// for the last one): JSON has no infinity.
func (h Histogram) MarshalJSON() ([]byte, error) {
	bounds := make([]string, len(h.Bounds))
	for i, b := range h.Bounds {
		bounds[i] = strconv.FormatFloat(b, 'g', -1, 64)
	}
	return json.Marshal(struct {
		Bounds     []string
		Cumulative []float64
		Count, Sum float64
	}{bounds, h.Cumulative, h.Count, h.Sum})
}

// histogramOf reads the histogram called name (its _bucket, _count and _sum
// series) from a scrape, summing every series whose labels include filter.
// A histogram with no series is empty (Count 0).
func histogramOf(sc e2e.Scrape, name string, filter e2e.Labels) (Histogram, error) {
	byBound := map[float64]float64{}
	for _, s := range sc.Find(name+"_bucket", filter) {
		le, err := strconv.ParseFloat(s.Labels["le"], 64)
		if err != nil {
			return Histogram{}, fmt.Errorf("%s: le=%q: %w", s, s.Labels["le"], err)
		}
		byBound[le] += s.Value
	}
	h := Histogram{Count: sc.Sum(name+"_count", filter), Sum: sc.Sum(name+"_sum", filter)}
	for le := range byBound {
		h.Bounds = append(h.Bounds, le)
	}
	slices.Sort(h.Bounds)
	for _, le := range h.Bounds {
		h.Cumulative = append(h.Cumulative, byBound[le])
	}
	return h, nil
}

// Add sums two histograms; either may be empty (no buckets).
func (h Histogram) Add(o Histogram) (Histogram, error) {
	return h.combine(o, 1)
}

// Sub is what was observed between before and h (the same series read
// twice).
func (h Histogram) Sub(before Histogram) (Histogram, error) {
	return h.combine(before, -1)
}

func (h Histogram) combine(o Histogram, sign float64) (Histogram, error) {
	switch {
	case len(o.Bounds) == 0:
		return Histogram{Bounds: h.Bounds, Cumulative: h.Cumulative, Count: h.Count + sign*o.Count, Sum: h.Sum + sign*o.Sum}, nil
	case len(h.Bounds) == 0 && sign > 0:
		return o, nil
	case len(h.Bounds) == 0:
		return Histogram{}, fmt.Errorf("histogram: subtracting %v buckets from none", o.Bounds)
	case !slices.Equal(h.Bounds, o.Bounds):
		return Histogram{}, fmt.Errorf("histogram: buckets %v and %v differ", h.Bounds, o.Bounds)
	}
	out := Histogram{Bounds: h.Bounds, Cumulative: make([]float64, len(h.Bounds)), Count: h.Count + sign*o.Count, Sum: h.Sum + sign*o.Sum}
	for i := range h.Bounds {
		out.Cumulative[i] = h.Cumulative[i] + sign*o.Cumulative[i]
	}
	return out, nil
}

// Quantile estimates the q-quantile (0 < q <= 1) as PromQL's
// histogram_quantile does: it finds the bucket holding rank q*Count and
// interpolates linearly within it, the first bucket starting at 0; a rank
// in the +Inf bucket gives the highest finite bound. NaN if there are no
// observations.
func (h Histogram) Quantile(q float64) float64 {
	n := len(h.Bounds)
	if n == 0 || h.Cumulative[n-1] <= 0 || q <= 0 || q > 1 {
		return math.NaN()
	}
	rank := q * h.Cumulative[n-1]
	i, _ := slices.BinarySearchFunc(h.Cumulative, rank, func(c, r float64) int {
		if c < r {
			return -1
		}
		return 1
	})
	if math.IsInf(h.Bounds[i], 1) {
		if i == 0 {
			return math.NaN()
		}
		return h.Bounds[i-1]
	}
	lower, below := 0.0, 0.0
	if i > 0 {
		lower, below = h.Bounds[i-1], h.Cumulative[i-1]
	}
	inBucket := h.Cumulative[i] - below
	if inBucket <= 0 {
		return h.Bounds[i]
	}
	return lower + (h.Bounds[i]-lower)*(rank-below)/inBucket
}

// DedupCounts are a collector's dedup counters, or a fleet's summed over
// its collectors.
type DedupCounts struct {
	// Records by outcome (unique, duplicate, ...) and duplicates by tier
	// (batch, local, redis).
	Records, ByTier map[string]int64
	Released        int64
	// RedisRequests are the round trips by "op/result"; RedisSeconds the
	// time they took by op (the redis_duration histogram's sum).
	RedisRequests map[string]int64
	RedisSeconds  map[string]float64
	// Waits are the waits for other batches' pending claims, by result
	// (settled, refused).
	Waits map[string]Histogram
}

// dedupCountsOf reads the dedup counters of one scrape.
func dedupCountsOf(sc e2e.Scrape) (DedupCounts, error) {
	c := newDedupCounts()
	for _, s := range sc.Find(metricRecords, nil) {
		c.Records[s.Labels["outcome"]] += int64(s.Value)
	}
	for _, s := range sc.Find(metricDuplicates, nil) {
		c.ByTier[s.Labels["tier"]] += int64(s.Value)
	}
	c.Released = int64(sc.Sum(metricReleased, nil))
	for _, s := range sc.Find(metricRedisRequests, nil) {
		c.RedisRequests[s.Labels["op"]+"/"+s.Labels["result"]] += int64(s.Value)
	}
	for _, s := range sc.Find(metricRedisDuration+"_sum", nil) {
		c.RedisSeconds[s.Labels["op"]] += s.Value
	}
	for _, result := range []string{"settled", "refused"} {
		h, err := histogramOf(sc, metricWaitDuration, e2e.Labels{"result": result})
		if err != nil {
			return c, err
		}
		c.Waits[result] = h
	}
	return c, nil
}

// WaitedRedisSeconds is the time of the round trips a request waits out
// before its sender is answered: every op's but the commit's, which the
// processor queues and sends after the answer (it waits for a commit only
// when the queue is full, which these loads never fill).
func (c DedupCounts) WaitedRedisSeconds() float64 {
	var s float64
	for op, v := range c.RedisSeconds {
		if op != "commit" {
			s += v
		}
	}
	return s
}

func newDedupCounts() DedupCounts {
	return DedupCounts{Records: map[string]int64{}, ByTier: map[string]int64{}, RedisRequests: map[string]int64{},
		RedisSeconds: map[string]float64{}, Waits: map[string]Histogram{}}
}

// Add sums two collectors' counts.
func (c DedupCounts) Add(o DedupCounts) (DedupCounts, error) { return c.combine(o, 1) }

// Sub is what was counted between before and c.
func (c DedupCounts) Sub(before DedupCounts) (DedupCounts, error) { return c.combine(before, -1) }

func (c DedupCounts) combine(o DedupCounts, sign int64) (DedupCounts, error) {
	out := newDedupCounts()
	out.Released = c.Released + sign*o.Released
	for _, p := range []struct{ dst, a, b map[string]int64 }{
		{out.Records, c.Records, o.Records}, {out.ByTier, c.ByTier, o.ByTier}, {out.RedisRequests, c.RedisRequests, o.RedisRequests},
	} {
		for k, v := range p.a {
			p.dst[k] += v
		}
		for k, v := range p.b {
			p.dst[k] += sign * v
		}
	}
	for k, v := range c.RedisSeconds {
		out.RedisSeconds[k] += v
	}
	for k, v := range o.RedisSeconds {
		out.RedisSeconds[k] += float64(sign) * v
	}
	for _, result := range []string{"settled", "refused"} {
		h, err := c.Waits[result].combine(o.Waits[result], float64(sign))
		if err != nil {
			return out, fmt.Errorf("wait_duration{result=%q}: %w", result, err)
		}
		out.Waits[result] = h
	}
	return out, nil
}

// Op is the round trips of one op, whatever their result.
func (c DedupCounts) Op(op string) int64 {
	var n int64
	for _, result := range []string{"ok", "error", "timeout", "skipped"} {
		n += c.RedisRequests[op+"/"+result]
	}
	return n
}

// Failed is the round trips that did not succeed (error, timeout, skipped).
func (c DedupCounts) Failed() int64 {
	var n int64
	for _, op := range []string{"claim", "recheck", "commit", "release"} {
		n += c.Op(op) - c.RedisRequests[op+"/ok"]
	}
	return n
}

// RoundTrips is every round trip to Redis.
func (c DedupCounts) RoundTrips() int64 {
	var n int64
	for _, op := range []string{"claim", "recheck", "commit", "release"} {
		n += c.Op(op)
	}
	return n
}

// AllWaits is the settled and the refused waits together.
func (c DedupCounts) AllWaits() Histogram {
	h, err := c.Waits["settled"].Add(c.Waits["refused"])
	if err != nil {
		return c.Waits["settled"]
	}
	return h
}

// scrapeDedup scrapes the collectors' metrics endpoints and sums their
// dedup counts.
func scrapeDedup(ctx context.Context, urls []string) (DedupCounts, error) {
	sum, _, err := scrapeEach(ctx, urls)
	return sum, err
}

// scrapeEach scrapes the collectors' metrics endpoints: their dedup counts
// summed, and each one's.
func scrapeEach(ctx context.Context, urls []string) (DedupCounts, []DedupCounts, error) {
	sum := newDedupCounts()
	each := make([]DedupCounts, 0, len(urls))
	for _, u := range urls {
		sc, err := e2e.ScrapeMetrics(ctx, u)
		if err != nil {
			return sum, nil, err
		}
		c, err := dedupCountsOf(sc)
		if err != nil {
			return sum, nil, fmt.Errorf("%s: %w", u, err)
		}
		if sum, err = sum.Add(c); err != nil {
			return sum, nil, err
		}
		each = append(each, c)
	}
	return sum, each, nil
}
