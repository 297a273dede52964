package claim

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.uber.org/zap"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/redistier"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/throttle"
)

// SharedOptions are the shared tier's settings.
type SharedOptions struct {
	// Tier is the Redis tier's; the engine sets its window, clock and
	// callbacks.
	Tier redistier.Options
	// Refuse refuses a batch the shared tier cannot answer for (on_error:
	// refuse), for retry; else it is delivered on the local tier's word
	// (pass).
	Refuse bool
	// Forget drops what the processor cached of Redis (the replica
	// elections) when a server that may have lost it answers; nil: nothing.
	Forget func()
}

// SharedTier is the Redis tier and what the processor logs, reports and
// forgets as Redis changes.
type SharedTier struct {
	*redistier.Tier
	opts    SharedOptions
	prefix  string
	logger  *zap.Logger
	now     func() int64
	host    atomic.Pointer[component.Host] // set at start, for status reports
	refusal atomic.Pointer[string]         // the fix of the refusal reported, nil while Redis accepts (see denied)
	log     *redisLogSink                  // go-redis's lines, while this tier runs (redislog.go)
	failed  *throttle.Log                  // a claim, commit, release or election that failed
}

func newSharedTier(so SharedOptions, opts Options, r *Rounds) *SharedTier {
	s := &SharedTier{
		opts: so, prefix: so.Tier.KeyPrefix, logger: opts.Logger, now: r.Now,
		log:    newRedisLogSink(opts.Logger, r.Now),
		failed: throttle.New(opts.Logger, "dedup: shared tier (redis) failed"),
	}
	to := so.Tier
	to.Window, to.Clock = opts.Window, opts.Clock
	to.Observe = opts.Observer.Redis
	to.OnTopology = s.topologyFound
	to.OnWriteError = func(err error) {
		s.Failed(s.now(), err, zap.String("op", "write"))
		s.answered(err)
	}
	to.OnNewServer, to.OnShape = s.newServer, s.shapeChanged
	s.Tier = redistier.New(to)
	return s
}

// Refuses reports whether a batch the tier cannot answer for is refused
// (on_error: refuse), rather than delivered on the local tier's word.
func (s *SharedTier) Refuses() bool { return s.opts.Refuse }

// onError is the on_error setting, for log lines.
func (s *SharedTier) onError() zap.Field {
	if s.opts.Refuse {
		return zap.String("on_error", "refuse")
	}
	return zap.String("on_error", "pass")
}

// Failed logs a call of the tier that failed at now, at most once a
// throttle.Interval.
func (s *SharedTier) Failed(now int64, err error, fields ...zap.Field) {
	s.failed.Log(now, err, fields...)
}

// start connects the shared tier; a Redis that does not answer leaves batches
// to on_error, as any outage, and so does one that refuses the collector
// (see denied).
func (s *SharedTier) start(ctx context.Context, host component.Host) error {
	s.host.Store(&host)
	goRedisLog.add(s.log)
	if err := s.Start(ctx); err != nil {
		goRedisLog.remove(s.log)
		return fmt.Errorf("dedup: %w", err)
	}
	fields := []zap.Field{zap.Strings("endpoints", s.opts.Tier.Endpoints), zap.String("master_name", s.opts.Tier.MasterName), zap.String("key_prefix", s.prefix)}
	mode := s.Mode()
	if mode == "" {
		if err := s.Unknown(); redistier.Denied(err) {
			s.denied(err)
		} else {
			s.logger.Warn("dedup: shared tier: Redis did not answer at start; until it does, batches follow redis.on_error",
				append(fields, s.onError(), zap.Error(err))...)
		}
		return nil
	}
	s.logger.Info("dedup: shared tier connected", append(fields, zap.String("mode", string(mode)))...)
	s.adopted()
	if err := s.Access(ctx); err != nil {
		s.denied(err)
	}
	warnings, unchecked := s.Durability(ctx)
	for _, w := range warnings {
		s.logger.Warn("dedup: shared tier: "+w, zap.String("key_prefix", s.prefix))
	}
	if unchecked != "" {
		// The fleet's ACL refuses CONFIG GET on purpose: not a warning.
		s.logger.Info("dedup: shared tier: " + unchecked)
	}
	return nil
}

// Close closes the tier; go-redis's lines go to another tier's logger.
func (s *SharedTier) Close() error {
	defer goRedisLog.remove(s.log)
	return s.Tier.Close()
}

// topologyFound reports what the tier learns once Redis answers: a refusal
// is recoverable (see denied), a bad configuration permanent.
func (s *SharedTier) topologyFound(mode redistier.Mode, err error) {
	switch {
	case err == nil:
		s.logger.Info("dedup: shared tier connected: Redis answered", zap.String("mode", string(mode)), zap.Strings("endpoints", s.opts.Tier.Endpoints))
		s.adopted()
		s.answered(s.Access(context.Background()))
		return
	case redistier.Denied(err):
		s.denied(err)
		return
	}
	s.logger.Error("dedup: shared tier cannot work with what Redis answered; batches follow redis.on_error until the configuration is fixed",
		zap.Error(err), s.onError())
	s.report(componentstatus.NewPermanentErrorEvent(fmt.Errorf("dedup: %w", err)))
}

// answered follows what Redis answers a claim (or a write, the access check):
// a refusal is reported (denied); a success after a refusal ends it.
func (s *SharedTier) answered(err error) {
	switch {
	case err == nil:
		// Load first: a Swap per batch would contend.
		if s.refusal.Load() != nil && s.refusal.Swap(nil) != nil {
			s.logger.Info("dedup: shared tier: Redis accepts the collector again", zap.String("username", s.opts.Tier.Username))
			s.report(componentstatus.NewEvent(componentstatus.StatusOK))
		}
	case redistier.Denied(err):
		s.denied(err)
	}
}

// denied says, once until Redis accepts the collector again or refuses it
// for another reason, that it refuses the credentials or a permission, with
// the fix: an error line, and a recoverable error status that health_check
// shows.
//
// Why the start does not fail: the fix may be Redis's (a user created on a
// replica that a failover promoted, a password rotated there first, an ACL
// rule), and once made, go-redis authenticates each new connection again and
// the tier works without a restart; a failed start would stop every pipeline
// of the collector, and a fleet sharing the password would crash-loop, where
// redis.on_error promises that a shared tier that cannot work costs copies
// (pass) or retries (refuse), not the collector. Why recoverable, not
// permanent: a permanent error status never returns to OK (the collector's
// status machine), so health would keep reporting a tier that works again.
func (s *SharedTier) denied(err error) {
	fix := fmt.Sprintf("give the ACL user what the shared tier needs, on every master and replica, with keys matching redis.key_prefix %q (docs/security.md)", s.prefix)
	if redis.IsAuthError(err) {
		fix = "set redis.username and redis.password to a user Redis has (ACL users are per server: create it on every master and replica), or redis.password alone to requirepass's password"
	}
	if old := s.refusal.Load(); old != nil && *old == fix || !s.refusal.CompareAndSwap(old, &fix) {
		return
	}
	s.logger.Error("dedup: shared tier: Redis refuses the collector's credentials or permissions; batches follow redis.on_error until it accepts them",
		zap.Error(err), zap.String("fix", fix), zap.String("username", s.opts.Tier.Username), s.onError())
	s.report(componentstatus.NewRecoverableErrorEvent(fmt.Errorf("dedup: Redis refuses the collector (%w); %s", err, fix)))
}

// report sends a status event to the host, once started.
func (s *SharedTier) report(ev *componentstatus.Event) {
	if host := s.host.Load(); host != nil {
		componentstatus.ReportStatus(*host, ev)
	}
}

// adopted says once if the layout in Redis is not the one this collector's
// settings would have created: the first collector of a key prefix sets it.
func (s *SharedTier) adopted() {
	if shape, ok := s.Shape(); ok && shape.Tags > 0 && shape.Tags != s.opts.Tier.ClusterSlots {
		s.logger.Warn("dedup: shared tier: the layout in Redis spreads its keys over another number of hash tags than redis.cluster_slots; "+
			"this collector uses the layout's, as every collector of the key prefix does (a new number takes a new redis.key_prefix)",
			zap.Int("layout_tags", shape.Tags), zap.Int("cluster_slots", s.opts.Tier.ClusterSlots), zap.String("key_prefix", s.prefix))
	}
}

// shapeChanged is the tier's OnShape: the layout's keys were deleted and
// another collector wrote its shape anew.
func (s *SharedTier) shapeChanged(now, was redistier.Shape) {
	s.logger.Warn("dedup: shared tier: the layout's shape in Redis changed, its keys were deleted (a FLUSHALL, or a restart without persistence); "+
		"this collector uses the new one, so that the fleet agrees again",
		zap.Int("layout_tags", now.Tags), zap.Int("was", was.Tags), zap.String("key_prefix", s.prefix))
}

// newServer is the tier's OnNewServer: a master restarted or failed over may
// have lost the elections cached here; until asked again, another collector
// could elect another replica, each dropping the other's points.
func (s *SharedTier) newServer(runID string) {
	s.logger.Warn("dedup: shared tier: a Redis server not seen before answers (a restart or a failover): what it had may be lost; cached replica elections are asked again",
		zap.String("run_id", runID))
	if s.opts.Forget != nil {
		s.opts.Forget()
	}
}
