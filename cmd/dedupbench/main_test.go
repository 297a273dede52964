package main

import (
	"bytes"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/otelcol-dedup/otelcol-dedup/cmd/dedupload/loadgen"
	"github.com/otelcol-dedup/otelcol-dedup/internal/bench"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestResultLines(t *testing.T) {
	var out bytes.Buffer
	r := &resultLines{w: &out}
	// The testing package writes the name first, the figures when done.
	for _, chunk := range []string{
		"goos: linux\npkg: x\nBenchmarkA/b=1         \t",
		"    2979\t    398853 ns/op\t       5 allocs/op\n",
		"BenchmarkMemoryPerKey \t       7\t 162340695 ns/op\n--- BENCH: x\nPASS\n",
	} {
		if n, err := r.Write([]byte(chunk)); n != len(chunk) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	want := "BenchmarkA/b=1         \t    2979\t    398853 ns/op\t       5 allocs/op\n" +
		"BenchmarkMemoryPerKey \t       7\t 162340695 ns/op\n"
	if out.String() != want {
		t.Fatalf("got %q\nwant %q", out.String(), want)
	}
}

// collectorRun is an end-to-end run of 10^6 records: the pass-through in 4
// s with 1 s of sender CPU, dedup+redis in 5 s with 1 s of sender CPU, 1 s
// of Redis CPU and 2 s of round trips summed over batches.
func collectorRun(mode string, sent int64, cpu float64) bench.CollectorRun {
	gc, switches := 30, int64(12_000)
	switch mode {
	case bench.ModePassThrough:
		gc, switches = 100, 10_000
	case bench.ModeDedupRedis:
		switches = 25_000
	}
	r := bench.CollectorRun{Mode: mode, Load: loadgen.Summary{Sent: sent, Seconds: 4, RecordsPerSecond: float64(sent) / 4},
		CPUSeconds: cpu, PeakRSS: 50 << 20, GCCycles: gc, ContextSwitches: switches, DriverCPUSeconds: 1}
	if mode != bench.ModePassThrough {
		r.Dropped = sent * 3 / 10
	}
	if mode == bench.ModeDedup {
		r.Load.Seconds, r.Load.RecordsPerSecond = 4.4, float64(sent)/4.4
	}
	if mode == bench.ModeDedupRedis {
		r.Load.Seconds, r.Load.RecordsPerSecond = 5, float64(sent)/5
		r.RedisCPUSeconds, r.RedisWaitSeconds, r.CopyWaitSeconds = 1, 2, 4
	}
	return r
}

func waitHist(n float64) bench.Histogram {
	return bench.Histogram{Bounds: []float64{0.01, 0.1, math.Inf(1)}, Cumulative: []float64{n / 2, n, n}, Count: n}
}

// raceRun is a racing-copies run of 10 rounds over 2 collectors.
func raceRun(topology string, size int, seconds float64) bench.RaceResult {
	records := int64(10 * size)
	return bench.RaceResult{Topology: topology, Collectors: 2, Size: size, Rounds: 10, Records: records, Seconds: seconds,
		RoundSeconds: []float64{seconds / 10},
		Counts: bench.DedupCounts{Records: map[string]int64{"unique": records, "duplicate": records},
			RedisRequests: map[string]int64{"claim/ok": 20, "commit/ok": 10, "recheck/ok": 2},
			Waits:         map[string]bench.Histogram{"settled": waitHist(4), "refused": {}}}}
}

func TestTargetRows(t *testing.T) {
	res := &results{
		ConsumeLogs: map[string]consumeLogs{
			"empty/content":  {NsPerRecord: 250, AllocsPerBatch: 5},
			"empty/event.id": {NsPerRecord: 180, AllocsPerBatch: 5},
			"1M/content":     {NsPerRecord: 320, AllocsPerBatch: 6},
			"1M/event.id":    {NsPerRecord: 200, AllocsPerBatch: 5},
		},
		BytesPerKey: 49.3,
		Machine:     bench.Machine{Cores: 2},
		Baseline: []bench.BaselineResult{
			{OpsPerSecond: 400_000, Server: bench.RedisCounts{CPUSeconds: 2.2, Calls: map[string]int64{"set": 1000}, Usec: map[string]int64{"set": 2000}}},
			{OpsPerSecond: 500_000, Server: bench.RedisCounts{CPUSeconds: 2.0}},
			{OpsPerSecond: 450_000, Server: bench.RedisCounts{CPUSeconds: 2.5}},
		},
		// Server CPU per key against the baseline's: 2.7/2.2, 2.5/2.0,
		// 2.6/2.5 -> median 1.227.
		Tier: []bench.TierResult{
			{Records: 1_000_000, Batches: 1000, Seconds: 1_000_000.0 / 360_000, Requests: map[string]int64{"claim/ok": 1000}, // 90%
				Server: bench.RedisCounts{CPUSeconds: 2.7, Usec: map[string]int64{"evalsha": 2_300_000}}, ClientCPUSeconds: 0.5},
			{Records: 1_000_000, Batches: 1000, Seconds: 1_000_000.0 / 350_000, Requests: map[string]int64{"claim/ok": 1000}, // 70%
				Server: bench.RedisCounts{CPUSeconds: 2.5}, ClientCPUSeconds: 0.45},
			{Records: 1_000_000, Batches: 1000, Seconds: 1_000_000.0 / 369_000, Requests: map[string]int64{"claim/ok": 1000}, // 82%
				Server: bench.RedisCounts{CPUSeconds: 2.6}, ClientCPUSeconds: 0.4},
		},
		// Client CPU per record 0.5, 0.45, 0.4 µs with the tier; 0.3, 0.2,
		// 0.25 without.
		TierLocal:  []bench.TierResult{{Records: 1_000_000, ClientCPUSeconds: 0.3}, {Records: 1_000_000, ClientCPUSeconds: 0.2}, {Records: 1_000_000, ClientCPUSeconds: 0.25}},
		RoundTrips: []bench.TripCount{{Claim: 3, Commit: 1}, {Claim: 1, Commit: 1}, {Claim: 1, Commit: 1}},
		Collector: []bench.CollectorRun{
			collectorRun(bench.ModePassThrough, 1_000_000, 2.0), collectorRun(bench.ModeDedup, 1_000_000, 2.2), collectorRun(bench.ModeDedupRedis, 1_000_000, 3.0),
			collectorRun(bench.ModePassThrough, 1_000_000, 1.0), collectorRun(bench.ModeDedup, 1_000_000, 1.2), collectorRun(bench.ModeDedupRedis, 1_000_000, 1.1),
			collectorRun(bench.ModePassThrough, 1_000_000, 1.5), collectorRun(bench.ModeDedup, 1_000_000, 1.65), collectorRun(bench.ModeDedupRedis, 1_000_000, 2.4),
		},
		// Cluster / standalone: 0.5 at 1000, 1.11 at 8192.
		Race: []bench.RaceResult{
			raceRun(bench.TopologyStandalone, 1000, 0.25), raceRun(bench.TopologyCluster, 1000, 0.5),
			raceRun(bench.TopologyStandalone, 8192, 1), raceRun(bench.TopologyCluster, 8192, 0.9),
		},
		Scale: []bench.ScaleResult{{Topology: bench.TopologyCluster, Collectors: 2, Senders: 4, Records: 100_000, Unique: 70_000, Requests: 100, Seconds: 2,
			CPU: bench.CPUSplit{Collectors: 1, Redis: 0.35, Driver: 0.2, Others: 0.4},
			Counts: bench.DedupCounts{Records: map[string]int64{"unique": 70_000, "duplicate": 30_000}, RedisRequests: map[string]int64{"claim/ok": 100, "commit/ok": 100, "recheck/ok": 50},
				Waits: map[string]bench.Histogram{"settled": waitHist(2), "refused": {}}}}},
		WaitCost: &bench.WaitCostResult{Delay: 50 * time.Millisecond, Latency: map[string][]float64{
			bench.WaitNoCopy: {0.06}, bench.WaitCopyOther: {0.08}, bench.WaitCopySame: {0.065}, bench.WaitCopyCommitted: {0.01}}},
		PhaseErrors: map[string]string{},
	}
	rows := targetRows(res, options{records: 1_000_000})
	type want struct {
		measured string
		verdict  bench.Verdict
	}
	wants := []want{
		{"250 ns/record (4.00M records/s)", bench.NotMet},
		{"180 ns/record (5.56M records/s)", bench.Met},
		{"320 ns/record (3.12M records/s)", bench.NotMet},
		{"200 ns/record (5.00M records/s)", bench.Met},
		{"6 per 1000-record batch = 0.006/record", bench.Met},
		{"49.3 bytes/key", bench.Met},
		{"82% (medians 360k / 450k)", bench.Met},
		{"2.60 µs vs 2.20 µs; client 0.45 µs", bench.Info},
		{"0.25 µs; the tier adds 0.20 µs", bench.Info},
		{"2.30 µs vs 2.00 µs", bench.Info},
		{"1.000 (3000 claims / 3000 batches)", bench.Info},
		{"max 1 (commit: max 1; first batch: 3 + 1, connection set-up)", bench.Met},
		// dedup ratios 1.1, 1.2, 1.1 -> 1.10; redis 1.5, 1.1, 1.6 -> 1.50
		{"1.10x (medians 1.65 µs / 1.50 µs)", bench.Met},
		{"pass-through 50.0 MiB, dedup 50.0 MiB, dedup+redis 50.0 MiB", bench.Info},
		{"pass-through 100, dedup 30, dedup+redis 30", bench.Info},
		{"pass-through 10.0, dedup 12.0, dedup+redis 25.0", bench.Info},
		{"1.50x (medians 2.40 µs / 1.50 µs)", bench.NotMet},
		{"1.23x (3 pairs)", bench.NotMet},
		{"1.15x", bench.Info}, // 2.3 µs per key in the script / 2 µs per SET
		{"0.80x (3 pairs)", bench.NotMet},
		// Per round: waits 2 s / (4 senders x 5 s) = 10%, alone 4/(4+0.5);
		// Redis 1 s of 5, 1/3.1, 1/4.4 of the run's CPU -> 23%, alone
		// 3/4, 2/3, 2.5/3.5 -> 0.71x, with all the extra CPU 3/5, 2/3.1,
		// 2.5/4.4 -> 0.60x; busy 3/8, 2/8, 2.5/8 and 5/10, 3.1/10, 4.4/10.
		{"10% (0.89x); 20% (0.80x); 23% (0.71x; 0.60x); 31% / 44% of 2 cores; largest cost: redis-server's CPU on the shared cores", bench.Info},
		// 4 s against 4.4 s in each round.
		{"0.91x", bench.Info},
		// SET NX PX: 2.2, 2.0, 2.5 µs per op -> 2.2; 0.7 keys per record:
		// 3/(3+1.54), 2/(2+1.54), 2.5/(2.5+1.54) -> 0.62x.
		{"0.62x (2.20 µs per op, 0.70 keys per record)", bench.Info},
		{"0.50x (medians 20.0k / 40.0k)", bench.NotMet},
		{"1.11x (medians 91.0k / 81.9k)", bench.Met},
		{"0", bench.Met},
		{"yes", bench.Met},
		// 4 waits, 2 in [0, 10 ms], 2 in (10, 100 ms]: rank 2 at 10 ms,
		// rank 3.96 at 10 + 90 x 1.96/2 ms; (20 claims + 10 commits + 2
		// rechecks) / 20 batches.
		{"standalone/1000: 4 waits, p50 10.0 ms p99 98.2 ms, 1.60 round trips/batch; cluster/1000: 4 waits, p50 10.0 ms p99 98.2 ms, 1.60 round trips/batch; " +
			"standalone/8192: 4 waits, p50 10.0 ms p99 98.2 ms, 1.60 round trips/batch; cluster/8192: 4 waits, p50 10.0 ms p99 98.2 ms, 1.60 round trips/batch", bench.Info},
		{"50.0k/s; 0.50/0.17/0.10/0.20; 5.00 µs; 2.50", bench.Info},
		{"60.0 ms / 80.0 ms / 65.0 ms / 10.0 ms", bench.Info},
	}
	if len(rows) != len(wants) {
		t.Fatalf("%d rows, want %d:\n%s", len(rows), len(wants), bench.FormatTable(rows))
	}
	for i, w := range wants {
		if (w.measured != "" && rows[i].Measured != w.measured) || rows[i].Verdict != w.verdict {
			t.Errorf("row %d %q: measured %q %s, want %q %s", i, rows[i].Figure, rows[i].Measured, rows[i].Verdict, w.measured, w.verdict)
		}
	}
	if got := bench.Summary(rows); got != "10 met, 6 not met, 0 not measured" {
		t.Errorf("summary %q", got)
	}
}

func TestTargetRowsMissing(t *testing.T) {
	res := &results{PhaseErrors: map[string]string{"redis": "redis-benchmark: exit status 1\nmore"}}
	rows := targetRows(res, options{records: 1_000_000})
	for _, r := range rows {
		if r.Verdict != bench.Failed {
			t.Errorf("row %q: %s, want NOT MEASURED", r.Figure, r.Verdict)
		}
	}
	var redisRows, notRun int
	for _, r := range rows {
		if r.Measured == "phase redis failed: redis-benchmark: exit status 1" {
			redisRows++
		}
		if strings.HasSuffix(r.Measured, "not run") {
			notRun++
		}
	}
	if redisRows != 3 || notRun != len(rows)-3 {
		t.Errorf("%d redis failure rows, %d not-run rows of %d:\n%s", redisRows, notRun, len(rows), bench.FormatTable(rows))
	}
}

// TestGoBenchJobsResolve: every package the run benchmarks is built from
// the module that holds it (the processor is a module of its own, and the
// root module's `go test -c ./processor/dedupprocessor` fails), and every
// benchmark its pattern names is declared in that package's tests.
func TestGoBenchJobsResolve(t *testing.T) {
	root := repoRoot(t)
	benchName := regexp.MustCompile(`Benchmark\w+`)
	for _, job := range goBenchJobs {
		module := filepath.Join(root, job.pkg.Module)
		cmd := exec.Command("go", "list", "-f", "{{.Module.Dir}}\n{{.Dir}}{{range .TestGoFiles}}\n{{.}}{{end}}", job.pkg.Arg())
		cmd.Dir = module
		// Only stdout is go list's answer: on a cold module cache the go
		// command reports its downloads on stderr.
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Errorf("(cd %s && go list %s): %v\n%s", job.pkg.Module, job.pkg.Arg(), err, stderr.String())
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) < 3 || lines[0] != module || lines[1] != filepath.Join(root, job.pkg.Path()) {
			t.Errorf("%s: go list says module dir, dir, test files = %q; want %s, %s and test files",
				job.pkg.Path(), lines, module, filepath.Join(root, job.pkg.Path()))
			continue
		}
		var src strings.Builder
		for _, f := range lines[2:] {
			b, err := os.ReadFile(filepath.Join(lines[1], f))
			if err != nil {
				t.Fatal(err)
			}
			src.Write(b)
		}
		top, _, _ := strings.Cut(job.pattern, "/")
		names := benchName.FindAllString(top, -1)
		if len(names) == 0 {
			t.Errorf("%s: pattern %q names no benchmark", job.pkg.Path(), job.pattern)
		}
		for _, name := range names {
			if !strings.Contains(src.String(), "func "+name+"(b *testing.B)") {
				t.Errorf("%s: pattern %q names %s, which its tests do not declare", job.pkg.Path(), job.pattern, name)
			}
		}
	}
}

// repoRoot is the nearest directory above the test's that holds
// builder-config.yaml.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "builder-config.yaml")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no builder-config.yaml above the working directory")
		}
		dir = parent
	}
}

// scalePoint is a fleet-scaling run on the Cluster whose costs grow with
// the fleet.
func scalePoint(n int) bench.ScaleResult {
	return bench.ScaleResult{Topology: bench.TopologyCluster, Collectors: n, Senders: 2 * n, Records: 100_000, Unique: 70_000, Requests: 100, Seconds: 2,
		CPU: bench.CPUSplit{Collectors: 0.5 * float64(n), Redis: 0.3 * float64(n), Driver: 0.2, Others: 0.4},
		Counts: bench.DedupCounts{Records: map[string]int64{"unique": 70_000, "duplicate": 30_000}, RedisRequests: map[string]int64{"claim/ok": 100 * int64(n), "commit/ok": 100},
			Waits: map[string]bench.Histogram{"settled": waitHist(2), "refused": {}}},
		Redis: bench.RedisCounts{NetBytes: 3_000_000, UsedMemory: 14_000_000}}
}

func TestFleetDoc(t *testing.T) {
	res := &results{Date: "2026-11-23T00:00:00Z", Machine: bench.Machine{CPUModel: "AMD EPYC", Cores: 2}, Go: "go1.26.8", Redis: "Redis 7.0.15",
		Load:        map[string]string{"fleet": "0.42"},
		Race:        []bench.RaceResult{raceRun(bench.TopologyStandalone, 1000, 0.25), raceRun(bench.TopologyCluster, 1000, 0.5)},
		Scale:       []bench.ScaleResult{scalePoint(1), scalePoint(2), scalePoint(4)},
		ClusterTags: 12,
		WaitCost: &bench.WaitCostResult{Topology: bench.TopologyStandalone, Delay: 50 * time.Millisecond, Size: 1000, Latency: map[string][]float64{
			bench.WaitNoCopy: {0.06}, bench.WaitCopyOther: {0.08}, bench.WaitCopySame: {0.065}, bench.WaitCopyCommitted: {0.01}},
			Distinct: 1000, Delivered: 1000, DeliveredN: map[int]int64{1: 1000}},
	}
	doc := fleetDoc(res)
	for _, want := range []string{
		"load at the start of the phase: 0.42.",
		"## Racing copies\n",
		"Cluster / standalone, requests of 1000: 0.50x (median of 1 pairs: 0.50)\n",
		"## Fleet scaling\n",
		"| cluster | 4 | 8 | 50.0k | 35.0k | 1.00 / 0.60 / 0.10 / 0.20 |",
		"## The cost of waiting\n",
		"## Model: 50 collectors on 30 masters\n",
		// Redis CPU per key at 1, 2, 4 collectors: 0.3n s / 70k keys.
		"- masters holding keys = min(30 masters, 12 hash tags seen in the Cluster's keys) = 12\n",
		"| cluster | 4 | round trips per batch |",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("fleet.md lacks %q:\n%s", want, doc)
		}
	}
	if !fleetExact(res) {
		t.Error("every run exact, fleetExact says no")
	}
	res.Scale[1].Counts.Records["duplicate"]--
	if fleetExact(res) {
		t.Error("a scaling run dropped one copy too few: fleetExact says yes")
	}
}
