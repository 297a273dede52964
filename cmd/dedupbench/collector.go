package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/otelcol-dedup/otelcol-dedup/internal/e2e"
	"github.com/otelcol-dedup/otelcol-dedup/internal/loadgen"
	"github.com/otelcol-dedup/otelcol-dedup/internal/otlp"
	"github.com/otelcol-dedup/otelcol-dedup/internal/testkit/redistest"
)

// The pipelines an end-to-end run compares: the same binary, receiver and
// exporter, with no processor, dedup on its local tier, or dedup with a
// shared tier on a standalone redis-server.
const (
	ModePassThrough = "pass-through"
	ModeLocal       = "local"
	ModeRedis       = "redis"
)

// Modes are the pipelines in the order a round runs them.
var Modes = []string{ModePassThrough, ModeLocal, ModeRedis}

// CollectorConfig is the otelcol-dedup config of a mode: e2e.Config's
// listeners and telemetry (level normal), the OTLP/gRPC exporter to sink
// with its defaults (a sending queue) but compression (gzip or none), and
// dedup with its defaults (content identity, 10 m window, 10^6 cache
// entries) plus, in ModeRedis, the shared tier at redisAddr. A profile path
// adds the pprof extension, which writes the collector's CPU profile there
// from start to shutdown.
func CollectorConfig(mode, sink, compression, redisAddr, profile string) (map[string]any, error) {
	dedup := map[string]any{}
	processors := []string{"dedup"}
	switch mode {
	case ModePassThrough:
		processors = []string{}
	case ModeLocal:
	case ModeRedis:
		if redisAddr == "" {
			return nil, fmt.Errorf("mode %s needs a Redis address", mode)
		}
		dedup["redis"] = map[string]any{"endpoints": []string{redisAddr}}
	default:
		return nil, fmt.Errorf("unknown mode %q", mode)
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
	return cfg, nil
}

// Run is one end-to-end run of a mode.
type Run struct {
	Mode string
	// Load is what the load tool had acknowledged: Sent records, Unique
	// identities among them, request latencies.
	Load loadgen.Summary
	// Delivered is the records the sink received, Distinct the identities
	// among them.
	Delivered, Distinct int64
	// Dropped is the duplicates the processor counted.
	Dropped int64
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

// Exact checks what was delivered against the load's ground truth: every
// record acknowledged, every identity delivered (0 lost) and, with dedup,
// each exactly once (0 leaked) and every copy counted as dropped.
func (r Run) Exact(records int64) error {
	want := r.Load.Sent
	if r.Mode != ModePassThrough {
		want = r.Load.Unique
		if r.Dropped != r.Load.Duplicates {
			return fmt.Errorf("%s: dedup counted %d duplicates, the load sent %d", r.Mode, r.Dropped, r.Load.Duplicates)
		}
	}
	switch {
	case r.Load.Sent != records || r.Load.Errors > 0:
		return fmt.Errorf("%s: %d of %d records acknowledged, %d failed requests (last error: %s)",
			r.Mode, r.Load.Sent, records, r.Load.Errors, r.Load.LastError)
	case r.Distinct != r.Load.Unique:
		return fmt.Errorf("%s: %d identities delivered, want %d (%d lost)", r.Mode, r.Distinct, r.Load.Unique, r.Load.Unique-r.Distinct)
	case r.Delivered != want:
		return fmt.Errorf("%s: %d records delivered, want %d (%d leaked)", r.Mode, r.Delivered, want, r.Delivered-want)
	}
	return nil
}

// RunCollector starts binary with mode's config (files in dir), sends load
// through it to a fresh sink, measures the collector (and redis, if not
// nil) until the sink has every record it should, then stops the
// collector: the returned Run is checked with Exact after the stop, so a
// record the collector sends late counts too. With a profile path the
// collector runs with the pprof extension and writes its CPU profile there.
func RunCollector(ctx context.Context, binary, dir, mode string, redis *redistest.Server, load loadgen.Config, compression, profile string) (Run, error) {
	run := Run{Mode: mode}
	h, err := thisHost()
	if err != nil {
		return run, err
	}
	sink, err := otlp.NewSink()
	if err != nil {
		return run, err
	}
	defer sink.Close()
	// The load's event.id attribute is the same in every copy of a record:
	// the distinct ones are the identities delivered.
	var mu sync.Mutex
	ids := map[string]struct{}{}
	sink.OnLogs = func(ld plog.Logs) {
		mu.Lock()
		defer mu.Unlock()
		for _, rl := range ld.ResourceLogs().All() {
			for _, sl := range rl.ScopeLogs().All() {
				for _, lr := range sl.LogRecords().All() {
					v, _ := lr.Attributes().Get("event.id")
					ids[v.Str()] = struct{}{}
				}
			}
		}
	}
	redisAddr := ""
	if redis != nil {
		redisAddr = redis.Addr()
	}
	cfg, err := CollectorConfig(mode, sink.GRPCEndpoint(), compression, redisAddr, profile)
	if err != nil {
		return run, err
	}
	path, logPath := filepath.Join(dir, "collector-"+mode+".yaml"), filepath.Join(dir, "collector-"+mode+".log")
	if err := e2e.WriteConfig(path, cfg); err != nil {
		return run, err
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	c, err := e2e.Start(sctx, binary, logPath, nil, path)
	cancel()
	if err != nil {
		return run, fmt.Errorf("%w (log: %s)", err, logPath)
	}
	defer func() { _ = c.Stop(10 * time.Second) }()

	var redisBefore RedisCounts
	if redis != nil {
		if redisBefore, err = redisCounts(ctx, redis); err != nil {
			return run, err
		}
	}
	cpuBefore, err := h.procCPU(c.PID)
	if err != nil {
		return run, err
	}
	load.Endpoint, load.Protocol = c.Ports.OTLPGRPC, loadgen.GRPC
	if run.Load, err = loadgen.Run(ctx, load); err != nil {
		return run, err
	}
	want := run.Load.Sent
	if mode != ModePassThrough {
		want = run.Load.Unique
	}
	for deadline := time.Now().Add(time.Minute); int64(sink.LogRecordCount()) < want && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	cpuAfter, err := h.procCPU(c.PID)
	if err != nil {
		return run, err
	}
	run.CPUSeconds = (cpuAfter - cpuBefore).Seconds()
	if run.PeakRSS, _, err = h.rss(c.PID); err != nil {
		return run, err
	}
	sc, err := e2e.ScrapeMetrics(ctx, c.Ports.MetricsURL())
	if err != nil {
		return run, err
	}
	run.Dropped = int64(sc.Sum("otelcol_processor_dedup_records", e2e.Labels{"outcome": "duplicate"}))
	run.RoundTrips = int64(sc.Sum("otelcol_processor_dedup_redis_requests", nil))
	if err := c.Stop(30 * time.Second); err != nil {
		return run, fmt.Errorf("stop: %w (log: %s)", err, logPath)
	}
	mu.Lock()
	run.Delivered, run.Distinct = int64(sink.LogRecordCount()), int64(len(ids))
	mu.Unlock()
	// After the stop: the processor sends a batch's commit after its
	// request is answered, and flushes the last ones on shutdown.
	if redis != nil {
		after, err := redisCounts(ctx, redis)
		if err != nil {
			return run, err
		}
		run.Redis = after.Sub(redisBefore)
	}
	return run, nil
}
