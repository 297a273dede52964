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
	var generating sync.WaitGroup
	defer generating.Wait()
	defer stopGen()
	generating.Go(func() {
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
	})
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
