package dedupprocessor

import (
	"context"
	"crypto/tls"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.uber.org/zap"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/identity"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/redistier"
)

// defaultKeyPrefix namespaces the shared tier's keys by the processor's
// component ID and the settings that shape identities: two pipelines with
// their own dedup processors must each deliver every record, and differently
// configured processors could hash different records alike. Every instance
// of one processor ID and configuration shares its keys. It is short, since
// Redis spends its CPU per key; 32 bits keep processors apart.
func defaultKeyPrefix(id component.ID, cfg *Config) string {
	var e identity.Encoder
	e.String(id.String())
	e.Uint(identityFingerprint(cfg))
	h := e.Digest().Hi
	return fmt.Sprintf("dedup:%08x:", uint32(h^h>>32))
}

// identityEncoding is the version of how records are encoded into digests,
// part of the fingerprint: bump it whenever the encoding changes.
const identityEncoding = 1

// identityFingerprint hashes the settings that decide what a digest means:
// a snapshot or a shared key made under other settings is not reused.
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

// redisLog routes go-redis's process-wide log to the logger of the first
// processor with a shared tier.
var redisLog sync.Once

type zapRedisLogger struct{ logger *zap.Logger }

func (l zapRedisLogger) Printf(_ context.Context, format string, v ...any) {
	l.logger.Warn(fmt.Sprintf(format, v...))
}

// keySpace is one processor ID's keys in one signal's pipelines: a
// collector may use it in one pipeline only (see built in factory.go).
type keySpace struct {
	id     component.ID
	signal string
}

// startTier connects the shared tier, if one is configured. A Redis that
// does not answer does not fail the start: batches follow on_error, as in
// any later outage, until it does.
func (e *engine) startTier(ctx context.Context, host component.Host) error {
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
		prefix = defaultKeyPrefix(e.id, e.cfg)
	}
	tier := redistier.New(redistier.Options{
		Endpoints:  r.Endpoints,
		Mode:       redistier.Mode(r.Mode),
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
		Clock:      e.clock,
		OnTopology: e.topologyFound(host, r),
		OnWriteError: func(err error) {
			e.tierError.log(e.now(), err, zap.String("op", "write"))
		},
		OnNewServer: e.newServer,
	})
	redisLog.Do(func() {
		redis.SetLogger(zapRedisLogger{logger: e.logger.With(zap.String("client", "go-redis"))})
	})
	if err := tier.Start(ctx); err != nil {
		_ = tier.Close()
		return fmt.Errorf("dedup: %w", err)
	}
	e.tier, e.redis, e.keyPrefix = tier, tier, prefix
	if e.elect != nil {
		e.electTier = tier
	}
	e.tel.observeBreakers(tier)
	fields := []zap.Field{zap.Strings("endpoints", r.Endpoints), zap.String("master_name", r.MasterName), zap.String("key_prefix", prefix)}
	if mode := tier.Mode(); mode != "" {
		e.logger.Info("dedup: shared tier connected", append(fields, zap.String("mode", string(mode)))...)
		for _, w := range tier.Durability(ctx) {
			e.logger.Warn("dedup: shared tier: "+w, zap.String("key_prefix", prefix))
		}
	} else {
		e.logger.Warn("dedup: shared tier: Redis did not answer at start; until it does, batches follow redis.on_error",
			append(fields, zap.String("on_error", string(r.OnError)))...)
	}
	return nil
}

// topologyFound reports what the tier learns once Redis answers after the
// start; a configuration error is a permanent error status.
func (e *engine) topologyFound(host component.Host, r *RedisConfig) func(redistier.Mode, error) {
	return func(mode redistier.Mode, err error) {
		if err == nil {
			e.logger.Info("dedup: shared tier connected: Redis answered", zap.String("mode", string(mode)), zap.Strings("endpoints", r.Endpoints))
			return
		}
		e.logger.Error("dedup: shared tier cannot work with what Redis answered; batches follow redis.on_error until the configuration is fixed",
			zap.Error(err), zap.String("on_error", string(r.OnError)))
		componentstatus.ReportStatus(host, componentstatus.NewPermanentErrorEvent(fmt.Errorf("dedup: %w", err)))
	}
}

// stopTier closes the shared tier: it sends the writes left within a
// bound, and counts and logs those that do not land; calls made after it
// fail, and follow on_error.
func (e *engine) stopTier() error {
	if e.redis == nil {
		return nil
	}
	return e.redis.Close()
}

// newServer is the tier's Options.OnNewServer: a Redis master restarted or
// failed over, and may have lost the elections this collector cached.
// Until a batch asks Redis again, the cache could keep one replica elected
// here while another collector elects the other, and each would drop the
// points the other keeps.
func (e *engine) newServer(runID string) {
	e.logger.Warn("dedup: shared tier: a Redis server not seen before answers (a restart or a failover): what it had may be lost; cached replica elections are asked again",
		zap.String("run_id", runID))
	if e.elect != nil {
		e.elect.table.ForgetCommitted()
	}
}

// observeRedis is the tier's Options.Observe.
func (t *telemetry) observeRedis(op, result string, d time.Duration) {
	ctx := context.Background()
	opts, ok := t.redisOpts[op+"/"+result]
	if !ok {
		return
	}
	t.redisRequests.Add(ctx, 1, opts.add...)
	if d > 0 { // zero: no round trip was made
		t.redisDuration.Record(ctx, d.Seconds(), opts.record...)
	}
}
