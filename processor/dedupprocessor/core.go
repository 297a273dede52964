package dedupprocessor

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/otel/metric"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/claim"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/election"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/identity"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/redistier"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/throttle"
)

// core is what the three signals' processors share: the claim engine, the
// settings their identities need, and the telemetry.
type core struct {
	*claim.Engine
	cfg      *Config
	source   *sourceKey // names each resource's sender; nil: not traced
	keyError *throttle.Log
	tel      *telemetry
	gauges   metric.Registration
}

// newCore makes what every signal's processor has: its core and its identity;
// table is its replica elections (nil: none), forgotten when Redis may have
// lost them.
func newCore[K any](spec *signalSpec[K], sc SignalConfig, set component.TelemetrySettings, id component.ID, cfg *Config, table *election.Table) (*core, *signalIdentity[K], error) {
	si, err := newSignalIdentity(spec, set, sc)
	if err != nil {
		return nil, nil, err
	}
	signal := spec.name
	tel, err := newTelemetry(set, id, signal, cfg, len(sc.Key) > 0)
	if err != nil {
		return nil, nil, err
	}
	opts := claim.Options{
		Window:            cfg.Window,
		PendingWait:       cfg.PendingWait,
		Mark:              cfg.Action == ActionMark,
		MarkAttribute:     cfg.MarkAttribute,
		IdentityAttribute: cfg.IdentityAttribute,
		Local: claim.LocalOptions{
			MaxEntries: cfg.Cache.MaxEntries, Storage: cfg.Storage, SnapshotInterval: cfg.SnapshotInterval,
			ID: id, Signal: signal, Fingerprint: identityFingerprint(cfg),
		},
		Clock:    cfg.clock,
		Logger:   set.Logger,
		Observer: tel,
	}
	if r := cfg.Redis.Get(); r != nil {
		if opts.Shared, err = sharedOptions(cfg, r, id); err != nil {
			return nil, nil, errors.Join(err, tel.copies.close())
		}
		if table != nil {
			opts.Shared.Forget = table.ForgetCommitted
		}
	}
	e := claim.New(opts)
	p := &core{
		Engine: e, cfg: cfg, tel: tel,
		source:   newSourceKey(cfg.Source.Key),
		keyError: throttle.New(set.Logger, "dedup: cannot evaluate the key or conditions of a "+signal+" item; passing it through"),
	}
	p.gauges, err = tel.observe(e, table)
	return p, si, err
}

// sharedOptions are the shared tier's settings of r.
func sharedOptions(cfg *Config, r *RedisConfig, id component.ID) (*claim.SharedOptions, error) {
	o := &claim.SharedOptions{
		Tier: redistier.Options{
			Endpoints:    r.Endpoints,
			Mode:         redistier.Mode(r.Mode),
			MasterName:   r.MasterName,
			Username:     r.Username,
			Password:     string(r.Password),
			DB:           r.DB,
			KeyPrefix:    cmp.Or(r.KeyPrefix, defaultKeyPrefix(id, cfg)),
			ClusterSlots: r.ClusterSlots,
			Timeout:      r.Timeout,
			Lease:        r.Lease,
		},
		Refuse: r.OnError == ErrorRefuse,
	}
	if t := r.TLS.Get(); t != nil {
		var err error
		if o.Tier.TLS, err = t.LoadTLSConfig(context.Background()); err != nil {
			return nil, fmt.Errorf("dedup: redis.tls: %w", err)
		}
	}
	return o, nil
}

func (p *core) Start(ctx context.Context, host component.Host) error {
	if err := checkAuthenticator(p.cfg, host); err != nil {
		return err
	}
	return p.Engine.Start(ctx, host)
}

// Shutdown waits for the batches in flight (the engine's), then stops the
// telemetry's callbacks.
func (p *core) Shutdown(ctx context.Context) error {
	return errors.Join(p.Engine.Shutdown(ctx), p.gauges.Unregister(), p.tel.copies.close())
}

func (p *core) Capabilities() consumer.Capabilities {
	return consumer.Capabilities{MutatesData: true}
}

// lazily is a destination for moved units, made at its first use.
type lazily[T any] struct {
	v    T
	made bool
}

func (l *lazily[T]) get(newT func() T) T {
	if !l.made {
		l.v, l.made = newT(), true
	}
	return l.v
}

// walk is a batch's walk over its units: the adapter calls enterResource,
// enterScope and identifyUnit at each level.
type walk[K transformContext] struct {
	ctx     context.Context
	p       *core
	si      *signalIdentity[K]
	b       *claim.Batch
	enc     *identity.Encoder
	content bool // some unit may be identified by its content
	sk      scopeKey
	request []string // the values of source.key's request parts
}

func newWalk[K transformContext](ctx context.Context, p *core, si *signalIdentity[K], b *claim.Batch, enc *identity.Encoder) walk[K] {
	tenant, identified := tenantDigest(ctx, p.cfg, enc)
	b.Unidentified = !identified
	w := walk[K]{
		ctx: ctx, p: p, si: si, b: b, enc: enc,
		content: si.parts == nil || p.cfg.OnMissingKey == MissingKeyContent,
		sk:      scopeKey{tenant: tenant},
	}
	if p.source != nil {
		w.request = p.source.request(ctx)
	}
	return w
}

// enterResource names the source of the resource's records and sets the content
// identities' resource part (dropped count, schema URL only when set).
func (w *walk[K]) enterResource(res pcommon.Resource, schemaURL string) {
	if w.p.source != nil {
		w.b.Source(w.p.source.name(res, w.request))
	}
	if w.content {
		e, ign := w.enc, &w.si.ignore
		e.Reset()
		if !ign.fields.has(ignResource) {
			e.Field(fieldResource)
			e.Map(res.Attributes(), ign.skipResource)
			droppedAndSchema(e, res.DroppedAttributesCount(), schemaURL)
		}
		w.sk.resource, w.sk.hasPrefix = e.Digest().Bytes(), false
	}
}

func (w *walk[K]) enterScope(scope pcommon.InstrumentationScope, schemaURL string) {
	if w.content {
		e, ign := w.enc, &w.si.ignore
		e.Reset()
		if !ign.fields.has(ignInstrumentationScope) {
			e.Field(fieldScope)
			e.String(scope.Name())
			e.String(scope.Version())
			e.Map(scope.Attributes(), ign.skipScopeAttrs)
			droppedAndSchema(e, scope.DroppedAttributesCount(), schemaURL)
		}
		w.sk.scope, w.sk.hasPrefix = e.Digest().Bytes(), false
	}
}

func identifyUnit[K transformContext, V unitView[K]](w *walk[K], view V) {
	policy := w.p.cfg.OnMissingKey
	var tctx K
	if w.si.needsOTTL {
		tctx = view.transformContext()
	}
	d, o, err := decide(w.ctx, policy, w.enc, w.si, tctx, view, &w.sk)
	if w.si.needsOTTL {
		tctx.Close()
	}
	if o == claim.Unique {
		w.b.Keyed(d)
		return
	}
	if err != nil {
		w.p.keyError.Log(w.b.Now(), err)
	}
	// Passed without deduplication, or dropped.
	w.b.Passed(o, o == claim.MissingKey && policy == MissingKeyDrop)
}
