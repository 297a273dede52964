package dedupprocessor

// Restarts and shutdown at the processor level: what a snapshot may hold
// when the process dies, what the last snapshot holds after a failed
// delivery, and that no goroutine outlives Shutdown. The end-to-end
// versions, through the binary and file_storage, are in
// internal/e2e/reliability_test.go.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.uber.org/goleak"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

// relGateLogs holds every batch until the test answers it: a next consumer
// (an exporter) that is slow to deliver.
type relGateLogs struct {
	entered chan struct{}
	answer  chan error
	sink    consumertest.LogsSink
}

func newRelGateLogs() *relGateLogs {
	return &relGateLogs{entered: make(chan struct{}, 16), answer: make(chan error)}
}

func (g *relGateLogs) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }

func (g *relGateLogs) ConsumeLogs(ctx context.Context, ld plog.Logs) error {
	g.entered <- struct{}{}
	if err := <-g.answer; err != nil {
		return err
	}
	return g.sink.ConsumeLogs(ctx, ld)
}

func (m *memStorage) relImage() map[string][]byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.values)
}

func (m *memStorage) relSets() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sets
}

// TestCrashSnapshotHoldsNoUndeliveredClaims: a periodic snapshot is taken
// while a batch is in the next consumer (its keys claimed, not delivered),
// and the process dies there, before the batch is delivered: the storage
// holds that snapshot. After the restart, the sender's retry of the batch
// must be delivered: the batch never was. A snapshot
// may hold only keys whose batch was accepted downstream.
func TestCrashSnapshotHoldsNoUndeliveredClaims(t *testing.T) {
	store := &memStorage{}
	host := hostWith{storageID: store}
	cfg := defaultConfig()
	cfg.Storage = &storageID
	cfg.SnapshotInterval = 5 * time.Millisecond
	gate := newRelGateLogs()
	p1, err := NewFactory().CreateLogs(context.Background(), processortest.NewNopSettings(componentType), cfg, gate)
	if err != nil {
		t.Fatal(err)
	}
	if err := p1.Start(context.Background(), host); err != nil {
		t.Fatal(err)
	}
	batch := func() plog.Logs { return logs(rec{body: "a", resource: "s"}, rec{body: "b", resource: "s"}) }
	done := make(chan error, 1)
	go func() { done <- p1.ConsumeLogs(context.Background(), batch()) }()
	<-gate.entered
	// Two periodic saves after the batch claimed its keys.
	sets := store.relSets()
	testkit.WaitFor(t, "two periodic saves", 10*time.Second, func() bool { return store.relSets() >= sets+2 })
	disk := store.relImage() // what the storage holds if the process dies now

	// (Let the first instance end cleanly, so the test leaks nothing; its
	// later saves go to the old store, not to disk.)
	gate.answer <- errors.New("the process died")
	if err := <-done; err == nil {
		t.Fatal("the failed batch was reported delivered")
	}
	if err := p1.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	restarted := &memStorage{values: disk}
	sink := new(consumertest.LogsSink)
	p2, observed, err := startLogs(t, cfg, hostWith{storageID: restarted}, sink)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p2.Shutdown(context.Background()) }()
	if err := p2.ConsumeLogs(context.Background(), batch()); err != nil {
		t.Fatal(err)
	}
	if got := bodies(sink); fmt.Sprint(got) != "[a b]" {
		restoreLine := observed.FilterMessage("dedup: restored the cache snapshot").All()
		t.Fatalf("the retry of a batch that was never delivered: delivered %v, want [a b]; restore log: %v", got, restoreLine)
	}
}

// TestShutdownSnapshotHoldsNoReleasedKeys: a batch the next consumer
// refused releases its keys before the shutdown snapshot is taken, so the
// sender's retry after a graceful restart is delivered, and a delivered
// batch's keys are in the snapshot, so its copy is not.
func TestShutdownSnapshotHoldsNoReleasedKeys(t *testing.T) {
	store := &memStorage{}
	host := hostWith{storageID: store}
	cfg := defaultConfig()
	cfg.Storage = &storageID
	next := &flakyLogs{}
	p1, err := NewFactory().CreateLogs(context.Background(), processortest.NewNopSettings(componentType), cfg, next)
	if err != nil {
		t.Fatal(err)
	}
	if err := p1.Start(context.Background(), host); err != nil {
		t.Fatal(err)
	}
	delivered := logs(rec{body: "delivered", resource: "s"})
	refused := func() plog.Logs { return logs(rec{body: "refused", resource: "s"}) }
	if err := p1.ConsumeLogs(context.Background(), delivered); err != nil {
		t.Fatal(err)
	}
	next.mu.Lock()
	next.fail = 1
	next.mu.Unlock()
	if err := p1.ConsumeLogs(context.Background(), refused()); err == nil {
		t.Fatal("want the next consumer's error")
	}
	if err := p1.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	sink := new(consumertest.LogsSink)
	p2, observed, err := startLogs(t, cfg, host, sink)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p2.Shutdown(context.Background()) }()
	if n := observed.FilterMessage("dedup: restored the cache snapshot").FilterFieldKey("keys").All(); len(n) != 1 || n[0].ContextMap()["keys"] != int64(1) {
		t.Fatalf("restore lines %v, want one with keys=1", n)
	}
	if err := p2.ConsumeLogs(context.Background(), logs(rec{body: "delivered", resource: "s"}, rec{body: "refused", resource: "s"})); err != nil {
		t.Fatal(err)
	}
	assertBodies(t, sink, "refused")
}

type relLifecycle interface {
	Start(context.Context, component.Host) error
	Shutdown(context.Context) error
}

// TestNoGoroutineOutlivesShutdown: a processor of each signal with every
// background part running (periodic snapshots, the Redis tier with its
// connection pool and breaker) leaves no goroutine behind once Shutdown
// returns. Measured against the goroutines alive before it was made, so
// the Redis server's own helpers do not count.
func TestNoGoroutineOutlivesShutdown(t *testing.T) {
	srv := redistest.Standalone(t)
	cfg, uerr, verr := decodeInline(t, fmt.Sprintf(`
storage: file_storage
snapshot_interval: 5ms
logs: {key: ['attributes["event.id"]']}
redis: {endpoints: [%q]}
`, srv.Addr()))
	if uerr != nil || verr != nil {
		t.Fatal(uerr, verr)
	}
	baseline := goleak.IgnoreCurrent()
	store := &memStorage{}
	ctx := context.Background()
	set := processortest.NewNopSettings(componentType)
	lp, err := NewFactory().CreateLogs(ctx, set, cfg, consumertest.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	tp, err := NewFactory().CreateTraces(ctx, set, cfg, consumertest.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	mp, err := NewFactory().CreateMetrics(ctx, set, cfg, consumertest.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []relLifecycle{lp, tp, mp} {
		if err := p.Start(ctx, hostWith{storageID: store}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		ld := logs(rec{body: "x", resource: "s", attrs: map[string]any{"event.id": i}},
			rec{body: "y", resource: "s", attrs: map[string]any{"event.id": i + 1}})
		if err := lp.ConsumeLogs(ctx, ld); err != nil {
			t.Fatal(err)
		}
	}
	sets := store.relSets()
	testkit.WaitFor(t, "three periodic saves", 10*time.Second, func() bool { return store.relSets() >= sets+3 })
	for _, p := range []relLifecycle{lp, tp, mp} {
		if err := p.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	goleak.VerifyNone(t, baseline)
}
