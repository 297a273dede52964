package dedupprocessor

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/ottl"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/claim"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/identity"
)

// Domain tags open every identity encoding: key and content identities and
// signals never collide.
const (
	domainKey     byte = 'k'
	domainContent byte = 'c'
)

// plainPath is a field access evaluated on pdata, not OTTL, returning what
// OTTL does: digests agree.
type plainPath struct {
	field string // "attributes", "resource.attributes", "body", ...
	key   string // the map key for attribute paths
}

var (
	attrPathRE  = regexp.MustCompile(`^\s*(attributes|resource\.attributes|instrumentation_scope\.attributes)\["([^"\\]*)"\]\s*$`)
	fieldPathRE = regexp.MustCompile(`^\s*([a-z_.]+)\s*$`)
)

// parsePlainPath recognises attribute paths and the plain fields named in
// fields.
func parsePlainPath(expr string, fields []string) (plainPath, bool) {
	if m := attrPathRE.FindStringSubmatch(expr); m != nil {
		return plainPath{field: m[1], key: m[2]}, true
	}
	if m := fieldPathRE.FindStringSubmatch(expr); m != nil && slices.Contains(fields, m[1]) {
		return plainPath{field: m[1]}, true
	}
	return plainPath{}, false
}

var encoderPool = sync.Pool{New: func() any { return new(identity.Encoder) }}

// signalSpec is what differs between signals in deriving an identity.
type signalSpec[K any] struct {
	name      string // "logs", "traces", "metrics"
	tag       byte   // opens every encoding of this signal
	newParser func(component.TelemetrySettings) (ottl.Parser[K], error)
	scalars   []string // the fields a plain path may name
	ignorable []string // the fields the content identity may ignore
}

// keyPart is one compiled key expression: a plain path, or OTTL if expr is set.
type keyPart[K any] struct {
	path plainPath
	expr *ottl.ValueExpression[K]
}

// signalIdentity derives the digest of a signal's unit (record, span, point).
type signalIdentity[K any] struct {
	spec       *signalSpec[K]
	parts      []keyPart[K]
	conditions []*ottl.Condition[K]
	ignore     contentIgnore
	needsOTTL  bool
}

// transformContext is an OTTL transform context, built only when needed.
type transformContext interface{ Close() }

// unitView is one unit of pdata as the identity sees it.
type unitView[K transformContext] interface {
	path(e *identity.Encoder, p plainPath) bool      // encodes a value, false if none
	content(e *identity.Encoder, ign *contentIgnore) // the unit's own, not resource and scope
	transformContext() K
}

func newSignalIdentity[K any](spec *signalSpec[K], set component.TelemetrySettings, cfg SignalConfig) (*signalIdentity[K], error) {
	si := &signalIdentity[K]{spec: spec}
	var errs []error
	getParser := sync.OnceValues(func() (ottl.Parser[K], error) { return spec.newParser(set) })
	for i, expr := range cfg.Key {
		if strings.TrimSpace(expr) == "" {
			errs = append(errs, fmt.Errorf("%s.key[%d]: expression must not be empty", spec.name, i))
			continue
		}
		if p, ok := parsePlainPath(expr, spec.scalars); ok {
			si.parts = append(si.parts, keyPart[K]{path: p})
			continue
		}
		p, err := getParser()
		if err != nil {
			return nil, err
		}
		ve, err := p.ParseValueExpression(expr)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s.key[%d] %q: %w", spec.name, i, expr, err))
			continue
		}
		si.parts = append(si.parts, keyPart[K]{expr: ve})
		si.needsOTTL = true
	}
	for i, cond := range cfg.Conditions {
		p, err := getParser()
		if err != nil {
			return nil, err
		}
		c, err := p.ParseCondition(cond)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s.conditions[%d] %q: %w", spec.name, i, cond, err))
			continue
		}
		si.conditions = append(si.conditions, c)
		si.needsOTTL = true
	}
	if len(cfg.Ignore) > 0 && len(cfg.Key) > 0 {
		errs = append(errs, fmt.Errorf("%[1]s.ignore applies only to the content identity: set %[1]s.key to [] or remove %[1]s.ignore", spec.name))
	}
	var err error
	si.ignore, err = parseIgnore(spec.name+".ignore", cfg.Ignore, spec.ignorable)
	return si, errors.Join(append(errs, err)...)
}

// encodeKey encodes the key expressions and reports whether all had a value:
// one built from the parts present would merge units differing in the rest.
func encodeKey[K transformContext, V unitView[K]](ctx context.Context, si *signalIdentity[K], e *identity.Encoder, tctx K, view V) (bool, error) {
	for i := range si.parts {
		part := &si.parts[i]
		if part.expr == nil {
			if !view.path(e, part.path) {
				return false, nil
			}
			continue
		}
		v, err := part.expr.Eval(ctx, tctx)
		if err != nil {
			return false, fmt.Errorf("%s.key %q: %w", si.spec.name, part.expr.String(), err)
		}
		if !e.Any(v) {
			return false, nil
		}
	}
	return true, nil
}

// matches evaluates the conditions (OR); on an error, no match: the unit
// passes untouched.
func (si *signalIdentity[K]) matches(ctx context.Context, tctx K) (bool, error) {
	var firstErr error
	for _, c := range si.conditions {
		ok, err := c.Eval(ctx, tctx)
		if err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("%s.conditions %q: %w", si.spec.name, c.String(), err)
			}
			continue
		}
		if ok {
			return true, nil
		}
	}
	return false, firstErr
}

// scopeKey opens every unit's identity: tenant per batch, the rest (content
// only) per group.
type scopeKey struct {
	tenant    [digest.Size]byte
	resource  [digest.Size]byte
	scope     [digest.Size]byte
	group     [digest.Size]byte // e.g. a metric's name, type and unit
	prefix    [digest.Size]byte // of the above, valid if hasPrefix
	hasPrefix bool
}

// contentPrefix is the digest opening the current group's content identities.
func (sk *scopeKey) contentPrefix(enc *identity.Encoder, tag byte) []byte {
	if !sk.hasPrefix {
		enc.Reset()
		enc.Raw([]byte{tag, domainContent})
		enc.Raw(sk.tenant[:])
		enc.Raw(sk.resource[:])
		enc.Raw(sk.scope[:])
		enc.Raw(sk.group[:])
		sk.prefix, sk.hasPrefix = enc.Digest().Bytes(), true
	}
	return sk.prefix[:]
}

// decide derives a unit's identity: its digest (unique) or the outcome it
// passes under (skipped, key_error with the error, missing_key). The view is
// a type parameter, not an interface: it stays on the stack (no GC barriers).
func decide[K transformContext, V unitView[K]](ctx context.Context, policy MissingKeyPolicy, enc *identity.Encoder, si *signalIdentity[K], tctx K, view V, sk *scopeKey) (digest.Digest, claim.Outcome, error) {
	if len(si.conditions) > 0 {
		ok, err := si.matches(ctx, tctx)
		if err != nil {
			return digest.Digest{}, claim.KeyError, err
		}
		if !ok {
			return digest.Digest{}, claim.Skipped, nil
		}
	}
	if si.parts != nil {
		enc.Reset()
		enc.Raw([]byte{si.spec.tag, domainKey})
		enc.Raw(sk.tenant[:])
		ok, err := encodeKey(ctx, si, enc, tctx, view)
		switch {
		case err != nil:
			return digest.Digest{}, claim.KeyError, err
		case ok:
			return enc.Digest(), claim.Unique, nil
		case policy != MissingKeyContent:
			return digest.Digest{}, claim.MissingKey, nil
		}
	}
	prefix := sk.contentPrefix(enc, si.spec.tag)
	enc.Reset()
	enc.Raw(prefix)
	view.content(enc, &si.ignore)
	return enc.Digest(), claim.Unique, nil
}

// fieldSet is a set of scalar fields, one bit each: no lookup per field.
type fieldSet uint32

const (
	ignBody fieldSet = 1 << iota
	ignEventName
	ignSeverityText
	ignSeverityNumber
	ignTraceID
	ignSpanID
	ignTimeUnixNano
	ignFlags
	ignResource
	ignInstrumentationScope
	ignName
	ignKind
	ignParentSpanID
	ignTraceState
	ignStartTimeUnixNano
	ignEndTimeUnixNano
	ignEvents
	ignLinks
	ignStatus
	ignObservedTimeUnixNano
)

// ignorableNames names the fieldSet bits, in their order.
var ignorableNames = [...]string{
	"body", "event_name", "severity_text", "severity_number", "trace_id", "span_id",
	"time_unix_nano", "flags", "resource", "instrumentation_scope", "name", "kind",
	"parent_span_id", "trace_state", "start_time_unix_nano", "end_time_unix_nano",
	"events", "links", "status", "observed_time_unix_nano",
}

func (f fieldSet) has(field fieldSet) bool { return f&field != 0 }

// contentIgnore is the set of fields left out of a content identity.
type contentIgnore struct {
	fields         fieldSet
	skipAttr       func(string) bool
	skipResource   func(string) bool
	skipScopeAttrs func(string) bool
}

func parseIgnore(field string, entries []string, ignorable []string) (contentIgnore, error) {
	var ign contentIgnore
	attrs := map[string]map[string]bool{"attributes": {}, "resource.attributes": {}, "instrumentation_scope.attributes": {}}
	var errs []error
	for i, entry := range entries {
		p, ok := parsePlainPath(entry, ignorable)
		if !ok {
			errs = append(errs, fmt.Errorf(`%s[%d] %q: not an ignorable field; use attributes["k"], resource.attributes["k"], instrumentation_scope.attributes["k"] or one of %s`,
				field, i, entry, strings.Join(ignorable, ", ")))
			continue
		}
		if k := slices.Index(ignorableNames[:], p.field); k >= 0 {
			ign.fields |= 1 << k
			continue
		}
		attrs[p.field][p.key] = true
	}
	ign.skipAttr = skipFunc(attrs["attributes"])
	ign.skipResource = skipFunc(attrs["resource.attributes"])
	ign.skipScopeAttrs = skipFunc(attrs["instrumentation_scope.attributes"])
	return ign, errors.Join(errs...)
}

func skipFunc(m map[string]bool) func(string) bool {
	if len(m) == 0 {
		return nil
	}
	return func(k string) bool { return m[k] }
}

// Field ids of the content identities: fixed, as part of every digest.
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
	fieldParentSpanID
	fieldTraceState
	fieldName
	fieldKind
	fieldStartTimestamp
	fieldEndTimestamp
	fieldEvents
	fieldLinks
	fieldStatus
	fieldMetricType
	fieldUnit
	fieldTemporality
	fieldMonotonic
	fieldObservedTimestamp
	fieldDroppedAttributes
	fieldDroppedEvents
	fieldDroppedLinks
	fieldSchemaURL
)

func droppedAndSchema(e *identity.Encoder, dropped uint32, schemaURL string) {
	dropped32(e, fieldDroppedAttributes, dropped)
	if schemaURL != "" {
		e.FieldString(fieldSchemaURL, schemaURL)
	}
}

// dropped32 writes a nonzero dropped count (attributes, events, links): it
// tells units apart.
func dropped32(e *identity.Encoder, id byte, n uint32) {
	if n != 0 {
		e.FieldUint(id, uint64(n))
	}
}

// commonPath evaluates the attribute paths every context shares, or reports
// them not handled.
func commonPath(e *identity.Encoder, p plainPath, res pcommon.Resource, scope pcommon.InstrumentationScope, attrs pcommon.Map) (handled, ok bool) {
	var m pcommon.Map
	switch p.field {
	case "attributes":
		m = attrs
	case "resource.attributes":
		m = res.Attributes()
	case "instrumentation_scope.attributes":
		m = scope.Attributes()
	default:
		return false, false
	}
	v, ok := m.Get(p.key)
	return true, ok && e.Value(v)
}

// nonEmptyString encodes s, missing when empty: OTLP strings like event_name
// have no presence.
func nonEmptyString(e *identity.Encoder, s string) bool {
	if s == "" {
		return false
	}
	e.String(s)
	return true
}

// defaultKeyPrefix namespaces the shared keys by component ID and the settings
// that shape identities: two pipelines' dedup processors must each deliver
// every record, and processors configured apart could hash different records
// alike. Settings that do not change what a digest means (the window, the
// lease, the Redis settings) are not in it: a rolling change of them keeps
// a fleet on one key space. It is short (Redis spends CPU per key); 32 bits
// keep processors apart.
func defaultKeyPrefix(id component.ID, cfg *Config) string {
	var e identity.Encoder
	e.String(id.String())
	e.Uint(identityFingerprint(cfg))
	h := e.Digest().Hi
	return fmt.Sprintf("dedup:%08x:", uint32(h^h>>32))
}

// identityEncoding versions the digests' encoding, in the fingerprint: bump
// it on any change to it.
const identityEncoding = 1

// identityFingerprint hashes what a digest means: no snapshot or key of other
// settings is reused.
func identityFingerprint(cfg *Config) uint64 {
	var e identity.Encoder
	e.Uint(identityEncoding)
	for _, list := range [][]string{
		cfg.MetadataKeys, cfg.AuthAttributes,
		cfg.Logs.Key, cfg.Logs.Ignore, cfg.Logs.Conditions,
		cfg.Traces.Key, cfg.Traces.Ignore, cfg.Traces.Conditions,
		cfg.Metrics.Key, cfg.Metrics.Ignore, cfg.Metrics.Conditions,
	} {
		e.Uint(uint64(len(list)))
		for _, s := range list {
			e.String(s)
		}
	}
	e.String(string(cfg.OnMissingKey))
	return e.Digest().Hi
}

// contentIDs encodes a trace and a span ID, leaving out the ignored ones.
func contentIDs(e *identity.Encoder, f fieldSet, traceID pcommon.TraceID, spanID pcommon.SpanID) {
	switch {
	case !f.has(ignTraceID | ignSpanID):
		e.FieldIDs(fieldTraceID, traceID, fieldSpanID, spanID)
	case !f.has(ignTraceID):
		e.Field(fieldTraceID)
		e.TraceID(traceID)
	case !f.has(ignSpanID):
		e.Field(fieldSpanID)
		e.SpanID(spanID)
	}
}
