package dedupprocessor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/clock"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
)

// A go-redis pool whose every connection failed to dial (a killed server)
// dials again every second in a goroutine of its own, which ends within a
// second of the pool's Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// harness runs one logs processor with a metric reader over its telemetry.
type harness struct {
	t      *testing.T
	proc   processor.Logs
	reader *sdkmetric.ManualReader
	id     component.ID
	signal string // "logs" when empty
}

// newHarness starts a logs processor with cfg in front of next; a logger,
// if given, replaces the nop one.
func newHarness(t *testing.T, cfg *Config, next consumer.Logs, logger ...*zap.Logger) *harness {
	t.Helper()
	return newHarnessOn(t, nil, cfg, next, logger...)
}

// newHarnessOn is newHarness with the processor started on host.
func newHarnessOn(t *testing.T, host component.Host, cfg *Config, next consumer.Logs, logger ...*zap.Logger) *harness {
	t.Helper()
	return startHarness(t, host, cfg, next, nil, logger...)
}

// newClockedHarness is newHarness on the test's clock.
func newClockedHarness(t *testing.T, cfg *Config, next consumer.Logs, clk clock.Clock) *harness {
	t.Helper()
	return startHarness(t, nil, cfg, next, clk)
}

// buildHarness starts a logs processor on host, with the clock clk unless
// it is nil; the test shuts it down.
func buildHarness(t *testing.T, host component.Host, cfg *Config, next consumer.Logs, clk clock.Clock, logger ...*zap.Logger) *harness {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	set := processortest.NewNopSettings(componentType)
	set.MeterProvider = mp
	if len(logger) > 0 {
		set.Logger = logger[0]
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	if clk != nil {
		cfg.clock = clk
	}
	proc, err := NewFactory().CreateLogs(context.Background(), set, cfg, next)
	if err != nil {
		t.Fatal(err)
	}
	if err := proc.Start(context.Background(), host); err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, proc: proc, reader: reader, id: set.ID}
}

// startHarness is buildHarness, shut down when the test ends.
func startHarness(t *testing.T, host component.Host, cfg *Config, next consumer.Logs, clk clock.Clock, logger ...*zap.Logger) *harness {
	t.Helper()
	h := buildHarness(t, host, cfg, next, clk, logger...)
	t.Cleanup(func() {
		if err := h.proc.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return h
}

// metric returns the value of an int64 counter or gauge series whose
// attributes are attrs plus the processor's own, 0 if absent.
func (h *harness) metric(name string, attrs ...attribute.KeyValue) int64 {
	h.t.Helper()
	return testkit.Int64(h.t, h.reader, name, h.attrs(attrs)...)
}

// histogramCount returns the count of a histogram series whose attributes
// are attrs plus the processor's own, 0 if absent.
func (h *harness) histogramCount(name string, attrs ...attribute.KeyValue) uint64 {
	h.t.Helper()
	return testkit.HistogramCount(h.t, h.reader, name, h.attrs(attrs)...)
}

// attrs is the processor's own attributes followed by extra.
func (h *harness) attrs(extra []attribute.KeyValue) []attribute.KeyValue {
	signal := h.signal
	if signal == "" {
		signal = "logs"
	}
	return append([]attribute.KeyValue{
		attribute.String("processor", h.id.String()),
		attribute.String("otel.signal", signal),
	}, extra...)
}

func (h *harness) outcome(o string) int64 {
	return h.metric("otelcol_processor_dedup_records", attribute.String("outcome", o))
}

func (h *harness) tier(tr string) int64 {
	return h.metric("otelcol_processor_dedup_duplicates", attribute.String("caught_by", tr))
}

func (h *harness) consume(ld plog.Logs) error {
	return h.proc.ConsumeLogs(context.Background(), ld)
}

// rec describes one log record of a test batch.
type rec struct {
	body     string
	attrs    map[string]any
	resource string // service.name
	ts       uint64
}

func logs(recs ...rec) plog.Logs {
	ld := plog.NewLogs()
	byRes := map[string]plog.LogRecordSlice{}
	for _, r := range recs {
		lrs, ok := byRes[r.resource]
		if !ok {
			rl := ld.ResourceLogs().AppendEmpty()
			rl.Resource().Attributes().PutStr("service.name", r.resource)
			sl := rl.ScopeLogs().AppendEmpty()
			sl.Scope().SetName("test")
			lrs = sl.LogRecords()
			byRes[r.resource] = lrs
		}
		lr := lrs.AppendEmpty()
		lr.Body().SetStr(r.body)
		lr.SetTimestamp(pcommon.Timestamp(r.ts))
		if err := lr.Attributes().FromRaw(r.attrs); err != nil {
			panic(err)
		}
	}
	return ld
}

// bodies lists the bodies delivered to a sink, in order.
func bodies(sink *consumertest.LogsSink) []string {
	var out []string
	for _, ld := range sink.AllLogs() {
		for i := 0; i < ld.ResourceLogs().Len(); i++ {
			rl := ld.ResourceLogs().At(i)
			for j := 0; j < rl.ScopeLogs().Len(); j++ {
				lrs := rl.ScopeLogs().At(j).LogRecords()
				for k := 0; k < lrs.Len(); k++ {
					out = append(out, lrs.At(k).Body().AsString())
				}
			}
		}
	}
	return out
}

func assertBodies(t *testing.T, sink *consumertest.LogsSink, want ...string) {
	t.Helper()
	got := bodies(sink)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("delivered %v, want %v", got, want)
	}
}

func defaultConfig() *Config { return createDefaultConfig().(*Config) }

func TestContentIdentityDropsExactCopies(t *testing.T) {
	sink := new(consumertest.LogsSink)
	h := newHarness(t, defaultConfig(), sink)
	a := rec{body: "a", attrs: map[string]any{"n": 1}, resource: "svc", ts: 1}
	b := rec{body: "b", resource: "svc", ts: 1}
	if err := h.consume(logs(a, a, b)); err != nil {
		t.Fatal(err)
	}
	// Same body, other attribute type, other resource, other timestamp: all new.
	c1 := rec{body: "a", attrs: map[string]any{"n": "1"}, resource: "svc", ts: 1}
	c2 := rec{body: "a", attrs: map[string]any{"n": 1}, resource: "other", ts: 1}
	c3 := rec{body: "a", attrs: map[string]any{"n": 1}, resource: "svc", ts: 2}
	if err := h.consume(logs(a, c1, c2, b, c3)); err != nil {
		t.Fatal(err)
	}
	assertBodies(t, sink, "a", "b", "a", "a", "a")
	if got := sink.LogRecordCount(); got != 5 {
		t.Fatalf("delivered %d records, want 5", got)
	}
	if u, d := h.outcome("unique"), h.outcome("duplicate"); u != 5 || d != 3 {
		t.Fatalf("unique=%d duplicate=%d, want 5 and 3", u, d)
	}
	if bt, lt := h.tier("batch"), h.tier("local"); bt != 1 || lt != 2 {
		t.Fatalf("tier batch=%d local=%d, want 1 and 2", bt, lt)
	}
	if n := h.metric("otelcol_processor_dedup_cache_entries"); n != 5 {
		t.Fatalf("cache_entries = %d, want 5", n)
	}
}

// TestContentIdentityIgnoresObservedTimestampAndConfiguredFields: a record
// with a precise timestamp is identified without its observed timestamp,
// which a re-read gives it anew.
func TestContentIdentityIgnoresObservedTimestampAndConfiguredFields(t *testing.T) {
	sink := new(consumertest.LogsSink)
	cfg := defaultConfig()
	cfg.Logs.Ignore = []string{`attributes["attempt"]`}
	h := newHarness(t, cfg, sink)
	const precise = 1_700_000_000_123_456_789
	first := logs(rec{body: "x", attrs: map[string]any{"attempt": 1, "k": "v"}, resource: "svc", ts: precise})
	first.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0).SetObservedTimestamp(100)
	retry := logs(rec{body: "x", attrs: map[string]any{"attempt": 2, "k": "v"}, resource: "svc", ts: precise})
	retry.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0).SetObservedTimestamp(200)
	other := logs(rec{body: "x", attrs: map[string]any{"attempt": 2, "k": "w"}, resource: "svc", ts: precise})
	for _, ld := range []plog.Logs{first, retry, other} {
		if err := h.consume(ld); err != nil {
			t.Fatal(err)
		}
	}
	if got := sink.LogRecordCount(); got != 2 {
		t.Fatalf("delivered %d, want 2 (the retry differs only in ignored fields)", got)
	}
}

// TestCoarseTimestampsTakeTheObservedTime: lines without a timestamp, or
// with one of a second's or a millisecond's resolution, are told apart by
// when they were observed, so the same line written twice is delivered
// twice; an exact re-send (same observed time) is still caught; and
// ignoring observed_time_unix_nano turns the rule off.
func TestCoarseTimestampsTakeTheObservedTime(t *testing.T) {
	line := func(ts, observed uint64) plog.Logs {
		ld := logs(rec{body: "connection refused", resource: "svc", ts: ts})
		ld.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0).SetObservedTimestamp(pcommon.Timestamp(observed))
		return ld
	}
	for _, tc := range []struct {
		name   string
		ts     uint64
		ignore bool
		want   int // delivered of: a line, the same line seen later, a re-send of the first
	}{
		{"no timestamp", 0, false, 2},
		{"seconds", 1_700_000_000_000_000_000, false, 2},
		{"milliseconds", 1_700_000_000_123_000_000, false, 2},
		{"microseconds", 1_700_000_000_123_456_000, false, 1},
		{"no timestamp, observed time ignored", 0, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sink := new(consumertest.LogsSink)
			cfg := defaultConfig()
			if tc.ignore {
				cfg.Logs.Ignore = []string{"observed_time_unix_nano"}
			}
			h := newHarness(t, cfg, sink)
			for _, ld := range []plog.Logs{line(tc.ts, 1e18), line(tc.ts, 1e18+3e9), line(tc.ts, 1e18)} {
				if err := h.consume(ld); err != nil {
					t.Fatal(err)
				}
			}
			if got := sink.LogRecordCount(); got != tc.want {
				t.Fatalf("delivered %d, want %d", got, tc.want)
			}
		})
	}
}

func TestKeyedDedupAndMissingKeyPolicies(t *testing.T) {
	id := func(v any, body string) rec {
		return rec{body: body, attrs: map[string]any{"event.id": v}, resource: "svc"}
	}
	none := func(body string) rec { return rec{body: body, resource: "svc"} }
	batch := logs(id("e1", "first"), id("e1", "same id, other body"), id(int64(1), "int 1"), id("1", "string 1"),
		none("no id 1"), none("no id 2"), id("", "empty id"), id("", "empty id again"))

	tests := []struct {
		policy    MissingKeyPolicy
		delivered []string
		unique    int64
		dups      int64
		missing   int64
	}{
		{MissingKeyPass, []string{"first", "int 1", "string 1", "no id 1", "no id 2", "empty id"}, 4, 2, 2},
		{MissingKeyDrop, []string{"first", "int 1", "string 1", "empty id"}, 4, 2, 2},
		// With content, the two id-less records differ in body: both unique.
		{MissingKeyContent, []string{"first", "int 1", "string 1", "no id 1", "no id 2", "empty id"}, 6, 2, 0},
	}
	for _, tt := range tests {
		t.Run(string(tt.policy), func(t *testing.T) {
			sink := new(consumertest.LogsSink)
			cfg := defaultConfig()
			cfg.OnMissingKey = tt.policy
			cfg.Logs.Key = []string{`attributes["event.id"]`}
			h := newHarness(t, cfg, sink)
			ld := plog.NewLogs()
			batch.CopyTo(ld)
			if err := h.consume(ld); err != nil {
				t.Fatal(err)
			}
			assertBodies(t, sink, tt.delivered...)
			if u, d, m := h.outcome("unique"), h.outcome("duplicate"), h.outcome("missing_key"); u != tt.unique || d != tt.dups || m != tt.missing {
				t.Fatalf("unique=%d duplicate=%d missing_key=%d, want %d %d %d", u, d, m, tt.unique, tt.dups, tt.missing)
			}
		})
	}
}

func TestCompositeKeyMissingAnyPartIsMissing(t *testing.T) {
	sink := new(consumertest.LogsSink)
	cfg := defaultConfig()
	cfg.Logs.Key = []string{`resource.attributes["service.name"]`, `attributes["event.id"]`}
	h := newHarness(t, cfg, sink)
	// Both lack event.id: keying on the service alone would merge them.
	if err := h.consume(logs(rec{body: "1", resource: "svc"}, rec{body: "2", resource: "svc"},
		rec{body: "3", resource: "svc", attrs: map[string]any{"event.id": "e"}},
		rec{body: "4", resource: "other", attrs: map[string]any{"event.id": "e"}})); err != nil {
		t.Fatal(err)
	}
	assertBodies(t, sink, "1", "2", "3", "4")
	if m := h.outcome("missing_key"); m != 2 {
		t.Fatalf("missing_key = %d, want 2", m)
	}
}

func TestOTTLKeyAndRuntimeError(t *testing.T) {
	sink := new(consumertest.LogsSink)
	cfg := defaultConfig()
	// Same person, same event, same second (Kissmetrics).
	cfg.Logs.Key = []string{`attributes["person"]`, `body`, `Unix(Int(time_unix_nano / 1000000000))`, `ParseJSON(attributes["json"])`}
	h := newHarness(t, cfg, sink)
	const sec = uint64(1_000_000_000)
	r := func(body string, ts uint64, json string) rec {
		return rec{body: body, ts: ts, resource: "svc", attrs: map[string]any{"person": "p1", "json": json}}
	}
	err := h.consume(logs(
		r("signup", 5*sec+1, `{}`),
		r("signup", 5*sec+999, `{}`), // same second: duplicate
		r("signup", 6*sec, `{}`),     // next second: new
		r("bad", 7*sec, `{not json`), // key cannot be evaluated: passes
		r("bad", 7*sec, `{not json`), // ... every time
	))
	if err != nil {
		t.Fatal(err)
	}
	assertBodies(t, sink, "signup", "signup", "bad", "bad")
	if u, d, e := h.outcome("unique"), h.outcome("duplicate"), h.outcome("key_error"); u != 2 || d != 1 || e != 2 {
		t.Fatalf("unique=%d duplicate=%d key_error=%d, want 2 1 2", u, d, e)
	}
}

func TestConditionsSkipNonMatchingRecords(t *testing.T) {
	sink := new(consumertest.LogsSink)
	cfg := defaultConfig()
	cfg.Logs.Conditions = []string{`attributes["kind"] == "event"`, `attributes["kind"] == "audit"`}
	h := newHarness(t, cfg, sink)
	ev := rec{body: "e", resource: "svc", attrs: map[string]any{"kind": "event"}}
	au := rec{body: "a", resource: "svc", attrs: map[string]any{"kind": "audit"}}
	dbg := rec{body: "d", resource: "svc", attrs: map[string]any{"kind": "debug"}}
	if err := h.consume(logs(ev, ev, au, au, dbg, dbg)); err != nil {
		t.Fatal(err)
	}
	assertBodies(t, sink, "e", "a", "d", "d")
	if u, d, s := h.outcome("unique"), h.outcome("duplicate"), h.outcome("skipped"); u != 2 || d != 2 || s != 2 {
		t.Fatalf("unique=%d duplicate=%d skipped=%d, want 2 2 2", u, d, s)
	}
}

func TestMarkDeliversDuplicatesWithAttribute(t *testing.T) {
	sink := new(consumertest.LogsSink)
	cfg := defaultConfig()
	cfg.Action = ActionMark
	h := newHarness(t, cfg, sink)
	a := rec{body: "a", resource: "svc"}
	if err := h.consume(logs(a, a, rec{body: "b", resource: "svc"})); err != nil {
		t.Fatal(err)
	}
	assertBodies(t, sink, "a", "a", "b")
	lrs := sink.AllLogs()[0].ResourceLogs().At(0).ScopeLogs().At(0).LogRecords()
	for i, want := range []bool{false, true, false} {
		v, ok := lrs.At(i).Attributes().Get("dedup.duplicate")
		if ok != want || (ok && !v.Bool()) {
			t.Fatalf("record %d marked=%v, want %v", i, ok, want)
		}
	}
	if d := h.outcome("duplicate"); d != 1 {
		t.Fatalf("duplicate = %d, want 1", d)
	}
}

func TestAllDuplicatesSendsNothingAndPrunes(t *testing.T) {
	sink := new(consumertest.LogsSink)
	h := newHarness(t, defaultConfig(), sink)
	a := rec{body: "a", resource: "svc"}
	b := rec{body: "b", resource: "other"}
	if err := h.consume(logs(a, b)); err != nil {
		t.Fatal(err)
	}
	if err := h.consume(logs(a, b)); err != nil {
		t.Fatal(err)
	}
	if n := len(sink.AllLogs()); n != 1 {
		t.Fatalf("next consumer called %d times, want 1 (an all-duplicate batch is not sent)", n)
	}
	// A batch where one resource keeps nothing loses that resource entirely.
	if err := h.consume(logs(a, rec{body: "c", resource: "other"})); err != nil {
		t.Fatal(err)
	}
	last := sink.AllLogs()[1]
	if last.ResourceLogs().Len() != 1 || last.LogRecordCount() != 1 {
		t.Fatalf("resources=%d records=%d, want 1 and 1", last.ResourceLogs().Len(), last.LogRecordCount())
	}
	// A batch with nothing to deduplicate passes as it came.
	if err := h.consume(plog.NewLogs()); err != nil {
		t.Fatal(err)
	}
	if n := len(sink.AllLogs()); n != 3 {
		t.Fatalf("next consumer called %d times, want 3 (the empty batch passes through)", n)
	}
}

// flakyLogs fails its first n calls, then delivers to the sink.
type flakyLogs struct {
	mu   sync.Mutex
	fail int
	sink consumertest.LogsSink
}

func (f *flakyLogs) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }

func (f *flakyLogs) ConsumeLogs(ctx context.Context, ld plog.Logs) error {
	f.mu.Lock()
	if f.fail > 0 {
		f.fail--
		f.mu.Unlock()
		return errors.New("exporter unavailable")
	}
	f.mu.Unlock()
	return f.sink.ConsumeLogs(ctx, ld)
}

func TestFailedDeliveryReleasesClaimsAndRetryIsDelivered(t *testing.T) {
	next := &flakyLogs{fail: 1}
	h := newHarness(t, defaultConfig(), next)
	// An earlier, delivered record: its key must survive the failure.
	old := rec{body: "old", resource: "svc"}
	if err := h.consume(logs(old)); err == nil {
		t.Fatal("first call should fail")
	}
	if err := h.consume(logs(old)); err != nil {
		t.Fatal(err)
	}
	batch := func() plog.Logs {
		return logs(rec{body: "x", resource: "svc"}, rec{body: "x", resource: "svc"}, rec{body: "y", resource: "svc"}, old)
	}
	next.mu.Lock()
	next.fail = 1
	next.mu.Unlock()
	err := h.consume(batch())
	if err == nil || err.Error() != "exporter unavailable" {
		t.Fatalf("error = %v, want the next consumer's error returned to the sender", err)
	}
	// 1 key from the first failure + x and y; old was held by a delivered claim.
	if r := h.metric("otelcol_processor_dedup_released"); r != 3 {
		t.Fatalf("released = %d, want 3", r)
	}
	if err := h.consume(batch()); err != nil {
		t.Fatal(err)
	}
	assertBodies(t, &next.sink, "old", "x", "y")
	// A third send of the same batch is all duplicates.
	if err := h.consume(batch()); err != nil {
		t.Fatal(err)
	}
	if got := next.sink.LogRecordCount(); got != 3 {
		t.Fatalf("delivered %d, want exactly 3", got)
	}
	// Only accepted batches are counted: old, then x,y (+x in batch, old local), then 4 dups.
	if u, d := h.outcome("unique"), h.outcome("duplicate"); u != 3 || d != 6 {
		t.Fatalf("unique=%d duplicate=%d, want 3 and 6", u, d)
	}
}

// TestConcurrentBatchesDeliverEachRecordOnce races goroutines that send
// overlapping batches: every record reaches the next consumer exactly once.
func TestConcurrentBatchesDeliverEachRecordOnce(t *testing.T) {
	const senders, batches, perBatch, distinct = 8, 50, 100, 2000
	sink := new(consumertest.LogsSink)
	h := newHarness(t, defaultConfig(), sink)
	var wg sync.WaitGroup
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				recs := make([]rec, perBatch)
				for i := range recs {
					recs[i] = rec{body: fmt.Sprint((s*7 + b*perBatch + i) % distinct), resource: "svc"}
				}
				if err := h.consume(logs(recs...)); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	testkit.WantEachOnce(t, testkit.Counts(bodies(sink)), distinct)
	total := int64(senders * batches * perBatch)
	if u, d := h.outcome("unique"), h.outcome("duplicate"); u != distinct || u+d != total {
		t.Fatalf("unique=%d duplicate=%d, want %d and %d", u, d, distinct, total-distinct)
	}
}

func TestSmallCacheCountsEarlyEvictions(t *testing.T) {
	sink := new(consumertest.LogsSink)
	cfg := defaultConfig()
	cfg.Cache.MaxEntries = 2
	h := newHarness(t, cfg, sink)
	a, b, c := rec{body: "a", resource: "s"}, rec{body: "b", resource: "s"}, rec{body: "c", resource: "s"}
	// A copy within one batch is caught whatever the cache's size.
	if err := h.consume(logs(a, b, c, a)); err != nil {
		t.Fatal(err)
	}
	// a was evicted by c before its window ended, so a later copy is let
	// through: the cache is too small, and the eviction counter says so.
	if err := h.consume(logs(a)); err != nil {
		t.Fatal(err)
	}
	assertBodies(t, sink, "a", "b", "c", "a")
	if ev, n := h.metric("otelcol_processor_dedup_cache_evictions"), h.metric("otelcol_processor_dedup_cache_entries"); ev != 2 || n != 2 {
		t.Fatalf("evictions=%d entries=%d, want 2 and 2", ev, n)
	}
}

func TestTwoInstancesNeverShareSeries(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	var procs []processor.Logs
	for _, name := range []string{"a", "b"} {
		set := processortest.NewNopSettings(componentType)
		set.ID = component.MustNewIDWithName("dedup", name)
		set.MeterProvider = mp
		p, err := NewFactory().CreateLogs(context.Background(), set, defaultConfig(), consumertest.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
	}
	r := rec{body: "a", resource: "s"}
	_ = procs[0].ConsumeLogs(context.Background(), logs(r))
	_ = procs[1].ConsumeLogs(context.Background(), logs(r, r))
	ha := &harness{t: t, reader: reader, id: component.MustNewIDWithName("dedup", "a")}
	hb := &harness{t: t, reader: reader, id: component.MustNewIDWithName("dedup", "b")}
	if ua, ub, db := ha.outcome("unique"), hb.outcome("unique"), hb.outcome("duplicate"); ua != 1 || ub != 1 || db != 1 {
		t.Fatalf("a unique=%d, b unique=%d duplicate=%d; want 1, 1, 1", ua, ub, db)
	}
	for _, p := range procs {
		if err := p.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}
