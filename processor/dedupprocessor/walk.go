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

// applier applies a batch's verdicts to its units, in walk order.
type applier struct {
	e    *engine
	b    *batch
	i    int // the next unit's verdict index
	next int // the next keyed unit's index in b.pending
}

// unit applies the next unit's verdict: it marks a kept duplicate, writes
// the unit's identity to identity_attribute if that is set, and reports
// whether to remove the unit.
func (a *applier) unit(attrs pcommon.Map) bool {
	v := a.b.verdicts[a.i]
	keyed := a.next < len(a.b.pendingAt) && int(a.b.pendingAt[a.next]) == a.i
	a.i++
	if v == verdictDrop {
		if keyed {
			a.next++
		}
		return true
	}
	if v == verdictMark {
		attrs.PutBool(a.e.cfg.MarkAttribute, true)
	}
	if keyed {
		if name := a.e.cfg.IdentityAttribute; name != "" {
			attrs.PutStr(name, a.b.pending[a.next].String())
		}
		a.next++
	}
	return false
}

// needsApply says whether the verdicts change the batch at all.
func (e *engine) needsApply(b *batch) bool {
	return b.removed > 0 || b.marked > 0 || e.cfg.IdentityAttribute != "" && len(b.pending) > 0 ||
		b.ballots != nil && b.ballots.strips > 0
}
