package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"

	"github.com/otelcol-dedup/otelcol-dedup/cmd/dedupload/loadgen"
)

// RaceConfig is a racing-copies run: Rounds rounds, each one request of Size
// distinct records sent at the same moment to every collector of a fleet,
// so that the copies of each record race across collectors.
type RaceConfig struct {
	Size   int
	Rounds int
	Seed   uint64 // the records' seed: one seed per run keeps runs apart
}

// RaceResult is one racing-copies run.
type RaceResult struct {
	Topology   string
	Collectors int
	Size       int
	Rounds     int
	// Records is the distinct records sent (Size x Rounds); each was sent
	// to every collector.
	Records int64
	Seconds float64
	// RoundSeconds are the rounds' durations (until every collector
	// answered), in order.
	RoundSeconds []float64
	// Refused is the attempts refused with a retryable error and sent
	// again.
	Refused int64
	// Counts are the fleet's dedup counters over the run.
	Counts DedupCounts
	Redis  RedisCounts
	CPU    CPUSplit
}

// RecordsPerSecond is the distinct records delivered per second.
func (r RaceResult) RecordsPerSecond() float64 { return float64(r.Records) / r.Seconds }

// Batches is the requests the collectors accepted.
func (r RaceResult) Batches() int64 { return int64(r.Rounds * r.Collectors) }

// Exact reports whether the fleet let each record through exactly once and
// dropped every other copy, by its counters.
func (r RaceResult) Exact() bool {
	return r.Counts.Records["unique"] == r.Records && r.Counts.Records["duplicate"] == int64(r.Collectors-1)*r.Records
}

// RunRace runs cfg against the fleet (which shares redis) after one untimed
// round that opens connections and loads scripts. Each round's request is
// built while the previous round runs.
func RunRace(ctx context.Context, f Fleet, redis *RedisDeployment, cfg RaceConfig) (RaceResult, error) {
	res := RaceResult{Topology: redis.Topology, Collectors: len(f), Size: cfg.Size, Rounds: cfg.Rounds, Records: int64(cfg.Size * cfg.Rounds)}
	gen, err := loadgen.NewGenerator(loadgen.Config{Records: int64(cfg.Size * (cfg.Rounds + 1)), Batch: cfg.Size, Senders: 1, Key: loadgen.KeyEventID, Seed: cfg.Seed})
	if err != nil {
		return res, err
	}
	// Requests for every collector, one round ahead.
	rounds := make(chan []plogotlp.ExportRequest, 2)
	gctx, stopGen := context.WithCancel(ctx)
	defer stopGen()
	go func() {
		defer close(rounds)
		for b := range gen.Batches() {
			ld := gen.Batch(b).Logs
			reqs := make([]plogotlp.ExportRequest, len(f))
			for i := range f {
				cp := plog.NewLogs()
				ld.CopyTo(cp)
				reqs[i] = plogotlp.NewExportRequestFromLogs(cp)
			}
			select {
			case rounds <- reqs:
			case <-gctx.Done():
				return
			}
		}
	}()
	var refused atomic.Int64
	race := func(reqs []plogotlp.ExportRequest) error {
		start := make(chan struct{})
		errs := make([]error, len(f))
		var wg sync.WaitGroup
		for i, c := range f {
			wg.Go(func() {
				<-start
				n, err := c.Send(ctx, reqs[i])
				refused.Add(int64(n))
				if err != nil {
					errs[i] = fmt.Errorf("collector %d (pid %d): %w", i, c.PID, err)
				}
			})
		}
		close(start)
		wg.Wait()
		return errors.Join(errs...)
	}
	if err := race(<-rounds); err != nil {
		return res, fmt.Errorf("warm-up round: %w", err)
	}
	refused.Store(0)

	before, err := takeFleetReading(ctx, f, redis)
	if err != nil {
		return res, err
	}
	t0 := time.Now()
	for reqs := range rounds {
		rs := time.Now()
		if err := race(reqs); err != nil {
			return res, err
		}
		res.RoundSeconds = append(res.RoundSeconds, time.Since(rs).Seconds())
	}
	res.Seconds = time.Since(t0).Seconds()
	after, err := takeFleetReading(ctx, f, redis)
	if err != nil {
		return res, err
	}
	res.Refused = refused.Load()
	if len(res.RoundSeconds) != cfg.Rounds {
		return res, fmt.Errorf("%d rounds run, want %d", len(res.RoundSeconds), cfg.Rounds)
	}
	d, err := after.sub(before)
	res.Counts, res.Redis = d.counts, d.redis
	res.CPU = d.cpu()
	return res, err
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
	if r.counts, r.each, err = scrapeEach(ctx, f.MetricsURLs()); err != nil {
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
