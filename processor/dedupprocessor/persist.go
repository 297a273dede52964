package dedupprocessor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.uber.org/zap"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/snapshot"
)

// snapshotKey is the snapshot's key in a client scoped to this processor
// instance and signal.
const snapshotKey = "local-cache"

// persistence saves the local cache to a storage extension.
type persistence struct {
	client storage.Client
	stop   chan struct{}
	done   sync.WaitGroup
}

// startPersistence restores the last snapshot and starts saving one every
// snapshot_interval. Only a storage setting naming no storage extension
// fails the start: lost state (a storage that cannot be opened, a bad
// snapshot) costs its keys, with one warning.
func (e *engine) startPersistence(ctx context.Context, host component.Host) error {
	if e.cfg.Storage == nil {
		return nil
	}
	id := *e.cfg.Storage
	ext, ok := host.GetExtensions()[id]
	if !ok {
		return fmt.Errorf("dedup: storage %q: no such extension; configure it under extensions and list it in service.extensions", id)
	}
	se, ok := ext.(storage.Extension)
	if !ok {
		return fmt.Errorf("dedup: storage %q is not a storage extension", id)
	}
	client, err := se.GetClient(ctx, component.KindProcessor, e.id, e.signal)
	if err != nil {
		e.logger.Warn("dedup: cannot open the storage for the cache snapshot; running without persistence until restart",
			zap.String("storage", id.String()), zap.Error(err))
		return nil
	}
	p := &persistence{client: client, stop: make(chan struct{})}
	e.persist = p
	e.restore(ctx)
	if interval := e.cfg.SnapshotInterval; interval > 0 {
		p.done.Go(func() { e.saveEvery(p, interval) })
	}
	return nil
}

func (e *engine) restore(ctx context.Context) {
	b, err := e.persist.client.Get(ctx, snapshotKey)
	if err != nil {
		e.logger.Warn("dedup: cannot read the cache snapshot; starting with an empty cache", zap.Error(err))
		return
	}
	if b == nil {
		e.logger.Info("dedup: no cache snapshot yet; starting with an empty cache")
		return
	}
	now := e.now()
	meta, n, err := snapshot.Restore(e.cache, b, e.fingerprint, int64(e.cfg.Window), now)
	if err != nil {
		e.logger.Warn("dedup: ignoring an unusable cache snapshot; starting with an empty cache", zap.Error(err), zap.Int("bytes", len(b)))
		return
	}
	e.logger.Info("dedup: restored the cache snapshot", zap.Int("keys", n),
		zap.Duration("age", time.Duration(now-meta.WrittenAt)))
}

func (e *engine) saveEvery(p *persistence, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			if err := e.save(context.Background(), p); err != nil {
				e.logger.Warn("dedup: cannot save the cache snapshot", zap.Error(err))
			}
		}
	}
}

// save writes a snapshot of the committed keys (see snapshot.Save).
func (e *engine) save(ctx context.Context, p *persistence) error {
	b := snapshot.Save(e.cache, snapshot.Meta{Window: int64(e.cfg.Window), Fingerprint: e.fingerprint}, e.now())
	return p.client.Set(ctx, snapshotKey, b)
}

// stopPersistence stops the periodic saves, saves once more (the pipeline
// has drained: every claimed key is in) and closes the client.
func (e *engine) stopPersistence(ctx context.Context) error {
	p := e.persist
	if p == nil {
		return nil
	}
	e.persist = nil
	close(p.stop)
	p.done.Wait()
	err := e.save(ctx, p)
	if err != nil {
		err = fmt.Errorf("dedup: save the cache snapshot: %w", err)
	}
	return errors.Join(err, p.client.Close(ctx))
}
