package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/otelcol-dedup/otelcol-dedup/cmd/dedupload/loadgen"
	"github.com/otelcol-dedup/otelcol-dedup/internal/e2e"
)

// Pipeline modes of the end-to-end runs.
const (
	ModePassThrough = "pass-through" // otlp -> nop
	ModeDedup       = "dedup"        // otlp -> dedup -> nop
	ModeDedupRedis  = "dedup+redis"  // otlp -> dedup (shared tier) -> nop
)

// CollectorConfig returns the otelcol-dedup config of a mode: the OTLP/gRPC
// receiver, the nop exporter (free, and the same in every mode), health_check
// and the internal metrics on ports, and a logs pipeline with no processor,
// dedup, or dedup with the shared tier at redisAddr. dedup runs with its
// defaults (content identity, 10 m window, 10^6 cache entries). JSON is YAML.
func CollectorConfig(mode string, ports e2e.Ports, redisAddr string) ([]byte, error) {
	processors := map[string]any{}
	var pipeline []string
	switch mode {
	case ModePassThrough:
		pipeline = []string{}
	case ModeDedup:
		processors["dedup"] = map[string]any{}
		pipeline = []string{"dedup"}
	case ModeDedupRedis:
		if redisAddr == "" {
			return nil, fmt.Errorf("mode %s needs a Redis address", mode)
		}
		processors["dedup"] = map[string]any{"redis": map[string]any{"endpoints": []string{redisAddr}}}
		pipeline = []string{"dedup"}
	default:
		return nil, fmt.Errorf("unknown mode %q", mode)
	}
	cfg := map[string]any{
		"extensions": map[string]any{
			"health_check": map[string]any{"endpoint": e2e.Addr(ports.Health)},
		},
		"receivers": map[string]any{
			"otlp": map[string]any{"protocols": map[string]any{
				"grpc": map[string]any{"endpoint": e2e.Addr(ports.OTLPGRPC)},
			}},
		},
		"exporters": map[string]any{"nop": map[string]any{}},
		"service": map[string]any{
			"extensions": []string{"health_check"},
			"telemetry":  e2e.Telemetry("normal", ports.Metrics),
			"pipelines": map[string]any{
				"logs": map[string]any{
					"receivers":  []string{"otlp"},
					"exporters":  []string{"nop"},
					"processors": pipeline,
				},
			},
		},
	}
	if len(processors) > 0 {
		cfg["processors"] = processors
	}
	return json.MarshalIndent(cfg, "", "  ")
}

// CollectorRun is one end-to-end run.
type CollectorRun struct {
	Mode string
	// Load is what loadgen reported: Sent is the records the collector
	// received (acknowledged).
	Load loadgen.Summary
	// CPUSeconds is the collector's user+system time during the load
	// (/proc/<pid>/stat deltas).
	CPUSeconds float64
	// PeakRSS is VmHWM at the end of the load, in bytes.
	PeakRSS int64
	// Dropped is the duplicates dedup reported; RedisRequests its round
	// trips by "op/result" (shared tier only), from its metrics endpoint.
	Dropped       int64
	RedisRequests map[string]int64
	// RedisCPUSeconds is the shared tier's server CPU during the load.
	RedisCPUSeconds float64
	// RedisWaitSeconds is the time the collector's batches spent in the
	// round trips to Redis their senders wait for, summed over batches
	// (DedupCounts.WaitedRedisSeconds): with synchronous senders, time they
	// spent waiting on Redis.
	RedisWaitSeconds float64
	// CopyWaitSeconds is the time the collector's batches spent waiting for
	// other batches' pending claims on their records (copies in flight),
	// summed over batches (the wait_duration histograms' sums).
	CopyWaitSeconds float64
	// DriverCPUSeconds is this process's CPU during the load: the senders.
	DriverCPUSeconds float64
	// ContextSwitches is the collector's context switches during the load,
	// all its threads (/proc/<pid>/task/*/status): each is a thread put to
	// sleep or pushed off its core and run again later.
	ContextSwitches int64
	// GCCycles is the collector's garbage collections during the load,
	// counted from its GODEBUG=gctrace=1 lines.
	GCCycles int
}

// CPUPerRecord is the collector's CPU seconds per record received.
func (r CollectorRun) CPUPerRecord() float64 { return r.CPUSeconds / float64(r.Load.Sent) }

// RunCollector starts binary with mode's config (written to dir), waits for
// it to be healthy, sends load through loadgen over OTLP/gRPC and measures
// the collector's CPU time around the load and its peak RSS, then stops it.
// With ModeDedupRedis, redis is the shared tier; the caller empties it
// between runs.
func RunCollector(ctx context.Context, binary, dir, mode string, redis *RedisServer, load loadgen.Config) (CollectorRun, error) {
	run := CollectorRun{Mode: mode}
	ports, err := e2e.FreePorts()
	if err != nil {
		return run, err
	}
	addr := ""
	if redis != nil {
		addr = redis.Addr
	}
	cfg, err := CollectorConfig(mode, ports, addr)
	if err != nil {
		return run, err
	}
	path := filepath.Join(dir, "collector-"+mode+".yaml")
	if err := os.WriteFile(path, cfg, 0o600); err != nil {
		return run, err
	}
	logf, err := os.Create(filepath.Join(dir, "collector-"+mode+".log"))
	if err != nil {
		return run, err
	}
	defer logf.Close()
	// gctrace: one line per collection on stderr (the log), to count them.
	// The child inherits the environment; this process read its GODEBUG at
	// start-up and is not affected.
	prevDebug, hadDebug := os.LookupEnv("GODEBUG")
	os.Setenv("GODEBUG", "gctrace=1")
	c, err := e2e.StartCollector(binary, logf, path)
	if hadDebug {
		os.Setenv("GODEBUG", prevDebug)
	} else {
		os.Unsetenv("GODEBUG")
	}
	if err != nil {
		return run, err
	}
	defer func() { _ = c.Stop(10 * time.Second) }()
	hctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	err = c.WaitHealthy(hctx, ports.HealthURL())
	cancel()
	if err != nil {
		return run, fmt.Errorf("%w (log: %s)", err, logf.Name())
	}

	var redisBefore RedisCounts
	if mode == ModeDedupRedis {
		if redisBefore, err = redisCounts(ctx, redis); err != nil {
			return run, err
		}
	}
	load.Endpoint = e2e.Addr(ports.OTLPGRPC)
	load.Protocol = loadgen.GRPC
	gcBefore, err := CountGCTrace(logf.Name())
	if err != nil {
		return run, err
	}
	before, err := ReadProcCPU(c.PID)
	if err != nil {
		return run, err
	}
	csBefore, err := ReadContextSwitches(c.PID)
	if err != nil {
		return run, err
	}
	driverBefore, err := selfCPU()
	if err != nil {
		return run, err
	}
	run.Load, err = loadgen.Run(ctx, load)
	if err != nil {
		return run, err
	}
	driverAfter, err := selfCPU()
	if err != nil {
		return run, err
	}
	after, err := ReadProcCPU(c.PID)
	if err != nil {
		return run, err
	}
	csAfter, err := ReadContextSwitches(c.PID)
	if err != nil {
		return run, err
	}
	run.ContextSwitches = csAfter - csBefore
	run.DriverCPUSeconds = (driverAfter - driverBefore).Seconds()
	gcAfter, err := CountGCTrace(logf.Name())
	if err != nil {
		return run, err
	}
	run.GCCycles = gcAfter - gcBefore
	run.CPUSeconds = (after - before).Seconds()
	if run.PeakRSS, err = ReadPeakRSS(c.PID); err != nil {
		return run, err
	}
	if mode == ModeDedupRedis {
		redisAfter, err := redisCounts(ctx, redis)
		if err != nil {
			return run, err
		}
		run.RedisCPUSeconds = redisAfter.sub(redisBefore).CPUSeconds
	}
	if run.Load.Errors > 0 || run.Load.Sent != load.Records {
		return run, fmt.Errorf("%s: loadgen delivered %d of %d records, %d failed requests (last error: %s)",
			mode, run.Load.Sent, load.Records, run.Load.Errors, run.Load.LastError)
	}
	sc, err := e2e.ScrapeMetrics(ctx, ports.MetricsURL())
	if err != nil {
		return run, err
	}
	counts, err := dedupCountsOf(sc)
	if err != nil {
		return run, err
	}
	run.Dropped = counts.Records["duplicate"]
	for _, h := range counts.Waits {
		run.CopyWaitSeconds += h.Sum
	}
	if mode == ModeDedupRedis {
		run.RedisRequests = counts.RedisRequests
		run.RedisWaitSeconds = counts.WaitedRedisSeconds()
	}
	return run, c.Stop(10 * time.Second)
}

// CountGCTrace counts the GODEBUG=gctrace=1 lines ("gc 12 @3.4s 2%: ...")
// in a log file.
func CountGCTrace(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return CountGCLines(string(b)), nil
}

// CountGCLines counts the lines of s that are gctrace lines.
func CountGCLines(s string) int {
	n := 0
	for _, line := range strings.Split(s, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "gc" && strings.HasPrefix(f[2], "@") {
			if _, err := strconv.Atoi(f[1]); err == nil {
				n++
			}
		}
	}
	return n
}
