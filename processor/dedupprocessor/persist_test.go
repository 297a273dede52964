package dedupprocessor

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
)

// memStorage is a storage extension keeping values in memory, standing in
// for file_storage in unit tests (the end-to-end tests use file_storage).
type memStorage struct {
	mu     sync.Mutex
	values map[string][]byte
	sets   int
}

func (m *memStorage) Start(context.Context, component.Host) error { return nil }
func (m *memStorage) Shutdown(context.Context) error              { return nil }

func (m *memStorage) GetClient(_ context.Context, kind component.Kind, id component.ID, name string) (storage.Client, error) {
	return &memClient{m: m, prefix: kind.String() + "/" + id.String() + "/" + name + "/"}, nil
}

func (m *memStorage) get(key string) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.values[key]
}

type memClient struct {
	m      *memStorage
	prefix string
}

func (c *memClient) Get(_ context.Context, key string) ([]byte, error) {
	return c.m.get(c.prefix + key), nil
}

func (c *memClient) Set(_ context.Context, key string, value []byte) error {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	if c.m.values == nil {
		c.m.values = map[string][]byte{}
	}
	c.m.values[c.prefix+key] = value
	c.m.sets++
	return nil
}

func (c *memClient) Delete(context.Context, string) error               { return nil }
func (c *memClient) Batch(context.Context, ...*storage.Operation) error { return nil }
func (c *memClient) Close(context.Context) error                        { return nil }

type hostWith map[component.ID]component.Component

func (h hostWith) GetExtensions() map[component.ID]component.Component { return h }

var storageID = component.MustNewID("file_storage")

var snapshotStorageKey = component.KindProcessor.String() + "/dedup/logs/local-cache"

// startLogs creates and starts a logs processor on host, with an observed
// logger.
func startLogs(t *testing.T, cfg *Config, host component.Host, sink *consumertest.LogsSink) (processor.Logs, *observer.ObservedLogs, error) {
	t.Helper()
	core, logs := observer.New(zapcore.InfoLevel)
	set := processortest.NewNopSettings(componentType)
	set.Logger = zap.New(core)
	p, err := NewFactory().CreateLogs(context.Background(), set, cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	return p, logs, p.Start(context.Background(), host)
}

func TestSnapshotSurvivesRestart(t *testing.T) {
	store := &memStorage{}
	host := hostWith{storageID: store}
	cfg := defaultConfig()
	cfg.Storage = &storageID
	first := new(consumertest.LogsSink)
	p, _, err := startLogs(t, cfg, host, first)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.ConsumeLogs(context.Background(), logs(rec{body: "a", resource: "s"}, rec{body: "b", resource: "s"})); err != nil {
		t.Fatal(err)
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if store.get(snapshotStorageKey) == nil {
		t.Fatal("no snapshot saved at shutdown")
	}

	second := new(consumertest.LogsSink)
	p2, observed, err := startLogs(t, cfg, host, second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p2.Shutdown(context.Background()) }()
	if err := p2.ConsumeLogs(context.Background(), logs(rec{body: "a", resource: "s"}, rec{body: "c", resource: "s"})); err != nil {
		t.Fatal(err)
	}
	assertBodies(t, second, "c")
	if n := observed.FilterMessage("dedup: restored the cache snapshot").FilterField(zap.Int("keys", 2)).Len(); n != 1 {
		t.Fatalf("restore log lines with keys=2: %d, want 1; logs: %v", n, observed.All())
	}
}

func TestUnusableSnapshotMeansEmptyCacheAndOneWarning(t *testing.T) {
	for name, setup := range map[string]func(store *memStorage) *Config{
		"corrupt": func(store *memStorage) *Config {
			store.values = map[string][]byte{snapshotStorageKey: []byte("OCDD\x00\x01 not really a snapshot")}
			return defaultConfig()
		},
		// A snapshot taken under another key configuration means other things.
		"foreign": func(store *memStorage) *Config {
			other := defaultConfig()
			other.Storage = &storageID
			other.Logs.Key = []string{`attributes["id"]`}
			p, _, err := startLogs(t, other, hostWith{storageID: store}, new(consumertest.LogsSink))
			if err != nil {
				t.Fatal(err)
			}
			_ = p.ConsumeLogs(context.Background(), logs(rec{body: "a", resource: "s"}))
			if err := p.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			return defaultConfig()
		},
	} {
		t.Run(name, func(t *testing.T) {
			store := &memStorage{}
			cfg := setup(store)
			cfg.Storage = &storageID
			sink := new(consumertest.LogsSink)
			p, observed, err := startLogs(t, cfg, hostWith{storageID: store}, sink)
			if err != nil {
				t.Fatalf("an unusable snapshot failed the start: %v", err)
			}
			defer func() { _ = p.Shutdown(context.Background()) }()
			warnings := observed.FilterMessage("dedup: ignoring an unusable cache snapshot; starting with an empty cache")
			if warnings.Len() != 1 {
				t.Fatalf("%d warnings, want 1: %v", warnings.Len(), observed.All())
			}
			if err := p.ConsumeLogs(context.Background(), logs(rec{body: "a", resource: "s"})); err != nil {
				t.Fatal(err)
			}
			if sink.LogRecordCount() != 1 {
				t.Fatal("a record was dropped against an unusable snapshot")
			}
		})
	}
}

func TestSnapshotEveryInterval(t *testing.T) {
	store := &memStorage{}
	cfg := defaultConfig()
	cfg.Storage = &storageID
	cfg.SnapshotInterval = 20 * time.Millisecond
	p, _, err := startLogs(t, cfg, hostWith{storageID: store}, new(consumertest.LogsSink))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.ConsumeLogs(context.Background(), logs(rec{body: "a", resource: "s"})); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "two periodic saves", 5*time.Second, func() bool {
		store.mu.Lock()
		defer store.mu.Unlock()
		return store.sets >= 2
	})
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestStorageMustNameAStorageExtension(t *testing.T) {
	cfg := defaultConfig()
	cfg.Storage = &storageID
	_, _, err := startLogs(t, cfg, hostWith{}, new(consumertest.LogsSink))
	if err == nil || !strings.Contains(err.Error(), `dedup: storage "file_storage": no such extension`) {
		t.Fatalf("error = %v", err)
	}
	_, _, err = startLogs(t, cfg, hostWith{storageID: notStorage{}}, new(consumertest.LogsSink))
	if err == nil || err.Error() != `dedup: storage "file_storage" is not a storage extension` {
		t.Fatalf("error = %v", err)
	}
}

type notStorage struct{}

func (notStorage) Start(context.Context, component.Host) error { return nil }
func (notStorage) Shutdown(context.Context) error              { return nil }
