package dedupprocessor

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.uber.org/zap"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/clock"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/localcache"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/redistier"
)

// engine is the signal-independent core of a dedup processor, shared by the
// signal adapters so that the guarantees are written once (consume.go).
type engine struct {
	cfg       *Config
	cache     *localcache.Cache
	local     localTier // the cache
	tel       *telemetry
	logger    *zap.Logger
	keyError  *throttledLog
	tierError *throttledLog
	refused   *throttledLog
	stacked   *throttledLog
	tokens    atomic.Uint64
	looks     sync.Mutex   // one look claims locally at a time
	flying    atomic.Int64 // batches in flight
	clock     clock.Clock
	settled   settledSignal // a round or an election settled: committed or released

	tier        sharedTier      // nil: local only
	redis       *redistier.Tier // the tier, when it is Redis
	elect       *elector        // replica election; nil: not configured
	electTier   electionTier    // elections in the shared tier; nil: local only
	redisPolicy ErrorPolicy

	id          component.ID
	signal      string
	keyPrefix   string       // the shared tier's, once started
	fingerprint uint64       // of the settings that shape identities
	persist     *persistence // nil: no storage
}

func newEngine(cfg *Config, set component.TelemetrySettings, id component.ID, signal string, el *elector) (*engine, error) {
	e := &engine{
		cfg:       cfg,
		cache:     localcache.New(cfg.Cache.MaxEntries, int64(cfg.Window)),
		logger:    set.Logger,
		keyError:  &throttledLog{logger: set.Logger, msg: "dedup: cannot evaluate the key or conditions of a " + signal + " item; passing it through"},
		tierError: &throttledLog{logger: set.Logger, msg: "dedup: shared tier (redis) failed"},
		refused:   &throttledLog{logger: set.Logger, msg: "dedup: refused a batch for retry: some of its records are still being delivered by another batch"},
		stacked: &throttledLog{logger: set.Logger, msg: "dedup: the next consumer refused a batch because a dedup processor after this one waits for this batch's own claims: " +
			"the two share one key space in Redis (the same processor ID and settings, or the same redis.key_prefix) and stall each other; " +
			"give one of them another redis.key_prefix or processor ID"},
		clock:       clock.Wall{},
		id:          id,
		signal:      signal,
		fingerprint: identityFingerprint(cfg),
		elect:       el,
	}
	e.local = e.cache
	if r := cfg.Redis.Get(); r != nil {
		e.redisPolicy = r.OnError
	}
	tel, err := newTelemetry(set, id, signal, e)
	if err != nil {
		return nil, err
	}
	e.tel = tel
	return e, nil
}

// now is the engine's clock in Unix nanoseconds, as the caches take it.
func (e *engine) now() int64 { return e.clock.Now().UnixNano() }

func (e *engine) Start(ctx context.Context, host component.Host) error {
	if err := checkAuthenticator(e.cfg, host); err != nil {
		return err
	}
	if err := e.startPersistence(ctx, host); err != nil {
		return err
	}
	return e.startTier(ctx, host)
}

func (e *engine) Shutdown(ctx context.Context) error {
	e.drain(ctx)
	return errors.Join(e.stopPersistence(ctx), e.stopTier(), e.tel.shutdown())
}

// drain waits for the batches in flight to end, so that their commits and
// releases reach the tiers before these close: at most while a pending
// claim lasts unrenewed (redis.lease), or pending_wait without a shared
// tier, or until ctx ends.
func (e *engine) drain(ctx context.Context) {
	bound := e.cfg.PendingWait
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
