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
	// Logs configures the identity of log records.
	Logs SignalConfig `mapstructure:"logs"`
	// Traces configures the identity of spans.
	Traces SignalConfig `mapstructure:"traces"`
	// Metrics configures the identity of metric data points.
	Metrics SignalConfig `mapstructure:"metrics"`
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

// RedisConfig is the shared tier: a Redis that many collectors use to let
// exactly one copy of a record through.
type RedisConfig struct {
	// Endpoints: one address is a standalone server, several are seeds of a
	// Redis Cluster; with MasterName set they are Sentinel addresses.
	Endpoints []string `mapstructure:"endpoints"`
	// MasterName selects Sentinel: the name of the monitored master.
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
	// Lease is how long a claim stays pending before the next consumer has
	// accepted its batch; a collector that dies mid-batch blocks that
	// batch's retries for at most this long.
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
		Redis: configoptional.Default(RedisConfig{
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
	if cfg.PendingWait < 0 {
		errs = append(errs, fmt.Errorf("pending_wait must be >= 0 (0 refuses at once), got %q", cfg.PendingWait))
	}
	for i, k := range cfg.MetadataKeys {
		if strings.TrimSpace(k) == "" {
			errs = append(errs, fmt.Errorf("metadata_keys[%d]: must not be empty", i))
		}
	}
	if r := cfg.Redis.Get(); r != nil {
		errs = append(errs, r.validate(cfg.Window)...)
		if r.Lease > 0 && cfg.PendingWait > r.Lease {
			errs = append(errs, fmt.Errorf("pending_wait must be <= redis.lease (%s): a claim older than its lease is free anyway, got %q", r.Lease, cfg.PendingWait))
		}
	}
	set := nopTelemetry()
	if _, err := newSignalIdentity(logSpec(set), cfg.Logs); err != nil {
		errs = append(errs, err)
	}
	if _, err := newSignalIdentity(spanSpec(set), cfg.Traces); err != nil {
		errs = append(errs, err)
	}
	if _, err := newSignalIdentity(dataPointSpec(set), cfg.Metrics); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

const (
	defaultRedisTimeout = 250 * time.Millisecond
	defaultRedisLease   = 30 * time.Second
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
	if r.MasterName == "" && len(r.Endpoints) > 1 && r.DB != 0 {
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
	}
	switch r.OnError {
	case ErrorPass, ErrorRefuse:
	default:
		errs = append(errs, fmt.Errorf(`redis.on_error must be "pass" or "refuse", got %q`, r.OnError))
	}
	return errs
}
