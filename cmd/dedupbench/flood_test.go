package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strconv"
	"testing"
	"time"
)

// floodKeys is the size of the always-on flood: 10^7 keys through 10^6
// entries, ten times the cache, so that nine in ten keys are evicted before
// their window ends; DEDUPFLOOD_KEYS overrides it.
func floodKeys(t *testing.T) int64 {
	if s := os.Getenv("DEDUPFLOOD_KEYS"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	return 10_000_000
}

// TestFloodBoundedAndExact floods the processor with 10x its cache size in
// distinct keys, from two goroutines: every record is delivered and counted
// unique, the cache ends full and not over its bound, every eviction (all
// of them before the window ended) is counted exactly, and the Go heap the
// processor holds stays within MaxHeapPerEntry bytes per cache entry (and,
// without -race, the RSS within Check's bound).
func TestFloodBoundedAndExact(t *testing.T) {
	keys := floodKeys(t)
	res, err := Flood(context.Background(), FloodConfig{Keys: keys, MaxEntries: int(keys / 10), Batch: 1000, Window: time.Hour, Senders: 2})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(res)
	t.Logf("%s", b)
	for _, p := range res.Check(raceEnabled) {
		t.Error(p)
	}
}

// TestRunFloodPrintsJSONAndFailsOnViolation: -flood's exit status and
// output.
func TestRunFloodPrintsJSONAndFailsOnViolation(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := runFlood(context.Background(), FloodConfig{Keys: 5000, MaxEntries: 1000, Batch: 300, Window: time.Hour, Senders: 1}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var res FloodResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("output %q: %v", out.String(), err)
	}
	if res.Delivered != 5000 || res.Evictions != 4000 || res.CacheEntries != 1000 {
		t.Fatalf("result %+v", res)
	}
	bad := res
	bad.Delivered--
	bad.Evictions++
	if got := bad.Check(true); len(got) != 2 {
		t.Fatalf("Check found %q, want the delivered and evictions violations", got)
	}
}
