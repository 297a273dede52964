package main

import (
	"strings"
	"testing"
	"time"
)

// pprofTop is `go tool pprof -top` output of a collector's profile (names
// shortened by hand).
const pprofTop = `File: otelcol-dedup
Type: cpu
Duration: 2.5s, Total samples = 1.50s (60.00%)
Showing nodes accounting for 1.50s, 100% of 1.50s total
      flat  flat%   sum%        cum   cum%
     0.60s 40.00% 40.00%      0.90s 60.00%  compress/flate.(*compressor).deflate
     300ms 20.00% 60.00%      300ms 20.00%  compress/flate.matchLen (inline)
     200ms 13.33% 73.33%      200ms 13.33%  compress/flate.matchLen
     400ms 26.67%   100%      1.50s   100%  queue.(*asyncQueue[go.shape.interface { Send([]int) }]).Start.func1
         0     0%   100%      1.50s   100%  runtime.goexit
`

func TestParsePprofTop(t *testing.T) {
	got, err := ParsePprofTop(strings.NewReader(pprofTop))
	if err != nil {
		t.Fatal(err)
	}
	ms := time.Millisecond
	want := map[string]FuncCPU{
		"compress/flate.(*compressor).deflate": {Flat: 600 * ms, Cum: 900 * ms},
		"compress/flate.matchLen":              {Flat: 500 * ms, Cum: 300 * ms},
		"queue.(*asyncQueue[...]).Start.func1": {Flat: 400 * ms, Cum: 1500 * ms},
		"runtime.goexit":                       {Flat: 0, Cum: 1500 * ms},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d functions %v, want %d", len(got), got, len(want))
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: got %+v, want %+v", name, got[name], w)
		}
	}
	for _, bad := range []string{"", "no header\n 1s 1% 1% 1s 1% f\n", pprofTop + "     fast 1% 1% 1s 1% f\n"} {
		if _, err := ParsePprofTop(strings.NewReader(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestProfileDiff(t *testing.T) {
	ms := time.Millisecond
	pass := map[string]FuncCPU{"gzip": {Flat: 1000 * ms, Cum: 1000 * ms}, "receive": {Flat: 500 * ms, Cum: 1500 * ms}}
	local := map[string]FuncCPU{"gzip": {Flat: 700 * ms, Cum: 700 * ms}, "receive": {Flat: 500 * ms, Cum: 1500 * ms},
		"claim": {Flat: 200 * ms, Cum: 200 * ms}}
	got := ProfileDiff([]string{"pass-through", "local"}, []map[string]FuncCPU{pass, local}, []int64{1_000_000, 1_000_000}, 2, false)
	want := "| function (flat CPU, ns per record) | pass-through | local |\n" +
		"| --- | ---: | ---: |\n" +
		"| **all functions** | **1500** | **1400** |\n" +
		"| `gzip` | 1000.0 | 700.0 |\n" +
		"| `claim` | 0.0 | 200.0 |\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	// Records differ: each profile is divided by its own run's.
	got = ProfileDiff([]string{"a", "b"}, []map[string]FuncCPU{pass, pass}, []int64{1_000_000, 500_000}, 1, true)
	if !strings.Contains(got, "| `receive` | 1500.0 | 3000.0 |") {
		t.Fatalf("cumulative, records 10^6 and 5*10^5:\n%s", got)
	}
}

func TestPprofTotalBytes(t *testing.T) {
	for top, want := range map[string]float64{
		"Type: alloc_space\nShowing nodes accounting for 1.50GB, 97.40% of 1.54GB total\n": 1.54 * (1 << 30),
		"Showing nodes accounting for 512kB, 100% of 512kB total\n":                        512 << 10,
		"Showing nodes accounting for 0, 0% of 0B total\n":                                 0,
	} {
		if got, err := PprofTotalBytes([]byte(top)); err != nil || got != want {
			t.Errorf("%q: got %v, %v; want %v", top, got, err, want)
		}
	}
	if _, err := PprofTotalBytes([]byte(pprofTop[:40])); err == nil {
		t.Error("no total: no error")
	}
}
