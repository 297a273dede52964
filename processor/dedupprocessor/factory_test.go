package dedupprocessor

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processortest"
)

// TestOneProcessorIDInTwoPipelinesWithSharedTier: a collector makes one
// processor per pipeline with one factory, before starting any (and
// `validate` makes them without starting them); with a shared tier, a
// second processor of the same ID and signal from that factory is refused
// when it is made, with the fix named, while another collector (factory),
// another signal or another ID is fine. Without redis one ID in two
// pipelines is fine.
func TestOneProcessorIDInTwoPipelinesWithSharedTier(t *testing.T) {
	ctx := context.Background()
	cfg := redisConfig([]string{"127.0.0.1:1"}, ErrorPass)
	set := processortest.NewNopSettings(componentType)
	collector := NewFactory()
	first, err := collector.CreateLogs(ctx, set, cfg, consumertest.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	_, err = collector.CreateLogs(ctx, set, cfg, consumertest.NewNop())
	want := `dedup: processor "dedup" is in two logs pipelines and has a shared tier (redis): both would claim the same keys and each pipeline would drop the records the other delivered; give each pipeline its own dedup processor ID (e.g. dedup/a and dedup/b)`
	if err == nil || err.Error() != want {
		t.Fatalf("second processor: %v\nwant: %s", err, want)
	}
	made := []component.Component{first}
	other, err := NewFactory().CreateLogs(ctx, set, cfg, consumertest.NewNop())
	if err != nil {
		t.Fatalf("another collector: %v", err)
	}
	named := set
	named.ID = component.MustNewIDWithName("dedup", "b")
	b, err := collector.CreateLogs(ctx, named, cfg, consumertest.NewNop())
	if err != nil {
		t.Fatalf("another ID: %v", err)
	}
	traces, err := collector.CreateTraces(ctx, set, cfg, consumertest.NewNop())
	if err != nil {
		t.Fatalf("another signal: %v", err)
	}
	made = append(made, other, b, traces)
	local := defaultConfig()
	for range 2 {
		p, err := collector.CreateMetrics(ctx, set, local, consumertest.NewNop())
		if err != nil {
			t.Fatalf("one ID in two pipelines without redis: %v", err)
		}
		made = append(made, p)
	}
	host := componenttest.NewNopHost()
	for _, p := range made {
		if err := p.Start(ctx, host); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range made {
		if err := p.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOneProcessorIDInTwoPipelinesWithStorage: with storage, a second
// processor of the same ID and signal from one factory is refused when it
// is made, so `validate` refuses it; with storage and redis, the error names
// both; another signal is fine.
func TestOneProcessorIDInTwoPipelinesWithStorage(t *testing.T) {
	ctx := context.Background()
	storage := component.MustNewID("file_storage")
	cfg := defaultConfig()
	cfg.Storage = &storage
	both := redisConfig([]string{"127.0.0.1:1"}, ErrorPass)
	both.Storage = &storage
	set := processortest.NewNopSettings(componentType)
	for _, tt := range []struct {
		cfg  *Config
		want string
	}{
		{cfg, `dedup: processor "dedup" is in two logs pipelines and has storage (file_storage): both would keep their cache in the same snapshot, and the second to start would run without persistence; give each pipeline its own dedup processor ID (e.g. dedup/a and dedup/b)`},
		{both, `dedup: processor "dedup" is in two logs pipelines and has a shared tier (redis): both would claim the same keys and each pipeline would drop the records the other delivered, and storage (file_storage): both would keep their cache in the same snapshot, and the second to start would run without persistence; give each pipeline its own dedup processor ID (e.g. dedup/a and dedup/b)`},
	} {
		collector := NewFactory()
		first, err := collector.CreateLogs(ctx, set, tt.cfg, consumertest.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := collector.CreateLogs(ctx, set, tt.cfg, consumertest.NewNop()); err == nil || err.Error() != tt.want {
			t.Fatalf("second processor: %v\nwant: %s", err, tt.want)
		}
		metrics, err := collector.CreateMetrics(ctx, set, tt.cfg, consumertest.NewNop())
		if err != nil {
			t.Fatalf("another signal: %v", err)
		}
		for _, p := range []component.Component{first, metrics} {
			if err := p.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestRedisPendingWaitRefused: pending_wait's name before the first
// release, redis.pending_wait, is refused like any unknown key.
func TestRedisPendingWaitRefused(t *testing.T) {
	_, unmarshalErr, _ := loadConfig(t, "redis_pending_wait")
	if unmarshalErr == nil || !strings.Contains(unmarshalErr.Error(), "pending_wait") {
		t.Fatalf("unmarshal: %v, want redis.pending_wait refused", unmarshalErr)
	}
}

var _ processor.Factory = NewFactory()
