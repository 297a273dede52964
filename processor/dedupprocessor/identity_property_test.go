package dedupprocessor

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/claim"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

// The property of the default identities: two units that differ in any
// field a sender sets get different identities, unless a documented rule
// says otherwise. Each test starts from a unit with every field set, changes
// one field at a time, and checks the identity changes, or stays the same
// exactly where the component README's rules say so. Every setter of the
// unit's pdata type must be listed, so a field pdata gains later fails the
// test until it is given a rule.

// change is one field changed on a copy of the base unit; same says the
// documented rule keeps the identity.
type change[U any] struct {
	set  func(U)
	same bool
}

// resourceScopeChanges are the changes every signal shares: its resource
// and scope (sets the unit's resource and scope through these funcs).
func resourceScopeChanges(res func() pcommon.Resource, scope func() pcommon.InstrumentationScope, resSchema, scopeSchema func(string)) map[string]func() {
	return map[string]func(){
		"resource attribute":         func() { res().Attributes().PutStr("host.name", "other") },
		"resource dropped count":     func() { res().SetDroppedAttributesCount(9) },
		"resource schema url":        func() { resSchema("https://example.com/other") },
		"scope name":                 func() { scope().SetName("other") },
		"scope version":              func() { scope().SetVersion("9.9.9") },
		"scope attribute":            func() { scope().Attributes().PutStr("s", "other") },
		"scope dropped count":        func() { scope().SetDroppedAttributesCount(9) },
		"scope schema url":           func() { scopeSchema("https://example.com/other") },
		"resource attribute removed": func() { res().Attributes().Remove("service.name") },
	}
}

// setters lists the Set* methods of a pdata type.
func setters(v any) []string {
	var out []string
	t := reflect.TypeOf(v)
	for i := range t.NumMethod() {
		if name := t.Method(i).Name; strings.HasPrefix(name, "Set") {
			out = append(out, name)
		}
	}
	return out
}

func wantEverySetterListed(t *testing.T, v any, listed map[string]bool) {
	t.Helper()
	for _, s := range setters(v) {
		if !listed[s] {
			t.Errorf("%T.%s has no identity rule in this test: give it one (and document it)", v, s)
		}
	}
}

func firstDigest(t *testing.T, identify func(*claim.Batch)) digest.Digest {
	t.Helper()
	b := claim.NewBatch(1, 0)
	identify(b)
	ds := batchDigests(b)
	if len(ds) != 1 {
		t.Fatalf("%d keyed units, want 1", len(ds))
	}
	return ds[0]
}

func TestLogIdentityChangesWithEveryField(t *testing.T) {
	set := processortest.NewNopSettings(componentType)
	p, err := newLogsProcessor(set.TelemetrySettings, set.ID, defaultConfig(), consumertest.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	base := func(precise bool) plog.Logs {
		ld := plog.NewLogs()
		rl := ld.ResourceLogs().AppendEmpty()
		rl.SetSchemaUrl("https://opentelemetry.io/schemas/1.26.0")
		rl.Resource().Attributes().PutStr("service.name", "checkout")
		sl := rl.ScopeLogs().AppendEmpty()
		sl.SetSchemaUrl("https://opentelemetry.io/schemas/1.26.0")
		sl.Scope().SetName("io.example")
		sl.Scope().SetVersion("1.0.0")
		sl.Scope().Attributes().PutStr("s", "v")
		lr := sl.LogRecords().AppendEmpty()
		ts := pcommon.Timestamp(1_700_000_000_123_456_789)
		if !precise {
			ts = 1_700_000_000_000_000_000
		}
		lr.SetTimestamp(ts)
		lr.SetObservedTimestamp(1_700_000_001_000_000_000)
		lr.SetSeverityNumber(plog.SeverityNumberWarn)
		lr.SetSeverityText("WARN")
		lr.SetEventName("order.placed")
		lr.SetFlags(plog.DefaultLogRecordFlags.WithIsSampled(true))
		lr.SetTraceID(pcommon.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
		lr.SetSpanID(pcommon.SpanID{1, 2, 3, 4, 5, 6, 7, 8})
		lr.SetDroppedAttributesCount(1)
		lr.Body().SetStr("order placed")
		lr.Attributes().PutStr("k", "v")
		return ld
	}
	rec := func(ld plog.Logs) plog.LogRecord { return ld.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0) }
	changes := map[string]change[plog.LogRecord]{
		"SetTimestamp":              {set: func(lr plog.LogRecord) { lr.SetTimestamp(lr.Timestamp() + 1) }},
		"SetSeverityNumber":         {set: func(lr plog.LogRecord) { lr.SetSeverityNumber(plog.SeverityNumberError) }},
		"SetSeverityText":           {set: func(lr plog.LogRecord) { lr.SetSeverityText("ERROR") }},
		"SetEventName":              {set: func(lr plog.LogRecord) { lr.SetEventName("order.cancelled") }},
		"SetFlags":                  {set: func(lr plog.LogRecord) { lr.SetFlags(0) }},
		"SetTraceID":                {set: func(lr plog.LogRecord) { lr.SetTraceID(pcommon.TraceID{9}) }},
		"SetSpanID":                 {set: func(lr plog.LogRecord) { lr.SetSpanID(pcommon.SpanID{9}) }},
		"SetDroppedAttributesCount": {set: func(lr plog.LogRecord) { lr.SetDroppedAttributesCount(2) }},
		// Documented: with a precise timestamp the observed time is left
		// out (a re-read observes the record anew); see the coarse cases
		// below.
		"SetObservedTimestamp": {set: func(lr plog.LogRecord) { lr.SetObservedTimestamp(lr.ObservedTimestamp() + 1) }, same: true},
		"body":                 {set: func(lr plog.LogRecord) { lr.Body().SetStr("order placed!") }},
		"body type":            {set: func(lr plog.LogRecord) { lr.Body().SetEmptyBytes().FromRaw([]byte("order placed")) }},
		"attribute value":      {set: func(lr plog.LogRecord) { lr.Attributes().PutStr("k", "w") }},
		"attribute type":       {set: func(lr plog.LogRecord) { lr.Attributes().PutInt("k", 1) }},
		"attribute added":      {set: func(lr plog.LogRecord) { lr.Attributes().PutStr("k2", "v") }},
	}
	listed := map[string]bool{}
	for name := range changes {
		listed[name] = true
	}
	wantEverySetterListed(t, plog.NewLogRecord(), listed)

	digestOf := func(ld plog.Logs) digest.Digest {
		return firstDigest(t, func(b *claim.Batch) { p.Identify(context.Background(), b, ld) })
	}
	want := digestOf(base(true))
	if again := digestOf(base(true)); again != want {
		t.Fatal("the same record twice gave two identities")
	}
	for name, c := range changes {
		ld := base(true)
		c.set(rec(ld))
		if got := digestOf(ld); (got == want) != c.same {
			t.Errorf("%s: identity changed = %v, want %v", name, got != want, !c.same)
		}
	}
	var ld plog.Logs
	for name, set := range resourceScopeChanges(
		func() pcommon.Resource { return ld.ResourceLogs().At(0).Resource() },
		func() pcommon.InstrumentationScope { return ld.ResourceLogs().At(0).ScopeLogs().At(0).Scope() },
		func(u string) { ld.ResourceLogs().At(0).SetSchemaUrl(u) },
		func(u string) { ld.ResourceLogs().At(0).ScopeLogs().At(0).SetSchemaUrl(u) },
	) {
		ld = base(true)
		set()
		if digestOf(ld) == want {
			t.Errorf("%s: identity did not change", name)
		}
	}
	// Coarse timestamps: the observed time joins.
	coarseBase := digestOf(base(false))
	ld = base(false)
	rec(ld).SetObservedTimestamp(rec(ld).ObservedTimestamp() + 1)
	if digestOf(ld) == coarseBase {
		t.Error("with a whole-second timestamp, another observed time kept the identity")
	}
}

func TestSpanIdentityChangesWithEveryField(t *testing.T) {
	set := processortest.NewNopSettings(componentType)
	p, err := newTracesProcessor(set.TelemetrySettings, set.ID, defaultConfig(), consumertest.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	base := func() ptrace.Traces {
		td := ptrace.NewTraces()
		rs := td.ResourceSpans().AppendEmpty()
		rs.SetSchemaUrl("https://opentelemetry.io/schemas/1.26.0")
		rs.Resource().Attributes().PutStr("service.name", "checkout")
		ss := rs.ScopeSpans().AppendEmpty()
		ss.SetSchemaUrl("https://opentelemetry.io/schemas/1.26.0")
		ss.Scope().SetName("io.example")
		ss.Scope().SetVersion("1.0.0")
		ss.Scope().Attributes().PutStr("s", "v")
		sp := ss.Spans().AppendEmpty()
		sp.SetTraceID(pcommon.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
		sp.SetSpanID(pcommon.SpanID{1, 2, 3, 4, 5, 6, 7, 8})
		sp.SetParentSpanID(pcommon.SpanID{8, 7, 6, 5, 4, 3, 2, 1})
		sp.TraceState().FromRaw("vendor=a")
		sp.SetName("GET /orders")
		sp.SetKind(ptrace.SpanKindClient)
		sp.SetStartTimestamp(1_700_000_000_000_000_000)
		sp.SetEndTimestamp(1_700_000_001_000_000_000)
		sp.SetFlags(1)
		sp.SetDroppedAttributesCount(1)
		sp.SetDroppedEventsCount(1)
		sp.SetDroppedLinksCount(1)
		sp.Attributes().PutStr("k", "v")
		ev := sp.Events().AppendEmpty()
		ev.SetName("retry")
		ev.SetTimestamp(1_700_000_000_500_000_000)
		ev.Attributes().PutInt("attempt", 1)
		l := sp.Links().AppendEmpty()
		l.SetTraceID(pcommon.TraceID{7})
		l.SetSpanID(pcommon.SpanID{7})
		l.Attributes().PutStr("l", "v")
		sp.Status().SetCode(ptrace.StatusCodeError)
		sp.Status().SetMessage("boom")
		return td
	}
	span := func(td ptrace.Traces) ptrace.Span { return td.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0) }
	changes := map[string]change[ptrace.Span]{
		"SetTraceID":                {set: func(sp ptrace.Span) { sp.SetTraceID(pcommon.TraceID{9}) }},
		"SetSpanID":                 {set: func(sp ptrace.Span) { sp.SetSpanID(pcommon.SpanID{9}) }},
		"SetParentSpanID":           {set: func(sp ptrace.Span) { sp.SetParentSpanID(pcommon.SpanID{9}) }},
		"SetName":                   {set: func(sp ptrace.Span) { sp.SetName("GET /other") }},
		"SetKind":                   {set: func(sp ptrace.Span) { sp.SetKind(ptrace.SpanKindServer) }},
		"SetStartTimestamp":         {set: func(sp ptrace.Span) { sp.SetStartTimestamp(sp.StartTimestamp() + 1) }},
		"SetEndTimestamp":           {set: func(sp ptrace.Span) { sp.SetEndTimestamp(sp.EndTimestamp() + 1) }},
		"SetFlags":                  {set: func(sp ptrace.Span) { sp.SetFlags(0) }},
		"SetDroppedAttributesCount": {set: func(sp ptrace.Span) { sp.SetDroppedAttributesCount(2) }},
		"SetDroppedEventsCount":     {set: func(sp ptrace.Span) { sp.SetDroppedEventsCount(2) }},
		"SetDroppedLinksCount":      {set: func(sp ptrace.Span) { sp.SetDroppedLinksCount(2) }},
		"trace state":               {set: func(sp ptrace.Span) { sp.TraceState().FromRaw("vendor=b") }},
		"attribute":                 {set: func(sp ptrace.Span) { sp.Attributes().PutStr("k", "w") }},
		"event name":                {set: func(sp ptrace.Span) { sp.Events().At(0).SetName("other") }},
		"event time":                {set: func(sp ptrace.Span) { sp.Events().At(0).SetTimestamp(1) }},
		"event attribute":           {set: func(sp ptrace.Span) { sp.Events().At(0).Attributes().PutInt("attempt", 2) }},
		"event dropped count":       {set: func(sp ptrace.Span) { sp.Events().At(0).SetDroppedAttributesCount(3) }},
		"event added":               {set: func(sp ptrace.Span) { sp.Events().AppendEmpty().SetName("x") }},
		"link trace id":             {set: func(sp ptrace.Span) { sp.Links().At(0).SetTraceID(pcommon.TraceID{8}) }},
		"link span id":              {set: func(sp ptrace.Span) { sp.Links().At(0).SetSpanID(pcommon.SpanID{8}) }},
		"link trace state":          {set: func(sp ptrace.Span) { sp.Links().At(0).TraceState().FromRaw("x=y") }},
		"link flags":                {set: func(sp ptrace.Span) { sp.Links().At(0).SetFlags(1) }},
		"link attribute":            {set: func(sp ptrace.Span) { sp.Links().At(0).Attributes().PutStr("l", "w") }},
		"link dropped count":        {set: func(sp ptrace.Span) { sp.Links().At(0).SetDroppedAttributesCount(3) }},
		"status code":               {set: func(sp ptrace.Span) { sp.Status().SetCode(ptrace.StatusCodeOk) }},
		"status message":            {set: func(sp ptrace.Span) { sp.Status().SetMessage("other") }},
	}
	listed := map[string]bool{}
	for name := range changes {
		listed[name] = true
	}
	wantEverySetterListed(t, ptrace.NewSpan(), listed)
	digestOf := func(td ptrace.Traces) digest.Digest {
		return firstDigest(t, func(b *claim.Batch) { p.Identify(context.Background(), b, td) })
	}
	want := digestOf(base())
	for name, c := range changes {
		td := base()
		c.set(span(td))
		if got := digestOf(td); (got == want) != c.same {
			t.Errorf("%s: identity changed = %v, want %v", name, got != want, !c.same)
		}
	}
	var td ptrace.Traces
	for name, set := range resourceScopeChanges(
		func() pcommon.Resource { return td.ResourceSpans().At(0).Resource() },
		func() pcommon.InstrumentationScope { return td.ResourceSpans().At(0).ScopeSpans().At(0).Scope() },
		func(u string) { td.ResourceSpans().At(0).SetSchemaUrl(u) },
		func(u string) { td.ResourceSpans().At(0).ScopeSpans().At(0).SetSchemaUrl(u) },
	) {
		td = base()
		set()
		if digestOf(td) == want {
			t.Errorf("%s: identity did not change", name)
		}
	}
}

func TestPointIdentityChangesWithEveryField(t *testing.T) {
	set := processortest.NewNopSettings(componentType)
	p, err := newMetricsProcessor(set.TelemetrySettings, set.ID, defaultConfig(), consumertest.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	base := func() pmetric.Metrics {
		md := pmetric.NewMetrics()
		rm := md.ResourceMetrics().AppendEmpty()
		rm.SetSchemaUrl("https://opentelemetry.io/schemas/1.26.0")
		rm.Resource().Attributes().PutStr("service.name", "checkout")
		sm := rm.ScopeMetrics().AppendEmpty()
		sm.SetSchemaUrl("https://opentelemetry.io/schemas/1.26.0")
		sm.Scope().SetName("io.example")
		sm.Scope().SetVersion("1.0.0")
		sm.Scope().Attributes().PutStr("s", "v")
		m := sm.Metrics().AppendEmpty()
		m.SetName("orders")
		m.SetUnit("1")
		m.SetDescription("orders placed")
		sum := m.SetEmptySum()
		sum.SetIsMonotonic(true)
		sum.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
		dp := sum.DataPoints().AppendEmpty()
		dp.SetStartTimestamp(1_600_000_000_000_000_000)
		dp.SetTimestamp(1_700_000_000_000_000_000)
		dp.SetIntValue(40)
		dp.Attributes().PutStr("region", "eu")
		return md
	}
	metric := func(md pmetric.Metrics) pmetric.Metric {
		return md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics().At(0)
	}
	point := func(md pmetric.Metrics) pmetric.NumberDataPoint { return metric(md).Sum().DataPoints().At(0) }
	changes := map[string]change[pmetric.Metrics]{
		"SetStartTimestamp": {set: func(md pmetric.Metrics) { point(md).SetStartTimestamp(1) }},
		"SetTimestamp":      {set: func(md pmetric.Metrics) { point(md).SetTimestamp(point(md).Timestamp() + 1) }},
		"SetFlags":          {set: func(md pmetric.Metrics) { point(md).SetFlags(pmetric.DefaultDataPointFlags.WithNoRecordedValue(true)) }},
		// Documented: a point is one observation of its stream at its
		// time; a second copy is a repeat whatever value it carries.
		"SetIntValue":    {set: func(md pmetric.Metrics) { point(md).SetIntValue(41) }, same: true},
		"SetDoubleValue": {set: func(md pmetric.Metrics) { point(md).SetDoubleValue(40.5) }, same: true},
		"exemplar":       {set: func(md pmetric.Metrics) { point(md).Exemplars().AppendEmpty().SetIntValue(1) }, same: true},
		"attribute":      {set: func(md pmetric.Metrics) { point(md).Attributes().PutStr("region", "us") }},
		"metric name":    {set: func(md pmetric.Metrics) { metric(md).SetName("other") }},
		"metric unit":    {set: func(md pmetric.Metrics) { metric(md).SetUnit("ms") }},
		"metric type": {set: func(md pmetric.Metrics) {
			g := metric(md).SetEmptyGauge()
			point(base()).CopyTo(g.DataPoints().AppendEmpty())
		}},
		"temporality": {set: func(md pmetric.Metrics) {
			metric(md).Sum().SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
		}},
		"monotonicity": {set: func(md pmetric.Metrics) { metric(md).Sum().SetIsMonotonic(false) }},
		// Documented: the description and metadata are not part of a
		// stream's identity; two versions of one instrumentation may
		// describe the same stream differently.
		"metric description": {set: func(md pmetric.Metrics) { metric(md).SetDescription("other") }, same: true},
		"metric metadata":    {set: func(md pmetric.Metrics) { metric(md).Metadata().PutStr("m", "v") }, same: true},
	}
	listed := map[string]bool{}
	for name := range changes {
		listed[name] = true
	}
	wantEverySetterListed(t, pmetric.NewNumberDataPoint(), listed)
	digestOf := func(md pmetric.Metrics) digest.Digest {
		return firstDigest(t, func(b *claim.Batch) { metricsCall{p: p}.Identify(context.Background(), b, md) })
	}
	want := digestOf(base())
	for name, c := range changes {
		md := base()
		c.set(md)
		if got := digestOf(md); (got == want) != c.same {
			t.Errorf("%s: identity changed = %v, want %v", name, got != want, !c.same)
		}
	}
	var md pmetric.Metrics
	for name, set := range resourceScopeChanges(
		func() pcommon.Resource { return md.ResourceMetrics().At(0).Resource() },
		func() pcommon.InstrumentationScope { return md.ResourceMetrics().At(0).ScopeMetrics().At(0).Scope() },
		func(u string) { md.ResourceMetrics().At(0).SetSchemaUrl(u) },
		func(u string) { md.ResourceMetrics().At(0).ScopeMetrics().At(0).SetSchemaUrl(u) },
	) {
		md = base()
		set()
		if digestOf(md) == want {
			t.Errorf("%s: identity did not change", name)
		}
	}
}
