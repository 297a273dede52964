package dedupprocessor

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.uber.org/zap"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/identity"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/redistier"
)

// defaultKeyPrefix namespaces the shared keys by component ID and the settings
// that shape identities: two pipelines' dedup processors must each deliver
// every record, and processors configured apart could hash different records
// alike. It is short (Redis spends CPU per key); 32 bits keep processors apart.
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
	e.Int(int64(cfg.Window))
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

// redisLog routes go-redis's process-wide log to the first shared tier's
// logger.
var redisLog sync.Once

type zapRedisLogger struct{ logger *zap.Logger }

func (l zapRedisLogger) Printf(_ context.Context, format string, v ...any) {
	l.logger.Warn(fmt.Sprintf(format, v...))
}

// sharedStage is the shared tier and what the processor logs, reports and
// forgets as Redis changes.
type sharedStage struct {
	*redistier.Tier
	cfg    *RedisConfig
	prefix string
	logger *zap.Logger
	host   atomic.Pointer[component.Host] // set at start, for status reports
	forget func()                         // drops what the processor cached of Redis; set before start
	aged   agedClaimer                    // the tier, if it tells its copies' ages
}

// agedClaimer is a shared tier that tells how old the copies it finds are:
// Claim, and for each digest it answers Held, ages[i] is how long before the
// claim the holder's claim was committed (unknownAge if it cannot tell).
// duplicate_age{tier="redis"} records the ages a tier tells, and nothing for
// a tier that does not implement this.
type agedClaimer interface {
	ClaimAged(ctx context.Context, token string, ds []digest.Digest, answers []redistier.Answer, ages []time.Duration, look bool) (holder string, err error)
}

// claim is the tier's Claim, with the copies' ages if it tells them.
func (s *sharedStage) claim(ctx context.Context, token string, ds []digest.Digest, answers []redistier.Answer, ages []time.Duration, look bool) (string, error) {
	if s.aged != nil {
		return s.aged.ClaimAged(ctx, token, ds, answers, ages, look)
	}
	for i := range ages {
		ages[i] = unknownAge
	}
	return s.Claim(ctx, token, ds, answers, look)
}

func newSharedStage(cfg *Config, r *RedisConfig, id component.ID, logger *zap.Logger, b *batches) (*sharedStage, error) {
	var tlsCfg *tls.Config
	if t := r.TLS.Get(); t != nil {
		var err error
		if tlsCfg, err = t.LoadTLSConfig(context.Background()); err != nil {
			return nil, fmt.Errorf("dedup: redis.tls: %w", err)
		}
	}
	s := &sharedStage{cfg: r, prefix: cmp.Or(r.KeyPrefix, defaultKeyPrefix(id, cfg)), logger: logger}
	s.Tier = redistier.New(redistier.Options{
		Endpoints:    r.Endpoints,
		Mode:         redistier.Mode(r.Mode),
		MasterName:   r.MasterName,
		Username:     r.Username,
		Password:     string(r.Password),
		DB:           r.DB,
		TLS:          tlsCfg,
		KeyPrefix:    s.prefix,
		Capacity:     r.Capacity,
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
		},
		OnNewServer: s.newServer,
	})
	s.aged, _ = any(s.Tier).(agedClaimer)
	redisLog.Do(func() {
		redis.SetLogger(zapRedisLogger{logger: logger.With(zap.String("client", "go-redis"))})
	})
	return s, nil
}

// start connects the shared tier; a Redis that does not answer leaves batches
// to on_error, as any outage.
func (s *sharedStage) start(ctx context.Context, host component.Host) error {
	s.host.Store(&host)
	if err := s.Tier.Start(ctx); err != nil {
		return fmt.Errorf("dedup: %w", err)
	}
	fields := []zap.Field{zap.Strings("endpoints", s.cfg.Endpoints), zap.String("master_name", s.cfg.MasterName), zap.String("key_prefix", s.prefix)}
	if mode := s.Mode(); mode != "" {
		s.logger.Info("dedup: shared tier connected", append(fields, zap.String("mode", string(mode)))...)
		for _, w := range s.Durability(ctx) {
			s.logger.Warn("dedup: shared tier: "+w, zap.String("key_prefix", s.prefix))
		}
	} else {
		s.logger.Warn("dedup: shared tier: Redis did not answer at start; until it does, batches follow redis.on_error",
			append(fields, zap.String("on_error", string(s.cfg.OnError)))...)
	}
	return nil
}

// topologyFound reports what the tier learns once Redis answers; a bad
// configuration is permanent.
func (s *sharedStage) topologyFound(mode redistier.Mode, err error) {
	if err == nil {
		s.logger.Info("dedup: shared tier connected: Redis answered", zap.String("mode", string(mode)), zap.Strings("endpoints", s.cfg.Endpoints))
		return
	}
	s.logger.Error("dedup: shared tier cannot work with what Redis answered; batches follow redis.on_error until the configuration is fixed",
		zap.Error(err), zap.String("on_error", string(s.cfg.OnError)))
	if host := s.host.Load(); host != nil {
		componentstatus.ReportStatus(*host, componentstatus.NewPermanentErrorEvent(fmt.Errorf("dedup: %w", err)))
	}
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
