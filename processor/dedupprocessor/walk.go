package dedupprocessor

import (
	"context"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/identity"
)

// What every signal's processing shares. An adapter walks its pdata
// (resource, scope, and for metrics the metric, then units) and calls the
// walk below as it enters each level; a view gives decide the unit's fields.
// Applying the verdicts is the same per unit too (applyUnit).

// transformContext is an OTTL transform context: built for a unit only when
// a key or condition needs OTTL, and closed after it.
type transformContext interface{ Close() }

// walk is one batch's walk over one signal's units.
type walk[K transformContext] struct {
	ctx     context.Context
	e       *engine
	si      *signalIdentity[K]
	b       *batch
	enc     *identity.Encoder
	content bool // some unit may be identified by its content
	sk      scopeKey
}

func newWalk[K transformContext](ctx context.Context, e *engine, si *signalIdentity[K], b *batch, enc *identity.Encoder) walk[K] {
	tenant, identified := tenantDigest(ctx, e.cfg, enc)
	b.unidentified = !identified
	return walk[K]{
		ctx: ctx, e: e, si: si, b: b, enc: enc,
		content: si.usesContent(e.cfg.OnMissingKey),
		sk:      scopeKey{tenant: tenant},
	}
}

// resource enters a resource: content identities of its units start with
// its digest.
func (w *walk[K]) resource(res pcommon.Resource, schemaURL string) {
	if w.content {
		w.sk.setResource(w.si.ignore.resourceDigest(w.enc, res, schemaURL))
	}
}

// scope enters an instrumentation scope.
func (w *walk[K]) scope(scope pcommon.InstrumentationScope, schemaURL string) {
	if w.content {
		w.sk.setScope(w.si.ignore.scopeDigest(w.enc, scope, schemaURL))
	}
}

// unitView is a unit's view for decide, able to build the unit's OTTL
// transform context.
type unitView[K transformContext] interface {
	recordView
	transformContext() K
}

// unit decides one unit.
func unit[K transformContext, V unitView[K]](w *walk[K], view V) {
	if !w.si.needsOTTL {
		var none K
		decide(w.ctx, w.e, w.b, w.enc, w.si, none, view, &w.sk)
		return
	}
	tctx := view.transformContext()
	decide(w.ctx, w.e, w.b, w.enc, w.si, tctx, view, &w.sk)
	tctx.Close()
}
