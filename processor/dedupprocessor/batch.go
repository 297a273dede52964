package dedupprocessor

import (
	"sync"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/localcache"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/redistier"
)

// verdict is what a call to the next consumer does with one record.
type verdict uint8

const (
	verdictKeep verdict = iota
	verdictDrop
	verdictMark
	// verdictLater: held by the pending claim of a batch in flight; decided
	// and delivered by the second call (see consume.go).
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
	kept     int // records the current call keeps (needsApply)

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

	ballots          *ballotBox // replica election (metrics); nil when not configured
	electionsSettled bool       // committed with the first call

	unidentified bool // the request lacks the auth_attributes identity
}

var batchPool = sync.Pool{New: func() any { return new(batch) }}

// Identification: each record gets a verdict, in walk order.

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

// countUnique counts the keys of idx that the current round won.
func (b *batch) countUnique(idx []int32) {
	for _, i := range idx {
		if b.verdicts[b.keys[i].at] == verdictKeep {
			b.outcomes[outcomeUnique]++
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

// the digests of keys idx, in b.ds.
func (b *batch) digests(idx []int32) []digest.Digest {
	b.ds = b.ds[:0]
	for _, i := range idx {
		b.ds = append(b.ds, b.keys[i].d)
	}
	return b.ds
}

// reset empties b for the pool, keeping its arrays unless they grew large.
func (b *batch) reset() {
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
}

// Application: verdicts to pdata.

// needsApply says whether the verdicts change the batch at all, and counts
// the records the call keeps.
func (e *engine) needsApply(b *batch) bool {
	change := e.cfg.IdentityAttribute != "" && len(b.keys) > 0 || b.ballots != nil && b.ballots.strips > 0
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
