package dedupprocessor

import (
	"context"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/ottl"
	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/ottl/contexts/ottllog"
	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/ottl/ottlfuncs"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/claim"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/identity"
)

var logSpec = &signalSpec[*ottllog.TransformContext]{
	name: "logs",
	tag:  'L',
	newParser: func(set component.TelemetrySettings) (ottl.Parser[*ottllog.TransformContext], error) {
		return ottllog.NewParser(ottlfuncs.StandardConverters[*ottllog.TransformContext](), set)
	},
	scalars: []string{
		"body", "event_name", "severity_text", "severity_number", "trace_id", "span_id",
		"time_unix_nano", "observed_time_unix_nano", "flags",
	},
	ignorable: []string{
		"body", "event_name", "severity_text", "severity_number", "trace_id", "span_id",
		"time_unix_nano", "observed_time_unix_nano", "flags", "resource", "instrumentation_scope",
	},
}

// logView is a log record as the identity sees it.
type logView struct {
	rl plog.ResourceLogs
	sl plog.ScopeLogs
	lr plog.LogRecord
}

func (v logView) transformContext() *ottllog.TransformContext {
	return ottllog.NewTransformContext(v.rl, v.sl, v.lr)
}

func (v logView) path(e *identity.Encoder, p plainPath) bool {
	lr := v.lr
	if handled, ok := commonPath(e, p, v.rl.Resource(), v.sl.Scope(), lr.Attributes()); handled {
		return ok
	}
	switch p.field {
	case "body":
		return e.Value(lr.Body())
	case "event_name":
		return nonEmptyString(e, lr.EventName())
	case "severity_text":
		return nonEmptyString(e, lr.SeverityText())
	case "severity_number":
		e.Int(int64(lr.SeverityNumber()))
	case "time_unix_nano":
		e.Int(int64(lr.Timestamp()))
	case "observed_time_unix_nano":
		e.Int(int64(lr.ObservedTimestamp()))
	case "flags":
		e.Int(int64(lr.Flags()))
	case "trace_id":
		return e.Any(lr.TraceID())
	case "span_id":
		return e.Any(lr.SpanID())
	default:
		return false
	}
	return true
}

// content encodes all a sender puts in a record. The observed time joins only a
// coarse timestamp (a parsed line's, not an SDK's): a re-sent record may be
// observed anew, but a coarse timestamp cannot tell a line written twice.
func (v logView) content(e *identity.Encoder, ign *contentIgnore) {
	lr, f := v.lr, ign.fields
	if !f.has(ignBody) {
		e.FieldValue(fieldBody, lr.Body())
	}
	e.Field(fieldAttributes)
	e.Map(lr.Attributes(), ign.skipAttr)
	if !f.has(ignSeverityNumber) {
		e.FieldInt(fieldSeverityNumber, int64(lr.SeverityNumber()))
	}
	if !f.has(ignSeverityText) {
		e.FieldString(fieldSeverityText, lr.SeverityText())
	}
	if !f.has(ignEventName) {
		e.FieldString(fieldEventName, lr.EventName())
	}
	if !f.has(ignTimeUnixNano) {
		ts := lr.Timestamp()
		e.FieldUint(fieldTimestamp, uint64(ts))
		if ts%1_000_000 == 0 && !f.has(ignObservedTimeUnixNano) {
			e.FieldUint(fieldObservedTimestamp, uint64(lr.ObservedTimestamp()))
		}
	}
	dropped32(e, fieldDroppedAttributes, lr.DroppedAttributesCount())
	if !f.has(ignFlags) {
		e.FieldUint(fieldFlags, uint64(lr.Flags()))
	}
	contentIDs(e, f, lr.TraceID(), lr.SpanID())
}

// logsProcessor is the dedup processor in a logs pipeline; like the others it
// is its own consumer: it must see the next one's error to release claims.
type logsProcessor struct {
	*core
	claim.Sink[plog.Logs]
	si *signalIdentity[*ottllog.TransformContext]
}

func newLogsProcessor(set component.TelemetrySettings, id component.ID, cfg *Config, next consumer.Logs) (*logsProcessor, error) {
	p, si, err := newCore(logSpec, cfg.Logs, set, id, cfg, nil)
	if err != nil {
		return nil, err
	}
	return &logsProcessor{core: p, Sink: claim.Sink[plog.Logs]{Next: next.ConsumeLogs, NewData: plog.NewLogs}, si: si}, nil
}

func (p *logsProcessor) ConsumeLogs(ctx context.Context, ld plog.Logs) error {
	return claim.Consume(ctx, p.Engine, p, ld, ld.LogRecordCount())
}

func (p *logsProcessor) Identify(ctx context.Context, b *claim.Batch, ld plog.Logs) {
	enc := encoderPool.Get().(*identity.Encoder)
	defer encoderPool.Put(enc)
	w := newWalk(ctx, p.core, p.si, b, enc)
	var view logView
	for _, rl := range ld.ResourceLogs().All() {
		view.rl = rl
		w.enterResource(rl.Resource(), rl.SchemaUrl())
		for _, sl := range rl.ScopeLogs().All() {
			view.sl = sl
			w.enterScope(sl.Scope(), sl.SchemaUrl())
			for _, lr := range sl.LogRecords().All() {
				view.lr = lr
				identifyUnit(&w, view)
			}
		}
	}
}

// apply applies the verdicts and prunes the scopes and resources left empty
// (as all signals); a record moved to later gets a copy of its resource and
// scope there.
func (p *logsProcessor) Apply(b *claim.Batch, ld plog.Logs, later *plog.Logs) {
	a := b.Applier()
	ld.ResourceLogs().RemoveIf(func(rl plog.ResourceLogs) bool {
		var toR lazily[plog.ResourceLogs]
		rl.ScopeLogs().RemoveIf(func(sl plog.ScopeLogs) bool {
			var toS lazily[plog.ScopeLogs]
			sl.LogRecords().RemoveIf(func(lr plog.LogRecord) bool {
				remove, moves := a.Unit(lr.Attributes())
				if moves && later != nil {
					to := toS.get(func() plog.ScopeLogs {
						r := toR.get(func() plog.ResourceLogs {
							r := later.ResourceLogs().AppendEmpty()
							rl.Resource().CopyTo(r.Resource())
							r.SetSchemaUrl(rl.SchemaUrl())
							return r
						})
						s := r.ScopeLogs().AppendEmpty()
						sl.Scope().CopyTo(s.Scope())
						s.SetSchemaUrl(sl.SchemaUrl())
						return s
					})
					lr.MoveTo(to.LogRecords().AppendEmpty())
				}
				return remove
			})
			return sl.LogRecords().Len() == 0
		})
		return rl.ScopeLogs().Len() == 0
	})
}
