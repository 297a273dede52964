package dedupprocessor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processortest"
)

// TestReceiverPayloads runs a recorded payload in the shape each common
// receiver emits (testdata/receivers; its README says what each unit is)
// through the default config with action: mark, and checks which units are
// marked as copies: none of the distinct units, except those no identity
// can tell apart because the receiver emits them identical. A second send
// of the same payload, as a retry sends it, is marked whole.
func TestReceiverPayloads(t *testing.T) {
	for _, tc := range []struct {
		file   string
		marked []int // unit indexes, in walk order
	}{
		{"filelog.json", nil},
		{"syslog.json", []int{3}},        // an RFC 5424 message re-sent by its client
		{"fluentforward.json", []int{1}}, // two identical lines in one integer second: identical in pdata
		{"journald.json", []int{2}},      // an entry re-read after a restart (same cursor and timestamp)
		{"kafka.json", []int{1}},         // two raw messages with equal bytes: identical in pdata
		{"k8sevents.json", []int{2, 4}},  // the DELETED notification, and a series update the receiver emits unchanged
		{"k8sobjects.json", nil},
		{"zipkin.json", nil}, // shared client/server spans and v1 fragments are distinct
		{"jaeger.json", nil},
		{"prometheus.json", nil},
		{"hostmetrics.json", nil},
	} {
		t.Run(tc.file, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("testdata", "receivers", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			cfg := defaultConfig()
			cfg.Action = ActionMark
			set := processortest.NewNopSettings(componentType)
			send, marked, units := payloadRunner(t, raw, set, cfg)
			send()
			if got := marked(); fmt.Sprint(got) != fmt.Sprint(tc.marked) {
				t.Errorf("first send: marked %v of %d units, want %v", got, units, tc.marked)
			}
			send()
			want := make([]int, units)
			for i := range want {
				want[i] = i
			}
			if got := marked(); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("second send: marked %v, want every unit", got)
			}
		})
	}
}

// payloadRunner decodes raw as logs, traces or metrics, whichever it holds,
// and returns a func sending a fresh copy through one processor, a func
// returning the units the last send marked, and the number of units.
func payloadRunner(t *testing.T, raw []byte, set processor.Settings, cfg *Config) (send func(), marked func() []int, units int) {
	t.Helper()
	ctx := context.Background()
	isMarked := func(attrs pcommon.Map) bool { _, ok := attrs.Get(cfg.MarkAttribute); return ok }
	if ld, err := (&plog.JSONUnmarshaler{}).UnmarshalLogs(raw); err == nil && ld.LogRecordCount() > 0 {
		sink := new(consumertest.LogsSink)
		p, err := NewFactory().CreateLogs(ctx, set, cfg, sink)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Shutdown(ctx) })
		return func() {
				sink.Reset()
				c := plog.NewLogs()
				ld.CopyTo(c)
				if err := p.ConsumeLogs(ctx, c); err != nil {
					t.Fatal(err)
				}
			}, func() []int {
				var out []int
				i := 0
				for _, got := range sink.AllLogs() {
					for _, rl := range got.ResourceLogs().All() {
						for _, sl := range rl.ScopeLogs().All() {
							for _, lr := range sl.LogRecords().All() {
								if isMarked(lr.Attributes()) {
									out = append(out, i)
								}
								i++
							}
						}
					}
				}
				return out
			}, ld.LogRecordCount()
	}
	if td, err := (&ptrace.JSONUnmarshaler{}).UnmarshalTraces(raw); err == nil && td.SpanCount() > 0 {
		sink := new(consumertest.TracesSink)
		p, err := NewFactory().CreateTraces(ctx, set, cfg, sink)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Shutdown(ctx) })
		return func() {
				sink.Reset()
				c := ptrace.NewTraces()
				td.CopyTo(c)
				if err := p.ConsumeTraces(ctx, c); err != nil {
					t.Fatal(err)
				}
			}, func() []int {
				var out []int
				i := 0
				for _, got := range sink.AllTraces() {
					for _, rs := range got.ResourceSpans().All() {
						for _, ss := range rs.ScopeSpans().All() {
							for _, sp := range ss.Spans().All() {
								if isMarked(sp.Attributes()) {
									out = append(out, i)
								}
								i++
							}
						}
					}
				}
				return out
			}, td.SpanCount()
	}
	md, err := (&pmetric.JSONUnmarshaler{}).UnmarshalMetrics(raw)
	if err != nil || md.DataPointCount() == 0 {
		t.Fatalf("neither logs, traces nor metrics: %v", err)
	}
	sink := new(consumertest.MetricsSink)
	p, err := NewFactory().CreateMetrics(ctx, set, cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown(ctx) })
	return func() {
			sink.Reset()
			c := pmetric.NewMetrics()
			md.CopyTo(c)
			if err := p.ConsumeMetrics(ctx, c); err != nil {
				t.Fatal(err)
			}
		}, func() []int {
			var out []int
			i := 0
			for _, got := range sink.AllMetrics() {
				for _, rm := range got.ResourceMetrics().All() {
					for _, sm := range rm.ScopeMetrics().All() {
						for _, m := range sm.Metrics().All() {
							for _, attrs := range pointAttributes(m) {
								if isMarked(attrs) {
									out = append(out, i)
								}
								i++
							}
						}
					}
				}
			}
			return out
		}, md.DataPointCount()
}

func pointAttributes(m pmetric.Metric) []pcommon.Map {
	var out []pcommon.Map
	switch m.Type() {
	case pmetric.MetricTypeGauge:
		for _, dp := range m.Gauge().DataPoints().All() {
			out = append(out, dp.Attributes())
		}
	case pmetric.MetricTypeSum:
		for _, dp := range m.Sum().DataPoints().All() {
			out = append(out, dp.Attributes())
		}
	case pmetric.MetricTypeHistogram:
		for _, dp := range m.Histogram().DataPoints().All() {
			out = append(out, dp.Attributes())
		}
	case pmetric.MetricTypeExponentialHistogram:
		for _, dp := range m.ExponentialHistogram().DataPoints().All() {
			out = append(out, dp.Attributes())
		}
	case pmetric.MetricTypeSummary:
		for _, dp := range m.Summary().DataPoints().All() {
			out = append(out, dp.Attributes())
		}
	}
	return out
}
