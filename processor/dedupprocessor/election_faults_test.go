package dedupprocessor

import (
	"testing"
	"time"

	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/consumer/consumertest"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/redistier"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/faultproxy"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

// Replica election through faults of the shared tier, on a real Redis.

// sharedElectionConfig is replica election with a shared tier at endpoint.
func sharedElectionConfig(endpoint string, lease time.Duration, onError ErrorPolicy) *Config {
	cfg := electionConfig()
	cfg.PendingWait = 10 * time.Second
	cfg.Redis = configoptional.Some(RedisConfig{ClusterSlots: 12, Endpoints: []string{endpoint}, Mode: RedisModeStandalone,
		Timeout: 200 * time.Millisecond, Lease: lease, OnError: onError})
	return cfg
}

// TestElectionRenewedWhileDownstream: the batch that took a's election is
// downstream three times longer than the lease. Its election stays pending
// (renewed), so another collector's batch of b waits for it, and once a's
// batch is delivered, b's points are duplicates: a scrape split between the
// two collectors is delivered once, by a.
func TestElectionRenewedWhileDownstream(t *testing.T) {
	srv := redistest.Standalone(t)
	const lease = 600 * time.Millisecond
	gate := newGatedMetrics()
	sink := new(consumertest.MetricsSink)
	h1 := newElectHarness(t, sharedElectionConfig(srv.Addr(), lease, ErrorRefuse), gate, nil)
	h2 := newElectHarness(t, sharedElectionConfig(srv.Addr(), lease, ErrorRefuse), sink, nil)
	first := sendAsync(h1, scrape("c1", "a", 0, 2, onResource))
	gate.waitEntered(t)
	// The fault: an export that outlasts the lease.
	time.Sleep(3 * lease)
	second := sendAsync(h2, scrape("c1", "b", 0, 2, onResource))
	testkit.WaitFor(t, "b's batch asking Redis for the election", 10*time.Second, func() bool {
		return h2.redisRequests("elect", "ok") >= 1
	})
	gate.release <- nil
	if err := result(t, first); err != nil {
		t.Fatalf("a's request: %v", err)
	}
	if err := result(t, second); err != nil {
		t.Fatalf("b's request: %v", err)
	}
	wantDelivered(t, &gate.sink, repeat("a/0", 2))
	wantDelivered(t, sink)
	if d := h2.tier("election"); d != 2 {
		t.Fatalf("b's points caught as another replica's: %d, want 2", d)
	}
}

// TestElectionLostAnswerReleased: under on_error: pass, the election a batch
// asked for was taken in Redis, but both tries' replies were lost. The
// batch goes on undecided, and releases the election it may hold, so the
// next batch of the cluster elects at once instead of waiting out the
// lease and being refused.
func TestElectionLostAnswerReleased(t *testing.T) {
	srv := redistest.Standalone(t)
	proxy := faultproxy.New(t, srv.Addr())
	cfg := sharedElectionConfig(proxy.Addr(), 6*time.Second, ErrorPass)
	cfg.PendingWait = time.Second
	sink := new(consumertest.MetricsSink)
	h := newElectHarness(t, cfg, sink, nil)
	h.mustSend(scrape("c0", "a", 0, 1, onResource)) // loads the scripts
	elect := redistier.ScriptHash("elect")
	ran := proxy.ScriptAnswered(elect)
	cut := proxy.Add(&faultproxy.Rule{Match: faultproxy.Script(elect), Fault: faultproxy.CutAfter(), Times: 2})
	h.mustSend(scrape("c1", "a", 0, 2, onResource))
	if ran = proxy.ScriptAnswered(elect) - ran; cut.Fired() != 2 || ran != 2 {
		t.Fatalf("elections cut %d, run %d; want both tries run and cut", cut.Fired(), ran)
	}
	h.mustSend(scrape("c1", "a", 1, 2, onResource))
	h.mustSend(scrape("c1", "b", 1, 2, onResource))
	wantDelivered(t, sink, repeat("a/0", 1), repeat("a+label/0", 2), repeat("a/1", 2))
	if u, n, d := h.undecided("unavailable"), h.elections("new"), h.tier("election"); u != 2 || n != 2 || d != 2 {
		t.Fatalf("undecided unavailable %d, elections new %d, election duplicates %d; want 2, 2, 2", u, n, d)
	}
}

// TestElectionsAfterRedisLosesThem: Redis restarts without persistence
// while collector 0 holds a's election in its cache. Collector 1 elects b
// in the empty Redis. Collector 0 learns of the restart at its next round
// trip and asks Redis again, so it does not keep dropping b's points while
// collector 1 drops a's.
func TestElectionsAfterRedisLosesThem(t *testing.T) {
	srv := redistest.Standalone(t)
	newCfg := func() *Config {
		cfg := sharedElectionConfig(srv.Addr(), 30*time.Second, ErrorRefuse)
		cfg.Redis.Get().Timeout = 2 * time.Second
		return cfg
	}
	sinks := []*consumertest.MetricsSink{new(consumertest.MetricsSink), new(consumertest.MetricsSink)}
	hs := []*electHarness{newElectHarness(t, newCfg(), sinks[0], nil), newElectHarness(t, newCfg(), sinks[1], nil)}
	hs[0].mustSend(scrape("c1", "a", 0, 2, onResource)) // a elected, cached by collector 0
	srv.Restart()
	hs[1].mustSend(scrape("c1", "b", 1, 2, onResource)) // an empty Redis: b elected
	// Collector 0's next scrape of a: its identity claims reach the
	// restarted Redis, which drops the cached election; b's next scrape
	// there is then of the elected replica.
	hs[0].mustSend(scrape("c1", "a", 1, 2, onResource))
	hs[0].mustSend(scrape("c1", "b", 2, 2, onResource))
	wantDelivered(t, sinks[0], repeat("a/0", 2), repeat("a/1", 2), repeat("b/2", 2))
	wantDelivered(t, sinks[1], repeat("b/1", 2))
}
