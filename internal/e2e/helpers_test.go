package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.uber.org/goleak"

	"github.com/otelcol-dedup/otelcol-dedup/internal/otlp"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
)

// Tests that mostly wait (a Kafka group's session, scrape intervals, a
// Cluster's failover, exporters' timeouts and retries) call t.Parallel: they
// run beside each other, after the others, two at a time on two cores. Each
// starts its own collectors, Redis and ports.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// collectorBinary returns the otelcol-dedup binary under test, built on first
// use (not in TestMain: `go test -run '^$' -bench .` and tests that start no
// collector need no build).
func collectorBinary(t *testing.T) string {
	t.Helper()
	start := time.Now()
	bin, err := Distribution(os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Logf("built the distribution in %s", d.Round(100*time.Millisecond))
	}
	return bin
}

// Timeouts of the harness: generous, as they bound waits for things that
// happen in milliseconds unless something is wrong.
const (
	startTimeout = 30 * time.Second
	stopGrace    = 15 * time.Second
	opTimeout    = 30 * time.Second
)

// running is one collector under test, with the sink it exports to (nil for
// an agent, which exports to a collector under test).
type running struct {
	t     *testing.T
	col   *Collector
	ports Ports
	sink  *testSink
	log   string // path of the collector's stdout and stderr

	httpSenders []*otlp.Client // closed (idle connections) before stop
}

// testSink is an OTLP sink whose requests Faults (internal/otlp) decide.
type testSink struct {
	*otlp.Sink
	*otlp.Faults
}

// newSink starts an OTLP sink, closed when the test ends.
func newSink(t testing.TB) *testSink {
	t.Helper()
	s, err := otlp.NewSink()
	if err != nil {
		t.Fatalf("sink: %v", err)
	}
	f := &otlp.Faults{}
	s.Gate = f.Gate
	t.Cleanup(func() { _ = s.Close() })
	t.Cleanup(f.Unhold) // first: held requests go before the servers stop
	return &testSink{s, f}
}

// startCollector starts the binary with, in this order of precedence
// (later --config files override earlier ones; maps merge, lists are
// replaced): the shipped config files (paths such as testdata/default.yaml),
// Config (listeners, sink exporters, telemetry, so it overrides a shipped
// file's endpoints), then the test's own YAML snippets, which say what the
// pipelines do. It waits until the collector is ready. The collector is
// stopped by PID and the sink closed in t.Cleanup; if the test failed, the
// collector's output is logged.
func startCollector(t *testing.T, shipped []string, yamls ...string) *running {
	t.Helper()
	sink := newSink(t)
	r := startProcess(t, collectorBinary(t), Config("detailed", sink, Ports{}), shipped, yamls)
	r.sink = sink
	return r
}

// startProcess starts binary with the shipped config files, base and the
// test's YAML snippets, in that order of precedence, and waits until it is
// ready; see startCollector.
func startProcess(t *testing.T, binary string, base map[string]any, shipped, yamls []string) *running {
	t.Helper()
	r, err := launch(t, binary, base, shipped, yamls)
	if err != nil {
		r.dumpLog()
		t.Fatal(err)
	}
	return r
}

// launch is startProcess returning the error of a start that failed (the
// process is gone then, its output in r.log).
func launch(t *testing.T, binary string, base map[string]any, shipped, yamls []string) (*running, error) {
	t.Helper()
	dir := t.TempDir()
	args := append(slices.Clone(shipped), filepath.Join(dir, "base.yaml"))
	if err := WriteConfig(args[len(args)-1], base); err != nil {
		t.Fatal(err)
	}
	for i, y := range yamls {
		args = append(args, filepath.Join(dir, fmt.Sprintf("test%d.yaml", i)))
		if err := os.WriteFile(args[len(args)-1], []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r := &running{t: t, log: filepath.Join(dir, "collector.log")}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	col, err := Start(ctx, binary, r.log, nil, args...)
	if err != nil {
		return r, err
	}
	r.col, r.ports = col, col.Ports
	t.Cleanup(func() {
		if err := col.Stop(stopGrace); err != nil {
			t.Errorf("stop: %v", err)
		}
		if t.Failed() {
			r.dumpLog()
		}
	})
	return r, nil
}

// startFails starts the binary like startCollector, checks that it refuses
// to start (it exits with an error before it is ready), and returns its
// output and its sink.
func startFails(t *testing.T, yamls ...string) (string, *testSink) {
	t.Helper()
	sink := newSink(t)
	r, err := launch(t, collectorBinary(t), Config("detailed", sink, Ports{}), nil, yamls)
	if err == nil {
		t.Fatal("the collector started; want it to refuse to start")
	}
	if !strings.Contains(err.Error(), "exited before it was ready: exit status") {
		t.Fatalf("%v; want an exit with an error before the collector was ready", err)
	}
	return string(r.output()), sink
}

// output is what the collector wrote so far.
func (r *running) output() []byte {
	r.t.Helper()
	b, err := os.ReadFile(r.log)
	if err != nil {
		r.t.Fatal(err)
	}
	return b
}

func (r *running) dumpLog() {
	b, err := os.ReadFile(r.log)
	if err != nil {
		r.t.Logf("collector log: %v", err)
		return
	}
	r.t.Logf("collector output, last lines:\n%s", tail(b, 80))
}

// scrape reads the collector's metrics endpoint.
func (r *running) scrape() Scrape {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	sc, err := ScrapeMetrics(ctx, r.ports.MetricsURL())
	if err != nil {
		r.t.Fatal(err)
	}
	return sc
}

// stop stops the collector now (it flushes its pipelines on the way), so
// that what the sink holds afterwards is final.
//
// The senders' idle HTTP connections are closed first: a connection the
// client dialed but never used (net/http's Transport dials spares when
// requests run concurrently) counts as active for the receiver's graceful
// shutdown until it is 5 s old, which would delay the stop by up to 5 s.
func (r *running) stop() {
	r.t.Helper()
	for _, s := range r.httpSenders {
		s.Close()
	}
	if err := r.col.Stop(stopGrace); err != nil {
		r.t.Fatalf("stop: %v", err)
	}
}

// waitScrape scrapes r until cond holds, for at most opTimeout, and returns
// the scrape that met it.
func waitScrape(t *testing.T, r *running, what string, cond func(Scrape) bool) Scrape {
	t.Helper()
	var sc Scrape
	testkit.WaitFor(t, what, opTimeout, func() bool {
		sc = r.scrape()
		return cond(sc)
	})
	return sc
}

func (r *running) grpcSender() *otlp.Client {
	r.t.Helper()
	s, err := otlp.NewClient(otlp.GRPC, r.ports.OTLPGRPC)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = s.Close() })
	return s
}

func (r *running) httpSender() *otlp.Client {
	r.t.Helper()
	s, err := otlp.NewClient(otlp.HTTP, r.ports.OTLPHTTPURL())
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = s.Close() })
	r.httpSenders = append(r.httpSenders, s)
	return s
}

// logSender is what the gRPC and HTTP senders have in common.
type logSender interface {
	SendLogs(context.Context, plog.Logs) error
}

// wantMetric checks one counter's value, summed over the series matching
// labels, and prints the matching series when it differs.
func wantMetric(t *testing.T, sc Scrape, name string, labels Labels, want float64) {
	t.Helper()
	if got := sc.Sum(name, labels); got != want {
		t.Errorf("%s%v = %g, want %g; series: %v", name, labels, got, want, sc.Find(name, nil))
	}
}

// corpus is a fixed set of distinct log records; batches are built from
// byte-identical copies of them.
type corpus struct {
	logs    plog.Logs // one resource, one scope, the originals in order
	records plog.LogRecordSlice
}

var baseTime = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

// newCorpus makes n distinct records; fill, if not nil, sets each one up
// further.
func newCorpus(n int, fill func(i int, lr plog.LogRecord)) *corpus {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("service.name", "e2e")
	rl.Resource().Attributes().PutStr("host.name", "test-host")
	sl := rl.ScopeLogs().AppendEmpty()
	sl.Scope().SetName("e2e")
	sl.Scope().SetVersion("1.0.0")
	for i := range n {
		lr := sl.LogRecords().AppendEmpty()
		ts := baseTime.Add(time.Duration(i) * time.Millisecond)
		lr.SetTimestamp(pcommon.NewTimestampFromTime(ts))
		lr.SetObservedTimestamp(pcommon.NewTimestampFromTime(ts.Add(time.Millisecond)))
		lr.SetSeverityNumber(plog.SeverityNumberInfo)
		lr.SetSeverityText("INFO")
		lr.Body().SetStr(fmt.Sprintf("record %d", i))
		lr.Attributes().PutInt("seq", int64(i))
		if fill != nil {
			fill(i, lr)
		}
	}
	return &corpus{logs: ld, records: sl.LogRecords()}
}

// batch returns a request holding copies of the records at indices, in that
// order, under the corpus' resource and scope.
func (c *corpus) batch(indices ...int) plog.Logs {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	c.logs.ResourceLogs().At(0).Resource().CopyTo(rl.Resource())
	sl := rl.ScopeLogs().AppendEmpty()
	c.logs.ResourceLogs().At(0).ScopeLogs().At(0).Scope().CopyTo(sl.Scope())
	for _, i := range indices {
		c.records.At(i).CopyTo(sl.LogRecords().AppendEmpty())
	}
	return ld
}

// span returns the indices lo..hi-1.
func span(lo, hi int) []int {
	out := make([]int, 0, hi-lo)
	for i := lo; i < hi; i++ {
		out = append(out, i)
	}
	return out
}

// delivered returns every record the sink accepted, marshaled, with how many
// times each one arrived.
func delivered(sink *testSink) (map[string]int, int) {
	m := plog.ProtoMarshaler{}
	counts := map[string]int{}
	total := 0
	for _, ld := range sink.Logs() {
		for i := range ld.ResourceLogs().Len() {
			rl := ld.ResourceLogs().At(i)
			for j := range rl.ScopeLogs().Len() {
				lrs := rl.ScopeLogs().At(j).LogRecords()
				for k := range lrs.Len() {
					one := plog.NewLogs()
					lrs.At(k).CopyTo(one.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords().AppendEmpty())
					b, _ := m.MarshalLogs(one)
					counts[string(b)]++
					total++
				}
			}
		}
	}
	return counts, total
}

// recordKey is the key delivered uses for one corpus record.
func (c *corpus) recordKey(i int) string {
	one := plog.NewLogs()
	c.records.At(i).CopyTo(one.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords().AppendEmpty())
	b, _ := (&plog.ProtoMarshaler{}).MarshalLogs(one)
	return string(b)
}

// wantEachOnce checks the sink holds exactly the corpus records at indices,
// each exactly once, and nothing else.
func wantEachOnce(t *testing.T, sink *testSink, c *corpus, indices []int) {
	t.Helper()
	wantEach(t, sink, c, indices, 1)
}

// wantEach checks that the sink holds exactly the records of indices, each
// delivered times times.
func wantEach(t *testing.T, sink *testSink, c *corpus, indices []int, times int) {
	t.Helper()
	counts, _ := delivered(sink)
	want := make([]string, len(indices))
	for j, i := range indices {
		want[j] = c.recordKey(i)
	}
	testkit.WantEach(t, counts, want, times, func(j int) string { return strconv.Itoa(indices[j]) })
}

// logsGateway is an otelcol-dedup config: a logs pipeline from the OTLP
// receiver through the dedup processor id, with settings (YAML indented
// under it; "" for the defaults), to the test sink.
func logsGateway(id, settings string) string {
	return fmt.Sprintf(`
processors:
  %s:
%sservice:
  pipelines:
    logs:
      receivers: [otlp]
      processors: [%s]
      exporters: [otlp_grpc/sink]
`, id, settings, id)
}

// agentToGateways is an otelcol-agent config: the receiver name, with
// settings (YAML indented under it), sending every record to each gateway.
func agentToGateways(name, settings string, gateways ...string) string {
	var exporters, ids []string
	for i, gw := range gateways {
		id := fmt.Sprintf("otlp_grpc/gateway%d", i)
		exporters = append(exporters, fmt.Sprintf("  %s: {endpoint: %q, tls: {insecure: true}}\n", id, gw))
		ids = append(ids, id)
	}
	return fmt.Sprintf(`
receivers:
  %s:
%sexporters:
%sservice:
  pipelines:
    logs:
      receivers: [%s]
      exporters: [%s]
`, name, settings, strings.Join(exporters, ""), name, strings.Join(ids, ", "))
}

// tail returns the last n lines of b.
func tail(b []byte, n int) []byte {
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	return bytes.Join(lines[max(len(lines)-n, 0):], []byte("\n"))
}
