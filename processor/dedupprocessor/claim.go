package dedupprocessor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/localcache"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/redistier"
)

// The claim discipline, the same in both tiers.
//
// A batch claims each record's digest, first in the local cache, then, for
// the digests it won there, in the shared tier. A claim is pending until the
// next consumer has accepted the batch (committed) or refused it (released).
// A copy is a duplicate only on the word of a committed claim: its record
// was delivered. A copy whose digest is held by a pending claim, of another
// batch in this collector or in another one, waits for that batch: if it
// commits, the copy is a duplicate; if it releases, the copy is claimed and
// delivered. The wait is bounded by pending_wait; after it the batch is
// refused with a retryable error, so the sender tries again later. Dropping
// the copy instead could lose the record for good: its other copy's delivery
// may fail, and a sender that was told "accepted" never sends it again.
//
// Waiting must never deadlock. A batch's claims are atomic only in pieces
// (per cache shard, per script call of at most maxKeysPerScript digests, per
// Cluster node), so two batches can each win some digests and meet the
// other's pending claims on the rest. The rule that keeps them apart is
// wait-die, by age: every batch has a token that orders it against every
// other (older = began earlier; nextToken, and redistier.NewToken for the
// shared tier, which embeds the same age). A batch that meets a pending
// claim of a younger batch waits, holding its own claims. A batch that meets
// a pending claim of an older batch yields: it releases every claim it holds,
// in both tiers, and only then waits, holding nothing, until the claims it
// met have ended, before it claims again. So a batch that waits while
// holding claims waits only for younger batches, and a batch that waits for
// an older one holds nothing anyone can wait for: every chain of waits runs
// from older to younger batches, and none can close into a cycle. A batch
// keeps its token, and so its age, across its yields, so it ends up the
// oldest of those it meets and is no longer turned back.
//
// The rule is applied lazily, in both tiers: a batch may wait, holding its
// claims, for an older batch that is marked as not able to wait for it. In
// the local cache a batch is marked once it waits at all (SetWaiting, which
// also wakes the waiting batches). In Redis it is marked once it waits for a
// younger batch's claim: a waiting mark beside its claims, set by the claim
// call that met that claim (redistier). A younger batch that waits for a
// marked one while holding claims is told so at its next look (PendingOlder:
// the local cache's at once, Redis's at its next recheck, at most maxPause
// later) and then yields.
//
// Why no cycle of waits lasts: a cycle cannot run from older to younger
// batches all the way round, so some batch in it waits for a younger one,
// and is marked in the tier the cycle reaches it through (a batch waiting in
// the local cache holds no claim in Redis, see below, so a wait on it is a
// local one, and a batch marked in Redis is marked locally too). Follow the
// cycle backwards from it: each batch waiting on a marked one is either
// younger, and yields, or older, and so waits for a younger batch and is
// marked in turn; the ages cannot grow all the way round, so one yields.
// Copies racing for a record, in one collector or across collectors, and
// chains of copies each waiting for an older original, then cost a short
// wait, not the release and re-claim of every record of the younger batch.
//
// A batch claims in the shared tier only once it waits for no local claim:
// a batch that waits, or yields, in this collector then costs Redis
// nothing, and holds nothing there that other collectors would wait for.
//
// The common case meets no pending claim: one ClaimBatch, one shared round
// trip, and none of the code below the fast path runs.

// errInFlight is returned when a record of the batch is still held by
// another batch's pending claim after pending_wait: that batch has not
// delivered it yet and may never (its next consumer may fail, its collector
// may have died). Dropping the copy could lose the record, so the sender is
// asked to retry: by then that claim is committed (the copy is a duplicate),
// released, or past its lease (the copy is new).
var errInFlight = errors.New("dedup: a record of this batch is still being delivered by another batch; retry later")

// errSharedTier is returned to senders under on_error: refuse. The
// receivers turn it into a retryable status (gRPC Unavailable, HTTP 503).
var errSharedTier = errors.New("dedup: shared tier unavailable; retry later")

// maxPause bounds the pause between two looks at the claims a batch waits
// for; the first look comes after a millisecond. Across collectors nothing
// wakes a waiting batch when the claims it waits for settle, so the pause is
// how late it may see them settle: short next to the export times it waits
// out, while a look costs one round trip for the records still pending.
const maxPause = 16 * time.Millisecond

// settle decides every keyed record of the batch: a claim of this batch, a
// duplicate, or, after waiting, either of the two. On error the batch holds
// no claim and is not to be delivered.
func (e *engine) settle(ctx context.Context, b *batch) error {
	if len(b.pending) == 0 {
		return nil
	}
	if e.tier != nil && b.redisToken == "" { // elections may have made it
		b.redisToken = redistier.NewToken(b.token)
	}
	e.claimLocal(b, b.pending, b.pendingAt)
	if len(b.localWait) == 0 {
		if err := e.claimShared(ctx, b, redistier.OpClaim); err != nil {
			if err := e.sharedFailed(ctx, b, err); err != nil {
				return err
			}
		}
	}
	if len(b.localWait) > 0 || len(b.sharedWait) > 0 {
		if err := e.await(ctx, b); err != nil {
			return err
		}
	}
	b.outcomes[outcomeUnique] = int64(len(b.claimed))
	return nil
}

// claimLocal claims ds (at: their verdict indexes) in the local cache, in
// one ClaimBatch so the cache takes each shard's lock once and overlaps its
// memory reads. Won digests join b.claimed, still to be claimed in the
// shared tier; digests held by a pending claim join b.localWait.
func (e *engine) claimLocal(b *batch, ds []digest.Digest, at []int32) {
	if cap(b.results) < len(ds) {
		b.results = make([]localcache.Result, len(ds))
	}
	results := b.results[:len(ds)]
	e.cache.ClaimBatch(ds, b.token, b.now, results)
	for i, res := range results {
		switch res {
		case localcache.Claimed:
			b.claimed = append(b.claimed, ds[i])
			b.claimedAt = append(b.claimedAt, at[i])
		case localcache.HeldBySelf:
			e.duplicate(b, int(at[i]), tierBatch)
		case localcache.Held:
			e.duplicate(b, int(at[i]), tierLocal)
		default: // Pending, PendingOlder
			b.yield = b.yield || res == localcache.PendingOlder
			b.localWait = append(b.localWait, ds[i])
			b.localWaitAt = append(b.localWaitAt, at[i])
		}
	}
}

// claimShared claims in the shared tier, in one round trip (one per node in
// a Cluster), the digests of b.claimed it has not claimed there yet. A
// digest another instance delivered becomes a duplicate, remembered locally
// as committed; one held by a pending claim moves to b.sharedWait, still
// held here locally. A digest the tier could not answer for (its node
// failed) is, under on_error: pass, kept on the local claim's word and
// noted in b.unchecked; under refuse, or when the caller gave up, the error
// is returned and the batch is to be refused. Without a shared tier the
// local claims stand as they are.
func (e *engine) claimShared(ctx context.Context, b *batch, op string) error {
	from := b.shared
	if b.redisToken == "" || len(b.claimed) == from {
		return nil
	}
	ds := b.claimed[from:]
	b.askedShared = true
	if cap(b.answers) < len(ds) {
		b.answers = make([]redistier.Answer, len(ds))
	}
	answers := b.answers[:len(ds)]
	// A recheck names the holders lookAgain lined up; a claim learns them.
	if op != redistier.OpRecheck {
		if cap(b.holders) < len(ds) {
			b.holders = make([]string, len(ds))
		}
		b.holders = b.holders[:len(ds)]
	}
	holders := b.holders
	var err error
	if op == redistier.OpRecheck {
		err = e.tier.Recheck(ctx, b.redisToken, b.claimed[:from], ds, answers, holders)
	} else {
		err = e.tier.ClaimHolders(ctx, b.redisToken, ds, answers, holders, e.cache.ClaimsStayDistinct(len(b.pending)))
	}
	b.sharedOK = b.sharedOK || answered(answers)
	if err != nil {
		if e.redisPolicy == ErrorRefuse || ctx.Err() != nil {
			return err
		}
		e.tierError.log(b.now, err, zap.String("on_error", string(ErrorPass)))
	}
	kept := from
	for i, a := range answers {
		d, at := ds[i], b.claimedAt[from+i]
		switch a {
		case redistier.Claimed:
			b.claimed[kept], b.claimedAt[kept] = d, at
			kept++
		case redistier.Unavailable:
			// on_error: pass. A claim that reached Redis despite the
			// error rightly holds its record.
			b.claimed[kept], b.claimedAt[kept] = d, at
			kept++
			b.unchecked = append(b.unchecked, d)
		case redistier.Held:
			e.cache.Disown(d, b.token)
			e.duplicate(b, int(at), tierRedis)
		default: // Pending, PendingOlder, PendingYounger
			b.yield = b.yield || a == redistier.PendingOlder
			b.sharedWait = append(b.sharedWait, d)
			b.sharedWaitAt = append(b.sharedWaitAt, at)
			b.sharedHolder = append(b.sharedHolder, holders[i])
		}
	}
	b.claimed, b.claimedAt = b.claimed[:kept], b.claimedAt[:kept]
	b.shared = kept
	return nil
}

// answered reports whether the shared tier answered for any digest.
func answered(answers []redistier.Answer) bool {
	for _, a := range answers {
		if a != redistier.Unavailable {
			return true
		}
	}
	return false
}

// await waits for the pending claims the batch met, by the discipline above,
// until none is left or pending_wait has passed.
func (e *engine) await(ctx context.Context, b *batch) error {
	b.waitedSince = e.clock.now()
	deadline := b.waitedSince.Add(e.cfg.PendingWait)
	e.ended.waiters.Add(1)
	defer e.ended.waiters.Add(-1)
	e.released.waiters.Add(1)
	defer e.released.waiters.Add(-1)
	// Younger batches waiting for this one's claims must now yield.
	e.cache.SetWaiting(b.token, true)
	defer e.cache.SetWaiting(b.token, false)
	e.released.broadcast()
	pause := time.Millisecond
	for {
		// A batch waiting for local claims is woken when the batches of
		// this engine settle: one that holds claims while it waits, when
		// any batch releases claims; one that yielded, only when a batch
		// ends. Were yielders woken by each other's yields, two of them
		// blocked by the same older batch would wake each other without
		// end. The channel is taken before the look below, so that a
		// batch settling after it wakes this one. A batch waiting only
		// for other collectors' claims has nothing to be woken by here:
		// it asks Redis again after its pause.
		var settled <-chan struct{}
		local := len(b.localWait) > 0
		yielded := b.yield || len(b.localGate) > 0 || len(b.gate) > 0
		if b.yield {
			e.yieldClaims(ctx, b)
		}
		if local && yielded {
			settled = e.ended.channel()
		} else if local {
			settled = e.released.channel()
		}
		if e.clock.now().Add(pause).After(deadline) {
			e.refused.log(b.now, errInFlight, zap.Int("records", len(b.localWait)+len(b.sharedWait)))
			e.tel.recordWait(ctx, e.clock.now().Sub(b.waitedSince), waitRefused)
			e.releaseAll(ctx, b)
			return errInFlight
		}
		if err := e.clock.pause(ctx, settled, pause); err != nil {
			e.releaseAll(ctx, b)
			return err
		}
		pause = min(2*pause, maxPause)
		// A batch that gave its claims up claims again only once the
		// claims it waited for have ended: claiming while the older one
		// it yielded to is pending would meet it and give everything up
		// again, a release and a claim of every record per look. Asking
		// costs a look-up per digest it waited for in the local cache,
		// and a status read per holder in the shared tier.
		if len(b.localGate) > 0 {
			if e.cache.AnyPending(b.localGate, e.now()) {
				e.localGated.Add(1)
				continue
			}
			b.localGate = b.localGate[:0]
		}
		if len(b.gate) > 0 {
			if pending, err := e.tier.HoldersPending(ctx, b.gate, b.gateHolder); err == nil && pending {
				continue
			}
			b.gate, b.gateHolder = b.gate[:0], b.gateHolder[:0]
		}
		if err := e.lookAgain(ctx, b); err != nil {
			if err := e.sharedFailed(ctx, b, err); err != nil {
				return err
			}
		}
		if len(b.localWait) == 0 && len(b.sharedWait) == 0 {
			e.tel.recordWait(ctx, e.clock.now().Sub(b.waitedSince), waitSettled)
			return nil
		}
	}
}

// clock is the time of waits: the wall clock, or a simulated one in tests
// that interleave batches deterministically.
type clock interface {
	now() time.Time
	// pause returns after d, when settled is closed, or with ctx's error
	// when ctx is done.
	pause(ctx context.Context, settled <-chan struct{}, d time.Duration) error
}

type wallClock struct{}

func (wallClock) now() time.Time { return time.Now() }

func (wallClock) pause(ctx context.Context, settled <-chan struct{}, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-settled:
	case <-timer.C:
	}
	return nil
}

// lookAgain claims the digests the batch waits for once more, under its own
// tokens, so a digest it already won stays won: those pending in the local
// cache there; then, once none is left pending locally, those pending in
// the shared tier and those won locally but not claimed there yet.
func (e *engine) lookAgain(ctx context.Context, b *batch) error {
	local, localAt := b.localWait, b.localWaitAt
	b.localWait, b.localWaitAt = nil, nil
	b.yield = false
	e.claimLocal(b, local, localAt)
	// Recycle the old list's arrays for the next round.
	b.localWait, b.localWaitAt = append(local[:0], b.localWait...), append(localAt[:0], b.localWaitAt...)
	if len(b.localWait) > 0 {
		return nil
	}
	// A batch that has waited only in the local cache claims in the shared
	// tier for the first time here: a claim, not a recheck.
	op := redistier.OpRecheck
	if !b.askedShared {
		op = redistier.OpClaim
	}
	// The recheck names, for each digest it asks about again, the claim
	// that held it: Redis then answers from that claim's status while it
	// is alive. The digests won here since the last shared claim have none.
	b.holders = b.holders[:0]
	for range len(b.claimed) - b.shared {
		b.holders = append(b.holders, "")
	}
	b.holders = append(b.holders, b.sharedHolder...)
	b.claimed = append(b.claimed, b.sharedWait...)
	b.claimedAt = append(b.claimedAt, b.sharedWaitAt...)
	b.sharedWait, b.sharedWaitAt, b.sharedHolder = b.sharedWait[:0], b.sharedWaitAt[:0], b.sharedHolder[:0]
	return e.claimShared(ctx, b, op)
}

// yieldClaims releases every claim the batch holds, in both tiers, and puts
// their digests back with those it waits for in the local cache, to be
// claimed again from the start after the wait, once the claims it met have
// ended.
func (e *engine) yieldClaims(ctx context.Context, b *batch) {
	e.releaseClaims(ctx, b, true)
	b.localGate = append(b.localGate[:0], b.localWait...)
	b.gate, b.gateHolder = b.gate[:0], b.gateHolder[:0]
	for i, h := range b.sharedHolder {
		if h != "" {
			b.gate = append(b.gate, b.sharedWait[i])
			b.gateHolder = append(b.gateHolder, h)
		}
	}
	// What is left to claim is every keyed record not yet found a
	// duplicate: those claimed, and those waited for in either tier. Taken
	// from b.pending, they are in walk order, so in-batch copies resolve as
	// on the first claim: the first one claims, the others are its
	// duplicates.
	b.localWait, b.localWaitAt = b.localWait[:0], b.localWaitAt[:0]
	for i, at := range b.pendingAt {
		if b.verdicts[at] == verdictKeep {
			b.localWait = append(b.localWait, b.pending[i])
			b.localWaitAt = append(b.localWaitAt, at)
		}
	}
	b.claimed, b.claimedAt, b.shared = b.claimed[:0], b.claimedAt[:0], 0
	b.sharedWait, b.sharedWaitAt, b.sharedHolder = b.sharedWait[:0], b.sharedWaitAt[:0], b.sharedHolder[:0]
	b.unchecked = b.unchecked[:0]
	b.yield = false
	e.released.broadcast()
}

// releaseAll releases the batch's claims for good: it is refused, or its
// delivery failed. It returns how many local keys it released.
func (e *engine) releaseAll(ctx context.Context, b *batch) int {
	return e.releaseClaims(ctx, b, false)
}

// releaseClaims releases the batch's claims: in the shared tier (the digests
// it holds there, and those it holds only locally while waiting, whose claim
// may have reached Redis despite an error) and in the local cache. A batch
// that yields will claim again under the same token. It returns how many
// local keys it released.
func (e *engine) releaseClaims(ctx context.Context, b *batch, yield bool) int {
	if b.sharedOK {
		// A yield comes after a claim the tier answered: the batch holds in
		// Redis only what that claim won. A batch that gives up may hold
		// more: a failed call's claims may have reached Redis anyway.
		release, ds := e.tier.Release, append(b.claimed, b.sharedWait...)
		if yield {
			release, ds = e.tier.Yield, b.claimed[:b.shared]
		}
		if err := release(context.WithoutCancel(ctx), b.redisToken, ds); err != nil {
			e.tierError.log(b.now, err, zap.String("op", redistier.OpRelease))
		}
	}
	return e.cache.ReleaseBatch(b.claimed, b.token) + e.cache.ReleaseBatch(b.sharedWait, b.token)
}

// sharedFailed refuses a batch whose shared claim failed under on_error:
// refuse, or whose caller gave up: the batch releases what it holds and the
// sender is asked to retry. (Under pass, claimShared delivers the digests
// the tier could not answer for on the local claim's word.)
func (e *engine) sharedFailed(ctx context.Context, b *batch, err error) error {
	// A claim that Redis applied despite a lost reply stays pending until
	// its lease ends (releaseAll reaches Redis only if a round trip of this
	// batch was answered); the copies it meets meanwhile wait or are
	// refused, never dropped.
	e.releaseAll(ctx, b)
	e.tierError.log(b.now, err, zap.String("on_error", string(e.redisPolicy)))
	return fmt.Errorf("%w: %w", errSharedTier, err)
}

// commitShared makes the batch's shared claims last their window. The batch
// is delivered and its local claims committed, so its sender need not wait
// for Redis: the commit is queued, to share a round trip with the other
// batches' (CommitLater), and sent in the caller only when the queue is
// full. A failed commit leaves the claims pending; the tier commits them
// again in the background until the lease ends, after which a copy would be
// let through again, so it is logged. Digests the tier could not answer for
// are not committed: their claims most likely do not exist.
func (e *engine) commitShared(ctx context.Context, b *batch) {
	if !b.sharedOK || len(b.claimed) == 0 {
		return
	}
	ds := b.claimed
	if len(b.unchecked) > 0 {
		ds = without(b.claimed, b.unchecked)
	}
	if e.tier.CommitLater(b.redisToken, ds) {
		return
	}
	if err := e.tier.Commit(context.WithoutCancel(ctx), b.redisToken, ds); err != nil {
		e.tierError.log(b.now, err, zap.String("op", redistier.OpCommit))
	}
}

// without returns the digests of ds that are not in drop.
func without(ds, drop []digest.Digest) []digest.Digest {
	skip := make(map[digest.Digest]struct{}, len(drop))
	for _, d := range drop {
		skip[d] = struct{}{}
	}
	out := make([]digest.Digest, 0, len(ds)-len(drop))
	for _, d := range ds {
		if _, ok := skip[d]; !ok {
			out = append(out, d)
		}
	}
	return out
}

// settledSignal wakes the batches waiting for local claims when a batch of
// the engine settles. It costs a settling batch one atomic load while
// nobody waits.
type settledSignal struct {
	waiters atomic.Int32
	mu      sync.Mutex
	ch      chan struct{}
}

// channel returns a channel closed at the next broadcast.
func (s *settledSignal) channel() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

func (s *settledSignal) broadcast() {
	if s.waiters.Load() == 0 {
		return
	}
	s.mu.Lock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
	s.mu.Unlock()
}
