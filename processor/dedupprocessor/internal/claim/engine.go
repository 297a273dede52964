// Package claim is the dedup processor's signal-independent engine: one
// batch's life (consume.go), the local tier (local.go) and the shared tier
// (shared.go) it claims records in, and the turns batches take on a record
// (rounds.go). A signal's adapter identifies the records and applies the
// verdicts; the engine tells an Observer what it did and knows nothing else
// of the telemetry.
package claim

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.uber.org/zap"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/clock"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/localcache"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/throttle"
)

// Options are an engine's settings.
type Options struct {
	Window      time.Duration // how long a delivered record is remembered
	PendingWait time.Duration // the longest a batch waits for others' pending claims
	// Mark delivers duplicates with MarkAttribute set to true instead of
	// dropping them.
	Mark          bool
	MarkAttribute string
	// IdentityAttribute, when set, receives each delivered record's digest.
	IdentityAttribute string
	Local             LocalOptions
	Shared            *SharedOptions // nil: local only
	Clock             clock.Clock    // nil: the wall clock
	Logger            *zap.Logger
	Observer          Observer
}

// Engine is a processor's signal-independent core: its guarantees are written
// once (consume.go).
type Engine struct {
	opts     Options
	rounds   *Rounds
	local    *localTier
	shared   *SharedTier // nil: local only
	stacked  *throttle.Log
	rechecks sync.Mutex   // one recheck claims locally at a time
	flying   atomic.Int64 // batches in flight
}

// New returns an engine; nothing connects before Start.
func New(opts Options) *Engine {
	if opts.Clock == nil {
		opts.Clock = clock.Wall{}
	}
	e := &Engine{
		opts: opts,
		rounds: &Rounds{
			clock:       opts.Clock,
			pendingWait: opts.PendingWait,
			refused:     throttle.New(opts.Logger, "dedup: refused a batch for retry: some of its records are still being delivered by another batch"),
			observer:    opts.Observer,
		},
		stacked: throttle.New(opts.Logger, "dedup: the next consumer refused a batch because a dedup processor after this one waits for this batch's own claims: "+
			"the two share one key space in Redis (the same processor ID and settings, or the same redis.key_prefix) and stall each other; "+
			"give one of them another redis.key_prefix or processor ID"),
	}
	e.local = &localTier{
		Cache: localcache.New(opts.Local.MaxEntries, int64(opts.Window)),
		opts:  opts.Local, window: opts.Window, logger: opts.Logger, clock: opts.Clock,
	}
	if opts.Shared != nil {
		e.shared = newSharedTier(*opts.Shared, opts, e.rounds)
	}
	return e
}

// Rounds are the turns the engine's batches take; a replica election takes
// its turns with them.
func (e *Engine) Rounds() *Rounds { return e.rounds }

// Cache is the local tier's cache.
func (e *Engine) Cache() *localcache.Cache { return e.local.Cache }

// Shared is the shared tier; nil: local only.
func (e *Engine) Shared() *SharedTier { return e.shared }

// Start restores the local tier and connects the shared tier.
func (e *Engine) Start(ctx context.Context, host component.Host) error {
	if err := e.local.start(ctx, host); err != nil {
		return err
	}
	if e.shared != nil {
		return e.shared.start(ctx, host)
	}
	return nil
}

// Shutdown waits for the batches in flight, so their commits and releases
// land, then closes the tiers.
func (e *Engine) Shutdown(ctx context.Context) error {
	e.drain(ctx)
	var errShared error
	if e.shared != nil {
		errShared = e.shared.Close()
	}
	return errors.Join(e.local.close(ctx), errShared)
}

// drain waits for the batches in flight, at most a lease (or pending_wait),
// or until ctx ends.
func (e *Engine) drain(ctx context.Context) {
	bound := e.opts.PendingWait
	if e.shared != nil {
		bound = e.opts.Shared.Tier.Lease
	}
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	for e.flying.Load() > 0 {
		settled := e.rounds.settled.channel()
		if e.flying.Load() == 0 || e.rounds.clock.Wait(ctx, settled, MaxPause) != nil {
			return
		}
	}
}
