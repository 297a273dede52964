package dedupprocessor

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/collector/component"
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
	// OnMissingKey is what happens to a record whose key cannot be derived.
	OnMissingKey MissingKeyPolicy `mapstructure:"on_missing_key"`
	// Cache bounds the local tier.
	Cache CacheConfig `mapstructure:"cache"`
	// MetadataKeys names client metadata keys (e.g. X-Scope-OrgID) whose
	// values partition every identity, so tenants never suppress each other.
	MetadataKeys []string `mapstructure:"metadata_keys"`
	// Logs configures the identity of log records.
	Logs SignalConfig `mapstructure:"logs"`
	// Traces configures the identity of spans.
	Traces SignalConfig `mapstructure:"traces"`
	// Metrics configures the identity of metric data points.
	Metrics SignalConfig `mapstructure:"metrics"`

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
	defaultWindow        = 10 * time.Minute
	defaultMarkAttribute = "dedup.duplicate"
	defaultMaxEntries    = 1_000_000
	// maxMaxEntries keeps a typo from reserving an absurd amount of memory;
	// a key costs tens of bytes, so this is a few GiB.
	maxMaxEntries = 100_000_000
)

func createDefaultConfig() component.Config {
	return &Config{
		Window:        defaultWindow,
		Action:        ActionDrop,
		MarkAttribute: defaultMarkAttribute,
		OnMissingKey:  MissingKeyPass,
		Cache:         CacheConfig{MaxEntries: defaultMaxEntries},
		Traces:        SignalConfig{Key: []string{"trace_id", "span_id"}},
	}
}

// Validate reports every invalid setting at once, each naming its field.
func (cfg *Config) Validate() error {
	var errs []error
	if cfg.Window <= 0 {
		errs = append(errs, fmt.Errorf("window must be > 0, got %q", cfg.Window))
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
	switch cfg.OnMissingKey {
	case MissingKeyPass, MissingKeyContent, MissingKeyDrop:
	default:
		errs = append(errs, fmt.Errorf(`on_missing_key must be "pass", "content" or "drop", got %q`, cfg.OnMissingKey))
	}
	if cfg.Cache.MaxEntries <= 0 || cfg.Cache.MaxEntries > maxMaxEntries {
		errs = append(errs, fmt.Errorf("cache.max_entries must be between 1 and %d, got %d", maxMaxEntries, cfg.Cache.MaxEntries))
	}
	for i, k := range cfg.MetadataKeys {
		if strings.TrimSpace(k) == "" {
			errs = append(errs, fmt.Errorf("metadata_keys[%d]: must not be empty", i))
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
