package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/otelcol-dedup/otelcol-dedup/internal/e2e"
)

// The settings every fleet collector runs with.
const (
	// fleetMaxRecvMiB lifts the OTLP/gRPC receiver's 4 MiB default: a
	// request of 8192 loadgen records is about that size.
	fleetMaxRecvMiB = 64
	// fleetRedisTimeout bounds each round trip. Above the 250 ms default,
	// since collectors, Redis and senders share two cores here; with
	// on_error: refuse a failing Redis refuses requests (counted) instead of
	// letting copies through unnoticed.
	fleetRedisTimeout = "2s"
	// sinkExporter names the OTLP/gRPC exporter of a fleet that exports to a
	// DelaySink.
	sinkExporter = "otlp_grpc/sink"
)

// FleetConfig is the configuration every collector of a fleet shares: the
// OTLP/gRPC receiver, a logs pipeline otlp -> dedup (key attributes
// ["event.id"] or the content, the shared tier on Redis) -> the nop
// exporter, or an OTLP/gRPC exporter to Sink with no queue and no retry (the
// sender is answered when the export is done, so claims stay pending for the
// export's duration), plus health_check and internal metrics.
type FleetConfig struct {
	Key   string   // KeyEventID or KeyContent
	Redis []string // redis.endpoints: one standalone server or a Cluster's masters
	Sink  string   // an OTLP/gRPC endpoint; empty: the nop exporter
}

// fleetCollectorConfig is the config of one fleet collector listening on
// ports. JSON is YAML.
func fleetCollectorConfig(ports e2e.Ports, fc FleetConfig) ([]byte, error) {
	dedup := map[string]any{}
	switch fc.Key {
	case KeyContent:
	case KeyEventID:
		dedup["logs"] = map[string]any{"key": []string{`attributes["event.id"]`}}
	default:
		return nil, fmt.Errorf("fleet key %q: want %s or %s", fc.Key, KeyEventID, KeyContent)
	}
	if len(fc.Redis) == 0 {
		return nil, errors.New("a fleet needs redis endpoints")
	}
	dedup["redis"] = map[string]any{"endpoints": fc.Redis, "timeout": fleetRedisTimeout, "on_error": "refuse"}
	exporters := map[string]any{"nop": map[string]any{}}
	exporter := "nop"
	if fc.Sink != "" {
		exporter = sinkExporter
		exporters = map[string]any{sinkExporter: map[string]any{
			"endpoint":         fc.Sink,
			"tls":              map[string]any{"insecure": true},
			"compression":      "none",
			"timeout":          "30s",
			"retry_on_failure": map[string]any{"enabled": false},
			"sending_queue":    map[string]any{"enabled": false},
		}}
	}
	cfg := map[string]any{
		"extensions": map[string]any{"health_check": map[string]any{"endpoint": e2e.Addr(ports.Health)}},
		"receivers": map[string]any{"otlp": map[string]any{"protocols": map[string]any{
			"grpc": map[string]any{"endpoint": e2e.Addr(ports.OTLPGRPC), "max_recv_msg_size_mib": fleetMaxRecvMiB},
		}}},
		"processors": map[string]any{"dedup": dedup},
		"exporters":  exporters,
		"service": map[string]any{
			"extensions": []string{"health_check"},
			"telemetry":  e2e.Telemetry("normal", ports.Metrics),
			"pipelines": map[string]any{"logs": map[string]any{
				"receivers": []string{"otlp"}, "processors": []string{"dedup"}, "exporters": []string{exporter},
			}},
		},
	}
	return json.MarshalIndent(cfg, "", "  ")
}

// FleetCollector is one running collector of a fleet, with an OTLP/gRPC
// client connected to it.
type FleetCollector struct {
	*e2e.Collector
	Ports e2e.Ports
	Log   string
	conn  *grpc.ClientConn
	logs  plogotlp.GRPCClient
}

// Fleet is collectors started alike.
type Fleet []*FleetCollector

// StartFleet starts n collectors of binary with fc, their configs and logs
// in dir named after name, and waits (60 s at most) until each is healthy.
// On an error every collector started so far is stopped.
func StartFleet(ctx context.Context, binary, dir, name string, n int, fc FleetConfig) (Fleet, error) {
	var f Fleet
	for i := range n {
		c, err := startFleetCollector(ctx, binary, filepath.Join(dir, fmt.Sprintf("%s-%d", name, i)), fc)
		if err != nil {
			f.Stop()
			return nil, err
		}
		f = append(f, c)
	}
	return f, nil
}

func startFleetCollector(ctx context.Context, binary, base string, fc FleetConfig) (*FleetCollector, error) {
	ports, err := e2e.FreePorts()
	if err != nil {
		return nil, err
	}
	cfg, err := fleetCollectorConfig(ports, fc)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(base+".yaml", cfg, 0o600); err != nil {
		return nil, err
	}
	logf, err := os.Create(base + ".log")
	if err != nil {
		return nil, err
	}
	// The child holds its own descriptor of the log.
	defer logf.Close()
	c, err := e2e.StartCollector(binary, logf, base+".yaml")
	if err != nil {
		return nil, err
	}
	hctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	err = c.WaitHealthy(hctx, ports.HealthURL())
	cancel()
	if err != nil {
		_ = c.Stop(10 * time.Second)
		return nil, fmt.Errorf("%w (log: %s)", err, logf.Name())
	}
	conn, err := grpc.NewClient(e2e.Addr(ports.OTLPGRPC), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		_ = c.Stop(10 * time.Second)
		return nil, err
	}
	return &FleetCollector{Collector: c, Ports: ports, Log: logf.Name(), conn: conn, logs: plogotlp.NewGRPCClient(conn)}, nil
}

// Stop closes the clients and stops every collector by PID (SIGTERM, then
// SIGKILL after 10 s), returning the first error.
func (f Fleet) Stop() error {
	var errs []error
	for _, c := range f {
		_ = c.conn.Close()
		errs = append(errs, c.Stop(10*time.Second))
	}
	return errors.Join(errs...)
}

// metricsURLs are the collectors' metrics endpoints.
func (f Fleet) metricsURLs() []string {
	out := make([]string, len(f))
	for i, c := range f {
		out[i] = c.Ports.MetricsURL()
	}
	return out
}

// CPU is the CPU time the collectors used so far, from /proc.
func (f Fleet) CPU() (time.Duration, error) {
	var total time.Duration
	for _, c := range f {
		t, err := ReadProcCPU(c.PID)
		if err != nil {
			return 0, err
		}
		total += t
	}
	return total, nil
}

// Retry behaviour of fleet senders: an OTLP exporter's defaults (100 ms,
// x1.5, at most 5 s apart, jittered by ±50%), given up after 60 s.
const (
	retryInitial    = 100 * time.Millisecond
	retryMultiplier = 1.5
	retryMax        = 5 * time.Second
	retryElapsed    = 60 * time.Second
	attemptTimeout  = 30 * time.Second
)

// retryable tells a refusal an exporter would retry (the dedup processor's
// refusal after pending_wait, or under on_error: refuse, is Unavailable).
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.ResourceExhausted, codes.Aborted, codes.DeadlineExceeded:
		return true
	}
	return false
}

// Send exports req to the collector, and on a retryable refusal sends it
// again after a backoff, as an OTLP exporter does. It returns how many
// attempts were refused, and the last error if the request was never
// accepted.
func (c *FleetCollector) Send(ctx context.Context, req plogotlp.ExportRequest) (refused int, err error) {
	first := time.Now()
	interval := retryInitial
	for {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		_, err := c.logs.Export(actx, req)
		cancel()
		if err == nil {
			return refused, nil
		}
		if !retryable(err) || ctx.Err() != nil {
			return refused, err
		}
		refused++
		delay := time.Duration(float64(interval) * (0.5 + rand.Float64()))
		interval = min(time.Duration(float64(interval)*retryMultiplier), retryMax)
		if time.Since(first)+delay > retryElapsed {
			return refused, fmt.Errorf("refused for %s: %w", retryElapsed, err)
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return refused, ctx.Err()
		}
	}
}

// fleetReading is what a fleet run reads before and after its load.
type fleetReading struct {
	counts                            DedupCounts
	each                              []DedupCounts // by collector
	redis                             RedisCounts
	collectorCPU, redisCPU, driverCPU float64
	machine                           CPUStat
}

func takeFleetReading(ctx context.Context, f Fleet, redis *RedisDeployment) (fleetReading, error) {
	var r fleetReading
	var err error
	if r.counts, r.each, err = scrapeEach(ctx, f.metricsURLs()); err != nil {
		return r, err
	}
	if r.redis, _, err = redis.Counts(ctx); err != nil {
		return r, err
	}
	cc, err1 := f.CPU()
	dc, err2 := selfCPU()
	ms, err3 := ReadCPUStat()
	if err := errors.Join(err1, err2, err3); err != nil {
		return r, err
	}
	// Redis's own getrusage (INFO used_cpu_*) has microseconds where /proc
	// has ticks of 10 ms.
	r.collectorCPU, r.redisCPU, r.driverCPU, r.machine = cc.Seconds(), r.redis.CPUSeconds, dc.Seconds(), ms
	return r, nil
}

// CPUSplit is where the machine's CPU time went during a run, in seconds:
// the collectors, the Redis nodes, this process (the senders), and the rest
// of the machine (other processes: the machine is shared).
type CPUSplit struct {
	Collectors, Redis, Driver, Others float64
}

// Total is the CPU time the run's own processes used.
func (c CPUSplit) Total() float64 { return c.Collectors + c.Redis + c.Driver }

// cpu splits a reading's delta.
func (r fleetReading) cpu() CPUSplit {
	busy := r.machine.Total - r.machine.Idle
	c := CPUSplit{Collectors: r.collectorCPU, Redis: r.redisCPU, Driver: r.driverCPU}
	c.Others = max(0, busy-c.Total())
	return c
}

func (r fleetReading) sub(before fleetReading) (fleetReading, error) {
	counts, err := r.counts.Sub(before.counts)
	each := make([]DedupCounts, len(r.each))
	for i := range r.each {
		d, e := r.each[i].Sub(before.each[i])
		each[i], err = d, errors.Join(err, e)
	}
	return fleetReading{
		counts:       counts,
		each:         each,
		redis:        r.redis.sub(before.redis),
		collectorCPU: r.collectorCPU - before.collectorCPU,
		redisCPU:     r.redisCPU - before.redisCPU,
		driverCPU:    r.driverCPU - before.driverCPU,
		machine:      CPUStat{Total: r.machine.Total - before.machine.Total, Idle: r.machine.Idle - before.machine.Idle},
	}, err
}
