package main

import (
	"reflect"
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
	got, err := ParseGoBench(strings.NewReader(goBenchSample))
	if err != nil {
		t.Fatal(err)
	}
	want := GoBench{
		"BenchmarkConsumeLogs/cache=1M/key=content/batch=1000/dup=30%": {
			"ns/op": {561784, 540000, 600000}, "ns/record": {561.8, 540.0, 600.0}, "records/s": {1780049, 1851851, 1666666},
			"B/op": {163, 160, 170}, "allocs/op": {5, 5, 6},
		},
		"BenchmarkMemoryPerKey": {
			"ns/op": {162340695, 162340695}, "bytes/key": {49.30, 51.70}, "B/op": {65553072, 65553072}, "allocs/op": {706, 706},
		},
		"BenchmarkClaimBatch/one-by-one": {"ns/op": {364931}, "ns/claim": {364.9}, "B/op": {0}, "allocs/op": {0}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
	if m, ok := Median(got["BenchmarkMemoryPerKey"]["bytes/key"]); !ok || m != 50.5 {
		t.Errorf("median bytes/key = %v (%v), want 50.5", m, ok)
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
