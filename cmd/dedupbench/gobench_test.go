package main

import (
	"strings"
	"testing"
)

const goBenchSample = `goos: linux
goarch: amd64
pkg: github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor
cpu: AMD EPYC
BenchmarkConsumeLogs/cache=1M/key=content/batch=1000/dup=30%         	    2167	    561784 ns/op	       561.8 ns/record	   1780049 records/s	     163 B/op	       5 allocs/op
BenchmarkConsumeLogs/cache=1M/key=content/batch=1000/dup=30%         	    2201	    540000 ns/op	       540.0 ns/record	   1851851 records/s	     160 B/op	       5 allocs/op
BenchmarkConsumeLogs/cache=1M/key=content/batch=1000/dup=30%         	    2300	    600000 ns/op	       600.0 ns/record	   1666666 records/s	     170 B/op	       6 allocs/op
--- BENCH: BenchmarkSomething
    bench_test.go:12: a log line
PASS
ok  	github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor	16.842s
goos: linux
goarch: amd64
pkg: github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/localcache
cpu: AMD EPYC
BenchmarkMemoryPerKey 	       7	 162340695 ns/op	        49.30 bytes/key	65553072 B/op	     706 allocs/op
BenchmarkMemoryPerKey 	       7	 162340695 ns/op	        51.70 bytes/key	65553072 B/op	     706 allocs/op
BenchmarkClaimBatch/one-by-one         	    4203	    364931 ns/op	       364.9 ns/claim	       0 B/op	       0 allocs/op
`

func TestParseGoBench(t *testing.T) {
	rs, err := ParseGoBench(strings.NewReader(goBenchSample))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 6 {
		t.Fatalf("%d results, want 6: %+v", len(rs), rs)
	}
	r := rs[0]
	if r.Name != "BenchmarkConsumeLogs/cache=1M/key=content/batch=1000/dup=30%" {
		t.Fatalf("first result %+v", r)
	}
	want := map[string]float64{"ns/op": 561784, "ns/record": 561.8, "records/s": 1780049, "B/op": 163, "allocs/op": 5}
	for u, v := range want {
		if r.Metrics[u] != v {
			t.Errorf("%s = %v, want %v", u, r.Metrics[u], v)
		}
	}
	if len(r.Metrics) != len(want) {
		t.Errorf("metrics %v", r.Metrics)
	}
	if rs[3].Name != "BenchmarkMemoryPerKey" {
		t.Errorf("fourth result %+v", rs[3])
	}

	m, n, ok := MedianOf(rs, "BenchmarkConsumeLogs/cache=1M/key=content/batch=1000/dup=30%", "ns/record")
	if !ok || n != 3 || m != 561.8 {
		t.Errorf("median ns/record = %v of %d (%v), want 561.8 of 3", m, n, ok)
	}
	m, n, ok = MedianOf(rs, "BenchmarkMemoryPerKey", "bytes/key")
	if !ok || n != 2 || m != 50.5 {
		t.Errorf("median bytes/key = %v of %d (%v), want 50.5 of 2", m, n, ok)
	}
	if _, _, ok := MedianOf(rs, "BenchmarkNope", "ns/op"); ok {
		t.Error("a missing benchmark has a median")
	}
	if _, _, ok := MedianOf(rs, "BenchmarkClaimBatch/one-by-one", "bytes/key"); ok {
		t.Error("a missing unit has a median")
	}
}

func TestParseGoBenchBadValue(t *testing.T) {
	_, err := ParseGoBench(strings.NewReader("BenchmarkX 	 10	 12x ns/op\n"))
	if err == nil {
		t.Fatal("no error for a bad value")
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{9, 1, 8, 2, 7, 3}, 5},
	} {
		in := append([]float64(nil), c.in...)
		got, ok := Median(c.in)
		if !ok || got != c.want {
			t.Errorf("Median(%v) = %v, want %v", in, got, c.want)
		}
		for i := range in {
			if in[i] != c.in[i] {
				t.Errorf("Median reordered its input: %v", c.in)
			}
		}
	}
	if _, ok := Median(nil); ok {
		t.Error("Median(nil) ok")
	}
}
