// Command dedupbench is `make bench`: it measures the performance targets of
// the dedup processor and the otelcol-dedup distribution in one run, and
// prints one table of the figures against their targets, plus the Go
// benchmarks summarized by benchstat.
//
//	go run ./cmd/dedupbench -bin bin/otelcol-dedup -out docs/bench -raw _bench
//
// A run, in order (each phase logs the 1-minute load average it starts
// under):
//
//  1. compiles the test binaries of the processor and its local cache, each
//     from inside its own module, then waits (bounded by -load-wait) for the
//     1-minute load average to drop below -load-max, since the machine is
//     shared;
//  2. runs BenchmarkConsumeLogs (batch 1000, 30% duplicates, cache empty and
//     full with 10^6 keys, content and event.id keys), BenchmarkDecide (key
//     derivation alone) and the local cache's BenchmarkClaim,
//     BenchmarkClaimBatch, BenchmarkClaimBatchSize, BenchmarkMemoryPerKey,
//     BenchmarkMemoryLatency and BenchmarkFirstTouch, and the snapshot's
//     BenchmarkSave and BenchmarkRestore, -count times on one core (-cpu 1),
//     and summarizes them with benchstat;
//  3. sweeps the processor's throughput on one core over duplicate ratios
//     and batch sizes (sweep.md, and every trial in sweep.csv);
//  4. starts a redis-server and alternates redis-benchmark's pipelined
//     SET NX PX with the processor's shared tier (claim and commit) against
//     it, then counts the tier's round trips per batch through a counting
//     proxy;
//  5. runs the distribution with a pass-through, a dedup and a dedup+Redis
//     logs pipeline (nop exporter) under the same dedupload load, reading the
//     collector's CPU time and peak RSS from /proc;
//  6. runs fleets of the distribution on a standalone redis-server and on a
//     3-master Redis Cluster (fleet.md): copies racing across two
//     collectors (the same request sent to both at once, requests of 1000
//     and 8192 records), 1, 2 and 4 collectors under loadgen's stream, the
//     latency a copy pays waiting for its original's export, and a model of
//     50 collectors on 30 masters fitted on the measured fleets;
//  7. profiles the processor's hot paths (pprof -top): BenchmarkConsumeLogs,
//     OTLP decode + dedup in-process, and the processor with the shared tier;
//  8. prints the targets table. The summary kept in git (table.md,
//     benchstat.txt, sweep.md, fleet.md) goes to -out; the report,
//     results.json, the raw benchmark output, the sweep's trials and the
//     profiles to -raw, which git ignores.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/otelcol-dedup/otelcol-dedup/cmd/dedupload/loadgen"
	"github.com/otelcol-dedup/otelcol-dedup/internal/bench"
)

// The performance targets (BENCHMARKS.md#the-targets).
const (
	targetNsPerRecord     = 200.0 // target 1: <= 200 ns per record on one core
	targetAllocsPerRecord = 0.01  // target 1: 0 per record amortized (< 0.01)
	targetBytesPerKey     = 64.0  // target 2
	targetTierRatio       = 0.80  // target 3: tier records/s vs redis-benchmark ops/s
	targetClaimRoundTrips = 1     // target 3: per batch on the claim path
	targetCPURatio        = 1.15  // target 4: dedup vs pass-through CPU per record
	targetRedisCPURatio   = 1.10  // target 5: dedup+redis vs pass-through collector CPU per record
	targetServerRatio     = 1.20  // target 5: Redis CPU per key, the tier vs SET NX PX
	targetRedisThroughput = 0.90  // target 5: dedup+redis vs pass-through records/s
	e2eSenders            = 4     // the end-to-end load's synchronous senders
	consumeLogsBench      = `^BenchmarkConsumeLogs$/^cache=(empty|1M)$/^key=/^batch=1000$/^dup=30%$`
	decideBench           = `^BenchmarkDecide$`
	localcacheBench       = `^(BenchmarkClaim|BenchmarkClaimBatch|BenchmarkClaimBatchSize|BenchmarkMemoryPerKey|BenchmarkMemoryLatency|BenchmarkFirstTouch)$`
	snapshotBench         = `^(BenchmarkSave|BenchmarkRestore)$`
	profileBench          = `^BenchmarkConsumeLogs$/^cache=1M$/^key=content$/^batch=1000$/^dup=30%$`
	consumeLogsName       = "BenchmarkConsumeLogs/cache=%s/key=%s/batch=1000/dup=30%%"
	// The processor's ConsumeLogs, not the benchmark function around it
	// (whose batch copies are outside the timer but not outside a profile).
	consumeLogsFocus       = `logsProcessor\)\.ConsumeLogs$`
	tierBatch, tierClients = 1000, 4
)

// allPhases are the phases of a run, in the order they run.
var allPhases = []string{"gotest", "sweep", "redis", "e2e", "fleet", "profile"}

// The packages whose Go benchmarks a run compiles, each built from inside
// its own module (the processor is a module of its own).
var (
	processorPkg  = bench.GoPackage{Module: "processor/dedupprocessor", Dir: "."}
	localcachePkg = bench.GoPackage{Module: "processor/dedupprocessor", Dir: "internal/localcache"}
	snapshotPkg   = bench.GoPackage{Module: "processor/dedupprocessor", Dir: "internal/snapshot"}
)

// goBenchJob is one `go test -bench` run of the gotest phase.
type goBenchJob struct {
	pkg     bench.GoPackage
	pattern string
}

// goBenchJobs are the gotest phase's runs, in order.
var goBenchJobs = []goBenchJob{
	{processorPkg, consumeLogsBench},
	{processorPkg, decideBench},
	{localcachePkg, localcacheBench},
	{snapshotPkg, snapshotBench},
}

type options struct {
	bin, out, raw                       string
	count, reps, fleetReps, waitTrials  int
	loadMax, e2eRate                    float64
	loadWait                            time.Duration
	records, sweepRecords, fleetRecords int64
	phases                              string
	redisServer, redisBench, redisCLI   string
}

func main() {
	var o options
	flag.StringVar(&o.bin, "bin", "bin/otelcol-dedup", "the otelcol-dedup binary (with the nop exporter: make build)")
	flag.StringVar(&o.out, "out", "docs/bench", "directory for the summary kept in git: table.md, benchstat.txt, sweep.md")
	flag.StringVar(&o.raw, "raw", "_bench", "directory for everything else the run writes (report, results.json, raw benchmark output, sweep CSV, profiles)")
	flag.IntVar(&o.count, "count", 6, "repetitions of each Go benchmark (go test -count)")
	flag.IntVar(&o.reps, "reps", 7, "repetitions of each Redis and end-to-end measurement (medians are reported)")
	flag.Float64Var(&o.loadMax, "load-max", 1.0, "wait for the 1-minute load average to drop below this before measuring")
	flag.DurationVar(&o.loadWait, "load-wait", 10*time.Minute, "the longest wait for -load-max; then measure anyway and say so")
	flag.Int64Var(&o.records, "records", 1_000_000, "records of each Redis-tier and end-to-end run")
	flag.Float64Var(&o.e2eRate, "e2e-rate", 0, "records/s the end-to-end load is paced at (loadgen Rate); 0: as fast as the collector takes them")
	flag.Int64Var(&o.sweepRecords, "sweep-records", 1_000_000, "records per point of the sweep")
	flag.Int64Var(&o.fleetRecords, "fleet-records", 200_000, "distinct records of each racing-copies run, records of each fleet-scaling run")
	flag.IntVar(&o.fleetReps, "fleet-reps", 3, "racing-copies runs per topology and request size (the Cluster / standalone ratio is the median of the pairs)")
	flag.IntVar(&o.waitTrials, "wait-trials", 15, "trials of each case of the wait-cost measurement")
	flag.StringVar(&o.phases, "phases", strings.Join(allPhases, ","), "phases to run (comma-separated): "+strings.Join(allPhases, ", "))
	flag.StringVar(&o.redisServer, "redis-server", "redis-server", "redis-server binary")
	flag.StringVar(&o.redisBench, "redis-benchmark", "redis-benchmark", "redis-benchmark binary")
	flag.StringVar(&o.redisCLI, "redis-cli", "redis-cli", "redis-cli binary (creates the fleet phase's Redis Cluster)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "dedupbench:", err)
		os.Exit(1)
	}
}

// results is everything a run measured; results.json is its JSON form.
type results struct {
	Date      string
	Machine   bench.Machine
	Go        string
	Redis     string
	Source    string            // the commit measured and whether the tree differs
	Load      map[string]string // phase -> 1-minute load average at its start
	Busy      map[string]string // phase -> CPU busy over the 2 s before it
	Others    map[string]string // phase -> CPU other processes used during it
	LoadQuiet bool              // the load dropped below -load-max before measuring
	Waited    string

	Commands []string

	ConsumeLogs   map[string]consumeLogs `json:",omitempty"`
	BytesPerKey   float64                `json:",omitempty"`
	Sweep         []bench.SweepPoint     `json:",omitempty"`
	Baseline      []bench.BaselineResult `json:",omitempty"`
	Tier          []bench.TierResult     `json:",omitempty"`
	TierLocal     []bench.TierResult     `json:",omitempty"` // Tier's driver with the local tier only
	RoundTrips    []bench.TripCount      `json:",omitempty"`
	Collector     []bench.CollectorRun   `json:",omitempty"`
	Race          []bench.RaceResult     `json:",omitempty"`
	Scale         []bench.ScaleResult    `json:",omitempty"`
	WaitCost      *bench.WaitCostResult  `json:",omitempty"`
	ClusterTags   int                    `json:",omitempty"`
	Path          *bench.PathResult      `json:",omitempty"`
	PhaseErrors   map[string]string      `json:",omitempty"`
	PhaseSeconds  map[string]float64
	TotalSeconds  float64
	phasesEnabled map[string]bool
}

type consumeLogs struct {
	NsPerRecord     float64
	AllocsPerBatch  float64
	RecordsPerSec   float64
	Runs            int
	BytesPerBatchOp float64
}

func run(ctx context.Context, o options) error {
	start := time.Now()
	for _, dir := range []string{o.out, o.raw} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	tmp, err := os.MkdirTemp("", "dedupbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	reportFile, err := os.Create(filepath.Join(o.raw, "report.txt"))
	if err != nil {
		return err
	}
	defer reportFile.Close()
	w := io.MultiWriter(os.Stdout, reportFile)
	logf := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }

	res := &results{
		Date:          time.Now().UTC().Format(time.RFC3339),
		Go:            runtime.Version(),
		Load:          map[string]string{},
		Busy:          map[string]string{},
		Others:        map[string]string{},
		PhaseErrors:   map[string]string{},
		PhaseSeconds:  map[string]float64{},
		phasesEnabled: map[string]bool{},
	}
	for _, p := range strings.Split(o.phases, ",") {
		res.phasesEnabled[strings.TrimSpace(p)] = true
	}
	if res.Machine, err = bench.ReadMachine(); err != nil {
		return err
	}
	res.Redis = redisVersion(o.redisServer)
	res.Source = sourceState(ctx)
	logf("dedupbench: %s; %s, %d cores, %.1f GiB; %s; %s", res.Date, res.Machine.CPUModel, res.Machine.Cores,
		float64(res.Machine.MemBytes)/(1<<30), res.Go, res.Redis)

	// 1. Compile first, so the load wait is not followed by compiling.
	bins := map[bench.GoPackage]string{}
	if res.phasesEnabled["gotest"] || res.phasesEnabled["profile"] {
		for _, job := range append(goBenchJobs, goBenchJob{pkg: processorPkg}) {
			if _, done := bins[job.pkg]; done {
				continue
			}
			bin := filepath.Join(tmp, filepath.Base(job.pkg.Path())+".test")
			args := job.pkg.CompileTestArgs(bin)
			logf("$ (cd %s && go %s)", job.pkg.Module, strings.Join(args, " "))
			cmd := exec.CommandContext(ctx, "go", args...)
			cmd.Dir = job.pkg.Module
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("go test -c %s: %w\n%s", job.pkg.Path(), err, out)
			}
			bins[job.pkg] = bin
		}
	}
	waitStart := time.Now()
	load, quiet, err := bench.WaitForQuiet(o.loadMax, o.loadWait, 15*time.Second, bench.ReadLoadAvg, time.Sleep,
		func(l bench.LoadAvg, waited time.Duration) {
			logf("load %s (1-min >= %.2f): waiting (%s of at most %s)", l, o.loadMax, waited.Round(time.Second), o.loadWait)
		})
	if err != nil {
		return err
	}
	res.LoadQuiet = quiet
	res.Waited = time.Since(waitStart).Round(time.Second).String()
	if quiet {
		logf("load %s: below %.2f after %s; measuring", load, o.loadMax, res.Waited)
	} else {
		logf("load %s: still >= %.2f after %s; measuring anyway (figures may be low)", load, o.loadMax, res.Waited)
	}

	redisPID := 0 // the driver's redis-server, once started
	phase := func(name string, fn func() error) {
		if !res.phasesEnabled[name] || ctx.Err() != nil {
			return
		}
		l, _ := bench.ReadLoadAvg()
		res.Load[name] = fmt.Sprintf("%.2f", l.One)
		// What the rest of the machine does while this run is idle: the
		// load average lags by a minute, this does not.
		busy, _ := bench.SampleBusy(2 * time.Second)
		res.Busy[name] = fmt.Sprintf("%.0f%%", 100*busy)
		logf("\n== %s (load %s; CPU busy %.0f%% over the 2 s before it, this run idle)", name, l, 100*busy)
		t := time.Now()
		others := othersCPU(redisPID)
		if err := fn(); err != nil {
			res.PhaseErrors[name] = err.Error()
			logf("%s FAILED: %v", name, err)
		}
		res.PhaseSeconds[name] = time.Since(t).Seconds()
		o := others()
		res.Others[name] = fmt.Sprintf("%.0f%%", 100*o)
		logf("== %s done in %s; other processes used %.0f%% of the machine's CPU meanwhile", name, time.Since(t).Round(time.Second), 100*o)
	}

	var benchstatOut string
	phase("gotest", func() error {
		var raw bytes.Buffer
		for _, job := range goBenchJobs {
			args := []string{"-test.run", "^$", "-test.bench", job.pattern, "-test.benchmem", "-test.cpu", "1",
				"-test.count", fmt.Sprint(o.count)}
			res.Commands = append(res.Commands, fmt.Sprintf("(cd %s && go test -run '^$' -bench '%s' -benchmem -cpu 1 -count %d %s)",
				job.pkg.Module, job.pattern, o.count, job.pkg.Arg()))
			logf("$ %s", res.Commands[len(res.Commands)-1])
			cmd := exec.CommandContext(ctx, bins[job.pkg], args...)
			cmd.Dir = job.pkg.Path()
			cmd.Stdout = io.MultiWriter(&raw, &resultLines{w: w})
			cmd.Stderr = w
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("%s: %w", job.pkg.Path(), err)
			}
		}
		goTestPath := filepath.Join(o.raw, "gotest.txt")
		if err := os.WriteFile(goTestPath, raw.Bytes(), 0o644); err != nil {
			return err
		}
		rs, err := bench.ParseGoBench(bytes.NewReader(raw.Bytes()))
		if err != nil {
			return err
		}
		res.ConsumeLogs = map[string]consumeLogs{}
		for _, cache := range []string{"empty", "1M"} {
			for _, key := range []string{bench.KeyContent, bench.KeyEventID} {
				name := fmt.Sprintf(consumeLogsName, cache, key)
				ns, n, ok := bench.MedianOf(rs, name, "ns/record")
				if !ok {
					return fmt.Errorf("no ns/record for %s", name)
				}
				allocs, _, _ := bench.MedianOf(rs, name, "allocs/op")
				rps, _, _ := bench.MedianOf(rs, name, "records/s")
				bop, _, _ := bench.MedianOf(rs, name, "B/op")
				res.ConsumeLogs[cache+"/"+key] = consumeLogs{NsPerRecord: ns, AllocsPerBatch: allocs, RecordsPerSec: rps, Runs: n, BytesPerBatchOp: bop}
			}
		}
		bpk, _, ok := bench.MedianOf(rs, "BenchmarkMemoryPerKey", "bytes/key")
		if !ok {
			return errors.New("no bytes/key from BenchmarkMemoryPerKey")
		}
		res.BytesPerKey = bpk
		// The label names the column after the file, wherever -raw put it.
		res.Commands = append(res.Commands, "go tool benchstat gotest.txt="+goTestPath)
		// Only benchstat's output goes in the file: the go command writes
		// its module downloads to stderr on a cold module cache.
		cmd := exec.CommandContext(ctx, "go", "tool", "benchstat", "gotest.txt="+goTestPath)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("benchstat: %w\n%s%s", err, out, stderr.Bytes())
		}
		benchstatOut = string(out)
		return os.WriteFile(filepath.Join(o.out, "benchstat.txt"), out, 0o644)
	})

	phase("sweep", func() error {
		prev := runtime.GOMAXPROCS(1)
		defer runtime.GOMAXPROCS(prev)
		cfg := bench.SweepConfig{
			Keys:    []string{bench.KeyContent, bench.KeyEventID},
			Batches: []int{10, 100, 1000, 10000},
			DupPcts: []int{0, 10, 30, 50, 90},
			Records: o.sweepRecords,
			Trials:  3,
			Warm:    1_100_000,
		}
		res.Commands = append(res.Commands, fmt.Sprintf("in-process sweep (GOMAXPROCS=1): keys %v, batches %v, duplicates %v%%, %d records per point in %d trials (median), cache 10^6 keys filled first",
			cfg.Keys, cfg.Batches, cfg.DupPcts, cfg.Records, cfg.Trials))
		pts, err := bench.Sweep(ctx, cfg, func(p bench.SweepPoint) {
			logf("sweep key=%-8s batch=%-5d dup=%2d%%: %7.1f ns/record  %s records/s (trials %.0f ns)", p.Key, p.Batch, p.DupPct, p.NsPerRecord(), bench.Rate(p.RecordsPerSecond()), p.TrialNs)
		})
		res.Sweep = pts
		if err != nil {
			return err
		}
		var csvBuf bytes.Buffer
		if err := bench.WriteSweepCSV(&csvBuf, pts); err != nil {
			return err
		}
		csvPath := filepath.Join(o.raw, "sweep.csv")
		if err := os.WriteFile(csvPath, csvBuf.Bytes(), 0o644); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(o.out, "sweep.md"), []byte(sweepDoc(res, cfg, pts)), 0o644)
	})

	var redisSrv *bench.RedisServer
	if res.phasesEnabled["redis"] || res.phasesEnabled["e2e"] {
		redisSrv, err = bench.StartRedis(o.redisServer)
		if err != nil {
			return err
		}
		defer redisSrv.Stop()
		logf("redis-server %s on %s (pid %d)", res.Redis, redisSrv.Addr, redisSrv.PID())
		redisPID = redisSrv.PID()
	}

	phase("redis", func() error {
		args := bench.RedisBenchmarkArgs(redisSrv.Port, tierClients, tierBatch, int(o.records))
		res.Commands = append(res.Commands, o.redisBench+" "+shellJoin(args),
			fmt.Sprintf("in-process: %d goroutines x batches of %d unique records through the dedup processor (key event.id) with the shared tier on the same server, %d records", tierClients, tierBatch, o.records))
		for rep := range o.reps {
			if err := redisSrv.FlushAll(ctx); err != nil {
				return err
			}
			b, err := bench.RunRedisBenchmark(ctx, o.redisBench, redisSrv, tierClients, tierBatch, int(o.records))
			if err != nil {
				return err
			}
			res.Baseline = append(res.Baseline, b)
			logf("rep %d: redis-benchmark SET NX PX -c %d -P %d: %s ops/s; server commands %v, their server time µs %v; redis CPU %.0f ns/op",
				rep+1, tierClients, tierBatch, bench.Rate(b.OpsPerSecond), b.Server.Calls, b.Server.Usec, b.Server.CPUSeconds*1e9/float64(o.records))
			if err := redisSrv.FlushAll(ctx); err != nil {
				return err
			}
			t, err := bench.RunTier(ctx, redisSrv, o.records, tierBatch, tierClients)
			if err != nil {
				return err
			}
			res.Tier = append(res.Tier, t)
			logf("rep %d: dedup shared tier: %s unique records/s, delivered %d of %d; tier calls %v; server commands %v, their server time µs %v; redis CPU %.0f ns/record, client (this process) CPU %.0f ns/record",
				rep+1, bench.Rate(t.RecordsPerSecond()), t.Delivered, t.Records, t.Requests, t.Server.Calls, t.Server.Usec,
				t.Server.CPUSeconds*1e9/float64(t.Records), t.ClientCPUSeconds*1e9/float64(t.Records))
			if t.Delivered != t.Records {
				return fmt.Errorf("the tier run delivered %d of %d unique records", t.Delivered, t.Records)
			}
			// The same driver with the local tier only: what the client
			// side costs without the tier.
			l, err := bench.RunTier(ctx, nil, o.records, tierBatch, tierClients)
			if err != nil {
				return err
			}
			res.TierLocal = append(res.TierLocal, l)
			logf("rep %d: the same, local tier only: %s unique records/s, delivered %d of %d; CPU %.0f ns/record",
				rep+1, bench.Rate(l.RecordsPerSecond()), l.Delivered, l.Records, l.ClientCPUSeconds*1e9/float64(l.Records))
			if l.Delivered != l.Records {
				return fmt.Errorf("the local tier run delivered %d of %d unique records", l.Delivered, l.Records)
			}
		}
		if err := redisSrv.FlushAll(ctx); err != nil {
			return err
		}
		trips, err := bench.CountRoundTrips(ctx, redisSrv, 50, tierBatch)
		res.RoundTrips = trips
		if err != nil {
			return err
		}
		logf("round trips through a counting proxy, 50 batches of %d: first batch claim %d commit %d; then claim max %d, commit max %d",
			tierBatch, trips[0].Claim, trips[0].Commit, maxTrips(trips[1:], true), maxTrips(trips[1:], false))
		return nil
	})

	phase("e2e", func() error {
		load := loadgen.Config{Records: o.records, Duplicates: 0.3, Batch: 1000, Senders: e2eSenders, Key: loadgen.KeyContent, Seed: 1, Rate: o.e2eRate}
		res.Commands = append(res.Commands, fmt.Sprintf("%s --config <mode>.yaml, fed by loadgen.Run{Records: %d, Duplicates: 0.3, Batch: 1000, Senders: 4, Key: content, OTLP/gRPC}; modes %s, %s, %s interleaved, %d reps",
			o.bin, o.records, bench.ModePassThrough, bench.ModeDedup, bench.ModeDedupRedis, o.reps))
		dir := filepath.Join(tmp, "e2e")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for rep := range o.reps {
			for _, mode := range []string{bench.ModePassThrough, bench.ModeDedup, bench.ModeDedupRedis} {
				if mode == bench.ModeDedupRedis {
					if err := redisSrv.FlushAll(ctx); err != nil {
						return err
					}
				}
				r, err := bench.RunCollector(ctx, o.bin, dir, mode, redisSrv, load)
				if err != nil {
					return err
				}
				res.Collector = append(res.Collector, r)
				extra := ""
				if mode != bench.ModePassThrough {
					extra = fmt.Sprintf(", dropped %d duplicates (loadgen: %d)", r.Dropped, r.Load.Duplicates)
				}
				if mode == bench.ModeDedupRedis {
					extra += fmt.Sprintf(", redis requests %v, redis CPU %.2f µs/record", r.RedisRequests, r.RedisCPUSeconds*1e6/float64(r.Load.Sent))
				}
				logf("rep %d %-12s: %d records in %.2fs (%s/s), collector CPU %.2fs = %.3f µs/record, %d GC cycles, %d context switches, peak RSS %s%s",
					rep+1, mode, r.Load.Sent, r.Load.Seconds, bench.Rate(r.Load.RecordsPerSecond), r.CPUSeconds,
					r.CPUPerRecord()*1e6, r.GCCycles, r.ContextSwitches, bench.MiB(r.PeakRSS), extra)
				if mode != bench.ModePassThrough && r.Dropped != r.Load.Duplicates {
					return fmt.Errorf("%s dropped %d duplicates, loadgen sent %d", mode, r.Dropped, r.Load.Duplicates)
				}
			}
		}
		return nil
	})

	phase("fleet", func() error { return runFleetPhase(ctx, o, res, logf, tmp) })

	phase("profile", func() error {
		// a) the processor benchmark's hot path (ConsumeLogs only; the
		//    benchmark's copies are outside it).
		prof := filepath.Join(tmp, "consumelogs.pprof")
		args := []string{"-test.run", "^$", "-test.bench", profileBench, "-test.cpu", "1", "-test.benchtime", "5000x",
			"-test.cpuprofile", prof}
		cmd := exec.CommandContext(ctx, bins[processorPkg], args...)
		cmd.Dir = processorPkg.Path()
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("profile run: %w\n%s", err, out)
		}
		top, err := pprofTop(ctx, bins[processorPkg], prof, consumeLogsFocus)
		if err != nil {
			return err
		}
		res.Commands = append(res.Commands, fmt.Sprintf("(cd %s && go test -run '^$' -bench '%s' -cpu 1 -benchtime 5000x -cpuprofile consumelogs.pprof %s) && go tool pprof -top -nodecount 25 -focus '%s' -relative_percentages consumelogs.pprof", processorPkg.Module, profileBench, processorPkg.Arg(), consumeLogsFocus))
		if err := os.WriteFile(filepath.Join(o.raw, "profile-consumelogs.txt"), []byte(top), 0o644); err != nil {
			return err
		}
		logf("profile of BenchmarkConsumeLogs/cache=1M/key=content (ConsumeLogs only):\n%s", top)

		// b) the collector's path in-process: decode + dedup, one core.
		exe, _ := os.Executable()
		if err := func() error {
			prev := runtime.GOMAXPROCS(1)
			defer runtime.GOMAXPROCS(prev)
			pathProf := filepath.Join(tmp, "path.pprof")
			f, err := os.Create(pathProf)
			if err != nil {
				return err
			}
			pr, err := bench.RunPath(ctx, 200_000, 5, f)
			f.Close()
			if err != nil {
				return err
			}
			res.Path = &pr
			logf("in-process, one core, loadgen's stream (30%% duplicates, batches of 1000), CPU time: OTLP decode %.0f ns/record, decode + dedup %.0f ns/record (x%.2f)",
				pr.DecodeNsPerRecord, pr.DedupNsPerRecord, pr.DedupNsPerRecord/pr.DecodeNsPerRecord)
			top, err := pprofTop(ctx, exe, pathProf, "")
			if err != nil {
				return err
			}
			res.Commands = append(res.Commands, "in-process OTLP decode + dedup (GOMAXPROCS=1, loadgen's stream): go tool pprof -top -nodecount 25 path.pprof")
			if err := os.WriteFile(filepath.Join(o.raw, "profile-path.txt"), []byte(top), 0o644); err != nil {
				return err
			}
			logf("profile of OTLP decode + dedup, in-process:\n%s", top)
			return nil
		}(); err != nil {
			return err
		}

		// c) the shared tier's client side: the processor with Redis, as in
		//    the redis phase (4 goroutines, batches of 1000 unique records).
		if redisSrv == nil {
			return nil
		}
		if err := redisSrv.FlushAll(ctx); err != nil {
			return err
		}
		tierProf := filepath.Join(tmp, "tier.pprof")
		f, err := os.Create(tierProf)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return err
		}
		_, err = bench.RunTier(ctx, redisSrv, o.records, tierBatch, tierClients)
		pprof.StopCPUProfile()
		f.Close()
		if err != nil {
			return err
		}
		top, err = pprofTop(ctx, exe, tierProf, consumeLogsFocus)
		if err != nil {
			return err
		}
		res.Commands = append(res.Commands, fmt.Sprintf("in-process shared-tier run (4 goroutines, %d unique records): go tool pprof -top -nodecount 25 -focus '%s' -relative_percentages tier.pprof", o.records, consumeLogsFocus))
		if err := os.WriteFile(filepath.Join(o.raw, "profile-tier.txt"), []byte(top), 0o644); err != nil {
			return err
		}
		logf("profile of the processor with the shared tier (client side), in-process:\n%s", top)
		return nil
	})

	res.TotalSeconds = time.Since(start).Seconds()
	rows := targetRows(res, o)
	var head strings.Builder
	fmt.Fprintf(&head, "otelcol-dedup `make bench`, %s (%s)\n", res.Date, time.Since(start).Round(time.Second))
	fmt.Fprintf(&head, "machine: %s, %d cores, %.1f GiB RAM; %s; %s; source: %s\n", res.Machine.CPUModel, res.Machine.Cores,
		float64(res.Machine.MemBytes)/(1<<30), res.Go, res.Redis, res.Source)
	fmt.Fprintf(&head, "1-minute load: %s at the start after waiting %s (below %.2f: %v); per phase: load / CPU busy in the 2 s before it / CPU other processes used during it: %s\n",
		fmt.Sprintf("%.2f", load.One), res.Waited, o.loadMax, res.LoadQuiet, phaseLoads(res))
	table := head.String() + "\n" + bench.FormatTable(rows) + "\n" + bench.Summary(rows) + "\n"
	logf("\n%s", table)
	if benchstatOut != "" {
		logf("Go benchmarks (benchstat, -count %d, -cpu 1):\n\n%s", o.count, benchstatOut)
	}
	for name, e := range res.PhaseErrors {
		logf("phase %s failed: %s", name, e)
	}
	if err := os.WriteFile(filepath.Join(o.out, "table.md"), []byte(table), 0o644); err != nil {
		return err
	}
	// A number JSON cannot hold costs the raw file, not the summaries
	// written above.
	if js, err := json.MarshalIndent(res, "", "  "); err != nil {
		logf("results.json not written: %v", err)
	} else if err := os.WriteFile(filepath.Join(o.raw, "results.json"), js, 0o644); err != nil {
		return err
	}
	logf("summary in %s (table.md, benchstat.txt, sweep.md, fleet.md); the rest in %s (report.txt, results.json, gotest.txt, sweep.csv, profile-*.txt)", o.out, o.raw)
	if len(res.PhaseErrors) > 0 {
		return fmt.Errorf("%d phase(s) failed", len(res.PhaseErrors))
	}
	return ctx.Err()
}

// targetRows builds the table from what was measured; a phase that did not
// run or failed leaves its rows NOT MEASURED.
func targetRows(res *results, o options) []bench.Row {
	var rows []bench.Row
	missing := func(t, fig, goal, phase string) bench.Row {
		why := "phase " + phase + " not run"
		if e, ok := res.PhaseErrors[phase]; ok {
			why = "phase " + phase + " failed: " + firstLine(e)
		}
		return bench.Row{Target: t, Figure: fig, Measured: why, Goal: goal, Verdict: bench.Failed}
	}

	// 1. Processor throughput on one core.
	maxAllocs := -1.0
	for _, cache := range []string{"empty", "1M"} {
		for _, key := range []string{bench.KeyContent, bench.KeyEventID} {
			fig := fmt.Sprintf("ConsumeLogs, cache=%s, key=%s, batch 1000, 30%% dup, 1 core", cache, key)
			c, ok := res.ConsumeLogs[cache+"/"+key]
			if !ok {
				rows = append(rows, missing("1", fig, "<= 200 ns/record", "gotest"))
				continue
			}
			rows = append(rows, bench.Row{Target: "1", Figure: fig,
				Measured: fmt.Sprintf("%.0f ns/record (%s records/s)", c.NsPerRecord, bench.Rate(1e9/c.NsPerRecord)),
				Goal:     fmt.Sprintf("<= %.0f ns/record (>= 5M/s)", targetNsPerRecord),
				Verdict:  bench.Check(c.NsPerRecord <= targetNsPerRecord)})
			maxAllocs = max(maxAllocs, c.AllocsPerBatch)
		}
	}
	if maxAllocs >= 0 {
		per := maxAllocs / tierBatch
		rows = append(rows, bench.Row{Target: "1", Figure: "ConsumeLogs allocations, worst of the 4 cases above",
			Measured: fmt.Sprintf("%.0f per 1000-record batch = %.3f/record", maxAllocs, per),
			Goal:     "0/record amortized (< 0.01)",
			Verdict:  bench.Check(per < targetAllocsPerRecord)})
	} else {
		rows = append(rows, missing("1", "ConsumeLogs allocations", "0/record amortized", "gotest"))
	}

	// 2. Memory per key.
	if res.BytesPerKey > 0 {
		rows = append(rows, bench.Row{Target: "2", Figure: "local cache heap per key at 10^6 keys (BenchmarkMemoryPerKey)",
			Measured: fmt.Sprintf("%.1f bytes/key", res.BytesPerKey), Goal: fmt.Sprintf("<= %.0f bytes/key", targetBytesPerKey),
			Verdict: bench.Check(res.BytesPerKey <= targetBytesPerKey)})
	} else {
		rows = append(rows, missing("2", "local cache heap per key at 10^6 keys", "<= 64 bytes/key", "gotest"))
	}

	// 3. Redis tier.
	if len(res.Tier) > 0 && len(res.Baseline) > 0 && len(res.Tier) == len(res.Baseline) {
		var tier, base, srvTier, client, scriptUs, setUs []float64
		for i := range res.Tier {
			t, b := res.Tier[i], res.Baseline[i]
			tier = append(tier, t.RecordsPerSecond())
			base = append(base, b.OpsPerSecond)
			srvTier = append(srvTier, t.Server.CPUSeconds*1e9/float64(t.Records))
			client = append(client, t.ClientCPUSeconds*1e9/float64(t.Records))
			// Server time inside commands (INFO commandstats): the claim
			// script (its SETs included) per key; SET NX PX per call.
			if n := t.Records; n > 0 && t.Server.Usec != nil {
				scriptUs = append(scriptUs, float64(t.Server.Usec["evalsha"]+t.Server.Usec["eval"])/float64(n))
			}
			if n := b.Server.Calls["set"]; n > 0 {
				setUs = append(setUs, float64(b.Server.Usec["set"])/float64(n))
			}
		}
		mt, _ := bench.Median(tier)
		mb, _ := bench.Median(base)
		ratios := make([]float64, len(tier))
		for i := range tier {
			ratios[i] = tier[i] / base[i]
		}
		mr, _ := bench.Median(ratios)
		rows = append(rows, bench.Row{Target: "3",
			Figure: fmt.Sprintf("shared tier unique records/s (claim+commit, %d callers) / redis-benchmark SET NX PX -c 4 -P 1000 ops/s, same server; median of %d paired runs",
				tierClients, len(tier)),
			Measured: fmt.Sprintf("%.0f%% (medians %s / %s)", 100*mr, bench.Rate(mt), bench.Rate(mb)),
			Goal:     fmt.Sprintf(">= %.0f%%", 100*targetTierRatio),
			Verdict:  bench.Check(mr >= targetTierRatio)})
		st, _ := bench.Median(srvTier)
		sb := setCPUPerOp(res.Baseline, o.records) * 1e9
		sc, _ := bench.Median(client)
		rows = append(rows, bench.Row{Target: "3", Figure: "Redis server CPU per record: tier vs redis-benchmark; the tier's client (processor + go-redis) CPU per record",
			Measured: fmt.Sprintf("%.2f µs vs %.2f µs; client %.2f µs", st/1e3, sb/1e3, sc/1e3), Goal: "", Verdict: bench.Info})
		var local []float64
		for _, l := range res.TierLocal {
			local = append(local, l.ClientCPUSeconds*1e9/float64(l.Records))
		}
		if ml, ok := bench.Median(local); ok {
			rows = append(rows, bench.Row{Target: "3", Figure: "the same client CPU per record with the local tier only (same driver, records and processor, no Redis); the difference is what the shared tier adds in-process",
				Measured: fmt.Sprintf("%.2f µs; the tier adds %.2f µs", ml/1e3, (sc-ml)/1e3), Goal: "", Verdict: bench.Info})
		}
		if ms, ok := bench.Median(scriptUs); ok {
			mset, _ := bench.Median(setUs)
			rows = append(rows, bench.Row{Target: "3", Figure: "Redis time per key inside commands (INFO commandstats): claim script vs SET NX PX",
				Measured: fmt.Sprintf("%.2f µs vs %.2f µs", ms, mset), Goal: "", Verdict: bench.Info})
		}
		var claims, batches int64
		for _, t := range res.Tier {
			claims += t.Requests["claim/ok"]
			batches += t.Batches
		}
		rows = append(rows, bench.Row{Target: "3", Figure: "claim calls per batch in those runs (the tier's Observe hook)",
			Measured: fmt.Sprintf("%.3f (%d claims / %d batches)", float64(claims)/float64(batches), claims, batches),
			Goal:     "", Verdict: bench.Info})
	} else {
		rows = append(rows, missing("3", "shared tier records/s vs redis-benchmark", ">= 80%", "redis"))
	}
	if len(res.RoundTrips) > 1 {
		steady := res.RoundTrips[1:]
		mc := maxTrips(steady, true)
		rows = append(rows, bench.Row{Target: "3",
			Figure:   fmt.Sprintf("round trips per batch on the claim path (counting proxy, %d batches of 1000 after the first)", len(steady)),
			Measured: fmt.Sprintf("max %d (commit: max %d; first batch: %d + %d, connection set-up)", mc, maxTrips(steady, false), res.RoundTrips[0].Claim, res.RoundTrips[0].Commit),
			Goal:     fmt.Sprintf("<= %d", targetClaimRoundTrips),
			Verdict:  bench.Check(mc <= targetClaimRoundTrips)})
	} else {
		rows = append(rows, missing("3", "round trips per batch on the claim path", "<= 1", "redis"))
	}

	// 4. End to end. Runs go pass-through, dedup, dedup+redis in turn; each
	//    mode is compared with the pass-through run of its own round, then
	//    the median of those ratios is taken, so a load change between
	//    rounds does not tilt the comparison.
	perMode := map[string][]float64{}
	rss := map[string][]float64{}
	gc := map[string][]float64{}
	switches := map[string][]float64{}
	ratios := map[string][]float64{}
	lastPass := 0.0
	for _, r := range res.Collector {
		perMode[r.Mode] = append(perMode[r.Mode], r.CPUPerRecord())
		rss[r.Mode] = append(rss[r.Mode], float64(r.PeakRSS))
		gc[r.Mode] = append(gc[r.Mode], float64(r.GCCycles))
		switches[r.Mode] = append(switches[r.Mode], float64(r.ContextSwitches)*1000/float64(r.Load.Sent))
		if r.Mode == bench.ModePassThrough {
			lastPass = r.CPUPerRecord()
		} else if lastPass > 0 {
			ratios[r.Mode] = append(ratios[r.Mode], r.CPUPerRecord()/lastPass)
		}
	}
	pass, okPass := bench.Median(perMode[bench.ModePassThrough])
	var redisCPURow bench.Row
	for _, mode := range []string{bench.ModeDedup, bench.ModeDedupRedis} {
		// The Redis tier is held to a bound of its own (target 5).
		target, bound := "4", targetCPURatio
		if mode == bench.ModeDedupRedis {
			target, bound = "5", targetRedisCPURatio
		}
		fig := fmt.Sprintf("collector CPU per record received, %s / pass-through (%s records, 30%% dup, batch 1000, %d senders); median of %d paired runs",
			mode, bench.Rate(float64(o.records)), e2eSenders, len(ratios[mode]))
		m, ok := bench.Median(perMode[mode])
		mr, okr := bench.Median(ratios[mode])
		row := missing(target, fig, fmt.Sprintf("<= %.2fx", bound), "e2e")
		if ok && okPass && okr {
			row = bench.Row{Target: target, Figure: fig,
				Measured: fmt.Sprintf("%.2fx (medians %.2f µs / %.2f µs)", mr, m*1e6, pass*1e6),
				Goal:     fmt.Sprintf("<= %.2fx", bound),
				Verdict:  bench.Check(mr <= bound)}
		}
		if mode == bench.ModeDedupRedis {
			redisCPURow = row
		} else {
			rows = append(rows, row)
		}
	}
	if okPass {
		var parts, gcs, css []string
		for _, mode := range []string{bench.ModePassThrough, bench.ModeDedup, bench.ModeDedupRedis} {
			if m, ok := bench.Median(rss[mode]); ok {
				parts = append(parts, fmt.Sprintf("%s %s", mode, bench.MiB(int64(m))))
			}
			if m, ok := bench.Median(gc[mode]); ok {
				gcs = append(gcs, fmt.Sprintf("%s %.0f", mode, m))
			}
			if m, ok := bench.Median(switches[mode]); ok {
				css = append(css, fmt.Sprintf("%s %.1f", mode, m))
			}
		}
		rows = append(rows, bench.Row{Target: "4", Figure: "collector peak RSS (VmHWM), median", Measured: strings.Join(parts, ", "), Verdict: bench.Info})
		rows = append(rows, bench.Row{Target: "4", Figure: "collector GC cycles during the load (gctrace), median", Measured: strings.Join(gcs, ", "), Verdict: bench.Info})
		rows = append(rows, bench.Row{Target: "4", Figure: "collector context switches per 1000 records received (all its threads, /proc), median", Measured: strings.Join(css, ", "), Verdict: bench.Info})
	}

	// 5. The Redis tier's costs against plain Redis and the pass-through;
	//    6. a fleet.
	rows = append(rows, redisCPURow)
	rows = append(rows, redisTierRows(res, o, missing)...)
	return append(rows, fleetRows(res, missing)...)
}

func maxTrips(ts []bench.TripCount, claim bool) int64 {
	var m int64
	for _, t := range ts {
		if claim {
			m = max(m, t.Claim)
		} else {
			m = max(m, t.Commit)
		}
	}
	return m
}

func phaseLoads(res *results) string {
	var parts []string
	for _, p := range allPhases {
		if l, ok := res.Load[p]; ok {
			parts = append(parts, fmt.Sprintf("%s %s/%s/%s", p, l, res.Busy[p], res.Others[p]))
		}
	}
	return strings.Join(parts, ", ")
}

// othersCPU starts measuring the CPU the rest of the machine uses: the
// returned function gives the share of all CPUs' time, since the start, not
// used by this process, its waited-for children or the redis-server (pid,
// if not 0). Children still running when it is called (none: every phase
// waits for its own) would be counted as others.
func othersCPU(redisPID int) func() float64 {
	stat0, err1 := bench.ReadCPUStat()
	own0, err2 := bench.OwnCPU()
	redis0, _ := bench.ReadProcCPU(redisPID)
	return func() float64 {
		stat1, err3 := bench.ReadCPUStat()
		own1, err4 := bench.OwnCPU()
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			return 0
		}
		var redis time.Duration
		if redisPID != 0 {
			if r1, err := bench.ReadProcCPU(redisPID); err == nil {
				redis = r1 - redis0
			}
		}
		total := stat1.Total - stat0.Total
		busy := (stat1.Total - stat1.Idle) - (stat0.Total - stat0.Idle)
		if total <= 0 {
			return 0
		}
		return max(0, busy-(own1-own0).Seconds()-redis.Seconds()) / total
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " '\"*$%\\()^|[]{}?<>;&") {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		} else {
			q[i] = a
		}
	}
	return strings.Join(q, " ")
}

// sourceState names the commit and counts the paths that differ from it
// (read-only git commands), since the figures are of the working tree.
func sourceState(ctx context.Context) string {
	head, err := exec.CommandContext(ctx, "git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown (no git)"
	}
	st, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=all").Output()
	if err != nil {
		return strings.TrimSpace(string(head))
	}
	n := len(strings.Split(strings.TrimSpace(string(st)), "\n"))
	if strings.TrimSpace(string(st)) == "" {
		n = 0
	}
	return fmt.Sprintf("commit %s + %d changed or new paths in the working tree", strings.TrimSpace(string(head)), n)
}

func redisVersion(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "redis-server: " + err.Error()
	}
	// "Redis server v=7.0.15 sha=... malloc=jemalloc-5.3.0 bits=64 build=..."
	for _, f := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return "Redis " + v
		}
	}
	return strings.TrimSpace(string(out))
}

// pprofTop runs go tool pprof -top on a profile, optionally focused (with
// percentages of the focused samples), sorted by flat then by cumulative
// time.
func pprofTop(ctx context.Context, bin, profile, focus string) (string, error) {
	var b strings.Builder
	for _, sort := range []string{"-flat", "-cum"} {
		args := []string{"tool", "pprof", "-top", sort, "-nodecount", "25"}
		if focus != "" {
			args = append(args, "-focus", focus, "-relative_percentages")
		}
		args = append(args, bin, profile)
		out, err := exec.CommandContext(ctx, "go", args...).Output()
		if err != nil {
			return "", fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
		}
		fmt.Fprintf(&b, "$ go %s %s\n%s\n", shellJoin(args[:len(args)-2]), filepath.Base(profile), out)
	}
	return b.String(), nil
}

// resultLines passes the benchmark result lines of go test output on to w
// as they complete, so a long run shows progress. The testing package
// writes a benchmark's name when it starts and its figures when it ends,
// so lines are put together first.
type resultLines struct {
	w    io.Writer
	line []byte
}

func (r *resultLines) Write(p []byte) (int, error) {
	for _, b := range p {
		r.line = append(r.line, b)
		if b != '\n' {
			continue
		}
		if bytes.HasPrefix(r.line, []byte("Benchmark")) && bytes.Contains(r.line, []byte("ns/op")) {
			_, _ = r.w.Write(r.line)
		}
		r.line = r.line[:0]
	}
	return len(p), nil
}

// sweepDoc is sweep.md: what the sweep ran on, then its table.
func sweepDoc(res *results, cfg bench.SweepConfig, pts []bench.SweepPoint) string {
	return fmt.Sprintf("Throughput sweep of `make bench`, %s; %s, %d cores; %s. The dedup processor's ConsumeLogs on one core "+
		"(GOMAXPROCS=1), its default cache (10^6 keys) filled first and full; batches of content copies of earlier records; "+
		"%d records per point in %d trials, the median shown as ns per record (records/s).\n\n%s",
		res.Date, res.Machine.CPUModel, res.Machine.Cores, res.Go, cfg.Records, max(cfg.Trials, 1), bench.FormatSweep(pts))
}
