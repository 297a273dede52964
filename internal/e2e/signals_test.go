package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"google.golang.org/grpc/metadata"
)

// sender is what the gRPC and HTTP clients do.
type sender interface {
	SendLogs(context.Context, plog.Logs) error
	SendTraces(context.Context, ptrace.Traces) error
	SendMetrics(context.Context, pmetric.Metrics) error
}

// sigLabels are the labels of a dedup processor's series for one signal,
// plus extra key/value pairs.
func sigLabels(processor, signal string, kv ...string) Labels {
	l := Labels{"processor": processor, "otel_signal": signal}
	for i := 0; i+1 < len(kv); i += 2 {
		l[kv[i]] = kv[i+1]
	}
	return l
}

// wantCounts checks a processor's records, duplicates, released and
// cache_entries series for one signal at once.
type dedupCounts struct {
	unique, duplicate, missingKey int
	batch, local, redis           int
	released                      int
	entries                       int
}

func wantCounts(t *testing.T, sc Scrape, processor, signal string, want dedupCounts) {
	t.Helper()
	l := func(kv ...string) Labels { return sigLabels(processor, signal, kv...) }
	wantMetric(t, sc, metricRecords, l("outcome", "unique"), float64(want.unique))
	wantMetric(t, sc, metricRecords, l("outcome", "duplicate"), float64(want.duplicate))
	wantMetric(t, sc, metricRecords, l("outcome", "missing_key"), float64(want.missingKey))
	wantMetric(t, sc, metricRecords, l(), float64(want.unique+want.duplicate+want.missingKey))
	wantMetric(t, sc, metricDuplicates, l("caught_by", "batch"), float64(want.batch))
	wantMetric(t, sc, metricDuplicates, l("caught_by", "local"), float64(want.local))
	wantMetric(t, sc, metricDuplicates, l("caught_by", "redis"), float64(want.redis))
	wantMetric(t, sc, metricDuplicates, l(), float64(want.duplicate))
	wantMetric(t, sc, metricReleased, l(), float64(want.released))
	wantMetric(t, sc, metricCacheEntries, l(), float64(want.entries))
}

func mustSend(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("send %s: %v", what, err)
	}
}

// ---- spans ----

// spanCorpus is a fixed set of distinct spans spread over resources of
// perResource spans each; every span has attributes, two events with
// attributes, a link with attributes, a trace state and a status.
type spanCorpus struct {
	td    ptrace.Traces
	where [][2]int // span i: resource index, index in its scope
}

func spanTraceID(i int) pcommon.TraceID {
	var id pcommon.TraceID
	id[0] = 0xe2
	binary.BigEndian.PutUint64(id[8:], uint64(i/20+1)) // 20 spans per trace
	return id
}

func spanSpanID(i int) pcommon.SpanID {
	var id pcommon.SpanID
	binary.BigEndian.PutUint64(id[:], uint64(i+1))
	return id
}

func newSpanCorpus(n, perResource int) *spanCorpus {
	td := ptrace.NewTraces()
	c := &spanCorpus{td: td}
	for i := range n {
		r := i / perResource
		for td.ResourceSpans().Len() <= r {
			rs := td.ResourceSpans().AppendEmpty()
			rs.Resource().Attributes().PutStr("service.name", fmt.Sprintf("svc-%d", td.ResourceSpans().Len()-1))
			ss := rs.ScopeSpans().AppendEmpty()
			ss.Scope().SetName("e2e")
			ss.Scope().SetVersion("1.0.0")
		}
		spans := td.ResourceSpans().At(r).ScopeSpans().At(0).Spans()
		sp := spans.AppendEmpty()
		c.where = append(c.where, [2]int{r, spans.Len() - 1})

		sp.SetTraceID(spanTraceID(i))
		sp.SetSpanID(spanSpanID(i))
		if root := i - i%20; root != i {
			sp.SetParentSpanID(spanSpanID(root))
		}
		sp.TraceState().FromRaw("vendor=e2e")
		sp.SetName(fmt.Sprintf("op-%d", i))
		sp.SetKind(ptrace.SpanKindServer)
		start := baseTime.Add(time.Duration(i) * time.Millisecond)
		sp.SetStartTimestamp(pcommon.NewTimestampFromTime(start))
		sp.SetEndTimestamp(pcommon.NewTimestampFromTime(start.Add(5 * time.Millisecond)))
		sp.Attributes().PutStr("http.route", fmt.Sprintf("/items/%d", i))
		sp.Attributes().PutInt("seq", int64(i))
		for k, name := range []string{"enqueue", "dequeue"} {
			ev := sp.Events().AppendEmpty()
			ev.SetName(name)
			ev.SetTimestamp(pcommon.NewTimestampFromTime(start.Add(time.Duration(k+1) * time.Millisecond)))
			ev.Attributes().PutInt("queue.depth", int64(i+k))
		}
		link := sp.Links().AppendEmpty()
		link.SetTraceID(spanTraceID(i + 1000))
		link.SetSpanID(spanSpanID(i + 1000))
		link.Attributes().PutStr("link.kind", "follows_from")
		if i%7 == 0 {
			sp.Status().SetCode(ptrace.StatusCodeError)
			sp.Status().SetMessage(fmt.Sprintf("error %d", i))
		} else {
			sp.Status().SetCode(ptrace.StatusCodeOk)
		}
	}
	return c
}

func (c *spanCorpus) span(i int) (ptrace.ResourceSpans, ptrace.ScopeSpans, ptrace.Span) {
	rs := c.td.ResourceSpans().At(c.where[i][0])
	ss := rs.ScopeSpans().At(0)
	return rs, ss, ss.Spans().At(c.where[i][1])
}

// batch returns a request holding copies of the spans at indices, in that
// order, grouped under their resources in order of first appearance.
func (c *spanCorpus) batch(indices ...int) ptrace.Traces {
	return c.batchWith(nil, indices...)
}

// batchWith is batch with mutate, if not nil, applied to each copy.
func (c *spanCorpus) batchWith(mutate func(i int, sp ptrace.Span), indices ...int) ptrace.Traces {
	td := ptrace.NewTraces()
	byRes := map[int]ptrace.SpanSlice{}
	for _, i := range indices {
		rs, ss, sp := c.span(i)
		out, ok := byRes[c.where[i][0]]
		if !ok {
			nrs := td.ResourceSpans().AppendEmpty()
			rs.Resource().CopyTo(nrs.Resource())
			nss := nrs.ScopeSpans().AppendEmpty()
			ss.Scope().CopyTo(nss.Scope())
			out = nss.Spans()
			byRes[c.where[i][0]] = out
		}
		cp := out.AppendEmpty()
		sp.CopyTo(cp)
		if mutate != nil {
			mutate(i, cp)
		}
	}
	return td
}

// oneSpan marshals a span with its resource and scope: two spans compare
// equal when everything a backend would store of them is equal.
func oneSpan(rs ptrace.ResourceSpans, ss ptrace.ScopeSpans, sp ptrace.Span) string {
	td := ptrace.NewTraces()
	nrs := td.ResourceSpans().AppendEmpty()
	rs.Resource().CopyTo(nrs.Resource())
	nss := nrs.ScopeSpans().AppendEmpty()
	ss.Scope().CopyTo(nss.Scope())
	sp.CopyTo(nss.Spans().AppendEmpty())
	b, err := (&ptrace.ProtoMarshaler{}).MarshalTraces(td)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func (c *spanCorpus) key(i int) string { return oneSpan(c.span(i)) }

// spanKeys counts every span of tds by oneSpan, and checks no resource or
// scope arrived empty.
func spanKeys(t *testing.T, tds []ptrace.Traces) (map[string]int, int) {
	t.Helper()
	counts := map[string]int{}
	total := 0
	for _, td := range tds {
		for i := range td.ResourceSpans().Len() {
			rs := td.ResourceSpans().At(i)
			if rs.ScopeSpans().Len() == 0 {
				t.Errorf("delivered a resource without scopes: %v", rs.Resource().Attributes().AsRaw())
			}
			for j := range rs.ScopeSpans().Len() {
				ss := rs.ScopeSpans().At(j)
				if ss.Spans().Len() == 0 {
					t.Errorf("delivered a scope without spans under %v", rs.Resource().Attributes().AsRaw())
				}
				for k := range ss.Spans().Len() {
					counts[oneSpan(rs, ss, ss.Spans().At(k))]++
					total++
				}
			}
		}
	}
	return counts, total
}

// TestTracesDedup: spans with the same trace_id and span_id (the default
// traces key), in the same request and in later ones, over gRPC and HTTP,
// arrive once each, whole (events, links, status), under their own
// resources; a request left with no span is not sent on.
// TestTracesDedup keys spans on their trace and span IDs, as a user who
// trusts the SDK's IDs does: a re-sent span whose attributes changed is
// still a copy. (The default, the whole span, is tested with the
// receivers' payloads.)
func TestTracesDedup(t *testing.T) {
	r := startCollector(t, nil, `
processors:
  dedup:
    traces: {key: [trace_id, span_id]}
service:
  pipelines:
    traces:
      receivers: [otlp]
      processors: [dedup]
      exporters: [otlp_grpc/sink]
`)
	c := newSpanCorpus(60, 30) // svc-0: spans 0-29, svc-1: spans 30-59
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	grpcS, httpS := r.grpcSender(), r.httpSender()

	// 0-39, and 0-9 again in the same request: 40 unique, 10 in-batch.
	mustSend(t, "request 1", grpcS.SendTraces(ctx, c.batch(slices.Concat(span(0, 40), span(0, 10))...)))
	// 40-59, 20-29 again (sent before), 40-44 again (in this request): 20
	// unique, 10 local, 5 in-batch. Every svc-0 span in it is a copy.
	mustSend(t, "request 2", httpS.SendTraces(ctx, c.batch(slices.Concat(span(40, 60), span(20, 30), span(40, 45))...)))
	// A re-sent 0-14 whose copies differ (an attribute, the end time) but
	// keep their trace_id and span_id: 15 local; nothing left to send on.
	mustSend(t, "request 3", grpcS.SendTraces(ctx, c.batchWith(func(_ int, sp ptrace.Span) {
		sp.Attributes().PutInt("retry.count", 1)
		sp.SetEndTimestamp(sp.EndTimestamp() + 1)
	}, span(0, 15)...)))

	sc := r.scrape()
	wantCounts(t, sc, "dedup", "traces", dedupCounts{unique: 60, duplicate: 40, batch: 15, local: 25, entries: 60})
	wantSeriesIdentifyProcessor(t, sc)
	if n := len(sc.Find(metricRecords, Labels{"otel_signal": "logs"})) + len(sc.Find(metricRecords, Labels{"otel_signal": "metrics"})); n != 0 {
		t.Errorf("a traces-only collector exported %d records series of other signals: %v", n, sc.Find(metricRecords, nil))
	}

	r.stop()
	if got := r.sink.Requests(); got != 2 {
		t.Errorf("sink got %d requests, want 2 (request 3 held only duplicates)", got)
	}
	tds := r.sink.Traces()
	if len(tds) == 2 {
		if n := tds[1].ResourceSpans().Len(); n != 1 {
			t.Errorf("request 2 arrived with %d resources, want 1 (svc-0 held only copies)", n)
		}
	}
	counts, total := spanKeys(t, tds)
	if total != 60 {
		t.Errorf("sink received %d spans, want 60", total)
	}
	for i := range 60 {
		if n := counts[c.key(i)]; n != 1 {
			t.Errorf("span %d (as first sent: events, links, status, resource) delivered %d times, want once", i, n)
		}
	}
	events, links := 0, 0
	for _, td := range tds {
		for i := range td.ResourceSpans().Len() {
			ss := td.ResourceSpans().At(i).ScopeSpans()
			for j := range ss.Len() {
				for k := range ss.At(j).Spans().Len() {
					sp := ss.At(j).Spans().At(k)
					events += sp.Events().Len()
					links += sp.Links().Len()
					if _, ok := sp.Attributes().Get("retry.count"); ok {
						t.Errorf("span %v delivered as its later copy (retry.count set), want the first", sp.SpanID())
					}
				}
			}
		}
	}
	if events != 120 || links != 60 {
		t.Errorf("sink received %d events and %d links, want 120 and 60", events, links)
	}
}

// ---- metric points ----

// scrapeMetrics is one scrape of an agent: 16 points of every type (gauge 4,
// sum 4, histogram 3, exponential histogram 3, summary 2) at the scrape's
// timestamp; the same scrape and replica give byte-identical points.
// replica, if not empty, is set as the resource attribute "replica".
func scrapeMetrics(scrape int, replica string) pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("service.name", "node-exporter")
	rm.Resource().Attributes().PutStr("host.name", "node-1")
	if replica != "" {
		rm.Resource().Attributes().PutStr("replica", replica)
	}
	sm := rm.ScopeMetrics().AppendEmpty()
	sm.Scope().SetName("e2e")
	sm.Scope().SetVersion("1.0.0")
	start := pcommon.NewTimestampFromTime(baseTime)
	ts := pcommon.NewTimestampFromTime(baseTime.Add(time.Duration(scrape+1) * 10 * time.Second))
	f := float64(scrape)

	g := sm.Metrics().AppendEmpty()
	g.SetName("system.cpu.load")
	g.SetUnit("1")
	gauge := g.SetEmptyGauge()
	for i := range 4 {
		p := gauge.DataPoints().AppendEmpty()
		p.Attributes().PutInt("cpu", int64(i))
		p.SetTimestamp(ts)
		p.SetDoubleValue(0.25*float64(i) + f)
	}
	s := sm.Metrics().AppendEmpty()
	s.SetName("http.server.requests")
	s.SetUnit("{requests}")
	sum := s.SetEmptySum()
	sum.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	sum.SetIsMonotonic(true)
	for i := range 4 {
		p := sum.DataPoints().AppendEmpty()
		p.Attributes().PutStr("http.route", fmt.Sprintf("/r%d", i))
		p.SetStartTimestamp(start)
		p.SetTimestamp(ts)
		p.SetIntValue(int64(100*scrape + i))
	}
	h := sm.Metrics().AppendEmpty()
	h.SetName("http.server.duration")
	h.SetUnit("ms")
	hist := h.SetEmptyHistogram()
	hist.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	for i := range 3 {
		p := hist.DataPoints().AppendEmpty()
		p.Attributes().PutStr("http.route", fmt.Sprintf("/r%d", i))
		p.SetStartTimestamp(start)
		p.SetTimestamp(ts)
		p.ExplicitBounds().FromRaw([]float64{1, 5, 10})
		p.BucketCounts().FromRaw([]uint64{1, 2, 3, uint64(4 + scrape)})
		p.SetCount(uint64(10 + scrape))
		p.SetSum(42.5 + f)
		p.SetMin(0.1)
		p.SetMax(12 + f)
	}
	e := sm.Metrics().AppendEmpty()
	e.SetName("rpc.message.size")
	e.SetUnit("By")
	eh := e.SetEmptyExponentialHistogram()
	eh.SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
	for i := range 3 {
		p := eh.DataPoints().AppendEmpty()
		p.Attributes().PutStr("rpc.method", fmt.Sprintf("M%d", i))
		p.SetStartTimestamp(pcommon.NewTimestampFromTime(baseTime.Add(time.Duration(scrape) * 10 * time.Second)))
		p.SetTimestamp(ts)
		p.SetScale(2)
		p.SetZeroCount(1)
		p.Positive().SetOffset(3)
		p.Positive().BucketCounts().FromRaw([]uint64{1, 2, uint64(3 + scrape)})
		p.SetCount(uint64(7 + scrape))
		p.SetSum(99.5 + f)
	}
	q := sm.Metrics().AppendEmpty()
	q.SetName("gc.pause")
	q.SetUnit("s")
	summary := q.SetEmptySummary()
	for i := range 2 {
		p := summary.DataPoints().AppendEmpty()
		p.Attributes().PutStr("gc", fmt.Sprintf("gen%d", i))
		p.SetStartTimestamp(start)
		p.SetTimestamp(ts)
		p.SetCount(uint64(5 + scrape))
		p.SetSum(12.3 + f)
		for _, qv := range [][2]float64{{0.5, 1}, {0.99, 3 + f}} {
			v := p.QuantileValues().AppendEmpty()
			v.SetQuantile(qv[0])
			v.SetValue(qv[1])
		}
	}
	return md
}

// concatMetrics returns one request holding the resources of every md.
func concatMetrics(mds ...pmetric.Metrics) pmetric.Metrics {
	out := pmetric.NewMetrics()
	for _, md := range mds {
		md.ResourceMetrics().MoveAndAppendTo(out.ResourceMetrics())
	}
	return out
}

func pointCount(m pmetric.Metric) int {
	switch m.Type() {
	case pmetric.MetricTypeGauge:
		return m.Gauge().DataPoints().Len()
	case pmetric.MetricTypeSum:
		return m.Sum().DataPoints().Len()
	case pmetric.MetricTypeHistogram:
		return m.Histogram().DataPoints().Len()
	case pmetric.MetricTypeExponentialHistogram:
		return m.ExponentialHistogram().DataPoints().Len()
	case pmetric.MetricTypeSummary:
		return m.Summary().DataPoints().Len()
	}
	return 0
}

// keepPoint removes every point of m but the p-th.
func keepPoint(m pmetric.Metric, p int) {
	i := 0
	drop := func() bool { keep := i == p; i++; return !keep }
	switch m.Type() {
	case pmetric.MetricTypeGauge:
		m.Gauge().DataPoints().RemoveIf(func(pmetric.NumberDataPoint) bool { return drop() })
	case pmetric.MetricTypeSum:
		m.Sum().DataPoints().RemoveIf(func(pmetric.NumberDataPoint) bool { return drop() })
	case pmetric.MetricTypeHistogram:
		m.Histogram().DataPoints().RemoveIf(func(pmetric.HistogramDataPoint) bool { return drop() })
	case pmetric.MetricTypeExponentialHistogram:
		m.ExponentialHistogram().DataPoints().RemoveIf(func(pmetric.ExponentialHistogramDataPoint) bool { return drop() })
	case pmetric.MetricTypeSummary:
		m.Summary().DataPoints().RemoveIf(func(pmetric.SummaryDataPoint) bool { return drop() })
	}
}

// pointKeys counts every data point of mds, each marshaled whole with its
// resource, scope and metric (value included), and checks no resource,
// scope or metric arrived empty. strip, if not empty, names a resource
// attribute left out of the keys.
func pointKeys(t *testing.T, mds []pmetric.Metrics, strip string) (map[string]int, int) {
	t.Helper()
	counts := map[string]int{}
	total := 0
	var mar pmetric.ProtoMarshaler
	for _, md := range mds {
		for i := range md.ResourceMetrics().Len() {
			rm := md.ResourceMetrics().At(i)
			if rm.ScopeMetrics().Len() == 0 {
				t.Errorf("delivered a resource without scopes: %v", rm.Resource().Attributes().AsRaw())
			}
			for j := range rm.ScopeMetrics().Len() {
				sm := rm.ScopeMetrics().At(j)
				if sm.Metrics().Len() == 0 {
					t.Errorf("delivered a scope without metrics under %v", rm.Resource().Attributes().AsRaw())
				}
				for k := range sm.Metrics().Len() {
					m := sm.Metrics().At(k)
					n := pointCount(m)
					if n == 0 {
						t.Errorf("delivered metric %s without points", m.Name())
					}
					for p := range n {
						one := pmetric.NewMetrics()
						orm := one.ResourceMetrics().AppendEmpty()
						rm.Resource().CopyTo(orm.Resource())
						if strip != "" {
							orm.Resource().Attributes().Remove(strip)
						}
						osm := orm.ScopeMetrics().AppendEmpty()
						sm.Scope().CopyTo(osm.Scope())
						om := osm.Metrics().AppendEmpty()
						m.CopyTo(om)
						keepPoint(om, p)
						b, err := mar.MarshalMetrics(one)
						if err != nil {
							t.Fatal(err)
						}
						counts[string(b)]++
						total++
					}
				}
			}
		}
	}
	return counts, total
}

// wantPoints checks that every point of want arrived exactly times times,
// and that nothing else arrived.
func wantPoints(t *testing.T, got map[string]int, gotTotal int, times int, want ...pmetric.Metrics) {
	t.Helper()
	wantKeys, wantTotal := pointKeys(t, want, "")
	if gotTotal != times*wantTotal {
		t.Errorf("sink received %d points, want %d", gotTotal, times*wantTotal)
	}
	bad := 0
	for k, n := range wantKeys {
		if got[k] != times*n {
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d expected points did not arrive exactly %d time(s)", bad, len(wantKeys), times)
	}
}

// TestMetricsDedup: gauge, sum, histogram, exponential histogram and
// summary points with exact-duplicate retries (in the same request and in
// later ones, over gRPC and HTTP) arrive once each with their values, and
// metrics, scopes and resources left without points are pruned.
func TestMetricsDedup(t *testing.T) {
	r := startCollector(t, nil, `
processors:
  dedup:
service:
  pipelines:
    metrics:
      receivers: [otlp]
      processors: [dedup]
      exporters: [otlp_grpc/sink]
`)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	grpcS, httpS := r.grpcSender(), r.httpSender()

	// Scrape 0 with, in the same request, a second copy of its histogram
	// (3 points) and of its first gauge point: 16 unique, 4 in-batch.
	req1 := scrapeMetrics(0, "")
	ms := req1.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics()
	ms.At(2).CopyTo(ms.AppendEmpty())
	gp := ms.At(0).Gauge().DataPoints()
	gp.At(0).CopyTo(gp.AppendEmpty())
	if n := req1.DataPointCount(); n != 20 {
		t.Fatalf("test bug: request 1 has %d points, want 20", n)
	}
	mustSend(t, "request 1", grpcS.SendMetrics(ctx, req1))
	// Scrape 1, and scrape 0 re-sent in the same request: 16 unique, 16 local.
	mustSend(t, "request 2", httpS.SendMetrics(ctx, concatMetrics(scrapeMetrics(1, ""), scrapeMetrics(0, ""))))
	// Scrapes 0 and 1 re-sent: 32 local; nothing left to send on.
	mustSend(t, "request 3", grpcS.SendMetrics(ctx, concatMetrics(scrapeMetrics(0, ""), scrapeMetrics(1, ""))))
	// Scrape 2: the same streams at a new timestamp are new points.
	mustSend(t, "request 4", grpcS.SendMetrics(ctx, scrapeMetrics(2, "")))

	sc := r.scrape()
	wantCounts(t, sc, "dedup", "metrics", dedupCounts{unique: 48, duplicate: 52, batch: 4, local: 48, entries: 48})
	wantSeriesIdentifyProcessor(t, sc)

	r.stop()
	mds := r.sink.Metrics()
	if len(mds) != 3 {
		t.Fatalf("sink got %d metrics requests, want 3 (request 3 held only duplicates)", len(mds))
	}
	// Request 1 arrives as scrape 0 exactly: the emptied histogram copy is
	// removed, the gauge copy dropped.
	if got := mds[0].ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics().Len(); got != 5 {
		t.Errorf("request 1 arrived with %d metrics, want 5 (the emptied copy removed)", got)
	}
	if got := mds[1].ResourceMetrics().Len(); got != 1 {
		t.Errorf("request 2 arrived with %d resources, want 1 (the re-sent scrape 0 removed)", got)
	}
	got, total := pointKeys(t, mds, "")
	wantPoints(t, got, total, 1, scrapeMetrics(0, ""), scrapeMetrics(1, ""), scrapeMetrics(2, ""))
}

// TestHAPair: two agents (resource attribute replica: a|b) send the same
// points, in turn and concurrently. With metrics.ignore on the replica
// attribute exactly one copy of each point is delivered (the first one
// sent); with the default identity the replicas' points are distinct and
// both are delivered; a replica's own retry is dropped either way.
func TestHAPair(t *testing.T) {
	cases := []struct {
		name   string
		config string
		unique int
		dups   int
		copies int // deliveries of each point, replica aside
	}{
		// a0, b0 (dup), b1, a1 (dup), a0 retry (dup), then scrapes 2-9 from
		// both at once: one of each pair.
		{"ignore_replica", `
processors:
  dedup/ha:
    metrics:
      ignore: ['resource.attributes["replica"]']
service:
  pipelines:
    metrics:
      receivers: [otlp]
      processors: [dedup/ha]
      exporters: [otlp_grpc/sink]
`, 32 + 128, 48 + 128, 1},
		{"default", `
processors:
  dedup/ha:
service:
  pipelines:
    metrics:
      receivers: [otlp]
      processors: [dedup/ha]
      exporters: [otlp_grpc/sink]
`, 64 + 256, 16, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := startCollector(t, nil, tc.config)
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			defer cancel()
			agentA, agentB := r.grpcSender(), r.httpSender()

			mustSend(t, "a scrape 0", agentA.SendMetrics(ctx, scrapeMetrics(0, "a")))
			mustSend(t, "b scrape 0", agentB.SendMetrics(ctx, scrapeMetrics(0, "b")))
			mustSend(t, "b scrape 1", agentB.SendMetrics(ctx, scrapeMetrics(1, "b")))
			mustSend(t, "a scrape 1", agentA.SendMetrics(ctx, scrapeMetrics(1, "a")))
			mustSend(t, "a scrape 0 retry", agentA.SendMetrics(ctx, scrapeMetrics(0, "a")))
			var wg sync.WaitGroup
			errs := make(chan error, 16)
			for s := 2; s < 10; s++ {
				for _, ag := range []struct {
					replica string
					send    sender
				}{{"a", agentA}, {"b", agentB}} {
					wg.Go(func() {
						if err := ag.send.SendMetrics(ctx, scrapeMetrics(s, ag.replica)); err != nil {
							errs <- fmt.Errorf("%s scrape %d: %w", ag.replica, s, err)
						}
					})
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}

			sc := r.scrape()
			l := func(kv ...string) Labels { return sigLabels("dedup/ha", "metrics", kv...) }
			wantMetric(t, sc, metricRecords, l("outcome", "unique"), float64(tc.unique))
			wantMetric(t, sc, metricRecords, l("outcome", "duplicate"), float64(tc.dups))
			wantMetric(t, sc, metricDuplicates, l(), float64(tc.dups))
			wantMetric(t, sc, metricCacheEntries, l(), float64(tc.unique))

			r.stop()
			var all []pmetric.Metrics
			for s := range 10 {
				all = append(all, scrapeMetrics(s, ""))
			}
			got, total := pointKeys(t, r.sink.Metrics(), "replica")
			wantPoints(t, got, total, tc.copies, all...)
			if tc.copies == 1 {
				// In turn, the first replica to send wins: a's scrape 0, b's scrape 1.
				exact, _ := pointKeys(t, r.sink.Metrics(), "")
				for _, first := range []struct {
					scrape  int
					replica string
				}{{0, "a"}, {1, "b"}} {
					keys, _ := pointKeys(t, []pmetric.Metrics{scrapeMetrics(first.scrape, first.replica)}, "")
					for k := range keys {
						if exact[k] != 1 {
							t.Errorf("scrape %d: a point was not delivered as replica %s, which sent it first", first.scrape, first.replica)
							break
						}
					}
				}
			} else {
				exact, _ := pointKeys(t, r.sink.Metrics(), "")
				for _, rep := range []string{"a", "b"} {
					var reps []pmetric.Metrics
					for s := range 10 {
						reps = append(reps, scrapeMetrics(s, rep))
					}
					keys, _ := pointKeys(t, reps, "")
					for k := range keys {
						if exact[k] != 1 {
							t.Errorf("a point of replica %s delivered %d times, want once", rep, exact[k])
							break
						}
					}
				}
			}
		})
	}
}

// TestTenants: with include_metadata on both OTLP protocols and
// metadata_keys: [X-Scope-OrgID] (no batch processor in front of dedup),
// two tenants sending identical events both get them delivered, each
// tenant's own retry is dropped whichever protocol it comes over, and a
// request without the header is a tenant of its own.
func TestTenants(t *testing.T) {
	r := startCollector(t, nil, `
receivers:
  otlp:
    protocols:
      grpc:
        include_metadata: true
      http:
        include_metadata: true
processors:
  dedup:
    metadata_keys: [X-Scope-OrgID]
service:
  pipelines:
    logs:
      receivers: [otlp]
      processors: [dedup]
      exporters: [otlp_grpc/sink]
`)
	c := newCorpus(10, nil)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	ctxA := metadata.AppendToOutgoingContext(ctx, "X-Scope-OrgID", "a")
	grpcS := r.grpcSender()
	httpA, httpB, httpNone := r.httpSender(), r.httpSender(), r.httpSender()
	httpA.Header = map[string][]string{"X-Scope-OrgID": {"a"}}
	httpB.Header = map[string][]string{"X-Scope-OrgID": {"b"}}
	req := func() plog.Logs { return c.batch(span(0, 10)...) }

	steps := []struct {
		what   string
		send   func() error
		unique int // running totals after the step
		dups   int
	}{
		{"tenant a over gRPC", func() error { return grpcS.SendLogs(ctxA, req()) }, 10, 0},
		{"tenant b over HTTP, the same events", func() error { return httpB.SendLogs(ctx, req()) }, 20, 0},
		{"tenant a's retry", func() error { return grpcS.SendLogs(ctxA, req()) }, 20, 10},
		{"tenant b's retry", func() error { return httpB.SendLogs(ctx, req()) }, 20, 20},
		{"tenant a's retry over HTTP", func() error { return httpA.SendLogs(ctx, req()) }, 20, 30},
		{"no tenant header, over gRPC", func() error { return grpcS.SendLogs(ctx, req()) }, 30, 30},
		{"no tenant header, over HTTP", func() error { return httpNone.SendLogs(ctx, req()) }, 30, 40},
	}
	for _, st := range steps {
		mustSend(t, st.what, st.send())
		sc := r.scrape()
		l := func(kv ...string) Labels { return dedupLabels("dedup", kv...) }
		if sc.Sum(metricRecords, l("outcome", "unique")) != float64(st.unique) ||
			sc.Sum(metricRecords, l("outcome", "duplicate")) != float64(st.dups) {
			t.Errorf("after %s: unique %g, duplicate %g; want %d, %d", st.what,
				sc.Sum(metricRecords, l("outcome", "unique")), sc.Sum(metricRecords, l("outcome", "duplicate")), st.unique, st.dups)
		}
	}
	sc := r.scrape()
	wantCounts(t, sc, "dedup", "logs", dedupCounts{unique: 30, duplicate: 40, local: 40, entries: 30})

	r.stop()
	if got := r.sink.Requests(); got != 3 {
		t.Errorf("sink got %d requests, want 3 (tenant a, tenant b, no tenant)", got)
	}
	wantEach(t, r.sink, c, span(0, 10), 3) // once per tenant
}

// TestOneDedupAllSignals: one dedup entry in a logs, a traces and a metrics
// pipeline is three instances: each signal's series are its own and exact,
// and so is each cache.
func TestOneDedupAllSignals(t *testing.T) {
	r := startCollector(t, nil, `
processors:
  dedup:
service:
  pipelines:
    logs:
      receivers: [otlp]
      processors: [dedup]
      exporters: [otlp_grpc/sink]
    traces:
      receivers: [otlp]
      processors: [dedup]
      exporters: [otlp_grpc/sink]
    metrics:
      receivers: [otlp]
      processors: [dedup]
      exporters: [otlp_http/sink]
`)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	grpcS, httpS := r.grpcSender(), r.httpSender()

	// Logs: 10 unique, 3 in-batch copies, then 4 re-sent.
	lc := newCorpus(10, nil)
	mustSend(t, "logs 1", grpcS.SendLogs(ctx, lc.batch(slices.Concat(span(0, 10), span(0, 3))...)))
	mustSend(t, "logs 2", httpS.SendLogs(ctx, lc.batch(span(6, 10)...)))
	// Spans: 7 unique, then 5 re-sent.
	tc := newSpanCorpus(7, 7)
	mustSend(t, "traces 1", httpS.SendTraces(ctx, tc.batch(span(0, 7)...)))
	mustSend(t, "traces 2", grpcS.SendTraces(ctx, tc.batch(span(2, 7)...)))
	// Points: 16 unique, re-sent twice.
	for i := range 3 {
		mustSend(t, fmt.Sprintf("metrics %d", i+1), grpcS.SendMetrics(ctx, scrapeMetrics(0, "")))
	}

	sc := r.scrape()
	wantCounts(t, sc, "dedup", "logs", dedupCounts{unique: 10, duplicate: 7, batch: 3, local: 4, entries: 10})
	wantCounts(t, sc, "dedup", "traces", dedupCounts{unique: 7, duplicate: 5, local: 5, entries: 7})
	wantCounts(t, sc, "dedup", "metrics", dedupCounts{unique: 16, duplicate: 32, local: 32, entries: 16})
	wantMetric(t, sc, metricRecords, Labels{"processor": "dedup"}, 10+7+7+5+16+32)
	wantSeriesIdentifyProcessor(t, sc)
	for _, s := range sc.Find(metricCacheEntries, nil) {
		t.Logf("scraped: %v", s)
	}

	r.stop()
	if n := r.sink.LogRecordCount(); n != 10 {
		t.Errorf("sink received %d log records, want 10", n)
	}
	wantEachOnce(t, r.sink, lc, span(0, 10))
	counts, total := spanKeys(t, r.sink.Traces())
	if total != 7 {
		t.Errorf("sink received %d spans, want 7", total)
	}
	for i := range 7 {
		if counts[tc.key(i)] != 1 {
			t.Errorf("span %d delivered %d times, want once", i, counts[tc.key(i)])
		}
	}
	got, gotTotal := pointKeys(t, r.sink.Metrics(), "")
	wantPoints(t, got, gotTotal, 1, scrapeMetrics(0, ""))
}
