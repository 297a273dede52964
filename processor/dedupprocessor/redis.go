package dedupprocessor

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.uber.org/zap"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/identity"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/redistier"
)

// defaultKeyPrefix namespaces the shared keys by component ID and the settings
// that shape identities: two pipelines' dedup processors must each deliver
// every record, and processors configured apart could hash different records
// alike. Settings that do not change what a digest means (the window, the
// lease, the Redis settings) are not in it: a rolling change of them keeps
// a fleet on one key space. It is short (Redis spends CPU per key); 32 bits
// keep processors apart.
func defaultKeyPrefix(id component.ID, cfg *Config) string {
	var e identity.Encoder
	e.String(id.String())
	e.Uint(identityFingerprint(cfg))
	h := e.Digest().Hi
	return fmt.Sprintf("dedup:%08x:", uint32(h^h>>32))
}

// identityEncoding versions the digests' encoding, in the fingerprint: bump
// it on any change to it.
const identityEncoding = 1

// identityFingerprint hashes what a digest means: no snapshot or key of other
// settings is reused.
func identityFingerprint(cfg *Config) uint64 {
	var e identity.Encoder
	e.Uint(identityEncoding)
	for _, list := range [][]string{
		cfg.MetadataKeys, cfg.AuthAttributes,
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

// sharedStage is the shared tier and what the processor logs, reports and
// forgets as Redis changes.
type sharedStage struct {
	*redistier.Tier
	cfg     *RedisConfig
	prefix  string
	logger  *zap.Logger
	host    atomic.Pointer[component.Host] // set at start, for status reports
	forget  func()                         // drops what the processor cached of Redis; set before start
	refusal atomic.Pointer[string]         // the fix of the refusal reported, nil while Redis accepts (see denied)
	log     *redisLogSink                  // go-redis's lines, while this tier runs (redislog.go)
}

func newSharedStage(cfg *Config, r *RedisConfig, id component.ID, logger *zap.Logger, b *batches) (*sharedStage, error) {
	var tlsCfg *tls.Config
	if t := r.TLS.Get(); t != nil {
		var err error
		if tlsCfg, err = t.LoadTLSConfig(context.Background()); err != nil {
			return nil, fmt.Errorf("dedup: redis.tls: %w", err)
		}
	}
	s := &sharedStage{cfg: r, prefix: cmp.Or(r.KeyPrefix, defaultKeyPrefix(id, cfg)), logger: logger, log: newRedisLogSink(logger, b.now)}
	s.Tier = redistier.New(redistier.Options{
		Endpoints:    r.Endpoints,
		Mode:         redistier.Mode(r.Mode),
		MasterName:   r.MasterName,
		Username:     r.Username,
		Password:     string(r.Password),
		DB:           r.DB,
		TLS:          tlsCfg,
		KeyPrefix:    s.prefix,
		ClusterSlots: r.ClusterSlots,
		Timeout:      r.Timeout,
		Window:       cfg.Window,
		Lease:        r.Lease,
		// The telemetry is made after the tier, and observes its breakers.
		Observe:    func(op, result string, d time.Duration) { b.tel.observeRedis(op, result, d) },
		Clock:      b.clock,
		OnTopology: s.topologyFound,
		OnWriteError: func(err error) {
			b.tierError.log(b.now(), err, zap.String("op", "write"))
			s.answered(err)
		},
		OnNewServer: s.newServer,
		OnShape:     s.shapeChanged,
	})
	return s, nil
}

// start connects the shared tier; a Redis that does not answer leaves batches
// to on_error, as any outage, and so does one that refuses the collector
// (see denied).
func (s *sharedStage) start(ctx context.Context, host component.Host) error {
	s.host.Store(&host)
	goRedisLog.add(s.log)
	if err := s.Tier.Start(ctx); err != nil {
		goRedisLog.remove(s.log)
		return fmt.Errorf("dedup: %w", err)
	}
	fields := []zap.Field{zap.Strings("endpoints", s.cfg.Endpoints), zap.String("master_name", s.cfg.MasterName), zap.String("key_prefix", s.prefix)}
	mode := s.Mode()
	if mode == "" {
		if err := s.Unknown(); redistier.Denied(err) {
			s.denied(err)
		} else {
			s.logger.Warn("dedup: shared tier: Redis did not answer at start; until it does, batches follow redis.on_error",
				append(fields, zap.String("on_error", string(s.cfg.OnError)), zap.Error(err))...)
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
func (s *sharedStage) Close() error {
	defer goRedisLog.remove(s.log)
	return s.Tier.Close()
}

// topologyFound reports what the tier learns once Redis answers: a refusal
// is recoverable (see denied), a bad configuration permanent.
func (s *sharedStage) topologyFound(mode redistier.Mode, err error) {
	switch {
	case err == nil:
		s.logger.Info("dedup: shared tier connected: Redis answered", zap.String("mode", string(mode)), zap.Strings("endpoints", s.cfg.Endpoints))
		s.adopted()
		s.answered(s.Access(context.Background()))
		return
	case redistier.Denied(err):
		s.denied(err)
		return
	}
	s.logger.Error("dedup: shared tier cannot work with what Redis answered; batches follow redis.on_error until the configuration is fixed",
		zap.Error(err), zap.String("on_error", string(s.cfg.OnError)))
	s.report(componentstatus.NewPermanentErrorEvent(fmt.Errorf("dedup: %w", err)))
}

// answered follows what Redis answers a claim (or a write, the access check):
// a refusal is reported (denied); a success after a refusal ends it.
func (s *sharedStage) answered(err error) {
	switch {
	case err == nil:
		// Load first: a Swap per batch would contend.
		if s.refusal.Load() != nil && s.refusal.Swap(nil) != nil {
			s.logger.Info("dedup: shared tier: Redis accepts the collector again", zap.String("username", s.cfg.Username))
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
func (s *sharedStage) denied(err error) {
	fix := fmt.Sprintf("give the ACL user what the shared tier needs, on every master and replica, with keys matching redis.key_prefix %q (docs/security.md)", s.prefix)
	if redis.IsAuthError(err) {
		fix = "set redis.username and redis.password to a user Redis has (ACL users are per server: create it on every master and replica), or redis.password alone to requirepass's password"
	}
	if old := s.refusal.Load(); old != nil && *old == fix || !s.refusal.CompareAndSwap(old, &fix) {
		return
	}
	s.logger.Error("dedup: shared tier: Redis refuses the collector's credentials or permissions; batches follow redis.on_error until it accepts them",
		zap.Error(err), zap.String("fix", fix), zap.String("username", s.cfg.Username), zap.String("on_error", string(s.cfg.OnError)))
	s.report(componentstatus.NewRecoverableErrorEvent(fmt.Errorf("dedup: Redis refuses the collector (%w); %s", err, fix)))
}

// report sends a status event to the host, once started.
func (s *sharedStage) report(ev *componentstatus.Event) {
	if host := s.host.Load(); host != nil {
		componentstatus.ReportStatus(*host, ev)
	}
}

// adopted says once if the layout in Redis is not the one this collector's
// settings would have created: the first collector of a key prefix sets it.
func (s *sharedStage) adopted() {
	if shape, ok := s.Shape(); ok && shape.Tags > 0 && shape.Tags != s.cfg.ClusterSlots {
		s.logger.Warn("dedup: shared tier: the layout in Redis spreads its keys over another number of hash tags than redis.cluster_slots; "+
			"this collector uses the layout's, as every collector of the key prefix does (a new number takes a new redis.key_prefix)",
			zap.Int("layout_tags", shape.Tags), zap.Int("cluster_slots", s.cfg.ClusterSlots), zap.String("key_prefix", s.prefix))
	}
}

// shapeChanged is the tier's OnShape: the layout's keys were deleted and
// another collector wrote its shape anew.
func (s *sharedStage) shapeChanged(now, was redistier.Shape) {
	s.logger.Warn("dedup: shared tier: the layout's shape in Redis changed, its keys were deleted (a FLUSHALL, or a restart without persistence); "+
		"this collector uses the new one, so that the fleet agrees again",
		zap.Int("layout_tags", now.Tags), zap.Int("was", was.Tags), zap.String("key_prefix", s.prefix))
}

// newServer is the tier's OnNewServer: a master restarted or failed over may
// have lost the elections cached here; until asked again, another collector
// could elect another replica, each dropping the other's points.
func (s *sharedStage) newServer(runID string) {
	s.logger.Warn("dedup: shared tier: a Redis server not seen before answers (a restart or a failover): what it had may be lost; cached replica elections are asked again",
		zap.String("run_id", runID))
	if s.forget != nil {
		s.forget()
	}
}

// observeRedis is the tier's Options.Observe.
func (t *telemetry) observeRedis(op, result string, d time.Duration) {
	opts, ok := t.redisOpts[op+"/"+result]
	if !ok {
		return
	}
	t.redisRequests.Add(context.Background(), 1, opts.add...)
	if d > 0 { // zero: no round trip was made
		t.redisDuration.Record(context.Background(), d.Seconds(), opts.record...)
	}
}
