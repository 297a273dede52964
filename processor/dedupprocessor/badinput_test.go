package dedupprocessor

// Bad input at the processor level: every case has a defined outcome,
// nothing panics, nothing unique is lost, and the counters are exact.

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// biRecord is one log record of a bad-input batch: its body is its name
// (the test's handle on it); set fills in the rest.
type biRecord struct {
	name string
	set  func(lr plog.LogRecord)
}

// biLogs builds one resource, one scope, the records in order.
func biLogs(recs ...biRecord) plog.Logs {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("service.name", "bad-input")
	sl := rl.ScopeLogs().AppendEmpty()
	sl.Scope().SetName("bad-input")
	for _, r := range recs {
		lr := sl.LogRecords().AppendEmpty()
		lr.SetTimestamp(1)
		if r.set != nil {
			r.set(lr)
		}
		// The name goes in an attribute, not the body: some cases key on
		// or vary the body itself.
		lr.Attributes().PutStr("test.name", r.name)
	}
	return ld
}

// biNames lists the test.name of every record delivered to sink, in order.
func biNames(sink *consumertest.LogsSink) []string {
	var out []string
	for _, ld := range sink.AllLogs() {
		for i := 0; i < ld.ResourceLogs().Len(); i++ {
			sls := ld.ResourceLogs().At(i).ScopeLogs()
			for j := 0; j < sls.Len(); j++ {
				lrs := sls.At(j).LogRecords()
				for k := 0; k < lrs.Len(); k++ {
					v, _ := lrs.At(k).Attributes().Get("test.name")
					out = append(out, v.Str())
				}
			}
		}
	}
	return out
}

type biCounts struct{ unique, duplicate, missing, skipped, keyError int64 }

func (h *harness) biCounts() biCounts {
	return biCounts{h.outcome("unique"), h.outcome("duplicate"), h.outcome("missing_key"), h.outcome("skipped"), h.outcome("key_error")}
}

// biRun sends each batch through a fresh logs processor with cfg and checks
// what was delivered and counted.
func biRun(t *testing.T, cfg *Config, batches []plog.Logs, delivered []string, want biCounts) {
	t.Helper()
	sink := new(consumertest.LogsSink)
	h := newHarness(t, cfg, sink)
	for i, ld := range batches {
		if err := h.consume(ld); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	if got := strings.Join(biNames(sink), " "); got != strings.Join(delivered, " ") {
		t.Fatalf("delivered [%s]\nwant      [%s]", got, strings.Join(delivered, " "))
	}
	if got := h.biCounts(); got != want {
		t.Fatalf("counts %+v, want %+v", got, want)
	}
}

func biAttr(k string, fill func(v pcommon.Value)) func(lr plog.LogRecord) {
	return func(lr plog.LogRecord) { fill(lr.Attributes().PutEmpty(k)) }
}

func biKeyed(keys ...string) *Config {
	cfg := defaultConfig()
	cfg.Logs.Key = keys
	return cfg
}

// TestBadInputMissingNullAndEmptyKeyValues: an absent attribute and an
// attribute holding the empty (null) value are missing keys, under every
// on_missing_key policy; the empty string, empty bytes, empty map and
// empty slice are values, distinct from each other and from absence.
func TestBadInputMissingNullAndEmptyKeyValues(t *testing.T) {
	recs := []biRecord{
		{"absent1", nil},
		{"absent2", nil},
		{"null1", biAttr("id", func(pcommon.Value) {})},
		{"null2", biAttr("id", func(pcommon.Value) {})},
		{"emptystr1", biAttr("id", func(v pcommon.Value) { v.SetStr("") })},
		{"emptystr2", biAttr("id", func(v pcommon.Value) { v.SetStr("") })},
		{"emptybytes1", biAttr("id", func(v pcommon.Value) { v.SetEmptyBytes() })},
		{"emptybytes2", biAttr("id", func(v pcommon.Value) { v.SetEmptyBytes() })},
		{"emptymap1", biAttr("id", func(v pcommon.Value) { v.SetEmptyMap() })},
		{"emptymap2", biAttr("id", func(v pcommon.Value) { v.SetEmptyMap() })},
		{"emptyslice1", biAttr("id", func(v pcommon.Value) { v.SetEmptySlice() })},
		{"emptyslice2", biAttr("id", func(v pcommon.Value) { v.SetEmptySlice() })},
	}
	values := []string{"emptystr1", "emptybytes1", "emptymap1", "emptyslice1"}
	for _, key := range []string{`attributes["id"]`, `attributes[ "id" ]` /* OTTL, not the fast path */} {
		t.Run(key, func(t *testing.T) {
			t.Run("pass", func(t *testing.T) {
				cfg := biKeyed(key)
				biRun(t, cfg, []plog.Logs{biLogs(recs...)},
					append([]string{"absent1", "absent2", "null1", "null2"}, values...),
					biCounts{unique: 4, duplicate: 4, missing: 4})
			})
			t.Run("drop", func(t *testing.T) {
				cfg := biKeyed(key)
				cfg.OnMissingKey = MissingKeyDrop
				biRun(t, cfg, []plog.Logs{biLogs(recs...)}, values, biCounts{unique: 4, duplicate: 4, missing: 4})
			})
			t.Run("content", func(t *testing.T) {
				// On content the records differ (test.name): all four are unique.
				cfg := biKeyed(key)
				cfg.OnMissingKey = MissingKeyContent
				biRun(t, cfg, []plog.Logs{biLogs(recs...)},
					append([]string{"absent1", "absent2", "null1", "null2"}, values...),
					biCounts{unique: 8, duplicate: 4})
			})
		})
	}
}

// TestBadInputHugeValues: a 1 MiB string and 1 MiB of bytes as key values
// and as bodies: copies collapse, a difference in the last byte is new,
// the string and the bytes with the same content differ.
func TestBadInputHugeValues(t *testing.T) {
	const size = 1 << 20
	big := strings.Repeat("x", size)
	bigOther := big[:size-1] + "y"
	str := func(s string) func(pcommon.Value) { return func(v pcommon.Value) { v.SetStr(s) } }
	byt := func(s string) func(pcommon.Value) {
		return func(v pcommon.Value) { v.SetEmptyBytes().FromRaw([]byte(s)) }
	}
	body := func(fill func(pcommon.Value)) func(lr plog.LogRecord) {
		return func(lr plog.LogRecord) { fill(lr.Body()) }
	}
	t.Run("key", func(t *testing.T) {
		recs := []biRecord{
			{"str", biAttr("id", str(big))}, {"str-copy", biAttr("id", str(big))}, {"str-last-byte", biAttr("id", str(bigOther))},
			{"bytes", biAttr("id", byt(big))}, {"bytes-copy", biAttr("id", byt(big))}, {"bytes-last-byte", biAttr("id", byt(bigOther))},
		}
		// Again in a second batch: all six are copies of the first batch's.
		biRun(t, biKeyed(`attributes["id"]`), []plog.Logs{biLogs(recs...), biLogs(recs...)},
			[]string{"str", "str-last-byte", "bytes", "bytes-last-byte"},
			biCounts{unique: 4, duplicate: 8})
	})
	t.Run("content", func(t *testing.T) {
		// The copies carry the same test.name: content identity needs them
		// byte-identical.
		recs := []biRecord{
			{"str", body(str(big))}, {"str", body(str(big))}, {"str-last-byte", body(str(bigOther))},
			{"bytes", body(byt(big))}, {"bytes", body(byt(big))}, {"bytes-last-byte", body(byt(bigOther))},
		}
		biRun(t, defaultConfig(), []plog.Logs{biLogs(recs...), biLogs(recs...)},
			[]string{"str", "str-last-byte", "bytes", "bytes-last-byte"},
			biCounts{unique: 4, duplicate: 8})
	})
}

// biNest builds a value nested depth levels deep, alternating maps and
// slices, with leaf at the bottom.
func biNest(v pcommon.Value, depth int, leaf string) {
	for i := 0; i < depth; i++ {
		if i%2 == 0 {
			m := v.SetEmptyMap()
			m.PutStr("sibling", "s")
			v = m.PutEmpty("child")
		} else {
			s := v.SetEmptySlice()
			s.AppendEmpty().SetInt(int64(i))
			v = s.AppendEmpty()
		}
	}
	v.SetStr(leaf)
}

// TestBadInputDeeplyNested: values nested 1000 and 10000 levels deep (maps
// and slices alternating) as key and as body: copies collapse, a
// difference at the deepest level is new.
func TestBadInputDeeplyNested(t *testing.T) {
	for _, depth := range []int{1000, 10000} {
		deep := func(leaf string) func(lr plog.LogRecord) {
			return func(lr plog.LogRecord) { biNest(lr.Body(), depth, leaf) }
		}
		recs := []biRecord{{"a", deep("a")}, {"a", deep("a")}, {"b", deep("b")}}
		for _, key := range [][]string{nil, {"body"}, {`body["child"]`}} {
			t.Run(fmt.Sprintf("depth %d key %q", depth, key), func(t *testing.T) {
				biRun(t, biKeyed(key...), []plog.Logs{biLogs(recs...), biLogs(recs...)},
					[]string{"a", "b"}, biCounts{unique: 2, duplicate: 4})
			})
		}
	}
}

// TestBadInputInvalidUTF8: invalid UTF-8 in key values, bodies, attribute
// keys and resource attributes is hashed as bytes: copies collapse,
// different byte sequences never do, and a string never equals the same
// bytes as a bytes value.
func TestBadInputInvalidUTF8(t *testing.T) {
	bad1, bad2 := "\xff\xfe\xfd", "\xff\xfe\xfc"
	t.Run("key", func(t *testing.T) {
		for _, key := range []string{`attributes["id"]`, `Concat([attributes["id"], "-"], "")`} {
			t.Run(key, func(t *testing.T) {
				recs := []biRecord{
					{"bad1", biAttr("id", func(v pcommon.Value) { v.SetStr(bad1) })},
					{"bad1-copy", biAttr("id", func(v pcommon.Value) { v.SetStr(bad1) })},
					{"bad2", biAttr("id", func(v pcommon.Value) { v.SetStr(bad2) })},
					{"half-rune", biAttr("id", func(v pcommon.Value) { v.SetStr("\xe2\x82") })},
				}
				biRun(t, biKeyed(key), []plog.Logs{biLogs(recs...)}, []string{"bad1", "bad2", "half-rune"},
					biCounts{unique: 3, duplicate: 1})
			})
		}
	})
	t.Run("content", func(t *testing.T) {
		setAll := func(s string) func(lr plog.LogRecord) {
			return func(lr plog.LogRecord) {
				lr.Body().SetStr(s)
				lr.Attributes().PutStr(s, s) // an invalid UTF-8 attribute key
				lr.SetSeverityText(s)
				lr.SetEventName(s)
			}
		}
		asBytes := func(lr plog.LogRecord) { lr.Body().SetEmptyBytes().FromRaw([]byte(bad1)) }
		recs := []biRecord{{"bad1", setAll(bad1)}, {"bad1", setAll(bad1)}, {"bad2", setAll(bad2)}, {"bytes", asBytes}}
		biRun(t, defaultConfig(), []plog.Logs{biLogs(recs...)}, []string{"bad1", "bad2", "bytes"},
			biCounts{unique: 3, duplicate: 1})
	})
}

// TestBadInputMapAndSliceBodies: map bodies compare regardless of entry
// order, slices in order, and types are kept apart; both for the content
// identity and for key: [body].
func TestBadInputMapAndSliceBodies(t *testing.T) {
	body := func(raw any) func(lr plog.LogRecord) {
		return func(lr plog.LogRecord) {
			if err := lr.Body().FromRaw(raw); err != nil {
				panic(err)
			}
		}
	}
	mapAB := func(lr plog.LogRecord) {
		m := lr.Body().SetEmptyMap()
		m.PutInt("a", 1)
		m.PutStr("b", "2")
	}
	mapBA := func(lr plog.LogRecord) {
		m := lr.Body().SetEmptyMap()
		m.PutStr("b", "2")
		m.PutInt("a", 1)
	}
	// Each kept record has a name of its own; a record expected to collapse
	// into an earlier one carries that one's name (content identity covers
	// the name attribute).
	recs := []biRecord{
		{"map-ab", mapAB},
		{"map-ab", mapBA}, // the same map, other order: a copy
		{"map-a-str", body(map[string]any{"a": "1", "b": "2"})}, // "1" is not 1
		{"map-nested", body(map[string]any{"a": 1, "b": "2", "c": map[string]any{}})},
		{"map-empty", body(map[string]any{})},
		{"slice-12", body([]any{1, 2})},
		{"slice-12", body([]any{1, 2})},
		{"slice-21", body([]any{2, 1})},                                 // order matters in a slice
		{"slice-of-map", body([]any{map[string]any{"a": 1, "b": "2"}})}, // not the map itself
		{"slice-empty", body([]any{})},
		{"str-empty", body("")}, // an empty string body is a value, not the empty slice or map
	}
	want := []string{"map-ab", "map-a-str", "map-nested", "map-empty", "slice-12", "slice-21", "slice-of-map", "slice-empty", "str-empty"}
	t.Run("content", func(t *testing.T) {
		biRun(t, defaultConfig(), []plog.Logs{biLogs(recs...), biLogs(recs...)}, want, biCounts{unique: 9, duplicate: 13})
	})
	t.Run("key body", func(t *testing.T) {
		biRun(t, biKeyed("body"), []plog.Logs{biLogs(recs...), biLogs(recs...)}, want, biCounts{unique: 9, duplicate: 13})
	})
	t.Run("key body OTTL", func(t *testing.T) {
		// body through OTTL (a converter call) gives the same identities.
		biRun(t, biKeyed(`(body)`), []plog.Logs{biLogs(recs...), biLogs(recs...)}, want, biCounts{unique: 9, duplicate: 13})
	})
	t.Run("empty body is a missing key", func(t *testing.T) {
		biRun(t, biKeyed("body"), []plog.Logs{biLogs(biRecord{"none1", nil}, biRecord{"none2", nil})},
			[]string{"none1", "none2"}, biCounts{missing: 2})
	})
}

// TestBadInputEmptyBatches: batches with no resources, resources without
// scopes and scopes without records (spans, points) pass to the next
// consumer as they came, count nothing and claim nothing, for every signal.
func TestBadInputEmptyBatches(t *testing.T) {
	t.Run("logs", func(t *testing.T) {
		sink := new(consumertest.LogsSink)
		h := newHarness(t, defaultConfig(), sink)
		noRes := plog.NewLogs()
		noScope := plog.NewLogs()
		noScope.ResourceLogs().AppendEmpty().Resource().Attributes().PutStr("service.name", "s")
		noRecords := plog.NewLogs()
		noRecords.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().Scope().SetName("empty")
		noRecords.ResourceLogs().AppendEmpty() // and one resource with nothing at all
		for i, ld := range []plog.Logs{noRes, noScope, noRecords} {
			want := plog.NewLogs()
			ld.CopyTo(want)
			if err := h.consume(ld); err != nil {
				t.Fatalf("batch %d: %v", i, err)
			}
			got := sink.AllLogs()[i]
			if got.ResourceLogs().Len() != want.ResourceLogs().Len() || got.LogRecordCount() != 0 {
				t.Fatalf("batch %d: got %d resources, want %d", i, got.ResourceLogs().Len(), want.ResourceLogs().Len())
			}
		}
		if n := len(sink.AllLogs()); n != 3 {
			t.Fatalf("next consumer called %d times, want 3", n)
		}
		if got := h.biCounts(); got != (biCounts{}) {
			t.Fatalf("counts %+v, want none", got)
		}
		if n := h.metric("otelcol_processor_dedup_cache_entries"); n != 0 {
			t.Fatalf("cache_entries = %d, want 0", n)
		}
		// Empty containers beside records that are deduplicated: the records
		// get their verdicts (the walk's indices are not thrown off by the
		// empty scopes), and the empty containers are pruned with the rest.
		mixed := plog.NewLogs()
		mixed.ResourceLogs().AppendEmpty()                           // no scopes
		mixed.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty() // no records
		rl := mixed.ResourceLogs().AppendEmpty()
		rl.ScopeLogs().AppendEmpty()
		lrs := rl.ScopeLogs().AppendEmpty().LogRecords()
		for _, b := range []string{"x", "x", "y"} {
			lrs.AppendEmpty().Body().SetStr(b)
		}
		rl.ScopeLogs().AppendEmpty()
		if err := h.consume(mixed); err != nil {
			t.Fatal(err)
		}
		got := sink.AllLogs()[3]
		if got.LogRecordCount() != 2 || got.ResourceLogs().Len() != 1 || got.ResourceLogs().At(0).ScopeLogs().Len() != 1 {
			t.Fatalf("records=%d resources=%d, want 2 records in 1 resource and 1 scope", got.LogRecordCount(), got.ResourceLogs().Len())
		}
		if got := h.biCounts(); got != (biCounts{unique: 2, duplicate: 1}) {
			t.Fatalf("counts %+v, want unique 2, duplicate 1", got)
		}
	})
	t.Run("traces", func(t *testing.T) {
		sink := new(consumertest.TracesSink)
		p, h := signalHarness(t, "traces", func(set processor.Settings) (processor.Traces, error) {
			return NewFactory().CreateTraces(context.Background(), set, defaultConfig(), sink)
		})
		defer func() { _ = p.Shutdown(context.Background()) }()
		noRes := ptrace.NewTraces()
		noScope := ptrace.NewTraces()
		noScope.ResourceSpans().AppendEmpty()
		noSpans := ptrace.NewTraces()
		noSpans.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
		for i, td := range []ptrace.Traces{noRes, noScope, noSpans} {
			resources := td.ResourceSpans().Len()
			if err := p.ConsumeTraces(context.Background(), td); err != nil {
				t.Fatalf("batch %d: %v", i, err)
			}
			if got := sink.AllTraces()[i].ResourceSpans().Len(); got != resources {
				t.Fatalf("batch %d: %d resources, want %d", i, got, resources)
			}
		}
		if got := h.biCounts(); got != (biCounts{}) {
			t.Fatalf("counts %+v, want none", got)
		}
	})
	t.Run("metrics", func(t *testing.T) {
		sink := new(consumertest.MetricsSink)
		p, h := signalHarness(t, "metrics", func(set processor.Settings) (processor.Metrics, error) {
			return NewFactory().CreateMetrics(context.Background(), set, defaultConfig(), sink)
		})
		defer func() { _ = p.Shutdown(context.Background()) }()
		noRes := pmetric.NewMetrics()
		noScope := pmetric.NewMetrics()
		noScope.ResourceMetrics().AppendEmpty()
		noMetrics := pmetric.NewMetrics()
		noMetrics.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty()
		noPoints := pmetric.NewMetrics()
		ms := noPoints.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics()
		ms.AppendEmpty().SetName("typeless") // no data type at all
		ms.AppendEmpty().SetEmptyGauge()
		ms.AppendEmpty().SetEmptySum()
		ms.AppendEmpty().SetEmptyHistogram()
		ms.AppendEmpty().SetEmptyExponentialHistogram()
		ms.AppendEmpty().SetEmptySummary()
		for i, md := range []pmetric.Metrics{noRes, noScope, noMetrics, noPoints} {
			want := pmetric.NewMetrics()
			md.CopyTo(want)
			if err := p.ConsumeMetrics(context.Background(), md); err != nil {
				t.Fatalf("batch %d: %v", i, err)
			}
			got := sink.AllMetrics()[i]
			if got.ResourceMetrics().Len() != want.ResourceMetrics().Len() || got.MetricCount() != want.MetricCount() {
				t.Fatalf("batch %d: %d resources %d metrics, want %d and %d", i,
					got.ResourceMetrics().Len(), got.MetricCount(), want.ResourceMetrics().Len(), want.MetricCount())
			}
		}
		// Pointless metrics beside points that are deduplicated.
		mixed := pmetric.NewMetrics()
		mms := mixed.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics()
		mms.AppendEmpty().SetEmptyGauge()
		g := mms.AppendEmpty()
		g.SetName("g")
		dps := g.SetEmptyGauge().DataPoints()
		for _, ts := range []pcommon.Timestamp{1, 1, 2} {
			dp := dps.AppendEmpty()
			dp.SetTimestamp(ts)
			dp.SetIntValue(int64(ts))
		}
		mms.AppendEmpty().SetEmptySum()
		if err := p.ConsumeMetrics(context.Background(), mixed); err != nil {
			t.Fatal(err)
		}
		if got := sink.AllMetrics()[4].DataPointCount(); got != 2 {
			t.Fatalf("%d points delivered, want 2", got)
		}
		if got := h.biCounts(); got != (biCounts{unique: 2, duplicate: 1}) {
			t.Fatalf("counts %+v, want unique 2, duplicate 1", got)
		}
	})
}

// TestBadInputRuntimeOTTLErrors: a key or condition that fails to evaluate
// lets its record through untouched, counted key_error, and is logged at
// most once per 10 s, with the number of occurrences since the last line.
func TestBadInputRuntimeOTTLErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  func(*Config)
	}{
		{"key", func(c *Config) { c.Logs.Key = []string{`ParseJSON(attributes["json"])`} }},
		{"condition", func(c *Config) { c.Logs.Conditions = []string{`ParseJSON(attributes["json"])["k"] == "v"`} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := defaultConfig()
			tc.cfg(cfg)
			// A clock of our own: 10 s pass when the test says so.
			clock := newFakeClock()
			cfg.clock = clock
			core, observed := observer.New(zapcore.DebugLevel)
			sink := new(consumertest.LogsSink)
			p, h := signalHarness(t, "logs", func(set processor.Settings) (processor.Logs, error) {
				set.Logger = zap.New(core)
				return NewFactory().CreateLogs(context.Background(), set, cfg, sink)
			})
			defer func() { _ = p.Shutdown(context.Background()) }()

			const batches, perBatch = 100, 100
			send := func(batches int) {
				for b := 0; b < batches; b++ {
					recs := make([]biRecord, 0, perBatch+1)
					for i := 0; i < perBatch; i++ {
						recs = append(recs, biRecord{"bad", func(lr plog.LogRecord) { lr.Attributes().PutStr("json", "{not json") }})
					}
					// A good record among the bad ones is deduplicated as usual.
					recs = append(recs, biRecord{"good", func(lr plog.LogRecord) { lr.Attributes().PutStr("json", `{"k":"v"}`) }})
					if err := p.ConsumeLogs(context.Background(), biLogs(recs...)); err != nil {
						t.Fatal(err)
					}
				}
			}
			lines := func() []observer.LoggedEntry {
				return observed.FilterMessage("dedup: cannot evaluate the key or conditions of a logs item; passing it through").All()
			}
			send(batches)
			bad := int64(batches * perBatch)
			if got := int64(len(biNames(sink))); got != bad+1 {
				t.Fatalf("delivered %d records, want every bad one (%d) and the good one once", got, bad+1)
			}
			if got := h.biCounts(); got != (biCounts{unique: 1, duplicate: batches - 1, keyError: bad}) {
				t.Fatalf("counts %+v, want unique 1, duplicate %d, key_error %d", got, batches-1, bad)
			}
			if l := lines(); len(l) != 1 || l[0].Level != zapcore.WarnLevel || l[0].ContextMap()["occurrences"] != int64(1) {
				t.Fatalf("%d log lines (%v), want 1 warning with occurrences=1", len(l), l)
			}
			// 9.999 s later: still throttled.
			clock.Advance(10*time.Second - 1)
			send(1)
			if l := lines(); len(l) != 1 {
				t.Fatalf("%d log lines after 9.999s, want still 1", len(l))
			}
			// 10 s after the first line: one more, counting everything since.
			clock.Advance(1)
			send(1)
			l := lines()
			if len(l) != 2 {
				t.Fatalf("%d log lines after 10s, want 2", len(l))
			}
			// Every failure since the first line, up to and including the one
			// that logged: the rest of the first run, the throttled batch, and
			// the first record of the last batch.
			if got, want := l[1].ContextMap()["occurrences"], bad-1+perBatch+1; got != want {
				t.Fatalf("second line occurrences=%v, want %d", got, want)
			}
			if errText, _ := l[1].ContextMap()["error"].(string); !strings.Contains(errText, "ParseJSON") {
				t.Fatalf("error field %q does not name the expression", errText)
			}
			if got := h.outcome("key_error"); got != bad+2*perBatch {
				t.Fatalf("key_error = %d, want %d", got, bad+2*perBatch)
			}
		})
	}
}

// TestBadInputNaNAndSignedZero: NaN key values with the same bits collapse
// (identity is the encoding, not float equality), -0 and +0 are one value,
// and a double never equals the integer with the same value.
func TestBadInputNaNAndSignedZero(t *testing.T) {
	nan := func(lr plog.LogRecord) { lr.Attributes().PutDouble("id", biNaN()) }
	recs := []biRecord{
		{"nan", nan}, {"nan-copy", nan},
		{"zero", func(lr plog.LogRecord) { lr.Attributes().PutDouble("id", 0) }},
		{"neg-zero", func(lr plog.LogRecord) { lr.Attributes().PutDouble("id", biNegZero()) }},
		{"int-zero", func(lr plog.LogRecord) { lr.Attributes().PutInt("id", 0) }},
	}
	biRun(t, biKeyed(`attributes["id"]`), []plog.Logs{biLogs(recs...)}, []string{"nan", "zero", "int-zero"},
		biCounts{unique: 3, duplicate: 2})
}

func biNaN() float64 { return math.Float64frombits(0x7ff8000000000001) }

func biNegZero() float64 { return math.Copysign(0, -1) }
