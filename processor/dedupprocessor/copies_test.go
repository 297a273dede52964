package dedupprocessor

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/claim"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

const copiesLine = "dedup: a source sent copies of records already delivered"

// sourceSeries returns the source_duplicates and source_records values by
// source, and checks that both name the same sources.
func (h *harness) sourceSeries() (copies, records map[string]int64) {
	h.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		h.t.Fatal(err)
	}
	copies, records = map[string]int64{}, map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			into := map[string]map[string]int64{
				"otelcol_processor_dedup_source_duplicates": copies,
				"otelcol_processor_dedup_source_records":    records,
			}[m.Name]
			if into == nil {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				src, _ := dp.Attributes.Value("source")
				into[src.AsString()] = dp.Value
			}
		}
	}
	if fmt.Sprint(slices.Sorted(maps.Keys(copies))) != fmt.Sprint(slices.Sorted(maps.Keys(records))) {
		h.t.Fatalf("source_duplicates %v, source_records %v: not the same sources", copies, records)
	}
	return copies, records
}

// ageBuckets returns duplicate_age's bucket counts for tier (one per bound
// of copyAgeBounds, then +Inf), nil if the series does not exist.
func (h *harness) ageBuckets(tier string) []uint64 {
	h.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		h.t.Fatal(err)
	}
	want := attribute.NewSet(h.attrs([]attribute.KeyValue{attribute.String("caught_by", tier)})...)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "otelcol_processor_dedup_duplicate_age" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
				if dp.Attributes.Equals(&want) {
					if !slices.Equal(dp.Bounds, copyAgeBounds) {
						h.t.Fatalf("bounds %v, want %v", dp.Bounds, copyAgeBounds)
					}
					return dp.BucketCounts
				}
			}
		}
	}
	return nil
}

// ages is a bucket count list with n copies in the bucket of each upper
// bound given (seconds; 0 for +Inf).
func ages(counts map[float64]uint64) []uint64 {
	out := make([]uint64, len(copyAgeBounds)+1)
	for bound, n := range counts {
		i := slices.Index(copyAgeBounds, bound)
		if bound == 0 {
			i = len(copyAgeBounds)
		}
		out[i] = n
	}
	return out
}

// assertSourceTotals checks that the source series add up to the records
// and duplicates counters: every record and copy is counted by source once.
func assertSourceTotals(h *harness) {
	h.t.Helper()
	copies, records := h.sourceSeries()
	var c, r, wantC, wantR int64
	for _, n := range copies {
		c += n
	}
	for _, n := range records {
		r += n
	}
	for _, o := range claim.OutcomeNames {
		wantR += h.outcome(o)
	}
	for _, tr := range claim.CaughtByNames {
		wantC += h.tier(tr)
	}
	if c != wantC || r != wantR {
		h.t.Fatalf("by source: %d copies of %d records (%v of %v); the counters: %d of %d", c, r, copies, records, wantC, wantR)
	}
}

func serviceLogs(service string, bodies ...string) plog.Logs {
	recs := make([]rec, len(bodies))
	for i, b := range bodies {
		recs[i] = rec{body: b, resource: service, ts: 1}
	}
	return logs(recs...)
}

// copyLines returns the fields of each copies line logged, in order.
func copyLines(logs *observer.ObservedLogs) []map[string]any {
	var out []map[string]any
	for _, e := range logs.FilterMessage(copiesLine).All() {
		out = append(out, e.ContextMap())
	}
	return out
}

// TestCopiesTracedToTheirSourceAndCause: two senders, one of which
// re-sends its records: twice within seconds (retries), then an hour of
// (fake) time later (a replay). The source series name it and count its
// copies against its records; the age histogram puts the retries and the
// replay in buckets apart; one line a minute at most names it, with the
// copies since the last line, their age range and cause, and one identity.
func TestCopiesTracedToTheirSourceAndCause(t *testing.T) {
	clk := testkit.NewClock(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC))
	core, logged := observer.New(zapcore.InfoLevel)
	cfg := defaultConfig()
	cfg.Window = 2 * time.Hour
	sink := new(consumertest.LogsSink)
	h := startHarness(t, nil, cfg, sink, clk, zap.New(core))
	must := func(ld plog.Logs) {
		t.Helper()
		if err := h.consume(ld); err != nil {
			t.Fatal(err)
		}
	}
	billing := []string{"invoice 1", "invoice 2", "invoice 3"}
	must(serviceLogs("checkout", "order 1", "order 2"))
	must(serviceLogs("billing", billing...))
	clk.Advance(5 * time.Second)
	must(serviceLogs("billing", billing...)) // a retry after an exporter's timeout
	clk.Advance(5 * time.Second)
	must(serviceLogs("billing", billing...)) // and another
	if lines := copyLines(logged); len(lines) != 0 {
		t.Fatalf("lines within the first minute: %v", lines)
	}
	clk.Advance(time.Minute)
	must(serviceLogs("checkout", "order 3")) // any batch logs the lines due
	clk.Advance(time.Hour - 70*time.Second)
	must(serviceLogs("billing", billing...)) // a replay, an hour after the originals

	if n := len(bodies(sink)); n != 6 {
		t.Fatalf("delivered %d records, want 6", n)
	}
	copies, records := h.sourceSeries()
	// billing is named from its first copies on: its first batch, 3
	// records without copies, is counted with the rest.
	if want := map[string]int64{"billing": 9, otherSources: 0}; fmt.Sprint(copies) != fmt.Sprint(want) {
		t.Errorf("source_duplicates %v, want %v", copies, want)
	}
	if want := map[string]int64{"billing": 9, otherSources: 6}; fmt.Sprint(records) != fmt.Sprint(want) {
		t.Errorf("source_records %v, want %v", records, want)
	}
	assertSourceTotals(h)
	if got, want := h.ageBuckets("local"), ages(map[float64]uint64{5: 3, 15: 3, 3600: 3}); !slices.Equal(got, want) {
		t.Errorf("duplicate_age{caught_by=local} buckets %v, want %v (3 at 5s, 3 at 10s, 3 at 1h)", got, want)
	}
	if got := h.ageBuckets("batch"); got != nil {
		t.Errorf("duplicate_age{caught_by=batch} buckets %v, want no series", got)
	}

	b1 := contentDigest(t, cfg, serviceLogs("billing", "invoice 1"))
	want := []map[string]any{
		{"source": "billing", "copies": int64(6), "records": int64(6), "age_min": 5 * time.Second, "age_max": 10 * time.Second,
			"cause": "retries (1s to 5m)", "example_identity": b1, "period": 65 * time.Second},
		{"source": "billing", "copies": int64(3), "records": int64(3), "age_min": time.Hour, "age_max": time.Hour,
			"cause": "replay, re-read or backfill (over 5m)", "example_identity": b1, "period": time.Hour - 70*time.Second},
	}
	if got := copyLines(logged); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("lines\n%v\nwant\n%v", got, want)
	}
}

// contentDigest is the content identity's digest of ld's one record, as the
// processor derives it.
func contentDigest(t *testing.T, cfg *Config, ld plog.Logs) string {
	t.Helper()
	set := processortest.NewNopSettings(componentType)
	p, err := newLogsProcessor(set.TelemetrySettings, set.ID, cfg, consumertest.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	b := claim.NewBatch(1, 0)
	p.Identify(context.Background(), b, ld)
	ds := batchDigests(b)
	if len(ds) != 1 {
		t.Fatalf("%d keys", len(ds))
	}
	return ds[0].String()
}

// TestCopiesInOneRequestAreAgeZero: a record twice in one request (a double
// send inside a batch) is a copy of the batch tier, 0 s old, and a sender
// that fans out to two gateways' one processor within a second is a copy of
// the local tier within the first buckets.
func TestCopiesInOneRequestAreAgeZero(t *testing.T) {
	clk := testkit.NewClock(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC))
	h := newClockedHarness(t, defaultConfig(), consumertest.NewNop(), clk)
	if err := h.consume(serviceLogs("api", "a", "a", "b")); err != nil {
		t.Fatal(err)
	}
	clk.Advance(300 * time.Millisecond)
	if err := h.consume(serviceLogs("api", "b")); err != nil {
		t.Fatal(err)
	}
	if got, want := h.ageBuckets("batch"), ages(map[float64]uint64{0.1: 1}); !slices.Equal(got, want) {
		t.Errorf("batch tier buckets %v, want %v", got, want)
	}
	if got, want := h.ageBuckets("local"), ages(map[float64]uint64{1: 1}); !slices.Equal(got, want) {
		t.Errorf("local tier buckets %v, want %v", got, want)
	}
	assertSourceTotals(h)
}

// TestSourceSeriesStayBoundedUnderAFloodOfSources: 10^6 distinct sources,
// each sending one copy, around two sources that send many: the metrics
// hold max_sources sources by name and the rest under one value, the two
// heavy ones among them; the counts add up to every record and copy; at
// most one line per source per interval.
func TestSourceSeriesStayBoundedUnderAFloodOfSources(t *testing.T) {
	clk := testkit.NewClock(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC))
	core, logged := observer.New(zapcore.InfoLevel)
	cfg := defaultConfig()
	cfg.Source.MaxSources = 10
	h := startHarness(t, nil, cfg, consumertest.NewNop(), clk, zap.New(core))
	cs := h.proc.(*logsProcessor).tel.copies.sources

	const flood, perBatch = 1_000_000, 1000
	var totalCopies, totalRecords int64
	for start := 0; start < flood; start += perBatch {
		// Each flood source sends a record and its copy; billing and
		// checkout send 400 records and 300 copies in every batch, each
		// more than 1/max_sources of all copies.
		b := claim.NewBatch(3*perBatch, clk.Now().UnixNano())
		span := func(name string, records, copies int) {
			b.Source(name)
			for i := range records {
				if i < copies {
					b.Duplicate(claim.ByLocal, 3*time.Second)
				} else {
					b.Keyed(digest.Digest{Hi: uint64(start), Lo: uint64(b.Len())})
				}
			}
			totalRecords += int64(records)
			totalCopies += int64(copies)
		}
		span("billing", 400, 300)
		for i := range perBatch {
			span(fmt.Sprintf("pod-%07d", start+i), 2, 1)
		}
		span("checkout", 400, 300)
		cs.record(b)
		clk.Advance(time.Second)
	}

	copies, records := h.sourceSeries()
	if len(copies) != cfg.Source.MaxSources+1 {
		t.Fatalf("%d source series, want %d (max_sources and %s): %v", len(copies), cfg.Source.MaxSources+1, otherSources, copies)
	}
	for _, heavy := range []string{"billing", "checkout"} {
		if copies[heavy] != 300*flood/perBatch || records[heavy] != 400*flood/perBatch {
			t.Errorf("%s: %d copies of %d records; want it named from the start, %d of %d", heavy, copies[heavy], records[heavy], 300*flood/perBatch, 400*flood/perBatch)
		}
	}
	var c, r int64
	for s := range copies {
		c, r = c+copies[s], r+records[s]
	}
	if c != totalCopies || r != totalRecords {
		t.Errorf("by source %d copies of %d records, want %d of %d", c, r, totalCopies, totalRecords)
	}
	// 1000 s of flood, a line a minute at most per source: one at each
	// minute from the first (60 s to 960 s) for billing, checkout and the
	// rest, none for a pod, which must hold its place for a minute to be
	// named in a line.
	bySource := map[string]int{}
	for _, l := range copyLines(logged) {
		bySource[l["source"].(string)]++
	}
	if want := map[string]int{"billing": 16, "checkout": 16, otherSources: 16}; fmt.Sprint(bySource) != fmt.Sprint(want) {
		t.Errorf("lines by source %v, want %v", bySource, want)
	}
}

// TestSourceNames: what each kind of source.key entry reads, joined, with a
// missing value as (none), a long or broken one made a label value.
func TestSourceNames(t *testing.T) {
	res := pcommon.NewResource()
	res.Attributes().PutStr("service.name", "checkout")
	res.Attributes().PutInt("k8s.pod.uid", 42)
	res.Attributes().PutStr("long", strings.Repeat("é", 200))
	res.Attributes().PutStr("broken", "a\xffb")
	ctx := client.NewContext(context.Background(), client.Info{
		Addr:     &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 51234},
		Metadata: client.NewMetadata(map[string][]string{"X-Scope-OrgID": {"team-a"}}),
		Auth:     fakeAuth{"subject": "agent-7", "groups": []string{"a", "b"}},
	})
	for _, tc := range []struct {
		key  []string
		want string
	}{
		{[]string{`resource.attributes["service.name"]`}, "checkout"},
		{[]string{`resource.attributes["k8s.pod.uid"]`}, "42"},
		{[]string{`resource.attributes["host.name"]`}, noSource},
		{[]string{"auth.subject"}, "agent-7"},
		{[]string{"auth.groups"}, "a,b"},
		{[]string{"metadata.x-scope-orgid"}, "team-a"},
		{[]string{"client.address"}, "10.1.2.3"},
		{[]string{"auth.subject", `resource.attributes["service.name"]`, `resource.attributes["host.name"]`}, "agent-7/checkout/(none)"},
		{[]string{`resource.attributes["long"]`}, strings.Repeat("é", maxSourceLen/2)},
		{[]string{`resource.attributes["broken"]`}, "ab"},
	} {
		k := newSourceKey(tc.key)
		if got := k.name(res, k.request(ctx)); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.key, got, tc.want)
		}
	}
	if got := newSourceKey([]string{"client.address"}).request(context.Background()); !slices.Equal(got, []string{""}) {
		t.Errorf("no client: %q", got)
	}
}

type fakeAuth map[string]any

func (a fakeAuth) GetAttribute(name string) any { return a[name] }

func (a fakeAuth) GetAttributeNames() []string { return slices.Collect(maps.Keys(a)) }

// TestRedisAgesAreTheirOriginalsCommit: a copy the shared tier finds is
// as old as its original's commit, to the second of Redis's clock: a copy
// two seconds after its original, at another collector, is in the
// duplicate_age{caught_by="redis"} bucket of up to 5 s, and counts by source.
func TestRedisAgesAreTheirOriginalsCommit(t *testing.T) {
	srv := redistest.Standalone(t)
	first := newHarness(t, redisConfig([]string{srv.Addr()}, ErrorPass), consumertest.NewNop())
	if err := first.consume(events(1)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2100 * time.Millisecond) // the copy comes two seconds after its original
	h := newHarness(t, redisConfig([]string{srv.Addr()}, ErrorPass), consumertest.NewNop())
	if err := h.consume(events(1)); err != nil {
		t.Fatal(err)
	}
	if n := h.tier("redis"); n != 1 {
		t.Fatalf("redis copies %d, want 1", n)
	}
	if got, want := h.ageBuckets("redis"), ages(map[float64]uint64{5: 1}); !slices.Equal(got, want) {
		t.Fatalf("duplicate_age{caught_by=redis} %v, want %v", got, want)
	}
	if copies, _ := h.sourceSeries(); copies["svc"] != 1 {
		t.Fatalf("source_duplicates %v, want svc 1", copies)
	}
}

// TestNoSourcesNoSeries: with an empty source.key the copies are counted by
// tier and age, and by no source.
func TestNoSourcesNoSeries(t *testing.T) {
	cfg := defaultConfig()
	cfg.Source.Key = nil
	h := newHarness(t, cfg, consumertest.NewNop())
	if err := h.consume(serviceLogs("api", "a", "a")); err != nil {
		t.Fatal(err)
	}
	if copies, records := h.sourceSeries(); len(copies)+len(records) != 0 {
		t.Fatalf("source series %v %v, want none", copies, records)
	}
	if got := h.ageBuckets("batch"); !slices.Equal(got, ages(map[float64]uint64{0.1: 1})) {
		t.Fatalf("batch ages %v", got)
	}
}
