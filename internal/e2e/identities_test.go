package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

// The default identities against data shaped like real receivers' output,
// and processors sharing one Redis, through the binary.

const defaultPipelines = `
processors:
  dedup:
service:
  pipelines:
    logs: {receivers: [otlp], processors: [dedup], exporters: [otlp_grpc/sink]}
    traces: {receivers: [otlp], processors: [dedup], exporters: [otlp_grpc/sink]}
    metrics: {receivers: [otlp], processors: [dedup], exporters: [otlp_grpc/sink]}
`

// TestTimestamplessLinesAreDistinct: a file receiver without a timestamp
// parser leaves Timestamp at 0; the same line seen twice, seconds apart, is
// two lines and both are delivered. The agent's retry of the first request
// (same observed time) is still caught.
func TestTimestamplessLinesAreDistinct(t *testing.T) {
	r := startCollector(t, nil, defaultPipelines)
	send := r.grpcSender()
	line := func(observed time.Time) plog.Logs {
		ld := plog.NewLogs()
		rl := ld.ResourceLogs().AppendEmpty()
		sl := rl.ScopeLogs().AppendEmpty()
		sl.Scope().SetName("github.com/open-telemetry/opentelemetry-collector-contrib/receiver/filelogreceiver")
		lr := sl.LogRecords().AppendEmpty()
		lr.SetObservedTimestamp(pcommon.NewTimestampFromTime(observed))
		lr.Body().SetStr(`level=error msg="connection refused" peer=10.0.0.7:5432`)
		lr.Attributes().PutStr("log.file.name", "app.log")
		return ld
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	first, later := line(baseTime), line(baseTime.Add(2*time.Second))
	for i, ld := range []plog.Logs{first, later, first} {
		if err := send.SendLogs(ctx, ld); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if n := r.sink.LogRecordCount(); n != 2 {
		t.Fatalf("delivered %d lines, want 2 (the line twice, not its retry)", n)
	}
	sc := r.scrape()
	wantMetric(t, sc, "otelcol_processor_dedup_records", Labels{"otel_signal": "logs", "outcome": "unique"}, 2)
	wantMetric(t, sc, "otelcol_processor_dedup_duplicates", Labels{"otel_signal": "logs", "caught_by": "local"}, 1)
}

// TestReceiverPayloadsThroughTheBinary sends each recorded receiver payload
// (processor/dedupprocessor/testdata/receivers) twice: the first time every
// distinct unit is delivered (Zipkin's shared client/server spans and v1
// fragments included), except the units the receiver emits identical; the
// second time, as a retry, nothing.
func TestReceiverPayloadsThroughTheBinary(t *testing.T) {
	r := startCollector(t, nil, defaultPipelines)
	send := r.grpcSender()
	dir := filepath.Join("..", "..", "processor", "dedupprocessor", "testdata", "receivers")
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	for _, tc := range []struct {
		file    string
		repeats int // units the receiver emits identical to an earlier one, or re-sends in the payload
	}{
		{"filelog.json", 0},
		{"syslog.json", 1},
		{"fluentforward.json", 1},
		{"journald.json", 1},
		{"kafka.json", 1},
		{"k8sevents.json", 2},
		{"k8sobjects.json", 0},
		{"zipkin.json", 0},
		{"jaeger.json", 0},
		{"prometheus.json", 0},
		{"hostmetrics.json", 0},
	} {
		raw, err := os.ReadFile(filepath.Join(dir, tc.file))
		if err != nil {
			t.Fatal(err)
		}
		before := r.sink.LogRecordCount() + r.sink.SpanCount() + r.sink.DataPointCount()
		units := 0
		for range 2 {
			switch {
			case strings.Contains(string(raw), `"resourceLogs"`):
				ld, err := (&plog.JSONUnmarshaler{}).UnmarshalLogs(raw)
				if err != nil {
					t.Fatal(err)
				}
				units = ld.LogRecordCount()
				err = send.SendLogs(ctx, ld)
				if err != nil {
					t.Fatalf("%s: %v", tc.file, err)
				}
			case strings.Contains(string(raw), `"resourceSpans"`):
				td, err := (&ptrace.JSONUnmarshaler{}).UnmarshalTraces(raw)
				if err != nil {
					t.Fatal(err)
				}
				units = td.SpanCount()
				if err := send.SendTraces(ctx, td); err != nil {
					t.Fatalf("%s: %v", tc.file, err)
				}
			default:
				md, err := (&pmetric.JSONUnmarshaler{}).UnmarshalMetrics(raw)
				if err != nil {
					t.Fatal(err)
				}
				units = md.DataPointCount()
				if err := send.SendMetrics(ctx, md); err != nil {
					t.Fatalf("%s: %v", tc.file, err)
				}
			}
		}
		got := r.sink.LogRecordCount() + r.sink.SpanCount() + r.sink.DataPointCount() - before
		if want := units - tc.repeats; got != want {
			t.Errorf("%s: delivered %d of %d units over two sends, want %d", tc.file, got, units, want)
		}
	}
}

// TestTwoPipelinesOneRedis: one receiver feeds two logs pipelines, each to
// its own backend with its own dedup processor (dedup/a, dedup/b, the same
// settings), both on one Redis. Each backend gets every record once, and
// each pipeline catches the retries on its own.
func TestTwoPipelinesOneRedis(t *testing.T) {
	srv := redistest.Standalone(t)
	second := newSink(t)
	r := startCollector(t, nil, fmt.Sprintf(`
processors:
  dedup/a:
    logs: {key: ['attributes["event.id"]']}
    redis: {endpoints: [%[1]q]}
  dedup/b:
    logs: {key: ['attributes["event.id"]']}
    redis: {endpoints: [%[1]q]}
exporters:
  otlp_grpc/second:
    endpoint: %[2]q
    tls: {insecure: true}
    retry_on_failure: {enabled: false}
    sending_queue: {enabled: false}
service:
  pipelines:
    logs/a: {receivers: [otlp], processors: [dedup/a], exporters: [otlp_grpc/sink]}
    logs/b: {receivers: [otlp], processors: [dedup/b], exporters: [otlp_grpc/second]}
`, srv.Addr(), second.GRPCEndpoint()))
	c, _ := eventCorpus(100)
	send := r.grpcSender()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	for _, b := range []plog.Logs{c.batch(span(0, 60)...), c.batch(span(40, 100)...), c.batch(span(0, 100)...)} {
		if err := send.SendLogs(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	for name, s := range map[string]*testSink{"a": r.sink, "b": second} {
		if n := s.LogRecordCount(); n != 100 {
			t.Errorf("backend %s received %d records, want 100", name, n)
		}
		counts, _ := delivered(s)
		for k, n := range counts {
			if n != 1 {
				t.Errorf("backend %s received %s %d times", name, k, n)
			}
		}
	}
	sc := r.scrape()
	for _, p := range []string{"dedup/a", "dedup/b"} {
		wantMetric(t, sc, "otelcol_processor_dedup_records", Labels{"processor": p, "outcome": "unique"}, 100)
		wantMetric(t, sc, "otelcol_processor_dedup_records", Labels{"processor": p, "outcome": "duplicate"}, 120)
	}
}

// TestOneDedupIDInTwoPipelinesWithRedisRefusesToStart: the same dedup ID in
// two pipelines of one signal, with a shared tier, would make each drop what
// the other delivered: the collector refuses to start and says how to fix
// the config.
func TestOneDedupIDInTwoPipelinesWithRedisRefusesToStart(t *testing.T) {
	srv := redistest.Standalone(t)
	out, sink := startFails(t, fmt.Sprintf(`
processors:
  dedup:
    redis: {endpoints: [%q]}
service:
  pipelines:
    logs/a: {receivers: [otlp], processors: [dedup], exporters: [otlp_grpc/sink]}
    logs/b: {receivers: [otlp], processors: [dedup], exporters: [otlp_http/sink]}
`, srv.Addr()))
	for _, want := range []string{
		`is in two logs pipelines and has a shared tier (redis): both would claim the same keys and each pipeline would drop the records the other delivered`,
		`give each pipeline its own dedup processor ID (e.g. dedup/a and dedup/b)`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the collector's output does not say %q:\n%s", want, tail([]byte(out), 30))
		}
	}
	if n := sink.Requests(); n != 0 {
		t.Fatalf("the sink got %d requests", n)
	}
}
