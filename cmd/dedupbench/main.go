// Command dedupbench is `make bench`: the performance targets of the dedup
// processor and the otelcol-dedup distribution in one run, after a wait (at
// most -load-wait) for the 1-minute load to drop below 1. Its phases:
// gotest (the processor's Go benchmarks, benchstat), e2e (-reps rounds of
// the pass-through, the local and the Redis tier on the same load, every
// delivery checked, and redis-benchmark on the same server) and profile
// (the collector's CPU and allocation profiles in each mode). BENCHMARKS.md
// says what each measures and records table.md and profile.md, which it
// writes to -out.
//
//	go run ./cmd/dedupbench -bin bin/otelcol-dedup -out _bench
package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/otelcol-dedup/otelcol-dedup/internal/e2e"
	"github.com/otelcol-dedup/otelcol-dedup/internal/loadgen"
	"github.com/otelcol-dedup/otelcol-dedup/internal/otlp"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
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
	err := run(ctx, o)
	stop()
	if err != nil {
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

	table := fmt.Sprintf("`make bench` of %s, %s, on %s; %s; %s; load %s; %s records per end-to-end run, exporter compression %s.\n\n%s",
		res.Date, res.Source, res.Machine, res.Go, res.Redis, res.Load, Rate(float64(o.records)), o.compression, FormatTable(targetRows(res)))
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
	for _, job := range []struct {
		pkg, bench string
		count      int
		benchtime  string
	}{
		{".", `^BenchmarkConsumeLogs$/^cache=(empty|1M)$/^key=/^batch=1000$`, o.count, "1s"},
		// The hot path with copies traced to their source and without.
		{".", `^BenchmarkConsumeLogs$/^sources=`, o.count, "200x"},
		// A batch that meets another's pending claims: the records left for
		// a second call move out of the first call's data.
		{".", `^BenchmarkConsumeLogsRacing$`, o.count, "1s"},
		{"./internal/localcache", `^BenchmarkMemoryPerKey$`, o.count, "1s"},
		// The Redis client's own CPU: claim and commit of a batch of 1000.
		{"./internal/redistier", `^BenchmarkClientPath$`, o.count, "200x"},
		// 10^7 records in Redis for each of two windows: once is minutes.
		{"./internal/redistier", `^BenchmarkLayout$`, 1, "10000x"},
	} {
		args := []string{"test", "-run", "^$", "-bench", job.bench, "-benchmem", "-cpu", "1", "-count", fmt.Sprint(job.count), "-benchtime", job.benchtime, job.pkg}
		fmt.Fprintf(w, "$ (cd %s && go %s)\n", processorDir, strings.Join(args, " "))
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = processorDir
		cmd.Stdout, cmd.Stderr = io.MultiWriter(&raw, w), w
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go test %s: %w", job.pkg, err)
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
		if err := redis.Client().FlushAll(ctx).Err(); err != nil {
			return err
		}
		c, err := runRedisBenchmark(ctx, redis, int(o.records))
		if err != nil {
			return err
		}
		res.Ceiling = append(res.Ceiling, c)
		logf("round %d: redis-benchmark %s: %s ops/s, redis CPU %.3f µs/op", rep+1,
			strings.Join(RedisBenchmarkArgs(redis.Port(), int(o.records)), " "), Rate(c.OpsPerSecond), c.CPUPerOp*1e6)
	}
	return nil
}

// profiles runs each mode once more at each duplicate share with its CPU and
// allocation profiles written, and tables what differs.
func profiles(ctx context.Context, o options, res *results, redis *redistest.Server, logf func(string, ...any)) error {
	doc := fmt.Sprintf("CPU profiles of the collector (pprof extension, start to shutdown) under the same load: %s OTLP logs, "+
		"batches of %d, %d senders, exported over OTLP (compression %s); %s, %s. The functions whose CPU per record received "+
		"differs most from the pass-through's; the profiles are profile-<mode>-<copies>.pprof, the allocation profiles "+
		"(start to shutdown, sampled) profile-<mode>-<copies>-allocs.pprof.\n",
		Rate(float64(o.records)), batch, senders, o.compression, res.Date, res.Machine)
	for _, dup := range dupPcts {
		var tops []map[string]FuncCPU
		var records []int64
		allocated := "| bytes allocated per record received |"
		for _, mode := range Modes {
			path := filepath.Join(o.out, fmt.Sprintf("profile-%s-%d.pprof", mode, dup))
			r, err := measure(ctx, o, redis, mode, dup, path)
			if err != nil {
				return err
			}
			res.Profiles = append(res.Profiles, r)
			logf("profiled: %s", describe(r, dup))
			out, err := runPprofTop(ctx, path, "-nodecount", "1000000", "-nodefraction", "0")
			if err != nil {
				return err
			}
			top, err := ParsePprofTop(bytes.NewReader(out))
			if err != nil {
				return err
			}
			tops = append(tops, top)
			records = append(records, r.Load.Sent)
			out, err = runPprofTop(ctx, allocsPath(path), "-sample_index=alloc_space", "-nodecount", "40")
			if err != nil {
				return err
			}
			total, err := PprofTotalBytes(out)
			if err != nil {
				return err
			}
			allocated += fmt.Sprintf(" %.0f |", total/float64(r.Load.Sent))
		}
		doc += fmt.Sprintf("\n### %d%% copies\n\n%s\n%s\n| allocation profile | %s |\n|%s\n%s\n", dup,
			ProfileDiff(Modes, tops, records, 20, false), ProfileDiff(Modes, tops, records, 20, true),
			strings.Join(Modes, " | "), strings.Repeat(" --- |", len(Modes)+1), allocated)
	}
	logf("\n%s", doc)
	return os.WriteFile(filepath.Join(o.out, "profile.md"), []byte(doc), 0o644)
}

// runPprofTop runs `go tool pprof -top` with flags on the profile at path and
// writes its output beside it, as <profile>.top.txt.
func runPprofTop(ctx context.Context, path string, flags ...string) ([]byte, error) {
	args := append(append([]string{"tool", "pprof", "-top"}, flags...), path)
	out, err := exec.CommandContext(ctx, "go", args...).Output()
	if err != nil {
		return nil, fmt.Errorf("go tool pprof -top %s: %w", path, err)
	}
	return out, os.WriteFile(strings.TrimSuffix(path, ".pprof")+".top.txt", out, 0o644)
}

// allocsPath is where the allocation profile of the CPU profile at path goes.
func allocsPath(path string) string { return strings.TrimSuffix(path, ".pprof") + "-allocs.pprof" }

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

// waitForQuiet reads loadavg every poll until the 1-minute load is below 1
// or wait has passed, and returns the last reading, marked if it never was
// below 1: the table records the load the run had.
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

// The pipelines an end-to-end run compares, in the order a round runs them:
// the same binary, receiver and exporter, with no processor, dedup on its
// local tier, or dedup with a shared tier on a standalone redis-server.
const (
	ModePassThrough = "pass-through"
	ModeLocal       = "local"
	ModeRedis       = "redis"
)

var Modes = []string{ModePassThrough, ModeLocal, ModeRedis}

// CollectorConfig is the config of a mode: the exporter and dedup with
// their defaults but the exporter's compression and, in ModeRedis, the
// shared tier at redisAddr. A profile path adds the pprof extension, which
// writes the CPU profile there from start to shutdown.
func CollectorConfig(mode, sink, compression, redisAddr, profile string) map[string]any {
	dedup := map[string]any{}
	processors := []string{"dedup"}
	switch mode {
	case ModePassThrough:
		processors = []string{}
	case ModeRedis:
		dedup["redis"] = map[string]any{"endpoints": []string{redisAddr}}
	}
	cfg := e2e.Config("normal", nil, e2e.Ports{})
	service := cfg["service"].(map[string]any)
	if profile != "" {
		// The run reads the allocation profile from the endpoint before the
		// stop (e2e.Ports.Extra).
		cfg["extensions"].(map[string]any)["pprof"] = map[string]any{"endpoint": e2e.ListenExtra, "save_to_file": profile}
		service["extensions"] = []string{"health_check", "pprof"}
	}
	cfg["processors"] = map[string]any{"dedup": dedup}
	cfg["exporters"] = map[string]any{"otlp_grpc": map[string]any{
		"endpoint": sink, "tls": map[string]any{"insecure": true}, "compression": compression,
	}}
	service["pipelines"] = map[string]any{"logs": map[string]any{
		"receivers": []string{"otlp"}, "processors": processors, "exporters": []string{"otlp_grpc"},
	}}
	return cfg
}

// Run is one end-to-end run of a mode.
type Run struct {
	Mode string
	// Load is what the load tool had acknowledged; Delivered the records
	// the sink received, Distinct the identities among them, Dropped the
	// duplicates the processor counted.
	Load                         loadgen.Summary
	Delivered, Distinct, Dropped int64
	// CPUSeconds is the collector's user+system time from before the load
	// to its last record's arrival at the sink; PeakRSS its VmHWM then.
	CPUSeconds float64
	PeakRSS    int64
	// Redis is the server's CPU and commands from before the load to the
	// collector's exit (ModeRedis), and RoundTrips the processor's requests
	// to it until the last record's arrival.
	Redis      RedisCounts
	RoundTrips int64
}

// CPUPerRecord is the collector's CPU seconds per record received.
func (r Run) CPUPerRecord() float64 { return r.CPUSeconds / float64(r.Load.Sent) }

// want is the records the sink should receive: with dedup, each identity once.
func (r Run) want() int64 {
	if r.Mode == ModePassThrough {
		return r.Load.Sent
	}
	return r.Load.Unique
}

// Exact checks what was delivered against the load's ground truth: every
// record acknowledged, every identity delivered (0 lost) and, with dedup,
// each exactly once (0 leaked) and every copy counted as dropped.
func (r Run) Exact(records int64) error {
	if r.Mode != ModePassThrough && r.Dropped != r.Load.Duplicates {
		return fmt.Errorf("%s: dedup counted %d duplicates, the load sent %d", r.Mode, r.Dropped, r.Load.Duplicates)
	}
	switch {
	case r.Load.Sent != records || r.Load.Errors > 0:
		return fmt.Errorf("%s: %d of %d records acknowledged, %d failed requests (last error: %s)",
			r.Mode, r.Load.Sent, records, r.Load.Errors, r.Load.LastError)
	case r.Distinct != r.Load.Unique:
		return fmt.Errorf("%s: %d identities delivered, want %d (%d lost)", r.Mode, r.Distinct, r.Load.Unique, r.Load.Unique-r.Distinct)
	case r.Delivered != r.want():
		return fmt.Errorf("%s: %d records delivered, want %d (%d leaked)", r.Mode, r.Delivered, r.want(), r.Delivered-r.want())
	}
	return nil
}

// measure runs the load through a collector of mode (config and log in
// o.out) to a fresh sink, measures until the sink has every record it
// should, then stops the collector and checks the run with Exact.
func measure(ctx context.Context, o options, redis *redistest.Server, mode string, dupPct int, profile string) (run Run, err error) {
	defer func() {
		if err == nil {
			err = run.Exact(o.records)
		}
		if err != nil {
			err = fmt.Errorf("%s, %d%% copies: %w", mode, dupPct, err)
		}
	}()
	run.Mode = mode
	if err := redis.Client().FlushAll(ctx).Err(); err != nil {
		return run, err
	}
	sink, err := otlp.NewSink()
	if err != nil {
		return run, err
	}
	defer sink.Close()
	// The distinct event.ids are the identities delivered. OnLogs runs under
	// the sink's lock, which LogRecordCount takes before ids is read.
	ids := map[string]struct{}{}
	sink.OnLogs = func(ld plog.Logs) {
		for _, rl := range ld.ResourceLogs().All() {
			for _, sl := range rl.ScopeLogs().All() {
				for _, lr := range sl.LogRecords().All() {
					v, _ := lr.Attributes().Get("event.id")
					ids[v.Str()] = struct{}{}
				}
			}
		}
	}
	path, logPath := filepath.Join(o.out, "collector-"+mode+".yaml"), filepath.Join(o.out, "collector-"+mode+".log")
	if err := e2e.WriteConfig(path, CollectorConfig(mode, sink.GRPCEndpoint(), o.compression, redis.Addr(), profile)); err != nil {
		return run, err
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	c, err := e2e.Start(sctx, o.bin, logPath, nil, path)
	cancel()
	if err != nil {
		return run, fmt.Errorf("%w (log: %s)", err, logPath)
	}
	defer func() { _ = c.Stop(10 * time.Second) }()

	redisBefore, err := redisCounts(ctx, redis)
	if err != nil {
		return run, err
	}
	cpuBefore, _, err := usage(procfs.DefaultMountPoint, c.PID)
	if err != nil {
		return run, err
	}
	load := loadgen.Config{Endpoint: c.Ports.OTLPGRPC, Records: o.records, Duplicates: float64(dupPct) / 100, Batch: batch, Senders: senders, Seed: 1}
	if run.Load, err = loadgen.Run(ctx, load); err != nil {
		return run, err
	}
	for deadline := time.Now().Add(time.Minute); int64(sink.LogRecordCount()) < run.want() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	cpuAfter, peak, err := usage(procfs.DefaultMountPoint, c.PID)
	if err != nil {
		return run, err
	}
	run.CPUSeconds, run.PeakRSS = cpuAfter-cpuBefore, peak
	sc, err := e2e.ScrapeMetrics(ctx, c.Ports.MetricsURL())
	if err != nil {
		return run, err
	}
	run.Dropped = int64(sc.Sum("otelcol_processor_dedup_records", e2e.Labels{"outcome": "duplicate"}))
	run.RoundTrips = int64(sc.Sum("otelcol_processor_dedup_redis_requests", nil))
	if profile != "" {
		if err := saveAllocs(ctx, c.Ports.Extra, allocsPath(profile)); err != nil {
			return run, err
		}
	}
	if err := c.Stop(30 * time.Second); err != nil {
		return run, fmt.Errorf("stop: %w (log: %s)", err, logPath)
	}
	run.Delivered = int64(sink.LogRecordCount())
	run.Distinct = int64(len(ids))
	// After the stop: the processor sends a batch's commit after its
	// request is answered, and flushes the last ones on shutdown.
	if mode == ModeRedis {
		after, err := redisCounts(ctx, redis)
		if err != nil {
			return run, err
		}
		run.Redis = RedisCounts{CPUSeconds: after.CPUSeconds - redisBefore.CPUSeconds, Calls: after.Calls - redisBefore.Calls}
	}
	return run, nil
}

// saveAllocs writes the allocation profile of the collector whose pprof
// extension listens on addr to path.
func saveAllocs(ctx context.Context, addr, path string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/pprof/allocs", http.NoBody)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s", req.URL, resp.Status)
	}
	if err != nil {
		return err
	}
	return os.WriteFile(path, body, 0o644)
}

// usage is a process's user+system CPU seconds so far (all its threads, not
// its children) and its peak resident set (VmHWM) in bytes.
func usage(root string, pid int) (cpu float64, peakRSS int64, err error) {
	fs, err := procfs.NewFS(root)
	if err != nil {
		return 0, 0, err
	}
	p, err := fs.Proc(pid)
	if err != nil {
		return 0, 0, err
	}
	st, err := p.Stat()
	if err != nil {
		return 0, 0, err
	}
	status, err := p.NewStatus()
	if err != nil || status.VmHWM == 0 {
		return 0, 0, fmt.Errorf("/proc/%d/status: no VmHWM (%v)", pid, err)
	}
	return st.CPUTime(), int64(status.VmHWM), nil
}

// harness runs redistest's Redis outside a test: it is the testkit.TB the
// harness asks for, and a failure stops what it started and ends the run.
type harness struct{ cleanups []func() }

func (h *harness) Helper()                   {}
func (h *harness) Cleanup(f func())          { h.cleanups = append(h.cleanups, f) }
func (h *harness) Errorf(f string, a ...any) { fmt.Fprintf(os.Stderr, "dedupbench: "+f+"\n", a...) }

func (h *harness) Fatalf(f string, a ...any) {
	h.Errorf(f, a...)
	h.close()
	os.Exit(1)
}

func (h *harness) TempDir() string {
	dir, err := os.MkdirTemp("", "dedupbench-redis-")
	if err != nil {
		h.Fatalf("%v", err)
	}
	h.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func (h *harness) close() {
	for i := len(h.cleanups) - 1; i >= 0; i-- {
		h.cleanups[i]()
	}
	h.cleanups = nil
}

// RedisCounts is the server's side of a run, from INFO: its CPU time and
// the commands it ran (scripts and the commands they call both counted).
type RedisCounts struct {
	CPUSeconds float64
	Calls      int64
}

func redisCounts(ctx context.Context, s *redistest.Server) (RedisCounts, error) {
	txt, err := s.Client().Info(ctx, "everything").Result()
	if err != nil {
		return RedisCounts{}, err
	}
	return ParseRedisCounts(txt)
}

// ParseRedisCounts reads INFO's used_cpu_user, used_cpu_sys and the calls=
// of every cmdstat_ line (cmdstat_set:calls=12,usec=34,...).
func ParseRedisCounts(info string) (RedisCounts, error) {
	var c RedisCounts
	cpu := regexp.MustCompile(`(?m)^used_cpu_(?:user|sys):([0-9.]+)\r?$`).FindAllStringSubmatch(info, -1)
	cmds := regexp.MustCompile(`(?m)^cmdstat_[^:]*:(?:calls=([0-9]+),)?`).FindAllStringSubmatch(info, -1)
	if len(cpu) != 2 {
		return c, errors.New("INFO: want used_cpu_user and used_cpu_sys")
	}
	for _, m := range cpu {
		f, _ := strconv.ParseFloat(m[1], 64)
		c.CPUSeconds += f
	}
	for _, m := range cmds {
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil {
			return c, fmt.Errorf("INFO %s: want calls= first", m[0])
		}
		c.Calls += n
	}
	return c, nil
}

// redisVersion is "Redis <version>" of the redis-server on the PATH.
func redisVersion(ctx context.Context) string {
	out := output(ctx, "redis-server", "--version")
	if m := regexp.MustCompile(`\bv=(\S+)`).FindStringSubmatch(out); m != nil {
		return "Redis " + m[1]
	}
	return out
}

// RedisBenchmarkArgs are the arguments of the baseline: n pipelined
// `SET key v NX PX 600000` with random keys, from the load's senders as
// connections, a batch of commands per round trip.
func RedisBenchmarkArgs(port, n int) []string {
	return []string{
		"-h", "127.0.0.1", "-p", strconv.Itoa(port),
		"-c", strconv.Itoa(senders), "-P", strconv.Itoa(batch), "-n", strconv.Itoa(n),
		"-r", "1000000000", "--csv",
		"SET", "otelcol-dedup:bench:__rand_int__", "AAAAAAAAAAAAAAAA", "NX", "PX", "600000",
	}
}

// ParseRedisBenchmarkCSV returns the requests per second of the last test
// of redis-benchmark --csv output (or its error): a header line, then one
// line per test, `"SET ...","454545.45","0.563",...`.
func ParseRedisBenchmarkCSV(out []byte, err error) (float64, error) {
	if err != nil {
		return 0, fmt.Errorf("redis-benchmark: %w", err)
	}
	recs, err := csv.NewReader(bytes.NewReader(out)).ReadAll()
	if err != nil || len(recs) < 2 || len(recs[0]) < 2 || recs[0][1] != "rps" || len(recs[len(recs)-1]) < 2 {
		return 0, fmt.Errorf(`redis-benchmark csv: want a "test","rps",... header and a result line (%v)`, err)
	}
	return strconv.ParseFloat(recs[len(recs)-1][1], 64)
}

// Ceiling is one redis-benchmark run: what the server alone does with the
// cheapest command a dedup claim could be, and its CPU seconds per command.
type Ceiling struct{ OpsPerSecond, CPUPerOp float64 }

// runRedisBenchmark runs redis-benchmark against s, with the server's CPU
// time around it.
func runRedisBenchmark(ctx context.Context, s *redistest.Server, n int) (Ceiling, error) {
	before, err := redisCounts(ctx, s)
	if err != nil {
		return Ceiling{}, err
	}
	out, err := exec.CommandContext(ctx, "redis-benchmark", RedisBenchmarkArgs(s.Port(), n)...).Output()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		err = fmt.Errorf("%w: %s", err, bytes.TrimSpace(ee.Stderr))
	}
	rps, err := ParseRedisBenchmarkCSV(out, err)
	if err != nil {
		return Ceiling{}, err
	}
	after, err := redisCounts(ctx, s)
	return Ceiling{OpsPerSecond: rps, CPUPerOp: (after.CPUSeconds - before.CPUSeconds) / float64(n)}, err
}
