package dedupprocessor

import (
	"context"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// series is the attributes every series of a processor instance carries:
// component ID and signal, as attributes of their own (as scope attributes
// Prometheus would drop them).
type series []attribute.KeyValue

// with is the attribute set of a series: the base attributes, then kv.
func (s series) with(kv ...attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(slices.Concat(s, kv)...))
}

// labelled sets opts[i] to the series with attribute key = values[i], as an
// AddOption or RecordOption.
func labelled[O any](s series, opts []O, key string, values []string) {
	for i, v := range values {
		opts[i] = s.with(attribute.String(key, v)).(O)
	}
}

// addEach adds each nonzero count under opts[i:i+1] (one option alone would
// make a slice per call).
func addEach(ctx context.Context, c metric.Int64Counter, counts []int64, opts []metric.AddOption) {
	for i, n := range counts {
		if n > 0 {
			c.Add(ctx, n, opts[i:i+1]...)
		}
	}
}
