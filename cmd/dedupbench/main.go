// Command dedupbench is `make bench`: the performance targets of the dedup
// processor and the otelcol-dedup distribution in one run, after a wait (at
// most -load-wait) for the 1-minute load to drop below 1. Its phases:
// gotest (the processor's Go benchmarks, benchstat), e2e (-reps rounds of
// the pass-through, the local and the Redis tier on the same load, every
// delivery checked, and redis-benchmark on the same server) and profile
// (the collector's CPU profile in each mode). BENCHMARKS.md says what each
// measures and records table.md and profile.md, which it writes to -out.
//
//	go run ./cmd/dedupbench -bin bin/otelcol-dedup -out _bench
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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/procfs"

	"github.com/otelcol-dedup/otelcol-dedup/internal/testkit/redistest"
)

const (
	batch, senders = 1000, 4
	processorDir   = "processor/dedupprocessor"
)

var dupPcts = []int{30, 0}

type options struct {
	bin, out, phases, compression string
	count, reps                   int
	records                       int64
	loadWait                      time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.bin, "bin", "bin/otelcol-dedup", "the otelcol-dedup binary (make build)")
	flag.StringVar(&o.out, "out", "_bench", "directory of what the run writes: table.md, profile.md, benchstat.txt, report.txt, runs.json, gotest.txt, the profiles")
	flag.StringVar(&o.phases, "phases", "gotest,e2e,profile", "phases to run, comma-separated: gotest, e2e, profile")
	flag.IntVar(&o.count, "count", 6, "repetitions of each Go benchmark (go test -count)")
	flag.IntVar(&o.reps, "reps", 3, "rounds of the end-to-end runs (each mode once per round; medians reported)")
	flag.Int64Var(&o.records, "records", 1_000_000, "records of each end-to-end run")
	flag.DurationVar(&o.loadWait, "load-wait", 10*time.Minute, "the longest wait for the 1-minute load to drop below 1; then measure anyway and say so")
	flag.StringVar(&o.compression, "compression", "gzip", "the collector's OTLP exporter compression: gzip (its default) or none")
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
	GoBench                                GoBench
	Runs                                   map[int][]Run // by duplicate %: rounds of modes in order
	Ceiling                                []Ceiling
	Profiles                               []Run
	Errors                                 map[string]string // by phase
}

func run(ctx context.Context, o options) error {
	phases := map[string]bool{}
	for _, p := range strings.Split(o.phases, ",") {
		if !slices.Contains([]string{"gotest", "e2e", "profile"}, p) {
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

	res := &results{Date: time.Now().UTC().Format(time.RFC3339), Source: "commit " + output(ctx, "git", "describe", "--always", "--dirty"),
		Machine: machine(procfs.DefaultMountPoint), Go: runtime.Version(), Redis: redisVersion(ctx), Runs: map[int][]Run{}, Errors: map[string]string{}}
	logf("dedupbench: %s; %s; %s; %s; %s", res.Date, res.Source, res.Machine, res.Go, res.Redis)
	res.Load = waitForQuiet(ctx, "/proc/loadavg", o.loadWait, 15*time.Second, logf)
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
		h := &harness{}
		defer h.close()
		redis := redistest.Standalone(h) // no persistence, a loopback port of its own
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
	logf("written to %s", o.out)
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
		fmt.Fprintf(w, "$ (cd %s && go %s)\n", processorDir, strings.Join(args, " "))
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

func describe(r Run, dupPct int) string {
	return fmt.Sprintf("%-12s %2d%% copies: %.2f µs CPU/record, peak RSS %.1f MiB, %s records/s, latency p50 %.2f ms p99 %.2f ms; "+
		"delivered %d (distinct %d), dropped %d; redis CPU %.2f µs/record, %d round trips, %d commands",
		r.Mode, dupPct, r.CPUPerRecord()*1e6, float64(r.PeakRSS)/(1<<20), Rate(r.Load.RecordsPerSecond), r.Load.LatencyP50*1e3,
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
		c, err := runRedisBenchmark(ctx, redis, int(o.records))
		if err != nil {
			return err
		}
		res.Ceiling = append(res.Ceiling, c)
		logf("round %d: redis-benchmark %s: %s ops/s, redis CPU %.3f µs/op", rep+1,
			strings.Join(RedisBenchmarkArgs(redis.Port(), int(o.records)), " "), Rate(c.OpsPerSecond), c.CPUPerOp()*1e6)
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
			// The collector runs in this directory: it writes the profile here.
			path := filepath.Join(o.out, fmt.Sprintf("profile-%s-%d.pprof", mode, dup))
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

// output is a command's trimmed output, or its error.
func output(ctx context.Context, name string, args ...string) string {
	out, err := exec.CommandContext(ctx, name, args...).Output()
	if err != nil {
		return name + ": " + err.Error()
	}
	return strings.TrimSpace(string(out))
}

// machine describes the host from the proc file system at root: "<CPU
// model>, <n> cores, <memory> GiB".
func machine(root string) string {
	fs, err := procfs.NewFS(root)
	if err != nil {
		return err.Error()
	}
	cpus, err1 := fs.CPUInfo()
	mem, err2 := fs.Meminfo()
	if err1 != nil || err2 != nil || len(cpus) == 0 || mem.MemTotalBytes == nil {
		return fmt.Sprintf("machine unknown (cpuinfo: %v, meminfo: %v)", err1, err2)
	}
	return fmt.Sprintf("%s, %d cores, %.1f GiB", cpus[0].ModelName, len(cpus), float64(*mem.MemTotalBytes)/(1<<30))
}

// waitForQuiet reads the load averages (a /proc/loadavg) every poll until
// the 1-minute one is below 1 or wait has passed, and returns the last
// reading, marked if it never was below 1: a machine that stays busy delays
// the run by wait at most, and the table records the load it ran under.
func waitForQuiet(ctx context.Context, loadavg string, wait, poll time.Duration, logf func(string, ...any)) string {
	for waited := time.Duration(0); ; waited += poll {
		b, err := os.ReadFile(loadavg)
		f := strings.Fields(string(b))
		if err != nil || len(f) < 3 {
			return fmt.Sprintf("unknown (%s: %v)", loadavg, err)
		}
		load := strings.Join(f[:3], " ")
		if one, err := strconv.ParseFloat(f[0], 64); err != nil || one < 1 {
			return load
		}
		if waited >= wait || ctx.Err() != nil {
			return load + " (never below 1: figures of a busy machine)"
		}
		logf("load %s (1-min >= 1): waiting (%s of at most %s)", load, waited, wait)
		select {
		case <-time.After(poll):
		case <-ctx.Done():
		}
	}
}
