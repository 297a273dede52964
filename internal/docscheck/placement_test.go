package docscheck

import (
	"fmt"
	"testing"

	"github.com/otelcol-dedup/otelcol-dedup/internal/e2e"
)

// TestPlacementAcknowledgedMeansDelivered holds README's "Where dedup goes
// in the pipeline" to the binary. dedup releases a batch's keys only when
// its next consumer returns an error, so what answers between dedup and the
// backend decides what an acknowledgement means. The backend refuses the
// first export (retries off, so the refusal is final); the sender then
// sends the same two records again:
//
//   - exporter queue with wait_for_result: true (and exporter-side
//     batching): the sender gets the error, the keys are released, the
//     resend is delivered;
//   - exporter queue with the default wait_for_result: false: the sender is
//     answered when the request is queued, the failed export is dropped,
//     the keys stay, and the resend is dropped as duplicates;
//   - a batch processor after dedup (no exporter queue): the same, the batch
//     processor answering when the records join a batch.
func TestPlacementAcknowledgedMeansDelivered(t *testing.T) {
	for _, tc := range []struct {
		name       string
		processors string
		queue      string
		// what the sender and the backend see
		firstErr               bool
		released, dups, landed float64
	}{
		{"queue wait_for_result true", "[dedup]", "{enabled: true, wait_for_result: true, batch: {flush_timeout: 10ms}}", true, 2, 0, 2},
		{"queue wait_for_result false", "[dedup]", "{enabled: true}", false, 0, 2, 0},
		{"batch processor after dedup", "[dedup, batch]", "{enabled: false}", false, 0, 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sink := newSink(t)
			c := startCollector(t, nil, func(p e2e.Ports) []string {
				return []string{fmt.Sprintf(`
extensions:
  health_check: {endpoint: %q}
receivers:
  otlp:
    protocols:
      grpc: {endpoint: %q}
processors:
  dedup:
  batch: {timeout: 10ms}
exporters:
  otlp_grpc:
    endpoint: %q
    tls: {insecure: true}
    retry_on_failure: {enabled: false}
    sending_queue: %s
service:
  extensions: [health_check]
  pipelines:
    logs: {receivers: [otlp], processors: %s, exporters: [otlp_grpc]}
%s`, e2e.Addr(p.Health), e2e.Addr(p.OTLPGRPC), sink.GRPCEndpoint(), tc.queue, tc.processors, telemetryYAML(p.Metrics))}
			})
			s := c.grpcSender()
			ctx := ctxT(t)
			sink.FailNext(1)
			err := s.SendLogs(ctx, logBatch("payment accepted", "payment settled"))
			if (err != nil) != tc.firstErr {
				t.Fatalf("first send: error %v, want an error: %v", err, tc.firstErr)
			}
			// The refusal happened (after the answer, when that came first).
			if err := sink.WaitFor(ctx, func(s *e2e.Sink) bool { return s.Refused() == 1 }); err != nil {
				t.Fatalf("the backend never saw the first export: %v", err)
			}
			mustSend(t, "resend", s.SendLogs(ctx, logBatch("payment accepted", "payment settled")))
			if tc.landed > 0 {
				if err := sink.WaitFor(ctx, func(s *e2e.Sink) bool { return float64(s.LogRecordCount()) >= tc.landed }); err != nil {
					t.Fatalf("delivered %d records, want %g: %v", sink.LogRecordCount(), tc.landed, err)
				}
			}
			sc := c.scrape()
			c.stop() // drains the queue or the batch: nothing more can land
			l := e2e.Labels{"processor": "dedup", "otel_signal": "logs"}
			got := [3]float64{
				sc.Sum("otelcol_processor_dedup_released", l),
				sc.Sum("otelcol_processor_dedup_records", e2e.Labels{"processor": "dedup", "otel_signal": "logs", "outcome": "duplicate"}),
				float64(sink.LogRecordCount()),
			}
			if want := [3]float64{tc.released, tc.dups, tc.landed}; got != want {
				t.Errorf("[released, duplicates, delivered] = %v, want %v", got, want)
			}
		})
	}
}
