package dedupprocessor

import (
	"context"
	"errors"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/ottl"
	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/ottl/contexts/ottldatapoint"
	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/ottl/ottlfuncs"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/claim"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/election"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/identity"
)

var dataPointSpec = &signalSpec[*ottldatapoint.TransformContext]{
	name: "metrics",
	tag:  'M',
	newParser: func(set component.TelemetrySettings) (ottl.Parser[*ottldatapoint.TransformContext], error) {
		return ottldatapoint.NewParser(ottlfuncs.StandardConverters[*ottldatapoint.TransformContext](), set)
	},
	scalars:   []string{"metric.name", "time_unix_nano", "start_time_unix_nano"},
	ignorable: []string{"start_time_unix_nano", "time_unix_nano", "resource", "instrumentation_scope"},
}

// pointView is a data point as the identity sees it, fields copied out so no
// point is boxed.
type pointView struct {
	rm     pmetric.ResourceMetrics
	sm     pmetric.ScopeMetrics
	metric pmetric.Metric
	point  any // the point itself, for an OTTL transform context only
	attrs  pcommon.Map
	start  pcommon.Timestamp
	ts     pcommon.Timestamp
	flags  pmetric.DataPointFlags
}

func (v pointView) transformContext() *ottldatapoint.TransformContext {
	return ottldatapoint.NewTransformContext(v.rm, v.sm, v.metric, v.point)
}

func (v pointView) path(e *identity.Encoder, p plainPath) bool {
	if handled, ok := commonPath(e, p, v.rm.Resource(), v.sm.Scope(), v.attrs); handled {
		return ok
	}
	switch p.field {
	case "metric.name":
		return nonEmptyString(e, v.metric.Name())
	case "time_unix_nano":
		e.Int(int64(v.ts))
	case "start_time_unix_nano":
		e.Int(int64(v.start))
	default:
		return false
	}
	return true
}

// content encodes attributes and timestamps (the stream is in the group
// digest), not the value: a repeat.
func (v pointView) content(e *identity.Encoder, ign *contentIgnore) {
	e.Field(fieldAttributes)
	e.Map(v.attrs, ign.skipAttr)
	if !ign.fields.has(ignStartTimeUnixNano) {
		e.FieldUint(fieldStartTimestamp, uint64(v.start))
	}
	if !ign.fields.has(ignTimeUnixNano) {
		e.FieldUint(fieldTimestamp, uint64(v.ts))
	}
	// NoRecordedValue: a staleness marker is not the point it marks.
	if v.flags != 0 {
		e.FieldUint(fieldFlags, uint64(v.flags))
	}
}

// metricDigest is a metric's stream identity without point attributes.
func metricDigest(e *identity.Encoder, m pmetric.Metric) [16]byte {
	e.Reset()
	e.FieldString(fieldName, m.Name())
	e.FieldInt(fieldMetricType, int64(m.Type()))
	e.FieldString(fieldUnit, m.Unit())
	switch m.Type() {
	case pmetric.MetricTypeSum:
		e.FieldInt(fieldTemporality, int64(m.Sum().AggregationTemporality()))
		e.Field(fieldMonotonic)
		e.Bool(m.Sum().IsMonotonic())
	case pmetric.MetricTypeHistogram:
		e.FieldInt(fieldTemporality, int64(m.Histogram().AggregationTemporality()))
	case pmetric.MetricTypeExponentialHistogram:
		e.FieldInt(fieldTemporality, int64(m.ExponentialHistogram().AggregationTemporality()))
	}
	return e.Digest().Bytes()
}

// metricsProcessor is the dedup processor in a metrics pipeline; its unit is
// the data point.
type metricsProcessor struct {
	*core
	out   claim.Sink[pmetric.Metrics]
	si    *signalIdentity[*ottldatapoint.TransformContext]
	elect *elector // replica election; nil: not configured
}

func newMetricsProcessor(set component.TelemetrySettings, id component.ID, cfg *Config, next consumer.Metrics) (*metricsProcessor, error) {
	ec := cfg.Metrics.ReplicaElection.Get()
	var table *election.Table
	if ec != nil {
		table = newElectionTable(ec)
	}
	e, si, err := newCore(dataPointSpec, cfg.Metrics.SignalConfig, set, id, cfg, table)
	if err != nil {
		return nil, err
	}
	p := &metricsProcessor{core: e, out: claim.Sink[pmetric.Metrics]{Next: next.ConsumeMetrics, NewData: pmetric.NewMetrics}, si: si}
	if ec != nil {
		if p.elect, err = newElector(cfg, ec, table, e.Rounds(), e.Shared(), e.tel.meter, e.tel.base); err != nil {
			return nil, errors.Join(err, e.Shutdown(context.Background()))
		}
	}
	return p, nil
}

func (p *metricsProcessor) ConsumeMetrics(ctx context.Context, md pmetric.Metrics) error {
	n := md.DataPointCount()
	if p.elect == nil || n == 0 {
		return claim.Consume(ctx, p.Engine, metricsCall{Sink: p.out, p: p}, md, n)
	}
	box, err := p.elect.elect(ctx, md)
	if err != nil {
		return err
	}
	defer p.elect.put(box)
	return claim.Consume(ctx, p.Engine, metricsCall{Sink: p.out, p: p, box: box}, md, n)
}

// metricsCall is one ConsumeMetrics call's adapter.
type metricsCall struct {
	claim.Sink[pmetric.Metrics]
	p   *metricsProcessor
	box *ballotBox // nil: no replica election
}

func (c metricsCall) FirstCallSettled(ctx context.Context, err error) {
	if c.box != nil {
		c.p.elect.settle(ctx, c.box, err)
	}
}

func (c metricsCall) Identify(ctx context.Context, b *claim.Batch, md pmetric.Metrics) {
	p := c.p
	enc := encoderPool.Get().(*identity.Encoder)
	defer encoderPool.Put(enc)
	w := newWalk(ctx, p.core, p.si, b, enc)
	var view pointView
	for _, rm := range md.ResourceMetrics().All() {
		view.rm = rm
		w.enterResource(rm.Resource(), rm.SchemaUrl())
		for _, sm := range rm.ScopeMetrics().All() {
			view.sm = sm
			w.enterScope(sm.Scope(), sm.SchemaUrl())
			for _, m := range sm.Metrics().All() {
				view.metric = m
				if w.content {
					w.sk.group, w.sk.hasPrefix = metricDigest(w.enc, m), false
				}
				switch m.Type() {
				case pmetric.MetricTypeGauge:
					decidePoints(&w, c.box, &view, m.Gauge().DataPoints())
				case pmetric.MetricTypeSum:
					decidePoints(&w, c.box, &view, m.Sum().DataPoints())
				case pmetric.MetricTypeHistogram:
					decidePoints(&w, c.box, &view, m.Histogram().DataPoints())
				case pmetric.MetricTypeExponentialHistogram:
					decidePoints(&w, c.box, &view, m.ExponentialHistogram().DataPoints())
				case pmetric.MetricTypeSummary:
					decidePoints(&w, c.box, &view, m.Summary().DataPoints())
				}
			}
		}
	}
}

func decidePoints[P dataPoint](w *walk[*ottldatapoint.TransformContext], box *ballotBox, view *pointView, points pointSlice[P]) {
	for i := 0; i < points.Len(); i++ {
		if box != nil && !box.admit(w.b) {
			continue // a point of a replica that is not elected
		}
		dp := points.At(i)
		if w.si.needsOTTL {
			view.point = dp // boxed: only for OTTL
		}
		view.attrs, view.start, view.ts, view.flags = dp.Attributes(), dp.StartTimestamp(), dp.Timestamp(), dp.Flags()
		identifyUnit(w, *view)
	}
}

func (c metricsCall) Apply(b *claim.Batch, md pmetric.Metrics, later *pmetric.Metrics) {
	a := b.Applier()
	var mv *pointMover
	if later != nil {
		mv = &pointMover{later: later}
	}
	md.ResourceMetrics().RemoveIf(func(rm pmetric.ResourceMetrics) bool {
		if c.box != nil {
			c.box.stripResource = false
		}
		if mv != nil {
			mv.rm, mv.toR = rm, lazily[pmetric.ResourceMetrics]{}
		}
		rm.ScopeMetrics().RemoveIf(func(sm pmetric.ScopeMetrics) bool {
			if mv != nil {
				mv.sm, mv.toS = sm, lazily[pmetric.ScopeMetrics]{}
			}
			sm.Metrics().RemoveIf(func(m pmetric.Metric) bool {
				if mv != nil {
					mv.m, mv.toM = m, lazily[pmetric.Metric]{}
				}
				switch m.Type() {
				case pmetric.MetricTypeGauge:
					return applyPoints(&a, c.box, m.Gauge().DataPoints(), mv)
				case pmetric.MetricTypeSum:
					return applyPoints(&a, c.box, m.Sum().DataPoints(), mv)
				case pmetric.MetricTypeHistogram:
					return applyPoints(&a, c.box, m.Histogram().DataPoints(), mv)
				case pmetric.MetricTypeExponentialHistogram:
					return applyPoints(&a, c.box, m.ExponentialHistogram().DataPoints(), mv)
				case pmetric.MetricTypeSummary:
					return applyPoints(&a, c.box, m.Summary().DataPoints(), mv)
				}
				return false
			})
			return sm.Metrics().Len() == 0
		})
		if c.box != nil && c.box.stripResource {
			rm.Resource().Attributes().Remove(c.box.ec.ReplicaLabel)
		}
		return rm.ScopeMetrics().Len() == 0
	})
}

// pointMover moves the points left for later to copies of their metric
// (without points), scope and resource, made at the first point moved.
type pointMover struct {
	later *pmetric.Metrics
	rm    pmetric.ResourceMetrics
	sm    pmetric.ScopeMetrics
	m     pmetric.Metric
	toR   lazily[pmetric.ResourceMetrics]
	toS   lazily[pmetric.ScopeMetrics]
	toM   lazily[pmetric.Metric]
}

func (mv *pointMover) metric() pmetric.Metric {
	return mv.toM.get(func() pmetric.Metric {
		s := mv.toS.get(func() pmetric.ScopeMetrics {
			r := mv.toR.get(func() pmetric.ResourceMetrics {
				r := mv.later.ResourceMetrics().AppendEmpty()
				mv.rm.Resource().CopyTo(r.Resource())
				r.SetSchemaUrl(mv.rm.SchemaUrl())
				return r
			})
			s := r.ScopeMetrics().AppendEmpty()
			mv.sm.Scope().CopyTo(s.Scope())
			s.SetSchemaUrl(mv.sm.SchemaUrl())
			return s
		})
		return metricWithoutPoints(mv.m, s.Metrics().AppendEmpty())
	})
}

func (mv *pointMover) move(dp any) {
	to := mv.metric()
	switch dp := dp.(type) {
	case pmetric.NumberDataPoint:
		if to.Type() == pmetric.MetricTypeGauge {
			dp.MoveTo(to.Gauge().DataPoints().AppendEmpty())
		} else {
			dp.MoveTo(to.Sum().DataPoints().AppendEmpty())
		}
	case pmetric.HistogramDataPoint:
		dp.MoveTo(to.Histogram().DataPoints().AppendEmpty())
	case pmetric.ExponentialHistogramDataPoint:
		dp.MoveTo(to.ExponentialHistogram().DataPoints().AppendEmpty())
	case pmetric.SummaryDataPoint:
		dp.MoveTo(to.Summary().DataPoints().AppendEmpty())
	}
}

// metricWithoutPoints makes dst m's copy without its points, and returns it.
func metricWithoutPoints(m, dst pmetric.Metric) pmetric.Metric {
	dst.SetName(m.Name())
	dst.SetDescription(m.Description())
	dst.SetUnit(m.Unit())
	m.Metadata().CopyTo(dst.Metadata())
	switch m.Type() {
	case pmetric.MetricTypeGauge:
		dst.SetEmptyGauge()
	case pmetric.MetricTypeSum:
		s := dst.SetEmptySum()
		s.SetAggregationTemporality(m.Sum().AggregationTemporality())
		s.SetIsMonotonic(m.Sum().IsMonotonic())
	case pmetric.MetricTypeHistogram:
		dst.SetEmptyHistogram().SetAggregationTemporality(m.Histogram().AggregationTemporality())
	case pmetric.MetricTypeExponentialHistogram:
		dst.SetEmptyExponentialHistogram().SetAggregationTemporality(m.ExponentialHistogram().AggregationTemporality())
	case pmetric.MetricTypeSummary:
		dst.SetEmptySummary()
	}
	return dst
}

// applyPoints applies a metric's verdicts and reports whether it lost all its
// points (none at first: kept); with mv, a point left for later moves there.
// With remove_replica_label, elected points lose the label, or set
// box.stripResource if it is the resource's.
func applyPoints[P dataPoint](a *claim.Applier, box *ballotBox, points pointSlice[P], mv *pointMover) bool {
	if points.Len() == 0 {
		return false
	}
	strip := box != nil && a.Alters()
	points.RemoveIf(func(dp P) bool {
		i := a.At()
		removed, later := a.Unit(dp.Attributes())
		if later && mv != nil {
			mv.move(dp)
		}
		if !strip {
			return removed
		}
		if elected, resource := box.elected(i); elected && resource {
			box.stripResource = true
		} else if elected && !removed {
			dp.Attributes().Remove(box.ec.ReplicaLabel)
		}
		return removed
	})
	return points.Len() == 0
}
