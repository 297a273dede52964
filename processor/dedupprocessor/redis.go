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
//
// It is short on purpose: Redis spends its CPU per key, and a key of 31
// bytes ("dedup:" + 8 hex + ":" + the 16-byte digest) let the shared tier
// move 84-90% of redis-benchmark's SET NX PX rate where the 47-byte keys of
// "otelcol-dedup:" + 16 hex moved 77-80% (make bench, same server, paired
// runs). 32 bits of fingerprint keep configurations apart: two of them
// sharing one Redis collide with probability 2^-32.
func defaultKeyPrefix(cfg *Config) string {
	fp := identityFingerprint(cfg)
	return fmt.Sprintf("dedup:%08x:", uint32(fp^fp>>32))
}

// identityEncoding is the version of how records are encoded into digests.
// It is part of the fingerprint, so a build that encodes differently never
// reuses a snapshot or shared keys of one that did not. 2: small maps are
// encoded sorted, and content identities open with one per-group digest.
const identityEncoding = 2

// identityFingerprint hashes the settings that decide what a digest means:
// a snapshot or a shared key made under other settings is not reused.
func identityFingerprint(cfg *Config) uint64 {
	var e identity.Encoder
	e.Uint(identityEncoding)
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

// errPendingElsewhere is returned when a record of the batch is held by
// another instance's claim that is still pending after redis.pending_wait:
// that instance has not delivered it yet and may never (its next consumer
// may fail, the instance may have died). Dropping the copy could lose the
// record, so the sender is asked to retry: by then the claim is committed
// (the copy is a duplicate), released or past its lease (the copy is new).
var errPendingElsewhere = errors.New("dedup: a record of this batch is being delivered by another collector; retry later")

// settle claims the batch's digests in the local cache, then resolves the
// new local claims against the shared tier in one round trip. A digest
// another instance has delivered becomes a duplicate (tier redis) and is
// remembered locally as not ours; one that another instance is delivering
// right now is waited for, up to redis.pending_wait; the rest stay claimed
// under the batch's token, to be committed or released with the batch.
func (e *engine) settle(ctx context.Context, b *batch) error {
	e.claimAll(b)
	if e.tier == nil || len(b.claimed) == 0 {
		return nil
	}
	b.redisToken = redistier.NewToken()
	if cap(b.answers) < len(b.claimed) {
		b.answers = make([]redistier.Answer, len(b.claimed))
	}
	answers := b.answers[:len(b.claimed)]
	var err error
	if e.cache.ClaimsStayDistinct(len(b.pending)) {
		err = e.tier.ClaimDistinct(ctx, b.redisToken, b.claimed, answers)
	} else {
		err = e.tier.ClaimAnswers(ctx, b.redisToken, b.claimed, answers)
	}
	if err == nil {
		err = e.awaitPending(ctx, b, answers)
	}
	if err != nil {
		return e.tierFailed(ctx, b, err)
	}
	kept := 0
	for i, d := range b.claimed {
		if answers[i] == redistier.Claimed {
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

// awaitPending asks again, with a growing pause, about the digests another
// instance's pending claim holds, until each is committed (a duplicate) or
// freed (now ours), or redis.pending_wait has passed.
func (e *engine) awaitPending(ctx context.Context, b *batch, answers []redistier.Answer) error {
	pause := time.Millisecond
	deadline := time.Now().Add(e.pendingWait)
	for {
		b.waiting, b.waitingAt = b.waiting[:0], b.waitingAt[:0]
		for i, a := range answers {
			if a == redistier.Pending {
				b.waiting = append(b.waiting, b.claimed[i])
				b.waitingAt = append(b.waitingAt, int32(i))
			}
		}
		if len(b.waiting) == 0 {
			return nil
		}
		if time.Now().Add(pause).After(deadline) {
			return errPendingElsewhere
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, 50*time.Millisecond)
		again := answers[len(b.claimed):cap(answers)]
		if len(again) < len(b.waiting) {
			again = make([]redistier.Answer, len(b.waiting))
		}
		again = again[:len(b.waiting)]
		// The same token: a digest this batch already won stays won.
		if err := e.tier.Recheck(ctx, b.redisToken, b.waiting, again); err != nil {
			return err
		}
		for k, a := range again {
			answers[b.waitingAt[k]] = a
		}
	}
}

// tierFailed decides a batch whose claim could not be settled. A claim that
// Redis applied despite a lost reply stays pending until its lease ends;
// the copies it meets meanwhile are refused for retry, never dropped, so it
// needs no release here (which would cost another timeout).
func (e *engine) tierFailed(ctx context.Context, b *batch, err error) error {
	pending := errors.Is(err, errPendingElsewhere)
	if pending || e.redisPolicy == ErrorRefuse || ctx.Err() != nil {
		if pending {
			e.releaseTier(ctx, b)
		}
		b.redisToken = ""
		e.releaseLocal(b)
		if pending {
			e.pendingRefused.log(b.now, err, zap.Int("records", len(b.waiting)))
			return err
		}
		e.tierError.log(b.now, err, zap.String("on_error", string(e.redisPolicy)))
		return fmt.Errorf("%w: %w", errSharedTier, err)
	}
	// pass: the batch is delivered on the local tier's word. A claim that
	// reached Redis despite the error rightly holds its record.
	b.redisToken = ""
	e.tierError.log(b.now, err, zap.String("on_error", "pass"))
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
