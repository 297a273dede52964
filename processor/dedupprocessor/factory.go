// Package dedupprocessor provides the dedup processor: it drops (or marks)
// repeated records within a time window, keyed by configurable OTTL
// expressions or by the record's whole content.
package dedupprocessor

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/processor"
)

var componentType = component.MustNewType("dedup")

const stability = component.StabilityLevelAlpha

// NewFactory returns the factory of the dedup processor.
func NewFactory() processor.Factory {
	b := new(built)
	return processor.NewFactory(
		componentType,
		createDefaultConfig,
		processor.WithLogs(create(b, "logs", func(set component.TelemetrySettings, id component.ID, cfg *Config, next consumer.Logs) (processor.Logs, error) {
			return newLogsProcessor(set, id, cfg, next)
		}), stability),
		processor.WithTraces(create(b, "traces", func(set component.TelemetrySettings, id component.ID, cfg *Config, next consumer.Traces) (processor.Traces, error) {
			return newTracesProcessor(set, id, cfg, next)
		}), stability),
		processor.WithMetrics(create(b, "metrics", func(set component.TelemetrySettings, id component.ID, cfg *Config, next consumer.Metrics) (processor.Metrics, error) {
			return newMetricsProcessor(set, id, cfg, next)
		}), stability),
	)
}

// create is a signal's create function: b.add, then build; a nil P on error,
// not a typed nil.
func create[N, P any](b *built, signal string, build func(component.TelemetrySettings, component.ID, *Config, N) (P, error)) func(context.Context, processor.Settings, component.Config, N) (P, error) {
	return func(_ context.Context, set processor.Settings, cfg component.Config, next N) (p P, err error) {
		if err = b.add(set, cfg.(*Config), signal); err == nil {
			p, err = build(set.TelemetrySettings, set.ID, cfg.(*Config), next)
		}
		if err != nil {
			return *new(P), err
		}
		return p, nil
	}
}

// built records what a factory made. The collector takes fresh factories for
// every build, `validate` included, so a second processor of an ID and signal
// is one ID in two pipelines: refused with a shared tier or storage.
type built struct {
	shared sync.Map // the keySpaces of the processors with a shared tier or storage
}

func (b *built) add(set processor.Settings, cfg *Config, signal string) error {
	var why []string
	r := cfg.Redis.Get()
	if r != nil {
		why = append(why, "a shared tier (redis): both would claim the same keys and each pipeline would drop the records the other delivered")
	}
	if cfg.Storage != nil {
		why = append(why, fmt.Sprintf("storage (%s): both would keep their cache in the same snapshot, and the second to start would run without persistence", cfg.Storage))
	}
	if len(why) == 0 {
		return nil
	}
	if _, dup := b.shared.LoadOrStore(keySpace{id: set.ID, signal: signal}, true); dup {
		return fmt.Errorf("dedup: processor %q is in two %s pipelines and has %s; give each pipeline its own dedup processor ID (e.g. %s/a and %s/b)",
			set.ID, signal, strings.Join(why, ", and "), set.ID.Type(), set.ID.Type())
	}
	if r == nil || r.KeyPrefix == "" {
		return nil // a prefix derived from the ID is apart from every other ID's
	}
	if other, dup := b.shared.LoadOrStore(keySpace{prefix: r.KeyPrefix, signal: signal}, set.ID); dup {
		return fmt.Errorf("dedup: processors %q and %q both set redis.key_prefix %q in %s pipelines: they would claim the same keys, and a batch of one would wait for the other's claims or drop the records it delivered; give each its own redis.key_prefix",
			other, set.ID, r.KeyPrefix, signal)
	}
	return nil
}

// keySpace is a processor ID's keys in one signal, or an explicit
// redis.key_prefix's (with a zero id).
type keySpace struct {
	id             component.ID
	prefix, signal string
}
