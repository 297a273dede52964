package dedupprocessor

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"go.uber.org/zap"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/identity"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/redistier"
)

// defaultKeyPrefix namespaces the shared tier's keys by the settings that
// shape identities, so that two differently configured dedup processors
// never read each other's keys (key [a] and key [b] could hash alike for
// different records), while every instance of one configuration shares them.
func defaultKeyPrefix(cfg *Config) string {
	return fmt.Sprintf("otelcol-dedup:%016x:", identityFingerprint(cfg))
}

// identityFingerprint hashes the settings that decide what a digest means:
// a snapshot or a shared key made under other settings is not reused.
func identityFingerprint(cfg *Config) uint64 {
	var e identity.Encoder
	e.Int(int64(cfg.Window))
	for _, list := range [][]string{
		cfg.MetadataKeys,
		cfg.Logs.Key, cfg.Logs.Ignore, cfg.Logs.Conditions,
		cfg.Traces.Key, cfg.Traces.Ignore, cfg.Traces.Conditions,
		cfg.Metrics.Key, cfg.Metrics.Ignore, cfg.Metrics.Conditions,
	} {
		e.Uint(uint64(len(list)))
		for _, s := range list {
			e.String(s)
		}
	}
	e.String(string(cfg.OnMissingKey))
	return e.Digest().Hi
}

// redisLog routes go-redis's own log lines (reconnects, pool errors) to the
// collector's logger instead of stderr. go-redis has one process-wide
// logger, so the first processor with a shared tier sets it.
var redisLog sync.Once

type zapRedisLogger struct{ logger *zap.Logger }

func (l zapRedisLogger) Printf(_ context.Context, format string, v ...any) {
	l.logger.Warn(fmt.Sprintf(format, v...))
}

// startTier connects the shared tier, if one is configured. New makes no
// network call, so a Redis that is down at start-up does not fail the
// collector: it degrades per on_error like any later outage.
func (e *engine) startTier(ctx context.Context) error {
	r := e.cfg.Redis.Get()
	if r == nil {
		return nil
	}
	var tlsCfg *tls.Config
	if t := r.TLS.Get(); t != nil {
		var err error
		if tlsCfg, err = t.LoadTLSConfig(ctx); err != nil {
			return fmt.Errorf("dedup: redis.tls: %w", err)
		}
	}
	prefix := r.KeyPrefix
	if prefix == "" {
		prefix = defaultKeyPrefix(e.cfg)
	}
	tier, err := redistier.New(redistier.Options{
		Endpoints:  r.Endpoints,
		MasterName: r.MasterName,
		Username:   r.Username,
		Password:   string(r.Password),
		DB:         r.DB,
		TLS:        tlsCfg,
		KeyPrefix:  prefix,
		Timeout:    r.Timeout,
		Window:     e.cfg.Window,
		Lease:      r.Lease,
		Observe:    e.tel.observeRedis,
	})
	if err != nil {
		return fmt.Errorf("dedup: redis: %w", err)
	}
	redisLog.Do(func() {
		redis.SetLogger(zapRedisLogger{logger: e.logger.With(zap.String("client", "go-redis"))})
	})
	e.tier = tier
	e.tel.observeBreaker(tier)
	e.logger.Info("dedup: shared tier configured", zap.Strings("endpoints", r.Endpoints),
		zap.String("master_name", r.MasterName), zap.String("key_prefix", prefix))
	return nil
}

// errSharedTier is returned to senders under on_error: refuse. The
// receivers turn it into a retryable status (gRPC Unavailable, HTTP 503).
var errSharedTier = errors.New("dedup: shared tier unavailable; retry later")

// settle claims the batch's digests in the local cache, then resolves the
// new local claims against the shared tier in one round trip. A digest another instance holds becomes a duplicate
// (tier redis) and is remembered locally as not ours; the rest stay claimed
// under the batch's token, to be committed or released with the batch.
func (e *engine) settle(ctx context.Context, b *batch) error {
	e.claimAll(b)
	if e.tier == nil || len(b.claimed) == 0 {
		return nil
	}
	b.redisToken = redistier.NewToken()
	if cap(b.answers) < len(b.claimed) {
		b.answers = make([]bool, len(b.claimed))
	}
	answers := b.answers[:len(b.claimed)]
	if err := e.tier.Claim(ctx, b.redisToken, b.claimed, answers); err != nil {
		if e.redisPolicy == ErrorRefuse {
			// The sender will retry this batch. If the reply was lost after
			// Redis applied some claims, they would hold the retry's records
			// as pending copies until the lease ends: release them now.
			if !errors.Is(err, redistier.ErrBreakerOpen) {
				e.releaseTier(ctx, b)
			}
			b.redisToken = ""
			e.releaseLocal(b)
			e.tierError.log(b.now, err, zap.String("on_error", "refuse"))
			return fmt.Errorf("%w: %w", errSharedTier, err)
		}
		// pass: the batch is delivered on the local tier's word. A claim
		// that reached Redis despite the error rightly holds its record.
		b.redisToken = ""
		e.tierError.log(b.now, err, zap.String("on_error", "pass"))
		return nil
	}
	kept := 0
	for i, d := range b.claimed {
		if answers[i] {
			b.claimed[kept], b.claimedAt[kept] = d, b.claimedAt[i]
			kept++
			continue
		}
		e.cache.Disown(d, b.token)
		b.outcomes[outcomeUnique]--
		e.duplicate(b, int(b.claimedAt[i]), tierRedis)
	}
	b.claimed, b.claimedAt = b.claimed[:kept], b.claimedAt[:kept]
	return nil
}

// commitTier makes the batch's shared claims last their window. A failed
// commit leaves them pending: they expire at the end of the lease, after
// which a copy would be let through again, so it is logged and counted.
func (e *engine) commitTier(ctx context.Context, b *batch) {
	if b.redisToken == "" || len(b.claimed) == 0 {
		return
	}
	if err := e.tier.Commit(context.WithoutCancel(ctx), b.redisToken, b.claimed); err != nil {
		e.tierError.log(b.now, err, zap.String("op", redistier.OpCommit))
	}
}

func (e *engine) releaseTier(ctx context.Context, b *batch) {
	if b.redisToken == "" || len(b.claimed) == 0 {
		return
	}
	if err := e.tier.Release(context.WithoutCancel(ctx), b.redisToken, b.claimed); err != nil {
		e.tierError.log(b.now, err, zap.String("op", redistier.OpRelease))
	}
}

func (e *engine) stopTier() error {
	if e.tier == nil {
		return nil
	}
	err := e.tier.Close()
	e.tier = nil
	return err
}

// redisTelemetry is set up by newTelemetry; these are the hooks the tier
// calls.
func (t *telemetry) observeRedis(op, result string, d time.Duration) {
	ctx := context.Background()
	opts, ok := t.redisOpts[op+"/"+result]
	if !ok {
		return
	}
	t.redisRequests.Add(ctx, 1, opts.add)
	if result != redistier.ResultSkipped {
		t.redisDuration.Record(ctx, d.Seconds(), opts.record)
	}
}
