package dedupprocessor

import (
	"context"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/ottl"
	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/ottl/contexts/ottlspan"
	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/ottl/ottlfuncs"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/claim"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/identity"
)

var spanSpec = &signalSpec[*ottlspan.TransformContext]{
	name: "traces",
	tag:  'T',
	newParser: func(set component.TelemetrySettings) (ottl.Parser[*ottlspan.TransformContext], error) {
		return ottlspan.NewParser(ottlfuncs.StandardConverters[*ottlspan.TransformContext](), set)
	},
	scalars: []string{
		"trace_id", "span_id", "parent_span_id", "name", "kind", "start_time_unix_nano", "end_time_unix_nano",
	},
	ignorable: []string{
		"name", "kind", "trace_id", "span_id", "parent_span_id", "trace_state", "start_time_unix_nano",
		"end_time_unix_nano", "flags", "events", "links", "status", "resource", "instrumentation_scope",
	},
}

// spanView is a span as the identity sees it.
type spanView struct {
	rs ptrace.ResourceSpans
	ss ptrace.ScopeSpans
	sp ptrace.Span
}

func (v spanView) transformContext() *ottlspan.TransformContext {
	return ottlspan.NewTransformContext(v.rs, v.ss, v.sp)
}

func (v spanView) path(e *identity.Encoder, p plainPath) bool {
	sp := v.sp
	if handled, ok := commonPath(e, p, v.rs.Resource(), v.ss.Scope(), sp.Attributes()); handled {
		return ok
	}
	switch p.field {
	case "trace_id":
		return e.Any(sp.TraceID())
	case "span_id":
		return e.Any(sp.SpanID())
	case "parent_span_id":
		return e.Any(sp.ParentSpanID())
	case "name":
		return nonEmptyString(e, sp.Name())
	case "kind":
		e.Int(int64(sp.Kind()))
	case "start_time_unix_nano":
		e.Int(int64(sp.StartTimestamp()))
	case "end_time_unix_nano":
		e.Int(int64(sp.EndTimestamp()))
	default:
		return false
	}
	return true
}

// content encodes a span whole: its events, links and status included.
func (v spanView) content(e *identity.Encoder, ign *contentIgnore) {
	sp, f := v.sp, ign.fields
	contentIDs(e, f, sp.TraceID(), sp.SpanID())
	if !f.has(ignParentSpanID) {
		e.Field(fieldParentSpanID)
		e.SpanID(sp.ParentSpanID())
	}
	if !f.has(ignTraceState) {
		e.FieldString(fieldTraceState, sp.TraceState().AsRaw())
	}
	if !f.has(ignName) {
		e.FieldString(fieldName, sp.Name())
	}
	if !f.has(ignKind) {
		e.FieldInt(fieldKind, int64(sp.Kind()))
	}
	if !f.has(ignStartTimeUnixNano) {
		e.FieldUint(fieldStartTimestamp, uint64(sp.StartTimestamp()))
	}
	if !f.has(ignEndTimeUnixNano) {
		e.FieldUint(fieldEndTimestamp, uint64(sp.EndTimestamp()))
	}
	if !f.has(ignFlags) {
		e.FieldUint(fieldFlags, uint64(sp.Flags()))
	}
	e.Field(fieldAttributes)
	e.Map(sp.Attributes(), ign.skipAttr)
	dropped32(e, fieldDroppedAttributes, sp.DroppedAttributesCount())
	if !f.has(ignEvents) {
		e.FieldUint(fieldEvents, uint64(sp.Events().Len()))
		for _, ev := range sp.Events().All() {
			e.String(ev.Name())
			e.Uint(uint64(ev.Timestamp()))
			e.Map(ev.Attributes(), nil)
			dropped32(e, fieldDroppedAttributes, ev.DroppedAttributesCount())
		}
		dropped32(e, fieldDroppedEvents, sp.DroppedEventsCount())
	}
	if !f.has(ignLinks) {
		e.FieldUint(fieldLinks, uint64(sp.Links().Len()))
		for _, l := range sp.Links().All() {
			e.TraceID(l.TraceID())
			e.SpanID(l.SpanID())
			e.String(l.TraceState().AsRaw())
			e.Uint(uint64(l.Flags()))
			e.Map(l.Attributes(), nil)
			dropped32(e, fieldDroppedAttributes, l.DroppedAttributesCount())
		}
		dropped32(e, fieldDroppedLinks, sp.DroppedLinksCount())
	}
	if !f.has(ignStatus) {
		e.FieldInt(fieldStatus, int64(sp.Status().Code()))
		e.String(sp.Status().Message())
	}
}

// tracesProcessor is the traces dedup processor: its unit is the span, kept
// or dropped whole.
type tracesProcessor struct {
	*core
	claim.Sink[ptrace.Traces]
	si *signalIdentity[*ottlspan.TransformContext]
}

func newTracesProcessor(set component.TelemetrySettings, id component.ID, cfg *Config, next consumer.Traces) (*tracesProcessor, error) {
	p, si, err := newCore(spanSpec, cfg.Traces, set, id, cfg, nil)
	if err != nil {
		return nil, err
	}
	return &tracesProcessor{core: p, Sink: claim.Sink[ptrace.Traces]{Next: next.ConsumeTraces, NewData: ptrace.NewTraces}, si: si}, nil
}

func (p *tracesProcessor) ConsumeTraces(ctx context.Context, td ptrace.Traces) error {
	return claim.Consume(ctx, p.Engine, p, td, td.SpanCount())
}

func (p *tracesProcessor) Identify(ctx context.Context, b *claim.Batch, td ptrace.Traces) {
	enc := encoderPool.Get().(*identity.Encoder)
	defer encoderPool.Put(enc)
	w := newWalk(ctx, p.core, p.si, b, enc)
	var view spanView
	for _, rs := range td.ResourceSpans().All() {
		view.rs = rs
		w.enterResource(rs.Resource(), rs.SchemaUrl())
		for _, ss := range rs.ScopeSpans().All() {
			view.ss = ss
			w.enterScope(ss.Scope(), ss.SchemaUrl())
			for _, sp := range ss.Spans().All() {
				view.sp = sp
				identifyUnit(&w, view)
			}
		}
	}
}

func (p *tracesProcessor) Apply(b *claim.Batch, td ptrace.Traces, later *ptrace.Traces) {
	a := b.Applier()
	td.ResourceSpans().RemoveIf(func(rs ptrace.ResourceSpans) bool {
		var toR lazily[ptrace.ResourceSpans]
		rs.ScopeSpans().RemoveIf(func(ss ptrace.ScopeSpans) bool {
			var toS lazily[ptrace.ScopeSpans]
			ss.Spans().RemoveIf(func(sp ptrace.Span) bool {
				remove, moves := a.Unit(sp.Attributes())
				if moves && later != nil {
					to := toS.get(func() ptrace.ScopeSpans {
						r := toR.get(func() ptrace.ResourceSpans {
							r := later.ResourceSpans().AppendEmpty()
							rs.Resource().CopyTo(r.Resource())
							r.SetSchemaUrl(rs.SchemaUrl())
							return r
						})
						s := r.ScopeSpans().AppendEmpty()
						ss.Scope().CopyTo(s.Scope())
						s.SetSchemaUrl(ss.SchemaUrl())
						return s
					})
					sp.MoveTo(to.Spans().AppendEmpty())
				}
				return remove
			})
			return ss.Spans().Len() == 0
		})
		return rs.ScopeSpans().Len() == 0
	})
}
