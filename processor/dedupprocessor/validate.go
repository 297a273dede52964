package dedupprocessor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"
)

// Validate reports every invalid setting at once, each naming its field.
func (cfg *Config) Validate() error {
	var p problems
	p.check(cfg.Window <= 0, "window must be > 0, got %q", cfg.Window)
	p.check(cfg.Window > 0 && cfg.Window < minDuration, "window must be >= 1ms, got %q (a number without a unit is nanoseconds: write e.g. 10m)", cfg.Window)
	p.check(cfg.Action != ActionDrop && cfg.Action != ActionMark, `action must be "drop" or "mark", got %q`, cfg.Action)
	p.check(cfg.Action == ActionMark && cfg.MarkAttribute == "", `mark_attribute must not be empty when action is "mark"`)
	p.check(cfg.IdentityAttribute != "" && cfg.IdentityAttribute == cfg.MarkAttribute && cfg.Action == ActionMark,
		"identity_attribute and mark_attribute must differ, both are %q", cfg.IdentityAttribute)
	p.check(!slices.Contains([]MissingKeyPolicy{MissingKeyPass, MissingKeyContent, MissingKeyDrop}, cfg.OnMissingKey),
		`on_missing_key must be "pass", "content" or "drop", got %q`, cfg.OnMissingKey)
	p.check(cfg.Cache.MaxEntries <= 0 || cfg.Cache.MaxEntries > maxMaxEntries,
		"cache.max_entries must be between 1 and %d, got %d", maxMaxEntries, cfg.Cache.MaxEntries)
	p.check(cfg.SnapshotInterval < 0, "snapshot_interval must be >= 0 (0 saves only at shutdown), got %q", cfg.SnapshotInterval)
	p.check(cfg.SnapshotInterval > 0 && cfg.SnapshotInterval < minDuration,
		"snapshot_interval must be 0 or >= 1ms, got %q (a number without a unit is nanoseconds: write e.g. 1m)", cfg.SnapshotInterval)
	p.check(cfg.PendingWait < 0, "pending_wait must be >= 0 (0 refuses at once), got %q", cfg.PendingWait)
	for i, k := range cfg.MetadataKeys {
		p.check(strings.TrimSpace(k) == "", "metadata_keys[%d]: must not be empty", i)
	}
	for i, k := range cfg.AuthAttributes {
		p.check(strings.TrimSpace(k) == "", `auth_attributes[%d]: must not be empty (name an attribute the authenticator sets, e.g. "subject")`, i)
	}
	if r := cfg.Redis.Get(); r != nil {
		r.validate(&p, cfg.Window)
	}
	cfg.Source.validate(&p)
	// OTTL parsing needs telemetry settings; Validate has none.
	set := component.TelemetrySettings{Logger: zap.NewNop(), MeterProvider: noop.NewMeterProvider(), TracerProvider: tracenoop.NewTracerProvider()}
	_, errLogs := newSignalIdentity(logSpec, set, cfg.Logs)
	_, errTraces := newSignalIdentity(spanSpec, set, cfg.Traces)
	_, errMetrics := newSignalIdentity(dataPointSpec, set, cfg.Metrics.SignalConfig)
	p = append(p, errLogs, errTraces, errMetrics) // Join skips the nils
	if el := cfg.Metrics.ReplicaElection.Get(); el != nil {
		el.validate(&p)
	}
	return errors.Join(p...)
}

// problems collects the errors of a configuration.
type problems []error

func (p *problems) check(bad bool, format string, args ...any) {
	if bad {
		*p = append(*p, fmt.Errorf(format, args...))
	}
}

func (el *ElectionConfig) validate(p *problems) {
	const field = "metrics.replica_election."
	p.check(strings.TrimSpace(el.ClusterLabel) == "", field+`cluster_label must not be empty (Mimir's default is "cluster")`)
	p.check(strings.TrimSpace(el.ReplicaLabel) == "", field+`replica_label must not be empty (Mimir's default is "__replica__")`)
	p.check(el.ClusterLabel != "" && el.ClusterLabel == el.ReplicaLabel, field+"cluster_label and replica_label must differ, both are %q", el.ClusterLabel)
	p.check(el.UpdateInterval < minDuration,
		field+"update_interval must be >= 1ms, got %q (a number without a unit is nanoseconds: write e.g. 15s)", el.UpdateInterval)
	p.check(el.UpdateJitter < 0, field+"update_jitter must be >= 0, got %q", el.UpdateJitter)
	p.check(el.FailoverTimeout <= el.UpdateInterval+el.UpdateJitter,
		field+"failover_timeout must be > update_interval + update_jitter (%s), or the elected replica loses its election between two refreshes; got %q",
		el.UpdateInterval+el.UpdateJitter, el.FailoverTimeout)
	p.check(el.MaxClusters < 1 || el.MaxClusters > maxMaxClusters, field+"max_clusters must be between 1 and %d, got %d", maxMaxClusters, el.MaxClusters)
}

func (sc *SourceConfig) validate(p *problems) {
	for i, k := range sc.Key {
		_, err := parseSourcePart(k)
		p.check(err != nil, "source.key[%d] %q: %v", i, k, err)
	}
	p.check(sc.MaxSources < 1 || sc.MaxSources > maxMaxSources,
		"source.max_sources must be between 1 and %d (the sources named in the metrics; the rest are counted as %q), got %d", maxMaxSources, otherSources, sc.MaxSources)
	p.check(sc.LogInterval < 0, "source.log_interval must be >= 0 (0: no log lines), got %q", sc.LogInterval)
	p.check(sc.LogInterval > 0 && sc.LogInterval < minDuration,
		"source.log_interval must be 0 or >= 1ms, got %q (a number without a unit is nanoseconds: write e.g. 1m)", sc.LogInterval)
}

func (r *RedisConfig) validate(p *problems, window time.Duration) {
	p.check(len(r.Endpoints) == 0, `redis.endpoints must list at least one "host:port"`)
	for i, ep := range r.Endpoints {
		_, port, err := net.SplitHostPort(ep)
		p.check(err != nil || port == "", `redis.endpoints[%d] must be "host:port", got %q`, i, ep)
	}
	switch r.Mode {
	case RedisModeAuto, RedisModeCluster:
	case RedisModeStandalone:
		p.check(len(r.Endpoints) > 1, `redis.endpoints must list one server with redis.mode "standalone", got %d`, len(r.Endpoints))
	case RedisModeSentinel:
		p.check(r.MasterName == "", `redis.master_name must name the master the Sentinels monitor with redis.mode "sentinel"`)
	default:
		p.check(true, `redis.mode must be "auto", "standalone", "cluster" or "sentinel", got %q`, r.Mode)
	}
	p.check(r.MasterName != "" && (r.Mode == RedisModeStandalone || r.Mode == RedisModeCluster),
		`redis.master_name is for Sentinel: remove it, or set redis.mode to "sentinel" (or "auto"), got mode %q`, r.Mode)
	if r.DB != 0 && r.MasterName == "" {
		p.check(r.Mode == RedisModeCluster,
			`redis.db must be 0 with redis.mode "cluster" (a Redis Cluster has only database 0), got %d`, r.DB)
		p.check(r.Mode != RedisModeCluster && len(r.Endpoints) > 1,
			"redis.db must be 0 with several endpoints (a Redis Cluster has only database 0), got %d", r.DB)
	}
	p.check(r.DB < 0, "redis.db must be >= 0, got %d", r.DB)
	p.check(r.ClusterSlots < 1 || r.ClusterSlots > maxClusterSlots,
		"redis.cluster_slots must be the hash slots a Redis Cluster's dedup keys spread over (the masters, or a multiple of them), from 1 to %d, got %d", maxClusterSlots, r.ClusterSlots)
	p.check(window > maxSharedWindow, "window must be at most %s (90 days) with redis, got %q", maxSharedWindow, window)
	p.check(r.Timeout <= 0, "redis.timeout must be > 0, got %q", r.Timeout)
	p.check(r.Lease < minDuration, "redis.lease must be >= 1ms, got %q", r.Lease)
	// The user may have written neither: the error names what to change.
	p.check(window > 0 && r.Lease > window,
		"redis.lease must be <= window (%s), got %q: redis.lease is %s unless set; set it to at most the window (e.g. lease: %s), or a window of at least the lease",
		window, r.Lease, defaultRedisLease, window)
	p.check(r.Lease >= minDuration && r.Lease <= window && r.Timeout > 0 && r.Lease < 3*r.Timeout,
		"redis.lease must be at least 3 times redis.timeout (%s): a claim is renewed every third of its lease, each renewal bounded by the timeout, got %q", r.Timeout, r.Lease)
	p.check(strings.ContainsAny(r.KeyPrefix, "{}"),
		`redis.key_prefix must not contain "{" or "}": a hash tag in the prefix puts every key of a Redis Cluster into one slot and breaks the tier's own tags (CROSSSLOT), got %q`, r.KeyPrefix)
	p.check(r.OnError != ErrorPass && r.OnError != ErrorRefuse, `redis.on_error must be "pass" or "refuse", got %q`, r.OnError)
	// The certificate files are read here, so that `validate` refuses a
	// missing one as the start would; configtls's Validate reports the rest.
	if tls := r.TLS.Get(); tls != nil && tls.Validate() == nil {
		if _, err := tls.LoadTLSConfig(context.Background()); err != nil {
			p.check(true, "redis.tls: %v", err)
		}
	}
}
