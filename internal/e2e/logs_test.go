package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/plog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/otelcol-dedup/otelcol-dedup/internal/otlp"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
)

// Series names and labels of the dedup processor's telemetry (the component
// README's Telemetry).
const (
	metricRecords      = "otelcol_processor_dedup_records"
	metricDuplicates   = "otelcol_processor_dedup_duplicates"
	metricReleased     = "otelcol_processor_dedup_released"
	metricCacheEntries = "otelcol_processor_dedup_cache_entries"
)

func dedupLabels(processor string, extra ...string) Labels {
	l := Labels{"processor": processor, "otel_signal": "logs"}
	for i := 0; i+1 < len(extra); i += 2 {
		l[extra[i]] = extra[i+1]
	}
	return l
}

type transport struct {
	name     string
	sender   func(*running) logSender
	exporter string // the sink exporter the pipeline ends in
}

var transports = []transport{
	{"grpc", func(r *running) logSender { return r.grpcSender() }, SinkGRPCExporter},
	{"http", func(r *running) logSender { return r.httpSender() }, SinkHTTPExporter},
}

// TestDefaultConfigDropsRetries runs the shipped testdata/default.yaml (with
// the harness' ports and the sink in place of the debug exporter): 100 unique
// records and 40 byte-identical copies of them, 20 in the same request as
// their original and 20 in later requests, arrive as exactly the 100.
func TestDefaultConfigDropsRetries(t *testing.T) {
	root, err := testkit.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	defaultConfig := filepath.Join(root, "testdata", "default.yaml")
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			r := startCollector(t, []string{defaultConfig}, fmt.Sprintf(`
service:
  pipelines:
    logs:
      exporters: [%s]
`, tr.exporter))
			c := newCorpus(100, nil)
			batches := []plog.Logs{
				// 0-49, then copies of 0-9 in the same request.
				c.batch(slices.Concat(span(0, 50), span(0, 10))...),
				// 50-99 with copies of 50-59 in the same request, and of 0-9
				// sent before.
				c.batch(slices.Concat(span(50, 100), span(50, 60), span(0, 10))...),
				// Copies of 20-29 only: a retried request.
				c.batch(span(20, 30)...),
			}
			send := tr.sender(r)
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			defer cancel()
			sent := 0
			for i, b := range batches {
				if err := send.SendLogs(ctx, b); err != nil {
					t.Fatalf("send request %d: %v", i, err)
				}
				sent += b.LogRecordCount()
			}
			if sent != 140 {
				t.Fatalf("test bug: sent %d records, want 140", sent)
			}
			// The batch processor sits after dedup: wait for its flush.
			testkit.WaitFor(t, "100 records at the sink", opTimeout, func() bool { return r.sink.LogRecordCount() >= 100 })

			sc := r.scrape()
			wantMetric(t, sc, metricRecords, dedupLabels("dedup", "outcome", "unique"), 100)
			wantMetric(t, sc, metricRecords, dedupLabels("dedup", "outcome", "duplicate"), 40)
			wantMetric(t, sc, metricRecords, dedupLabels("dedup"), 140)
			wantMetric(t, sc, metricDuplicates, dedupLabels("dedup", "caught_by", "batch"), 20)
			wantMetric(t, sc, metricDuplicates, dedupLabels("dedup", "caught_by", "local"), 20)
			wantMetric(t, sc, metricDuplicates, dedupLabels("dedup"), 40)
			wantMetric(t, sc, metricReleased, nil, 0)
			wantMetric(t, sc, metricCacheEntries, dedupLabels("dedup"), 100)
			wantSeriesIdentifyProcessor(t, sc)
			for _, s := range sc.Find(metricRecords, nil) {
				t.Logf("scraped: %v", s)
			}

			// Stopping flushes the pipeline: what the sink holds now is final.
			r.stop()
			wantEachOnce(t, r.sink, c, span(0, 100))
		})
	}
}

// wantSeriesIdentifyProcessor checks every series of the dedup processor's
// instruments tells the processor instance and the signal apart.
func wantSeriesIdentifyProcessor(t *testing.T, sc Scrape) {
	t.Helper()
	n := 0
	for _, s := range sc {
		if !strings.HasPrefix(s.Name, "otelcol_processor_dedup_") {
			continue
		}
		n++
		if s.Labels["processor"] == "" || s.Labels["otel_signal"] == "" {
			t.Errorf("series without processor or otel_signal label: %v", s)
		}
	}
	if n == 0 {
		t.Errorf("no otelcol_processor_dedup_* series scraped")
	}
}

// TestKeyedDedup: with logs.key = attributes["event.id"], records with the
// same event.id and different bodies collapse to the first; records without
// event.id pass and are counted missing_key.
func TestKeyedDedup(t *testing.T) {
	r := startCollector(t, nil, `
processors:
  dedup/keyed:
    logs:
      key: ['attributes["event.id"]']
service:
  pipelines:
    logs:
      receivers: [otlp]
      processors: [dedup/keyed]
      exporters: [otlp_grpc/sink]
`)
	// 0-29: the first copy of events evt-0..evt-29.
	// 30-49: the same events evt-0..evt-19 again, different body and time.
	// 50-59: no event.id.
	c := newCorpus(60, func(i int, lr plog.LogRecord) {
		switch {
		case i < 30:
			lr.Attributes().PutStr("event.id", fmt.Sprintf("evt-%d", i))
			lr.Body().SetStr(fmt.Sprintf("first sighting of evt-%d", i))
		case i < 50:
			lr.Attributes().PutStr("event.id", fmt.Sprintf("evt-%d", i-30))
			lr.Body().SetStr(fmt.Sprintf("redelivery of evt-%d", i-30))
		}
	})
	batches := []plog.Logs{
		// evt-0..14, then evt-0..4 again (5 caught in the batch), 5 keyless.
		c.batch(slices.Concat(span(0, 15), span(30, 35), span(50, 55))...),
		// evt-15..29, then evt-5..19 again: evt-5..14 were claimed by the
		// first request (10 caught locally), evt-15..19 by this one (5 caught
		// in the batch); 5 keyless.
		c.batch(slices.Concat(span(15, 30), span(35, 50), span(55, 60))...),
	}
	send := r.grpcSender()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	for i, b := range batches {
		if err := send.SendLogs(ctx, b); err != nil {
			t.Fatalf("send request %d: %v", i, err)
		}
	}

	sc := r.scrape()
	l := func(kv ...string) Labels { return dedupLabels("dedup/keyed", kv...) }
	wantMetric(t, sc, metricRecords, l("outcome", "unique"), 30)
	wantMetric(t, sc, metricRecords, l("outcome", "duplicate"), 20)
	wantMetric(t, sc, metricRecords, l("outcome", "missing_key"), 10)
	wantMetric(t, sc, metricRecords, l(), 60)
	wantMetric(t, sc, metricDuplicates, l("caught_by", "batch"), 10)
	wantMetric(t, sc, metricDuplicates, l("caught_by", "local"), 10)
	wantMetric(t, sc, metricCacheEntries, l(), 30)
	wantSeriesIdentifyProcessor(t, sc)

	r.stop()
	// First copy wins: the first sightings and the keyless records, once each.
	wantEachOnce(t, r.sink, c, slices.Concat(span(0, 30), span(50, 60)))
}

// TestReleaseOnFailure: the sink refuses the first export with a retryable
// error; with the exporter's retry and queue disabled and no batch processor,
// the error goes back through dedup (which releases the keys the request
// claimed) to the sender, whose retry of the same request is delivered: each
// record exactly once.
func TestReleaseOnFailure(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			r := startCollector(t, nil, fmt.Sprintf(`
processors:
  dedup:
service:
  pipelines:
    logs:
      receivers: [otlp]
      processors: [dedup]
      exporters: [%s]
`, tr.exporter))
			c := newCorpus(20, nil)
			// 20 keys, and 5 in-batch copies that claim nothing.
			req := c.batch(slices.Concat(span(0, 20), span(0, 5))...)
			send := tr.sender(r)
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			defer cancel()

			r.sink.FailNext(1)
			err := send.SendLogs(ctx, req)
			wantRetryable(t, err)
			if got := r.sink.Refused(); got != 1 {
				t.Fatalf("sink refused %d requests, want 1", got)
			}
			sc := r.scrape()
			wantMetric(t, sc, metricReleased, dedupLabels("dedup"), 20)
			// A refused request is counted when its retry is accepted.
			wantMetric(t, sc, metricRecords, nil, 0)
			wantMetric(t, sc, metricCacheEntries, dedupLabels("dedup"), 0)

			// The sender retries the same request.
			if err := send.SendLogs(ctx, req); err != nil {
				t.Fatalf("retry: %v", err)
			}
			sc = r.scrape()
			wantMetric(t, sc, metricRecords, dedupLabels("dedup", "outcome", "unique"), 20)
			wantMetric(t, sc, metricRecords, dedupLabels("dedup", "outcome", "duplicate"), 5)
			wantMetric(t, sc, metricDuplicates, dedupLabels("dedup", "caught_by", "batch"), 5)
			wantMetric(t, sc, metricReleased, dedupLabels("dedup"), 20)
			wantMetric(t, sc, metricCacheEntries, dedupLabels("dedup"), 20)

			// Once delivered, the same request is all duplicates.
			if err := send.SendLogs(ctx, req); err != nil {
				t.Fatalf("third send: %v", err)
			}
			sc = r.scrape()
			wantMetric(t, sc, metricRecords, dedupLabels("dedup", "outcome", "unique"), 20)
			wantMetric(t, sc, metricRecords, dedupLabels("dedup", "outcome", "duplicate"), 30)
			// An in-batch copy is a copy of its batch's first one, caught
			// before any claim: 5 more in the batch, 20 in the cache.
			wantMetric(t, sc, metricDuplicates, dedupLabels("dedup", "caught_by", "batch"), 10)
			wantMetric(t, sc, metricDuplicates, dedupLabels("dedup", "caught_by", "local"), 20)
			wantMetric(t, sc, metricReleased, dedupLabels("dedup"), 20)

			r.stop()
			wantEachOnce(t, r.sink, c, span(0, 20))
			if got := r.sink.Refused(); got != 1 {
				t.Errorf("sink refused %d requests, want 1", got)
			}
		})
	}
}

// wantRetryable checks err is OTLP's retryable refusal: gRPC Unavailable or
// HTTP 503.
func wantRetryable(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("send succeeded, want the sink's failure passed back to the sender")
	}
	var httpErr *otlp.HTTPError
	switch {
	case errors.As(err, &httpErr):
		if httpErr.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("send: %v, want status 503", err)
		}
	case status.Code(err) != codes.Unavailable:
		t.Fatalf("send: %v (code %s), want Unavailable", err, status.Code(err))
	}
}
