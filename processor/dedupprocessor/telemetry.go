package dedupprocessor

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/election"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/redistier"
)

const scopeName = "github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor"

// outcome is what happened to one record; the records counter's attribute.
type outcome int

const (
	outcomeUnique outcome = iota
	outcomeDuplicate
	outcomeMissingKey
	outcomeSkipped
	outcomeKeyError
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"unique", "duplicate", "missing_key", "skipped", "key_error"}

// caughtBy is what caught a duplicate: the duplicates counter's tier attribute.
type caughtBy int

const (
	byBatch caughtBy = iota
	byLocal
	byRedis
	byElection // a data point of a replica that is not its cluster's elected one
	numCaughtBy
)

var caughtByNames = [numCaughtBy]string{"batch", "local", "redis", "election"}

// telemetry holds an instance's instruments; every series carries component ID
// and signal itself: as scope attributes Prometheus would drop them.
type telemetry struct {
	records    metric.Int64Counter
	duplicates metric.Int64Counter
	released   metric.Int64Counter
	stacked    metric.Int64Counter
	waits      metric.Float64Histogram
	waitOpts   [numWaitResults]metric.RecordOption

	outcomeOpts [numOutcomes]metric.AddOption
	caughtOpts  [numCaughtBy]metric.AddOption
	baseOpt     metric.MeasurementOption

	redisRequests  metric.Int64Counter
	redisDuration  metric.Float64Histogram
	redisUnchecked metric.Int64Counter
	unidentified   metric.Int64Counter
	redisOpts      map[string]redisOpts           // by "op/result"
	electionTable  atomic.Pointer[election.Table] // for the elected replicas' gauge
	base           []attribute.KeyValue

	unidentifiedOpts [numUnidentified]metric.AddOption // by reason, as unidentifiedLog
	unidentifiedLog  [numUnidentified]*throttledLog
	authAttributes   []string

	elections     metric.Int64Counter
	electionOpts  [numElectionReasons]metric.AddOption
	undecided     metric.Int64Counter
	undecidedOpts [numUndecidedReasons]metric.AddOption

	registration metric.Registration
	copies       *copyTelemetry // ages and sources of the copies
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

func newTelemetry(set component.TelemetrySettings, id component.ID, signal string, e *engine) (*telemetry, error) {
	meter := set.MeterProvider.Meter(scopeName)
	t := &telemetry{base: []attribute.KeyValue{
		attribute.String("processor", id.String()),
		attribute.String("otel.signal", signal),
	}}
	t.baseOpt = t.with()
	labelled(t, t.electionOpts[:], "reason", electionReasonNames[:])
	labelled(t, t.undecidedOpts[:], "reason", undecidedNames[:])
	labelled(t, t.outcomeOpts[:], "outcome", outcomeNames[:])
	labelled(t, t.caughtOpts[:], "tier", caughtByNames[:])
	labelled(t, t.waitOpts[:], "result", waitResultNames[:])
	labelled(t, t.unidentifiedOpts[:], "reason", unidentifiedNames[:])
	for i := range t.unidentifiedLog {
		t.unidentifiedLog[i] = &throttledLog{logger: set.Logger, msg: unidentifiedFix[i]}
	}
	t.authAttributes = e.cfg.AuthAttributes
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
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		g, err := meter.Int64ObservableGauge(name, metric.WithDescription(desc), metric.WithUnit(unit))
		errs = errors.Join(errs, err)
		return g
	}
	t.records = counter("otelcol_processor_dedup_records", "{records}",
		"Records the dedup processor saw, by outcome: unique, duplicate, missing_key, skipped, key_error.")
	t.duplicates = counter("otelcol_processor_dedup_duplicates", "{records}",
		"Duplicate records, by what caught them (label tier): batch (a copy earlier in the same batch), local (the local cache), redis (the shared tier), election (a data point of a replica that is not its cluster's elected one).")
	t.elections = counter("otelcol_processor_dedup_elections", "{elections}",
		"Replicas elected for a cluster by a delivered batch, by reason: new (no other replica held the cluster), failover (took over from another replica whose election had expired).")
	t.undecided = counter("otelcol_processor_dedup_election_undecided", "{records}",
		"Data points replica election did not decide, by reason: missing_label (no cluster or replica label), cluster_limit (the tenant's max_clusters was reached), unavailable (the shared tier failed under on_error: pass); they go on to the identity dedup.")
	t.released = counter("otelcol_processor_dedup_released", "{keys}",
		"Keys released because the next consumer refused the batch that claimed them.")
	t.stacked = counter("otelcol_processor_dedup_stacked_stages", "{batches}",
		"Batches the next consumer refused because a dedup processor after this one waited for this batch's own claims: two dedup stages share one key space in Redis and stall each other.")
	t.waits = seconds("otelcol_processor_dedup_wait_duration",
		"Seconds a batch waited for other batches' pending claims on its records, by how the wait ended: settled (the batch went on), refused (returned to the sender for retry after pending_wait).",
		0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
	entries := gauge("otelcol_processor_dedup_cache_entries", "{keys}", "Keys held in the local cache.")
	cacheBytes := gauge("otelcol_processor_dedup_cache_bytes", "By",
		"Memory the local cache takes outside the Go heap (its ring and index): memory_limiter does not see it.")
	evictions, err := meter.Int64ObservableCounter("otelcol_processor_dedup_cache_evictions",
		metric.WithDescription("Keys evicted from the full local cache before their window ended; a sign cache.max_entries is too small."),
		metric.WithUnit("{keys}"))
	errs = errors.Join(errs, err)
	t.redisRequests = counter("otelcol_processor_dedup_redis_requests", "{requests}",
		"Round trips to the shared tier, by op (claim, recheck, commit, release, renew, elect) and result (ok, error, timeout, skipped: breaker open); result lost counts claims that ended before their commit or renewal reached them.")
	t.redisDuration = seconds("otelcol_processor_dedup_redis_duration",
		"Duration of round trips to the shared tier, by op.",
		0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)
	t.redisUnchecked = counter("otelcol_processor_dedup_redis_unchecked", "{records}",
		"Records delivered on the local cache's word alone because the shared tier could not answer for them (redis.on_error: pass): another collector may deliver a copy of each.")
	t.unidentified = counter("otelcol_processor_dedup_unidentified_records", "{records}",
		"Records whose request lacked the auth_attributes identity, by reason: unauthenticated (no authenticated identity: a receiver without auth, or a batch processor in front of dedup), missing_attribute (the authenticator set no value for one of the attributes); they are deduplicated in one partition shared by all such requests.")
	breaker := gauge("otelcol_processor_dedup_redis_breaker_state", "1",
		"The circuit breaker of each node of the shared tier (label node: a Cluster master's address, a standalone server's endpoint, a Sentinel master's name): 0 closed, 1 half-open (probing), 2 open (the node skipped).")
	observed := []metric.Observable{entries, cacheBytes, evictions, breaker}
	var elected metric.Int64ObservableGauge
	election := e.cfg.Metrics.ReplicaElection.Get()
	if signal == "metrics" && election != nil {
		elected = gauge("otelcol_processor_dedup_elected_replica", "{clusters}",
			"The replica elected for each cluster, as a series per cluster and replica label value; the value is the number of tenants whose cluster of that name elected that replica.")
		observed = append(observed, elected)
	}
	t.copies, err = newCopyTelemetry(meter, t, e.cfg, signal, set.Logger)
	errs = errors.Join(errs, err)
	if errs != nil {
		return nil, errs
	}
	t.redisOpts = map[string]redisOpts{}
	for _, op := range []string{redistier.OpClaim, redistier.OpRecheck, redistier.OpCommit, redistier.OpRelease, redistier.OpRenew, redistier.OpElect} {
		for _, res := range []string{redistier.ResultOK, redistier.ResultError, redistier.ResultTimeout, redistier.ResultSkipped, redistier.ResultLost} {
			t.redisOpts[op+"/"+res] = redisOpts{
				add:    []metric.AddOption{t.with(attribute.String("op", op), attribute.String("result", res))},
				record: []metric.RecordOption{t.with(attribute.String("op", op))},
			}
		}
	}
	t.registration, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(entries, int64(e.local.Len(e.now())), t.baseOpt)
		o.ObserveInt64(cacheBytes, e.local.Bytes(), t.baseOpt)
		o.ObserveInt64(evictions, e.local.Evictions(), t.baseOpt)
		if e.shared != nil {
			for _, nb := range e.shared.Breakers() {
				o.ObserveInt64(breaker, int64(nb.State), t.with(attribute.String("node", nb.Node)))
			}
		}
		if table := t.electionTable.Load(); table != nil {
			// The live elections, at most max_clusters series.
			type pair struct{ cluster, replica string }
			counts := map[pair]int64{}
			table.Each(e.now(), func(cluster, replica string) {
				p := pair{cluster, replica}
				if _, ok := counts[p]; ok || len(counts) < election.MaxClusters {
					counts[p]++
				}
			})
			for p, n := range counts {
				o.ObserveInt64(elected, n, t.with(attribute.String("cluster", p.cluster), attribute.String("replica", p.replica)))
			}
		}
		return nil
	}, observed...)
	return t, err
}

// with is the attribute set of a series: the base attributes, then kv.
func (t *telemetry) with(kv ...attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(slices.Concat(t.base, kv)...))
}

// labelled sets opts[i] to the series with attribute key = values[i], as an
// AddOption or RecordOption.
func labelled[O any](t *telemetry, opts []O, key string, values []string) {
	for i, v := range values {
		opts[i] = t.with(attribute.String(key, v)).(O)
	}
}

// recordCall adds an accepted call's counts and zeroes them: a second call
// records its own.
func (t *telemetry) recordCall(ctx context.Context, b *batch) {
	if b.unidentified {
		var n int64
		for _, c := range b.outcomes {
			n += c
		}
		why, attr, _ := whyUnidentified(client.FromContext(ctx).Auth, t.authAttributes)
		t.unidentified.Add(ctx, n, t.unidentifiedOpts[why:why+1]...)
		fields := []zap.Field{zap.Strings("auth_attributes", t.authAttributes), zap.Int64("records", n)}
		if attr != "" {
			fields = append(fields, zap.String("missing", attr))
		}
		t.unidentifiedLog[why].log(b.now, nil, fields...)
	}
	t.copies.record(ctx, b)
	addEach(ctx, t.records, b.outcomes[:], t.outcomeOpts[:])
	addEach(ctx, t.duplicates, b.caught[:], t.caughtOpts[:])
	if n := b.unchecked; n > 0 {
		t.redisUnchecked.Add(ctx, int64(n), t.baseOpt)
	}
	b.outcomes, b.caught, b.unchecked = [numOutcomes]int64{}, [numCaughtBy]int64{}, 0
}

// addEach adds each nonzero count under opts[i:i+1] (one option alone would
// make a slice per call).
func addEach(ctx context.Context, c metric.Int64Counter, counts []int64, opts []metric.AddOption) {
	for i, n := range counts {
		if n > 0 {
			c.Add(ctx, n, opts[i:i+1]...)
		}
	}
}

// throttledLog logs a recurring problem at most every throttleInterval, with
// the occurrences since.
type throttledLog struct {
	logger *zap.Logger
	msg    string
	last   atomic.Int64
	count  atomic.Int64
}

const throttleInterval = 10 * time.Second

func (t *throttledLog) log(now int64, err error, fields ...zap.Field) {
	n := t.count.Add(1)
	last := t.last.Load()
	if now-last < int64(throttleInterval) || !t.last.CompareAndSwap(last, now) {
		return
	}
	t.count.Add(-n)
	t.logger.Warn(t.msg, append(fields, zap.Error(err), zap.Int64("occurrences", n))...)
}
