package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/procfs"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/otelcol-dedup/otelcol-dedup/internal/e2e"
	"github.com/otelcol-dedup/otelcol-dedup/internal/loadgen"
	"github.com/otelcol-dedup/otelcol-dedup/internal/otlp"
	"github.com/otelcol-dedup/otelcol-dedup/internal/testkit/redistest"
)

// The pipelines an end-to-end run compares, in the order a round runs them:
// the same binary, receiver and exporter, with no processor, dedup on its
// local tier, or dedup with a shared tier on a standalone redis-server.
const (
	ModePassThrough = "pass-through"
	ModeLocal       = "local"
	ModeRedis       = "redis"
)

var Modes = []string{ModePassThrough, ModeLocal, ModeRedis}

// CollectorConfig is the otelcol-dedup config of a mode: the exporter and
// dedup with their defaults, as users run them, but the exporter's
// compression and, in ModeRedis, the shared tier at redisAddr. A profile
// path adds the pprof extension, which writes the collector's CPU profile
// there from start to shutdown.
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
		// Port 0: the profile is what is wanted, not the endpoint.
		cfg["extensions"].(map[string]any)["pprof"] = map[string]any{"endpoint": "127.0.0.1:0", "save_to_file": profile}
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
	// Load is what the load tool had acknowledged: Sent records, Unique
	// identities among them, request latencies.
	Load loadgen.Summary
	// Delivered is the records the sink received, Distinct the identities
	// among them; Dropped the duplicates the processor counted.
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

// want is the records the sink should receive: each identity once with
// dedup, every record without.
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

// measure runs the load through a collector of mode (its config and log in
// o.out) to a fresh sink, measures the collector and Redis until the sink
// has every record it should, then stops the collector and checks the run
// with Exact, so that a record the collector sends late counts too.
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
	if err := flushRedis(ctx, redis); err != nil {
		return run, err
	}
	sink, err := otlp.NewSink()
	if err != nil {
		return run, err
	}
	defer sink.Close()
	// The load's event.id attribute is the same in every copy of a record:
	// the distinct ones are the identities delivered. OnLogs runs under the
	// sink's lock, which LogRecordCount takes before ids is read.
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

// RedisCounts is the server's side of a run, from INFO: its CPU time
// (used_cpu_user + used_cpu_sys) and the commands it ran (scripts and the
// commands they call both counted).
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
	for _, f := range strings.Fields(out) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return "Redis " + v
		}
	}
	return out
}

func flushRedis(ctx context.Context, s *redistest.Server) error {
	if err := s.Client().FlushAll(ctx).Err(); err != nil {
		return err
	}
	return s.Client().ConfigResetStat(ctx).Err()
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
// cheapest command a dedup claim could be.
type Ceiling struct {
	Ops          int64
	OpsPerSecond float64
	CPUSeconds   float64 // the server's
}

// CPUPerOp is the server's CPU seconds per SET NX PX.
func (c Ceiling) CPUPerOp() float64 { return c.CPUSeconds / float64(c.Ops) }

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
	return Ceiling{Ops: int64(n), OpsPerSecond: rps, CPUSeconds: after.CPUSeconds - before.CPUSeconds}, err
}
