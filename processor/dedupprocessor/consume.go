package dedupprocessor

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
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
// deliver, commit or release, wait, second call.
//
// A claim is pending until the next consumer accepts the batch (commit) or
// refuses it (release). A copy is dropped only on the word of a committed
// claim; a digest under any batch's pending claim is left for later.
//
// Waiting cannot deadlock: a batch never waits holding pending claims. It
// delivers and commits what it won, then waits for the records left for
// later and delivers those it wins in a second call; a look that meets
// pending claims again releases its wins first. So a batch waits only for
// batches that are exporting, which wait for nobody, whatever the topology,
// the request size or the atomicity of the claims. After pending_wait the
// request is refused for retry (which drops the first call's records as
// copies); it is acknowledged only when both calls succeeded.
//
// Contending looks end by design: looks claim in one global order (locally
// one at a time, in Redis by group and digest) and stop at the first record
// another claim holds, so the look that got furthest is never stopped by
// another. A pending claim lives while its batch is downstream (the tier
// renews its lease): the lease bounds only how long a dead collector's
// claims stand in the way.

// adapter is a signal's side of the batch.
type adapter[T any] interface {
	identify(ctx context.Context, b *batch, enc *identity.Encoder, data T)
	// apply applies the verdicts to data; with later, it moves the records
	// left for a second call there (in walk order) instead of dropping them.
	apply(b *batch, data T, later *T)
	fresh() T
	send(ctx context.Context, data T) error
	// firstCallSettled settles the adapter's stage (replica election) with the
	// first call: err is how it ended, or why the batch was refused first.
	firstCallSettled(ctx context.Context, err error)
}

// sink is an adapter's next consumer and empty data for a second call; it has
// no stage to settle.
type sink[T any] struct {
	next    func(context.Context, T) error
	newData func() T
}

func (s sink[T]) send(ctx context.Context, data T) error { return s.next(ctx, data) }

func (s sink[T]) fresh() T { return s.newData() }

func (sink[T]) firstCallSettled(context.Context, error) {}

// consume is ConsumeLogs, ConsumeTraces and ConsumeMetrics.
func consume[T any](ctx context.Context, e *engine, s adapter[T], data T, items int) error {
	if items == 0 {
		return s.send(ctx, data) // nothing to deduplicate
	}
	e.flying.Add(1)
	b := e.begin(items)
	defer e.end(ctx, b)
	enc := encoderPool.Get().(*identity.Encoder)
	s.identify(ctx, b, enc, data)
	encoderPool.Put(enc)

	b.firstCopies(e.cfg.Action)
	if err := e.claim(ctx, b, b.firsts, false); err != nil {
		e.settle(ctx, b, roundReleased, true)
		s.firstCallSettled(ctx, err)
		return err
	}
	b.countUnique(b.firsts)
	change, later := e.needsApply(b), &data
	var moveTo *T
	if len(b.later) > 0 && b.kept > 0 {
		// The first call takes data: the records left for later move out of it.
		moveTo = new(T)
		*moveTo, later = s.fresh(), moveTo
	}
	err := deliver(ctx, e, b, s, data, change, moveTo)
	s.firstCallSettled(ctx, err)
	if err != nil || len(b.later) == 0 {
		return err
	}
	for _, i := range b.later {
		b.second = append(b.second, b.keys[i].at)
	}
	slices.Sort(b.second)
	if err := e.await(ctx, b); err != nil {
		return err
	}
	b.secondCall(moveTo != nil)
	return deliver(ctx, e, b, s, *later, e.needsApply(b), nil)
}

// verdict is what a call to the next consumer does with one record.
type verdict uint8

const (
	verdictKeep verdict = iota
	verdictDrop
	verdictMark
	verdictLater // held by another batch's pending claim: for the second call
)

// key is a keyed record: its digest and its index in walk order.
type key struct {
	d  digest.Digest
	at int32
}

// batch is one ConsumeXxx call.
type batch struct {
	now      int64     // when the current round began
	verdicts []verdict // per record, walk order
	keys     []key     // the keyed records, walk order
	firsts   []int32   // indexes into keys: the first copy of each digest
	later    []int32   // indexes into keys: left for the second call
	second   []int32   // verdict indexes of the units left for the second call, ascending
	split    bool      // the first call moved them out: the second call's data holds them alone
	outcomes [numOutcomes]int64
	caught   [numCaughtBy]int64 // duplicates, by what caught them
	kept     int                // records the current call keeps (needsApply)
	alters   bool               // the adapter changes kept records (replica labels)

	// A round: one claim under its own tokens, settled by a commit or release.
	token      uint64          // local claim token
	redisToken string          // shared claim token; "" without a shared tier
	held       []digest.Digest // claimed in the local cache
	shared     []digest.Digest // claimed in the shared tier, or maybe (unknown answer)
	unchecked  int             // delivered on the local claim's word (on_error: pass)
	round      roundState

	// scratch
	won     []int32
	ds      []digest.Digest
	results []localcache.Result
	answers []redistier.Answer
	seen    []int32

	unidentified bool   // the request lacks the auth_attributes identity
	holder       string // the id of a shared claim met pending, for the refusal

	trail copyTrail // what the copies' telemetry needs: sources, copies, ages
}

var batchPool = sync.Pool{New: func() any { return new(batch) }}

func (e *engine) begin(records int) *batch {
	b := batchPool.Get().(*batch)
	if cap(b.verdicts) < records {
		b.verdicts = make([]verdict, 0, records)
	}
	e.beginRound(b)
	return b
}

// beginRound opens a round when its claims are made: a key's window runs from
// its round's claim.
func (e *engine) beginRound(b *batch) {
	b.now = e.now()
	b.token = e.nextToken()
	e.local.Begin(b.token)
	b.redisToken = ""
	if e.shared != nil {
		b.redisToken = redistier.NewToken(b.token)
	}
	b.held, b.shared, b.unchecked, b.round = b.held[:0], b.shared[:0], 0, roundOpen
}

// nextToken returns a token above all before and at least the time in µs:
// shared tokens tell their age.
func (b *batches) nextToken() uint64 {
	now := uint64(b.clock.Now().UnixMicro())
	for {
		last := b.tokens.Load()
		t := max(last+1, now)
		if b.tokens.CompareAndSwap(last, t) {
			return t
		}
	}
}

// keyed adds a record identified by d, kept unless claim finds otherwise.
func (b *batch) keyed(d digest.Digest) {
	b.keys = append(b.keys, key{d: d, at: int32(len(b.verdicts))})
	b.verdicts = append(b.verdicts, verdictKeep)
}

// duplicate adds a record found a duplicate before any claim (election).
func (b *batch) duplicate(by caughtBy, action Action) {
	b.verdicts = append(b.verdicts, verdictKeep)
	b.copyOf(len(b.verdicts)-1, by, action, unknownAge)
}

// copyOf makes the record at index at a duplicate caught by by, age (or
// unknownAge) after its original.
func (b *batch) copyOf(at int, by caughtBy, action Action, age time.Duration) {
	b.trail.copies = append(b.trail.copies, copyFound{at: int32(at), by: by, age: age})
	b.caught[by]++
	b.outcomes[outcomeDuplicate]++
	b.verdicts[at] = verdictDrop
	if action == ActionMark {
		b.verdicts[at] = verdictMark
	}
}

// firstCopies lists each digest's first copy in b.firsts, making the others
// duplicates: one claim each.
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
				b.copyOf(int(k.at), byBatch, action, 0)
				break
			}
		}
	}
}

// errSharedTier is returned, retryable, under on_error: refuse.
var errSharedTier = errors.New("dedup: shared tier unavailable; retry later")

// claim claims keys idx in the current round, locally, then in the shared tier
// for the local wins. A key held committed becomes a duplicate; one held
// pending is left for later, held by this batch in neither tier. On error the
// batch is to be refused, the round holding what it claimed. A look claims
// locally alone: all or nothing against other looks.
func (e *engine) claim(ctx context.Context, b *batch, idx []int32, look bool) error {
	if len(idx) == 0 {
		return nil
	}
	ds := b.digests(idx)
	b.results = slices.Grow(b.results[:0], len(ds))[:len(ds)]
	if look {
		e.looks.Lock()
	}
	claimed := scratch(b.trail.claimed, len(ds))
	b.trail.claimed = claimed
	e.local.ClaimBatch(ds, b.token, b.now, b.results, claimed)
	if look {
		e.looks.Unlock()
	}
	won := b.won[:0]
	for j, res := range b.results {
		i := idx[j]
		switch res {
		case localcache.Claimed:
			b.held = append(b.held, ds[j])
			if e.shared != nil {
				won = append(won, i)
			}
		case localcache.Pending:
			b.deferKey(i)
		default: // Held; HeldBySelf cannot happen: digests are distinct
			b.copyOf(int(b.keys[i].at), byLocal, e.cfg.Action, time.Duration(max(b.now-claimed[j], 0)))
		}
	}
	b.won = won
	if len(won) == 0 {
		return nil
	}
	ds = b.digests(won)
	b.answers = slices.Grow(b.answers[:0], len(ds))[:len(ds)]
	ages := scratch(b.trail.ages, len(ds))
	b.trail.ages = ages
	holder, err := e.shared.ClaimAges(ctx, b.redisToken, ds, b.answers, ages, look)
	e.shared.answered(err)
	b.holder = cmp.Or(holder, b.holder)
	if err != nil {
		e.tierError.log(b.now, err, zap.String("on_error", string(e.policy)))
		if e.policy == ErrorRefuse || ctx.Err() != nil {
			// The claims may exist: release them (by token, so only ours).
			b.shared = append(b.shared, ds...)
			return fmt.Errorf("%w: %w", errSharedTier, err)
		}
	}
	for j, a := range b.answers[:len(ds)] {
		i := won[j]
		switch a {
		case redistier.Claimed:
			b.shared = append(b.shared, ds[j])
		case redistier.Unavailable:
			// on_error: pass: delivered on the local word; a claim that
			// landed anyway is committed.
			b.shared = append(b.shared, ds[j])
			b.unchecked++
		case redistier.Held:
			e.local.Disown(ds[j], b.token) // delivered elsewhere: committed here too
			b.copyOf(int(b.keys[i].at), byRedis, e.cfg.Action, ages[j])
		default: // Pending
			e.local.ReleaseBatch(ds[j:j+1], b.token)
			b.deferKey(i)
		}
	}
	return nil
}

func (b *batch) digests(idx []int32) []digest.Digest {
	b.ds = b.ds[:0]
	for _, i := range idx {
		b.ds = append(b.ds, b.keys[i].d)
	}
	return b.ds
}

func (b *batch) deferKey(i int32) {
	if b.verdicts[b.keys[i].at] != verdictLater {
		b.verdicts[b.keys[i].at] = verdictLater
		b.later = append(b.later, i)
	}
}

func (b *batch) countUnique(idx []int32) {
	for _, i := range idx {
		if b.verdicts[b.keys[i].at] == verdictKeep {
			b.outcomes[outcomeUnique]++
		}
	}
}

// deliver sends what the verdicts keep (applied if they change data; an empty
// call is not made) and settles the round: committed if the next consumer
// accepted, else released, so the sender's retry is not dropped as a copy of
// data that never arrived. A refusal naming the round's own shared claim means
// a dedup processor after this one shares its key space.
func deliver[T any](ctx context.Context, e *engine, b *batch, s adapter[T], data T, change bool, later *T) error {
	var err error
	if b.kept > 0 {
		if change {
			s.apply(b, data, later)
		}
		err = s.send(ctx, data)
	}
	if err == nil {
		e.settle(ctx, b, roundCommitted, true)
		e.tel.recordCall(ctx, b)
		return nil
	}
	if b.redisToken != "" && strings.Contains(err.Error(), claimName(redistier.ClaimID(b.redisToken))) {
		e.stacked.log(b.now, err, zap.String("key_prefix", e.shared.prefix))
		e.tel.stacked.Add(ctx, 1, e.tel.baseOpt)
	}
	if n := e.settle(ctx, b, roundReleased, true); n > 0 {
		e.tel.released.Add(ctx, int64(n), e.tel.baseOpt)
	}
	return err
}

// needsApply counts the records kept and says whether the verdicts change the
// batch.
func (e *engine) needsApply(b *batch) bool {
	change := e.cfg.IdentityAttribute != "" && len(b.keys) > 0 || b.alters
	b.kept = 0
	for _, v := range b.verdicts {
		if v == verdictKeep || v == verdictMark {
			b.kept++
		}
		change = change || v != verdictKeep
	}
	return change
}

// applier applies a batch's verdicts to its units, in walk order.
type applier struct {
	e    *engine
	b    *batch
	i    int // the next unit's index in the data applied to
	next int // the next keyed unit's index in b.keys
}

// at is the next unit's verdict index: its place in the data as received.
func (a *applier) at() int {
	if a.b.split {
		return int(a.b.second[a.i])
	}
	return a.i
}

// unit applies the next unit's verdict to its attributes: remove takes the
// unit out, later says it is left for the second call.
func (a *applier) unit(attrs pcommon.Map) (remove, later bool) {
	at := a.at()
	a.i++
	for a.next < len(a.b.keys) && int(a.b.keys[a.next].at) < at {
		a.next++ // a unit not in this data
	}
	var k *key
	if a.next < len(a.b.keys) && int(a.b.keys[a.next].at) == at {
		k = &a.b.keys[a.next]
		a.next++
	}
	switch a.b.verdicts[at] {
	case verdictDrop:
		return true, false
	case verdictLater:
		return true, true
	case verdictMark:
		attrs.PutBool(a.e.cfg.MarkAttribute, true)
	}
	if name := a.e.cfg.IdentityAttribute; name != "" && k != nil {
		attrs.PutStr(name, k.d.String())
	}
	return false, false
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

// roundState is where a round of claims stands.
type roundState uint8

const (
	roundOpen      roundState = iota // claimed, pending: its call is not answered yet
	roundCommitted                   // its call was accepted: the claims hold for the window
	roundReleased                    // its call was refused, or the batch gave it up
)

// settle moves an open round to state: committed (locally at once, in the
// shared tier in the background, its claims pending, so safe, until it lands)
// or released (in both at once); with wake it wakes the batches waiting for its
// records. It returns how many records a release gave up.
func (e *engine) settle(ctx context.Context, b *batch, state roundState, wake bool) (released int) {
	if wake {
		defer e.settled.broadcast()
	}
	if b.round != roundOpen {
		return 0
	}
	b.round = state
	if e.shared != nil {
		// The writes outlive a sender that gave up: the records were
		// delivered or must be freed.
		ctx = context.WithoutCancel(ctx)
	}
	switch state {
	case roundCommitted:
		e.local.End(b.token)
		if now, window := e.now(), int64(e.cfg.Window); now-b.now > window {
			// The export outlasted the window: its keys expired pending.
			e.local.Recommit(b.held, now+window, now)
		}
		if e.shared != nil {
			if err := e.shared.Commit(ctx, b.redisToken, b.shared); err != nil {
				e.tierError.log(b.now, err, zap.String("op", redistier.OpCommit))
			}
		}
	case roundReleased:
		e.local.ReleaseBatch(b.held, b.token)
		e.local.End(b.token)
		released = len(b.held)
		if e.shared != nil {
			released = len(b.shared)
			if err := e.shared.Release(ctx, b.redisToken, b.shared); err != nil {
				e.tierError.log(b.now, err, zap.String("op", redistier.OpRelease))
			}
		}
	}
	return released
}

// errInFlight: a record is still held by another batch's pending claim after
// pending_wait; that batch may never deliver it, so the sender retries.
var errInFlight = errors.New("dedup: a record of this batch is still being delivered by another batch; retry later")

// claimName is how a refusal names a shared claim, by its id.
func claimName(id string) string { return hex.EncodeToString([]byte(id)) }

// maxPause bounds the pause between looks (nothing wakes a batch when other
// collectors' claims settle): short next to exports, long next to looks.
const maxPause = 16 * time.Millisecond

// await waits, holding no pending claim, until the records left for later
// settle, a look claiming them in a new round; it returns with the round open.
func (e *engine) await(ctx context.Context, b *batch) error {
	w := e.beginWait()
	for {
		// The refusal names the shared claim last met pending, for a
		// processor before (deliver).
		refused := errInFlight
		if b.holder != "" {
			refused = fmt.Errorf("%w (held by claim %s)", errInFlight, claimName(b.holder))
		}
		if err := w.pause(ctx, b.now, refused, zap.Int("records", len(b.later))); err != nil {
			return err
		}
		look := b.later
		b.later = nil
		for _, i := range look {
			b.verdicts[b.keys[i].at] = verdictKeep
		}
		e.beginRound(b)
		if err := e.claim(ctx, b, look, true); err != nil {
			e.settle(ctx, b, roundReleased, true)
			return err
		}
		if len(b.later) == 0 {
			b.later = look
			b.countUnique(look)
			w.record(ctx, waitSettled)
			return nil
		}
		// Waking others would let two batches waiting for the same records
		// wake each other forever.
		e.settle(ctx, b, roundReleased, false)
		b.later = b.later[:0]
		for _, i := range look {
			if v := b.verdicts[b.keys[i].at]; v == verdictKeep || v == verdictLater {
				b.verdicts[b.keys[i].at] = verdictLater
				b.later = append(b.later, i)
			}
		}
	}
}

// secondCall keeps the verdicts of the records left for later (a duplicate
// among them is dropped or marked as any) and drops the rest, sent with the
// first. With split, the first call moved the records left for later out:
// the second call's data holds them alone.
func (b *batch) secondCall(split bool) {
	const second = 8 // above every verdict
	b.split = split
	for _, at := range b.second {
		b.verdicts[at] += second
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

// end releases what the batch holds and pools it, keeping its arrays unless
// they grew large.
func (e *engine) end(ctx context.Context, b *batch) {
	e.settle(ctx, b, roundReleased, true)
	e.flying.Add(-1)
	const maxRetained = 64 << 10
	nb := batch{}
	if max(cap(b.verdicts), cap(b.keys), cap(b.seen)) <= maxRetained {
		nb = batch{
			verdicts: b.verdicts[:0], keys: b.keys[:0], firsts: b.firsts[:0], later: b.later[:0], second: b.second[:0],
			held: b.held[:0], shared: b.shared[:0], won: b.won[:0], ds: b.ds[:0], results: b.results[:0],
			answers: b.answers[:0], seen: b.seen, trail: b.trail.reset(),
		}
	}
	*b = nb
	batchPool.Put(b)
}

// wait is one batch's wait for the claims or elections of batches in flight.
type wait struct {
	b     *batches
	start time.Time
	d     time.Duration // the next pause
}

func (b *batches) beginWait() *wait {
	return &wait{b: b, start: b.clock.Now(), d: time.Millisecond}
}

// pause returns when a round or election settles, or after the pause (doubling
// up to maxPause); past pending_wait, it logs, records and returns refused.
func (w *wait) pause(ctx context.Context, now int64, refused error, fields ...zap.Field) error {
	settled := w.b.settled.channel()
	if w.b.clock.Now().Add(w.d).After(w.start.Add(w.b.pendingWait)) {
		w.b.refused.log(now, refused, fields...)
		w.record(ctx, waitRefused)
		return refused
	}
	err := w.b.clock.Wait(ctx, settled, w.d)
	w.d = min(2*w.d, maxPause)
	return err
}

func (w *wait) record(ctx context.Context, r waitResult) {
	w.b.tel.waits.Record(ctx, w.b.clock.Now().Sub(w.start).Seconds(), w.b.tel.waitOpts[r:r+1]...)
}

// settledSignal wakes waiters when a round or election ends; only waiters
// make its channel: cheap.
type settledSignal struct{ ch atomic.Pointer[chan struct{}] }

// channel returns a channel closed at the next broadcast.
func (s *settledSignal) channel() <-chan struct{} {
	for {
		if ch := s.ch.Load(); ch != nil {
			return *ch
		}
		if ch := make(chan struct{}); s.ch.CompareAndSwap(nil, &ch) {
			return ch
		}
	}
}

func (s *settledSignal) broadcast() {
	if s.ch.Load() != nil {
		if ch := s.ch.Swap(nil); ch != nil {
			close(*ch)
		}
	}
}
