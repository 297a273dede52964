package dedupprocessor

import (
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/claim"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/faultproxy"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

// TestLateClaimAfterItsCommit: under on_error: pass, a batch's claim is
// held on the network past its timeout (both tries), so the batch is
// delivered on the local cache's word and committed. The commit finds no
// claim in Redis. The held claim then lands, after the commit meant to
// settle it. It must not stand pending: another collector's copy of its
// records is answered at once (a duplicate, or a copy the unchecked
// delivery already counted), not held for pending_wait and refused while
// the orphan lives out its lease.
func TestLateClaimAfterItsCommit(t *testing.T) {
	srv := redistest.Standalone(t)
	proxy := faultproxy.New(t, srv.Addr())
	newCfg := func(endpoint string) *Config {
		cfg := redisConfig([]string{endpoint}, ErrorPass)
		cfg.PendingWait = 500 * time.Millisecond
		cfg.Redis.Get().Timeout = 200 * time.Millisecond
		cfg.Redis.Get().Lease = 3 * time.Second
		return cfg
	}
	sink := new(consumertest.LogsSink)
	h := newHarness(t, newCfg(proxy.Addr()), sink)
	other := newHarness(t, newCfg(srv.Addr()), new(consumertest.LogsSink))
	if err := h.consume(events(100)); err != nil { // loads the scripts
		t.Fatal(err)
	}
	held := make(chan struct{})
	ran := proxy.ScriptAnswered(claimScriptHash)
	late := proxy.Add(&faultproxy.Rule{Match: faultproxy.Script(claimScriptHash), Fault: faultproxy.HoldRequest(held), Times: 2})
	if err := h.consume(events(1, 2)); err != nil {
		t.Fatalf("under on_error: pass, a claim held past its timeout: %v, want the batch delivered", err)
	}
	assertBodies(t, sink, "secret body 100", "secret body 1", "secret body 2")
	testkit.WaitFor(t, "the commit sent", 10*time.Second, func() bool {
		return h.redisRequests("commit", "ok")+h.redisRequests("commit", "lost") >= 2
	})
	tries := late.Fired()
	close(held)
	testkit.WaitFor(t, "the held claims reached Redis", 10*time.Second, func() bool {
		return proxy.ScriptAnswered(claimScriptHash)-ran == tries
	})
	start := time.Now()
	if err := other.consume(events(1, 2)); errors.Is(err, claim.ErrInFlight) {
		t.Fatalf("a copy at another collector was refused after %v: %v; the late claim stands pending after its batch's commit",
			time.Since(start).Round(time.Millisecond), err)
	} else if err != nil {
		t.Fatal(err)
	}
	for k, v := range keyValues(t, srv, "*3:c:*") {
		if v == "p" {
			t.Errorf("claim status %q is pending, with no batch in flight", k)
		}
	}
}
