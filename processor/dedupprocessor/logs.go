package dedupprocessor

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/ottl"
	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/ottl/contexts/ottllog"
	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/ottl/ottlfuncs"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/identity"
)

const signalLogs byte = 'L'

// logScalarFields are the log record fields with a fast path.
var logScalarFields = map[string]bool{
	"body": true, "event_name": true, "severity_text": true, "severity_number": true,
	"trace_id": true, "span_id": true, "time_unix_nano": true, "flags": true,
}

// logKeyPart is one compiled key expression: a plain path or OTTL.
type logKeyPart struct {
	path plainPath
	expr *ottl.ValueExpression[*ottllog.TransformContext]
}

// logIdentity derives the digest of a log record.
type logIdentity struct {
	parts      []logKeyPart
	conditions []*ottl.Condition[*ottllog.TransformContext]
	ignore     contentIgnore
	needsOTTL  bool
}

// contentIgnore is the set of fields left out of a content identity.
type contentIgnore struct {
	fields         map[string]bool
	attributes     map[string]bool
	resourceAttrs  map[string]bool
	scopeAttrs     map[string]bool
	skipAttr       func(string) bool
	skipResource   func(string) bool
	skipScopeAttrs func(string) bool
}

// logIgnorableFields are the whole fields logs.ignore may name.
var logIgnorableFields = []string{
	"body", "event_name", "severity_text", "severity_number", "trace_id", "span_id",
	"time_unix_nano", "flags", "resource", "instrumentation_scope",
}

func newLogIdentity(cfg SignalConfig, set component.TelemetrySettings) (*logIdentity, error) {
	li := &logIdentity{}
	var errs []error
	var parser ottl.Parser[*ottllog.TransformContext]
	var parserErr error
	parserOnce := false
	getParser := func() (ottl.Parser[*ottllog.TransformContext], error) {
		if !parserOnce {
			parserOnce = true
			parser, parserErr = ottllog.NewParser(ottlfuncs.StandardConverters[*ottllog.TransformContext](), set)
		}
		return parser, parserErr
	}
	for i, expr := range cfg.Key {
		if strings.TrimSpace(expr) == "" {
			errs = append(errs, fmt.Errorf("logs.key[%d]: expression must not be empty", i))
			continue
		}
		if p, ok := parsePlainPath(expr, logScalarFields); ok {
			li.parts = append(li.parts, logKeyPart{path: p})
			continue
		}
		p, err := getParser()
		if err != nil {
			return nil, err
		}
		ve, err := p.ParseValueExpression(expr)
		if err != nil {
			errs = append(errs, fieldError("logs.key", i, expr, err))
			continue
		}
		li.parts = append(li.parts, logKeyPart{expr: ve})
		li.needsOTTL = true
	}
	for i, cond := range cfg.Conditions {
		p, err := getParser()
		if err != nil {
			return nil, err
		}
		c, err := p.ParseCondition(cond)
		if err != nil {
			errs = append(errs, fieldError("logs.conditions", i, cond, err))
			continue
		}
		li.conditions = append(li.conditions, c)
		li.needsOTTL = true
	}
	if len(cfg.Ignore) > 0 && len(cfg.Key) > 0 {
		errs = append(errs, errors.New("logs.ignore applies only to the content identity: leave logs.key empty or remove logs.ignore"))
	}
	ign, err := parseIgnore("logs.ignore", cfg.Ignore, logIgnorableFields)
	if err != nil {
		errs = append(errs, err)
	}
	li.ignore = ign
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return li, nil
}

func parseIgnore(field string, entries []string, ignorable []string) (contentIgnore, error) {
	ign := contentIgnore{fields: map[string]bool{}}
	allowed := map[string]bool{}
	for _, f := range ignorable {
		allowed[f] = true
	}
	var errs []error
	for i, entry := range entries {
		p, ok := parsePlainPath(entry, allowed)
		if !ok {
			errs = append(errs, fmt.Errorf(`%s[%d] %q: not an ignorable field; use attributes["k"], resource.attributes["k"], instrumentation_scope.attributes["k"] or one of %s`,
				field, i, entry, strings.Join(ignorable, ", ")))
			continue
		}
		switch p.field {
		case "attributes":
			ign.attributes = addKey(ign.attributes, p.key)
		case "resource.attributes":
			ign.resourceAttrs = addKey(ign.resourceAttrs, p.key)
		case "instrumentation_scope.attributes":
			ign.scopeAttrs = addKey(ign.scopeAttrs, p.key)
		default:
			ign.fields[p.field] = true
		}
	}
	ign.skipAttr = skipFunc(ign.attributes)
	ign.skipResource = skipFunc(ign.resourceAttrs)
	ign.skipScopeAttrs = skipFunc(ign.scopeAttrs)
	return ign, errors.Join(errs...)
}

func addKey(m map[string]bool, k string) map[string]bool {
	if m == nil {
		m = map[string]bool{}
	}
	m[k] = true
	return m
}

func skipFunc(m map[string]bool) func(string) bool {
	if len(m) == 0 {
		return nil
	}
	return func(k string) bool { return m[k] }
}

// Field ids of the content identity. Part of every content digest: fixed
// once released.
const (
	fieldResource byte = iota + 1
	fieldScope
	fieldBody
	fieldAttributes
	fieldSeverityNumber
	fieldSeverityText
	fieldEventName
	fieldTimestamp
	fieldFlags
	fieldTraceID
	fieldSpanID
)

// encodeResource encodes the resource part of a content identity; done once
// per ResourceLogs and folded into each record's encoding as a digest.
func (ign *contentIgnore) encodeResource(e *identity.Encoder, res pcommon.Resource) {
	if ign.fields["resource"] {
		return
	}
	e.Field(fieldResource)
	e.Map(res.Attributes(), ign.skipResource)
}

func (ign *contentIgnore) encodeScope(e *identity.Encoder, scope pcommon.InstrumentationScope) {
	if ign.fields["instrumentation_scope"] {
		return
	}
	e.Field(fieldScope)
	e.String(scope.Name())
	e.String(scope.Version())
	e.Map(scope.Attributes(), ign.skipScopeAttrs)
}

// encodeLogContent encodes a record's own content: everything a sender puts
// in it, but not the observed timestamp, which a re-sent record gets anew.
func (ign *contentIgnore) encodeLogContent(e *identity.Encoder, lr plog.LogRecord) {
	f := ign.fields
	if !f["body"] {
		e.Field(fieldBody)
		e.ValueOrMissing(lr.Body())
	}
	e.Field(fieldAttributes)
	e.Map(lr.Attributes(), ign.skipAttr)
	if !f["severity_number"] {
		e.Field(fieldSeverityNumber)
		e.Int(int64(lr.SeverityNumber()))
	}
	if !f["severity_text"] {
		e.Field(fieldSeverityText)
		e.String(lr.SeverityText())
	}
	if !f["event_name"] {
		e.Field(fieldEventName)
		e.String(lr.EventName())
	}
	if !f["time_unix_nano"] {
		e.Field(fieldTimestamp)
		e.Uint(uint64(lr.Timestamp()))
	}
	if !f["flags"] {
		e.Field(fieldFlags)
		e.Uint(uint64(lr.Flags()))
	}
	if !f["trace_id"] {
		e.Field(fieldTraceID)
		e.TraceID(lr.TraceID())
	}
	if !f["span_id"] {
		e.Field(fieldSpanID)
		e.SpanID(lr.SpanID())
	}
}

// keyStatus says whether a key could be derived.
type keyStatus uint8

const (
	keyOK keyStatus = iota
	keyMissing
	keyError
)

// encodeKey encodes the configured key expressions. A key is missing when
// any expression yields no value: an identity built from the parts that are
// present would merge records that differ in the absent part.
func (li *logIdentity) encodeKey(ctx context.Context, e *identity.Encoder, tctx *ottllog.TransformContext, rl plog.ResourceLogs, sl plog.ScopeLogs, lr plog.LogRecord) (keyStatus, error) {
	for i := range li.parts {
		part := &li.parts[i]
		if part.expr != nil {
			v, err := part.expr.Eval(ctx, tctx)
			if err != nil {
				return keyError, fmt.Errorf("logs.key %q: %w", part.expr.String(), err)
			}
			if !e.Any(v) {
				return keyMissing, nil
			}
			continue
		}
		if !encodeLogPath(e, part.path, rl, sl, lr) {
			return keyMissing, nil
		}
	}
	return keyOK, nil
}

// encodeLogPath evaluates a plain path. Fields without presence in OTLP
// (event_name, severity_text, trace_id, span_id) count as missing when they
// hold their zero value.
func encodeLogPath(e *identity.Encoder, p plainPath, rl plog.ResourceLogs, sl plog.ScopeLogs, lr plog.LogRecord) bool {
	switch p.field {
	case "attributes":
		return mapValue(e, lr.Attributes(), p.key)
	case "resource.attributes":
		return mapValue(e, rl.Resource().Attributes(), p.key)
	case "instrumentation_scope.attributes":
		return mapValue(e, sl.Scope().Attributes(), p.key)
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

func mapValue(e *identity.Encoder, m pcommon.Map, key string) bool {
	v, ok := m.Get(key)
	return ok && e.Value(v)
}

func nonEmptyString(e *identity.Encoder, s string) bool {
	if s == "" {
		return false
	}
	e.String(s)
	return true
}

// matches evaluates the conditions (OR). An evaluation error is returned
// with no match, so the record passes untouched.
func (li *logIdentity) matches(ctx context.Context, tctx *ottllog.TransformContext) (bool, error) {
	var firstErr error
	for _, c := range li.conditions {
		ok, err := c.Eval(ctx, tctx)
		if err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("logs.conditions %q: %w", c.String(), err)
			}
			continue
		}
		if ok {
			return true, nil
		}
	}
	return false, firstErr
}

// logsProcessor is the dedup processor in a logs pipeline. It implements
// the consumer itself, not through processorhelper, because it must see the
// next consumer's error to release the batch's claims.
type logsProcessor struct {
	*engine
	id       *logIdentity
	next     consumer.Logs
	keyError *throttledLog
}

func newLogsProcessor(set component.TelemetrySettings, id component.ID, cfg *Config, next consumer.Logs) (*logsProcessor, error) {
	li, err := newLogIdentity(cfg.Logs, set)
	if err != nil {
		return nil, err
	}
	e, err := newEngine(cfg, set, id, "logs")
	if err != nil {
		return nil, err
	}
	return &logsProcessor{
		engine:   e,
		id:       li,
		next:     next,
		keyError: newThrottledLog(set.Logger, "dedup: cannot derive the key of a log record; passing it through"),
	}, nil
}

func (p *logsProcessor) Start(context.Context, component.Host) error { return nil }

func (p *logsProcessor) Shutdown(context.Context) error { return p.shutdown() }

func (p *logsProcessor) Capabilities() consumer.Capabilities {
	return consumer.Capabilities{MutatesData: true}
}

func (p *logsProcessor) ConsumeLogs(ctx context.Context, ld plog.Logs) error {
	n := ld.LogRecordCount()
	if n == 0 {
		return nil
	}
	b := p.begin(n)
	defer p.end(b)
	enc := encoderPool.Get().(*identity.Encoder)
	defer encoderPool.Put(enc)

	p.decide(ctx, b, enc, ld)
	if b.removed > 0 || b.marked > 0 {
		p.apply(b, ld)
	}
	if ld.LogRecordCount() == 0 {
		return p.finish(ctx, b, nil)
	}
	return p.finish(ctx, b, p.next.ConsumeLogs(ctx, ld))
}

// decide gives every record a verdict, in walk order.
func (p *logsProcessor) decide(ctx context.Context, b *batch, enc *identity.Encoder, ld plog.Logs) {
	li := p.id
	contentScratch := li.parts == nil || p.cfg.OnMissingKey == MissingKeyContent
	var resDigest, scopeDigest [16]byte
	rls := ld.ResourceLogs()
	for i := 0; i < rls.Len(); i++ {
		rl := rls.At(i)
		if contentScratch {
			enc.Reset()
			li.ignore.encodeResource(enc, rl.Resource())
			resDigest = enc.Digest().Bytes()
		}
		sls := rl.ScopeLogs()
		for j := 0; j < sls.Len(); j++ {
			sl := sls.At(j)
			if contentScratch {
				enc.Reset()
				li.ignore.encodeScope(enc, sl.Scope())
				scopeDigest = enc.Digest().Bytes()
			}
			lrs := sl.LogRecords()
			for k := 0; k < lrs.Len(); k++ {
				lr := lrs.At(k)
				var tctx *ottllog.TransformContext
				if li.needsOTTL {
					tctx = ottllog.NewTransformContext(rl, sl, lr)
				}
				p.decideRecord(ctx, b, enc, tctx, rl, sl, lr, &resDigest, &scopeDigest)
				if tctx != nil {
					tctx.Close()
				}
			}
		}
	}
}

func (p *logsProcessor) decideRecord(ctx context.Context, b *batch, enc *identity.Encoder, tctx *ottllog.TransformContext,
	rl plog.ResourceLogs, sl plog.ScopeLogs, lr plog.LogRecord, resDigest, scopeDigest *[16]byte,
) {
	li := p.id
	if len(li.conditions) > 0 {
		ok, err := li.matches(ctx, tctx)
		if err != nil {
			p.keyError.log(b.now, err)
			p.pass(b, outcomeKeyError)
			return
		}
		if !ok {
			p.pass(b, outcomeSkipped)
			return
		}
	}
	enc.Reset()
	enc.Raw([]byte{signalLogs, domainKey})
	if li.parts != nil {
		status, err := li.encodeKey(ctx, enc, tctx, rl, sl, lr)
		switch status {
		case keyOK:
			p.claim(b, enc.Digest())
			return
		case keyError:
			p.keyError.log(b.now, err)
			p.pass(b, outcomeKeyError)
			return
		}
		if p.cfg.OnMissingKey != MissingKeyContent {
			p.missing(b)
			return
		}
		enc.Reset()
	}
	enc.Raw([]byte{signalLogs, domainContent})
	enc.Raw(resDigest[:])
	enc.Raw(scopeDigest[:])
	li.ignore.encodeLogContent(enc, lr)
	p.claim(b, enc.Digest())
}

// apply drops and marks records by their verdicts, then prunes the scopes
// and resources left empty.
func (p *logsProcessor) apply(b *batch, ld plog.Logs) {
	i := 0
	mark := p.cfg.MarkAttribute
	ld.ResourceLogs().RemoveIf(func(rl plog.ResourceLogs) bool {
		rl.ScopeLogs().RemoveIf(func(sl plog.ScopeLogs) bool {
			sl.LogRecords().RemoveIf(func(lr plog.LogRecord) bool {
				v := b.verdicts[i]
				i++
				if v == verdictMark {
					lr.Attributes().PutBool(mark, true)
				}
				return v == verdictDrop
			})
			return sl.LogRecords().Len() == 0
		})
		return rl.ScopeLogs().Len() == 0
	})
}

