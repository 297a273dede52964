package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/prometheus/procfs"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
)

// The flood sends distinct records through a dedup processor's bounded
// cache, in-process through its factory (the engine, not the network), keyed
// on attributes["id"], each id once. Every record must be delivered (nothing
// unique dropped), the cache must end full and never over max_entries, each
// key evicted before its window ended must be counted, and the memory the
// processor holds must stay within bounds. RELIABILITY.md records it.
//
//	go test -v -run Flood ./cmd/dedupbench      # the result, memory included, as JSON
//	go test -run Flood ./cmd/dedupbench -args -keys 1000000 -max-entries 1000000

// FloodConfig is one flood.
type FloodConfig struct {
	Keys       int64         // distinct records to send
	MaxEntries int           // the processor's cache.max_entries
	Batch      int           // records per ConsumeLogs call
	Window     time.Duration // the processor's window: 1h keeps every key in it until evicted
	Senders    int           // goroutines calling ConsumeLogs at once
}

// FloodResult is what a flood measured: counts from the processor's own
// telemetry, memory from the Go runtime and the kernel.
type FloodResult struct {
	Keys       int64 `json:"keys"`
	MaxEntries int   `json:"max_entries"`
	Batch      int   `json:"batch"`
	Senders    int   `json:"senders"`

	Delivered    int64 `json:"delivered"` // records the next consumer received
	Unique       int64 `json:"unique"`    // the records counter by outcome
	Duplicate    int64 `json:"duplicate"`
	MissingKey   int64 `json:"missing_key"`
	Evictions    int64 `json:"evictions"`     // keys evicted before their window ended
	CacheEntries int64 `json:"cache_entries"` // at the end

	Seconds       float64 `json:"seconds"`
	RecordsPerSec float64 `json:"records_per_second"`

	// Go heap in use after a forced GC, before the processor was made and
	// after the flood (the processor still alive), and their difference
	// per cache entry.
	HeapBaseline   uint64  `json:"heap_inuse_baseline_bytes"`
	HeapAfter      uint64  `json:"heap_inuse_after_bytes"`
	HeapPerEntry   float64 `json:"heap_bytes_per_entry"`
	HeapSysAfter   uint64  `json:"heap_sys_after_bytes"`
	TotalAllocated uint64  `json:"total_alloc_bytes"`
	NumGC          uint32  `json:"num_gc"`
	// The process's resident set before the processor was made, its peak
	// since (VmHWM, reset first where the kernel allows, so that an earlier
	// run in the same process does not count) and at the end (VmRSS).
	RSSBaseline uint64 `json:"rss_baseline_bytes"`
	RSSPeak     uint64 `json:"rss_peak_bytes"`
	RSSAfter    uint64 `json:"rss_after_bytes"`
}

// The Go heap a processor may hold after a flood: MaxHeapPerEntry bytes per
// cache entry plus HeapFixed. The cache's own cost per key is a 32-byte ring
// slot and its share of the index (BENCHMARKS.md#memory-per-key); 64 leaves
// room for the index growing in steps, not for a second copy of anything.
// HeapFixed covers the processor itself (telemetry, pools, a batch).
const (
	MaxHeapPerEntry = 64
	HeapFixed       = 1 << 20
)

// Check lists what a flood result violates: every key delivered and counted
// unique, none duplicate or missing, the cache full and never over its
// bound, exactly keys - max_entries early evictions, the heap within its
// bound and, unless the race detector's shadow memory inflates it, the
// resident set's growth within three times the heap the processor holds
// (the garbage collector lets the heap reach twice the live data) plus
// 64 MiB for the runtime and the batches in flight.
func (r FloodResult) Check(race bool) []string {
	var out []string
	want := func(name string, got, want int64) {
		if got != want {
			out = append(out, fmt.Sprintf("%s = %d, want %d", name, got, want))
		}
	}
	want("delivered", r.Delivered, r.Keys)
	want("unique", r.Unique, r.Keys)
	want("duplicate", r.Duplicate, 0)
	want("missing_key", r.MissingKey, 0)
	want("cache_entries", r.CacheEntries, min(r.Keys, int64(r.MaxEntries)))
	want("evictions", r.Evictions, max(r.Keys-int64(r.MaxEntries), 0))
	held := int64(r.HeapAfter) - int64(r.HeapBaseline)
	if limit := MaxHeapPerEntry*int64(r.MaxEntries) + HeapFixed; held > limit {
		out = append(out, fmt.Sprintf("the processor holds %d bytes of heap (%.1f per cache entry), want <= %d (%d per entry + %d)",
			held, r.HeapPerEntry, limit, MaxHeapPerEntry, HeapFixed))
	}
	if limit := 3*held + 64<<20; !race && int64(r.RSSPeak)-int64(r.RSSBaseline) > limit {
		out = append(out, fmt.Sprintf("RSS grew %d bytes to its peak, want <= %d (3 x %d bytes of heap + 64 MiB)",
			int64(r.RSSPeak)-int64(r.RSSBaseline), limit, held))
	}
	return out
}

// Flood runs one flood.
func Flood(ctx context.Context, cfg FloodConfig) (FloodResult, error) {
	res := FloodResult{Keys: cfg.Keys, MaxEntries: cfg.MaxEntries, Batch: cfg.Batch, Senders: cfg.Senders}
	res.HeapBaseline = heapInUse()
	// Writing 5 to clear_refs resets VmHWM to VmRSS (Linux 4.0+); where it
	// cannot be, only growth beyond the old peak counts.
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		res.RSSBaseline, _ = selfRSS()
	} else {
		_, res.RSSBaseline = selfRSS()
	}

	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	factory := dedupprocessor.NewFactory()
	pcfg := factory.CreateDefaultConfig()
	conf := confmap.NewFromStringMap(map[string]any{
		"window": cfg.Window.String(),
		"cache":  map[string]any{"max_entries": cfg.MaxEntries},
		"logs":   map[string]any{"key": []string{`attributes["id"]`}},
	})
	if err := conf.Unmarshal(pcfg); err != nil {
		return res, err
	}
	if err := confmap.Validate(pcfg); err != nil {
		return res, err
	}
	set := processortest.NewNopSettings(factory.Type())
	set.MeterProvider = mp
	var delivered atomic.Int64 // the next consumer counts the records and keeps none
	next, err := consumer.NewLogs(func(_ context.Context, ld plog.Logs) error {
		delivered.Add(int64(ld.LogRecordCount()))
		return nil
	})
	if err != nil {
		return res, err
	}
	proc, err := factory.CreateLogs(ctx, set, pcfg, next)
	if err != nil {
		return res, err
	}
	if err := proc.Start(ctx, componenttest.NewNopHost()); err != nil {
		return res, err
	}
	defer func() { _ = proc.Shutdown(context.Background()) }()

	start := time.Now()
	var nextID atomic.Int64
	errs := make([]error, cfg.Senders)
	var wg sync.WaitGroup
	for i := range cfg.Senders {
		wg.Go(func() { errs[i] = floodSend(ctx, proc, cfg, &nextID) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return res, err
		}
	}
	res.Seconds = time.Since(start).Seconds()
	res.RecordsPerSec = float64(cfg.Keys) / res.Seconds
	res.Delivered = delivered.Load()

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		return res, err
	}
	outcome := func(o string) int64 {
		return testkit.SumInt64(rm, "otelcol_processor_dedup_records", attribute.String("outcome", o))
	}
	res.Unique, res.Duplicate, res.MissingKey = outcome("unique"), outcome("duplicate"), outcome("missing_key")
	res.Evictions = testkit.SumInt64(rm, "otelcol_processor_dedup_cache_evictions")
	res.CacheEntries = testkit.SumInt64(rm, "otelcol_processor_dedup_cache_entries")

	res.HeapAfter = heapInUse()
	runtime.KeepAlive(proc)
	if res.HeapAfter > res.HeapBaseline {
		res.HeapPerEntry = float64(res.HeapAfter-res.HeapBaseline) / float64(cfg.MaxEntries)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	res.HeapSysAfter, res.TotalAllocated, res.NumGC = ms.HeapSys, ms.TotalAlloc, ms.NumGC
	res.RSSPeak, res.RSSAfter = selfRSS()
	return res, nil
}

// floodSend claims batches of ids from nextID until cfg.Keys are sent. One
// batch is built once and its ids rewritten in place: every record is
// unique, so the processor removes nothing and the batch can be reused.
func floodSend(ctx context.Context, proc processor.Logs, cfg FloodConfig, nextID *atomic.Int64) error {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("service.name", "flood")
	lrs := rl.ScopeLogs().AppendEmpty().LogRecords()
	ids := make([]pcommon.Value, cfg.Batch)
	for i := range ids {
		lr := lrs.AppendEmpty()
		lr.Body().SetStr("flood")
		lr.Attributes().PutInt("id", 0)
		ids[i], _ = lr.Attributes().Get("id")
	}
	for {
		first := nextID.Add(int64(cfg.Batch)) - int64(cfg.Batch)
		if first >= cfg.Keys {
			return nil
		}
		n := int(min(int64(cfg.Batch), cfg.Keys-first))
		if n < lrs.Len() { // the last, short batch
			i := 0
			lrs.RemoveIf(func(plog.LogRecord) bool { i++; return i > n })
			ids = ids[:n]
		}
		for i, v := range ids {
			v.SetInt(first + int64(i))
		}
		if err := proc.ConsumeLogs(ctx, ld); err != nil {
			return err
		}
		if ld.LogRecordCount() != n {
			return fmt.Errorf("the processor removed %d of %d unique records", n-ld.LogRecordCount(), n)
		}
	}
}

func heapInUse() uint64 {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// selfRSS is this process's peak and current resident set; 0 where there
// is no /proc.
func selfRSS() (peak, now uint64) {
	p, err := procfs.Self()
	if err != nil {
		return 0, 0
	}
	st, err := p.NewStatus()
	if err != nil {
		return 0, 0
	}
	return st.VmHWM, st.VmRSS
}

var (
	floodKeys       = flag.Int64("keys", 10_000_000, "TestFloodBoundedAndExact: distinct records to send")
	floodMaxEntries = flag.Int("max-entries", 0, "TestFloodBoundedAndExact: the cache's max_entries (0: a tenth of -keys)")
)

// TestFloodBoundedAndExact floods the processor with 10x its cache size in
// distinct keys (-keys, -max-entries), from two goroutines: every record is
// delivered and counted unique, the cache ends full and not over its bound,
// every eviction (all of them before the window ended) is counted exactly,
// and the Go heap the processor holds stays within MaxHeapPerEntry bytes per
// cache entry (and, without -race, the RSS within Check's bound).
func TestFloodBoundedAndExact(t *testing.T) {
	maxEntries := *floodMaxEntries
	if maxEntries == 0 {
		maxEntries = int(*floodKeys / 10)
	}
	res, err := Flood(context.Background(), FloodConfig{Keys: *floodKeys, MaxEntries: maxEntries, Batch: 1000, Window: time.Hour, Senders: 2})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(res)
	t.Logf("%s", b)
	for _, p := range res.Check(raceEnabled) {
		t.Error(p)
	}
}

// TestFloodCheckFindsViolations: a small flood passes Check, and a result
// that lost a record and miscounted an eviction fails it twice.
func TestFloodCheckFindsViolations(t *testing.T) {
	res, err := Flood(context.Background(), FloodConfig{Keys: 5000, MaxEntries: 1000, Batch: 300, Window: time.Hour, Senders: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Delivered != 5000 || res.Evictions != 4000 || res.CacheEntries != 1000 || len(res.Check(true)) != 0 {
		t.Fatalf("result %+v, violations %q", res, res.Check(true))
	}
	bad := res
	bad.Delivered--
	bad.Evictions++
	if got := bad.Check(true); len(got) != 2 {
		t.Fatalf("Check found %q, want the delivered and evictions violations", got)
	}
}
