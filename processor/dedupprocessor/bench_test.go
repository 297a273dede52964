package dedupprocessor

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/processor/processortest"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/claim"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/localcache"
)

// benchLogs builds batches of size records of which dupRatio are copies of
// records sent earlier in the same or previous batches. Each record looks
// like an SDK's: a resource with service attributes, an event id, a body.
func benchLogs(batches, size int, dupRatio float64) []plog.Logs {
	out := make([]plog.Logs, batches)
	next := 0
	for b := range out {
		ld := plog.NewLogs()
		rl := ld.ResourceLogs().AppendEmpty()
		rl.Resource().Attributes().PutStr("service.name", "checkout")
		rl.Resource().Attributes().PutStr("host.name", "node-17")
		lrs := rl.ScopeLogs().AppendEmpty().LogRecords()
		for i := range size {
			id := next
			if float64(i%100) < dupRatio*100 && next > 0 {
				id = (next*7919 + i) % next // an earlier record
			} else {
				next++
			}
			lr := lrs.AppendEmpty()
			lr.SetTimestamp(pcommon.Timestamp(1_700_000_000_000_000_000 + 1000*uint64(id)))
			lr.Body().SetStr(fmt.Sprintf("order %d placed", id))
			lr.Attributes().PutStr("event.id", fmt.Sprintf("evt-%08d", id))
			lr.Attributes().PutInt("http.status_code", 200)
		}
		out[b] = ld
	}
	return out
}

// BenchmarkConsumeLogs measures ConsumeLogs on the local tier. The batches
// are replayed in passes; each pass runs under another tenant (metadata_keys),
// so its records are new identities and the duplicate ratio stays the one
// asked for, without rebuilding records. With cache=1M the cache starts with
// 10^6 other keys and stays full, as a busy gateway's does, so claims pay for
// a working set far larger than the CPU caches.
//
// The sources=on and sources=off variants are the target's workload (empty
// cache, batch 1000) with copies traced to their source (the default) and
// without (source.key: []), each with the processor's telemetry on a no-op
// meter (as the rest) and on the SDK's (meter=sdk: recording costs what it
// does in a collector); compare them with benchstat -col /sources.
func BenchmarkConsumeLogs(b *testing.B) {
	for _, prefill := range []int{0, 1_000_000} {
		for _, keyed := range []bool{false, true} {
			for _, size := range []int{100, 1000} {
				for _, dup := range []float64{0, 0.3} {
					if prefill > 0 && size != 1000 {
						continue
					}
					benchConsumeLogs(b, prefill, keyed, size, dup, benchVariant{})
				}
			}
		}
	}
	for _, sources := range []bool{true, false} {
		for _, sdk := range []bool{false, true} {
			for _, keyed := range []bool{false, true} {
				for _, dup := range []float64{0, 0.3} {
					benchConsumeLogs(b, 0, keyed, 1000, dup, benchVariant{named: true, sourcesOff: !sources, sdk: sdk})
				}
			}
		}
	}
}

// benchVariant is a BenchmarkConsumeLogs variant; the zero value is the
// default configuration on a no-op meter, named without a prefix.
type benchVariant struct {
	named      bool // the name says sources and meter
	sourcesOff bool // source.key: []
	sdk        bool // the SDK's meter provider (with a reader) instead of a no-op one
}

func (v benchVariant) prefix() string {
	if !v.named {
		return ""
	}
	return fmt.Sprintf("sources=%s/meter=%s/", map[bool]string{false: "on", true: "off"}[v.sourcesOff], map[bool]string{false: "nop", true: "sdk"}[v.sdk])
}

func benchConsumeLogs(b *testing.B, prefill int, keyed bool, size int, dup float64, v benchVariant) {
	name := fmt.Sprintf("%scache=%s/key=%v/batch=%d/dup=%.0f%%", v.prefix(), map[bool]string{false: "empty", true: "1M"}[prefill > 0],
		map[bool]string{false: "content", true: "event.id"}[keyed], size, dup*100)
	b.Run(name, func(b *testing.B) {
		cfg := defaultConfig()
		if v.sourcesOff {
			cfg.Source.Key = nil
		}
		cfg.Cache.MaxEntries = max(prefill, 10_000_000)
		if prefill > 0 {
			cfg.Cache.MaxEntries = prefill
		}
		cfg.MetadataKeys = []string{"bench-pass"}
		if keyed {
			cfg.Logs.Key = []string{`attributes["event.id"]`}
		}
		set := processortest.NewNopSettings(componentType)
		if v.sdk {
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			defer func() { _ = mp.Shutdown(context.Background()) }()
			set.MeterProvider = mp
		}
		p, err := newLogsProcessor(set.TelemetrySettings, set.ID, cfg, consumertest.NewNop())
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = p.Shutdown(context.Background()) }()
		now := p.Rounds().Now()
		// Digests as a hash gives them: all bits mixed, so the prefill
		// spreads over the index as real keys do.
		fill := make([]digest.Digest, 0, 1000)
		results := make([]localcache.Result, cap(fill))
		for i := range uint64(prefill) {
			if fill = append(fill, digest.Digest{Hi: benchMix(i), Lo: benchMix(^i)}); len(fill) == cap(fill) || i == uint64(prefill)-1 {
				p.Cache().ClaimBatch(fill, 1, now, results, nil)
				fill = fill[:0]
			}
		}
		src := benchLogs(64, size, dup)
		work := make([]plog.Logs, len(src))
		for i := range work {
			work[i] = plog.NewLogs()
		}
		var ctx context.Context
		// The copies below are the harness's garbage; the processor's own is
		// one object a batch (client.Metadata.Get's copy). The collector
		// runs outside the timer, once a pass, so that its marking is not
		// charged to ConsumeLogs.
		defer debug.SetGCPercent(debug.SetGCPercent(-1))
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			// A fresh copy each time, since the processor removes duplicates in place.
			k := i % len(src)
			if k == 0 {
				runtime.GC()
				ctx = client.NewContext(context.Background(), client.Info{
					Metadata: client.NewMetadata(map[string][]string{"bench-pass": {fmt.Sprint(i)}}),
				})
			}
			src[k].CopyTo(work[k])
			b.StartTimer()
			if err := p.ConsumeLogs(ctx, work[k]); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "records/s")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*size), "ns/record")
	})
}

// benchMix is splitmix64's finalizer.
func benchMix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// BenchmarkDecide measures key derivation alone, without claims: a batch
// of 1000 records through Identify, for the content identity, a plain path
// (the fast path, no OTTL) and the same key as an OTTL expression.
func BenchmarkDecide(b *testing.B) {
	for _, tc := range []struct{ name, key string }{
		{"content", ""},
		{"event.id/fast-path", `attributes["event.id"]`},
		{"event.id/ottl", `Concat([attributes["event.id"]], "")`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cfg := defaultConfig()
			if tc.key != "" {
				cfg.Logs.Key = []string{tc.key}
			}
			set := processortest.NewNopSettings(componentType)
			p, err := newLogsProcessor(set.TelemetrySettings, set.ID, cfg, consumertest.NewNop())
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = p.Shutdown(context.Background()) }()
			if p.si.needsOTTL != (tc.name == "event.id/ottl") {
				b.Fatalf("needsOTTL = %v", p.si.needsOTTL)
			}
			ld := benchLogs(1, 1000, 0)[0]
			n := ld.LogRecordCount()
			ctx := context.Background()
			bt := claim.NewBatch(n, 0)
			p.Identify(ctx, bt, ld)
			if got := len(batchDigests(bt)); got != n {
				b.Fatalf("%d of %d records keyed", got, n)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p.Identify(ctx, claim.NewBatch(n, 0), ld)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
		})
	}
}

// BenchmarkConsumeMetrics measures ConsumeMetrics on the local tier, with
// replica election off (the hot path every metrics pipeline takes) and on
// (an HA pair: half the batches are the other replica's). Each batch is one
// scrape of 1000 series, at a new time: every point is new.
func BenchmarkConsumeMetrics(b *testing.B) {
	for _, elect := range []bool{false, true} {
		b.Run(fmt.Sprintf("election=%v", elect), func(b *testing.B) {
			cfg := defaultConfig()
			if elect {
				cfg.Metrics.ReplicaElection.GetOrInsertDefault()
			}
			p, err := NewFactory().CreateMetrics(context.Background(), processortest.NewNopSettings(componentType), cfg, consumertest.NewNop())
			if err != nil {
				b.Fatal(err)
			}
			if err := p.Start(context.Background(), nil); err != nil {
				b.Fatal(err)
			}
			defer func() { _ = p.Shutdown(context.Background()) }()
			const size = 1000
			batches := make([]pmetric.Metrics, b.N)
			for i := range batches {
				md := pmetric.NewMetrics()
				rm := md.ResourceMetrics().AppendEmpty()
				rm.Resource().Attributes().PutStr("service.name", "node-exporter")
				rm.Resource().Attributes().PutStr("cluster", "c1")
				rm.Resource().Attributes().PutStr("__replica__", []string{"a", "b"}[i%2])
				dps := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty().SetEmptyGauge().DataPoints()
				for j := range size {
					dp := dps.AppendEmpty()
					dp.Attributes().PutInt("series", int64(j))
					dp.SetTimestamp(pcommon.Timestamp(1_700_000_000_000_000_000 + int64(i)*15_000_000_000))
					dp.SetDoubleValue(1)
				}
				batches[i] = md
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if err := p.ConsumeMetrics(context.Background(), batches[i]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "points/s")
		})
	}
}

// BenchmarkConsumeLogsRacing measures ConsumeLogs on a batch that meets
// another batch's pending claims: every other record of 1000 is claimed by a
// round still in flight, which commits while this batch's first call
// delivers the records it won. The first call moves the records left for
// later out of its data; the recheck finds them committed (copies), so no
// second call is made. ns/record is per record of the batch.
func BenchmarkConsumeLogsRacing(b *testing.B) {
	const size = 1000
	cfg := defaultConfig()
	cfg.Cache.MaxEntries = 10_000_000
	cfg.MetadataKeys = []string{"bench-pass"}
	cfg.clock = instantClock{}
	var p *logsProcessor
	var other uint64 // the other batch's round
	delivered := 0
	next, err := consumer.NewLogs(func(_ context.Context, ld plog.Logs) error {
		delivered += ld.LogRecordCount()
		p.Cache().End(other) // the other batch's export ends: its claims commit
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	set := processortest.NewNopSettings(componentType)
	if p, err = newLogsProcessor(set.TelemetrySettings, set.ID, cfg, next); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	src := benchLogs(1, size, 0)[0]
	work := plog.NewLogs()
	results := make([]localcache.Result, size/2)
	held := make([]digest.Digest, 0, size/2)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		// A tenant per batch: its records are new identities.
		ctx := client.NewContext(context.Background(), client.Info{
			Metadata: client.NewMetadata(map[string][]string{"bench-pass": {fmt.Sprint(i)}}),
		})
		src.CopyTo(work)
		bt := claim.NewBatch(size, 0)
		p.Identify(ctx, bt, work)
		held = held[:0]
		for j, d := range batchDigests(bt) {
			if j%2 == 1 {
				held = append(held, d)
			}
		}
		other = p.Rounds().NextToken()
		p.Cache().Begin(other)
		p.Cache().ClaimBatch(held, other, p.Rounds().Now(), results, nil)
		b.StartTimer()
		if err := p.ConsumeLogs(ctx, work); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if delivered != b.N*size/2 {
		b.Fatalf("%d records delivered, want %d: the won half of each batch", delivered, b.N*size/2)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*size), "ns/record")
}

// instantClock is the wall clock whose waits end at once: a batch waiting
// for another's claims rechecks without pausing.
type instantClock struct{}

func (instantClock) Now() time.Time { return time.Now() }

func (instantClock) Wait(ctx context.Context, _ <-chan struct{}, _ time.Duration) error {
	return ctx.Err()
}
