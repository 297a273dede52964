package dedupprocessor

import (
	"context"
	"fmt"
	"testing"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processortest"
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

func BenchmarkConsumeLogs(b *testing.B) {
	for _, keyed := range []bool{false, true} {
		for _, size := range []int{100, 1000} {
			for _, dup := range []float64{0, 0.3} {
				name := fmt.Sprintf("key=%v/batch=%d/dup=%.0f%%", map[bool]string{false: "content", true: "event.id"}[keyed], size, dup*100)
				b.Run(name, func(b *testing.B) {
					cfg := defaultConfig()
					cfg.Cache.MaxEntries = 10_000_000
					if keyed {
						cfg.Logs.Key = []string{`attributes["event.id"]`}
					}
					var p processor.Logs
					fresh := func() {
						if p != nil {
							_ = p.Shutdown(context.Background())
						}
						var err error
						p, err = NewFactory().CreateLogs(context.Background(), processortest.NewNopSettings(componentType), cfg, consumertest.NewNop())
						if err != nil {
							b.Fatal(err)
						}
					}
					defer func() { _ = p.Shutdown(context.Background()) }()
					src := benchLogs(64, size, dup)
					work := make([]plog.Logs, len(src))
					for i := range work {
						work[i] = plog.NewLogs()
					}
					b.ReportAllocs()
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						b.StopTimer()
						// A fresh copy each time, since the processor removes duplicates
						// in place, and a fresh processor each pass over the batches, so
						// the duplicate ratio stays the one asked for.
						k := i % len(src)
						if k == 0 {
							fresh()
						}
						src[k].CopyTo(work[k])
						b.StartTimer()
						if err := p.ConsumeLogs(context.Background(), work[k]); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "records/s")
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*size), "ns/record")
				})
			}
		}
	}
}
