package dedupprocessor

import (
	"context"
	"fmt"
	"testing"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/claim"
)

// TestIdentityEncodingIsPinned pins the digests of a few records under
// identity encoding version 1 (identityEncoding). Snapshots and the shared
// tier's keys outlive a build: a change to the encoder that alters a digest
// must bump identityEncoding, and this test says when one does.
func TestIdentityEncodingIsPinned(t *testing.T) {
	set := processortest.NewNopSettings(componentType)
	ctx := context.Background()
	digests := func(pending func(cfg *Config) []string, key []string) []string {
		cfg := defaultConfig()
		cfg.Logs.Key, cfg.Traces.Key, cfg.Metrics.Key = key, key, key
		return pending(cfg)
	}
	// pending runs one batch's decisions and returns its digests in hex.
	pending := func(p interface{ Shutdown(context.Context) error }, n int, identify func(*claim.Batch)) []string {
		defer func() { _ = p.Shutdown(ctx) }()
		b := claim.NewBatch(n, 0)
		identify(b)
		return hexDigests(b)
	}
	logs := func(cfg *Config) []string {
		p, err := newLogsProcessor(set.TelemetrySettings, set.ID, cfg, consumertest.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		ld := goldenLogs()
		return pending(p, ld.LogRecordCount(), func(b *claim.Batch) { p.Identify(ctx, b, ld) })
	}
	traces := func(cfg *Config) []string {
		p, err := newTracesProcessor(set.TelemetrySettings, set.ID, cfg, consumertest.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		td := goldenTraces()
		return pending(p, td.SpanCount(), func(b *claim.Batch) { p.Identify(ctx, b, td) })
	}
	metrics := func(cfg *Config) []string {
		p, err := newMetricsProcessor(set.TelemetrySettings, set.ID, cfg, consumertest.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		md := goldenMetrics()
		return pending(p, md.DataPointCount(), func(b *claim.Batch) { metricsCall{p: p}.Identify(ctx, b, md) })
	}
	for _, tc := range []struct {
		name string
		got  []string
		want []string
	}{
		{"logs/content", digests(logs, nil), []string{"7d266facd6d3d1d06414c3f30b75a460", "af2092c32a445f177e7e83c4592b594c", "5e33ad8916cfebcc330040f4864928b4"}},
		{"logs/event.id", digests(logs, []string{`attributes["event.id"]`}), []string{"ebc16f312659db4297ed3c92d8f7e664", "9c0f5db4f9060200b2b4c414c3d8e4d7", "d0f2c70a1e3653254177e7b5b9ed3d65"}},
		{"traces/content", digests(traces, nil), []string{"9b54e1bc440646c03b0ddc73b79cadd2", "f06ada25df11e22d94614193899f9538"}},
		{"metrics/content", digests(metrics, nil), []string{"ff4c6da777653c86ddd2f39765bcb468", "f92397e5cef77ea4f343fd9ccd5332a7"}},
	} {
		if fmt.Sprint(tc.got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: digests %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}

func hexDigests(b *claim.Batch) []string {
	ds := batchDigests(b)
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = fmt.Sprintf("%016x%016x", d.Hi, d.Lo)
	}
	return out
}

func goldenLogs() plog.Logs {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("service.name", "checkout")
	sl := rl.ScopeLogs().AppendEmpty()
	sl.Scope().SetName("io.example")
	sl.Scope().SetVersion("1.2.3")
	sl.SetSchemaUrl("https://opentelemetry.io/schemas/1.26.0")
	for i := range 3 {
		lr := sl.LogRecords().AppendEmpty()
		// Record 0 has a coarse timestamp: its observed time joins.
		lr.SetTimestamp(pcommon.Timestamp(1_700_000_000_000_000_000 + i))
		lr.SetDroppedAttributesCount(uint32(i))
		lr.SetObservedTimestamp(pcommon.Timestamp(1_800_000_000_000_000_000))
		lr.SetSeverityNumber(plog.SeverityNumberWarn)
		lr.SetSeverityText("WARN")
		lr.SetEventName("order.placed")
		lr.SetFlags(plog.DefaultLogRecordFlags.WithIsSampled(true))
		lr.SetTraceID(pcommon.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, byte(i)})
		lr.SetSpanID(pcommon.SpanID{1, 2, 3, 4, 5, 6, 7, byte(i)})
		lr.Body().SetStr(fmt.Sprintf("order %d placed", i))
		lr.Attributes().PutStr("event.id", fmt.Sprintf("evt-%d", i))
		lr.Attributes().PutInt("http.status_code", 200)
		lr.Attributes().PutDouble("amount", 12.5)
		lr.Attributes().PutBool("retry", i == 2)
	}
	return ld
}

func goldenTraces() ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "checkout")
	rs.Resource().SetDroppedAttributesCount(1)
	ss := rs.ScopeSpans().AppendEmpty()
	ss.Scope().SetName("io.example")
	for i := range 2 {
		sp := ss.Spans().AppendEmpty()
		sp.SetName("GET /orders")
		sp.SetKind(ptrace.SpanKindServer)
		sp.SetTraceID(pcommon.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, byte(i)})
		sp.SetSpanID(pcommon.SpanID{1, 2, 3, 4, 5, 6, 7, byte(i)})
		sp.SetStartTimestamp(pcommon.Timestamp(1_700_000_000_000_000_000 + i))
		sp.SetEndTimestamp(pcommon.Timestamp(1_700_000_001_000_000_000 + i))
		sp.Attributes().PutStr("http.route", "/orders")
		sp.Status().SetCode(ptrace.StatusCodeOk)
		ev := sp.Events().AppendEmpty()
		ev.SetName("retry")
		ev.Attributes().PutInt("attempt", int64(i))
		sp.SetDroppedEventsCount(uint32(i))
		sp.SetDroppedLinksCount(uint32(i))
	}
	return td
}

func goldenMetrics() pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("service.name", "checkout")
	sm := rm.ScopeMetrics().AppendEmpty()
	m := sm.Metrics().AppendEmpty()
	m.SetName("orders")
	m.SetUnit("1")
	sum := m.SetEmptySum()
	sum.SetIsMonotonic(true)
	sum.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	for i := range 2 {
		dp := sum.DataPoints().AppendEmpty()
		dp.SetTimestamp(pcommon.Timestamp(1_700_000_000_000_000_000 + i))
		dp.SetIntValue(int64(40 + i))
		dp.Attributes().PutStr("region", "eu")
		if i == 1 {
			dp.SetFlags(pmetric.DefaultDataPointFlags.WithNoRecordedValue(true))
		}
	}
	return md
}
