package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
)

// TestAckedSenderGivesUpOnQueuedExport: the gateway's exporter has a
// sending_queue with wait_for_result: true, so dedup hears the export's
// outcome; the backend holds the export, and the senders' requests give up
// on their own deadline meanwhile. What dedup must do depends on whether the
// export still goes on:
//
//   - With the queue's batcher, two requests merged into one batch are
//     exported under a context of the batch's own: the senders giving up
//     does not cancel the export, and the backend then accepts it. Since
//     collector v0.165.0 exporterhelper reports the export's real outcome to
//     a caller whose request a queue consumer had already taken (it used to
//     report the caller's context error, and dedup released the keys of
//     delivered records). So no key is released, and the senders' re-sends
//     are dropped as duplicates: each event reaches the backend once.
//   - Without the batcher, the export runs under the sender's context and is
//     cancelled with it: nothing is delivered, dedup releases the keys, and
//     the re-send is delivered.
func TestAckedSenderGivesUpOnQueuedExport(t *testing.T) {
	const n = 10
	c, _ := eventCorpus(2 * n)
	first, second := c.batch(span(0, n)...), c.batch(span(n, 2*n)...)
	l := func(kv ...string) Labels { return sigLabels("dedup", "logs", kv...) }
	const senderDeadline = 2 * time.Second

	t.Run("batched: the export outlives its senders", func(t *testing.T) {
		// A batch is flushed once it holds both requests (min_size), never
		// on its timer during the test.
		r := startCollector(t, nil, ackedPipeline("pending_wait: 1s"), `
exporters:
  otlp_grpc/sink:
    timeout: 30s
    sending_queue: {enabled: true, wait_for_result: true, batch: {sizer: items, min_size: 20, max_size: 1000, flush_timeout: 1m}}
`)
		r.sink.Hold()
		doneA := sendWithin(r.grpcSender(), first, senderDeadline)
		doneB := sendWithin(r.httpSender(), second, senderDeadline)
		testkit.WaitFor(t, "the merged export held at the backend", opTimeout, func() bool { return r.sink.Holding() == 1 })
		wantGaveUp(t, "sender A", <-doneA)
		wantGaveUp(t, "sender B", <-doneB)
		r.sink.Unhold()
		testkit.WaitFor(t, "2n records at the backend", opTimeout, func() bool { return r.sink.LogRecordCount() == 2*n })
		// dedup settles each batch once exporterhelper answers it.
		sc := waitScrape(t, r, "the merged export settled", func(sc Scrape) bool {
			return sc.Sum(metricRecords, l()) == 2*n || sc.Sum(metricReleased, l()) > 0
		})
		wantMetric(t, sc, metricReleased, l(), 0)
		wantMetric(t, sc, metricRecords, l("outcome", "unique"), 2*n)

		// The senders, told nothing, send again (together: were the keys
		// released, the two would fill a batch and be delivered again):
		// duplicates.
		doneA, doneB = sendWithin(r.grpcSender(), first, opTimeout), sendWithin(r.httpSender(), second, opTimeout)
		mustSend(t, "A's re-send", <-doneA)
		mustSend(t, "B's re-send", <-doneB)
		sc = r.scrape()
		wantMetric(t, sc, metricReleased, l(), 0)
		wantMetric(t, sc, metricRecords, l("outcome", "duplicate"), 2*n)
		if got := r.sink.Requests(); got != 1 {
			t.Errorf("the backend got %d exports, want 1", got)
		}
		wantEachOnce(t, r.sink, c, span(0, 2*n))
	})

	t.Run("unbatched: the export is cancelled with its sender", func(t *testing.T) {
		r := startCollector(t, nil, ackedPipeline("pending_wait: 1s"), `
exporters:
  otlp_grpc/sink:
    timeout: 30s
    sending_queue: {enabled: true, wait_for_result: true}
`)
		r.sink.Hold()
		done := sendWithin(r.grpcSender(), first, senderDeadline)
		wantGaveUp(t, "sender", <-done)
		testkit.WaitFor(t, "1 export abandoned at the backend", opTimeout, func() bool { return r.sink.Refused() == 1 })
		r.sink.Unhold()
		sc := waitScrape(t, r, "keys released", func(sc Scrape) bool { return sc.Sum(metricReleased, l()) > 0 })
		wantMetric(t, sc, metricReleased, l(), n)
		wantMetric(t, sc, metricRecords, l(), 0)

		mustSend(t, "the re-send", <-sendWithin(r.grpcSender(), first, opTimeout))
		wantMetric(t, r.scrape(), metricRecords, l("outcome", "unique"), n)
		wantEachOnce(t, r.sink, c, span(0, n))
	})
}

// sendWithin sends ld over s in the background, giving up after d; the
// result arrives on the channel.
func sendWithin(s logSender, ld plog.Logs, d time.Duration) <-chan error {
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		done <- s.SendLogs(ctx, ld)
	}()
	return done
}

// wantGaveUp checks a send ended on the sender's own deadline.
func wantGaveUp(t *testing.T, what string, err error) {
	t.Helper()
	if status.Code(err) != codes.DeadlineExceeded && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s: %v, want its own deadline exceeded", what, err)
	}
}
