package dedupprocessor

import (
	"context"
	"math"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/claim"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/topk"
)

// Copies traced to their cause and their source: how long after its original
// each copy came (duplicate_age, by what caught it), who sends them (source_duplicates
// and source_records: the source.max_sources heaviest sources by name, the
// rest as one), and a log line per source per source.log_interval.
//
// A copy's age tells its cause. Within a second: fan-out or a double send.
// From a second to five minutes: retries (an exporter's timeout, the
// collector's retry_on_failure gives up after 5 minutes). Beyond: a replay, a
// re-read file, a backfill. The batch tier's copies are 0 s old (the same
// request); the local tier knows when it claimed the original; the shared
// tier tells how long ago the original's claim was committed, to the second.

// copyAgeBounds are duplicate_age's bucket boundaries (seconds): 1 and 300
// split the three causes; the last is a week, the longest window in use.
var copyAgeBounds = []float64{0.1, 1, 5, 15, 30, 60, 120, 300, 900, 1800, 3600, 7200, 21600, 86400, 604800}

// otherSources counts the sources beyond source.max_sources, as one.
const otherSources = "(other)"

const (
	// fanOutAge and retryAge split the causes, as copyAgeBounds do.
	fanOutAge = time.Second
	retryAge  = 5 * time.Minute
	// sourceHalfLife is how fast a source's rank fades: a source that
	// stopped sending copies gives way to one that started.
	sourceHalfLife = time.Hour
)

// copyTelemetry records the copies of each accepted call.
type copyTelemetry struct {
	ages    metric.Float64Histogram
	ageOpts [claim.NumCaughtBy]metric.RecordOption
	sources *copySources // nil: source.key is empty
}

// newCopyTelemetry makes the copies' telemetry; keyed: the signal's identity
// is its key expressions, not its content.
func newCopyTelemetry(meter metric.Meter, base series, cfg *Config, keyed bool, logger *zap.Logger) (*copyTelemetry, error) {
	ct := &copyTelemetry{}
	var err error
	ct.ages, err = meter.Float64Histogram("otelcol_processor_dedup_duplicate_age",
		metric.WithDescription("Seconds from a duplicate's original to the duplicate, by what caught it (label caught_by; batch: the same request, 0; local: since this collector claimed the original; redis: since the original's claim was committed, to the second): up to 1 s fan-out or a double send, up to 300 s retries, beyond replays, re-read files and backfills."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(copyAgeBounds...))
	if err != nil {
		return nil, err
	}
	labelled(base, ct.ageOpts[:], "caught_by", claim.CaughtByNames[:])
	if len(cfg.Source.Key) > 0 {
		// A guessable digest is shown only where the backend holds it anyway.
		example := !keyed || cfg.IdentityAttribute != ""
		ct.sources, err = newCopySources(meter, base, cfg.Source, example, logger)
	}
	return ct, err
}

// record records the copies of an accepted call, and its records by source.
func (ct *copyTelemetry) record(ctx context.Context, b *claim.Batch) {
	for _, c := range b.Copies() {
		if c.Age >= 0 {
			ct.ages.Record(ctx, c.Age.Seconds(), ct.ageOpts[c.By:c.By+1]...)
		}
	}
	if ct.sources != nil && b.HasSources() {
		ct.sources.record(b)
	}
}

func (ct *copyTelemetry) close() error {
	if ct.sources == nil {
		return nil
	}
	return ct.sources.registration.Unregister()
}

// copySources counts records and copies by source in bounded memory: a
// Space-Saving summary of the heaviest sources of copies (see topk), ranked by
// copies with a half-life of sourceHalfLife. A source's series count from
// when it was last held, so each rises while it is; the rest, the totals
// minus the held sources', is otherSources', which never falls: a source
// that leaves the summary takes its counts there.
type copySources struct {
	logger   *zap.Logger
	interval int64 // the least time between two lines about one source; 0: none
	example  bool  // whether a copy's digest may be logged
	base     series

	copiesSeries, recordsSeries metric.Int64ObservableCounter
	registration                metric.Registration

	mu              sync.Mutex
	top             *topk.Summary[sourceCounts]
	other           sourceCounts // its log state; its counts are derived
	copies, records int64        // of every source
	decayAt         int64        // when the ranks halve next; 0: not started
	dueAt           int64        // when the first log line is due; 0: none
}

// sourceCounts is a held source's counts since it was last held, and what its
// next log line will say.
type sourceCounts struct {
	copies, records int64
	since           int64 // when it was held, or its last line
	line            sourceLine
}

// sourceLine is what a source's copies since its last log line amount to.
type sourceLine struct {
	copies, records int64
	minAge, maxAge  time.Duration // minAge < 0: no age known
	example         digest.Digest
	hasExample      bool
}

func (l *sourceLine) add(t *claim.SourceTally, example digest.Digest, hasExample bool) {
	l.merge(sourceLine{copies: t.Copies, minAge: t.MinAge, maxAge: t.MaxAge, example: example, hasExample: hasExample})
}

// merge adds o's copies (not its records: the line of otherSources has none).
func (l *sourceLine) merge(o sourceLine) {
	if o.copies == 0 {
		return
	}
	if l.copies == 0 {
		l.minAge = claim.UnknownAge
	}
	l.copies += o.copies
	if o.minAge >= 0 {
		if l.minAge < 0 || o.minAge < l.minAge {
			l.minAge = o.minAge
		}
		l.maxAge = max(l.maxAge, o.maxAge)
	}
	if !l.hasExample && o.hasExample {
		l.example, l.hasExample = o.example, true
	}
}

func newCopySources(meter metric.Meter, base series, sc SourceConfig, example bool, logger *zap.Logger) (*copySources, error) {
	cs := &copySources{
		logger: logger, interval: int64(sc.LogInterval), example: example, base: base,
		top: topk.New[sourceCounts](sc.MaxSources),
	}
	var err error
	if cs.copiesSeries, err = meter.Int64ObservableCounter("otelcol_processor_dedup_source_duplicates",
		metric.WithDescription("Duplicate records by source (label source: what source.key names): the source.max_sources sources of the most copies, each counted from when it became one of them, and (other) for the rest."),
		metric.WithUnit("{records}")); err != nil {
		return nil, err
	}
	if cs.recordsSeries, err = meter.Int64ObservableCounter("otelcol_processor_dedup_source_records",
		metric.WithDescription("Records by source, as otelcol_processor_dedup_source_duplicates counts their copies (the same sources, counted from the same moment): the share of a source's records that are copies is the ratio of the two."),
		metric.WithUnit("{records}")); err != nil {
		return nil, err
	}
	cs.registration, err = meter.RegisterCallback(cs.observe, cs.copiesSeries, cs.recordsSeries)
	return cs, err
}

// record adds a call's records and copies by source, and logs the lines due.
func (cs *copySources) record(b *claim.Batch) {
	tally := b.Tally()
	now := b.Now()
	var due []namedLine
	cs.mu.Lock()
	cs.decay(now)
	for i := range tally {
		t := &tally[i]
		if t.Records == 0 && t.Copies == 0 {
			continue
		}
		cs.records += t.Records
		cs.copies += t.Copies
		name := t.Source
		var e *topk.Entry[sourceCounts]
		if t.Copies > 0 {
			var added bool
			if e, added = cs.top.Add(name, float64(t.Copies), cs.evict); added {
				e.Value.since = now
			}
			e.Value.copies += t.Copies
			if cs.interval > 0 {
				d, ok := b.DigestAt(t.Example)
				e.Value.line.add(t, d, ok)
				cs.due(e.Value.since)
			}
		} else if e = cs.top.Get(name); e == nil {
			continue
		}
		e.Value.records += t.Records
		e.Value.line.records += t.Records
	}
	if cs.dueAt != 0 && now >= cs.dueAt {
		due = cs.flush(now)
	}
	cs.mu.Unlock()
	for _, l := range due {
		cs.log(l)
	}
}

// decay halves the ranks once every sourceHalfLife.
func (cs *copySources) decay(now int64) {
	if cs.decayAt == 0 {
		cs.decayAt, cs.other.since = now+int64(sourceHalfLife), now
		return
	}
	if now < cs.decayAt {
		return
	}
	halvings := 1 + (now-cs.decayAt)/int64(sourceHalfLife)
	cs.top.Scale(math.Ldexp(1, -int(min(halvings, 1100)))) // 2^-1100 is 0
	cs.decayAt += halvings * int64(sourceHalfLife)
}

// evict moves a source leaving the summary into otherSources: its counts by
// the totals, its log line by hand.
func (cs *copySources) evict(e *topk.Entry[sourceCounts]) {
	if e.Value.line.copies > 0 {
		cs.other.line.merge(e.Value.line)
		cs.due(cs.other.since)
	}
}

// due notes that a source whose last line (or arrival) was at since has copies
// to report.
func (cs *copySources) due(since int64) {
	if at := since + cs.interval; cs.dueAt == 0 || at < cs.dueAt {
		cs.dueAt = at
	}
}

// namedLine is a log line due, and whose.
type namedLine struct {
	source string
	held   bool // a source by name, not otherSources
	period time.Duration
	sourceLine
}

// flush takes the lines due at now, and notes when the next is.
func (cs *copySources) flush(now int64) []namedLine {
	var due []namedLine
	cs.dueAt = 0
	take := func(name string, held bool, c *sourceCounts) {
		if c.line.copies == 0 {
			return
		}
		if now-c.since < cs.interval {
			cs.due(c.since)
			return
		}
		due = append(due, namedLine{source: name, held: held, period: time.Duration(now - c.since), sourceLine: c.line})
		c.since, c.line = now, sourceLine{}
	}
	for e := range cs.top.All() {
		take(e.Key, true, &e.Value)
	}
	take(otherSources, false, &cs.other)
	return due
}

func (cs *copySources) log(l namedLine) {
	fields := []zap.Field{zap.String("source", l.source), zap.Int64("copies", l.copies)}
	if l.held {
		fields = append(fields, zap.Int64("records", l.records))
	}
	if l.minAge >= 0 {
		fields = append(fields, zap.Duration("age_min", l.minAge), zap.Duration("age_max", l.maxAge))
	}
	fields = append(fields, zap.String("cause", causeOf(l.minAge, l.maxAge)))
	switch {
	case !l.hasExample:
	case cs.example:
		fields = append(fields, zap.String("example_identity", l.example.String()))
	default:
		fields = append(fields, zap.String("example_identity", "redacted: the digest of a key can be guessed from its values; set identity_attribute to log it"))
	}
	fields = append(fields, zap.Duration("period", l.period))
	cs.logger.Info("dedup: a source sent copies of records already delivered", fields...)
}

// causeOf names the likely cause of copies aged from minAge to maxAge.
func causeOf(minAge, maxAge time.Duration) string {
	switch {
	case minAge < 0:
		return "unknown: the tier that caught them does not tell the originals' age"
	case maxAge <= fanOutAge:
		return "fan-out or a double send (within 1s)"
	case minAge > fanOutAge && maxAge <= retryAge:
		return "retries (1s to 5m)"
	case minAge > retryAge:
		return "replay, re-read or backfill (over 5m)"
	}
	return "mixed: see otelcol_processor_dedup_duplicate_age"
}

// observe reports each held source's counts, and otherSources' as the totals
// minus theirs.
func (cs *copySources) observe(_ context.Context, o metric.Observer) error {
	type series struct {
		source          string
		copies, records int64
	}
	cs.mu.Lock()
	all := make([]series, 0, cs.top.Len()+1)
	other := series{source: otherSources, copies: cs.copies, records: cs.records}
	for e := range cs.top.All() {
		if e.Key == otherSources {
			continue // a sender named so: counted with the rest
		}
		all = append(all, series{e.Key, e.Value.copies, e.Value.records})
		other.copies -= e.Value.copies
		other.records -= e.Value.records
	}
	cs.mu.Unlock()
	for _, s := range append(all, other) {
		opt := cs.base.with(attribute.String("source", s.source))
		o.ObserveInt64(cs.copiesSeries, s.copies, opt)
		o.ObserveInt64(cs.recordsSeries, s.records, opt)
	}
	return nil
}
