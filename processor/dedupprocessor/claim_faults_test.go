package dedupprocessor

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/claim"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/redistier"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/faultproxy"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

// Claims through faults of the shared tier, on a real Redis.

var claimScriptHash = redistier.ScriptHash("claim")

// TestLateClaimAfterItsRelease: a batch's claim is held on the network past
// its timeout (both tries); the batch is refused and releases it. The claim
// then reaches Redis after its release. It claims nothing, so the sender's
// retry is delivered at once instead of waiting out the lease.
func TestLateClaimAfterItsRelease(t *testing.T) {
	srv := redistest.Standalone(t)
	proxy := faultproxy.New(t, srv.Addr())
	cfg := redisConfig([]string{proxy.Addr()}, ErrorRefuse)
	cfg.PendingWait = 500 * time.Millisecond
	cfg.Redis.Get().Timeout = 200 * time.Millisecond
	cfg.Redis.Get().Lease = 3 * time.Second
	sink := new(consumertest.LogsSink)
	h := newHarness(t, cfg, sink)
	if err := h.consume(events(100)); err != nil { // loads the scripts
		t.Fatal(err)
	}
	held := make(chan struct{})
	ran := proxy.ScriptAnswered(claimScriptHash)
	late := proxy.Add(&faultproxy.Rule{Match: faultproxy.Script(claimScriptHash), Fault: faultproxy.HoldRequest(held), Times: 2})
	if err := h.consume(events(1, 2)); !errors.Is(err, claim.ErrSharedTier) {
		t.Fatalf("a claim held past its timeout: %v, want the retryable shared-tier error", err)
	}
	tries := late.Fired()
	if tries == 0 {
		t.Fatal("no claim was held")
	}
	close(held)
	testkit.WaitFor(t, "the held claims reached Redis", 10*time.Second, func() bool {
		return proxy.ScriptAnswered(claimScriptHash)-ran == tries
	})
	if err := h.consume(events(1, 2)); err != nil {
		t.Fatalf("the sender's retry after the late claims: %v", err)
	}
	assertBodies(t, sink, "secret body 100", "secret body 1", "secret body 2")
}

// TestClaimRenewedThroughFailedRenewals: the renewals of a batch's claim
// fail twice in a row while its export outlasts the lease; the renewal is
// tried again at once, not a third of the lease later, so the claim holds:
// another collector's copy waits for the batch and is then a duplicate.
func TestClaimRenewedThroughFailedRenewals(t *testing.T) {
	srv := redistest.Standalone(t)
	proxy := faultproxy.New(t, srv.Addr())
	newCfg := func(endpoint string) *Config {
		cfg := redisConfig([]string{endpoint}, ErrorRefuse)
		cfg.PendingWait = 10 * time.Second
		cfg.Redis.Get().Timeout = 200 * time.Millisecond
		cfg.Redis.Get().Lease = 1500 * time.Millisecond
		return cfg
	}
	gate := newGatedLogs()
	sink := new(consumertest.LogsSink)
	owner := newHarness(t, newCfg(proxy.Addr()), gate)
	other := newHarness(t, newCfg(srv.Addr()), sink)
	cut := proxy.Add(&faultproxy.Rule{Match: faultproxy.Script(redistier.ScriptHash("renew")), Fault: faultproxy.CutBefore(), Times: 2})
	first := consumeAsync(owner, events(1, 2))
	<-gate.entered
	testkit.WaitFor(t, "two renewals cut and one landed", 10*time.Second, func() bool {
		return cut.Fired() == 2 && owner.redisRequests("renew", "ok") >= 1
	})
	// The fault: an export that outlasts the lease.
	time.Sleep(1500 * time.Millisecond)
	copyDone := consumeAsync(other, events(2, 3))
	testkit.WaitFor(t, "the copy's first call", 10*time.Second, func() bool { return len(bodies(sink)) > 0 })
	gate.release <- nil
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-copyDone; err != nil {
		t.Fatal(err)
	}
	assertBodies(t, &gate.sink, "secret body 1", "secret body 2")
	assertBodies(t, sink, "secret body 3")
	if n := owner.redisRequests("renew", "lost"); n != 0 {
		t.Fatalf("%d renewals found their claim ended", n)
	}
}

// keyValues returns the string keys matching pattern and their values.
func keyValues(t *testing.T, srv *redistest.Server, pattern string) map[string]string {
	t.Helper()
	ctx := context.Background()
	keys, err := srv.Client().Keys(ctx, pattern).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range keys {
		out[k] = srv.Client().Get(ctx, k).Val()
	}
	return out
}

// TestShutdownWithBatchesInFlight: the processor is shut down while a batch
// is downstream. Shutdown waits for it, so its commit reaches Redis; a
// batch still downstream when the wait ends (a lease) finds the tier
// closed, and its commit is counted lost, not skipped in silence.
func TestShutdownWithBatchesInFlight(t *testing.T) {
	for _, tc := range []struct {
		name      string
		exportFor time.Duration // after Shutdown began
		committed int           // status keys left committed in Redis
		lost      int64
	}{
		{"the batch ends within the wait", 0, 1, 0},
		{"the batch outlasts the wait", 1500 * time.Millisecond, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Standalone(t)
			cfg := redisConfig([]string{srv.Addr()}, ErrorPass)
			cfg.Redis.Get().KeyPrefix = "shutdown:"
			cfg.Redis.Get().Lease = time.Second
			gate := newGatedLogs()
			h := buildHarness(t, nil, cfg, gate, nil)
			done := consumeAsync(h, events(1, 2))
			<-gate.entered
			stopped := make(chan error, 1)
			go func() { stopped <- h.proc.Shutdown(context.Background()) }()
			// The fault: the export goes on after Shutdown began.
			time.Sleep(tc.exportFor)
			gate.release <- nil
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if err := <-stopped; err != nil {
				t.Fatal(err)
			}
			committed := 0
			for _, v := range keyValues(t, srv, "shutdown:3:c:*") {
				if strings.HasPrefix(v, "c") {
					committed++
				}
			}
			if committed != tc.committed {
				t.Errorf("%d claims committed in Redis, want %d", committed, tc.committed)
			}
			if lost := h.redisRequests("commit", "lost"); lost != tc.lost {
				t.Errorf("commits counted lost = %d, want %d", lost, tc.lost)
			}
		})
	}
}

// TestStackedProcessorsDetected: two stacked dedup processors with the same processor ID
// and settings, one feeding the other, share one key space: the second
// waits for the first's claim, which waits for the second's answer. The
// second's refusal names the claim it waited for; the first recognises its
// own and counts and logs it.
func TestStackedProcessorsDetected(t *testing.T) {
	srv := redistest.Standalone(t)
	newCfg := func() *Config {
		cfg := redisConfig([]string{srv.Addr()}, ErrorRefuse)
		cfg.PendingWait = 300 * time.Millisecond
		return cfg
	}
	sink := new(consumertest.LogsSink)
	gateway := newHarness(t, newCfg(), sink)
	agent := newHarness(t, newCfg(), gateway.proc)
	err := agent.consume(events(1, 2))
	if !errors.Is(err, claim.ErrInFlight) {
		t.Fatalf("the stacked request: %v, want the gateway's refusal", err)
	}
	if n := agent.metric("otelcol_processor_dedup_stacked_processors"); n != 1 {
		t.Fatalf("stacked processors counted %d, want 1", n)
	}
	if n := gateway.metric("otelcol_processor_dedup_stacked_processors"); n != 0 {
		t.Fatalf("the gateway counted %d stacked processors, want 0", n)
	}
}

// TestContendingLooksEnd: two collectors wait for the same 2,000 records,
// held by a third collector's batch, which then fails. The looks of the two
// are made to meet: each collector's first claim call of a look reaches
// Redis together with the other's, its second call 100 ms later, and every
// release later still. Each looks in its own order of the records, so that
// each would win half and find the other half held, look after look. Looks
// claim in one order, stopping at the first record held, so one of them
// wins all and the other then finds them delivered: both requests are
// acknowledged and every record is delivered once.
func TestContendingLooksEnd(t *testing.T) {
	srv := redistest.Standalone(t)
	const n = 2000
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i
	}
	reversed := slices.Clone(ids)
	slices.Reverse(reversed)
	newCfg := func(endpoint string) *Config {
		cfg := redisConfig([]string{endpoint}, ErrorRefuse)
		cfg.PendingWait = 3 * time.Second
		return cfg
	}
	gate := newGatedLogs()
	holder := newHarness(t, newCfg(srv.Addr()), gate)
	sinks := []*consumertest.LogsSink{new(consumertest.LogsSink), new(consumertest.LogsSink)}
	var (
		mu      sync.Mutex
		waiting chan struct{} // the first claim call waiting for the other's
	)
	meet := func() <-chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		if ch := waiting; ch != nil {
			waiting = nil
			close(ch)
			return ch
		}
		ch := make(chan struct{})
		waiting = ch
		time.AfterFunc(300*time.Millisecond, func() { // no other call comes
			mu.Lock()
			defer mu.Unlock()
			if waiting == ch {
				waiting = nil
				close(ch)
			}
		})
		return ch
	}
	release := faultproxy.Script(redistier.ScriptHash("release"))
	var waiters []*harness
	for i := range 2 {
		proxy := faultproxy.New(t, srv.Addr())
		calls := 0 // guarded by the proxy's lock
		proxy.Add(&faultproxy.Rule{Fault: faultproxy.HoldRequestUntil(meet), Match: func(c faultproxy.Command) bool {
			if c.Script() != claimScriptHash {
				return false
			}
			calls++
			return calls%2 == 1
		}})
		proxy.Add(&faultproxy.Rule{Fault: faultproxy.DelayRequest(100 * time.Millisecond), Match: faultproxy.Script(claimScriptHash)})
		proxy.Add(&faultproxy.Rule{Fault: faultproxy.DelayRequest(300 * time.Millisecond), Match: release})
		waiters = append(waiters, newHarness(t, newCfg(proxy.Addr()), sinks[i]))
	}
	first := consumeAsync(holder, events(ids...))
	<-gate.entered
	dones := []<-chan error{consumeAsync(waiters[0], events(ids...)), consumeAsync(waiters[1], events(reversed...))}
	testkit.WaitFor(t, "both copies waiting", 10*time.Second, func() bool {
		return waiters[0].redisRequests("claim", "ok") >= 1 && waiters[1].redisRequests("claim", "ok") >= 1
	})
	gate.release <- errors.New("backend down")
	if err := <-first; err == nil {
		t.Fatal("the failed batch was acknowledged")
	}
	for i, done := range dones {
		if err := <-done; err != nil {
			t.Fatalf("collector %d: %v", i, err)
		}
	}
	testkit.WantEachOnce(t, testkit.Counts(bodies(sinks[0]), bodies(sinks[1])), n)
}
