// Command dedupbench is `make bench`: the performance targets of the dedup
// processor and the otelcol-dedup distribution in one run.
//
//	go run ./cmd/dedupbench -bin bin/otelcol-dedup -out _bench
//
// A run waits (at most -load-wait) for the machine's 1-minute load to drop
// below -load-max, then:
//
//   - gotest: the processor module's Go benchmarks (BenchmarkConsumeLogs at
//     batch 1000, BenchmarkMemoryPerKey) with go test -bench, -count times
//     on one core, summarized by benchstat;
//   - e2e: -reps rounds, each running the pass-through, the local tier and
//     the Redis tier (a standalone redis-server) in turn on the same
//     workload (-records OTLP logs from the dedupload engine, 30% exact
//     copies, then 0%, batches of 1000, 4 senders, exported over OTLP to a
//     sink that checks exactly what arrived: every identity once, 0 leaked,
//     0 lost), plus redis-benchmark's pipelined SET NX PX on the same
//     server; each mode's figures are divided by its round's pass-through's
//     and the medians of those ratios reported;
//   - profile: one more run of each mode at each share of copies with the
//     pprof extension writing the collector's CPU profile, and the
//     functions whose CPU per record differs most between the three.
//
// Everything goes to -out (git ignores _bench): the targets table
// (table.md) and the profiles' table (profile.md), which BENCHMARKS.md
// records, benchstat's summary, the report, runs.json, the raw benchmark
// output and the profiles.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/otelcol-dedup/otelcol-dedup/internal/loadgen"
	"github.com/otelcol-dedup/otelcol-dedup/internal/testkit/redistest"
)

const (
	batch, senders = 1000, 4
	processorDir   = "processor/dedupprocessor"
)

var dupPcts = []int{30, 0}

type options struct {
	bin, out, phases, compression, redisBenchmark string
	count, reps                                   int
	records                                       int64
	loadMax                                       float64
	loadWait                                      time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.bin, "bin", "bin/otelcol-dedup", "the otelcol-dedup binary (make build)")
	flag.StringVar(&o.out, "out", "_bench", "directory of what the run writes: table.md, profile.md, benchstat.txt, report.txt, runs.json, gotest.txt, the profiles")
	flag.StringVar(&o.phases, "phases", "gotest,e2e,profile", "phases to run, comma-separated: gotest, e2e, profile")
	flag.IntVar(&o.count, "count", 6, "repetitions of each Go benchmark (go test -count)")
	flag.IntVar(&o.reps, "reps", 3, "rounds of the end-to-end runs (each mode once per round; medians reported)")
	flag.Int64Var(&o.records, "records", 1_000_000, "records of each end-to-end run")
	flag.Float64Var(&o.loadMax, "load-max", 1.0, "wait for the 1-minute load average to drop below this before measuring")
	flag.DurationVar(&o.loadWait, "load-wait", 10*time.Minute, "the longest wait for -load-max; then measure anyway and say so")
	flag.StringVar(&o.compression, "compression", "gzip", "the collector's OTLP exporter compression: gzip (its default) or none")
	flag.StringVar(&o.redisBenchmark, "redis-benchmark", "redis-benchmark", "redis-benchmark binary")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "dedupbench:", err)
		os.Exit(1)
	}
}

// results is what a run measured; runs.json is its JSON form.
type results struct {
	Date, Source, Machine, Go, Redis, Load string
	Records                                int64
	GoBench                                []GoBench
	Runs                                   map[int][]Run // by duplicate %: rounds of Modes in order
	Ceiling                                []Ceiling
	Profiles                               []Run
	Errors                                 map[string]string // by phase
}

func run(ctx context.Context, o options) error {
	phases := map[string]bool{}
	for _, p := range strings.Split(o.phases, ",") {
		if p = strings.TrimSpace(p); !slices.Contains([]string{"gotest", "e2e", "profile"}, p) {
			return fmt.Errorf("-phases: unknown phase %q; want gotest, e2e or profile", p)
		}
		phases[p] = true
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	report, err := os.Create(filepath.Join(o.out, "report.txt"))
	if err != nil {
		return err
	}
	defer report.Close()
	w := io.MultiWriter(os.Stdout, report)
	logf := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }

	h, err := thisHost()
	if err != nil {
		return err
	}
	machine, err := h.machine()
	if err != nil {
		return err
	}
	res := &results{Date: time.Now().UTC().Format(time.RFC3339), Source: source(ctx), Machine: machine, Go: runtime.Version(),
		Redis: redisVersion(), Records: o.records, Runs: map[int][]Run{}, Errors: map[string]string{}}
	logf("dedupbench: %s; %s; %s; %s; %s", res.Date, res.Source, res.Machine, res.Go, res.Redis)
	load, quiet, err := waitForQuiet(o.loadMax, o.loadWait, 15*time.Second, h.loadAvg, time.Sleep, func(l LoadAvg, waited time.Duration) {
		logf("load %s (1-min >= %.2f): waiting (%s of at most %s)", l, o.loadMax, waited.Round(time.Second), o.loadWait)
	})
	if err != nil {
		return err
	}
	res.Load = load.String()
	if !quiet {
		res.Load += " (never below -load-max: figures of a busy machine)"
	}
	logf("load %s: measuring", res.Load)

	phase := func(name string, fn func() error) {
		if !phases[name] || ctx.Err() != nil {
			return
		}
		start := time.Now()
		logf("\n== %s", name)
		if err := fn(); err != nil {
			res.Errors[name] = err.Error()
			logf("%s FAILED: %v", name, err)
		}
		logf("== %s done in %s", name, time.Since(start).Round(time.Second))
	}
	phase("gotest", func() error { return goTest(ctx, o, res, w) })
	if phases["e2e"] || phases["profile"] {
		rh := &harness{}
		defer rh.close()
		redis, err := startRedis(rh)
		if err != nil {
			return err
		}
		logf("%s on %s", res.Redis, redis.Addr())
		phase("e2e", func() error { return endToEnd(ctx, o, res, redis, logf) })
		phase("profile", func() error { return profiles(ctx, o, res, redis, logf) })
	}

	rows := targetRows(res)
	table := fmt.Sprintf("`make bench` of %s, %s, on %s; %s; %s; load %s; %s records per end-to-end run, exporter compression %s.\n\n%s\n%s\n",
		res.Date, res.Source, res.Machine, res.Go, res.Redis, res.Load, Rate(float64(o.records)), o.compression, FormatTable(rows), Summary(rows))
	logf("\n%s", table)
	js, _ := json.MarshalIndent(res, "", "  ")
	for name, b := range map[string][]byte{"table.md": []byte(table), "runs.json": js} {
		if err := os.WriteFile(filepath.Join(o.out, name), b, 0o644); err != nil {
			return err
		}
	}
	logf("written to %s: table.md, profile.md, benchstat.txt, report.txt, runs.json, gotest.txt, profile-*.pprof, profile-*.top.txt", o.out)
	if len(res.Errors) > 0 {
		return fmt.Errorf("%d phase(s) failed", len(res.Errors))
	}
	return ctx.Err()
}

// goTest runs the processor module's benchmarks and benchstat.
func goTest(ctx context.Context, o options, res *results, w io.Writer) error {
	var raw bytes.Buffer
	for _, job := range [][2]string{
		{".", `^BenchmarkConsumeLogs$/^cache=(empty|1M)$/^key=/^batch=1000$`},
		{"./internal/localcache", `^BenchmarkMemoryPerKey$`},
	} {
		args := []string{"test", "-run", "^$", "-bench", job[1], "-benchmem", "-cpu", "1", "-count", fmt.Sprint(o.count), job[0]}
		fmt.Fprintf(w, "$ (cd %s && go %s)\n", processorDir, shellJoin(args))
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = processorDir
		cmd.Stdout, cmd.Stderr = io.MultiWriter(&raw, w), w
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go test %s: %w", job[0], err)
		}
	}
	path := filepath.Join(o.out, "gotest.txt")
	if err := os.WriteFile(path, raw.Bytes(), 0o644); err != nil {
		return err
	}
	var err error
	if res.GoBench, err = ParseGoBench(&raw); err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, "go", "tool", "benchstat", "gotest.txt="+path).CombinedOutput()
	if err != nil {
		return fmt.Errorf("benchstat: %w\n%s", err, out)
	}
	fmt.Fprintf(w, "%s", out)
	return os.WriteFile(filepath.Join(o.out, "benchstat.txt"), out, 0o644)
}

// measure runs one mode, emptying the Redis server first, and checks what
// was delivered.
func measure(ctx context.Context, o options, redis *redistest.Server, mode string, dupPct int, profile string) (Run, error) {
	if err := flushRedis(ctx, redis); err != nil {
		return Run{}, err
	}
	if mode != ModeRedis {
		redis = nil
	}
	load := loadgen.Config{Records: o.records, Duplicates: float64(dupPct) / 100, Batch: batch, Senders: senders, Seed: 1}
	r, err := RunCollector(ctx, o.bin, o.out, mode, redis, load, o.compression, profile)
	if err != nil {
		return r, fmt.Errorf("%s, %d%% copies: %w", mode, dupPct, err)
	}
	return r, r.Exact(o.records)
}

func describe(r Run, dupPct int) string {
	return fmt.Sprintf("%-12s %2d%% copies: %.2f µs CPU/record, peak RSS %s, %s records/s, latency p50 %.2f ms p99 %.2f ms; "+
		"delivered %d (distinct %d), dropped %d; redis CPU %.2f µs/record, %d round trips, %d commands",
		r.Mode, dupPct, r.CPUPerRecord()*1e6, MiB(r.PeakRSS), Rate(r.Load.RecordsPerSecond), r.Load.LatencyP50*1e3,
		r.Load.LatencyP99*1e3, r.Delivered, r.Distinct, r.Dropped, r.Redis.CPUSeconds*1e6/float64(r.Load.Sent), r.RoundTrips, r.Redis.Calls)
}

// endToEnd runs the rounds: each the three modes in turn at each duplicate
// share, then redis-benchmark on the same server.
func endToEnd(ctx context.Context, o options, res *results, redis *redistest.Server, logf func(string, ...any)) error {
	for rep := range o.reps {
		for _, dup := range dupPcts {
			for _, mode := range Modes {
				r, err := measure(ctx, o, redis, mode, dup, "")
				if err != nil {
					return err
				}
				res.Runs[dup] = append(res.Runs[dup], r)
				logf("round %d: %s", rep+1, describe(r, dup))
			}
		}
		if err := flushRedis(ctx, redis); err != nil {
			return err
		}
		c, err := runRedisBenchmark(ctx, o.redisBenchmark, redis, senders, batch, int(o.records))
		if err != nil {
			return err
		}
		res.Ceiling = append(res.Ceiling, c)
		logf("round %d: %s %s: %s ops/s, redis CPU %.3f µs/op", rep+1, o.redisBenchmark,
			shellJoin(RedisBenchmarkArgs(redis.Port(), senders, batch, int(o.records))), Rate(c.OpsPerSecond), c.CPUPerOp()*1e6)
	}
	return nil
}

// profiles runs each mode once more at each duplicate share with its CPU
// profile written, and tables what differs.
func profiles(ctx context.Context, o options, res *results, redis *redistest.Server, logf func(string, ...any)) error {
	doc := fmt.Sprintf("CPU profiles of the collector (pprof extension, start to shutdown) under the same load: %s OTLP logs, "+
		"batches of %d, %d senders, exported over OTLP (compression %s); %s, %s. The functions whose CPU per record received "+
		"differs most from the pass-through's; the profiles are profile-<mode>-<copies>.pprof.\n",
		Rate(float64(o.records)), batch, senders, o.compression, res.Date, res.Machine)
	for _, dup := range dupPcts {
		var tops []map[string]FuncCPU
		var records []int64
		for _, mode := range Modes {
			path, err := filepath.Abs(filepath.Join(o.out, fmt.Sprintf("profile-%s-%d.pprof", mode, dup)))
			if err != nil {
				return err
			}
			r, err := measure(ctx, o, redis, mode, dup, path)
			if err != nil {
				return err
			}
			res.Profiles = append(res.Profiles, r)
			logf("profiled: %s", describe(r, dup))
			out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount", "1000000", "-nodefraction", "0", path).Output()
			if err != nil {
				return fmt.Errorf("go tool pprof -top %s: %w", path, err)
			}
			if err := os.WriteFile(strings.TrimSuffix(path, ".pprof")+".top.txt", out, 0o644); err != nil {
				return err
			}
			top, err := ParsePprofTop(bytes.NewReader(out))
			if err != nil {
				return err
			}
			tops = append(tops, top)
			records = append(records, r.Load.Sent)
		}
		doc += fmt.Sprintf("\n### %d%% copies\n\n%s\n%s", dup,
			ProfileDiff(Modes, tops, records, 20, false), ProfileDiff(Modes, tops, records, 20, true))
	}
	logf("\n%s", doc)
	return os.WriteFile(filepath.Join(o.out, "profile.md"), []byte(doc), 0o644)
}

func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = a
		if a == "" || strings.ContainsAny(a, " '\"*$%\\()^|[]{}?<>;&") {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}

// source names the commit measured, and whether the working tree differs.
func source(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "git", "describe", "--always", "--dirty").Output()
	if err != nil {
		return "commit unknown (no git)"
	}
	return "commit " + strings.TrimSpace(string(out))
}

func redisVersion() string {
	out, err := exec.Command("redis-server", "--version").Output()
	if err != nil {
		return "redis-server: " + err.Error()
	}
	for _, f := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return "Redis " + v
		}
	}
	return strings.TrimSpace(string(out))
}
