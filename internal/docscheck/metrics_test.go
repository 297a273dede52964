package docscheck

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/otelcol-dedup/otelcol-dedup/internal/e2e"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

// pipelinesYAML puts one dedup processor, with a shared tier on redisAddr
// and replica election for metrics,
// in a logs, a traces and a metrics pipeline, all exporting to the sink over
// gRPC (no retry, no queue: an export error reaches the processor).
func pipelinesYAML(redisAddr string) string {
	return fmt.Sprintf(`
processors:
  dedup:
    metrics:
      replica_election: {}
    redis:
      endpoints: [%q]
service:
  pipelines:
    logs:
      receivers: [otlp]
      processors: [dedup]
      exporters: [%[2]s]
    traces:
      receivers: [otlp]
      processors: [dedup]
      exporters: [%[2]s]
    metrics:
      receivers: [otlp]
      processors: [dedup]
      exporters: [%[2]s]
`, redisAddr, e2e.SinkGRPCExporter)
}

var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

func logBatch(bodies ...string) plog.Logs {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("service.name", "docscheck")
	lrs := rl.ScopeLogs().AppendEmpty().LogRecords()
	for _, b := range bodies {
		lr := lrs.AppendEmpty()
		lr.SetTimestamp(pcommon.NewTimestampFromTime(t0))
		lr.Body().SetStr(b)
	}
	return ld
}

func spanBatch(copies int) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "docscheck")
	ss := rs.ScopeSpans().AppendEmpty().Spans()
	for range copies {
		sp := ss.AppendEmpty()
		sp.SetTraceID(pcommon.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
		sp.SetSpanID(pcommon.SpanID{1, 2, 3, 4, 5, 6, 7, 8})
		sp.SetName("GET /")
		sp.SetStartTimestamp(pcommon.NewTimestampFromTime(t0))
		sp.SetEndTimestamp(pcommon.NewTimestampFromTime(t0.Add(time.Millisecond)))
	}
	return td
}

func gaugeBatch(replica string, ts time.Time) pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("service.name", "docscheck")
	if replica != "" {
		rm.Resource().Attributes().PutStr("replica", replica)
	}
	m := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName("queue_depth")
	dp := m.SetEmptyGauge().DataPoints().AppendEmpty()
	dp.Attributes().PutStr("queue", "orders")
	dp.SetTimestamp(pcommon.NewTimestampFromTime(ts))
	dp.SetIntValue(42)
	return md
}

// exercise sends, to a collector running pipelinesYAML, traffic that makes
// every one of the processor's series appear, and checks the exact counts:
//
//	logs:    [a b b] -> a, b delivered, b a copy in the batch
//	         [a b]   -> two copies caught by the local cache
//	         [c] refused by the sink -> c's key released, the sender told to retry
//	         [c] (the retry) -> delivered
//	traces:  one request with the same span twice
//	metrics: the same point in two requests (no election labels), then a
//	         point of replica a and one of replica b of cluster team-1
func exercise(t *testing.T, c *collector, sink *testSink) e2e.Scrape {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	s := c.grpcSender()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	must("logs [a b b]", s.SendLogs(ctx, logBatch("a", "b", "b")))
	must("logs [a b]", s.SendLogs(ctx, logBatch("a", "b")))
	sink.FailNext(1)
	if err := s.SendLogs(ctx, logBatch("c")); status.Code(err) != codes.Unavailable {
		t.Fatalf("logs [c] with the sink refusing: got %v, want Unavailable", err)
	}
	must("logs [c] retried", s.SendLogs(ctx, logBatch("c")))
	must("traces", s.SendTraces(ctx, spanBatch(2)))
	must("metrics 1", s.SendMetrics(ctx, gaugeBatch("", t0)))
	must("metrics 2", s.SendMetrics(ctx, gaugeBatch("", t0)))
	must("metrics, replica a", s.SendMetrics(ctx, haScrape("a", 0)))
	must("metrics, replica b", s.SendMetrics(ctx, haScrape("b", 0)))

	if got := sink.LogRecordCount(); got != 3 {
		t.Errorf("sink got %d log records, want 3 (a, b, c)", got)
	}
	if got := sink.SpanCount(); got != 1 {
		t.Errorf("sink got %d spans, want 1", got)
	}
	if got := sink.DataPointCount(); got != 2 {
		t.Errorf("sink got %d data points, want 2 (the point, replica a's)", got)
	}
	// A batch's commit reaches Redis after its sender was answered: wait
	// for the two logs batches' commits (whatever the names' style) before
	// the counts are read.
	var sc e2e.Scrape
	testkit.WaitFor(t, "the two logs batches' commits", opTimeout, func() bool {
		sc = c.scrape()
		commits := 0.0
		for _, s := range sc {
			if strings.Contains(s.Name, "redis_requests") && s.Labels["op"] == "commit" && s.Labels["otel_signal"] == "logs" {
				commits += s.Value
			}
		}
		return commits >= 2
	})
	return sc
}

// wantSeries checks exact values of the processor's series after exercise.
func wantSeries(t *testing.T, sc e2e.Scrape, names map[string]string) {
	t.Helper()
	l := func(signal string, kv ...string) e2e.Labels {
		m := e2e.Labels{"processor": "dedup", "otel_signal": signal}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, w := range []struct {
		name   string
		labels e2e.Labels
		value  float64
	}{
		{"records", l("logs", "outcome", "unique"), 3},
		{"records", l("logs", "outcome", "duplicate"), 3},
		{"duplicates", l("logs", "caught_by", "batch"), 1},
		{"duplicates", l("logs", "caught_by", "local"), 2},
		{"duplicates", l("logs", "caught_by", "redis"), 0},
		{"released", l("logs"), 1},
		{"cache_entries", l("logs"), 3},
		{"cache_evictions", l("logs"), 0},
		{"redis_requests", l("logs", "op", "claim", "result", "ok"), 3},
		{"redis_requests", l("logs", "op", "commit", "result", "ok"), 2},
		{"redis_requests", l("logs", "op", "release", "result", "ok"), 1},
		{"redis_requests", l("logs", "result", "error"), 0},
		{"redis_duration_count", l("logs", "op", "claim"), 3},
		{"redis_breaker_state", l("logs"), 0},
		{"records", l("traces", "outcome", "unique"), 1},
		{"records", l("traces", "outcome", "duplicate"), 1},
		{"duplicates", l("traces", "caught_by", "batch"), 1},
		{"cache_entries", l("traces"), 1},
		{"records", l("metrics", "outcome", "unique"), 2},
		{"records", l("metrics", "outcome", "duplicate"), 2},
		{"duplicates", l("metrics", "caught_by", "local"), 1},
		{"duplicates", l("metrics", "caught_by", "election"), 1},
		{"cache_entries", l("metrics"), 2},
		{"elections", l("metrics", "reason", "new"), 1},
		{"election_undecided", l("metrics", "reason", "missing_label"), 2},
		{"elected_replica", l("metrics", "cluster", "team-1", "replica", "a"), 1},
		{"redis_breaker_state", l("metrics"), 0},
		// By source (service.name, the default source.key): docscheck is
		// named from its first copy on, in the batch that has it.
		{"source_duplicates", l("logs", "source", "docscheck"), 3},
		{"source_records", l("logs", "source", "docscheck"), 6},
		{"source_duplicates", l("logs", "source", "(other)"), 0},
		{"source_records", l("logs", "source", "(other)"), 0},
		{"source_duplicates", l("traces", "source", "docscheck"), 1},
		{"source_records", l("traces", "source", "docscheck"), 2},
		{"source_duplicates", l("metrics", "source", "docscheck"), 1},
		{"source_records", l("metrics", "source", "docscheck"), 1},
		{"source_duplicates", l("metrics", "source", "node-exporter"), 1},
		{"source_records", l("metrics", "source", "node-exporter"), 1},
		{"source_records", l("metrics", "source", "(other)"), 2},
		// Ages: known for the batch and local tiers, not for election.
		{"duplicate_age_count", l("logs", "caught_by", "batch"), 1},
		{"duplicate_age_count", l("logs", "caught_by", "local"), 2},
		{"duplicate_age_count", l("traces", "caught_by", "batch"), 1},
		{"duplicate_age_count", l("metrics", "caught_by", "local"), 1},
		{"duplicate_age_count", l("metrics", "caught_by", "election"), 0},
	} {
		name := names[w.name]
		if got := sc.Sum(name, w.labels); got != w.value {
			t.Errorf("%s%v = %g, want %g; series: %v", name, w.labels, got, w.value, sc.Find(name, nil))
		}
	}
}

// exactNames are the names with the collector's default reader settings.
var exactNames = map[string]string{
	"records":              "otelcol_processor_dedup_records",
	"duplicates":           "otelcol_processor_dedup_duplicates",
	"released":             "otelcol_processor_dedup_released",
	"cache_entries":        "otelcol_processor_dedup_cache_entries",
	"cache_bytes":          "otelcol_processor_dedup_cache_bytes",
	"cache_evictions":      "otelcol_processor_dedup_cache_evictions",
	"redis_requests":       "otelcol_processor_dedup_redis_requests",
	"redis_duration_count": "otelcol_processor_dedup_redis_duration_count",
	"redis_breaker_state":  "otelcol_processor_dedup_redis_breaker_state",
	"elections":            "otelcol_processor_dedup_elections",
	"election_undecided":   "otelcol_processor_dedup_election_undecided",
	"elected_replica":      "otelcol_processor_dedup_elected_replica",
	"source_duplicates":    "otelcol_processor_dedup_source_duplicates",
	"source_records":       "otelcol_processor_dedup_source_records",
	"duplicate_age_count":  "otelcol_processor_dedup_duplicate_age_count",
}

// TestDeployQueriesMatchExportedSeries runs the binary with dedup in three
// pipelines and a real Redis, makes every series appear, and checks that
// every metric and label the dashboard and the rules use is exported.
func TestDeployQueriesMatchExportedSeries(t *testing.T) {
	srv := redistest.Standalone(t)
	sink := newSink(t)
	// The default level (normal): what users who set nothing get.
	c := startCollector(t, nil, nil, configYAML(t, e2e.Config("normal", sink, e2e.Ports{})), pipelinesYAML(srv.Addr()))
	sc := exercise(t, c, sink)
	wantSeries(t, sc, exactNames)

	exported := map[string]map[string]bool{} // name -> label names
	for _, s := range sc {
		if exported[s.Name] == nil {
			exported[s.Name] = map[string]bool{}
		}
		for k := range s.Labels {
			exported[s.Name][k] = true
		}
	}
	// Every documented series is there.
	var got []string
	for n := range exported {
		if strings.HasPrefix(n, "otelcol_processor_dedup_") {
			got = append(got, n)
		}
	}
	slices.Sort(got)
	want := slices.Clone(processorMetrics)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the binary exports %q,\nwant %q", got, want)
	}

	rules := loadRules(t)
	recs := recorded(rules)
	var queries []namedQuery
	queries = append(queries, dashboardQueries(t, loadDashboard(t))...)
	for _, r := range rules {
		queries = append(queries, namedQuery{where: "rule " + r.Record + r.Alert, expr: r.Expr})
	}
	checked := map[string]bool{}
	for _, q := range queries {
		metrics, labels, err := resolve(q.expr, recs)
		if err != nil {
			t.Errorf("%s: %v", q.where, err)
			continue
		}
		allowed := map[string]bool{}
		for _, l := range scrapeLabels {
			allowed[l] = true
		}
		for _, m := range metrics {
			ls, ok := exported[m]
			if !ok {
				t.Errorf("%s uses %s, which the binary does not export (it exports %q)", q.where, m, got)
				continue
			}
			checked[m] = true
			for l := range ls {
				allowed[l] = true
			}
		}
		for _, l := range append(labels, q.extraLabels...) {
			if !allowed[l] {
				t.Errorf("%s uses label %q, which none of its series %q has", q.where, l, metrics)
			}
		}
	}
	t.Logf("checked %d queries over %d exported series names", len(queries), len(checked))
}

// resolve returns the exported metric names and the label names an
// expression uses, looking through recording rules to the series they read.
func resolve(expr string, recs map[string]string) (metrics, labels []string, err error) {
	refs, err := parseQuery(expr)
	if err != nil {
		return nil, nil, err
	}
	for l := range refs.labels {
		labels = append(labels, l)
	}
	for m := range refs.metrics {
		if inner, ok := recs[m]; ok {
			ms, _, err := resolve(inner, recs)
			if err != nil {
				return nil, nil, fmt.Errorf("recording rule %s: %w", m, err)
			}
			metrics = append(metrics, ms...)
			continue
		}
		metrics = append(metrics, m)
	}
	slices.Sort(metrics)
	return slices.Compact(metrics), labels, nil
}

// TestSeriesNamesByReader pins down which names users see, depending on how
// the collector's telemetry reader is configured (docs/monitoring.md has the
// table): the default reader and a prometheus reader that leaves the
// without_* settings out both export the names exactly as written; a reader
// that sets them to false adds the Prometheus suffixes and otel_scope_*
// labels.
func TestSeriesNamesByReader(t *testing.T) {
	doc := string(readFile(t, "docs/monitoring.md"))
	srv := redistest.Standalone(t)

	suffixed := map[string]string{
		"records":              "otelcol_processor_dedup_records_total",
		"duplicates":           "otelcol_processor_dedup_duplicates_total",
		"released":             "otelcol_processor_dedup_released_total",
		"cache_entries":        "otelcol_processor_dedup_cache_entries",
		"cache_bytes":          "otelcol_processor_dedup_cache_bytes",
		"cache_evictions":      "otelcol_processor_dedup_cache_evictions_total",
		"redis_requests":       "otelcol_processor_dedup_redis_requests_total",
		"redis_duration_count": "otelcol_processor_dedup_redis_duration_seconds_count",
		"redis_breaker_state":  "otelcol_processor_dedup_redis_breaker_state_ratio",
		"elections":            "otelcol_processor_dedup_elections_total",
		"election_undecided":   "otelcol_processor_dedup_election_undecided_total",
		"elected_replica":      "otelcol_processor_dedup_elected_replica",
		"source_duplicates":    "otelcol_processor_dedup_source_duplicates_total",
		"source_records":       "otelcol_processor_dedup_source_records_total",
		"duplicate_age_count":  "otelcol_processor_dedup_duplicate_age_seconds_count",
	}
	for _, n := range suffixed {
		if !strings.Contains(doc, "`"+n+"`") {
			t.Errorf("docs/monitoring.md does not list %s", n)
		}
	}
	readme := string(readFile(t, "processor/dedupprocessor/README.md"))
	for _, n := range exactNames {
		if n = strings.TrimSuffix(n, "_count"); !strings.Contains(readme, "\n| `"+n+"` |") {
			t.Errorf("the component README's telemetry table has no row for %s", n)
		}
	}

	reader := func(flags string) string {
		return fmt.Sprintf(`
service:
  telemetry:
    metrics:
      readers:
        - pull:
            exporter:
              prometheus:
                host: %s
                port: 0
%s`, e2e.MetricsHost, flags)
	}
	cases := []struct {
		name   string
		flags  string
		names  map[string]string
		scoped bool // otel_scope_name label present
	}{
		{"reader without the without_* settings", "", exactNames, false},
		{"reader with the without_* settings false", `                without_units: false
                without_type_suffix: false
                without_scope_info: false
`, suffixed, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sink := newSink(t)
			c := startCollector(t, nil, nil, configYAML(t, e2e.Config("detailed", sink, e2e.Ports{})), pipelinesYAML(srv.Addr()), reader(tc.flags))
			// A fresh Redis key space for each collector: the keys of the
			// previous case would make this one's copies caught_by=redis.
			flushRedis(t, srv)
			sc := exercise(t, c, sink)
			wantSeries(t, sc, tc.names)
			for _, s := range sc.Find(tc.names["records"], nil) {
				if _, has := s.Labels["otel_scope_name"]; has != tc.scoped {
					t.Errorf("%v: otel_scope_name present %v, want %v", s, has, tc.scoped)
				}
			}
		})
	}

	// The default reader: no readers at all. It listens on localhost:8888,
	// a fixed port, which must be free while the tests run.
	t.Run("default reader", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:8888")
		if err != nil {
			t.Fatalf("127.0.0.1:8888 is in use (a `make run`?); the collector's default metrics reader can only listen there, so stop it while testing: %v", err)
		}
		l.Close()
		sink := newSink(t)
		c := startCollector(t, nil, nil, fmt.Sprintf(`
extensions:
  health_check: {endpoint: %q}
receivers:
  otlp:
    protocols:
      grpc: {endpoint: %q}
exporters:
  %s:
    endpoint: %q
    tls: {insecure: true}
    retry_on_failure: {enabled: false}
    sending_queue: {enabled: false}
service:
  extensions: [health_check]
`, e2e.ListenHealth, e2e.ListenOTLPGRPC, e2e.SinkGRPCExporter, sink.GRPCEndpoint()), pipelinesYAML(srv.Addr()))
		c.ports.Metrics = "127.0.0.1:8888"
		flushRedis(t, srv)
		sc := exercise(t, c, sink)
		wantSeries(t, sc, exactNames)
	})
}

func flushRedis(t *testing.T, srv *redistest.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := srv.Client().FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
}
