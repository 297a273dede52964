package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

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

func collectorRun(mode string, sent int64, cpu float64) bench.CollectorRun {
	gc := 30
	if mode == bench.ModePassThrough {
		gc = 100
	}
	return bench.CollectorRun{Mode: mode, Load: loadgen.Summary{Sent: sent}, CPUSeconds: cpu, PeakRSS: 50 << 20, GCCycles: gc}
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
		Baseline: []bench.BaselineResult{
			{OpsPerSecond: 400_000, Server: bench.RedisCounts{Calls: map[string]int64{"set": 1000}, Usec: map[string]int64{"set": 2000}}},
			{OpsPerSecond: 500_000},
			{OpsPerSecond: 450_000},
		},
		Tier: []bench.TierResult{
			{Records: 1_000_000, Batches: 1000, Seconds: 1_000_000.0 / 360_000, Requests: map[string]int64{"claim/ok": 1000}, // 90%
				Server: bench.RedisCounts{Usec: map[string]int64{"evalsha": 2_300_000}}},
			{Records: 1_000_000, Batches: 1000, Seconds: 1_000_000.0 / 350_000, Requests: map[string]int64{"claim/ok": 1000}}, // 70%
			{Records: 1_000_000, Batches: 1000, Seconds: 1_000_000.0 / 369_000, Requests: map[string]int64{"claim/ok": 1000}}, // 82%
		},
		RoundTrips: []bench.TripCount{{Claim: 3, Commit: 1}, {Claim: 1, Commit: 1}, {Claim: 1, Commit: 1}},
		Collector: []bench.CollectorRun{
			collectorRun(bench.ModePassThrough, 1_000_000, 2.0), collectorRun(bench.ModeDedup, 1_000_000, 2.2), collectorRun(bench.ModeDedupRedis, 1_000_000, 3.0),
			collectorRun(bench.ModePassThrough, 1_000_000, 1.0), collectorRun(bench.ModeDedup, 1_000_000, 1.2), collectorRun(bench.ModeDedupRedis, 1_000_000, 1.1),
			collectorRun(bench.ModePassThrough, 1_000_000, 1.5), collectorRun(bench.ModeDedup, 1_000_000, 1.65), collectorRun(bench.ModeDedupRedis, 1_000_000, 2.4),
		},
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
		{"", bench.Info},
		{"2.30 µs vs 2.00 µs", bench.Info},
		{"1.000 (3000 claims / 3000 batches)", bench.Info},
		{"max 1 (commit: max 1; first batch: 3 + 1, connection set-up)", bench.Met},
		// dedup ratios 1.1, 1.2, 1.1 -> 1.10; redis 1.5, 1.1, 1.6 -> 1.50
		{"1.10x (medians 1.65 µs / 1.50 µs)", bench.Met},
		{"1.50x (medians 2.40 µs / 1.50 µs)", bench.NotMet},
		{"pass-through 50.0 MiB, dedup 50.0 MiB, dedup+redis 50.0 MiB", bench.Info},
		{"pass-through 100, dedup 30, dedup+redis 30", bench.Info},
	}
	if len(rows) != len(wants) {
		t.Fatalf("%d rows, want %d:\n%s", len(rows), len(wants), bench.FormatTable(rows))
	}
	for i, w := range wants {
		if (w.measured != "" && rows[i].Measured != w.measured) || rows[i].Verdict != w.verdict {
			t.Errorf("row %d %q: measured %q %s, want %q %s", i, rows[i].Figure, rows[i].Measured, rows[i].Verdict, w.measured, w.verdict)
		}
	}
	if got := bench.Summary(rows); got != "7 met, 3 not met, 0 not measured" {
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
	if redisRows != 2 || notRun != len(rows)-2 {
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
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("(cd %s && go list %s): %v\n%s", job.pkg.Module, job.pkg.Arg(), err, out)
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
