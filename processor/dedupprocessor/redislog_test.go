package dedupprocessor

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

// TestRedisDownLogsOncePer10s: a collector with three pipelines' dedup
// processors and Redis down for 28 s asks Redis again every 2 s or sooner
// from each, and each failed dial is a line of go-redis's (43 of them by
// 21 s). The collector logs 3 of them: at the first failure, then at the
// first 10 s or more after the line before, each counting the lines it
// stands for.
func TestRedisDownLogsOncePer10s(t *testing.T) {
	srv := redistest.Standalone(t)
	srv.Kill()
	clk := testkit.NewClock(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC))
	core, logs := observer.New(zap.InfoLevel)
	logger := zap.New(core)
	for i := range 3 {
		cfg := redisConfig([]string{srv.Addr()}, ErrorPass)
		cfg.Redis.Get().KeyPrefix = fmt.Sprintf("pipeline-%d:", i)
		startHarness(t, nil, cfg, new(consumertest.LogsSink), clk, logger)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Each step ends the earliest wait, then lets the goroutine that waited
	// (a tier asking Redis again) reach its next wait.
	// Two waits per processor: its tier's asking again, and its writer.
	if err := clk.WaitForWaiters(ctx, 3*2); err != nil {
		t.Fatal(err)
	}
	start := clk.Now()
	for clk.Now().Sub(start) < 28*time.Second {
		d, ok := clk.Next()
		if !ok {
			t.Fatal("nothing waits on the clock")
		}
		w := clk.Waiters()
		clk.Advance(d)
		if err := clk.WaitForWaiters(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	refused := "redis: connection pool: failed to dial after 1 attempts: dial tcp " + srv.Addr() + ": connect: connection refused"
	var got []string
	for _, e := range logs.All() {
		if e.ContextMap()["client"] == "go-redis" {
			got = append(got, fmt.Sprintf("%s %s (%v)", e.Level, e.Message, e.ContextMap()["occurrences"]))
		}
	}
	want := []string{
		"warn " + refused + " (1)",
		"warn " + refused + " (27)", // 2 more at 0 s, 8 per tier by 9.1 s, the first at 11.1 s
		"warn " + refused + " (15)", // 2 more at 11.1 s, 4 per tier by 19.1 s, the first at 21.1 s
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("go-redis's lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
