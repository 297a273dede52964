package dedupprocessor

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.uber.org/zap"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/identity"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/localcache"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/redistier"
)

// verdict is what a batch does with one record once its claims are settled.
type verdict uint8

const (
	verdictKeep verdict = iota
	verdictDrop
	verdictMark
)

// batch is the claim state of one ConsumeXxx call: every record's verdict in
// walk order, the digests to claim, the digests this batch holds (to commit
// once delivered, or release if delivery fails), those it waits for, and the
// counts to report once the batch is accepted downstream.
type batch struct {
	// token is the batch's local claim token, and its age: tokens grow
	// with the time their batch began (see nextToken).
	token     uint64
	now       int64
	verdicts  []verdict
	pending   []digest.Digest // digests to claim, in walk order
	pendingAt []int32         // the verdict index of each pending digest
	results   []localcache.Result
	claimed   []digest.Digest // digests this batch holds, in every tier
	claimedAt []int32         // the verdict index of each claimed digest
	outcomes  [numOutcomes]int64
	tiers     [numTiers]int64
	removed   int // records dropped
	marked    int // records marked

	// The slow path: digests held by other batches still in flight.
	localWait    []digest.Digest // pending in the local cache; not held by this batch
	localWaitAt  []int32
	sharedWait   []digest.Digest // held here locally, pending in the shared tier
	sharedWaitAt []int32
	sharedHolder []string // the shared tier's token holding each sharedWait digest
	// After a yield: the digests that were pending in the local cache, and
	// those pending in the shared tier with their holders, whose claims
	// must end before the batch claims again.
	localGate   []digest.Digest
	gate        []digest.Digest
	gateHolder  []string
	yield       bool      // a holder met is older than this batch
	landed      bool      // out of flight in the local cache (see land)
	waitedSince time.Time // zero until the batch first waits

	redisToken  string             // the shared tier's claim token; "" if none
	shared      int                // claimed[:shared] are claimed in the shared tier too (or unchecked)
	sharedOK    bool               // the shared tier answered a claim of this batch
	askedShared bool               // the batch called the shared tier to claim: its later calls are rechecks
	answers     []redistier.Answer // the shared tier's answer per claimed digest
	holders     []string           // the token holding each digest answered pending ("" if none)
	// unchecked holds the claimed digests the shared tier could not answer
	// for, kept under on_error: pass on the local claim's word.
	unchecked []digest.Digest

	ballots *ballotBox // replica election (metrics); nil when not configured

	unidentified bool // the request lacks the auth_attributes identity
}

var batchPool = sync.Pool{New: func() any { return new(batch) }}

// engine is the signal-independent core: claim, settle, then commit or
// release. Signal adapters walk their pdata, derive a digest per record and
// apply the verdicts; they share this engine so that the guarantees are
// written once.
type engine struct {
	cfg       *Config
	cache     *localcache.Cache
	tel       *telemetry
	logger    *zap.Logger
	keyError  *throttledLog
	tierError *throttledLog
	refused   *throttledLog
	tokens    atomic.Uint64
	now       func() int64
	ended     settledSignal // a batch ended: committed or released
	released  settledSignal // a batch ended or yielded its claims
	// localGated counts the looks yielded batches skipped because a local
	// claim they met was still pending (the tests read it).
	localGated atomic.Int64

	clock           clock
	tier            sharedTier      // nil: local only
	redis           *redistier.Tier // the tier, when it is Redis
	elect           *elector        // replica election; nil: not configured
	electTier       electionTier    // elections in the shared tier; nil: local only
	redisPolicy     ErrorPolicy
	keySpaces       *keySpaces // of the factory that made the engine
	releaseKeySpace func()     // set while Start holds the key space

	id          component.ID
	signal      string
	fingerprint uint64       // of the settings that shape identities
	persist     *persistence // nil: no storage
}

func newEngine(cfg *Config, set component.TelemetrySettings, id component.ID, signal string, el *elector) (*engine, error) {
	e := &engine{
		cfg:         cfg,
		cache:       localcache.New(cfg.Cache.MaxEntries, int64(cfg.Window)),
		logger:      set.Logger,
		keyError:    newThrottledLog(set.Logger, "dedup: cannot evaluate the key or conditions of a "+signal+" item; passing it through"),
		tierError:   newThrottledLog(set.Logger, "dedup: shared tier (redis) failed"),
		refused:     newThrottledLog(set.Logger, "dedup: refused a batch for retry: some of its records are still being delivered by another batch"),
		now:         func() int64 { return time.Now().UnixNano() },
		clock:       wallClock{},
		id:          id,
		signal:      signal,
		fingerprint: identityFingerprint(cfg),
		elect:       el,
	}
	if r := cfg.Redis.Get(); r != nil {
		e.redisPolicy = r.OnError
	}
	tel, err := newTelemetry(set, id, signal, e)
	if err != nil {
		return nil, err
	}
	e.tel = tel
	if el != nil {
		maxSeries := cfg.Metrics.ReplicaElection.Get().MaxClusters
		if err := tel.observeElections(set.MeterProvider.Meter(scopeName), el.table, func() int64 { return e.now() }, maxSeries); err != nil {
			return nil, err
		}
	}
	return e, nil
}

func (e *engine) entries() int64   { return int64(e.cache.Len(e.now())) }
func (e *engine) evictions() int64 { return e.cache.Evictions() }

// adapter is what a signal's processor gives the engine: how to walk its
// pdata to decide each item, how to apply the verdicts, where to send it.
type adapter[T any] interface {
	decideAll(ctx context.Context, b *batch, enc *identity.Encoder, data T)
	apply(b *batch, data T)
	send(ctx context.Context, data T) error
}

// electingAdapter is an adapter with replica election (metrics): its
// electReplicas runs before decideAll, and may refuse the batch.
type electingAdapter[T any] interface {
	electReplicas(ctx context.Context, b *batch, enc *identity.Encoder, data T) error
}

// consume is ConsumeLogs, ConsumeTraces and ConsumeMetrics: decide every
// item, settle the claims, drop or mark, send on, then commit or release.
func consume[T any](ctx context.Context, e *engine, s adapter[T], data T, items int) error {
	if items == 0 {
		return s.send(ctx, data) // nothing to deduplicate
	}
	b := e.begin(items)
	defer e.end(b)
	enc := encoderPool.Get().(*identity.Encoder)
	defer encoderPool.Put(enc)

	if el, ok := s.(electingAdapter[T]); ok {
		if err := el.electReplicas(ctx, b, enc, data); err != nil {
			return err
		}
	}
	s.decideAll(ctx, b, enc, data)
	if err := e.settle(ctx, b); err != nil {
		e.releaseElections(ctx, b)
		return err
	}
	if e.needsApply(b) {
		s.apply(b, data)
	}
	if b.removed == items {
		return e.finish(ctx, b, nil) // a batch left with nothing is not sent on
	}
	return e.finish(ctx, b, s.send(ctx, data))
}

func (e *engine) begin(records int) *batch {
	b := batchPool.Get().(*batch)
	b.token = e.nextToken()
	e.cache.Begin(b.token)
	b.now = e.now()
	if cap(b.verdicts) < records {
		b.verdicts = make([]verdict, 0, records)
	}
	return b
}

// nextToken returns a token larger than every one before it and at least
// the current time in microseconds, so that tokens order batches by when
// they began, in this process and, through the shared tier's tokens that
// embed them, across the collectors sharing it.
func (e *engine) nextToken() uint64 {
	now := uint64(time.Now().UnixMicro())
	for {
		last := e.tokens.Load()
		t := max(last+1, now)
		if e.tokens.CompareAndSwap(last, t) {
			return t
		}
	}
}

// end lands the batch if finish has not, and returns it to the pool.
func (e *engine) end(b *batch) {
	if !b.landed {
		e.land(b)
	}
	if b.ballots != nil {
		e.elect.put(b.ballots)
		b.ballots = nil
	}
	const maxRetained = 64 << 10
	if cap(b.verdicts) > maxRetained {
		b.verdicts = nil
	}
	if cap(b.pending) > maxRetained {
		b.pending, b.pendingAt, b.results, b.claimed, b.claimedAt, b.answers, b.holders = nil, nil, nil, nil, nil, nil, nil
	}
	if cap(b.unchecked) > maxRetained {
		b.unchecked = nil
	}
	if cap(b.localWait)+cap(b.sharedWait) > maxRetained {
		b.localWait, b.localWaitAt, b.sharedWait, b.sharedWaitAt, b.sharedHolder = nil, nil, nil, nil, nil
	}
	if cap(b.gate)+cap(b.localGate) > maxRetained {
		b.localGate, b.gate, b.gateHolder = nil, nil, nil
	}
	*b = batch{
		verdicts: b.verdicts[:0], pending: b.pending[:0], pendingAt: b.pendingAt[:0], results: b.results[:0],
		claimed: b.claimed[:0], claimedAt: b.claimedAt[:0], answers: b.answers[:0], holders: b.holders[:0],
		localWait: b.localWait[:0], localWaitAt: b.localWaitAt[:0],
		sharedWait: b.sharedWait[:0], sharedWaitAt: b.sharedWaitAt[:0], sharedHolder: b.sharedHolder[:0],
		localGate: b.localGate[:0], gate: b.gate[:0], gateHolder: b.gateHolder[:0],
		unchecked: b.unchecked[:0],
	}
	batchPool.Put(b)
}

// claim queues a keyed item for settle, which decides it: the first copy
// within the window is kept, later copies (in this batch or any other)
// follow the action.
func (e *engine) claim(b *batch, d digest.Digest) {
	b.pendingAt = append(b.pendingAt, int32(len(b.verdicts)))
	b.verdicts = append(b.verdicts, verdictKeep)
	b.pending = append(b.pending, d)
}

// duplicate turns the item at verdict index idx into a duplicate caught by
// tier, following the action.
func (e *engine) duplicate(b *batch, idx int, tr tier) {
	b.tiers[tr]++
	b.outcomes[outcomeDuplicate]++
	if e.cfg.Action == ActionMark {
		b.marked++
		b.verdicts[idx] = verdictMark
		return
	}
	b.removed++
	b.verdicts[idx] = verdictDrop
}

// pass keeps a record without deduplicating it, counted under o.
func (e *engine) pass(b *batch, o outcome) {
	b.outcomes[o]++
	b.verdicts = append(b.verdicts, verdictKeep)
}

// missing applies on_missing_key's pass or drop (content is handled by
// decide, which derives the content digest and calls claim).
func (e *engine) missing(b *batch) {
	b.outcomes[outcomeMissingKey]++
	if e.cfg.OnMissingKey == MissingKeyDrop {
		b.removed++
		b.verdicts = append(b.verdicts, verdictDrop)
		return
	}
	b.verdicts = append(b.verdicts, verdictKeep)
}

// finish settles a batch after the next consumer answered. On error the keys
// this batch claimed are released, so the sender's retry is delivered rather
// than dropped as a duplicate of data that never arrived, and the error goes
// back to the sender. Counts are reported only for accepted batches: a
// refused batch comes back with its retry and is counted then. Either way,
// end (deferred by consume) then takes the batch out of flight.
func (e *engine) finish(ctx context.Context, b *batch, err error) error {
	if err != nil {
		e.tel.recordReleased(ctx, e.releaseAll(ctx, b))
		e.releaseElections(ctx, b)
		return err
	}
	// The next consumer has the batch: its local claims are committed now,
	// so the local copies waiting for them go on while the shared tier
	// commits (a copy dropped meanwhile has a delivered original; a commit
	// that fails leaves the shared claims pending, never a record lost).
	e.land(b)
	if b.ballots != nil {
		e.commitElections(ctx, b) // the shared claims too, in one round trip
	} else {
		e.commitShared(ctx, b)
	}
	e.tel.recordBatch(ctx, b)
	return nil
}

// land takes the batch out of flight in the local cache: the keys it still
// holds are committed (a batch that was not delivered has released them by
// now), and the batches waiting for them are woken.
func (e *engine) land(b *batch) {
	b.landed = true
	e.cache.End(b.token)
	e.ended.broadcast()
	e.released.broadcast()
}

func (e *engine) Start(ctx context.Context, host component.Host) (err error) {
	if err := checkAuthenticator(e.cfg, host); err != nil {
		return err
	}
	if e.cfg.Redis.Get() != nil {
		release, err := e.claimKeySpace()
		if err != nil {
			return err
		}
		e.releaseKeySpace = release
		defer func() {
			if err != nil {
				release()
				e.releaseKeySpace = nil
			}
		}()
	}
	if err := e.startPersistence(ctx, host); err != nil {
		return err
	}
	return e.startTier(ctx, host)
}

func (e *engine) Shutdown(ctx context.Context) error {
	if e.releaseKeySpace != nil {
		e.releaseKeySpace()
		e.releaseKeySpace = nil
	}
	return errors.Join(e.stopPersistence(ctx), e.stopTier(), e.tel.shutdown())
}

func (e *engine) Capabilities() consumer.Capabilities {
	return consumer.Capabilities{MutatesData: true}
}
