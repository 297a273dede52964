package docscheck

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"gopkg.in/yaml.v3"

	"github.com/otelcol-dedup/otelcol-dedup/internal/e2e"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

// The collector configs of examples/, each validated by the binary.
var exampleFiles = []string{
	"fleet-redis.yaml",
	"gateway.yaml",
	"ha-election.yaml",
	"ha-metrics.yaml",
	"kafka-gateway.yaml",
	"multi-tenant.yaml",
	"persistent-cache.yaml",
	"redis-cluster.yaml",
	"redis-sentinel-tls.yaml",
	"shadow-mode.yaml",
	"tenants-local.yaml",
	"traces.yaml",
}

// envRE matches ${env:NAME} and ${env:NAME:-default}.
var envRE = regexp.MustCompile(`\$\{env:([A-Za-z_][A-Za-z0-9_]*)(:-[^}]*)?\}`)

// headerComment is the comment block a config file opens with.
func headerComment(text string) string {
	var b strings.Builder
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "#") {
			break
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// TestExamplesValidate: every example passes `otelcol-dedup validate` as
// shipped, with an empty environment (a fresh clone, nothing set): every
// ${env:...} has a default, and the file's header names each variable it
// reads.
func TestExamplesValidate(t *testing.T) {
	dir := filepath.Join(root(t), "examples")
	found, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range found {
		names = append(names, filepath.Base(f))
	}
	if !slices.Equal(names, exampleFiles) {
		t.Errorf("examples/*.yaml = %q, want %q (update exampleFiles and examples/README.md together)", names, exampleFiles)
	}
	index := string(readFile(t, "examples/README.md"))
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			if !strings.Contains(index, "("+name+")") {
				t.Errorf("examples/README.md does not link %s", name)
			}
			path := filepath.Join(dir, name)
			text, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			header := headerComment(string(text))
			for _, m := range envRE.FindAllStringSubmatch(string(text), -1) {
				if m[2] == "" {
					t.Errorf("%s: %s has no default: write ${env:%s:-<default>} so the file validates with nothing set", name, m[0], m[1])
				}
				if !strings.Contains(header, m[1]) {
					t.Errorf("%s reads %s, which its header comment does not name", name, m[1])
				}
			}
			out, err := validate(t, path)
			if err != nil {
				t.Fatalf("otelcol-dedup validate --config examples/%s: %v\n%s", name, err, out)
			}
			if strings.TrimSpace(out) != "" {
				t.Errorf("validate printed:\n%s", out)
			}
		})
	}
}

// TestValidateCatchesBadDedupConfig is the control of TestExamplesValidate:
// validate does check the dedup settings of an example.
func TestValidateCatchesBadDedupConfig(t *testing.T) {
	text := string(readFile(t, "examples/gateway.yaml"))
	bad := strings.Replace(text, "window: 10m", "window: 0s", 1)
	if bad == text {
		t.Fatal("examples/gateway.yaml has no `window: 10m` to break")
	}
	p := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(p, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := validate(t, p)
	if err == nil {
		t.Fatalf("validate accepted window: 0s:\n%s", out)
	}
	if want := `window must be > 0, got "0s"`; !strings.Contains(out, want) {
		t.Errorf("validate said:\n%s\nwant it to contain %q", out, want)
	}
}

// exampleOverride points a shipped example at loopback ports and the sink:
// the receivers, health_check and metrics reader on p, every exporter the
// example defines at the sink (env OTLP_BACKEND), without queue or retry so
// that what the sink holds is final when a send returns.
func exampleOverride(t *testing.T, file string) string {
	t.Helper()
	var cfg struct {
		Exporters map[string]any `yaml:"exporters"`
	}
	if err := yaml.Unmarshal(readFile(t, "examples/"+file), &cfg); err != nil {
		t.Fatal(err)
	}
	var ex strings.Builder
	for id := range cfg.Exporters {
		fmt.Fprintf(&ex, "  %s:\n    sending_queue: {enabled: false}\n    retry_on_failure: {enabled: false}\n", id)
	}
	return listenYAML() + "exporters:\n" + ex.String() + "service:" + telemetryYAML()
}

// runExample starts examples/file with the override, OTLP_BACKEND at the
// sink's host:port (gRPC, or HTTP for otlp_http) and extra env.
func runExample(t *testing.T, file string, sink *testSink, httpBackend bool, env ...string) *collector {
	t.Helper()
	backend := sink.GRPCEndpoint()
	if httpBackend {
		backend = strings.TrimPrefix(sink.HTTPEndpoint(), "http://")
	}
	env = append([]string{"OTLP_BACKEND=" + backend}, env...)
	return startCollector(t, env, []string{filepath.Join(root(t), "examples", file)}, exampleOverride(t, file))
}

func event(id, body string) plog.Logs {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("service.name", "checkout")
	lr := rl.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty()
	lr.SetTimestamp(pcommon.NewTimestampFromTime(t0))
	lr.Attributes().PutStr("event.id", id)
	lr.Body().SetStr(body)
	return ld
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	t.Cleanup(cancel)
	return ctx
}

func mustSend(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// TestExampleGateway: a retried request is delivered once, for each signal.
func TestExampleGateway(t *testing.T) {
	sink := newSink(t)
	c := runExample(t, "gateway.yaml", sink, false)
	s := c.grpcSender()
	ctx := ctxT(t)
	for range 2 {
		mustSend(t, "logs", s.SendLogs(ctx, logBatch("payment accepted", "payment settled")))
		mustSend(t, "traces", s.SendTraces(ctx, spanBatch(1)))
		mustSend(t, "metrics", s.SendMetrics(ctx, gaugeBatch("", t0)))
	}
	c.stop() // flushes the batch processor
	if got := [3]int{sink.LogRecordCount(), sink.SpanCount(), sink.DataPointCount()}; got != [3]int{2, 1, 1} {
		t.Errorf("delivered [logs spans points] = %v, want [2 1 1]", got)
	}
}

// fleetPassword is the password the tests give the fleet's ACL user of
// deploy/redis/fleet.acl, which the headers of fleet-redis.yaml and
// ha-election.yaml recommend, with their default user name and prefix.
const fleetPassword = "fleet-s3cret"

// TestExampleFleetRedis: two collectors with the same file and one Redis
// deliver a record once, whichever instance each copy reaches.
func TestExampleFleetRedis(t *testing.T) {
	srv := redistest.Standalone(t, redistest.WithConfig(redistest.FleetACL(t, fleetPassword)))
	sink := newSink(t)
	env := []string{"REDIS_ADDR=" + srv.Addr(), "REDIS_PASSWORD=" + fleetPassword}
	a := runExample(t, "fleet-redis.yaml", sink, false, env...)
	b := runExample(t, "fleet-redis.yaml", sink, false, env...)
	ctx := ctxT(t)
	mustSend(t, "to a", a.grpcSender().SendLogs(ctx, event("evt-1", "first attempt")))
	// The retry reaches the other instance; a relay changed the body, the
	// event id is the same.
	mustSend(t, "to b", b.grpcSender().SendLogs(ctx, event("evt-1", "second attempt")))
	mustSend(t, "to b", b.grpcSender().SendLogs(ctx, event("evt-2", "another event")))
	scB := b.scrape()
	a.stop()
	b.stop()
	if got := sink.LogRecordCount(); got != 2 {
		t.Errorf("delivered %d records, want 2 (evt-1 once, evt-2)", got)
	}
	l := e2e.Labels{"processor": "dedup", "otel_signal": "logs", "caught_by": "redis"}
	if got := scB.Sum("otelcol_processor_dedup_duplicates", l); got != 1 {
		t.Errorf("b: duplicates%v = %g, want 1", l, got)
	}
}

// TestExampleMultiTenant: against a real OIDC issuer, the same event from
// two tenants' tokens is two events; from one tenant twice, one; and a
// tenant that sets the other's header cannot suppress the other's event.
// A request without a token is refused.
func TestExampleMultiTenant(t *testing.T) {
	iss, err := e2e.NewIssuer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(iss.Close)
	sink := newSink(t)
	c := runExample(t, "multi-tenant.yaml", sink, true, "OIDC_ISSUER_URL="+iss.URL, "OIDC_AUDIENCE=otelcol-dedup")
	s := c.grpcSender()
	ctx := ctxT(t)
	as := func(tenant string, headers ...string) context.Context {
		tok, err := iss.Token("otelcol-dedup", tenant, nil)
		if err != nil {
			t.Fatal(err)
		}
		return metadata.AppendToOutgoingContext(ctx, append([]string{"authorization", "Bearer " + tok}, headers...)...)
	}
	mustSend(t, "globex with acme's header", s.SendLogs(as("globex", "X-Scope-OrgID", "acme"), event("evt-1", "signup")))
	for _, tenant := range []string{"acme", "acme"} {
		mustSend(t, tenant, s.SendLogs(as(tenant), event("evt-1", "signup")))
	}
	if err := s.SendLogs(ctx, event("evt-1", "signup")); status.Code(err) != codes.Unauthenticated {
		t.Errorf("without a token: %v, want Unauthenticated", err)
	}
	c.stop()
	if got := sink.LogRecordCount(); got != 2 {
		t.Errorf("delivered %d records, want 2 (one per tenant)", got)
	}
}

// TestExampleTenantsLocal runs examples/tenants-local.yaml the way its
// header says, the issuer made by cmd/dedupissuer's code and the header's
// curl commands run as printed (on the test's ports): the request without a
// token is refused (401), and the counts read 2 unique (one per sender) and
// 1 duplicate (acme's retry).
func TestExampleTenantsLocal(t *testing.T) {
	const file = "tenants-local.yaml"
	iss, err := e2e.NewIssuer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(iss.Close)
	env := []string{"OIDC_ISSUER_URL=" + iss.URL, "OIDC_AUDIENCE=otelcol-dedup"}
	for _, sub := range []string{"acme", "globex"} {
		tok, err := iss.Token("otelcol-dedup", sub, nil)
		if err != nil {
			t.Fatal(err)
		}
		env = append(env, "TOKEN_"+strings.ToUpper(sub)+"="+tok)
	}
	c := startCollector(t, env, []string{filepath.Join(root(t), "examples", file)}, listenYAML()+"service:"+telemetryYAML())

	// The header's commands from `event=` to the metrics grep, on our ports.
	var script []string
	for _, line := range strings.Split(headerComment(string(readFile(t, "examples/"+file))), "\n") {
		line = strings.TrimPrefix(line, "#   ")
		if strings.HasPrefix(line, "event=") || len(script) > 0 {
			script = append(script, line)
		}
		if strings.Contains(line, "otelcol_processor_dedup_records") {
			break
		}
	}
	if len(script) != 6 {
		t.Fatalf("found %d lines of commands in the header, want 6:\n%s", len(script), strings.Join(script, "\n"))
	}
	cmds := strings.NewReplacer("127.0.0.1:4318", c.ports.OTLPHTTP, "127.0.0.1:8888", c.ports.Metrics).Replace(strings.Join(script, "\n"))
	out, err := run(t, root(t), env, "bash", "-euc", cmds)
	if err != nil {
		t.Fatalf("the header's commands: %v\n%s", err, out)
	}
	if !strings.Contains(out, "\n401\n") {
		t.Errorf("no 401 for the request without a token:\n%s", out)
	}
	for _, want := range []string{
		`otelcol_processor_dedup_records{otel_signal="logs",outcome="unique",processor="dedup"} 2`,
		`otelcol_processor_dedup_records{otel_signal="logs",outcome="duplicate",processor="dedup"} 1`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the counts lack %s:\n%s", want, out)
		}
	}
}

// TestExampleHAMetrics: the same point from replicas a and b is one point;
// the scraped variant's key also merges points a few milliseconds apart.
func TestExampleHAMetrics(t *testing.T) {
	sink := newSink(t)
	c := runExample(t, "ha-metrics.yaml", sink, false)
	s := c.grpcSender()
	ctx := ctxT(t)
	mustSend(t, "replica a", s.SendMetrics(ctx, gaugeBatch("a", t0)))
	mustSend(t, "replica b", s.SendMetrics(ctx, gaugeBatch("b", t0)))
	mustSend(t, "replica a, next point", s.SendMetrics(ctx, gaugeBatch("a", t0.Add(15*time.Second))))
	c.stop()
	if got := sink.DataPointCount(); got != 2 {
		t.Errorf("delivered %d points, want 2", got)
	}

	// dedup/ha_scraped, swapped into the pipeline as the comment says.
	text := strings.Replace(string(readFile(t, "examples/ha-metrics.yaml")),
		"processors: [memory_limiter, dedup/ha]", "processors: [memory_limiter, dedup/ha_scraped]", 1)
	p := filepath.Join(t.TempDir(), "ha-scraped.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	sink2 := newSink(t)
	c2 := startCollector(t, []string{"OTLP_BACKEND=" + sink2.GRPCEndpoint()}, []string{p}, exampleOverride(t, "ha-metrics.yaml"))
	s2 := c2.grpcSender()
	base := time.Date(2026, 11, 1, 12, 0, 30, 0, time.UTC) // on a 15 s boundary
	mustSend(t, "replica a", s2.SendMetrics(ctx, gaugeBatch("a", base.Add(2*time.Second))))
	mustSend(t, "replica b, 40ms later", s2.SendMetrics(ctx, gaugeBatch("b", base.Add(2*time.Second+40*time.Millisecond))))
	mustSend(t, "replica a, next scrape", s2.SendMetrics(ctx, gaugeBatch("a", base.Add(17*time.Second))))
	sc := c2.scrape()
	c2.stop()
	if got := sink2.DataPointCount(); got != 2 {
		t.Errorf("ha_scraped: delivered %d points, want 2", got)
	}
	l := e2e.Labels{"processor": "dedup/ha_scraped", "otel_signal": "metrics", "outcome": "key_error"}
	if got := sc.Sum("otelcol_processor_dedup_records", l); got != 0 {
		t.Errorf("ha_scraped: %g key errors", got)
	}
}

// haScrape is one scrape of replica of cluster team-1, as an OTLP agent
// sends it (labels on the resource), at the replica's own time: replica b
// scrapes 40 ms after a. The value is the scrape number.
func haScrape(replica string, s int) pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("service.name", "node-exporter")
	rm.Resource().Attributes().PutStr("cluster", "team-1")
	rm.Resource().Attributes().PutStr("__replica__", replica)
	ts := t0.Add(time.Duration(s) * 15 * time.Second)
	if replica == "b" {
		ts = ts.Add(40 * time.Millisecond)
	}
	m := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName("queue_depth")
	dp := m.SetEmptyGauge().DataPoints().AppendEmpty()
	dp.Attributes().PutStr("queue", "orders")
	dp.SetTimestamp(pcommon.NewTimestampFromTime(ts))
	dp.SetIntValue(int64(s))
	return md
}

// TestExampleHAElection: two gateways run the example with one Redis;
// replica a's scrapes reach one, replica b's the other. One replica (the
// first to send) is delivered, without its replica label, by both.
func TestExampleHAElection(t *testing.T) {
	srv := redistest.Standalone(t, redistest.WithConfig(redistest.FleetACL(t, fleetPassword)))
	sink := newSink(t)
	env := []string{"REDIS_ADDR=" + srv.Addr(), "REDIS_PASSWORD=" + fleetPassword}
	gwA := runExample(t, "ha-election.yaml", sink, false, env...)
	gwB := runExample(t, "ha-election.yaml", sink, false, env...)
	a, b := gwA.grpcSender(), gwB.grpcSender()
	ctx := ctxT(t)
	for s := range 3 {
		mustSend(t, fmt.Sprint("a ", s), a.SendMetrics(ctx, haScrape("a", s)))
		mustSend(t, fmt.Sprint("b ", s), b.SendMetrics(ctx, haScrape("b", s)))
	}
	// b's next scrape reaches a's gateway: still not elected.
	mustSend(t, "b 3", a.SendMetrics(ctx, haScrape("b", 3)))
	scs := []e2e.Scrape{gwA.scrape(), gwB.scrape()}
	gwA.stop()
	gwB.stop()
	var got []string
	for _, md := range sink.Metrics() {
		for i := range md.ResourceMetrics().Len() {
			rm := md.ResourceMetrics().At(i)
			if _, ok := rm.Resource().Attributes().Get("__replica__"); ok {
				t.Errorf("a point arrived with its replica label: %v", rm.Resource().Attributes().AsRaw())
			}
			dps := rm.ScopeMetrics().At(0).Metrics().At(0).Gauge().DataPoints()
			for j := range dps.Len() {
				from := "a"
				if dps.At(j).Timestamp().AsTime().Nanosecond() != 0 {
					from = "b"
				}
				got = append(got, fmt.Sprintf("%s%d", from, dps.At(j).IntValue()))
			}
		}
	}
	slices.Sort(got)
	if want := []string{"a0", "a1", "a2"}; !slices.Equal(got, want) {
		t.Errorf("delivered %q, want %q", got, want)
	}
	var elections, dups float64
	for _, sc := range scs {
		elections += sc.Sum("otelcol_processor_dedup_elections", e2e.Labels{"processor": "dedup/ha", "reason": "new"})
		dups += sc.Sum("otelcol_processor_dedup_duplicates", e2e.Labels{"processor": "dedup/ha", "caught_by": "election"})
	}
	if elections != 1 || dups != 4 {
		t.Errorf("elections{new} = %g, duplicates{caught_by=election} = %g, want 1 and 4", elections, dups)
	}
	if got := scs[0].Sum("otelcol_processor_dedup_elected_replica", e2e.Labels{"cluster": "team-1", "replica": "a"}); got != 1 {
		t.Errorf("gateway a: elected_replica{cluster=team-1,replica=a} = %g, want 1", got)
	}
}

// TestExampleShadowMode: nothing is dropped, the copy is marked.
func TestExampleShadowMode(t *testing.T) {
	sink := newSink(t)
	c := runExample(t, "shadow-mode.yaml", sink, false)
	s := c.grpcSender()
	ctx := ctxT(t)
	mustSend(t, "first", s.SendLogs(ctx, event("evt-1", "a")))
	mustSend(t, "copy", s.SendLogs(ctx, event("evt-1", "a")))
	sc := c.scrape()
	c.stop()
	var marks []string
	for _, ld := range sink.Logs() {
		for r := range ld.ResourceLogs().Len() {
			lrs := ld.ResourceLogs().At(r).ScopeLogs().At(0).LogRecords()
			for i := range lrs.Len() {
				mark := "unmarked"
				if v, ok := lrs.At(i).Attributes().Get("dedup.duplicate"); ok {
					mark = v.Type().String() + ":" + v.AsString()
				}
				marks = append(marks, mark)
			}
		}
	}
	if want := []string{"unmarked", "Bool:true"}; !slices.Equal(marks, want) {
		t.Errorf("dedup.duplicate of the delivered records = %q, want %q", marks, want)
	}
	l := e2e.Labels{"processor": "dedup/shadow", "otel_signal": "logs", "outcome": "duplicate"}
	if got := sc.Sum("otelcol_processor_dedup_records", l); got != 1 {
		t.Errorf("records%v = %g, want 1", l, got)
	}
}

// TestExamplePersistentCache: after a restart, a copy of a record seen
// before it is still dropped.
func TestExamplePersistentCache(t *testing.T) {
	sink := newSink(t)
	state := "DEDUP_STATE_DIR=" + filepath.Join(t.TempDir(), "state")
	c := runExample(t, "persistent-cache.yaml", sink, false, state)
	ctx := ctxT(t)
	mustSend(t, "before", c.grpcSender().SendLogs(ctx, event("evt-1", "a")))
	c.stop()
	c2 := runExample(t, "persistent-cache.yaml", sink, false, state)
	mustSend(t, "after", c2.grpcSender().SendLogs(ctx, event("evt-1", "a")))
	c2.stop()
	if got := sink.LogRecordCount(); got != 1 {
		t.Errorf("delivered %d records across the restart, want 1", got)
	}
}

// TestExampleTraces: a re-sent span is caught, and a server span sharing
// its client span's trace and span IDs (Zipkin's shared spans) is kept.
func TestExampleTraces(t *testing.T) {
	sink := newSink(t)
	c := runExample(t, "traces.yaml", sink, false)
	s := c.grpcSender()
	ctx := ctxT(t)
	mustSend(t, "span", s.SendTraces(ctx, spanBatch(1)))
	mustSend(t, "the span re-sent", s.SendTraces(ctx, spanBatch(1)))
	server := spanBatch(1)
	server.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0).SetKind(ptrace.SpanKindServer)
	mustSend(t, "the server span, same IDs", s.SendTraces(ctx, server))
	c.stop()
	if got := sink.SpanCount(); got != 2 {
		t.Errorf("delivered %d spans, want 2 (the span once, the server span)", got)
	}
}

// TestValidateReadsTLSFiles: `validate` reads the certificate files of
// redis.tls, as the start does: redis-sentinel-tls.yaml with REDIS_CA_FILE
// naming a file that is not there is refused, the file named; with a CA
// that is there, it passes.
func TestValidateReadsTLSFiles(t *testing.T) {
	cfg := filepath.Join(root(t), "examples", "redis-sentinel-tls.yaml")
	missing := filepath.Join(t.TempDir(), "ca.pem")
	out, err := validateIn(t, []string{"REDIS_CA_FILE=" + missing}, cfg)
	if err == nil {
		t.Fatalf("validate accepted a CA file that is not there:\n%s", out)
	}
	if want := "redis.tls: failed to load TLS config: failed to load CA CertPool File: failed to load cert " + missing + ": open " + missing + ": no such file or directory"; !strings.Contains(out, want) {
		t.Errorf("validate said:\n%s\nwant it to contain %q", out, want)
	}
	ca := filepath.Join(root(t), "processor", "dedupprocessor", "testdata", "tls", "ca.pem")
	if out, err := validateIn(t, []string{"REDIS_CA_FILE=" + ca}, cfg); err != nil {
		t.Errorf("validate with a CA file that is there: %v\n%s", err, out)
	}
}

// twoPipelines is a config with one dedup processor, of settings dedup
// (indented under it), in two logs pipelines, and extensions.
func twoPipelines(dedup, extensions string) string {
	return fmt.Sprintf(`
extensions:
%s
receivers:
  otlp:
    protocols:
      grpc: {endpoint: 127.0.0.1:4317}
processors:
  dedup:
%s
exporters:
  debug: {}
  otlp_grpc: {endpoint: backend.example.internal:4317}
service:
  extensions: [file_storage]
  pipelines:
    logs/a: {receivers: [otlp], processors: [dedup], exporters: [debug]}
    logs/b: {receivers: [otlp], processors: [dedup], exporters: [otlp_grpc]}
`, extensions, dedup)
}

// TestValidateRefusesOneIDInTwoPipelines: `validate` refuses what the
// start refuses or degrades when the config alone decides it: one dedup ID
// with redis, or with storage, in two pipelines of a signal, with the fix
// named.
func TestValidateRefusesOneIDInTwoPipelines(t *testing.T) {
	const fix = `; give each pipeline its own dedup processor ID (e.g. dedup/a and dedup/b)`
	storage := "  file_storage: {directory: " + t.TempDir() + "}"
	for _, tt := range []struct{ name, dedup, want string }{
		{"redis", `    redis: {endpoints: ["127.0.0.1:6379"]}`,
			`dedup: processor "dedup" is in two logs pipelines and has a shared tier (redis): both would claim the same keys and each pipeline would drop the records the other delivered` + fix},
		{"storage", `    storage: file_storage`,
			`dedup: processor "dedup" is in two logs pipelines and has storage (file_storage): both would keep their cache in the same snapshot, and the second to start would run without persistence` + fix},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "two.yaml")
			if err := os.WriteFile(p, []byte(twoPipelines(tt.dedup, storage)), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := validate(t, p)
			if err == nil {
				t.Fatalf("validate accepted one dedup ID with %s in two logs pipelines:\n%s", tt.name, out)
			}
			if !strings.Contains(out, tt.want) {
				t.Errorf("validate said:\n%s\nwant it to contain %q", out, tt.want)
			}
		})
	}
}

// TestValidateCannotSeeExtensions: the collector's `validate` builds the
// pipelines without their extensions, so what the processor needs of an
// extension is checked at start only, as the component README says next to
// storage and auth_attributes: validate passes, the start fails with the
// fix.
func TestValidateCannotSeeExtensions(t *testing.T) {
	for _, tt := range []struct{ name, dedup, want string }{
		{"storage names no extension", `    storage: nosuch`,
			`failed to start "dedup" processor: dedup: storage "nosuch": no such extension; configure it under extensions and list it in service.extensions`},
		{"auth_attributes without an authenticator", `    auth_attributes: [subject]`,
			`failed to start "dedup" processor: dedup: auth_attributes [subject] needs an authenticator, and the collector runs none`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := fmt.Sprintf(`
receivers:
  otlp:
    protocols:
      grpc: {endpoint: %q}
processors:
  dedup:
%s
exporters:
  debug: {}
service:
  pipelines:
    logs: {receivers: [otlp], processors: [dedup], exporters: [debug]}
%s`, e2e.ListenOTLPGRPC, tt.dedup, telemetryYAML())
			p := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := validate(t, p); err != nil {
				t.Fatalf("validate refused it (update the component README, which says validate cannot see it): %v\n%s", err, out)
			}
			out, err := runIn(t, startTimeout, root(t), nil, binary(t), "--config", p)
			if err == nil {
				t.Fatalf("the collector started and exited cleanly:\n%s", out)
			}
			if !strings.Contains(out, tt.want) {
				t.Errorf("the start said:\n%s\nwant it to contain %q", out, tt.want)
			}
		})
	}
}
