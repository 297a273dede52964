package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/pdata/plog/plogotlp"

	"github.com/otelcol-dedup/otelcol-dedup/cmd/dedupload/loadgen"
)

// ScaleConfig is a fleet-scaling run: loadgen's stream (Records, a share of
// Duplicates, batches of Batch, copies sharing event.id) cut between
// Senders synchronous senders, sender s sending its requests to collector
// s mod the fleet's size. About half of loadgen's copies repeat one of the
// last 2 x Senders requests, so most copies cross collectors, and some
// arrive while their original is still in flight.
type ScaleConfig struct {
	Records    int64
	Duplicates float64
	Batch      int
	Senders    int
	Seed       uint64
}

// ScaleResult is one fleet-scaling run.
type ScaleResult struct {
	Topology   string
	Collectors int
	Senders    int
	// Records is the records sent (all acknowledged), Unique the distinct
	// ones among them: the keys the fleet claims.
	Records, Unique, Requests int64
	// PerCollector is the records each collector took, by its counters.
	PerCollector []int64
	Seconds      float64
	Refused      int64
	Counts       DedupCounts
	Redis        RedisCounts
	// RedisNodes are each node's INFO deltas (a Cluster's masters).
	RedisNodes []RedisCounts
	CPU        CPUSplit
}

// RecordsPerSecond is the records the fleet took per second.
func (r ScaleResult) RecordsPerSecond() float64 { return float64(r.Records) / r.Seconds }

// Exact reports whether the fleet let exactly the distinct records through
// and dropped exactly the copies, by its counters.
func (r ScaleResult) Exact() bool {
	return r.Counts.Records["unique"] == r.Unique && r.Counts.Records["duplicate"] == r.Records-r.Unique
}

// RunScale sends cfg's stream through the fleet, which shares redis (emptied
// first), and reads the fleet's counters, the CPU of every process and
// Redis's INFO around it.
func RunScale(ctx context.Context, f Fleet, redis *RedisDeployment, cfg ScaleConfig) (ScaleResult, error) {
	res := ScaleResult{Topology: redis.Topology, Collectors: len(f), Senders: cfg.Senders}
	gen, err := loadgen.NewGenerator(loadgen.Config{Records: cfg.Records, Duplicates: cfg.Duplicates, Batch: cfg.Batch,
		Senders: cfg.Senders, Key: loadgen.KeyEventID, Seed: cfg.Seed})
	if err != nil {
		return res, err
	}
	if err := redis.FlushAll(ctx); err != nil {
		return res, err
	}
	// Connections opened and the scripts loaded, untimed, with records of
	// another seed.
	warm, err := loadgen.NewGenerator(loadgen.Config{Records: int64(cfg.Batch), Batch: cfg.Batch, Key: loadgen.KeyEventID, Seed: cfg.Seed + 1<<32})
	if err != nil {
		return res, err
	}
	for _, c := range f {
		if _, err := c.Send(ctx, plogotlp.NewExportRequestFromLogs(warm.Batch(0).Logs)); err != nil {
			return res, fmt.Errorf("warm-up: %w", err)
		}
	}
	nodesBefore, err := nodeCounts(ctx, redis)
	if err != nil {
		return res, err
	}
	before, err := takeFleetReading(ctx, f, redis)
	if err != nil {
		return res, err
	}
	var refused, requests atomic.Int64
	errs := make([]error, cfg.Senders)
	t0 := time.Now()
	var wg sync.WaitGroup
	for s := range cfg.Senders {
		c := f[s%len(f)]
		wg.Go(func() {
			for b := int64(s); b < gen.Batches(); b += int64(cfg.Senders) {
				n, err := c.Send(ctx, plogotlp.NewExportRequestFromLogs(gen.Batch(b).Logs))
				refused.Add(int64(n))
				requests.Add(1)
				if err != nil {
					errs[s] = fmt.Errorf("sender %d, request %d, collector pid %d: %w", s, b, c.PID, err)
					return
				}
			}
		})
	}
	wg.Wait()
	res.Seconds = time.Since(t0).Seconds()
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	after, err := takeFleetReading(ctx, f, redis)
	if err != nil {
		return res, err
	}
	nodesAfter, err := nodeCounts(ctx, redis)
	if err != nil {
		return res, err
	}
	res.Records, res.Unique, res.Requests, res.Refused = gen.Records(), gen.Uniques(), requests.Load(), refused.Load()
	d, err := after.sub(before)
	res.Counts, res.Redis, res.CPU = d.counts, d.redis, d.cpu()
	for _, c := range d.each {
		var n int64
		for _, v := range c.Records {
			n += v
		}
		res.PerCollector = append(res.PerCollector, n)
	}
	for i := range nodesAfter {
		res.RedisNodes = append(res.RedisNodes, nodesAfter[i].sub(nodesBefore[i]))
	}
	return res, err
}

func nodeCounts(ctx context.Context, redis *RedisDeployment) ([]RedisCounts, error) {
	_, per, err := redis.Counts(ctx)
	return per, err
}
