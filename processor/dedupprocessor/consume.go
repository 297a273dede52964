package dedupprocessor

import (
	"context"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/identity"
)

// One batch's life: identify, claim, deliver, commit or release, record.
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
// script call, per Cluster node). The wait is bounded by pending_wait,
// after which the request is refused for retry; its retry finds the records
// of the first call delivered, drops them as copies, and claims the rest.
// The request is acknowledged only when both calls succeeded.
//
// A pending claim in Redis lives for redis.lease, renewed while its batch
// is downstream (redistier's writer), so the lease bounds only how long the
// claims of a collector that died stand in the way of its senders' retries.
// A claim whose answer was lost is committed or released like any other:
// commit and release compare the claim's token, so neither touches a claim
// that is not there or not its own.

// adapter is what a signal's processor gives the batch: how to identify its
// records, apply the verdicts, copy its pdata and send it on.
type adapter[T any] interface {
	identify(ctx context.Context, b *batch, enc *identity.Encoder, data T)
	apply(b *batch, data T)
	clone(data T) T
	send(ctx context.Context, data T) error
}

// electingAdapter is an adapter with replica election (metrics): its
// electReplicas runs before identify, and may refuse the batch.
type electingAdapter[T any] interface {
	electReplicas(ctx context.Context, b *batch, enc *identity.Encoder, data T) error
}

// consume is ConsumeLogs, ConsumeTraces and ConsumeMetrics.
func consume[T any](ctx context.Context, e *engine, s adapter[T], data T, items int) error {
	if items == 0 {
		return s.send(ctx, data) // nothing to deduplicate
	}
	b := e.begin(items)
	defer e.end(ctx, b)
	enc := encoderPool.Get().(*identity.Encoder)
	defer encoderPool.Put(enc)

	if el, ok := s.(electingAdapter[T]); ok {
		if err := el.electReplicas(ctx, b, enc, data); err != nil {
			return err
		}
	}
	s.identify(ctx, b, enc, data)
	b.firstCopies(e.cfg.Action)
	if err := e.claim(ctx, b, b.firsts, false); err != nil {
		e.releaseRound(ctx, b)
		e.releaseElections(ctx, b)
		return err
	}
	b.countUnique(b.firsts)
	var later T
	if len(b.later) > 0 {
		later = s.clone(data) // the first call may change data
	}
	if err := e.finish(ctx, b, deliver(ctx, e, s, b, data)); err != nil {
		return err
	}
	if len(b.later) == 0 {
		return nil
	}
	if err := e.await(ctx, b); err != nil {
		return err
	}
	b.secondCall()
	return e.finish(ctx, b, deliver(ctx, e, s, b, later))
}

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
