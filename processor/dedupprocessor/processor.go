package dedupprocessor

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
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
// walk order, the digests this batch newly claimed (to release if delivery
// fails), and the counts to report once the batch is accepted downstream.
type batch struct {
	token     uint64
	now       int64
	verdicts  []verdict
	pending   []digest.Digest // digests to claim, in walk order
	pendingAt []int32         // the verdict index of each pending digest
	results   []localcache.Result
	claimed   []digest.Digest // digests this batch newly claimed
	claimedAt []int32         // the verdict index of each claimed digest
	outcomes  [numOutcomes]int64
	tiers     [numTiers]int64
	removed   int // records dropped
	marked    int // records marked

	redisToken string             // the shared tier's claim token; "" if none was made
	answers    []redistier.Answer // the shared tier's answer per claimed digest
	waiting    []digest.Digest    // digests held by pending claims elsewhere
	waitingAt  []int32            // their index in claimed
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
	tokens    atomic.Uint64
	now       func() int64

	tier           *redistier.Tier // nil: local only
	redisPolicy    ErrorPolicy
	pendingWait    time.Duration
	pendingRefused *throttledLog

	id          component.ID
	signal      string
	fingerprint uint64       // of the settings that shape identities
	persist     *persistence // nil: no storage

	// inflight holds the tokens of batches between claim and commit or
	// release, kept only with storage: a snapshot leaves their keys out.
	inflightMu sync.Mutex
	inflight   map[uint64]struct{}
}

func newEngine(cfg *Config, set component.TelemetrySettings, id component.ID, signal string) (*engine, error) {
	e := &engine{
		cfg:         cfg,
		cache:       localcache.New(cfg.Cache.MaxEntries, int64(cfg.Window)),
		logger:      set.Logger,
		keyError:    newThrottledLog(set.Logger, "dedup: cannot evaluate the key or conditions of a "+signal+" item; passing it through"),
		tierError:   newThrottledLog(set.Logger, "dedup: shared tier (redis) failed"),
		now:         func() int64 { return time.Now().UnixNano() },
		id:          id,
		signal:      signal,
		fingerprint: identityFingerprint(cfg),
	}
	if r := cfg.Redis.Get(); r != nil {
		e.redisPolicy, e.pendingWait = r.OnError, r.PendingWait
		e.pendingRefused = newThrottledLog(set.Logger, "dedup: refused a batch for retry: another collector is still delivering some of its records")
	}
	tel, err := newTelemetry(set, id, signal, e)
	if err != nil {
		return nil, err
	}
	e.tel = tel
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

	s.decideAll(ctx, b, enc, data)
	if err := e.settle(ctx, b); err != nil {
		return err
	}
	if b.removed > 0 || b.marked > 0 {
		s.apply(b, data)
	}
	if b.removed == items {
		return e.finish(ctx, b, nil) // a batch left with nothing is not sent on
	}
	return e.finish(ctx, b, s.send(ctx, data))
}

func (e *engine) begin(records int) *batch {
	b := batchPool.Get().(*batch)
	b.token = e.tokens.Add(1)
	if e.persist != nil {
		e.inflightMu.Lock()
		e.inflight[b.token] = struct{}{}
		e.inflightMu.Unlock()
	}
	b.now = e.now()
	if cap(b.verdicts) < records {
		b.verdicts = make([]verdict, 0, records)
	}
	return b
}

func (e *engine) end(b *batch) {
	if e.persist != nil {
		e.inflightMu.Lock()
		delete(e.inflight, b.token)
		e.inflightMu.Unlock()
	}
	const maxRetained = 64 << 10
	if cap(b.verdicts) > maxRetained {
		b.verdicts = nil
	}
	if cap(b.pending) > maxRetained {
		b.pending, b.pendingAt, b.results, b.claimed, b.claimedAt = nil, nil, nil, nil, nil
		b.answers, b.waiting, b.waitingAt = nil, nil, nil
	}
	*b = batch{
		verdicts: b.verdicts[:0], pending: b.pending[:0], pendingAt: b.pendingAt[:0], results: b.results[:0],
		claimed: b.claimed[:0], claimedAt: b.claimedAt[:0], answers: b.answers[:0],
		waiting: b.waiting[:0], waitingAt: b.waitingAt[:0],
	}
	batchPool.Put(b)
}

// claim queues a keyed item for claimAll, which decides it: the first copy
// within the window is kept, later copies (in this batch or any other)
// follow the action.
func (e *engine) claim(b *batch, d digest.Digest) {
	b.pendingAt = append(b.pendingAt, int32(len(b.verdicts)))
	b.verdicts = append(b.verdicts, verdictKeep)
	b.pending = append(b.pending, d)
}

// claimAll claims the batch's digests in the local cache, all at once so
// the cache can take each shard's lock once and overlap its memory reads.
func (e *engine) claimAll(b *batch) {
	if len(b.pending) == 0 {
		return
	}
	if cap(b.results) < len(b.pending) {
		b.results = make([]localcache.Result, len(b.pending))
	}
	results := b.results[:len(b.pending)]
	e.cache.ClaimBatch(b.pending, b.token, b.now, results)
	for i, res := range results {
		idx := int(b.pendingAt[i])
		switch res {
		case localcache.Claimed:
			b.claimed = append(b.claimed, b.pending[i])
			b.claimedAt = append(b.claimedAt, int32(idx))
			b.outcomes[outcomeUnique]++
		case localcache.HeldBySelf:
			e.duplicate(b, idx, tierBatch)
		default:
			e.duplicate(b, idx, tierLocal)
		}
	}
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
// refused batch comes back with its retry and is counted then.
func (e *engine) finish(ctx context.Context, b *batch, err error) error {
	if err != nil {
		e.releaseTier(ctx, b)
		e.tel.recordReleased(ctx, e.releaseLocal(b))
		return err
	}
	e.commitTier(ctx, b)
	e.tel.recordBatch(ctx, b)
	return nil
}

// releaseLocal forgets the batch's local claims; it returns how many it
// still held.
func (e *engine) releaseLocal(b *batch) int {
	n := 0
	for _, d := range b.claimed {
		if e.cache.Release(d, b.token) {
			n++
		}
	}
	return n
}

// applyVerdict marks a kept duplicate and reports whether to remove the item.
func (e *engine) applyVerdict(v verdict, attrs pcommon.Map) bool {
	if v == verdictMark {
		attrs.PutBool(e.cfg.MarkAttribute, true)
	}
	return v == verdictDrop
}

// tenant is the digest of the request's metadata_keys values: part of every
// identity, so that tenants never suppress each other's data.
func (e *engine) tenant(ctx context.Context, enc *identity.Encoder) [digest.Size]byte {
	if len(e.cfg.MetadataKeys) == 0 {
		return [digest.Size]byte{}
	}
	info := client.FromContext(ctx)
	enc.Reset()
	for _, k := range e.cfg.MetadataKeys {
		vals := info.Metadata.Get(k)
		enc.Uint(uint64(len(vals)))
		for _, v := range vals {
			enc.String(v)
		}
	}
	return enc.Digest().Bytes()
}

func (e *engine) Start(ctx context.Context, host component.Host) error {
	if err := e.startPersistence(ctx, host); err != nil {
		return err
	}
	return e.startTier(ctx)
}

func (e *engine) Shutdown(ctx context.Context) error {
	return errors.Join(e.stopPersistence(ctx), e.stopTier(), e.tel.shutdown())
}

func (e *engine) Capabilities() consumer.Capabilities {
	return consumer.Capabilities{MutatesData: true}
}
