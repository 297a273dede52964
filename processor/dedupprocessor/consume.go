package dedupprocessor

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.uber.org/zap"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/identity"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/localcache"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/redistier"
)

// One batch's life, top to bottom: identify, claim (local, then shared),
// deliver, commit or release, record.
//
// Identify derives each record's identity (a digest) or another outcome
// (passed without a key, dropped, skipped); copies within the batch are
// duplicates of their first copy. Claim takes each digest in the local
// cache, then, for those won there, in the shared tier. A claim is pending
// until the next consumer has accepted the batch (commit) or refused it
// (release). A copy is dropped only on the word of a committed claim: its
// record was delivered. A digest held by a pending claim, of another batch
// of this collector or of another collector, is left for later: its record
// is neither delivered nor dropped yet.
//
// The discipline that keeps waiting from ever deadlocking: a batch never
// waits while it holds pending claims. It delivers the records it won (the
// first call to the next consumer) and commits them; then, holding only
// committed claims, it waits for the records left for later, and delivers
// those it then wins in a second call. A look that finds some of them still
// pending releases whatever it won before waiting again. So a batch waits
// only for batches that are exporting (between their claim and their
// commit or release), and a batch that is exporting waits for nobody: no
// chain of waits can close into a cycle, on any topology, at any request
// size, and whatever the atomicity of the claims (per cache shard, per
// script call, per Cluster node). Replica elections (election.go) are
// decided before any claim under the same rule. The wait is bounded by
// pending_wait, after which the request is refused for retry; its retry
// finds the records of the first call delivered, drops them as copies, and
// claims the rest. The request is acknowledged only when both calls
// succeeded.
//
// A pending claim in Redis lives for redis.lease, renewed while its batch
// is downstream (redistier's writer), so the lease bounds only how long the
// claims of a collector that died stand in the way of its senders' retries.
// A claim whose answer was lost is committed or released like any other:
// commit and release compare the claim's token, so neither touches a claim
// that is not there or not its own.

// adapter is what a signal gives the batch: how to identify its records,
// apply the verdicts, copy its pdata and send it on. settle is told how the
// first call ended (nil: accepted), or why the batch was refused before it.
type adapter[T any] interface {
	identify(ctx context.Context, b *batch, enc *identity.Encoder, data T)
	apply(b *batch, data T)
	clone(data T) T
	send(ctx context.Context, data T) error
	settle(ctx context.Context, err error)
}

// consume is ConsumeLogs, ConsumeTraces and ConsumeMetrics.
func consume[T any](ctx context.Context, e *engine, s adapter[T], data T, items int) error {
	if items == 0 {
		return s.send(ctx, data) // nothing to deduplicate
	}
	b := e.begin(items)
	defer e.end(ctx, b)
	enc := encoderPool.Get().(*identity.Encoder)
	s.identify(ctx, b, enc, data)
	encoderPool.Put(enc)

	b.firstCopies(e.cfg.Action)
	if err := e.claim(ctx, b, b.firsts, false); err != nil {
		e.release(ctx, b)
		s.settle(ctx, err)
		return err
	}
	b.countUnique(b.firsts)
	var later T
	if len(b.later) > 0 {
		later = s.clone(data) // the first call may change data
	}
	err := e.finish(ctx, b, deliver(ctx, e, s, b, data))
	s.settle(ctx, err)
	if err != nil || len(b.later) == 0 {
		return err
	}
	if err := e.await(ctx, b); err != nil {
		return err
	}
	b.secondCall()
	return e.finish(ctx, b, deliver(ctx, e, s, b, later))
}

// verdict is what a call to the next consumer does with one record.
type verdict uint8

const (
	verdictKeep verdict = iota
	verdictDrop
	verdictMark
	// verdictLater: held by the pending claim of a batch in flight; decided
	// and delivered by the second call.
	verdictLater
)

// key is a keyed record: its digest and its index among the batch's
// records (walk order).
type key struct {
	d  digest.Digest
	at int32
}

// batch is one ConsumeXxx call: every record's verdict, the keyed records,
// the claims of the current round, and the counts to report once a call is
// accepted downstream.
type batch struct {
	now      int64
	verdicts []verdict // per record, walk order
	keys     []key     // the keyed records, walk order
	firsts   []int32   // indexes into keys: the first copy of each digest
	later    []int32   // indexes into keys: left for the second call
	outcomes [numOutcomes]int64
	tiers    [numTiers]int64
	kept     int  // records the current call keeps (needsApply)
	alters   bool // the adapter changes kept records (replica labels)

	// The current round's claims: a round is one claim of the batch's
	// digests under tokens of its own, ended by a commit or a release.
	token      uint64          // local claim token
	redisToken string          // shared claim token; "" without a shared tier
	held       []digest.Digest // claimed in the local cache
	shared     []digest.Digest // claimed in the shared tier, or maybe (unknown answer)
	unchecked  int             // delivered on the local claim's word (on_error: pass)
	open       bool            // the round has neither committed nor released

	won     []int32         // scratch: a claim's local wins
	ds      []digest.Digest // scratch: one tier call's digests
	results []localcache.Result
	answers []redistier.Answer
	seen    []int32 // scratch of firstCopies

	unidentified bool // the request lacks the auth_attributes identity
}

var batchPool = sync.Pool{New: func() any { return new(batch) }}

// begin takes a batch of records from the pool and opens its first round.
func (e *engine) begin(records int) *batch {
	b := batchPool.Get().(*batch)
	b.now = e.now()
	if cap(b.verdicts) < records {
		b.verdicts = make([]verdict, 0, records)
	}
	e.beginRound(b)
	return b
}

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

// nextToken returns a token larger than every one before it and at least
// the current time in microseconds, so that the shared tier's tokens, which
// embed them, tell when a claim's batch began.
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

// Identify: the signal's walk gives each record a verdict, in walk order.

// keyed adds a record identified by d, kept unless claim finds otherwise.
func (b *batch) keyed(d digest.Digest) {
	b.keys = append(b.keys, key{d: d, at: int32(len(b.verdicts))})
	b.verdicts = append(b.verdicts, verdictKeep)
}

// pass adds a record kept without deduplication, counted under o.
func (b *batch) pass(o outcome) {
	b.outcomes[o]++
	b.verdicts = append(b.verdicts, verdictKeep)
}

// missing adds a record whose key could not be derived, under
// on_missing_key pass or drop (content is keyed by the caller).
func (b *batch) missing(policy MissingKeyPolicy) {
	b.outcomes[outcomeMissingKey]++
	v := verdictKeep
	if policy == MissingKeyDrop {
		v = verdictDrop
	}
	b.verdicts = append(b.verdicts, v)
}

// duplicate adds a record found a duplicate before any claim (replica
// election).
func (b *batch) duplicate(tr tier, action Action) {
	b.verdicts = append(b.verdicts, verdictKeep)
	b.copyOf(len(b.verdicts)-1, tr, action)
}

// copyOf makes the record at index at a duplicate caught by tier tr.
func (b *batch) copyOf(at int, tr tier, action Action) {
	b.tiers[tr]++
	b.outcomes[outcomeDuplicate]++
	b.verdicts[at] = verdictDrop
	if action == ActionMark {
		b.verdicts[at] = verdictMark
	}
}

// firstCopies lists in b.firsts the first copy of each digest, and makes
// the later copies within the batch its duplicates: each digest is claimed
// once, whatever the batch's size against the cache's.
func (b *batch) firstCopies(action Action) {
	b.firsts = b.firsts[:0]
	if len(b.keys) == 0 {
		return
	}
	size := 1
	for size < 2*len(b.keys) {
		size <<= 1
	}
	if cap(b.seen) < size {
		b.seen = make([]int32, size)
	}
	seen := b.seen[:size]
	clear(seen)
	mask := uint64(size - 1)
	for i, k := range b.keys {
		for h := k.d.Lo & mask; ; h = (h + 1) & mask {
			j := seen[h]
			if j == 0 {
				seen[h] = int32(i + 1)
				b.firsts = append(b.firsts, int32(i))
				break
			}
			if b.keys[j-1].d == k.d {
				b.copyOf(int(k.at), tierBatch, action)
				break
			}
		}
	}
}

// Claim.

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

// errSharedTier is returned to senders under on_error: refuse. The
// receivers turn it into a retryable status (gRPC Unavailable, HTTP 503).
var errSharedTier = errors.New("dedup: shared tier unavailable; retry later")

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
			b.deferKey(i)
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
			b.deferKey(i)
		}
	}
	return nil
}

// the digests of keys idx, in b.ds.
func (b *batch) digests(idx []int32) []digest.Digest {
	b.ds = b.ds[:0]
	for _, i := range idx {
		b.ds = append(b.ds, b.keys[i].d)
	}
	return b.ds
}

// deferKey leaves key i for the second call.
func (b *batch) deferKey(i int32) {
	if b.verdicts[b.keys[i].at] != verdictLater {
		b.verdicts[b.keys[i].at] = verdictLater
		b.later = append(b.later, i)
	}
}

// countUnique counts the keys of idx that the current round won.
func (b *batch) countUnique(idx []int32) {
	for _, i := range idx {
		if b.verdicts[b.keys[i].at] == verdictKeep {
			b.outcomes[outcomeUnique]++
		}
	}
}

// Deliver.

// deliver applies the batch's verdicts to data and sends what is left on.
func deliver[T any](ctx context.Context, e *engine, s adapter[T], b *batch, data T) error {
	if e.needsApply(b) {
		s.apply(b, data)
	}
	if b.kept == 0 {
		return nil // a batch left with nothing is not sent on
	}
	return s.send(ctx, data)
}

// needsApply says whether the verdicts change the batch at all, and counts
// the records the call keeps.
func (e *engine) needsApply(b *batch) bool {
	change := e.cfg.IdentityAttribute != "" && len(b.keys) > 0 || b.alters
	b.kept = 0
	for _, v := range b.verdicts {
		switch v {
		case verdictKeep:
			b.kept++
		case verdictMark:
			b.kept++
			change = true
		default:
			change = true
		}
	}
	return change
}

// applier applies a batch's verdicts to its units, in walk order.
type applier struct {
	e    *engine
	b    *batch
	i    int // the next unit's verdict index
	next int // the next keyed unit's index in b.keys
}

// unit applies the next unit's verdict: it marks a kept duplicate, writes
// the unit's identity to identity_attribute if that is set, and reports
// whether to remove the unit.
func (a *applier) unit(attrs pcommon.Map) bool {
	v := a.b.verdicts[a.i]
	var k *key
	if a.next < len(a.b.keys) && int(a.b.keys[a.next].at) == a.i {
		k = &a.b.keys[a.next]
		a.next++
	}
	a.i++
	switch v {
	case verdictDrop, verdictLater:
		return true
	case verdictMark:
		attrs.PutBool(a.e.cfg.MarkAttribute, true)
	}
	if name := a.e.cfg.IdentityAttribute; name != "" && k != nil {
		attrs.PutStr(name, k.d.String())
	}
	return false
}

// Commit or release, and record.

// finish ends the round with the next consumer's answer: a commit if it
// accepted the call, and the call's counts are recorded; else a release,
// so the sender's retry is delivered rather than dropped as a duplicate of
// data that never arrived, and the error goes back to the sender.
func (e *engine) finish(ctx context.Context, b *batch, err error) error {
	if err != nil {
		e.tel.recordReleased(ctx, e.release(ctx, b))
		return err
	}
	e.commit(ctx, b)
	e.tel.recordCall(ctx, b)
	return nil
}

// commit commits the round's claims: at once in the local cache (and the
// local copies waiting for them go on), in the background in the shared
// tier, which keeps them pending, so safe, until the commit lands.
func (e *engine) commit(ctx context.Context, b *batch) {
	if !b.open {
		return
	}
	b.open = false
	e.local.End(b.token)
	e.ended.broadcast()
	if e.tier != nil {
		if err := e.tier.Commit(context.WithoutCancel(ctx), b.redisToken, b.shared); err != nil {
			e.tierError.log(b.now, err, zap.String("op", redistier.OpCommit))
		}
	}
}

// release releases the round's claims in both tiers, wakes the batches
// waiting for local claims, and returns how many records the round had
// claimed (a key the cache evicted meanwhile counts).
func (e *engine) release(ctx context.Context, b *batch) int {
	n := e.releaseQuietly(ctx, b)
	e.ended.broadcast()
	return n
}

// releaseQuietly is release without waking the waiting batches.
func (e *engine) releaseQuietly(ctx context.Context, b *batch) int {
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

// Wait, holding only committed claims, then the second call.

// errInFlight is returned when a record of the batch is still held by
// another batch's pending claim after pending_wait: that batch has not
// delivered it yet and may never (its next consumer may fail, its collector
// may have died). Dropping the copy could lose the record, so the sender is
// asked to retry: by then that claim is committed (the copy is a duplicate),
// released, or past its lease (the copy is new).
var errInFlight = errors.New("dedup: a record of this batch is still being delivered by another batch; retry later")

// maxPause bounds the pause between two looks at the claims a batch waits
// for; the first look comes after a millisecond. Across collectors nothing
// wakes a waiting batch when the claims it waits for settle, so the pause is
// how late it may see them settle: short next to the export times it waits
// out, while a look costs one round trip for the records still pending.
const maxPause = 16 * time.Millisecond

// await waits, holding no pending claim, until the records left for later
// are settled: each look claims them in a new round, and a look that still
// meets a pending claim releases what it won before waiting again. It
// returns with the round open, holding every record left for later that is
// not a duplicate, or with an error after pending_wait.
func (e *engine) await(ctx context.Context, b *batch) error {
	w := e.beginWait()
	defer w.end()
	for {
		if err := w.pause(ctx); err != nil {
			if errors.Is(err, errWaitedOut) {
				e.refused.log(b.now, errInFlight, zap.Int("records", len(b.later)))
				w.record(ctx, waitRefused)
				return errInFlight
			}
			return err
		}
		look := b.later
		b.later = nil
		for _, i := range look {
			b.verdicts[b.keys[i].at] = verdictKeep
		}
		e.beginRound(b)
		if err := e.claim(ctx, b, look, true); err != nil {
			e.release(ctx, b)
			return err
		}
		if len(b.later) == 0 {
			b.later = look
			b.countUnique(look)
			w.record(ctx, waitSettled)
			return nil
		}
		// Nobody is woken by this release: a batch that met these claims
		// looks again after its pause. Waking it would let two batches
		// that wait for the same records wake each other without end.
		e.releaseQuietly(ctx, b)
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

// secondCall turns the verdicts into those of the second call: the records
// that were left for later keep what their claim decided (b.later lists
// them); every other record went with the first call and is left out.
func (b *batch) secondCall() {
	const second = 8 // above every verdict
	for _, i := range b.later {
		b.verdicts[b.keys[i].at] += second
	}
	for i, v := range b.verdicts {
		if v >= second {
			b.verdicts[i] = v - second
		} else {
			b.verdicts[i] = verdictDrop
		}
	}
	b.later = b.later[:0]
}

// end releases what a batch that gave up still holds, and returns it to
// the pool, emptied, keeping its arrays unless they grew large.
func (e *engine) end(ctx context.Context, b *batch) {
	e.release(ctx, b)
	const maxRetained = 64 << 10
	keep := func(n int) bool { return n <= maxRetained }
	nb := batch{}
	if keep(cap(b.verdicts)) && keep(cap(b.keys)) && keep(cap(b.seen)) {
		nb = batch{
			verdicts: b.verdicts[:0], keys: b.keys[:0], firsts: b.firsts[:0], later: b.later[:0],
			held: b.held[:0], shared: b.shared[:0], won: b.won[:0], ds: b.ds[:0], results: b.results[:0],
			answers: b.answers[:0], seen: b.seen,
		}
	}
	*b = nb
	batchPool.Put(b)
}

// The wait, for claims and elections alike.

// errWaitedOut: the next pause would end past pending_wait.
var errWaitedOut = errors.New("dedup: pending_wait passed")

// wait is one batch's wait for the claims or elections of batches in
// flight, between its looks at them.
type wait struct {
	e        *engine
	start    time.Time
	deadline time.Time
	d        time.Duration // the next pause
}

func (e *engine) beginWait() *wait {
	e.ended.waiters.Add(1)
	start := e.clock.now()
	return &wait{e: e, start: start, deadline: start.Add(e.cfg.PendingWait), d: time.Millisecond}
}

// pause returns when a round or an election of this engine ends, or after
// the pause, which doubles up to maxPause; with errWaitedOut if that would
// end past pending_wait, or with ctx's error.
func (w *wait) pause(ctx context.Context) error {
	settled := w.e.ended.channel()
	if w.e.clock.now().Add(w.d).After(w.deadline) {
		return errWaitedOut
	}
	err := w.e.clock.pause(ctx, settled, w.d)
	w.d = min(2*w.d, maxPause)
	return err
}

// record records how the wait ended.
func (w *wait) record(ctx context.Context, r waitResult) {
	w.e.tel.recordWait(ctx, w.e.clock.now().Sub(w.start), r)
}

func (w *wait) end() { w.e.ended.waiters.Add(-1) }

// clock is the engine's one clock: the wall clock, or a simulated one in
// tests that interleave batches deterministically.
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

// settledSignal wakes the waiting batches when a round or an election of
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
