package dedupprocessor

import (
	"testing"

	"go.opentelemetry.io/collector/consumer/consumertest"
)

// TestCacheBytesGauge: otelcol_processor_dedup_cache_bytes reports the
// memory the local cache takes outside the Go heap: its first index buckets
// at start, the ring's pages once keys arrive (internal/localcache's
// TestBytes has the layout).
func TestCacheBytesGauge(t *testing.T) {
	cfg := defaultConfig()
	cfg.Cache.MaxEntries = 1000
	h := newHarness(t, cfg, new(consumertest.LogsSink))
	if n := h.metric("otelcol_processor_dedup_cache_bytes"); n != 128*64 {
		t.Fatalf("cache_bytes at start = %d, want %d", n, 128*64)
	}
	if err := h.consume(events(1, 2, 3)); err != nil {
		t.Fatal(err)
	}
	if n := h.metric("otelcol_processor_dedup_cache_bytes"); n != 1000*32+128*64 {
		t.Fatalf("cache_bytes with 3 keys = %d, want %d", n, 1000*32+128*64)
	}
}
