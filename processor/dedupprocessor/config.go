package dedupprocessor

import (
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/config/configopaque"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/config/configtls"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/clock"
)

// Action says what happens to a duplicate.
type Action string

const (
	// ActionDrop removes duplicates from the batch.
	ActionDrop Action = "drop"
	// ActionMark delivers duplicates with MarkAttribute set to true (shadow
	// mode).
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

// Config is the configuration of the dedup processor; the README documents
// each setting.
type Config struct {
	// Window is how long a key is remembered after it was first accepted.
	Window time.Duration `mapstructure:"window"`
	// Action is what happens to a duplicate.
	Action Action `mapstructure:"action"`
	// MarkAttribute is set to true on duplicates under ActionMark.
	MarkAttribute string `mapstructure:"mark_attribute"`
	// IdentityAttribute, when set, receives each delivered unit's digest in
	// hex.
	IdentityAttribute string `mapstructure:"identity_attribute"`
	// OnMissingKey is what happens to a record whose key cannot be derived.
	OnMissingKey MissingKeyPolicy `mapstructure:"on_missing_key"`
	// Cache bounds the local tier.
	Cache CacheConfig `mapstructure:"cache"`
	// Storage names a storage extension that keeps the cache across restarts.
	Storage *component.ID `mapstructure:"storage"`
	// SnapshotInterval is how often the cache is saved; 0: only at shutdown.
	SnapshotInterval time.Duration `mapstructure:"snapshot_interval"`
	// PendingWait bounds a batch's wait for other batches' pending claims.
	PendingWait time.Duration `mapstructure:"pending_wait"`
	// MetadataKeys names client metadata keys that partition identities.
	MetadataKeys []string `mapstructure:"metadata_keys"`
	// AuthAttributes names authenticator attributes that partition identities.
	AuthAttributes []string `mapstructure:"auth_attributes"`
	// Logs is the identity of log records.
	Logs SignalConfig `mapstructure:"logs"`
	// Traces is the identity of spans.
	Traces SignalConfig `mapstructure:"traces"`
	// Metrics is the identity of data points, and replica election.
	Metrics MetricsConfig `mapstructure:"metrics"`
	// Redis is the optional shared tier; absent means local only.
	Redis configoptional.Optional[RedisConfig] `mapstructure:"redis"`
	// Source names the sender of each record, to trace copies to it.
	Source SourceConfig `mapstructure:"source"`

	// clock is the processor's clock; nil is the wall clock. Tests set it.
	clock clock.Clock

	// prevent unkeyed literal initialization
	_ struct{}
}

// CacheConfig bounds the local cache.
type CacheConfig struct {
	// MaxEntries is the most keys the cache holds; it evicts the oldest first.
	MaxEntries int `mapstructure:"max_entries"`

	_ struct{}
}

// SourceConfig names who sent each record, so that the telemetry can say who
// sends the copies.
type SourceConfig struct {
	// Key lists what names a sender: resource attributes and the request's
	// client (auth.<attribute>, metadata.<key>, client.address); empty: copies
	// are not traced to sources.
	Key []string `mapstructure:"key"`
	// MaxSources bounds the sources named in the metrics: the heaviest, the
	// rest counted as one.
	MaxSources int `mapstructure:"max_sources"`
	// LogInterval is the least time between two log lines about one source's
	// copies; 0: no lines.
	LogInterval time.Duration `mapstructure:"log_interval"`

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
	// RedisModeCluster: one or more nodes of a Redis Cluster.
	RedisModeCluster RedisMode = "cluster"
	// RedisModeSentinel: Sentinels monitoring the master named MasterName.
	RedisModeSentinel RedisMode = "sentinel"
)

// RedisConfig is the shared tier: a Redis that lets many collectors pass one
// copy of a record.
type RedisConfig struct {
	// Endpoints are a standalone server, Cluster nodes, or Sentinels.
	Endpoints []string `mapstructure:"endpoints"`
	// Mode says what Endpoints are; every collector sharing a Redis must agree.
	Mode RedisMode `mapstructure:"mode"`
	// MasterName is the name of the master the Sentinels monitor.
	MasterName string `mapstructure:"master_name"`
	// Username and Password authenticate (Redis ACL, or requirepass).
	Username string              `mapstructure:"username"`
	Password configopaque.String `mapstructure:"password"`
	// DB is the database of a standalone or Sentinel server.
	DB int `mapstructure:"db"`
	// TLS, when present and not insecure, encrypts the connection.
	TLS configoptional.Optional[configtls.ClientConfig] `mapstructure:"tls"`
	// KeyPrefix starts every key; empty: derived from the identity settings.
	KeyPrefix string `mapstructure:"key_prefix"`
	// ClusterSlots is the number of hash slots a Redis Cluster's dedup keys
	// are spread over, the masters they can use, when this collector is the
	// first to use the key prefix; the layout stored in Redis keeps its own.
	ClusterSlots int `mapstructure:"cluster_slots"`
	// Timeout bounds each round trip.
	Timeout time.Duration `mapstructure:"timeout"`
	// Lease is how long a pending claim lives unless its batch renews it.
	Lease time.Duration `mapstructure:"lease"`
	// OnError is what happens to a batch when Redis fails.
	OnError ErrorPolicy `mapstructure:"on_error"`

	_ struct{}
}

// SignalConfig is the identity of one signal's records.
type SignalConfig struct {
	// Key lists OTTL expressions forming the identity; empty: the whole
	// content.
	Key []string `mapstructure:"key"`
	// Ignore lists fields left out of the content identity (empty Key only).
	Ignore []string `mapstructure:"ignore"`
	// Conditions lists OTTL conditions, OR-ed, selecting the records
	// deduplicated.
	Conditions []string `mapstructure:"conditions"`

	_ struct{}
}

// MetricsConfig is the identity of metric data points and, optionally,
// replica election.
type MetricsConfig struct {
	SignalConfig `mapstructure:",squash"`
	// ReplicaElection, when present, delivers one replica's points per cluster.
	ReplicaElection configoptional.Optional[ElectionConfig] `mapstructure:"replica_election"`

	_ struct{}
}

// ElectionConfig is replica election, after the HA tracker of Cortex and
// Mimir: the first replica seen for a cluster is elected, and the others'
// points are duplicates until it has been silent for FailoverTimeout.
type ElectionConfig struct {
	// ClusterLabel names the attribute that tells an HA group.
	ClusterLabel string `mapstructure:"cluster_label"`
	// ReplicaLabel names the attribute that tells a group's replicas apart.
	ReplicaLabel string `mapstructure:"replica_label"`
	// UpdateInterval, plus up to UpdateJitter, is how often delivered data
	// refreshes an election.
	UpdateInterval time.Duration `mapstructure:"update_interval"`
	UpdateJitter   time.Duration `mapstructure:"update_jitter"`
	// FailoverTimeout is how long an election holds after its last refresh.
	FailoverTimeout time.Duration `mapstructure:"failover_timeout"`
	// MaxClusters bounds the clusters of one tenant elected for.
	MaxClusters int `mapstructure:"max_clusters"`
	// RemoveReplicaLabel removes ReplicaLabel from the elected replica's
	// points.
	RemoveReplicaLabel bool `mapstructure:"remove_replica_label"`

	_ struct{}
}

const (
	// minDuration catches a duration written without a unit (nanoseconds).
	minDuration = time.Millisecond
	// maxMaxEntries keeps a typo from reserving an absurd amount of memory.
	maxMaxEntries = 100_000_000
	// maxClusterSlots: a tenth of a Cluster's slots, more masters than
	// Redis Cluster is made for.
	maxClusterSlots = 1000
	// maxMaxClusters bounds the election table and gauge series per tenant.
	maxMaxClusters = 100_000
	// maxSharedWindow: the shared tier stamps each record with the second
	// by which it may go, in 3 bytes read within half their range (97 days).
	maxSharedWindow = 90 * 24 * time.Hour
	// maxMaxSources bounds the source series of one processor and signal.
	maxMaxSources = 1000
	// defaultRedisLease: how long the retries of a collector that died
	// mid-batch wait; short next to exporters' retry horizon.
	defaultRedisLease = 30 * time.Second
)

func createDefaultConfig() component.Config {
	return &Config{
		Window:           10 * time.Minute,
		Action:           ActionDrop,
		MarkAttribute:    "dedup.duplicate",
		OnMissingKey:     MissingKeyPass,
		Cache:            CacheConfig{MaxEntries: 1_000_000},
		SnapshotInterval: time.Minute,
		PendingWait:      time.Second,
		Metrics: MetricsConfig{
			// Mimir's HA tracker defaults.
			ReplicaElection: configoptional.Default(ElectionConfig{
				ClusterLabel:       "cluster",
				ReplicaLabel:       "__replica__",
				UpdateInterval:     15 * time.Second,
				UpdateJitter:       5 * time.Second,
				FailoverTimeout:    30 * time.Second,
				MaxClusters:        100,
				RemoveReplicaLabel: true,
			}),
		},
		Source: SourceConfig{
			// Every OpenTelemetry SDK sets it, and it survives every hop.
			Key:         []string{`resource.attributes["service.name"]`},
			MaxSources:  20,
			LogInterval: time.Minute,
		},
		Redis: configoptional.Default(RedisConfig{
			Mode:         RedisModeAuto,
			ClusterSlots: 12,
			Timeout:      250 * time.Millisecond,
			Lease:        defaultRedisLease,
			OnError:      ErrorPass,
		}),
	}
}
