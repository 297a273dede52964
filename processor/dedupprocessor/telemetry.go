package dedupprocessor

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/claim"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/election"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/redistier"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/throttle"
)

const scopeName = "github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor"

// telemetry holds an instance's instruments; every series carries component ID
// and signal itself: as scope attributes Prometheus would drop them.
type telemetry struct {
	records    metric.Int64Counter
	duplicates metric.Int64Counter
	released   metric.Int64Counter
	stacked    metric.Int64Counter
	waits      metric.Float64Histogram
	waitOpts   [numWaitResults]metric.RecordOption

	outcomeOpts [claim.NumOutcomes]metric.AddOption
	caughtOpts  [claim.NumCaughtBy]metric.AddOption
	baseOpt     metric.MeasurementOption

	redisRequests  metric.Int64Counter
	redisDuration  metric.Float64Histogram
	redisUnchecked metric.Int64Counter
	unidentified   metric.Int64Counter
	redisOpts      map[string]redisOpts // by "op/result"
	base           series

	unidentifiedOpts [numUnidentified]metric.AddOption // by reason, as unidentifiedLog
	unidentifiedLog  [numUnidentified]*throttle.Log
	authAttributes   []string

	meter  metric.Meter
	copies *copyTelemetry // ages and sources of the copies
}

// waitResult is how a batch's wait ended; the wait_duration attribute.
type waitResult int

const (
	waitSettled waitResult = iota
	waitRefused
	numWaitResults
)

var waitResultNames = [numWaitResults]string{"settled", "refused"}

type redisOpts struct { // one option each (see addEach)
	add    []metric.AddOption
	record []metric.RecordOption
}

func newTelemetry(set component.TelemetrySettings, id component.ID, signal string, cfg *Config, keyed bool) (*telemetry, error) {
	meter := set.MeterProvider.Meter(scopeName)
	t := &telemetry{meter: meter, base: series{
		attribute.String("processor", id.String()),
		attribute.String("otel.signal", signal),
	}}
	t.baseOpt = t.base.with()
	labelled(t.base, t.outcomeOpts[:], "outcome", claim.OutcomeNames[:])
	labelled(t.base, t.caughtOpts[:], "caught_by", claim.CaughtByNames[:])
	labelled(t.base, t.waitOpts[:], "result", waitResultNames[:])
	labelled(t.base, t.unidentifiedOpts[:], "reason", unidentifiedNames[:])
	for i := range t.unidentifiedLog {
		t.unidentifiedLog[i] = throttle.New(set.Logger, unidentifiedFix[i])
	}
	t.authAttributes = cfg.AuthAttributes
	var errs error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit(unit))
		errs = errors.Join(errs, err)
		return c
	}
	seconds := func(name, desc string, bounds ...float64) metric.Float64Histogram {
		h, err := meter.Float64Histogram(name, metric.WithDescription(desc), metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(bounds...))
		errs = errors.Join(errs, err)
		return h
	}
	t.records = counter("otelcol_processor_dedup_records", "{records}",
		"Records the dedup processor saw, by outcome: unique, duplicate, missing_key, skipped, key_error.")
	t.duplicates = counter("otelcol_processor_dedup_duplicates", "{records}",
		"Duplicate records, by what caught them (label caught_by): batch (a copy earlier in the same batch), local (the local cache), redis (the shared tier), election (a data point of a replica that is not its cluster's elected one).")
	t.released = counter("otelcol_processor_dedup_released", "{keys}",
		"Keys released because the next consumer refused the batch that claimed them.")
	t.stacked = counter("otelcol_processor_dedup_stacked_processors", "{batches}",
		"Batches the next consumer refused because a dedup processor after this one waited for this batch's own claims: two stacked dedup processors share one key space in Redis and stall each other.")
	t.waits = seconds("otelcol_processor_dedup_wait_duration",
		"Seconds a batch waited for other batches' pending claims on its records, by how the wait ended: settled (the batch went on), refused (returned to the sender for retry after pending_wait).",
		0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
	t.redisRequests = counter("otelcol_processor_dedup_redis_requests", "{requests}",
		"Round trips to the shared tier, by op (claim, recheck, commit, release, renew, elect) and result (ok, error, timeout, skipped: breaker open); result lost counts claims that ended before their commit or renewal reached them.")
	t.redisDuration = seconds("otelcol_processor_dedup_redis_duration",
		"Duration of round trips to the shared tier, by op.",
		0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)
	t.redisUnchecked = counter("otelcol_processor_dedup_redis_unchecked", "{records}",
		"Records delivered on the local cache's word alone because the shared tier could not answer for them (redis.on_error: pass): another collector may deliver a copy of each.")
	t.unidentified = counter("otelcol_processor_dedup_unidentified_records", "{records}",
		"Records whose request lacked the auth_attributes identity, by reason: unauthenticated (no authenticated identity: a receiver without auth, or a batch processor in front of dedup), missing_attribute (the authenticator set no value for one of the attributes); they are deduplicated in one partition shared by all such requests.")
	var err error
	t.copies, err = newCopyTelemetry(meter, t.base, cfg, keyed, set.Logger)
	errs = errors.Join(errs, err)
	if errs != nil {
		return nil, errs
	}
	t.redisOpts = map[string]redisOpts{}
	for _, op := range []string{redistier.OpClaim, redistier.OpRecheck, redistier.OpCommit, redistier.OpRelease, redistier.OpRenew, redistier.OpElect} {
		for _, res := range []string{redistier.ResultOK, redistier.ResultError, redistier.ResultTimeout, redistier.ResultSkipped, redistier.ResultLost} {
			t.redisOpts[op+"/"+res] = redisOpts{
				add:    []metric.AddOption{t.base.with(attribute.String("op", op), attribute.String("result", res))},
				record: []metric.RecordOption{t.base.with(attribute.String("op", op))},
			}
		}
	}
	return t, nil
}

// observe registers the gauges of what e's tiers and table (nil: no replica
// election) hold, read at each collection.
func (t *telemetry) observe(e *claim.Engine, table *election.Table) (metric.Registration, error) {
	meter := t.meter
	var errs error
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		g, err := meter.Int64ObservableGauge(name, metric.WithDescription(desc), metric.WithUnit(unit))
		errs = errors.Join(errs, err)
		return g
	}
	entries := gauge("otelcol_processor_dedup_cache_entries", "{keys}", "Keys held in the local cache.")
	cacheBytes := gauge("otelcol_processor_dedup_cache_bytes", "By",
		"Memory the local cache takes outside the Go heap (its ring and index): memory_limiter does not see it.")
	evictions, err := meter.Int64ObservableCounter("otelcol_processor_dedup_cache_evictions",
		metric.WithDescription("Keys evicted from the full local cache before their window ended; a sign cache.max_entries is too small."),
		metric.WithUnit("{keys}"))
	errs = errors.Join(errs, err)
	breaker := gauge("otelcol_processor_dedup_redis_breaker_state", "1",
		"The circuit breaker of each node of the shared tier (label node: a Cluster master's address, a standalone server's endpoint, a Sentinel master's name): 0 closed, 1 half-open (probing), 2 open (the node skipped).")
	observed := []metric.Observable{entries, cacheBytes, evictions, breaker}
	var elected metric.Int64ObservableGauge
	if table != nil {
		elected = gauge("otelcol_processor_dedup_elected_replica", "{clusters}",
			"The replica elected for each cluster, as a series per cluster and replica label value; the value is the number of tenants whose cluster of that name elected that replica.")
		observed = append(observed, elected)
	}
	if errs != nil {
		return nil, errs
	}
	cache, shared, now := e.Cache(), e.Shared(), e.Rounds().Now
	return meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(entries, int64(cache.Len(now())), t.baseOpt)
		o.ObserveInt64(cacheBytes, cache.Bytes(), t.baseOpt)
		o.ObserveInt64(evictions, cache.Evictions(), t.baseOpt)
		if shared != nil {
			for _, nb := range shared.Breakers() {
				o.ObserveInt64(breaker, int64(nb.State), t.base.with(attribute.String("node", nb.Node)))
			}
		}
		if table != nil {
			// The live elections, at most max_clusters series.
			type pair struct{ cluster, replica string }
			counts := map[pair]int64{}
			table.Each(now(), func(cluster, replica string) {
				p := pair{cluster, replica}
				if _, ok := counts[p]; ok || len(counts) < table.MaxClusters() {
					counts[p]++
				}
			})
			for p, n := range counts {
				o.ObserveInt64(elected, n, t.base.with(attribute.String("cluster", p.cluster), attribute.String("replica", p.replica)))
			}
		}
		return nil
	}, observed...)
}

// Delivered adds an accepted call's counts (claim.Observer).
func (t *telemetry) Delivered(ctx context.Context, b *claim.Batch) {
	c := b.Counts()
	if b.Unidentified {
		var n int64
		for _, o := range c.Outcomes {
			n += o
		}
		why, attr, _ := whyUnidentified(client.FromContext(ctx).Auth, t.authAttributes)
		t.unidentified.Add(ctx, n, t.unidentifiedOpts[why:why+1]...)
		fields := []zap.Field{zap.Strings("auth_attributes", t.authAttributes), zap.Int64("records", n)}
		if attr != "" {
			fields = append(fields, zap.String("missing", attr))
		}
		t.unidentifiedLog[why].Log(b.Now(), nil, fields...)
	}
	t.copies.record(ctx, b)
	addEach(ctx, t.records, c.Outcomes[:], t.outcomeOpts[:])
	addEach(ctx, t.duplicates, c.Caught[:], t.caughtOpts[:])
	if n := c.Unchecked; n > 0 {
		t.redisUnchecked.Add(ctx, int64(n), t.baseOpt)
	}
}

// Released counts keys given up after the next consumer refused a call
// (claim.Observer).
func (t *telemetry) Released(ctx context.Context, keys int) {
	t.released.Add(ctx, int64(keys), t.baseOpt)
}

// Stacked counts a refusal that names the batch's own shared claim
// (claim.Observer).
func (t *telemetry) Stacked(ctx context.Context) { t.stacked.Add(ctx, 1, t.baseOpt) }

// Waited records a batch's wait (claim.Observer).
func (t *telemetry) Waited(ctx context.Context, d time.Duration, refused bool) {
	r := waitSettled
	if refused {
		r = waitRefused
	}
	t.waits.Record(ctx, d.Seconds(), t.waitOpts[r:r+1]...)
}

// Redis counts and times a round trip of the shared tier (claim.Observer).
func (t *telemetry) Redis(op, result string, d time.Duration) {
	opts, ok := t.redisOpts[op+"/"+result]
	if !ok {
		return
	}
	t.redisRequests.Add(context.Background(), 1, opts.add...)
	if d > 0 { // zero: no round trip was made
		t.redisDuration.Record(context.Background(), d.Seconds(), opts.record...)
	}
}
