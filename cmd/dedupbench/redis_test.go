package main

import (
	"slices"
	"strings"
	"testing"
)

// The output of redis-benchmark 7.0 --csv for a custom command.
const redisBenchmarkCSV = `"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
"SET otelcol-dedup:bench:__rand_int__ AAAAAAAAAAAAAAAA NX PX 600000","353356.91","2.352","0.360","2.023","5.999","7.767","7.823"
`

func TestParseRedisBenchmarkCSV(t *testing.T) {
	rps, err := ParseRedisBenchmarkCSV(strings.NewReader(redisBenchmarkCSV))
	if err != nil || rps != 353356.91 {
		t.Fatalf("got %v, %v; want 353356.91", rps, err)
	}
	for _, bad := range []string{
		"",
		`"test","rps"` + "\n",
		`"a","b"` + "\n" + `"SET","1"` + "\n",
		`"test","rps"` + "\n" + `"SET","fast"` + "\n",
	} {
		if _, err := ParseRedisBenchmarkCSV(strings.NewReader(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestRedisBenchmarkArgs(t *testing.T) {
	got := RedisBenchmarkArgs(6380, 4, 1000, 1000000)
	want := []string{"-h", "127.0.0.1", "-p", "6380", "-c", "4", "-P", "1000", "-n", "1000000", "-r", "1000000000", "--csv",
		"SET", "otelcol-dedup:bench:__rand_int__", "AAAAAAAAAAAAAAAA", "NX", "PX", "600000"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q", got)
	}
}

const infoSample = "# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:3.500000\r\n\r\n# Commandstats\r\n" +
	"cmdstat_evalsha:calls=1000,usec=2320000,usec_per_call=2320.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_set:calls=1002000,usec=1500000,usec_per_call=1.50,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_broken:usec=5\r\n"

func TestParseRedisInfo(t *testing.T) {
	info := ParseRedisInfo(infoSample)
	cpu, err := RedisCPUSeconds(info)
	if err != nil || cpu != 4.75 {
		t.Fatalf("cpu = %v, %v; want 4.75", cpu, err)
	}
	calls, usec, err := CommandStat(info, "evalsha")
	if err != nil || calls != 1000 || usec != 2320000 {
		t.Fatalf("evalsha = %d, %d, %v", calls, usec, err)
	}
	calls, usec, err = CommandStat(info, "set")
	if err != nil || calls != 1002000 || usec != 1500000 {
		t.Fatalf("set = %d, %d, %v", calls, usec, err)
	}
	calls, usec, err = CommandStat(info, "eval")
	if err != nil || calls != 0 || usec != 0 {
		t.Fatalf("a command never called = %d, %d, %v", calls, usec, err)
	}
	if _, _, err := CommandStat(info, "broken"); err == nil {
		t.Fatal("a stat without calls=: no error")
	}
	if _, err := RedisCPUSeconds(map[string]string{"used_cpu_sys": "1"}); err == nil {
		t.Fatal("no used_cpu_user: no error")
	}
}
