package dedupprocessor

import (
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/identity"
)

// Domain tags open every identity encoding, so that a key identity, a
// content identity and different signals never hash alike.
const (
	domainKey     byte = 'k'
	domainContent byte = 'c'
)

// plainPath is an expression that is a plain field access, evaluated
// directly on pdata instead of through OTTL, which costs an evaluation and
// an allocation per record (BenchmarkDecide compares the two). Each form
// returns what OTTL returns for the same text, so the digest does not
// depend on which path evaluated it.
type plainPath struct {
	field string // "attributes", "resource.attributes", "body", ...
	key   string // the map key for attribute paths
}

var (
	attrPathRE  = regexp.MustCompile(`^\s*(attributes|resource\.attributes|instrumentation_scope\.attributes)\["([^"\\]*)"\]\s*$`)
	fieldPathRE = regexp.MustCompile(`^\s*([a-z_.]+)\s*$`)
)

// parsePlainPath recognises the plain paths among fields, the scalar fields
// of the signal's context that have a fast path.
func parsePlainPath(expr string, fields map[string]bool) (plainPath, bool) {
	if m := attrPathRE.FindStringSubmatch(expr); m != nil {
		return plainPath{field: m[1], key: m[2]}, true
	}
	if m := fieldPathRE.FindStringSubmatch(expr); m != nil && fields[m[1]] {
		return plainPath{field: m[1]}, true
	}
	return plainPath{}, false
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

// encoderPool holds identity encoders; each ConsumeXxx call takes one.
var encoderPool = sync.Pool{New: func() any { return new(identity.Encoder) }}

// throttledLog logs a recurring per-record problem at most once per
// interval, with the number of occurrences since the last line, so a bad
// expression on a busy pipeline cannot flood the collector's log.
type throttledLog struct {
	logger   *zap.Logger
	msg      string
	interval time.Duration
	last     atomic.Int64
	count    atomic.Int64
}

func newThrottledLog(logger *zap.Logger, msg string) *throttledLog {
	return &throttledLog{logger: logger, msg: msg, interval: 10 * time.Second}
}

func (t *throttledLog) log(now int64, err error, fields ...zap.Field) {
	n := t.count.Add(1)
	last := t.last.Load()
	if now-last < int64(t.interval) || !t.last.CompareAndSwap(last, now) {
		return
	}
	t.count.Add(-n)
	t.logger.Warn(t.msg, append(fields, zap.Error(err), zap.Int64("occurrences", n))...)
}

// fieldError names the config field an error belongs to.
func fieldError(field string, i int, expr string, err error) error {
	return fmt.Errorf("%s[%d] %q: %w", field, i, expr, err)
}
