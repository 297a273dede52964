package main

import (
	"slices"
	"testing"
)

// The output of redis-benchmark 7.0 --csv for a custom command.
const redisBenchmarkCSV = `"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
"SET otelcol-dedup:bench:__rand_int__ AAAAAAAAAAAAAAAA NX PX 600000","353356.91","2.352","0.360","2.023","5.999","7.767","7.823"
`

func TestParseRedisBenchmarkCSV(t *testing.T) {
	rps, err := ParseRedisBenchmarkCSV([]byte(redisBenchmarkCSV), nil)
	if err != nil || rps != 353356.91 {
		t.Fatalf("got %v, %v; want 353356.91", rps, err)
	}
	for _, bad := range []string{
		"",
		`"test","rps"` + "\n",
		`"a","b"` + "\n" + `"SET","1"` + "\n",
		`"test","rps"` + "\n" + `"SET","fast"` + "\n",
	} {
		if _, err := ParseRedisBenchmarkCSV([]byte(bad), nil); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestRedisBenchmarkArgs(t *testing.T) {
	got := RedisBenchmarkArgs(6380, 1000000)
	want := []string{"-h", "127.0.0.1", "-p", "6380", "-c", "4", "-P", "1000", "-n", "1000000", "-r", "1000000000", "--csv",
		"SET", "otelcol-dedup:bench:__rand_int__", "AAAAAAAAAAAAAAAA", "NX", "PX", "600000"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q", got)
	}
}

const infoSample = "# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:3.500000\r\n\r\n# Commandstats\r\n" +
	"cmdstat_evalsha:calls=1000,usec=2320000,usec_per_call=2320.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_set:calls=1002000,usec=1500000,usec_per_call=1.50,rejected_calls=0,failed_calls=0\r\n"

func TestParseRedisCounts(t *testing.T) {
	c, err := ParseRedisCounts(infoSample)
	if err != nil || c != (RedisCounts{CPUSeconds: 4.75, Calls: 1003000}) {
		t.Fatalf("got %+v, %v; want 4.75 s and 1003000 calls", c, err)
	}
	for _, bad := range []string{"used_cpu_sys:1\r\n", infoSample + "cmdstat_broken:usec=5\r\n", "used_cpu_sys:x\r\nused_cpu_user:1\r\n"} {
		if _, err := ParseRedisCounts(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
