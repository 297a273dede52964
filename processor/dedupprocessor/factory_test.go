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
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
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

// TestDeprecatedRedisPendingWait: redis.pending_wait, renamed pending_wait,
// still works and means the same, with one warning naming its replacement
// when the processors are made; setting both is an error naming both.
func TestDeprecatedRedisPendingWait(t *testing.T) {
	cfg, unmarshalErr, validateErr := loadConfig(t, "deprecated_redis_pending_wait")
	if unmarshalErr != nil || validateErr != nil {
		t.Fatalf("unmarshal: %v, validate: %v", unmarshalErr, validateErr)
	}
	if got := cfg.PendingWait.String(); got != "3s" {
		t.Errorf("pending_wait = %s, want 3s (from redis.pending_wait)", got)
	}
	if r := cfg.Redis.Get(); r == nil || r.Endpoints[0] != "redis.internal:6379" {
		t.Errorf("redis = %+v, want the rest of the section kept", r)
	}
	core, logs := observer.New(zap.WarnLevel)
	set := processortest.NewNopSettings(componentType)
	set.Logger = zap.New(core)
	f := NewFactory()
	ctx := context.Background()
	var made []component.Component
	for _, create := range []func() (component.Component, error){
		func() (component.Component, error) { return f.CreateLogs(ctx, set, cfg, consumertest.NewNop()) },
		func() (component.Component, error) { return f.CreateTraces(ctx, set, cfg, consumertest.NewNop()) },
	} {
		p, err := create()
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, p)
	}
	var msgs []string
	for _, e := range logs.All() {
		msgs = append(msgs, e.Message)
	}
	if want := `dedup: "redis.pending_wait" is deprecated, use "pending_wait"`; len(msgs) != 1 || msgs[0] != want {
		t.Errorf("warnings = %q, want once: %s", msgs, want)
	}
	for _, p := range made {
		if err := p.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}

	_, _, validateErr = loadConfig(t, "deprecated_and_new_pending_wait")
	if want := `redis.pending_wait is deprecated and replaced by pending_wait: set only pending_wait, got both ("3s" and "2s")`; validateErr == nil || !strings.Contains(validateErr.Error(), want) {
		t.Errorf("both set: %v\nwant: %s", validateErr, want)
	}
}

var _ processor.Factory = NewFactory()
