package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor"
)

// Config is one flood.
type Config struct {
	// Keys is how many distinct records to send (default 10^7).
	Keys int64
	// MaxEntries is the processor's cache.max_entries (default 10^6).
	MaxEntries int
	// Batch is the records per ConsumeLogs call (default 1000).
	Batch int
	// Window is the processor's window (default 1h: every key is still
	// within its window when it is evicted).
	Window time.Duration
	// Senders is how many goroutines call ConsumeLogs at once (default 1).
	Senders int
}

func (c Config) defaults() Config {
	if c.Keys == 0 {
		c.Keys = 10_000_000
	}
	if c.MaxEntries == 0 {
		c.MaxEntries = 1_000_000
	}
	if c.Batch == 0 {
		c.Batch = 1000
	}
	if c.Window == 0 {
		c.Window = time.Hour
	}
	if c.Senders == 0 {
		c.Senders = 1
	}
	return c
}

// Result is what a flood measured. Counts come from the processor's own
// telemetry; memory from the Go runtime and the kernel.
type Result struct {
	Keys       int64 `json:"keys"`
	MaxEntries int   `json:"max_entries"`
	Batch      int   `json:"batch"`
	Senders    int   `json:"senders"`

	// Delivered is the records the next consumer received.
	Delivered int64 `json:"delivered"`
	// Unique, Duplicate, MissingKey: the records counter by outcome.
	Unique     int64 `json:"unique"`
	Duplicate  int64 `json:"duplicate"`
	MissingKey int64 `json:"missing_key"`
	// Evictions is otelcol_processor_dedup_cache_evictions: keys evicted
	// before their window ended.
	Evictions int64 `json:"evictions"`
	// CacheEntries is otelcol_processor_dedup_cache_entries at the end.
	CacheEntries int64 `json:"cache_entries"`

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
	// Process resident set: the high-water mark (VmHWM) and the current
	// size (VmRSS) at the end, from /proc/self/status (0 where there is
	// none). RSSBaseline is VmRSS before the processor was made, with VmHWM
	// reset to it (see rssBaseline).
	RSSBaseline uint64 `json:"rss_baseline_bytes"`
	RSSPeak     uint64 `json:"rss_peak_bytes"`
	RSSAfter    uint64 `json:"rss_after_bytes"`
}

// countingConsumer counts the records it is given and keeps nothing.
type countingConsumer struct{ n atomic.Int64 }

func (c *countingConsumer) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }

func (c *countingConsumer) ConsumeLogs(_ context.Context, ld plog.Logs) error {
	c.n.Add(int64(ld.LogRecordCount()))
	return nil
}

// Run floods a dedup logs processor, keyed on attributes["id"] (the fast
// path), with cfg.Keys distinct records, each id sent once.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg = cfg.defaults()
	res := Result{Keys: cfg.Keys, MaxEntries: cfg.MaxEntries, Batch: cfg.Batch, Senders: cfg.Senders}

	res.HeapBaseline = heapInUse()
	res.RSSBaseline = rssBaseline()

	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	factory := dedupprocessor.NewFactory()
	pcfg := factory.CreateDefaultConfig()
	conf := map[string]any{
		"window": cfg.Window.String(),
		"cache":  map[string]any{"max_entries": cfg.MaxEntries},
		"logs":   map[string]any{"key": []string{`attributes["id"]`}},
	}
	if err := decode(conf, pcfg); err != nil {
		return res, err
	}
	set := processortest.NewNopSettings(factory.Type())
	set.MeterProvider = mp
	next := &countingConsumer{}
	proc, err := factory.CreateLogs(ctx, set, pcfg, next)
	if err != nil {
		return res, err
	}
	if err := proc.Start(ctx, componenttestHost{}); err != nil {
		return res, err
	}
	defer func() { _ = proc.Shutdown(context.Background()) }()

	start := time.Now()
	var nextID atomic.Int64
	errs := make(chan error, cfg.Senders)
	for range cfg.Senders {
		go func() { errs <- send(ctx, proc, cfg, &nextID) }()
	}
	for range cfg.Senders {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	if err != nil {
		return res, err
	}
	elapsed := time.Since(start)
	res.Seconds = elapsed.Seconds()
	res.RecordsPerSec = float64(cfg.Keys) / res.Seconds
	res.Delivered = next.n.Load()

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		return res, err
	}
	res.Unique = sumInt(rm, "otelcol_processor_dedup_records", attribute.String("outcome", "unique"))
	res.Duplicate = sumInt(rm, "otelcol_processor_dedup_records", attribute.String("outcome", "duplicate"))
	res.MissingKey = sumInt(rm, "otelcol_processor_dedup_records", attribute.String("outcome", "missing_key"))
	res.Evictions = sumInt(rm, "otelcol_processor_dedup_cache_evictions")
	res.CacheEntries = sumInt(rm, "otelcol_processor_dedup_cache_entries")

	res.HeapAfter = heapInUse()
	runtime.KeepAlive(proc)
	if res.HeapAfter > res.HeapBaseline {
		res.HeapPerEntry = float64(res.HeapAfter-res.HeapBaseline) / float64(cfg.MaxEntries)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	res.HeapSysAfter = ms.HeapSys
	res.TotalAllocated = ms.TotalAlloc
	res.NumGC = ms.NumGC
	res.RSSPeak, _ = procStatus("VmHWM")
	res.RSSAfter, _ = procStatus("VmRSS")
	return res, nil
}

// send claims batches of ids from nextID until cfg.Keys are sent. One
// batch is built once and its ids rewritten in place: every record is
// unique, so the processor removes nothing and the batch can be reused.
func send(ctx context.Context, proc processor.Logs, cfg Config, nextID *atomic.Int64) error {
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

// procStatus reads a "kB" field of /proc/self/status, in bytes.
// rssBaseline is the resident set the peak is measured from. VmHWM is the
// peak of the whole process's life, so an earlier run in the same process
// (a test before this one) could have set it: the peak is reset first
// (writing 5 to /proc/self/clear_refs, Linux 4.0+). Where it cannot be,
// the baseline is the old peak, so only growth beyond it counts.
func rssBaseline() uint64 {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		hwm, _ := procStatus("VmHWM")
		return hwm
	}
	rss, _ := procStatus("VmRSS")
	return rss
}

func procStatus(field string) (uint64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != field {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, err
		}
		return kb << 10, nil
	}
	return 0, errors.New(field + " not in /proc/self/status")
}

func sumInt(rm metricdata.ResourceMetrics, name string, attrs ...attribute.KeyValue) int64 {
	var total int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			var points []metricdata.DataPoint[int64]
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				points = d.DataPoints
			case metricdata.Gauge[int64]:
				points = d.DataPoints
			}
			for _, p := range points {
				match := true
				for _, kv := range attrs {
					if v, ok := p.Attributes.Value(kv.Key); !ok || v != kv.Value {
						match = false
					}
				}
				if match {
					total += p.Value
				}
			}
		}
	}
	return total
}

// componenttestHost is a host with no extensions: the flood has no
// storage.
type componenttestHost struct{}

func (componenttestHost) GetExtensions() map[component.ID]component.Component { return nil }
