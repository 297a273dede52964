package testkit

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// collect reads every metric the reader holds.
func collect(t testing.TB, reader *sdkmetric.ManualReader) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	return rm
}

// Int64 returns the value of the int64 counter or gauge series name whose
// attributes are exactly attrs, 0 if there is none.
func Int64(t testing.TB, reader *sdkmetric.ManualReader, name string, attrs ...attribute.KeyValue) int64 {
	t.Helper()
	return sumInt64(collect(t, reader), name, exactly(attrs))
}

// SumInt64 adds the values of the int64 counter or gauge series name whose
// attributes include attrs (whatever else they hold), in metrics already
// collected: a program that drives a processor in-process reads them so.
func SumInt64(rm metricdata.ResourceMetrics, name string, attrs ...attribute.KeyValue) int64 {
	return sumInt64(rm, name, including(attrs))
}

// HistogramCount returns the count of the float64 histogram series name
// whose attributes are exactly attrs, 0 if there is none.
func HistogramCount(t testing.TB, reader *sdkmetric.ManualReader, name string, attrs ...attribute.KeyValue) uint64 {
	t.Helper()
	return histogramCounts(collect(t, reader), name, exactly(attrs))
}

// HistogramCountAll returns the sum of the counts of every float64
// histogram series name whose attributes include attrs (whatever else they
// hold: over every processor, for example).
func HistogramCountAll(t testing.TB, reader *sdkmetric.ManualReader, name string, attrs ...attribute.KeyValue) uint64 {
	t.Helper()
	return histogramCounts(collect(t, reader), name, including(attrs))
}

func exactly(attrs []attribute.KeyValue) func(attribute.Set) bool {
	set := attribute.NewSet(attrs...)
	return func(s attribute.Set) bool { return s.Equals(&set) }
}

func including(attrs []attribute.KeyValue) func(attribute.Set) bool {
	return func(s attribute.Set) bool {
		for _, kv := range attrs {
			if v, ok := s.Value(kv.Key); !ok || v != kv.Value {
				return false
			}
		}
		return true
	}
}

func sumInt64(rm metricdata.ResourceMetrics, name string, match func(attribute.Set) bool) int64 {
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			var points []metricdata.DataPoint[int64]
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				points = d.DataPoints
			case metricdata.Gauge[int64]:
				points = d.DataPoints
			}
			for _, p := range points {
				if m.Name == name && match(p.Attributes) {
					n += p.Value
				}
			}
		}
	}
	return n
}

func histogramCounts(rm metricdata.ResourceMetrics, name string, match func(attribute.Set) bool) uint64 {
	var n uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == name {
				for _, dp := range h.DataPoints {
					if match(dp.Attributes) {
						n += dp.Count
					}
				}
			}
		}
	}
	return n
}
