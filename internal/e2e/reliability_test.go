package e2e

// Reliability through the binary: restarts with a file_storage snapshot
// (graceful, SIGKILL mid-stream, SIGKILL with a short snapshot interval,
// SIGKILL with a batch in flight), graceful shutdown with a batch in flight,
// unusable snapshots and storage files on disk, and secrets kept out of the
// collector's logs and printed config. Senders retry like OTLP exporters
// (internal/loadgen). RELIABILITY.md has the table of faults and the
// numbers these tests measured.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/otelcol-dedup/otelcol-dedup/internal/loadgen"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

// relSnapshotFile is the bbolt file file_storage keeps the logs snapshot of
// processor "dedup" in (kind_type_name_signal, sanitized).
const relSnapshotFile = "processor_dedup__logs"

// Log lines of the processor's persistence (persist.go).
const (
	relLogRestored  = "dedup: restored the cache snapshot"
	relLogNoSnap    = "dedup: no cache snapshot yet; starting with an empty cache"
	relLogNoStorage = "dedup: cannot open the storage for the cache snapshot; running without persistence until restart"
	relLogUnusable  = "dedup: ignoring an unusable cache snapshot; starting with an empty cache"
)

// relHarness runs collectors one after another on the same loopback ports
// and the same file_storage directory, all exporting to one sink, as a
// restarted collector would: a sender keeps its endpoint across the restart.
type relHarness struct {
	t      *testing.T
	binary string
	sink   *testSink
	ports  Ports  // the first collector's; the later ones listen there again
	store  string // file_storage directory
}

func newRelHarness(t *testing.T) *relHarness {
	t.Helper()
	return &relHarness{t: t, binary: collectorBinary(t), sink: newSink(t), store: t.TempDir()}
}

// relPipeline is the logs pipeline otlp -> dedup (content identity, the
// cache kept in file_storage) -> the sink over gRPC, with the sink
// exporter's timeout raised so a held sink stalls it visibly. extra is more
// dedup settings as YAML flow-map entries.
func (h *relHarness) relPipeline(extra string) string {
	return fmt.Sprintf(`
extensions:
  file_storage: {directory: %q}
exporters:
  %s: {timeout: %s}
processors:
  dedup: {storage: file_storage, %s}
service:
  extensions: [health_check, file_storage]
  pipelines:
    logs:
      receivers: [otlp]
      processors: [dedup]
      exporters: [%s]
`, h.store, SinkGRPCExporter, relExportTimeout, extra, SinkGRPCExporter)
}

// relExportTimeout bounds the sink exporter's requests in relPipeline.
const relExportTimeout = 2 * time.Second

// relCollector is one collector run of a relHarness.
type relCollector struct{ *running }

// start starts a collector with relPipeline(extra) and waits until it is
// ready.
func (h *relHarness) start(extra string) *relCollector { return h.startTo(h.sink, extra) }

// startTo is start with the collector exporting to sink.
func (h *relHarness) startTo(sink *testSink, extra string) *relCollector {
	h.t.Helper()
	rc, err := h.launch(sink, extra)
	if err != nil {
		rc.dumpLog()
		h.t.Fatal(err)
	}
	return rc
}

// launch starts a collector and waits until it is ready or exited; the
// error says which. It is stopped by PID in the test's cleanup.
func (h *relHarness) launch(sink *testSink, extra string) (*relCollector, error) {
	h.t.Helper()
	r, err := launch(h.t, h.binary, Config("detailed", sink, h.ports), nil, []string{h.relPipeline(extra)})
	if err == nil && h.ports == (Ports{}) {
		h.ports = r.ports
	}
	r.sink = sink
	return &relCollector{r}, err
}

// kill sends SIGKILL to the collector's PID, as a crash or the OOM killer
// would, and waits for it to exit.
func (rc *relCollector) kill() { rc.col.Kill() }

// logLines returns the JSON fields of every line of the collector's output
// whose message is msg (the console encoder: tab-separated, fields last).
func (rc *relCollector) logLines(msg string) []map[string]any {
	rc.t.Helper()
	b, err := os.ReadFile(rc.log)
	if err != nil {
		rc.t.Fatal(err)
	}
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		parts := strings.Split(sc.Text(), "\t")
		if len(parts) < 5 || parts[3] != msg {
			continue
		}
		fields := map[string]any{"level": parts[1]}
		if err := json.Unmarshal([]byte(parts[len(parts)-1]), &fields); err != nil {
			rc.t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		fields["level"] = parts[1]
		out = append(out, fields)
	}
	return out
}

// restoredKeys returns the keys=N of the collector's one restore line, or
// -1 if it restored nothing (no snapshot, or an unusable one).
func (rc *relCollector) restoredKeys() int {
	rc.t.Helper()
	lines := rc.logLines(relLogRestored)
	switch len(lines) {
	case 0:
		return -1
	case 1:
		return int(lines[0]["keys"].(float64))
	}
	rc.t.Fatalf("%d restore lines, want at most 1: %v", len(lines), lines)
	return 0
}

// load is a loadgen run against the harness' collector: OTLP/gRPC, retried
// like an exporter (100 ms first backoff, up to 60 s).
func (h *relHarness) load(seed uint64, records int64, extra func(*loadgen.Config)) loadgen.Config {
	cfg := loadgen.Config{
		Endpoint: h.ports.OTLPGRPC, Records: records, Duplicates: 0.2, Batch: 250, Senders: 4, Seed: seed,
		Retry: loadgen.RetryConfig{InitialInterval: 100 * time.Millisecond, MaxInterval: time.Second, MaxElapsedTime: time.Minute},
	}
	if extra != nil {
		extra(&cfg)
	}
	return cfg
}

// relRun sends cfg's stream and checks every request was acknowledged.
func relRun(t *testing.T, cfg loadgen.Config) loadgen.Summary {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sum, err := loadgen.Run(ctx, cfg)
	if err != nil {
		t.Fatalf("loadgen: %v", err)
	}
	if sum.Errors != 0 || sum.FailedRecords != 0 || sum.Sent != cfg.Records {
		t.Fatalf("loadgen: %+v, want every record acknowledged", sum)
	}
	return sum
}

// relStreamIDs lists the event.id of every identity of cfg's stream.
func relStreamIDs(t *testing.T, cfg loadgen.Config) []string {
	t.Helper()
	g, err := loadgen.NewGenerator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, g.Uniques())
	for i := range ids {
		ids[i] = g.EventID(uint64(i))
	}
	return ids
}

// relEventIDs counts the records the sinks accepted by event.id.
func relEventIDs(sinks ...*testSink) (map[string]int, int) {
	counts := map[string]int{}
	total := 0
	var all []plog.Logs
	for _, s := range sinks {
		all = append(all, s.Logs()...)
	}
	for _, ld := range all {
		for i := range ld.ResourceLogs().Len() {
			sls := ld.ResourceLogs().At(i).ScopeLogs()
			for j := range sls.Len() {
				lrs := sls.At(j).LogRecords()
				for k := range lrs.Len() {
					v, _ := lrs.At(k).Attributes().Get("event.id")
					counts[v.Str()]++
					total++
				}
			}
		}
	}
	return counts, total
}

// relDeliveries sums counts over ids: how many records of those identities
// arrived, and how many of them at least once.
func relDeliveries(counts map[string]int, ids []string) (records, distinct int) {
	for _, id := range ids {
		records += counts[id]
		if counts[id] > 0 {
			distinct++
		}
	}
	return records, distinct
}

// TestReliabilityGracefulRestart: SIGTERM, then a restart on the same
// file_storage directory. The last snapshot is taken after the pipeline
// drained, so re-sending every record after the restart delivers none of
// them again (the component README's Restarts), while new records still
// pass.
func TestReliabilityGracefulRestart(t *testing.T) {
	h := newRelHarness(t)
	c1 := h.start("snapshot_interval: 1h")
	if n := len(c1.logLines(relLogNoSnap)); n != 1 {
		t.Fatalf("first start: %d %q lines, want 1", n, relLogNoSnap)
	}
	a := h.load(1, 20_000, nil)
	sumA := relRun(t, a)
	idsA := relStreamIDs(t, a)
	if sumA.Unique != int64(len(idsA)) {
		t.Fatalf("loadgen acknowledged %d identities, the stream has %d", sumA.Unique, len(idsA))
	}
	sc := c1.scrape()
	wantMetric(t, sc, metricRecords, dedupLabels("dedup", "outcome", "unique"), float64(len(idsA)))
	wantMetric(t, sc, metricRecords, dedupLabels("dedup", "outcome", "duplicate"), float64(a.Records)-float64(len(idsA)))
	c1.stop()

	c2 := h.start("snapshot_interval: 1h")
	if got := c2.restoredKeys(); got != len(idsA) {
		t.Fatalf("restored keys=%d, want %d", got, len(idsA))
	}
	// The whole stream again, as senders re-sending after the restart.
	relRun(t, a)
	// And records the first run never saw.
	b := h.load(2, 2_000, nil)
	relRun(t, b)
	idsB := relStreamIDs(t, b)
	sc = c2.scrape()
	wantMetric(t, sc, metricRecords, dedupLabels("dedup", "outcome", "unique"), float64(len(idsB)))
	wantMetric(t, sc, metricRecords, dedupLabels("dedup", "outcome", "duplicate"), float64(a.Records+b.Records)-float64(len(idsB)))
	wantMetric(t, sc, metricCacheEntries, dedupLabels("dedup"), float64(len(idsA)+len(idsB)))
	c2.stop()

	counts, total := relEventIDs(h.sink)
	recA, distinctA := relDeliveries(counts, idsA)
	recB, distinctB := relDeliveries(counts, idsB)
	if recA != len(idsA) || distinctA != len(idsA) || recB != len(idsB) || distinctB != len(idsB) || total != recA+recB {
		t.Fatalf("stream A: %d records of %d identities (want each of %d once); B: %d of %d (want %d); total %d",
			recA, distinctA, len(idsA), recB, distinctB, len(idsB), total)
	}
	t.Logf("graceful restart: %d identities restored, %d re-sent records delivered 0 times, %d new delivered once",
		len(idsA), a.Records, len(idsB))
}

// TestReliabilitySIGKILLMidStream: a collector is SIGKILLed while a
// retrying sender streams through it, and restarted on the same ports and
// storage. With snapshot_interval: 1h its last snapshot is the one of the
// previous graceful stop, so the bound is exact:
//   - no unique record is lost: every identity of both streams reaches the
//     sink (the sender's retries land on the restarted collector);
//   - the records snapshotted before the crash are never delivered again,
//     even when re-sent in full;
//   - the duplicates after the restart are exactly the records the killed
//     collector had claimed and delivered since the last snapshot.
func TestReliabilitySIGKILLMidStream(t *testing.T) {
	t.Parallel() // it mostly waits: see TestMain
	h := newRelHarness(t)
	const extra = "snapshot_interval: 1h"
	c1 := h.start(extra)
	a := h.load(11, 10_000, nil)
	relRun(t, a)
	idsA := relStreamIDs(t, a)
	c1.stop() // snapshot: stream A

	// The killed collector exports to a sink of its own, so that what it
	// delivered is known once everything has landed, whenever the requests
	// it had in flight when it died arrive.
	killedSink := newSink(t)
	c2 := h.startTo(killedSink, extra)
	if got := c2.restoredKeys(); got != len(idsA) {
		t.Fatalf("restored keys=%d, want %d", got, len(idsA))
	}
	b := h.load(12, 30_000, func(c *loadgen.Config) { c.Rate = 15_000 })
	idsB := relStreamIDs(t, b)
	var sumB loadgen.Summary
	var loadErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		sumB, loadErr = loadgen.Run(ctx, b)
	})
	testkit.WaitFor(t, "5,000 records of B at the killed collector's sink", opTimeout, func() bool { return killedSink.LogRecordCount() >= 5_000 })
	c2.kill()
	killedAt := time.Now()

	c3 := h.start(extra)
	restartedIn := time.Since(killedAt)
	if got := c3.restoredKeys(); got != len(idsA) {
		t.Fatalf("after SIGKILL: restored keys=%d, want %d (the last snapshot)", got, len(idsA))
	}
	wg.Wait()
	if loadErr != nil || sumB.Errors != 0 || sumB.FailedRecords != 0 || sumB.Sent != b.Records {
		t.Fatalf("loadgen across the crash: %v %+v, want every record acknowledged", loadErr, sumB)
	}
	// Agents re-send what they had buffered: both streams in full.
	relRun(t, a)
	relRun(t, b)
	sc := c3.scrape()
	// The restarted collector delivers each identity of B once, and no A.
	wantMetric(t, sc, metricRecords, dedupLabels("dedup", "outcome", "unique"), float64(len(idsB)))
	c3.stop()

	counts, total := relEventIDs(h.sink, killedSink)
	byKilled, _ := relEventIDs(killedSink)
	var d2 []string // identities of B the killed collector delivered
	for _, id := range idsB {
		if byKilled[id] > 0 {
			d2 = append(d2, id)
		}
	}
	recA, distinctA := relDeliveries(counts, idsA)
	recB, distinctB := relDeliveries(counts, idsB)
	if distinctA != len(idsA) || distinctB != len(idsB) {
		t.Fatalf("unique records lost: A %d of %d identities arrived, B %d of %d", distinctA, len(idsA), distinctB, len(idsB))
	}
	if recA != len(idsA) {
		t.Errorf("A (in the snapshot): %d records delivered, want each of %d once", recA, len(idsA))
	}
	dups := recB - len(idsB)
	if dups != len(d2) {
		t.Errorf("B: %d duplicates delivered, want exactly the %d identities the killed collector had delivered since the last snapshot", dups, len(d2))
	}
	for _, id := range d2 {
		if counts[id] != 2 {
			t.Errorf("B record %s: delivered %d times, want 2 (before and after the crash)", id, counts[id])
		}
	}
	if total != recA+recB {
		t.Errorf("sink holds %d records, %d of them not from the two streams", total, total-recA-recB)
	}
	t.Logf("SIGKILL mid-stream: killed after %d of %d B identities were delivered; restarted in %s; sender retries %d; "+
		"duplicates after restart %d (bound: keys claimed since the last snapshot); lost 0",
		len(d2), len(idsB), restartedIn.Round(time.Millisecond), sumB.Retries, dups)
}

// TestReliabilitySIGKILLShortSnapshotInterval: with snapshot_interval:
// 500ms, a SIGKILL loses only the keys claimed after the last periodic
// snapshot: the restart logs keys=N, and re-sending everything delivers
// exactly (identities sent - N) records again, none of them lost.
func TestReliabilitySIGKILLShortSnapshotInterval(t *testing.T) {
	h := newRelHarness(t)
	const extra = "snapshot_interval: 500ms"
	c1 := h.start(extra)
	a := h.load(21, 5_000, nil)
	relRun(t, a)
	idsA := relStreamIDs(t, a)
	h.waitSnapshot(time.Now()) // a periodic snapshot with all of A
	b := h.load(22, 5_000, nil)
	relRun(t, b) // every request acknowledged: nothing is in flight
	idsB := relStreamIDs(t, b)
	c1.kill()

	c2 := h.start(extra)
	n := c2.restoredKeys()
	if n < len(idsA) || n > len(idsA)+len(idsB) {
		t.Fatalf("restored keys=%d, want between %d (A) and %d (A and B)", n, len(idsA), len(idsA)+len(idsB))
	}
	before, totalBefore := relEventIDs(h.sink)
	relRun(t, a)
	relRun(t, b)
	c2.stop()
	counts, total := relEventIDs(h.sink)
	if again := total - totalBefore; again != len(idsA)+len(idsB)-n {
		t.Errorf("after the restart %d records delivered again, want exactly %d (identities %d - restored %d)",
			again, len(idsA)+len(idsB)-n, len(idsA)+len(idsB), n)
	}
	for _, id := range idsA {
		if counts[id] != before[id] {
			t.Fatalf("A record %s (in a periodic snapshot) delivered again", id)
		}
	}
	if _, d := relDeliveries(counts, append(idsA, idsB...)); d != len(idsA)+len(idsB) {
		t.Fatalf("unique records lost: %d of %d identities arrived", d, len(idsA)+len(idsB))
	}
	t.Logf("SIGKILL, snapshot_interval 500ms: restored %d of %d keys; %d delivered again after the restart; lost 0",
		n, len(idsA)+len(idsB), len(idsA)+len(idsB)-n)
}

// relSendAsync sends ld over gRPC in the background; the result arrives on
// the channel.
func relSendAsync(r *running, ld plog.Logs) <-chan error {
	done := make(chan error, 1)
	s := r.grpcSender()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		done <- s.SendLogs(ctx, ld)
	}()
	return done
}

func relWaitHolding(t *testing.T, s *testSink, n int) {
	t.Helper()
	testkit.WaitFor(t, fmt.Sprintf("%d requests held at the sink", n), opTimeout, func() bool { return s.Holding() >= n })
}

// TestReliabilityGracefulShutdownInFlight: SIGTERM while a batch is in the
// exporter. The collector stops its receivers first and waits for the
// request in flight, so the batch either finishes (delivered, its keys in
// the final snapshot) or fails (its keys released before the final
// snapshot, the sender's retry delivered after the restart): never lost,
// never delivered twice.
func TestReliabilityGracefulShutdownInFlight(t *testing.T) {
	h := newRelHarness(t)
	const extra = "snapshot_interval: 1h"
	x := newCorpus(10, func(i int, lr plog.LogRecord) { lr.Attributes().PutStr("event.id", fmt.Sprintf("x-%d", i)) })
	y := newCorpus(10, func(i int, lr plog.LogRecord) { lr.Attributes().PutStr("event.id", fmt.Sprintf("y-%d", i)) })

	// X finishes: the sink answers after SIGTERM was sent.
	c1 := h.start(extra)
	h.sink.Hold()
	xDone := relSendAsync(c1.running, x.batch(span(0, 10)...))
	relWaitHolding(t, h.sink, 1)
	if err := syscall.Kill(c1.col.PID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The collector shuts down with X still in its exporter.
	testkit.WaitFor(t, "the collector shutting down", opTimeout, func() bool { return bytes.Contains(c1.output(), []byte("Starting shutdown...")) })
	h.sink.Unhold()
	if err := <-xDone; err != nil {
		t.Fatalf("X, in flight at SIGTERM: %v, want delivered", err)
	}
	c1.stop()

	// Y fails: the sink holds it past the exporter's timeout, during the
	// shutdown; the processor releases its keys and the sender gets the error.
	c2 := h.start(extra)
	if got := c2.restoredKeys(); got != 10 {
		t.Fatalf("restored keys=%d, want 10 (X)", got)
	}
	h.sink.Hold()
	yDone := relSendAsync(c2.running, y.batch(span(0, 10)...))
	relWaitHolding(t, h.sink, 1)
	if err := syscall.Kill(c2.col.PID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-yDone; err == nil {
		t.Fatal("Y, held past the export timeout during shutdown: the sender was told it was delivered")
	}
	c2.stop()
	relWaitAbandoned(t, h.sink)
	h.sink.Unhold()
	if got := c2.logLines(relLogRestored); len(got) != 1 {
		t.Fatalf("second run: %d restore lines", len(got))
	}

	// After the restart: X is a duplicate, the retry of Y is delivered.
	c3 := h.start(extra)
	if got := c3.restoredKeys(); got != 10 {
		t.Fatalf("restored keys=%d, want 10 (X; Y was released before the final snapshot)", got)
	}
	send := c3.grpcSender()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	for _, ld := range []plog.Logs{x.batch(span(0, 10)...), y.batch(span(0, 10)...)} {
		if err := send.SendLogs(ctx, ld); err != nil {
			t.Fatal(err)
		}
	}
	c3.stop()
	counts, total := relEventIDs(h.sink)
	for i := range 10 {
		if cx, cy := counts[fmt.Sprintf("x-%d", i)], counts[fmt.Sprintf("y-%d", i)]; cx != 1 || cy != 1 {
			t.Errorf("record %d: X delivered %d times, Y %d times; want once each", i, cx, cy)
		}
	}
	if total != 20 {
		t.Errorf("sink holds %d records, want 20", total)
	}
}

// relWaitAbandoned waits until the requests the sink holds have all given
// up, as they do once the sink's server sees their collector's connection
// close: releasing the hold earlier could still record a request whose
// sender was already told it failed.
func relWaitAbandoned(t *testing.T, sink *testSink) {
	t.Helper()
	testkit.WaitFor(t, "the requests of a stopped collector released by the sink", opTimeout, func() bool { return sink.Holding() == 0 })
}

// TestReliabilityCrashWithBatchInFlight: a periodic snapshot is taken while
// a batch is in the exporter (its keys claimed, not yet delivered), then
// the collector is SIGKILLed before the batch is delivered. The batch never
// reached the backend, so the sender's retry after the restart must be
// delivered: nothing unique is dropped, and a failed delivery releases its
// keys.
func TestReliabilityCrashWithBatchInFlight(t *testing.T) {
	h := newRelHarness(t)
	const extra = "snapshot_interval: 100ms"
	z := newCorpus(10, func(i int, lr plog.LogRecord) { lr.Attributes().PutStr("event.id", fmt.Sprintf("z-%d", i)) })
	c1 := h.start(extra)
	h.sink.Hold()
	done := relSendAsync(c1.running, z.batch(span(0, 10)...))
	relWaitHolding(t, h.sink, 1)
	h.waitSnapshot(time.Now()) // a periodic snapshot while the batch is in flight
	c1.kill()
	if err := <-done; err == nil {
		t.Fatal("the sender was told a batch delivered that the killed collector never exported")
	}
	relWaitAbandoned(t, h.sink)
	h.sink.Unhold()
	if n := h.sink.LogRecordCount(); n != 0 {
		t.Fatalf("the sink recorded %d records of the killed request", n)
	}

	c2 := h.start(extra)
	restored := c2.restoredKeys()
	send := c2.grpcSender()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := send.SendLogs(ctx, z.batch(span(0, 10)...)); err != nil {
		t.Fatal(err)
	}
	c2.stop()
	if n := h.sink.LogRecordCount(); n != 10 {
		t.Errorf("the sender's retry after the restart: %d of 10 records delivered (restored keys=%d); "+
			"the snapshot held the keys of a batch that was never delivered, and its retry was dropped as duplicates", n, restored)
	}
}

// relSnapshotOffsets finds the cache snapshot(s) inside a bbolt file: the
// magic "OCDD" and version 1.
func relSnapshotOffsets(t *testing.T, db []byte) []int {
	t.Helper()
	out := relFindSnapshots(db)
	if len(out) == 0 {
		t.Fatal("no snapshot in the storage file")
	}
	return out
}

func relFindSnapshots(db []byte) []int {
	var out []int
	pat := []byte{'O', 'C', 'D', 'D', 0, 1}
	for i := 0; ; {
		j := bytes.Index(db[i:], pat)
		if j < 0 {
			return out
		}
		out = append(out, i+j)
		i += j + 1
	}
}

// waitSnapshot waits until the storage file holds a cache snapshot written
// at or after t, by the WrittenAt of its header (unix ns at offset 14, see
// internal/snapshot's layout): a periodic save that began after t, with
// every key committed before t in it.
func (h *relHarness) waitSnapshot(t time.Time) {
	h.t.Helper()
	testkit.WaitFor(h.t, "a cache snapshot written after "+t.Format(time.RFC3339Nano), opTimeout, func() bool {
		db, _ := os.ReadFile(filepath.Join(h.store, relSnapshotFile))
		for _, at := range relFindSnapshots(db) {
			if at+22 <= len(db) && int64(binary.BigEndian.Uint64(db[at+14:])) >= t.UnixNano() {
				return true
			}
		}
		return false
	})
}

// TestReliabilityUnusableSnapshotOnDisk: the snapshot inside file_storage's
// bbolt file is damaged in place (bbolt's own structure intact), or was
// written under another key configuration. The collector starts, logs one
// warning naming what is wrong, and starts with an empty cache: every
// record is delivered again. A bbolt file that is itself damaged is another
// matter: file_storage cannot open it and the start fails (documented in
// RELIABILITY.md).
func TestReliabilityUnusableSnapshotOnDisk(t *testing.T) {
	h := newRelHarness(t)
	const extra = "snapshot_interval: 1h"
	c := newCorpus(100, func(i int, lr plog.LogRecord) { lr.Attributes().PutStr("event.id", fmt.Sprintf("c-%d", i)) })
	c1 := h.start(extra)
	send := c1.grpcSender()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := send.SendLogs(ctx, c.batch(span(0, 100)...)); err != nil {
		t.Fatal(err)
	}
	c1.stop()
	dbPath := filepath.Join(h.store, relSnapshotFile)
	good, err := os.ReadFile(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	const entries = 38 // the snapshot header's length

	for _, tc := range []struct {
		name    string
		damage  func(db []byte, at int)
		extra   string
		errText string // the warning's error field starts with it
	}{
		{"flipped entry byte", func(db []byte, at int) { db[at+entries+5] ^= 0xff }, "", "snapshot corrupt: checksum"},
		{"count beyond the data", func(db []byte, at int) {
			binary.BigEndian.PutUint64(db[at+30:], binary.BigEndian.Uint64(db[at+30:])+1)
		}, "", "snapshot truncated: header claims 101 entries"},
		{"count short of the data", func(db []byte, at int) {
			binary.BigEndian.PutUint64(db[at+30:], binary.BigEndian.Uint64(db[at+30:])-1)
		}, "", "snapshot corrupt: 24 bytes follow the checksum"},
		{"unknown version", func(db []byte, at int) { db[at+5] = 9 }, "", "snapshot version unknown: version 9"},
		{"other key configuration", nil, `logs: {key: ['attributes["event.id"]']}`, "snapshot foreign: taken under identity fingerprint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := bytes.Clone(good)
			if tc.damage != nil {
				for _, at := range relSnapshotOffsets(t, db) {
					tc.damage(db, at)
				}
			}
			if err := os.WriteFile(dbPath, db, 0o600); err != nil {
				t.Fatal(err)
			}
			before := h.sink.LogRecordCount()
			settings := extra
			if tc.extra != "" {
				settings += ", " + tc.extra
			}
			rc := h.start(settings)
			warnings := rc.logLines(relLogUnusable)
			if len(warnings) != 1 || warnings[0]["level"] != "warn" {
				t.Fatalf("%d %q lines, want 1 warning: %v", len(warnings), relLogUnusable, warnings)
			}
			if e, _ := warnings[0]["error"].(string); !strings.HasPrefix(e, tc.errText) {
				t.Fatalf("warning error %q, want it to start with %q", e, tc.errText)
			}
			if rc.restoredKeys() != -1 {
				t.Fatal("an unusable snapshot restored keys")
			}
			s := rc.grpcSender()
			if err := s.SendLogs(ctx, c.batch(span(0, 100)...)); err != nil {
				t.Fatal(err)
			}
			rc.stop()
			if got := h.sink.LogRecordCount() - before; got != 100 {
				t.Fatalf("%d of 100 records delivered on an empty cache", got)
			}
			t.Logf("warning: %v", warnings[0]["error"])
		})
	}

	// The storage file itself damaged: not a snapshot problem, a storage
	// one. file_storage (bbolt) cannot open it and the processor cannot get
	// its client: like a corrupt snapshot, that costs the cache, not the
	// start. The collector runs without persistence, says so once, and
	// delivers everything. (file_storage's recreate: true does not help: it
	// only catches panics.)
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"garbage file", bytes.Repeat([]byte{0xa5}, 64<<10)},
		{"truncated in the meta pages", good[:100]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(dbPath, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			before := h.sink.LogRecordCount()
			rc := h.start(extra)
			warnings := rc.logLines(relLogNoStorage)
			if len(warnings) != 1 || warnings[0]["level"] != "warn" {
				t.Fatalf("%d %q lines, want 1 warning: %v", len(warnings), relLogNoStorage, warnings)
			}
			if e, _ := warnings[0]["error"].(string); e != "invalid database" {
				t.Fatalf("warning error %q, want %q", e, "invalid database")
			}
			s := rc.grpcSender()
			if err := s.SendLogs(ctx, c.batch(span(0, 100)...)); err != nil {
				t.Fatal(err)
			}
			rc.stop()
			if got := h.sink.LogRecordCount() - before; got != 100 {
				t.Fatalf("%d of 100 records delivered without persistence", got)
			}
		})
	}
	// Truncated after the two meta pages, bbolt itself faults (SIGBUS on
	// its memory map) while opening the file: the process dies. Recorded,
	// not a promise of ours: the start fails either way.
	t.Run("truncated after the meta pages", func(t *testing.T) {
		if err := os.WriteFile(dbPath, good[:8192], 0o600); err != nil {
			t.Fatal(err)
		}
		rc, err := h.launch(h.sink, extra)
		if err == nil {
			t.Fatal("the collector started on a truncated storage file")
		}
		b := rc.output()
		first := "?"
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "SIGBUS") || strings.HasPrefix(line, "Error:") || strings.HasPrefix(line, "panic") {
				first = line
				break
			}
		}
		t.Logf("truncated to 8 KiB: the collector does not start: %s", first)
	})
}

// TestReliabilitySecretsRedacted: the Redis password, given in the config
// file or through ${env:...}, never appears in the collector's output at
// debug level (start-up, round trips, authentication failures), nor in the
// configuration print-config shows.
func TestReliabilitySecretsRedacted(t *testing.T) {
	secret := make([]byte, 12)
	_, _ = rand.Read(secret)
	password := "pw-" + hex.EncodeToString(secret)
	wrong := "wrong-" + hex.EncodeToString(secret)
	srv := redistest.Standalone(t, redistest.WithPassword(password))
	t.Setenv("DEDUP_E2E_REDIS_PASSWORD", password)

	pipeline := func(passwordValue string) string {
		return fmt.Sprintf(`
processors:
  dedup:
    logs: {key: ['attributes["event.id"]']}
    redis: {endpoints: [%q], username: default, password: %q, timeout: 500ms}
service:
  telemetry:
    logs: {level: debug}
  pipelines:
    logs:
      receivers: [otlp]
      processors: [dedup]
      exporters: [%s]
`, srv.Addr(), passwordValue, SinkGRPCExporter)
	}
	c := newCorpus(50, func(i int, lr plog.LogRecord) { lr.Attributes().PutStr("event.id", fmt.Sprintf("s-%d", i)) })
	for _, tc := range []struct{ name, value, secret string }{
		{"right password in the file", password, password},
		{"password from the environment", "${env:DEDUP_E2E_REDIS_PASSWORD}", password},
		{"wrong password (auth errors logged)", wrong, wrong},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := startCollector(t, nil, pipeline(tc.value))
			send := r.grpcSender()
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			defer cancel()
			for range 3 {
				if err := send.SendLogs(ctx, c.batch(span(0, 50)...)); err != nil {
					t.Fatal(err)
				}
			}
			sc := r.scrape()
			r.stop()
			b, err := os.ReadFile(r.log)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(b, []byte(tc.secret)) {
				t.Fatalf("the password appears in the collector's output")
			}
			// A wrong password is named at start: the processor starts, and
			// keeps asking.
			started := "dedup: shared tier connected"
			if tc.secret == wrong {
				started = "dedup: shared tier: Redis refuses the collector's credentials or permissions"
			}
			if !bytes.Contains(b, []byte(started)) {
				t.Fatalf("the collector's output lacks %q:\n%s", started, tail(b, 20))
			}
			ok := sc.Sum("otelcol_processor_dedup_redis_requests", Labels{"op": "claim", "result": "ok"})
			failed := sc.Sum("otelcol_processor_dedup_redis_requests", Labels{"op": "claim", "result": "error"})
			if tc.secret == wrong && (failed == 0 || !bytes.Contains(b, []byte("dedup: shared tier (redis) failed"))) {
				t.Fatalf("with a wrong password: %g failed claims, want > 0 and a logged failure", failed)
			}
			if tc.secret == password && ok == 0 {
				t.Fatalf("with the right password: no successful claim")
			}
			t.Logf("%d bytes of output at debug level, claims ok=%g error=%g: password absent", len(b), ok, failed)
		})
	}

	t.Run("print-config", func(t *testing.T) {
		dir := t.TempDir()
		basePath, testPath := filepath.Join(dir, "base.yaml"), filepath.Join(dir, "test.yaml")
		if err := WriteConfig(basePath, Config("detailed", newSink(t), Ports{})); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(testPath, []byte(pipeline(password)), 0o600); err != nil {
			t.Fatal(err)
		}
		bin := collectorBinary(t)
		// v0.165 has print-config (alias print-initial-config) without a
		// feature gate; its modes are redacted (default) and unredacted.
		for _, args := range [][]string{
			{"print-config"},
			{"print-initial-config"},
			{"print-config", "--format", "json"},
			{"print-config", "--mode", "unredacted"},
			{"validate"},
		} {
			cmd := exec.Command(bin, append(args, "--config", basePath, "--config", testPath)...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v: %v\n%s", args, err, out)
			}
			if bytes.Contains(out, []byte(password)) {
				t.Errorf("%v prints the password", args)
			}
			if args[0] != "validate" && !bytes.Contains(out, []byte("[REDACTED]")) {
				t.Errorf("%v: no [REDACTED] in the output:\n%s", args, out)
			}
		}
		// An invalid config with a password: the error names the bad field,
		// not the secret.
		bad := strings.Replace(pipeline(password), "timeout: 500ms", "timeout: 0s", 1)
		if err := os.WriteFile(testPath, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, "validate", "--config", basePath, "--config", testPath).CombinedOutput()
		if err == nil || !bytes.Contains(out, []byte(`redis.timeout must be > 0, got "0s"`)) || bytes.Contains(out, []byte(password)) {
			t.Fatalf("validate of an invalid config: %v\n%s", err, out)
		}
	})
}
