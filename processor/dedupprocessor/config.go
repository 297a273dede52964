package dedupprocessor

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/config/configopaque"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/config/configtls"
	"go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"
)

// Action says what happens to a duplicate.
type Action string

const (
	// ActionDrop removes duplicates from the batch.
	ActionDrop Action = "drop"
	// ActionMark delivers duplicates with MarkAttribute set to true (shadow mode).
	ActionMark Action = "mark"
)

// MissingKeyPolicy says what happens to a record whose key cannot be derived.
type MissingKeyPolicy string

const (
	// MissingKeyPass delivers the record without deduplicating it.
	MissingKeyPass MissingKeyPolicy = "pass"
	// MissingKeyContent deduplicates the record on its whole content instead.
	MissingKeyContent MissingKeyPolicy = "content"
	// MissingKeyDrop drops the record.
	MissingKeyDrop MissingKeyPolicy = "drop"
)

// Config is the configuration of the dedup processor.
type Config struct {
	// Window is how long a key is remembered from the moment it was first
	// accepted. It should exceed the senders' longest retry horizon.
	Window time.Duration `mapstructure:"window"`
	// Action is what happens to a duplicate: drop or mark.
	Action Action `mapstructure:"action"`
	// MarkAttribute is the record attribute set to true on duplicates when
	// Action is mark.
	MarkAttribute string `mapstructure:"mark_attribute"`
	// IdentityAttribute, when set, names an attribute that every delivered
	// unit with an identity gets: its digest in hex. A backend can use it
	// as a document ID and reject repeats that arrive after the window.
	IdentityAttribute string `mapstructure:"identity_attribute"`
	// OnMissingKey is what happens to a record whose key cannot be derived.
	OnMissingKey MissingKeyPolicy `mapstructure:"on_missing_key"`
	// Cache bounds the local tier.
	Cache CacheConfig `mapstructure:"cache"`
	// Storage names a storage extension (e.g. file_storage) that keeps the
	// local cache across restarts. Absent: the cache starts empty.
	Storage *component.ID `mapstructure:"storage"`
	// SnapshotInterval is how often the cache is saved to Storage, besides
	// at shutdown; 0 saves only at shutdown. A crash loses at most the keys
	// of one interval.
	SnapshotInterval time.Duration `mapstructure:"snapshot_interval"`
	// PendingWait is how long a batch waits for another batch's pending
	// claim on one of its records, in this collector or in another sharing
	// Redis, to be committed (the record is a duplicate) or released (it is
	// this batch's to deliver), before the batch is refused with a
	// retryable error. 0 refuses at once.
	PendingWait time.Duration `mapstructure:"pending_wait"`
	// MetadataKeys names client metadata keys (e.g. X-Scope-OrgID) whose
	// values partition every identity, so tenants never suppress each other.
	MetadataKeys []string `mapstructure:"metadata_keys"`
	// AuthAttributes names attributes of the authenticated identity that
	// the receiver's authenticator sets (client.Info.Auth, e.g. oidc's
	// subject) whose values partition every identity. Unlike metadata_keys,
	// a sender cannot choose them. Requests without them share one
	// partition of their own, counted.
	AuthAttributes []string `mapstructure:"auth_attributes"`
	// Logs configures the identity of log records.
	Logs SignalConfig `mapstructure:"logs"`
	// Traces configures the identity of spans.
	Traces SignalConfig `mapstructure:"traces"`
	// Metrics configures the identity of metric data points, and replica
	// election.
	Metrics MetricsConfig `mapstructure:"metrics"`
	// Redis is the optional shared tier; absent means local only.
	Redis configoptional.Optional[RedisConfig] `mapstructure:"redis"`

	// prevent unkeyed literal initialization
	_ struct{}
}

// CacheConfig bounds the local cache.
type CacheConfig struct {
	// MaxEntries is the most keys the local cache holds; when full it evicts
	// the oldest key first.
	MaxEntries int `mapstructure:"max_entries"`

	_ struct{}
}

// ErrorPolicy says what happens to a batch when the shared tier fails.
type ErrorPolicy string

const (
	// ErrorPass delivers the batch with the local tier as the only guard.
	ErrorPass ErrorPolicy = "pass"
	// ErrorRefuse returns a retryable error, so senders back off and retry.
	ErrorRefuse ErrorPolicy = "refuse"
)

// RedisMode says what redis.endpoints are.
type RedisMode string

const (
	// RedisModeAuto asks the endpoints at start-up (HELLO, ROLE).
	RedisModeAuto RedisMode = "auto"
	// RedisModeStandalone: one standalone server.
	RedisModeStandalone RedisMode = "standalone"
	// RedisModeCluster: one or more nodes of a Redis Cluster (one is
	// enough, e.g. a managed service's configuration endpoint).
	RedisModeCluster RedisMode = "cluster"
	// RedisModeSentinel: Sentinels monitoring the master named MasterName.
	RedisModeSentinel RedisMode = "sentinel"
)

// RedisConfig is the shared tier: a Redis that many collectors use to let
// exactly one copy of a record through.
type RedisConfig struct {
	// Endpoints: a standalone server, one or more nodes of a Redis Cluster,
	// or Sentinels (with MasterName). What they are is asked of them at
	// start-up unless Mode says.
	Endpoints []string `mapstructure:"endpoints"`
	// Mode is auto (ask the endpoints), standalone, cluster or sentinel.
	// The key layout differs between a Cluster and the rest, so every
	// collector sharing a Redis must end up with the same mode.
	Mode RedisMode `mapstructure:"mode"`
	// MasterName is the name of the master the Sentinels monitor.
	MasterName string `mapstructure:"master_name"`
	// Username and Password authenticate (Redis ACL, or requirepass).
	Username string              `mapstructure:"username"`
	Password configopaque.String `mapstructure:"password"`
	// DB is the database of a standalone or Sentinel server.
	DB int `mapstructure:"db"`
	// TLS, when present, encrypts the connection (configtls client
	// settings). Absent, or insecure: true, is plain TCP.
	TLS configoptional.Optional[configtls.ClientConfig] `mapstructure:"tls"`
	// KeyPrefix starts every key. Empty: "dedup:" followed by a hash of the
	// settings that shape identities, so differently configured processors
	// never share keys and identically configured ones do.
	KeyPrefix string `mapstructure:"key_prefix"`
	// Timeout bounds each round trip.
	Timeout time.Duration `mapstructure:"timeout"`
	// DeprecatedPendingWait is pending_wait's former name, redis.pending_wait:
	// it still works and means the same, with a warning at start-up.
	DeprecatedPendingWait *time.Duration `mapstructure:"pending_wait"`
	// Lease is how long a pending claim lives without being renewed. The
	// tier renews it while its batch is downstream, however long the
	// export takes, so the lease bounds only how long a collector that died
	// mid-batch blocks its senders' retries of that batch.
	Lease time.Duration `mapstructure:"lease"`
	// OnError is what happens to a batch when Redis fails: pass or refuse.
	OnError ErrorPolicy `mapstructure:"on_error"`

	_ struct{}
}

// SignalConfig is the identity of one signal's records.
type SignalConfig struct {
	// Key lists OTTL value expressions whose values, in order, form the
	// identity. Empty: the record's whole content is the identity.
	Key []string `mapstructure:"key"`
	// Ignore lists fields left out of the content identity (only with an
	// empty Key), e.g. attributes["received_at"].
	Ignore []string `mapstructure:"ignore"`
	// Conditions lists OTTL conditions, OR-ed: only matching records are
	// deduplicated; the rest pass untouched. Empty: every record.
	Conditions []string `mapstructure:"conditions"`

	_ struct{}
}

// MetricsConfig is the identity of metric data points and, optionally,
// replica election: one replica of each HA group of agents delivered.
type MetricsConfig struct {
	SignalConfig `mapstructure:",squash"`
	// ReplicaElection, when present, delivers the points of one replica per
	// cluster and treats the other replicas' points as duplicates.
	ReplicaElection configoptional.Optional[ElectionConfig] `mapstructure:"replica_election"`

	_ struct{}
}

// ElectionConfig is replica election, after the HA tracker of Cortex and
// Mimir: HA pairs of agents scrape the same targets and each stamps its
// points with its own time, so their points never share an identity; the
// first replica seen for a cluster is elected, and the others' points are
// duplicates until it has been silent for FailoverTimeout.
type ElectionConfig struct {
	// ClusterLabel names the attribute that tells an HA group (a data
	// point attribute, else a resource attribute).
	ClusterLabel string `mapstructure:"cluster_label"`
	// ReplicaLabel names the attribute that tells the replicas of a group
	// apart (looked up like ClusterLabel).
	ReplicaLabel string `mapstructure:"replica_label"`
	// UpdateInterval is how often the elected replica's delivered data
	// refreshes its election, plus a random jitter of up to UpdateJitter.
	UpdateInterval time.Duration `mapstructure:"update_interval"`
	UpdateJitter   time.Duration `mapstructure:"update_jitter"`
	// FailoverTimeout is how long an election holds after its last
	// refresh; then the next replica to send is elected.
	FailoverTimeout time.Duration `mapstructure:"failover_timeout"`
	// MaxClusters bounds the clusters of one tenant this processor elects
	// replicas for; the points of further clusters pass without election.
	MaxClusters int `mapstructure:"max_clusters"`
	// RemoveReplicaLabel removes ReplicaLabel from the elected replica's
	// delivered points (or their resource, where it was found), so that
	// their series continue across a failover.
	RemoveReplicaLabel bool `mapstructure:"remove_replica_label"`

	_ struct{}
}

const (
	defaultWindow           = 10 * time.Minute
	defaultMarkAttribute    = "dedup.duplicate"
	defaultMaxEntries       = 1_000_000
	defaultSnapshotInterval = time.Minute
	defaultPendingWait      = time.Second
	// minDuration catches a duration written without a unit, which the
	// collector reads as nanoseconds.
	minDuration = time.Millisecond
	// maxMaxEntries keeps a typo from reserving an absurd amount of memory;
	// a key costs tens of bytes, so this is a few GiB.
	maxMaxEntries = 100_000_000

	// Replica election: Mimir's HA tracker defaults.
	defaultClusterLabel    = "cluster"
	defaultReplicaLabel    = "__replica__"
	defaultUpdateInterval  = 15 * time.Second
	defaultUpdateJitter    = 5 * time.Second
	defaultFailoverTimeout = 30 * time.Second
	defaultMaxClusters     = 100
	// maxMaxClusters bounds the election table and the elected-replica
	// gauge's series per tenant.
	maxMaxClusters = 100_000
)

func createDefaultConfig() component.Config {
	return &Config{
		Window:           defaultWindow,
		Action:           ActionDrop,
		MarkAttribute:    defaultMarkAttribute,
		OnMissingKey:     MissingKeyPass,
		Cache:            CacheConfig{MaxEntries: defaultMaxEntries},
		SnapshotInterval: defaultSnapshotInterval,
		PendingWait:      defaultPendingWait,
		Metrics: MetricsConfig{
			ReplicaElection: configoptional.Default(ElectionConfig{
				ClusterLabel:       defaultClusterLabel,
				ReplicaLabel:       defaultReplicaLabel,
				UpdateInterval:     defaultUpdateInterval,
				UpdateJitter:       defaultUpdateJitter,
				FailoverTimeout:    defaultFailoverTimeout,
				MaxClusters:        defaultMaxClusters,
				RemoveReplicaLabel: true,
			}),
		},
		Redis: configoptional.Default(RedisConfig{
			Mode:    RedisModeAuto,
			Timeout: defaultRedisTimeout,
			Lease:   defaultRedisLease,
			OnError: ErrorPass,
		}),
	}
}

// Validate reports every invalid setting at once, each naming its field.
func (cfg *Config) Validate() error {
	var errs []error
	if cfg.Window <= 0 {
		errs = append(errs, fmt.Errorf("window must be > 0, got %q", cfg.Window))
	} else if cfg.Window < minDuration {
		errs = append(errs, fmt.Errorf("window must be >= 1ms, got %q (a number without a unit is nanoseconds: write e.g. 10m)", cfg.Window))
	}
	switch cfg.Action {
	case ActionDrop:
	case ActionMark:
		if cfg.MarkAttribute == "" {
			errs = append(errs, errors.New(`mark_attribute must not be empty when action is "mark"`))
		}
	default:
		errs = append(errs, fmt.Errorf(`action must be "drop" or "mark", got %q`, cfg.Action))
	}
	if cfg.IdentityAttribute != "" && cfg.IdentityAttribute == cfg.MarkAttribute && cfg.Action == ActionMark {
		errs = append(errs, fmt.Errorf("identity_attribute and mark_attribute must differ, both are %q", cfg.IdentityAttribute))
	}
	switch cfg.OnMissingKey {
	case MissingKeyPass, MissingKeyContent, MissingKeyDrop:
	default:
		errs = append(errs, fmt.Errorf(`on_missing_key must be "pass", "content" or "drop", got %q`, cfg.OnMissingKey))
	}
	if cfg.Cache.MaxEntries <= 0 || cfg.Cache.MaxEntries > maxMaxEntries {
		errs = append(errs, fmt.Errorf("cache.max_entries must be between 1 and %d, got %d", maxMaxEntries, cfg.Cache.MaxEntries))
	}
	if cfg.SnapshotInterval < 0 {
		errs = append(errs, fmt.Errorf("snapshot_interval must be >= 0 (0 saves only at shutdown), got %q", cfg.SnapshotInterval))
	} else if cfg.SnapshotInterval > 0 && cfg.SnapshotInterval < minDuration {
		errs = append(errs, fmt.Errorf("snapshot_interval must be 0 or >= 1ms, got %q (a number without a unit is nanoseconds: write e.g. 1m)", cfg.SnapshotInterval))
	}
	if r := cfg.Redis.Get(); r != nil && r.DeprecatedPendingWait != nil {
		// The renamed setting moves to its new name (the first step of a
		// rename, docs/versioning.md); setting both is an error naming both.
		if old := *r.DeprecatedPendingWait; cfg.PendingWait != defaultPendingWait && cfg.PendingWait != old {
			errs = append(errs, fmt.Errorf("redis.pending_wait is deprecated and replaced by pending_wait: set only pending_wait, got both (%q and %q)", old, cfg.PendingWait))
		} else {
			cfg.PendingWait = old
		}
	}
	if cfg.PendingWait < 0 {
		errs = append(errs, fmt.Errorf("pending_wait must be >= 0 (0 refuses at once), got %q", cfg.PendingWait))
	}
	for i, k := range cfg.MetadataKeys {
		if strings.TrimSpace(k) == "" {
			errs = append(errs, fmt.Errorf("metadata_keys[%d]: must not be empty", i))
		}
	}
	for i, k := range cfg.AuthAttributes {
		if strings.TrimSpace(k) == "" {
			errs = append(errs, fmt.Errorf(`auth_attributes[%d]: must not be empty (name an attribute the authenticator sets, e.g. "subject")`, i))
		}
	}
	if r := cfg.Redis.Get(); r != nil {
		errs = append(errs, r.validate(cfg.Window)...)
	}
	set := nopTelemetry()
	if _, err := newSignalIdentity(logSpec(set), cfg.Logs); err != nil {
		errs = append(errs, err)
	}
	if _, err := newSignalIdentity(spanSpec(set), cfg.Traces); err != nil {
		errs = append(errs, err)
	}
	if _, err := newSignalIdentity(dataPointSpec(set), cfg.Metrics.SignalConfig); err != nil {
		errs = append(errs, err)
	}
	if el := cfg.Metrics.ReplicaElection.Get(); el != nil {
		errs = append(errs, el.validate()...)
	}
	return errors.Join(errs...)
}

func (el *ElectionConfig) validate() []error {
	const field = "metrics.replica_election."
	var errs []error
	if strings.TrimSpace(el.ClusterLabel) == "" {
		errs = append(errs, errors.New(field+`cluster_label must not be empty (Mimir's default is "cluster")`))
	}
	if strings.TrimSpace(el.ReplicaLabel) == "" {
		errs = append(errs, errors.New(field+`replica_label must not be empty (Mimir's default is "__replica__")`))
	}
	if el.ClusterLabel != "" && el.ClusterLabel == el.ReplicaLabel {
		errs = append(errs, fmt.Errorf(field+"cluster_label and replica_label must differ, both are %q", el.ClusterLabel))
	}
	if el.UpdateInterval < minDuration {
		errs = append(errs, fmt.Errorf(field+"update_interval must be >= 1ms, got %q (a number without a unit is nanoseconds: write e.g. 15s)", el.UpdateInterval))
	}
	if el.UpdateJitter < 0 {
		errs = append(errs, fmt.Errorf(field+"update_jitter must be >= 0, got %q", el.UpdateJitter))
	}
	if el.FailoverTimeout <= el.UpdateInterval+el.UpdateJitter {
		errs = append(errs, fmt.Errorf(field+"failover_timeout must be > update_interval + update_jitter (%s), or the elected replica loses its election between two refreshes; got %q",
			el.UpdateInterval+el.UpdateJitter, el.FailoverTimeout))
	}
	if el.MaxClusters < 1 || el.MaxClusters > maxMaxClusters {
		errs = append(errs, fmt.Errorf(field+"max_clusters must be between 1 and %d, got %d", maxMaxClusters, el.MaxClusters))
	}
	return errs
}

const (
	defaultRedisTimeout = 250 * time.Millisecond
	// defaultRedisLease is how long the retries of a collector that died
	// mid-batch wait before they are delivered (a live collector renews its
	// claims every third of it). Short next to the 5 minutes a collector's
	// exporters retry by default, long next to the renewal's round trip.
	defaultRedisLease = 30 * time.Second
)

func (r *RedisConfig) validate(window time.Duration) []error {
	var errs []error
	if len(r.Endpoints) == 0 {
		errs = append(errs, errors.New(`redis.endpoints must list at least one "host:port"`))
	}
	for i, ep := range r.Endpoints {
		if _, port, err := net.SplitHostPort(ep); err != nil || port == "" {
			errs = append(errs, fmt.Errorf(`redis.endpoints[%d] must be "host:port", got %q`, i, ep))
		}
	}
	switch r.Mode {
	case RedisModeAuto, RedisModeCluster:
	case RedisModeStandalone:
		if len(r.Endpoints) > 1 {
			errs = append(errs, fmt.Errorf(`redis.endpoints must list one server with redis.mode "standalone", got %d`, len(r.Endpoints)))
		}
	case RedisModeSentinel:
		if r.MasterName == "" {
			errs = append(errs, errors.New(`redis.master_name must name the master the Sentinels monitor with redis.mode "sentinel"`))
		}
	default:
		errs = append(errs, fmt.Errorf(`redis.mode must be "auto", "standalone", "cluster" or "sentinel", got %q`, r.Mode))
	}
	if r.MasterName != "" && (r.Mode == RedisModeStandalone || r.Mode == RedisModeCluster) {
		errs = append(errs, fmt.Errorf(`redis.master_name is for Sentinel: remove it, or set redis.mode to "sentinel" (or "auto"), got mode %q`, r.Mode))
	}
	switch {
	case r.DB == 0 || r.MasterName != "":
	case r.Mode == RedisModeCluster:
		errs = append(errs, fmt.Errorf(`redis.db must be 0 with redis.mode "cluster" (a Redis Cluster has only database 0), got %d`, r.DB))
	case len(r.Endpoints) > 1:
		errs = append(errs, fmt.Errorf("redis.db must be 0 with several endpoints (a Redis Cluster has only database 0), got %d", r.DB))
	}
	if r.DB < 0 {
		errs = append(errs, fmt.Errorf("redis.db must be >= 0, got %d", r.DB))
	}
	if r.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("redis.timeout must be > 0, got %q", r.Timeout))
	}
	if r.Lease <= 0 || r.Lease > window {
		errs = append(errs, fmt.Errorf("redis.lease must be > 0 and <= window (%s), got %q", window, r.Lease))
	} else if r.Timeout > 0 && r.Lease < 3*r.Timeout {
		errs = append(errs, fmt.Errorf("redis.lease must be at least 3 times redis.timeout (%s): a claim is renewed every third of its lease, each renewal bounded by the timeout, got %q", r.Timeout, r.Lease))
	}
	if strings.ContainsAny(r.KeyPrefix, "{}") {
		errs = append(errs, fmt.Errorf(`redis.key_prefix must not contain "{" or "}": a hash tag in the prefix puts every key of a Redis Cluster into one slot and breaks the tier's own tags (CROSSSLOT), got %q`, r.KeyPrefix))
	}
	switch r.OnError {
	case ErrorPass, ErrorRefuse:
	default:
		errs = append(errs, fmt.Errorf(`redis.on_error must be "pass" or "refuse", got %q`, r.OnError))
	}
	return errs
}

// nopTelemetry serves OTTL parsing in Validate, before the collector has
// handed the component its own settings.
func nopTelemetry() component.TelemetrySettings {
	return component.TelemetrySettings{
		Logger:         zap.NewNop(),
		MeterProvider:  noop.NewMeterProvider(),
		TracerProvider: tracenoop.NewTracerProvider(),
	}
}

// fieldError names the config field an error belongs to.
func fieldError(field string, i int, expr string, err error) error {
	return fmt.Errorf("%s[%d] %q: %w", field, i, expr, err)
}
