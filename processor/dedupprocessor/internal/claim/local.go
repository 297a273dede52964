package claim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.uber.org/zap"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/clock"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/localcache"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/snapshot"
)

// snapshotKey is the snapshot's key in a client scoped to the instance and
// signal.
const snapshotKey = "local-cache"

// LocalOptions are the local tier's settings.
type LocalOptions struct {
	MaxEntries int // the most keys the cache holds
	// Storage names a storage extension that keeps the cache across
	// restarts; nil: none.
	Storage          *component.ID
	SnapshotInterval time.Duration // how often the cache is saved; 0: only at shutdown
	ID               component.ID  // the processor's, which the storage client is scoped to
	Signal           string        // the pipeline's, likewise
	Fingerprint      uint64        // of the settings that shape identities: a snapshot of others is not restored
}

// localTier is the digest cache and, with storage, its snapshots (restored,
// saved).
type localTier struct {
	*localcache.Cache
	opts   LocalOptions
	window time.Duration
	logger *zap.Logger
	clock  clock.Clock

	client storage.Client // nil: no storage
	stop   context.CancelFunc
	done   sync.WaitGroup
}

// start restores the last snapshot and starts saving one every
// snapshot_interval. Only a storage naming no storage extension fails it: lost
// state (no storage, a bad snapshot) costs its keys and one warning.
func (l *localTier) start(ctx context.Context, host component.Host) error {
	if l.opts.Storage == nil {
		return nil
	}
	id := *l.opts.Storage
	ext, ok := host.GetExtensions()[id]
	if !ok {
		return fmt.Errorf("dedup: storage %q: no such extension; configure it under extensions and list it in service.extensions", id)
	}
	se, ok := ext.(storage.Extension)
	if !ok {
		return fmt.Errorf("dedup: storage %q is not a storage extension", id)
	}
	client, err := se.GetClient(ctx, component.KindProcessor, l.opts.ID, l.opts.Signal)
	if err != nil {
		l.logger.Warn("dedup: cannot open the storage for the cache snapshot; running without persistence until restart",
			zap.String("storage", id.String()), zap.Error(err))
		return nil
	}
	l.client = client
	l.restore(ctx)
	saving, stop := context.WithCancel(context.Background())
	l.stop = stop
	if interval := l.opts.SnapshotInterval; interval > 0 {
		l.done.Go(func() {
			for l.clock.Wait(saving, nil, interval) == nil {
				if err := l.save(context.Background()); err != nil {
					l.logger.Warn("dedup: cannot save the cache snapshot", zap.Error(err))
				}
			}
		})
	}
	return nil
}

func (l *localTier) restore(ctx context.Context) {
	b, err := l.client.Get(ctx, snapshotKey)
	if err != nil {
		l.logger.Warn("dedup: cannot read the cache snapshot; starting with an empty cache", zap.Error(err))
		return
	}
	if b == nil {
		l.logger.Info("dedup: no cache snapshot yet; starting with an empty cache")
		return
	}
	now := l.clock.Now().UnixNano()
	meta, n, err := snapshot.Restore(l.Cache, b, l.opts.Fingerprint, int64(l.window), now)
	if err != nil {
		l.logger.Warn("dedup: ignoring an unusable cache snapshot; starting with an empty cache", zap.Error(err), zap.Int("bytes", len(b)))
		return
	}
	l.logger.Info("dedup: restored the cache snapshot", zap.Int("keys", n),
		zap.Duration("age", time.Duration(now-meta.WrittenAt)))
}

func (l *localTier) save(ctx context.Context) error {
	b := snapshot.Save(l.Cache, snapshot.Meta{Window: int64(l.window), Fingerprint: l.opts.Fingerprint}, l.clock.Now().UnixNano())
	return l.client.Set(ctx, snapshotKey, b)
}

// close stops the periodic saves, saves once more (the pipeline has drained)
// and closes the client.
func (l *localTier) close(ctx context.Context) error {
	if l.client == nil {
		return nil
	}
	l.stop()
	l.done.Wait()
	err := l.save(ctx)
	if err != nil {
		err = fmt.Errorf("dedup: save the cache snapshot: %w", err)
	}
	err = errors.Join(err, l.client.Close(ctx))
	l.client = nil
	return err
}
