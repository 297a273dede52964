package claim

import (
	"context"
	"time"
)

// Observer is told what the engine does, for the processor's telemetry; the
// engine knows nothing else of it. Implementations are safe for concurrent
// use and do not block.
type Observer interface {
	// Delivered: the next consumer accepted a call of b; b's Counts, Copies
	// and Tally are the call's.
	Delivered(ctx context.Context, b *Batch)
	// Released: the next consumer refused a call, which gave up its claims on
	// keys records.
	Released(ctx context.Context, keys int)
	// Stacked: the next consumer's refusal names this batch's own shared
	// claim: a dedup processor after this one shares its key space.
	Stacked(ctx context.Context)
	// Waited: a batch waited d for other batches' pending claims or
	// elections, and was refused after pending_wait, or went on.
	Waited(ctx context.Context, d time.Duration, refused bool)
	// Redis: one round trip of the shared tier, as redistier.Options.Observe.
	Redis(op, result string, d time.Duration)
}
