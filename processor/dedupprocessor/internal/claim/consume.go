package claim

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.uber.org/zap"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
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
// later and delivers those it wins in a second call; a recheck that meets
// pending claims again releases its wins first. So a batch waits only for
// batches that are exporting, which wait for nobody, whatever the topology,
// the request size or the atomicity of the claims. After pending_wait the
// request is refused for retry (which drops the first call's records as
// copies); it is acknowledged only when both calls succeeded.
//
// Contending rechecks end by design: rechecks claim in one global order
// (locally one at a time, in Redis by group and digest) and stop at the first
// record another claim holds, so the recheck that got furthest is never
// stopped by another. A pending claim lives while its batch is downstream
// (the tier renews its lease): the lease bounds only how long a dead
// collector's claims stand in the way.

// Adapter is a signal's side of the batch.
type Adapter[T any] interface {
	// Identify adds each record of data to b, in walk order.
	Identify(ctx context.Context, b *Batch, data T)
	// Apply applies the verdicts to data; with later, it moves the records
	// left for a second call there (in walk order) instead of dropping them.
	Apply(b *Batch, data T, later *T)
	Fresh() T
	Send(ctx context.Context, data T) error
	// FirstCallSettled settles what the adapter decided before the claims
	// (the replica election) with the first call: err is how it ended, or why
	// the batch was refused first.
	FirstCallSettled(ctx context.Context, err error)
}

// Sink is an adapter's next consumer and empty data for a second call; it
// decides nothing before the claims.
type Sink[T any] struct {
	Next    func(context.Context, T) error
	NewData func() T
}

func (s Sink[T]) Send(ctx context.Context, data T) error { return s.Next(ctx, data) }

func (s Sink[T]) Fresh() T { return s.NewData() }

func (Sink[T]) FirstCallSettled(context.Context, error) {}

// Consume is ConsumeLogs, ConsumeTraces and ConsumeMetrics: data holds items
// records.
func Consume[T any](ctx context.Context, e *Engine, s Adapter[T], data T, items int) error {
	if items == 0 {
		return s.Send(ctx, data) // nothing to deduplicate
	}
	e.flying.Add(1)
	b := e.begin(items)
	defer e.end(ctx, b)
	s.Identify(ctx, b, data)

	b.firstCopies()
	if err := e.claim(ctx, b, b.firsts, false); err != nil {
		e.settle(ctx, b, roundReleased, true)
		s.FirstCallSettled(ctx, err)
		return err
	}
	b.countUnique(b.firsts)
	change, later := b.needsApply(), &data
	var moveTo *T
	if len(b.later) > 0 && b.kept > 0 {
		// The first call takes data: the records left for later move out of it.
		moveTo = new(T)
		*moveTo, later = s.Fresh(), moveTo
	}
	err := deliver(ctx, e, b, s, data, change, moveTo)
	s.FirstCallSettled(ctx, err)
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
	return deliver(ctx, e, b, s, *later, b.needsApply(), nil)
}

var batchPool = sync.Pool{New: func() any { return new(Batch) }}

func (e *Engine) begin(records int) *Batch {
	b := batchPool.Get().(*Batch)
	if cap(b.verdicts) < records {
		b.verdicts = make([]verdict, 0, records)
	}
	b.opts = &e.opts
	e.beginRound(b)
	return b
}

// beginRound opens a round when its claims are made: a key's window runs from
// its round's claim.
func (e *Engine) beginRound(b *Batch) {
	b.now = e.rounds.Now()
	r := &b.round
	r.token = e.rounds.NextToken()
	e.local.Begin(r.token)
	r.redisToken = ""
	if e.shared != nil {
		r.redisToken = redistier.NewToken(r.token)
	}
	r.held, r.shared, r.state = r.held[:0], r.shared[:0], roundOpen
}

// ErrSharedTier is returned, retryable, under on_error: refuse.
var ErrSharedTier = errors.New("dedup: shared tier unavailable; retry later")

// claim claims keys idx in the current round, locally, then in the shared tier
// for the local wins. A key held committed becomes a duplicate; one held
// pending is left for later, held by this batch in neither tier. On error the
// batch is to be refused, the round holding what it claimed. A recheck claims
// locally alone: all or nothing against other rechecks.
func (e *Engine) claim(ctx context.Context, b *Batch, idx []int32, recheck bool) error {
	if len(idx) == 0 {
		return nil
	}
	r, sc := &b.round, &b.scratch
	ds := b.digests(idx)
	sc.results = resized(sc.results, len(ds))
	if recheck {
		e.rechecks.Lock()
	}
	claimed := resized(b.trail.claimed, len(ds))
	b.trail.claimed = claimed
	e.local.ClaimBatch(ds, r.token, b.now, sc.results, claimed)
	if recheck {
		e.rechecks.Unlock()
	}
	won := sc.won[:0]
	for j, res := range sc.results {
		i := idx[j]
		switch res {
		case localcache.Claimed:
			r.held = append(r.held, ds[j])
			if e.shared != nil {
				won = append(won, i)
			}
		case localcache.Pending:
			b.deferKey(i)
		default: // Held; HeldBySelf cannot happen: digests are distinct
			b.copyOf(int(b.keys[i].at), ByLocal, time.Duration(max(b.now-claimed[j], 0)))
		}
	}
	sc.won = won
	if len(won) == 0 {
		return nil
	}
	ds = b.digests(won)
	sc.answers = resized(sc.answers, len(ds))
	ages := resized(b.trail.ages, len(ds))
	b.trail.ages = ages
	holder, err := e.shared.ClaimAges(ctx, r.redisToken, ds, sc.answers, ages, recheck)
	e.shared.answered(err)
	b.holder = cmp.Or(holder, b.holder)
	if err != nil {
		e.shared.Failed(b.now, err, e.shared.onError())
		if e.shared.opts.Refuse || ctx.Err() != nil {
			// The claims may exist: release them (by token, so only ours).
			r.shared = append(r.shared, ds...)
			return fmt.Errorf("%w: %w", ErrSharedTier, err)
		}
	}
	held, pending := sc.held[:0], sc.pending[:0]
	for j, a := range sc.answers[:len(ds)] {
		i := won[j]
		switch a {
		case redistier.Claimed:
			r.shared = append(r.shared, ds[j])
		case redistier.Unavailable:
			// on_error: pass: delivered on the local word; a claim that
			// landed anyway is committed.
			r.shared = append(r.shared, ds[j])
			b.counts.Unchecked++
		case redistier.Held:
			held = append(held, ds[j])
			b.copyOf(int(b.keys[i].at), ByRedis, ages[j])
		default: // Pending
			pending = append(pending, ds[j])
			b.deferKey(i)
		}
	}
	sc.held, sc.pending = held, pending
	for _, d := range held {
		e.local.Disown(d, r.token) // delivered elsewhere: committed here too
	}
	e.local.ReleaseBatch(pending, r.token) // another batch's: not this one's to hold
	return nil
}

// deliver sends what the verdicts keep (applied if they change data; an empty
// call is not made) and settles the round: committed if the next consumer
// accepted, else released, so the sender's retry is not dropped as a copy of
// data that never arrived. A refusal naming the round's own shared claim means
// a dedup processor after this one shares its key space.
func deliver[T any](ctx context.Context, e *Engine, b *Batch, s Adapter[T], data T, change bool, later *T) error {
	var err error
	if b.kept > 0 {
		if change {
			s.Apply(b, data, later)
		}
		err = s.Send(ctx, data)
	}
	if err == nil {
		e.settle(ctx, b, roundCommitted, true)
		e.opts.Observer.Delivered(ctx, b)
		b.counts, b.trail.copies = Counts{}, b.trail.copies[:0] // a second call counts its own
		return nil
	}
	if id := b.round.redisToken; id != "" && strings.Contains(err.Error(), ClaimName(redistier.ClaimID(id))) {
		e.stacked.Log(b.now, err, zap.String("key_prefix", e.shared.prefix))
		e.opts.Observer.Stacked(ctx)
	}
	if n := e.settle(ctx, b, roundReleased, true); n > 0 {
		e.opts.Observer.Released(ctx, n)
	}
	return err
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
func (e *Engine) settle(ctx context.Context, b *Batch, state roundState, wake bool) (released int) {
	if wake {
		defer e.rounds.Settled()
	}
	r := &b.round
	if r.state != roundOpen {
		return 0
	}
	r.state = state
	if e.shared != nil {
		// The writes outlive a sender that gave up: the records were
		// delivered or must be freed.
		ctx = context.WithoutCancel(ctx)
	}
	switch state {
	case roundCommitted:
		e.local.End(r.token)
		if now, window := e.rounds.Now(), int64(e.opts.Window); now-b.now > window {
			// The export outlasted the window: its keys expired pending.
			e.local.Recommit(r.held, now+window, now)
		}
		if e.shared != nil {
			if err := e.shared.Commit(ctx, r.redisToken, r.shared); err != nil {
				e.shared.Failed(b.now, err, zap.String("op", redistier.OpCommit))
			}
		}
	case roundReleased:
		e.local.ReleaseBatch(r.held, r.token)
		e.local.End(r.token)
		released = len(r.held)
		if e.shared != nil {
			released = len(r.shared)
			if err := e.shared.Release(ctx, r.redisToken, r.shared); err != nil {
				e.shared.Failed(b.now, err, zap.String("op", redistier.OpRelease))
			}
		}
	}
	return released
}

// ErrInFlight: a record is still held by another batch's pending claim after
// pending_wait; that batch may never deliver it, so the sender retries.
var ErrInFlight = errors.New("dedup: a record of this batch is still being delivered by another batch; retry later")

// ClaimName is how a refusal names a shared claim, by its id.
func ClaimName(id string) string { return hex.EncodeToString([]byte(id)) }

// await waits, holding no pending claim, until the records left for later
// settle, a recheck claiming them in a new round; it returns with the round
// open.
func (e *Engine) await(ctx context.Context, b *Batch) error {
	w := e.rounds.BeginWait()
	for {
		// The refusal names the shared claim last met pending, for a
		// processor before (deliver).
		refused := ErrInFlight
		if b.holder != "" {
			refused = fmt.Errorf("%w (held by claim %s)", ErrInFlight, ClaimName(b.holder))
		}
		if err := w.Pause(ctx, b.now, refused, zap.Int("records", len(b.later))); err != nil {
			return err
		}
		recheck := b.later
		b.later = nil
		for _, i := range recheck {
			b.verdicts[b.keys[i].at] = verdictKeep
		}
		e.beginRound(b)
		if err := e.claim(ctx, b, recheck, true); err != nil {
			e.settle(ctx, b, roundReleased, true)
			return err
		}
		if len(b.later) == 0 {
			b.later = recheck
			b.countUnique(recheck)
			w.Done(ctx)
			return nil
		}
		// Waking others would let two batches waiting for the same records
		// wake each other forever.
		e.settle(ctx, b, roundReleased, false)
		b.later = b.later[:0]
		for _, i := range recheck {
			if v := b.verdicts[b.keys[i].at]; v == verdictKeep || v == verdictLater {
				b.verdicts[b.keys[i].at] = verdictLater
				b.later = append(b.later, i)
			}
		}
	}
}

// end releases what the batch holds and pools it, keeping its arrays unless
// they grew large.
func (e *Engine) end(ctx context.Context, b *Batch) {
	e.settle(ctx, b, roundReleased, true)
	e.flying.Add(-1)
	const maxRetained = 64 << 10
	nb := Batch{}
	if max(cap(b.verdicts), cap(b.keys), cap(b.scratch.seen)) <= maxRetained {
		r, sc := &b.round, &b.scratch
		nb = Batch{
			verdicts: b.verdicts[:0], keys: b.keys[:0], firsts: b.firsts[:0], later: b.later[:0], second: b.second[:0],
			round:   round{held: r.held[:0], shared: r.shared[:0]},
			scratch: scratch{won: sc.won[:0], ds: sc.ds[:0], held: sc.held[:0], pending: sc.pending[:0], results: sc.results[:0], answers: sc.answers[:0], seen: sc.seen},
			trail:   b.trail.reset(),
		}
	}
	*b = nb
	batchPool.Put(b)
}

// Outcome is what happened to one record; the records counter's label.
type Outcome int

const (
	Unique Outcome = iota
	Duplicate
	MissingKey
	Skipped
	KeyError
	NumOutcomes
)

// OutcomeNames are the records counter's outcome values.
var OutcomeNames = [NumOutcomes]string{"unique", "duplicate", "missing_key", "skipped", "key_error"}

// CaughtBy is what caught a duplicate: the duplicates counter's caught_by label.
type CaughtBy int

const (
	ByBatch    CaughtBy = iota // a copy earlier in the same batch
	ByLocal                    // the local tier
	ByRedis                    // the shared tier
	ByElection                 // a data point of a replica that is not its cluster's elected one
	NumCaughtBy
)

// CaughtByNames are the duplicates counter's caught_by values.
var CaughtByNames = [NumCaughtBy]string{"batch", "local", "redis", "election"}

// UnknownAge is the age of a copy whose original's time the tier that caught
// it does not know.
const UnknownAge time.Duration = -1

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

// Counts is what a call did to its records, for the telemetry.
type Counts struct {
	Outcomes  [NumOutcomes]int64
	Caught    [NumCaughtBy]int64
	Unchecked int // delivered on the local tier's word: the shared tier failed under on_error: pass
}

// Batch is one ConsumeXxx call: the signal's adapter identifies its records
// in walk order (Keyed, Passed, Duplicate), the engine claims and settles them.
type Batch struct {
	now      int64     // when the current round began
	verdicts []verdict // per record, walk order
	keys     []key     // the keyed records, walk order
	firsts   []int32   // indexes into keys: the first copy of each digest
	later    []int32   // indexes into keys: left for the second call
	second   []int32   // verdict indexes of the units left for the second call, ascending
	split    bool      // the first call moved them out: the second call's data holds them alone
	kept     int       // records the current call keeps (needsApply)
	counts   Counts

	// Alters, set by the adapter, applies the batch even without a copy: the
	// adapter changes kept records (replica labels).
	Alters bool
	// Unidentified, set by the adapter: the request lacks the auth_attributes
	// identity.
	Unidentified bool

	opts    *Options
	holder  string // the id of a shared claim met pending, for the refusal
	round   round
	scratch scratch
	trail   trail // what the copies' telemetry needs: sources, copies, ages
}

// round is one claim of a batch under its own tokens, settled by a commit or
// a release.
type round struct {
	token      uint64          // local claim token
	redisToken string          // shared claim token; "" without a shared tier
	held       []digest.Digest // claimed in the local tier
	shared     []digest.Digest // claimed in the shared tier, or maybe (unknown answer)
	state      roundState
}

type scratch struct {
	won     []int32
	ds      []digest.Digest
	held    []digest.Digest // held in the shared tier: disowned locally
	pending []digest.Digest // pending in the shared tier: released locally
	results []localcache.Result
	answers []redistier.Answer
	seen    []int32
}

// NewBatch returns a batch of n records begun at now, outside any engine: to
// see what a signal's Identify makes of records.
func NewBatch(n int, now int64) *Batch {
	return &Batch{now: now, verdicts: make([]verdict, 0, n), opts: &Options{}}
}

// Now is when the batch's current round began (Unix ns).
func (b *Batch) Now() int64 { return b.now }

// Len is the number of records identified so far: the next one's index.
func (b *Batch) Len() int { return len(b.verdicts) }

// Keyed adds a record identified by d, kept unless its claim finds otherwise.
func (b *Batch) Keyed(d digest.Digest) {
	b.keys = append(b.keys, key{d: d, at: int32(len(b.verdicts))})
	b.verdicts = append(b.verdicts, verdictKeep)
}

// Passed adds a record that is not deduplicated, for the outcome o; drop
// drops it.
func (b *Batch) Passed(o Outcome, drop bool) {
	v := verdictKeep
	if drop {
		v = verdictDrop
	}
	b.counts.Outcomes[o]++
	b.verdicts = append(b.verdicts, v)
}

// Duplicate adds a record found a duplicate before any claim (election), age
// (or UnknownAge) after its original.
func (b *Batch) Duplicate(by CaughtBy, age time.Duration) {
	b.verdicts = append(b.verdicts, verdictKeep)
	b.copyOf(len(b.verdicts)-1, by, age)
}

// Counts is what the call accepted last did to its records.
func (b *Batch) Counts() *Counts { return &b.counts }

// DigestAt is the digest of the keyed record at verdict index at, if any.
func (b *Batch) DigestAt(at int32) (digest.Digest, bool) {
	i := sort.Search(len(b.keys), func(i int) bool { return b.keys[i].at >= at })
	if at < 0 || i == len(b.keys) || b.keys[i].at != at {
		return digest.Digest{}, false
	}
	return b.keys[i].d, true
}

// copyOf makes the record at index at a duplicate caught by by, age (or
// UnknownAge) after its original.
func (b *Batch) copyOf(at int, by CaughtBy, age time.Duration) {
	b.trail.copies = append(b.trail.copies, Copy{At: int32(at), By: by, Age: age})
	b.counts.Caught[by]++
	b.counts.Outcomes[Duplicate]++
	b.verdicts[at] = verdictDrop
	if b.opts.Mark {
		b.verdicts[at] = verdictMark
	}
}

// firstCopies lists each digest's first copy in b.firsts, making the others
// duplicates: one claim each.
func (b *Batch) firstCopies() {
	b.firsts = b.firsts[:0]
	if len(b.keys) == 0 {
		return
	}
	size := 1
	for size < 2*len(b.keys) {
		size <<= 1
	}
	if cap(b.scratch.seen) < size {
		b.scratch.seen = make([]int32, size)
	}
	seen := b.scratch.seen[:size]
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
				b.copyOf(int(k.at), ByBatch, 0)
				break
			}
		}
	}
}

func (b *Batch) digests(idx []int32) []digest.Digest {
	b.scratch.ds = b.scratch.ds[:0]
	for _, i := range idx {
		b.scratch.ds = append(b.scratch.ds, b.keys[i].d)
	}
	return b.scratch.ds
}

func (b *Batch) deferKey(i int32) {
	if b.verdicts[b.keys[i].at] != verdictLater {
		b.verdicts[b.keys[i].at] = verdictLater
		b.later = append(b.later, i)
	}
}

func (b *Batch) countUnique(idx []int32) {
	for _, i := range idx {
		if b.verdicts[b.keys[i].at] == verdictKeep {
			b.counts.Outcomes[Unique]++
		}
	}
}

// needsApply counts the records kept and says whether the verdicts change the
// batch.
func (b *Batch) needsApply() bool {
	change := b.opts.IdentityAttribute != "" && len(b.keys) > 0 || b.Alters
	b.kept = 0
	for _, v := range b.verdicts {
		if v == verdictKeep || v == verdictMark {
			b.kept++
		}
		change = change || v != verdictKeep
	}
	return change
}

// secondCall keeps the verdicts of the records left for later (a duplicate
// among them is dropped or marked as any) and drops the rest, sent with the
// first. With split, the first call moved the records left for later out:
// the second call's data holds them alone.
func (b *Batch) secondCall(split bool) {
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

// Applier applies a batch's verdicts to its units, in walk order.
type Applier struct {
	b    *Batch
	i    int // the next unit's index in the data applied to
	next int // the next keyed unit's index in b.keys
}

// Applier returns an applier of the verdicts to the data of the current call.
func (b *Batch) Applier() Applier { return Applier{b: b} }

// Alters reports whether the adapter changes kept records.
func (a *Applier) Alters() bool { return a.b.Alters }

// At is the next unit's verdict index: its place in the data as received.
func (a *Applier) At() int {
	if a.b.split {
		return int(a.b.second[a.i])
	}
	return a.i
}

// Unit applies the next unit's verdict to its attributes: remove takes the
// unit out, later says it is left for the second call.
func (a *Applier) Unit(attrs pcommon.Map) (remove, later bool) {
	at := a.At()
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
		attrs.PutBool(a.b.opts.MarkAttribute, true)
	}
	if name := a.b.opts.IdentityAttribute; name != "" && k != nil {
		attrs.PutStr(name, k.d.String())
	}
	return false, false
}

// resized returns s resized to n.
func resized[T any](s []T, n int) []T { return slices.Grow(s[:0], n)[:n] }
