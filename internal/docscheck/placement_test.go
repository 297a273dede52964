package docscheck

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/otelcol-dedup/otelcol-dedup/internal/e2e"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
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
			c := startCollector(t, nil, nil, listenYAML()+fmt.Sprintf(`processors:
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
%s`, sink.GRPCEndpoint(), tc.queue, tc.processors, telemetryYAML()))
			s := c.grpcSender()
			ctx := ctxT(t)
			sink.FailNext(1)
			err := s.SendLogs(ctx, logBatch("payment accepted", "payment settled"))
			if (err != nil) != tc.firstErr {
				t.Fatalf("first send: error %v, want an error: %v", err, tc.firstErr)
			}
			// The refusal happened (after the answer, when that came first).
			testkit.WaitFor(t, "the first export refused at the backend", opTimeout, func() bool { return sink.Refused() == 1 })
			mustSend(t, "resend", s.SendLogs(ctx, logBatch("payment accepted", "payment settled")))
			if tc.landed > 0 {
				testkit.WaitFor(t, fmt.Sprintf("%g records delivered", tc.landed), opTimeout, func() bool { return float64(sink.LogRecordCount()) >= tc.landed })
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

// TestExamplesKeepThePromise holds every shipped example to the full-promise
// placement: no batch processor after dedup in any pipeline, and every
// exporter either without a queue or with a queue that answers after the
// export (wait_for_result: true, which a persistent queue cannot do). No
// example sets redis.lease: the lease follows the export on its own. The
// default backend is never one of the example's own receivers.
func TestExamplesKeepThePromise(t *testing.T) {
	for _, name := range exampleFiles {
		t.Run(name, func(t *testing.T) {
			text := string(readFile(t, "examples/"+name))
			for _, p := range promiseBreaches(t, []byte(text)) {
				t.Error(p)
			}
			if strings.Contains(text, "lease:") {
				t.Error("sets redis.lease: the lease follows the export; leave the default")
			}
			for _, m := range envRE.FindAllStringSubmatch(text, -1) {
				if m[1] != "OTLP_BACKEND" {
					continue
				}
				def := strings.TrimPrefix(m[2], ":-")
				for _, own := range []string{":4317", ":4318"} {
					if strings.HasSuffix(strings.TrimSuffix(def, "/"), own) {
						t.Errorf("OTLP_BACKEND defaults to %s, where the example's own receiver listens", def)
					}
				}
			}
		})
	}
}

// promiseBreaches lists what in a collector config breaks "acknowledged
// means delivered" behind dedup.
func promiseBreaches(t *testing.T, config []byte) []string {
	t.Helper()
	var cfg struct {
		Exporters map[string]struct {
			SendingQueue *struct {
				Enabled       *bool   `yaml:"enabled"`
				WaitForResult bool    `yaml:"wait_for_result"`
				Storage       *string `yaml:"storage"`
			} `yaml:"sending_queue"`
		} `yaml:"exporters"`
		Service struct {
			Pipelines map[string]struct {
				Processors []string `yaml:"processors"`
				Exporters  []string `yaml:"exporters"`
			} `yaml:"pipelines"`
		} `yaml:"service"`
	}
	if err := yaml.Unmarshal(config, &cfg); err != nil {
		t.Fatal(err)
	}
	var out []string
	for name, p := range cfg.Service.Pipelines {
		i := slices.IndexFunc(p.Processors, isDedup)
		if i < 0 {
			continue
		}
		for _, after := range p.Processors[i+1:] {
			if after == "batch" || strings.HasPrefix(after, "batch/") {
				out = append(out, fmt.Sprintf("pipeline %s: %s after %s answers the sender before the export", name, after, p.Processors[i]))
			}
		}
		for _, id := range p.Exporters {
			q := cfg.Exporters[id].SendingQueue
			switch {
			case id == "debug" || strings.HasPrefix(id, "debug/"):
			case q == nil:
				out = append(out, fmt.Sprintf("pipeline %s: exporter %s has the default sending_queue, which answers before the export; set sending_queue: {enabled: true, wait_for_result: true}", name, id))
			case q.Enabled != nil && !*q.Enabled:
			case q.Storage != nil:
				out = append(out, fmt.Sprintf("pipeline %s: exporter %s has a persistent queue, which answers when the request is on disk", name, id))
			case !q.WaitForResult:
				out = append(out, fmt.Sprintf("pipeline %s: exporter %s's sending_queue answers before the export; set wait_for_result: true", name, id))
			}
		}
	}
	slices.Sort(out)
	return out
}

func isDedup(id string) bool { return id == "dedup" || strings.HasPrefix(id, "dedup/") }

// TestExampleQueueFullIsNotAcknowledged runs examples/gateway.yaml's
// exporter settings, with a queue of one request, against a backend that
// stalls: a request the full queue refuses is not acknowledged (its sender
// gets the error), its keys are released, and its re-send once the backend
// is back is delivered, not dropped as a copy of data that never arrived.
func TestExampleQueueFullIsNotAcknowledged(t *testing.T) {
	sink := newSink(t)
	c := startCollector(t, []string{"OTLP_BACKEND=" + sink.GRPCEndpoint()}, []string{filepath.Join(root(t), "examples", "gateway.yaml")}, fmt.Sprintf(`
extensions:
  health_check: {endpoint: %q}
receivers:
  otlp:
    protocols:
      grpc: {endpoint: %q}
      http: {endpoint: %q}
exporters:
  otlp_grpc:
    sending_queue: {queue_size: 1, num_consumers: 1}
service:
%s`, e2e.ListenHealth, e2e.ListenOTLPGRPC, e2e.ListenOTLPHTTP, telemetryYAML()))
	s := c.grpcSender()
	ctx := ctxT(t)
	sink.Hold()
	held := make(chan error, 1)
	go func() { held <- s.SendLogs(ctx, logBatch("payment accepted")) }()
	testkit.WaitFor(t, "the first export held at the backend", opTimeout, func() bool { return sink.Holding() == 1 })
	if err := s.SendLogs(ctx, logBatch("payment settled")); err == nil {
		t.Fatal("a request the full queue refused was acknowledged")
	}
	sink.Unhold()
	if err := <-held; err != nil {
		t.Fatalf("the held request: %v", err)
	}
	mustSend(t, "re-send of the refused request", s.SendLogs(ctx, logBatch("payment settled")))
	sc := c.scrape()
	c.stop()
	l := e2e.Labels{"processor": "dedup", "otel_signal": "logs"}
	got := [3]float64{
		sc.Sum("otelcol_processor_dedup_released", l),
		sc.Sum("otelcol_processor_dedup_records", e2e.Labels{"processor": "dedup", "otel_signal": "logs", "outcome": "duplicate"}),
		float64(sink.LogRecordCount()),
	}
	if want := [3]float64{1, 0, 2}; got != want {
		t.Errorf("[released, duplicates, delivered] = %v, want %v", got, want)
	}
}
