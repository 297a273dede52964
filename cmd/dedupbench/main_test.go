package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/otelcol-dedup/otelcol-dedup/internal/e2e"
	"github.com/otelcol-dedup/otelcol-dedup/internal/loadgen"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// run1 is a run of 10^6 records of a mode at dup% copies with cpu seconds
// of collector CPU.
func run1(mode string, dup int, cpu float64, rss int64) Run {
	unique := int64(1_000_000 - 10_000*dup)
	r := Run{Mode: mode, CPUSeconds: cpu, PeakRSS: rss,
		Load: loadgen.Summary{Sent: 1_000_000, Unique: unique, Requests: 1000, LatencyP50: 0.002, LatencyP99: 0.010}}
	if mode == ModeRedis {
		r.Redis = RedisCounts{CPUSeconds: 0.5, Calls: 2000}
		r.RoundTrips = 1500
		r.Load.LatencyP50, r.Load.LatencyP99 = 0.003, 0.012
	}
	return r
}

func TestTargetRows(t *testing.T) {
	res := &results{Runs: map[int][]Run{}, Errors: map[string]string{}}
	// Two rounds: the ratios are taken in each round, then their median.
	for _, cpu := range []float64{2.0, 3.0} {
		res.Runs[30] = append(res.Runs[30], run1(ModePassThrough, 30, cpu, 100<<20),
			run1(ModeLocal, 30, cpu*0.95, 150<<20), run1(ModeRedis, 30, cpu*1.25, 150<<20))
		res.Runs[0] = append(res.Runs[0], run1(ModePassThrough, 0, cpu, 100<<20),
			run1(ModeLocal, 0, cpu*1.05, 100<<20+60_000_000), run1(ModeRedis, 0, cpu*1.3, 150<<20))
	}
	res.Ceiling = []Ceiling{{OpsPerSecond: 500_000, CPUPerOp: 0.7e-6}}
	three := func(v float64) []float64 { return []float64{v, v, v} }
	res.GoBench = GoBench{
		"BenchmarkConsumeLogs/cache=empty/key=content/batch=1000/dup=30%":  {"ns/record": three(140), "allocs/op": three(2)},
		"BenchmarkConsumeLogs/cache=empty/key=event.id/batch=1000/dup=30%": {"ns/record": three(160), "allocs/op": three(0)},
		"BenchmarkMemoryPerKey": {"bytes/key": three(40.5)},
		// Source attribution: two variants, 1.05x and 1.21x: geomean 1.127x.
		"BenchmarkConsumeLogs/sources=on/meter=nop/key=content/batch=1000/dup=0%":   {"ns/record": three(210)},
		"BenchmarkConsumeLogs/sources=off/meter=nop/key=content/batch=1000/dup=0%":  {"ns/record": three(200)},
		"BenchmarkConsumeLogs/sources=on/meter=sdk/key=content/batch=1000/dup=30%":  {"ns/record": three(242)},
		"BenchmarkConsumeLogs/sources=off/meter=sdk/key=content/batch=1000/dup=30%": {"ns/record": three(200)},
		"BenchmarkClientPath":             {"client-cpu-ns/record": three(120), "allocs/op": three(15)},
		"BenchmarkLayout/window=1h0m0s":   {"redis-B/record": {31.5}, "redis-cpu-ns/record": {3700}},
		"BenchmarkLayout/window=168h0m0s": {"redis-B/record": {32.5}, "redis-cpu-ns/record": {3900}},
	}
	want := []Row{
		{Target: "1", Figure: "collector CPU per record, local tier / pass-through, 30% copies; median of 2 paired runs", Measured: "0.95x (2.37 µs / 2.50 µs)", Goal: "<= 1.00x", Verdict: Met},
		{Target: "1", Figure: "the same, stretch goal; median of 2 paired runs", Measured: "0.95x (2.37 µs / 2.50 µs)", Goal: "<= 0.90x", Verdict: NotMet},
		{Target: "2", Figure: "collector CPU per record, local tier / pass-through, 0% copies; median of 2 paired runs", Measured: "1.05x (2.63 µs / 2.50 µs)", Goal: "<= 1.08x", Verdict: Met},
		{Target: "3", Figure: "collector CPU per record, Redis tier / pass-through, 30% copies; median of 2 paired runs", Measured: "1.25x (3.12 µs / 2.50 µs)", Goal: "<= 1.20x", Verdict: NotMet},
		{Target: "4", Figure: "BenchmarkConsumeLogs, empty cache, key content, batch 1000, 30% copies, 1 core; median of 3", Measured: "140 ns/record, 0.002 allocs/record", Goal: "<= 150 ns/record, 0 allocs/record", Verdict: Met},
		{Target: "4", Figure: "BenchmarkConsumeLogs, empty cache, key event.id, batch 1000, 30% copies, 1 core; median of 3", Measured: "160 ns/record, 0.000 allocs/record", Goal: "<= 150 ns/record, 0 allocs/record", Verdict: NotMet},
		{Target: "5", Figure: "peak RSS, local tier over the pass-through, per key in the window (0% copies: every record a key)", Measured: "60 bytes/key", Goal: "<= 64 bytes/key", Verdict: Met},
		{Target: "5", Figure: "local cache heap per key at 10^6 keys (BenchmarkMemoryPerKey)", Measured: "40.5 bytes/key", Verdict: Info},
		{Target: "S", Figure: "BenchmarkConsumeLogs, copies traced to their source (on) over not (off), geomean of 8 variants", Measured: "1.127x", Goal: "<= 1.10x", Verdict: NotMet},
		{Target: "C", Figure: "the Redis client's CPU, claim + commit of batches of 1000 against redis-server (BenchmarkClientPath)", Measured: "0.120 µs/record, 15 allocs/batch", Goal: "<= 0.15 µs/record, O(1) allocs/batch", Verdict: Met},
		{Target: "R", Figure: "Redis used_memory per record, 10^7 records, window 1h (BenchmarkLayout)", Measured: "31.5 bytes/record, Redis CPU 3.70 µs/record", Goal: "<= 32 bytes/record", Verdict: Met},
		{Target: "R", Figure: "Redis used_memory per record, 10^7 records, window 168h (BenchmarkLayout)", Measured: "32.5 bytes/record, Redis CPU 3.90 µs/record", Goal: "<= 32 bytes/record", Verdict: NotMet},
		{Target: "R", Figure: "Redis tier, 30% copies: collector CPU per record; Redis CPU per record (INFO cpu)", Measured: "3.12 µs (pass-through 2.50 µs); Redis 0.50 µs", Verdict: Info},
		{Target: "R", Figure: "latency added per request over the pass-through, p50 (load tool, request to acknowledgement)", Measured: "local +0.00 ms, redis +1.00 ms", Verdict: Info},
		{Target: "R", Figure: "latency added per request over the pass-through, p99", Measured: "local +0.00 ms, redis +2.00 ms", Verdict: Info},
		{Target: "R", Figure: "round trips to Redis per request of 1000 records (otelcol_processor_dedup_redis_requests); Redis commands per request (INFO commandstats, scripts' own commands included)", Measured: "1.50; 2.00", Verdict: Info},
		{Target: "R", Figure: "ceiling: redis-benchmark SET NX PX, -c 4 -P 1000, Redis CPU per op; the records/s one Redis core allows at that cost per unique record vs at the tier's", Measured: "0.70 µs/op (500k ops/s); 2.04M vs 2.00M records/s", Verdict: Info},
	}
	got := targetRows(res)
	if len(got) != len(want) {
		t.Fatalf("got %d rows, want %d:\n%s", len(got), len(want), FormatTable(got))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("row %d:\ngot  %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

func TestTargetRowsMissing(t *testing.T) {
	res := &results{Runs: map[int][]Run{}, Errors: map[string]string{"e2e": "local, 30% copies: 1 leaked\nmore"}}
	rows := targetRows(res)
	if len(rows) != 11 {
		t.Fatalf("got %d rows:\n%s", len(rows), FormatTable(rows))
	}
	for _, r := range rows {
		if r.Verdict != Failed {
			t.Errorf("%+v: want NOT MEASURED", r)
		}
	}
	if rows[0].Measured != "phase e2e failed: local, 30% copies: 1 leaked" || rows[4].Measured != "phase gotest not run" {
		t.Errorf("why: %q, %q", rows[0].Measured, rows[4].Measured)
	}
}

// TestRunEndToEnd runs the e2e and profile phases at a small scale against
// the real binary and redis-server: every run delivers exactly what it
// should, and the table and profiles are written.
func TestRunEndToEnd(t *testing.T) {
	bin, err := e2e.Distribution(os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"redis-server", "redis-benchmark"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Fatalf("%s: %v (make deps installs it)", b, err)
		}
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	o := options{bin: bin, out: dir, phases: "e2e,profile", compression: "gzip", reps: 1, records: 5000}
	if err := run(ctx, o); err != nil {
		t.Fatal(err)
	}
	js, err := os.ReadFile(filepath.Join(o.out, "runs.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res results
	if err := json.Unmarshal(js, &res); err != nil {
		t.Fatal(err)
	}
	runs := append(append(res.Runs[30], res.Runs[0]...), res.Profiles...)
	if len(runs) != 12 {
		t.Fatalf("%d runs, want 12", len(runs))
	}
	for _, r := range runs {
		dup := 5000 - r.Load.Unique
		want := r.Load.Unique
		if r.Mode == ModePassThrough {
			want = 5000
		}
		if (dup != 1500 && dup != 0) || r.Load.Sent != 5000 || r.Delivered != want || r.Distinct != r.Load.Unique || r.CPUSeconds <= 0 || r.PeakRSS <= 0 {
			t.Errorf("%s: sent %d, unique %d, delivered %d, distinct %d, CPU %v s, RSS %d", r.Mode, r.Load.Sent, r.Load.Unique, r.Delivered, r.Distinct, r.CPUSeconds, r.PeakRSS)
		}
		if (r.Mode == ModeRedis) != (r.RoundTrips > 0 && r.Redis.Calls > 0) {
			t.Errorf("%s: %d round trips to Redis, %d commands", r.Mode, r.RoundTrips, r.Redis.Calls)
		}
	}
	for _, f := range []string{"table.md", "profile.md", "profile-pass-through-30.pprof", "profile-local-0.top.txt", "profile-redis-30.pprof",
		"profile-redis-30-allocs.pprof", "profile-local-0-allocs.top.txt"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	profile, _ := os.ReadFile(filepath.Join(dir, "profile.md"))
	if n := len(regexp.MustCompile(`\| bytes allocated per record received \| [1-9][0-9]* \| [1-9][0-9]* \| [1-9][0-9]* \|`).FindAll(profile, -1)); n != 2 {
		t.Errorf("profile.md has %d rows of bytes allocated per record in each mode, want 2 (30%% and 0%% copies):\n%s", n, profile)
	}
	table, _ := os.ReadFile(filepath.Join(o.out, "table.md"))
	if !strings.Contains(string(table), "phase gotest not run") || strings.Contains(string(table), "failed") || !strings.Contains(string(table), ", commit ") {
		t.Errorf("table.md:\n%s", table)
	}
}

func TestRunRefusesUnknownPhase(t *testing.T) {
	err := run(context.Background(), options{out: t.TempDir(), phases: "gotest,sweep"})
	if err == nil || err.Error() != `-phases: unknown phase "sweep"; want gotest, e2e or profile` {
		t.Fatalf("got %v", err)
	}
}
