// Command dedupflood floods a dedup processor with distinct records and
// reports what its bounded cache did and what it cost in memory: every
// record must be delivered (nothing unique dropped), the cache must hold at
// most max_entries keys, and each key evicted before its window ended must
// be counted. It drives the processor in-process through its factory (the
// engine, not the network), keyed on attributes["id"].
//
//	go run ./cmd/dedupflood                         # 10^7 keys through a 10^6-entry cache
//	go run ./cmd/dedupflood -keys 1000000 -max-entries 100000 -senders 2
//
// It prints one line of JSON (see Result) and exits 1 if a check failed.
// RELIABILITY.md records its numbers.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dedupflood", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg Config
	fs.Int64Var(&cfg.Keys, "keys", 10_000_000, "distinct records to send")
	fs.IntVar(&cfg.MaxEntries, "max-entries", 1_000_000, "the processor's cache.max_entries")
	fs.IntVar(&cfg.Batch, "batch", 1000, "records per batch")
	fs.DurationVar(&cfg.Window, "window", time.Hour, "the processor's window")
	fs.IntVar(&cfg.Senders, "senders", 1, "goroutines sending at once")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	res, err := Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "dedupflood:", err)
		return 1
	}
	b, _ := json.Marshal(res)
	fmt.Fprintln(stdout, string(b))
	problems := Check(res)
	if !raceEnabled {
		problems = append(problems, CheckRSS(res)...)
	}
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(stderr, "dedupflood: FAIL:", p)
		}
		return 1
	}
	return 0
}

// Check lists what a flood result violates: every key delivered and counted
// unique, none duplicate or missing, the cache full and never over its
// bound, and exactly keys - max_entries early evictions (every key is
// within its window when evicted).
func Check(r Result) []string {
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
	return out
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

// CheckRSS bounds the process: its resident set may grow, from before the
// processor was made to its peak, by at most three times the heap the
// processor holds (the garbage collector lets the heap reach twice the live
// data by default) plus 64 MiB for the runtime and the batches in flight.
func CheckRSS(r Result) []string {
	held := int64(r.HeapAfter) - int64(r.HeapBaseline)
	limit := 3*held + 64<<20
	if grew := int64(r.RSSPeak) - int64(r.RSSBaseline); grew > limit {
		return []string{fmt.Sprintf("RSS grew %d bytes to its peak, want <= %d (3 x %d bytes of heap + 64 MiB)", grew, limit, held)}
	}
	return nil
}

// decode sets a processor config from a map the way the collector does.
func decode(m map[string]any, cfg component.Config) error {
	if err := confmap.NewFromStringMap(m).Unmarshal(cfg); err != nil {
		return err
	}
	return confmap.Validate(cfg)
}
