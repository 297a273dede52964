package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// RedisCounts is the server's side of a run: CPU, commands, traffic and
// memory, from INFO (deltas, once subtracted; sums over a Cluster's masters,
// once added).
type RedisCounts struct {
	CPUSeconds float64
	// Calls by command name (evalsha, eval, set, ...), commands run by
	// scripts included, and the server time they took in microseconds.
	Calls map[string]int64
	Usec  map[string]int64
	// NetBytes is the bytes the server read from and wrote to its clients
	// (total_net_input_bytes + total_net_output_bytes; not the Cluster bus).
	NetBytes int64
	// UsedMemory is used_memory, in bytes; Keys the keys of db0.
	UsedMemory, Keys int64
}

// countedCommands are the commands whose INFO commandstats a run records.
var countedCommands = []string{"evalsha", "eval", "set", "get", "exists", "del", "script|load", "hello", "client|setinfo", "ping", "cluster|slots", "cluster|shards", "info"}

// parseRedisCounts reads a run's counts from INFO everything.
func parseRedisCounts(info map[string]string) (RedisCounts, error) {
	cpu, err := RedisCPUSeconds(info)
	if err != nil {
		return RedisCounts{}, err
	}
	c := RedisCounts{CPUSeconds: cpu, Calls: map[string]int64{}, Usec: map[string]int64{}}
	for _, cmd := range countedCommands {
		n, us, err := CommandStat(info, cmd)
		if err != nil {
			return c, err
		}
		c.Calls[cmd], c.Usec[cmd] = n, us
	}
	var errs []error
	num := func(k string) int64 {
		v, err := strconv.ParseInt(info[k], 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("INFO %s=%q: %w", k, info[k], err))
		}
		return v
	}
	c.NetBytes = num("total_net_input_bytes") + num("total_net_output_bytes")
	c.UsedMemory = num("used_memory")
	if err := errors.Join(errs...); err != nil {
		return c, err
	}
	c.Keys, err = keyspaceKeys(info, "db0")
	return c, err
}

// keyspaceKeys is the number of keys of db in INFO keyspace
// ("db0:keys=12,expires=12,avg_ttl=0"); 0 for a database with no key,
// which INFO leaves out.
func keyspaceKeys(info map[string]string, db string) (int64, error) {
	v, ok := info[db]
	if !ok {
		return 0, nil
	}
	for _, kv := range strings.Split(v, ",") {
		if n, ok := strings.CutPrefix(kv, "keys="); ok {
			keys, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("INFO %s: %q: %w", db, v, err)
			}
			return keys, nil
		}
	}
	return 0, fmt.Errorf("INFO %s: no keys= in %q", db, v)
}

func redisCounts(ctx context.Context, s *RedisServer) (RedisCounts, error) {
	if s == nil { // the local tier only: no server to read
		return RedisCounts{}, nil
	}
	info, err := s.Info(ctx, "everything")
	if err != nil {
		return RedisCounts{}, err
	}
	return parseRedisCounts(info)
}

func (c RedisCounts) sub(before RedisCounts) RedisCounts {
	d := RedisCounts{
		CPUSeconds: c.CPUSeconds - before.CPUSeconds, Calls: map[string]int64{}, Usec: map[string]int64{},
		NetBytes: c.NetBytes - before.NetBytes, UsedMemory: c.UsedMemory - before.UsedMemory, Keys: c.Keys - before.Keys,
	}
	for k, v := range c.Calls {
		if n := v - before.Calls[k]; n != 0 {
			d.Calls[k] = n
			d.Usec[k] = c.Usec[k] - before.Usec[k]
		}
	}
	return d
}

// add sums the counts of two servers (a Cluster's masters).
func (c RedisCounts) add(o RedisCounts) RedisCounts {
	s := RedisCounts{
		CPUSeconds: c.CPUSeconds + o.CPUSeconds, Calls: map[string]int64{}, Usec: map[string]int64{},
		NetBytes: c.NetBytes + o.NetBytes, UsedMemory: c.UsedMemory + o.UsedMemory, Keys: c.Keys + o.Keys,
	}
	for _, m := range []RedisCounts{c, o} {
		for k, v := range m.Calls {
			s.Calls[k] += v
			s.Usec[k] += m.Usec[k]
		}
	}
	return s
}

// BaselineResult is one redis-benchmark run.
type BaselineResult struct {
	OpsPerSecond float64
	Server       RedisCounts
	Args         []string
}

// RunRedisBenchmark runs redis-benchmark (bin) with RedisBenchmarkArgs
// against s and returns its requests per second.
func RunRedisBenchmark(ctx context.Context, bin string, s *RedisServer, clients, pipeline, n int) (BaselineResult, error) {
	args := RedisBenchmarkArgs(s.Port, clients, pipeline, n)
	before, err := redisCounts(ctx, s)
	if err != nil {
		return BaselineResult{}, err
	}
	out, err := exec.CommandContext(ctx, bin, args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return BaselineResult{}, fmt.Errorf("redis-benchmark: %w: %s", err, bytes.TrimSpace(ee.Stderr))
		}
		return BaselineResult{}, fmt.Errorf("redis-benchmark: %w", err)
	}
	rps, err := ParseRedisBenchmarkCSV(bytes.NewReader(out))
	if err != nil {
		return BaselineResult{}, err
	}
	after, err := redisCounts(ctx, s)
	if err != nil {
		return BaselineResult{}, err
	}
	return BaselineResult{OpsPerSecond: rps, Server: after.sub(before), Args: append([]string{bin}, args...)}, nil
}

// TierResult is one run of unique records through the processor with the
// shared tier.
type TierResult struct {
	Records   int64 // records sent, all unique
	Batches   int64
	Delivered int64 // records the next consumer received
	Seconds   float64
	// Requests are the tier's calls as its Observe hook reported them, by
	// "op/result" (claim/ok, commit/ok, ...): one per round trip on a
	// standalone server.
	Requests map[string]int64
	Server   RedisCounts
	// ClientCPUSeconds is the CPU time of this process during the run.
	ClientCPUSeconds float64
}

// RecordsPerSecond is Records / Seconds.
func (r TierResult) RecordsPerSecond() float64 { return float64(r.Records) / r.Seconds }

// RunTier sends records unique records in batches of batch from goroutines
// goroutines through a dedup processor (key event.id) whose shared tier is
// s, and measures the wall time: key derivation, local claim, the claim
// round trip, the (free) next consumer and the commit round trip, the
// processor's whole path with the tier. With s nil the processor has the
// local tier only: the same driver and records, without the tier's work.
func RunTier(ctx context.Context, s *RedisServer, records int64, batch, goroutines int) (TierResult, error) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	sink := &CountingConsumer{}
	addr := ""
	if s != nil {
		addr = s.Addr
	}
	p, err := NewProcessor(ctx, ProcOptions{
		Key: KeyEventID, MaxEntries: int(records) + 1_000_000, Redis: addr,
		Next: sink, MeterProvider: mp,
	})
	if err != nil {
		return TierResult{}, err
	}
	defer func() { _ = p.Shutdown(context.Background()) }()

	// Warm-up: every goroutine's connection opened, the script loaded.
	var passes Passes
	if _, err := ReplayParallel(p, goroutines, 1, batch, int64(goroutines*batch), &passes); err != nil {
		return TierResult{}, fmt.Errorf("warm-up: %w", err)
	}
	reqBefore, err := collectRequests(ctx, reader)
	if err != nil {
		return TierResult{}, err
	}
	sinkBefore := sink.Records.Load()
	srvBefore, err := redisCounts(ctx, s)
	if err != nil {
		return TierResult{}, err
	}
	cpuBefore, err := selfCPU()
	if err != nil {
		return TierResult{}, err
	}
	elapsed, err := ReplayParallel(p, goroutines, 8, batch, records, &passes)
	if err != nil {
		return TierResult{}, err
	}
	// The last batches' commits are still on their way: the run's Redis
	// and client CPU include them.
	if _, err := commitsSettled(ctx, reader, -1); err != nil {
		return TierResult{}, err
	}
	cpuAfter, err := selfCPU()
	if err != nil {
		return TierResult{}, err
	}
	srvAfter, err := redisCounts(ctx, s)
	if err != nil {
		return TierResult{}, err
	}
	reqAfter, err := collectRequests(ctx, reader)
	if err != nil {
		return TierResult{}, err
	}
	r := TierResult{
		Records:   records / int64(batch) * int64(batch),
		Batches:   records / int64(batch),
		Delivered: sink.Records.Load() - sinkBefore,
		Seconds:   elapsed.Seconds(),
		Requests:  map[string]int64{},
		Server:    srvAfter.sub(srvBefore),
		// The whole driver process: the processor, go-redis, the GC.
		ClientCPUSeconds: (cpuAfter - cpuBefore).Seconds(),
	}
	for k, v := range reqAfter {
		if d := v - reqBefore[k]; d != 0 {
			r.Requests[k] = d
		}
	}
	return r, nil
}

// collectRequests reads otelcol_processor_dedup_redis_requests by
// "op/result".
func collectRequests(ctx context.Context, reader *sdkmetric.ManualReader) (map[string]int64, error) {
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "otelcol_processor_dedup_redis_requests" {
				continue
			}
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				return nil, fmt.Errorf("%s: unexpected data %T", m.Name, m.Data)
			}
			for _, dp := range sum.DataPoints {
				op, _ := dp.Attributes.Value("op")
				res, _ := dp.Attributes.Value("result")
				out[op.AsString()+"/"+res.AsString()] += dp.Value
			}
		}
	}
	return out, nil
}

// commitsSettled waits until the processor's count of commit round trips
// (every result) exceeds after, or, with after < 0, has not grown for
// 50 ms: a batch's commit is sent after the batch returned. It returns the
// count.
func commitsSettled(ctx context.Context, reader *sdkmetric.ManualReader, after int64) (int64, error) {
	commits := func() (int64, error) {
		req, err := collectRequests(ctx, reader)
		if err != nil {
			return 0, err
		}
		var n int64
		for k, v := range req {
			if strings.HasPrefix(k, "commit/") {
				n += v
			}
		}
		return n, nil
	}
	last, err := commits()
	if err != nil {
		return 0, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for stable := time.Now(); time.Now().Before(deadline); {
		if after >= 0 && last > after || after < 0 && time.Since(stable) >= 50*time.Millisecond {
			return last, nil
		}
		time.Sleep(2 * time.Millisecond)
		n, err := commits()
		if err != nil {
			return 0, err
		}
		if n != last {
			last, stable = n, time.Now()
		}
	}
	return last, errors.New("the queued commits were not sent within 10s")
}

// TripCount is the round trips of one batch on each path.
type TripCount struct{ Claim, Commit int64 }

// CountRoundTrips sends batches batches of batch unique records, one at a
// time, through a dedup processor whose shared tier reaches s through a
// RoundTripProxy, and returns each batch's round trips before the next
// consumer saw the batch (the claim path: key derivation, local and shared
// claims) and after it until its commit was sent (the commit, which the
// batch does not wait for). The first batch also pays for opening the
// connection and loading the script.
func CountRoundTrips(ctx context.Context, s *RedisServer, batches, batch int) ([]TripCount, error) {
	proxy, err := NewRoundTripProxy(s.Addr)
	if err != nil {
		return nil, err
	}
	defer proxy.Close()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	var mid int64
	sink := &CountingConsumer{OnBatch: func() { mid = proxy.Count() }}
	p, err := NewProcessor(ctx, ProcOptions{Key: KeyEventID, Redis: proxy.Addr(), Next: sink, MeterProvider: mp})
	if err != nil {
		return nil, err
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	src := GenLogs(batches, batch, 0)
	out := make([]TripCount, 0, batches)
	var commits int64
	pctx := PassContext("round-trips-" + time.Now().Format(time.RFC3339Nano))
	for _, ld := range src {
		before := proxy.Count()
		mid = -1
		if err := p.ConsumeLogs(pctx, ld); err != nil {
			return out, err
		}
		if mid < 0 {
			return out, errors.New("round trips: the batch never reached the next consumer")
		}
		if commits, err = commitsSettled(ctx, reader, commits); err != nil {
			return out, fmt.Errorf("round trips: %w", err)
		}
		out = append(out, TripCount{Claim: mid - before, Commit: proxy.Count() - mid})
	}
	return out, nil
}
