package dedupprocessor

import (
	"context"
	"slices"
	"testing"

	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processortest"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// signalHarness creates a processor for any signal with a metric reader.
func signalHarness[P any](t *testing.T, signal string, create func(processor.Settings) (P, error)) (P, *harness) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	set := processortest.NewNopSettings(componentType)
	set.MeterProvider = mp
	p, err := create(set)
	if err != nil {
		t.Fatal(err)
	}
	return p, &harness{t: t, reader: reader, id: set.ID, signal: signal}
}

func span(td ptrace.Traces, service string, traceID byte, spanID byte, name string) ptrace.Span {
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", service)
	sp := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	sp.SetTraceID(pcommon.TraceID{traceID})
	sp.SetSpanID(pcommon.SpanID{spanID})
	sp.SetName(name)
	return sp
}

func TestTracesDedupBySpanIDKeepsEventsAndPrunes(t *testing.T) {
	sink := new(consumertest.TracesSink)
	cfg := defaultConfig()
	cfg.Traces.Key = []string{"trace_id", "span_id"}
	p, h := signalHarness(t, "traces", func(set processor.Settings) (processor.Traces, error) {
		return NewFactory().CreateTraces(context.Background(), set, cfg, sink)
	})
	defer func() { _ = p.Shutdown(context.Background()) }()
	td := ptrace.NewTraces()
	a := span(td, "svc", 1, 1, "a")
	a.Events().AppendEmpty().SetName("ev")
	a.Links().AppendEmpty().SetTraceID(pcommon.TraceID{9})
	span(td, "svc", 1, 2, "b")
	span(td, "svc", 1, 1, "a retried") // same trace_id+span_id: duplicate
	span(td, "svc", 0, 0, "no ids")    // no key: passes, counted missing_key
	if err := p.ConsumeTraces(context.Background(), td); err != nil {
		t.Fatal(err)
	}
	got := sink.AllTraces()[0]
	if got.SpanCount() != 3 || got.ResourceSpans().Len() != 3 {
		t.Fatalf("spans=%d resources=%d, want 3 and 3 (the duplicate's resource pruned)", got.SpanCount(), got.ResourceSpans().Len())
	}
	kept := got.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0)
	if kept.Name() != "a" || kept.Events().Len() != 1 || kept.Links().Len() != 1 {
		t.Fatalf("kept span %q with %d events, %d links", kept.Name(), kept.Events().Len(), kept.Links().Len())
	}
	if u, d, m := h.outcome("unique"), h.outcome("duplicate"), h.outcome("missing_key"); u != 2 || d != 1 || m != 1 {
		t.Fatalf("unique=%d duplicate=%d missing_key=%d, want 2 1 1", u, d, m)
	}
}

func TestTracesContentIdentity(t *testing.T) {
	sink := new(consumertest.TracesSink)
	cfg := defaultConfig()
	cfg.Traces.Key = []string{}
	cfg.Traces.Ignore = []string{`attributes["attempt"]`}
	p, h := signalHarness(t, "traces", func(set processor.Settings) (processor.Traces, error) {
		return NewFactory().CreateTraces(context.Background(), set, cfg, sink)
	})
	defer func() { _ = p.Shutdown(context.Background()) }()
	td := ptrace.NewTraces()
	span(td, "svc", 1, 1, "a").Attributes().PutInt("attempt", 1)
	span(td, "svc", 1, 1, "a").Attributes().PutInt("attempt", 2) // differs only in an ignored field
	span(td, "svc", 1, 1, "a").Status().SetMessage("other")      // same ids, other content
	if err := p.ConsumeTraces(context.Background(), td); err != nil {
		t.Fatal(err)
	}
	if n := sink.SpanCount(); n != 2 {
		t.Fatalf("delivered %d spans, want 2", n)
	}
	if d := h.outcome("duplicate"); d != 1 {
		t.Fatalf("duplicate = %d, want 1", d)
	}
}

// addPoints appends to md one resource of replica with one point of each
// type (gauge, sum, histogram, exponential histogram, summary) at ts.
func addPoints(md pmetric.Metrics, replica string, ts uint64) {
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("service.name", "agent")
	rm.Resource().Attributes().PutStr("replica", replica)
	ms := rm.ScopeMetrics().AppendEmpty().Metrics()
	g := ms.AppendEmpty()
	g.SetName("temp")
	dp := g.SetEmptyGauge().DataPoints().AppendEmpty()
	dp.SetTimestamp(pcommon.Timestamp(ts))
	dp.SetDoubleValue(21.5)
	s := ms.AppendEmpty()
	s.SetName("requests")
	s.SetEmptySum().SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	sdp := s.Sum().DataPoints().AppendEmpty()
	sdp.SetStartTimestamp(1)
	sdp.SetTimestamp(pcommon.Timestamp(ts))
	sdp.SetIntValue(10)
	sdp.Attributes().PutStr("code", "200")
	h := ms.AppendEmpty()
	h.SetName("latency")
	hdp := h.SetEmptyHistogram().DataPoints().AppendEmpty()
	hdp.SetTimestamp(pcommon.Timestamp(ts))
	e := ms.AppendEmpty()
	e.SetName("latency_exp")
	edp := e.SetEmptyExponentialHistogram().DataPoints().AppendEmpty()
	edp.SetTimestamp(pcommon.Timestamp(ts))
	su := ms.AppendEmpty()
	su.SetName("rpc")
	sudp := su.SetEmptySummary().DataPoints().AppendEmpty()
	sudp.SetTimestamp(pcommon.Timestamp(ts))
}

func TestMetricsDedupEveryPointTypeAndHAPair(t *testing.T) {
	tests := []struct {
		name      string
		ignore    []string
		delivered int
		dups      int64
	}{
		// Without ignore, the two replicas are different streams: only the
		// retry of replica a collapses.
		{name: "replicas differ", delivered: 10, dups: 5},
		// Ignoring the replica attribute collapses the HA pair's copies.
		{name: "ha pair", ignore: []string{`resource.attributes["replica"]`}, delivered: 5, dups: 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sink := new(consumertest.MetricsSink)
			cfg := defaultConfig()
			cfg.Metrics.Ignore = tt.ignore
			p, h := signalHarness(t, "metrics", func(set processor.Settings) (processor.Metrics, error) {
				return NewFactory().CreateMetrics(context.Background(), set, cfg, sink)
			})
			defer func() { _ = p.Shutdown(context.Background()) }()
			md := pmetric.NewMetrics()
			addPoints(md, "a", 100)
			addPoints(md, "b", 100)
			if err := p.ConsumeMetrics(context.Background(), md); err != nil {
				t.Fatal(err)
			}
			retry := pmetric.NewMetrics()
			addPoints(retry, "a", 100)
			if err := p.ConsumeMetrics(context.Background(), retry); err != nil {
				t.Fatal(err)
			}
			if n := sink.DataPointCount(); n != tt.delivered {
				t.Fatalf("delivered %d points, want %d", n, tt.delivered)
			}
			if d := h.outcome("duplicate"); d != tt.dups {
				t.Fatalf("duplicate = %d, want %d", d, tt.dups)
			}
			// Metrics left without points are gone, not sent empty.
			for _, md := range sink.AllMetrics() {
				for i := 0; i < md.ResourceMetrics().Len(); i++ {
					ms := md.ResourceMetrics().At(i).ScopeMetrics().At(0).Metrics()
					for j := 0; j < ms.Len(); j++ {
						if pointCount(ms.At(j)) == 0 {
							t.Fatalf("metric %q delivered without points", ms.At(j).Name())
						}
					}
				}
			}
		})
	}
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

func TestMetricsNewTimestampIsNewPointAndKeyedByName(t *testing.T) {
	sink := new(consumertest.MetricsSink)
	cfg := defaultConfig()
	cfg.Metrics.Key = []string{`metric.name`, `attributes["code"]`}
	p, h := signalHarness(t, "metrics", func(set processor.Settings) (processor.Metrics, error) {
		return NewFactory().CreateMetrics(context.Background(), set, cfg, sink)
	})
	defer func() { _ = p.Shutdown(context.Background()) }()
	md := pmetric.NewMetrics()
	addPoints(md, "a", 100)
	addPoints(md, "a", 200)
	if err := p.ConsumeMetrics(context.Background(), md); err != nil {
		t.Fatal(err)
	}
	// Only the sum has a code attribute: its second point is a duplicate by
	// this key; the other 4 types lack the key: 8 points pass as missing.
	if n, m, d := sink.DataPointCount(), h.outcome("missing_key"), h.outcome("duplicate"); n != 9 || m != 8 || d != 1 {
		t.Fatalf("delivered=%d missing_key=%d duplicate=%d, want 9 8 1", n, m, d)
	}
}

func TestMetadataKeysPartitionTenants(t *testing.T) {
	sink := new(consumertest.LogsSink)
	cfg := defaultConfig()
	cfg.MetadataKeys = []string{"X-Scope-OrgID"}
	h := newHarness(t, cfg, sink)
	tenant := func(org string) context.Context {
		return client.NewContext(context.Background(), client.Info{
			Metadata: client.NewMetadata(map[string][]string{"X-Scope-OrgID": {org}}),
		})
	}
	ev := rec{body: "same event", resource: "svc"}
	for _, ctx := range []context.Context{tenant("a"), tenant("b"), tenant("a"), context.Background(), context.Background()} {
		if err := h.proc.ConsumeLogs(ctx, logs(ev)); err != nil {
			t.Fatal(err)
		}
	}
	// Tenant a, tenant b and the request without the header each get theirs once.
	if n, d := sink.LogRecordCount(), h.outcome("duplicate"); n != 3 || d != 2 {
		t.Fatalf("delivered=%d duplicate=%d, want 3 and 2", n, d)
	}
}

// TestEveryIgnorableFieldHasABit: a field that logs/traces/metrics.ignore
// accepts must really be left out, so each must have its bit.
func TestEveryIgnorableFieldHasABit(t *testing.T) {
	for _, names := range [][]string{logSpec.ignorable, spanSpec.ignorable, dataPointSpec.ignorable} {
		for _, n := range names {
			if !slices.Contains(ignorableNames[:], n) {
				t.Errorf("ignorable field %q has no bit", n)
			}
		}
	}
	// Each name is at its bit.
	for name, bit := range map[string]fieldSet{
		"body": ignBody, "event_name": ignEventName, "severity_text": ignSeverityText,
		"severity_number": ignSeverityNumber, "trace_id": ignTraceID, "span_id": ignSpanID,
		"time_unix_nano": ignTimeUnixNano, "flags": ignFlags, "resource": ignResource,
		"instrumentation_scope": ignInstrumentationScope, "name": ignName, "kind": ignKind,
		"parent_span_id": ignParentSpanID, "trace_state": ignTraceState,
		"start_time_unix_nano": ignStartTimeUnixNano, "end_time_unix_nano": ignEndTimeUnixNano,
		"events": ignEvents, "links": ignLinks, "status": ignStatus,
		"observed_time_unix_nano": ignObservedTimeUnixNano,
	} {
		if k := slices.Index(ignorableNames[:], name); k < 0 || fieldSet(1)<<k != bit {
			t.Errorf("ignorable field %q is at index %d, want bit %#x", name, k, bit)
		}
	}
}
