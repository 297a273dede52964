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

// NewFactory returns the factory of the dedup processor.
func NewFactory() processor.Factory {
	return processor.NewFactory(
		componentType,
		createDefaultConfig,
		processor.WithLogs(createLogs, stability),
		processor.WithTraces(createTraces, stability),
		processor.WithMetrics(createMetrics, stability),
	)
}

func createLogs(_ context.Context, set processor.Settings, cfg component.Config, next consumer.Logs) (processor.Logs, error) {
	return newLogsProcessor(set.TelemetrySettings, set.ID, cfg.(*Config), next)
}

func createTraces(_ context.Context, set processor.Settings, cfg component.Config, next consumer.Traces) (processor.Traces, error) {
	return newTracesProcessor(set.TelemetrySettings, set.ID, cfg.(*Config), next)
}

func createMetrics(_ context.Context, set processor.Settings, cfg component.Config, next consumer.Metrics) (processor.Metrics, error) {
	return newMetricsProcessor(set.TelemetrySettings, set.ID, cfg.(*Config), next)
}
