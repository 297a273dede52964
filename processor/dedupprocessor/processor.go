package dedupprocessor

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/clock"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/localcache"
)

// engine is a processor's signal-independent core: its guarantees are written
// once (consume.go).
type engine struct {
	*batches
	cfg      *Config
	local    *localStage
	shared   *sharedStage // nil: local only
	source   *sourceKey   // names each resource's sender; nil: not traced
	keyError *throttledLog
	stacked  *throttledLog
	looks    sync.Mutex   // one look claims locally at a time
	flying   atomic.Int64 // batches in flight
}

// batches is what a processor's batches share: clock, tokens, wait loop,
// error policy, telemetry.
type batches struct {
	clock       clock.Clock
	tokens      atomic.Uint64
	settled     settledSignal // a round or an election settled: committed or released
	pendingWait time.Duration
	policy      ErrorPolicy // the shared tier's on_error
	refused     *throttledLog
	tierError   *throttledLog
	tel         *telemetry
}

func newEngine(cfg *Config, set component.TelemetrySettings, id component.ID, signal string) (*engine, error) {
	clk := cmp.Or[clock.Clock](cfg.clock, clock.Wall{})
	e := &engine{
		batches: &batches{
			clock:       clk,
			pendingWait: cfg.PendingWait,
			refused:     &throttledLog{logger: set.Logger, msg: "dedup: refused a batch for retry: some of its records are still being delivered by another batch"},
			tierError:   &throttledLog{logger: set.Logger, msg: "dedup: shared tier (redis) failed"},
		},
		cfg:      cfg,
		source:   newSourceKey(cfg.Source.Key),
		keyError: &throttledLog{logger: set.Logger, msg: "dedup: cannot evaluate the key or conditions of a " + signal + " item; passing it through"},
		stacked: &throttledLog{logger: set.Logger, msg: "dedup: the next consumer refused a batch because a dedup processor after this one waits for this batch's own claims: " +
			"the two share one key space in Redis (the same processor ID and settings, or the same redis.key_prefix) and stall each other; " +
			"give one of them another redis.key_prefix or processor ID"},
	}
	e.local = &localStage{
		Cache: localcache.New(cfg.Cache.MaxEntries, int64(cfg.Window)),
		cfg:   cfg, id: id, signal: signal, fingerprint: identityFingerprint(cfg), logger: set.Logger, clock: clk,
	}
	var err error
	if r := cfg.Redis.Get(); r != nil {
		e.policy = r.OnError
		if e.shared, err = newSharedStage(cfg, r, id, set.Logger, e.batches); err != nil {
			return nil, err
		}
	}
	e.tel, err = newTelemetry(set, id, signal, e)
	return e, err
}

func (b *batches) now() int64 { return b.clock.Now().UnixNano() }

func (e *engine) Start(ctx context.Context, host component.Host) error {
	if err := checkAuthenticator(e.cfg, host); err != nil {
		return err
	}
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
func (e *engine) Shutdown(ctx context.Context) error {
	e.drain(ctx)
	var errShared error
	if e.shared != nil {
		errShared = e.shared.Close()
	}
	return errors.Join(e.local.close(ctx), errShared, e.tel.registration.Unregister(), e.tel.copies.close())
}

// drain waits for the batches in flight, at most a lease (or pending_wait),
// or until ctx ends.
func (e *engine) drain(ctx context.Context) {
	bound := e.pendingWait
	if r := e.cfg.Redis.Get(); r != nil {
		bound = r.Lease
	}
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	for e.flying.Load() > 0 {
		settled := e.settled.channel()
		if e.flying.Load() == 0 || e.clock.Wait(ctx, settled, maxPause) != nil {
			return
		}
	}
}

func (e *engine) Capabilities() consumer.Capabilities {
	return consumer.Capabilities{MutatesData: true}
}
