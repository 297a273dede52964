package dedupprocessor

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/localcache"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/redistier"
)

// Claims in the two tiers, by the discipline written in consume.go.

// localTier is what a batch needs of the local cache: localcache.Cache,
// whose methods document the contract.
type localTier interface {
	Begin(token uint64)
	End(token uint64)
	ClaimBatch(ds []digest.Digest, token uint64, now int64, out []localcache.Result)
	ReleaseBatch(ds []digest.Digest, token uint64) int
	Disown(d digest.Digest, token uint64)
}

// sharedTier is what a batch needs of the shared tier: redistier.Tier,
// whose methods document the contract. Each digest is answered on its own:
// one whose part of the tier failed answers Unavailable.
type sharedTier interface {
	Claim(ctx context.Context, token string, ds []digest.Digest, answers []redistier.Answer, again bool) error
	Commit(ctx context.Context, token string, ds []digest.Digest) error
	Release(ctx context.Context, token string, ds []digest.Digest) error
}

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

// beginRound opens a round of claims under new tokens.
func (e *engine) beginRound(b *batch) {
	b.token = e.nextToken()
	e.local.Begin(b.token)
	b.redisToken = ""
	if e.tier != nil {
		b.redisToken = redistier.NewToken(b.token)
	}
	b.held, b.shared, b.unchecked, b.open = b.held[:0], b.shared[:0], 0, true
}

// claim claims the digests of keys idx in the current round: in the local
// cache, then, for those won there, in the shared tier. A key held by a
// committed claim becomes a duplicate; one held by a pending claim is left
// for later (b.later, verdictLater), held by this batch in neither tier. On
// error (the shared tier failed under on_error: refuse, or the caller gave
// up) the batch is to be refused; the round still holds what it claimed.
//
// again says that the batch claims records it waited for.
func (e *engine) claim(ctx context.Context, b *batch, idx []int32, again bool) error {
	if len(idx) == 0 {
		return nil
	}
	ds := b.digests(idx)
	b.results = resize(b.results, len(ds))
	e.local.ClaimBatch(ds, b.token, b.now, b.results)
	won := b.won[:0] // this round's local wins, as key indexes
	for j, res := range b.results {
		i := idx[j]
		switch res {
		case localcache.Claimed:
			b.held = append(b.held, ds[j])
			if e.tier != nil {
				won = append(won, i)
			}
		case localcache.Pending:
			e.deferKey(b, i)
		default: // Held; HeldBySelf cannot happen: digests are distinct
			b.copyOf(int(b.keys[i].at), tierLocal, e.cfg.Action)
		}
	}
	b.won = won
	if len(won) == 0 {
		return nil
	}
	ds = b.digests(won)
	b.answers = resize(b.answers, len(ds))
	err := e.tier.Claim(ctx, b.redisToken, ds, b.answers, again)
	if err != nil && (e.redisPolicy == ErrorRefuse || ctx.Err() != nil) {
		b.shared = append(b.shared, ds...) // the claims may exist: release them
		e.tierError.log(b.now, err, zap.String("on_error", string(e.redisPolicy)))
		return fmt.Errorf("%w: %w", errSharedTier, err)
	}
	if err != nil {
		e.tierError.log(b.now, err, zap.String("on_error", string(ErrorPass)))
	}
	for j, a := range b.answers[:len(ds)] {
		i := won[j]
		switch a {
		case redistier.Claimed:
			b.shared = append(b.shared, ds[j])
		case redistier.Unavailable:
			// on_error: pass: delivered on the local claim's word. A claim
			// that reached Redis despite the error rightly holds its
			// record: it is committed with the others.
			b.shared = append(b.shared, ds[j])
			b.unchecked++
		case redistier.Held:
			e.local.Disown(ds[j], b.token) // delivered elsewhere: committed here too
			b.copyOf(int(b.keys[i].at), tierRedis, e.cfg.Action)
		default: // Pending
			e.local.ReleaseBatch(ds[j:j+1], b.token)
			e.deferKey(b, i)
		}
	}
	return nil
}

// deferKey leaves key i for the second call.
func (e *engine) deferKey(b *batch, i int32) {
	if b.verdicts[b.keys[i].at] != verdictLater {
		b.verdicts[b.keys[i].at] = verdictLater
		b.later = append(b.later, i)
	}
}

// finish ends the round with the next consumer's answer: a commit if it
// accepted the call, and the call's counts are recorded; else a release,
// so the sender's retry is delivered rather than dropped as a duplicate of
// data that never arrived, and the error goes back to the sender.
func (e *engine) finish(ctx context.Context, b *batch, err error) error {
	if err != nil {
		e.tel.recordReleased(ctx, e.releaseRound(ctx, b))
		if !b.electionsSettled {
			e.releaseElections(ctx, b)
		}
		return err
	}
	e.commitRound(ctx, b)
	e.tel.recordCall(ctx, b)
	return nil
}

// commitRound commits the round's claims: at once in the local cache (and
// the local copies waiting for them go on), in the background in the shared
// tier, which keeps them pending, so safe, until the commit lands.
func (e *engine) commitRound(ctx context.Context, b *batch) {
	if !b.open {
		return
	}
	b.open = false
	e.local.End(b.token)
	e.ended.broadcast()
	if b.ballots != nil && !b.electionsSettled {
		// Elections go with the first call, under its tokens.
		e.commitElections(ctx, b)
		b.electionsSettled = true
	}
	if e.tier != nil {
		if err := e.tier.Commit(context.WithoutCancel(ctx), b.redisToken, b.shared); err != nil {
			e.tierError.log(b.now, err, zap.String("op", redistier.OpCommit))
		}
	}
}

// releaseRound releases the round's claims in both tiers, and returns how
// many records it had claimed (a key the cache evicted meanwhile counts).
func (e *engine) releaseRound(ctx context.Context, b *batch) int {
	n := e.releaseLook(ctx, b)
	e.ended.broadcast()
	return n
}

// releaseLook is releaseRound without waking the waiting batches.
func (e *engine) releaseLook(ctx context.Context, b *batch) int {
	if !b.open {
		return 0
	}
	b.open = false
	e.local.ReleaseBatch(b.held, b.token)
	e.local.End(b.token)
	n := len(b.held)
	if e.tier != nil {
		n = len(b.shared)
		if err := e.tier.Release(context.WithoutCancel(ctx), b.redisToken, b.shared); err != nil {
			e.tierError.log(b.now, err, zap.String("op", redistier.OpRelease))
		}
	}
	return n
}

// await waits, holding no pending claim, until the records left for later
// are settled: each look claims them in a new round, and a look that still
// meets a pending claim releases what it won before waiting again. It
// returns with the round open, holding every record left for later that is
// not a duplicate, or with an error after pending_wait.
func (e *engine) await(ctx context.Context, b *batch) error {
	start := e.clock.now()
	deadline := start.Add(e.cfg.PendingWait)
	e.ended.waiters.Add(1)
	defer e.ended.waiters.Add(-1)
	pause := time.Millisecond
	for {
		settled := e.ended.channel()
		if e.clock.now().Add(pause).After(deadline) {
			e.refused.log(b.now, errInFlight, zap.Int("records", len(b.later)))
			e.tel.recordWait(ctx, e.clock.now().Sub(start), waitRefused)
			return errInFlight
		}
		if err := e.clock.pause(ctx, settled, pause); err != nil {
			return err
		}
		pause = min(2*pause, maxPause)
		look := b.later
		b.later = nil
		for _, i := range look {
			b.verdicts[b.keys[i].at] = verdictKeep
		}
		e.beginRound(b)
		if err := e.claim(ctx, b, look, true); err != nil {
			e.releaseRound(ctx, b)
			return err
		}
		if len(b.later) == 0 {
			b.later = look
			b.countUnique(look)
			e.tel.recordWait(ctx, e.clock.now().Sub(start), waitSettled)
			return nil
		}
		// Nobody is woken by this release: a batch that met these claims
		// looks again after its pause. Waking it would let two batches
		// that wait for the same records wake each other without end.
		e.releaseLook(ctx, b)
		// Every record of the look that is not a duplicate waits again.
		b.later = b.later[:0]
		for _, i := range look {
			if v := b.verdicts[b.keys[i].at]; v == verdictKeep || v == verdictLater {
				b.verdicts[b.keys[i].at] = verdictLater
				b.later = append(b.later, i)
			}
		}
	}
}

// clock is the time of waits: the wall clock, or a simulated one in tests
// that interleave batches deterministically.
type clock interface {
	now() time.Time
	// pause returns after d plus up to a millisecond, when settled is
	// closed, or with ctx's error when ctx is done. The random part keeps
	// batches that wait for the same records from looking in lockstep.
	pause(ctx context.Context, settled <-chan struct{}, d time.Duration) error
}

type wallClock struct{}

func (wallClock) now() time.Time { return time.Now() }

func (wallClock) pause(ctx context.Context, settled <-chan struct{}, d time.Duration) error {
	timer := time.NewTimer(d + time.Duration(rand.Int64N(int64(time.Millisecond))))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-settled:
	case <-timer.C:
	}
	return nil
}

// settledSignal wakes the batches waiting for local claims when a round of
// the engine ends. It costs an ending round one atomic load while nobody
// waits.
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

// resize returns s with length n, reusing its array if it is large enough.
func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
