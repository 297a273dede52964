// Package dedupprocessor provides the dedup processor: it drops (or marks)
// repeated records within a time window, keyed by configurable OTTL
// expressions or by the record's whole content.
package dedupprocessor

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/processor"
)

// componentType is the name of the processor in collector configs.
var componentType = component.MustNewType("dedup")

// stability is the stability level of every signal the processor supports.
const stability = component.StabilityLevelAlpha

// NewFactory returns the factory of the dedup processor. The processors one
// factory makes (one per pipeline of a collector) share its record of which
// Redis key spaces are in use.
func NewFactory() processor.Factory {
	ks := new(keySpaces)
	return processor.NewFactory(
		componentType,
		createDefaultConfig,
		processor.WithLogs(func(_ context.Context, set processor.Settings, cfg component.Config, next consumer.Logs) (processor.Logs, error) {
			p, err := newLogsProcessor(set.TelemetrySettings, set.ID, cfg.(*Config), next)
			if err != nil {
				return nil, err
			}
			p.keySpaces = ks
			return p, nil
		}, stability),
		processor.WithTraces(func(_ context.Context, set processor.Settings, cfg component.Config, next consumer.Traces) (processor.Traces, error) {
			p, err := newTracesProcessor(set.TelemetrySettings, set.ID, cfg.(*Config), next)
			if err != nil {
				return nil, err
			}
			p.keySpaces = ks
			return p, nil
		}, stability),
		processor.WithMetrics(func(_ context.Context, set processor.Settings, cfg component.Config, next consumer.Metrics) (processor.Metrics, error) {
			p, err := newMetricsProcessor(set.TelemetrySettings, set.ID, cfg.(*Config), next)
			if err != nil {
				return nil, err
			}
			p.keySpaces = ks
			return p, nil
		}, stability),
	)
}
