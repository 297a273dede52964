package redistier

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/breaker"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

// hangBound is how much longer than its Timeout a failing call may take
// before the test calls it a hang (2 cores, -race).
const hangBound = time.Second

func TestKillAndRestart(t *testing.T) {
	srv := redistest.Standalone(t)
	var obs observations
	const timeout = 300 * time.Millisecond
	// A lease of 1ms: the failed commit below is not retried in the
	// background, whose observations would come at any time.
	tr := newTier(t, Options{
		Endpoints: []string{srv.Addr()}, Window: testWindow, Timeout: timeout, Lease: time.Millisecond,
		Observe: obs.observe, Breaker: breaker.Config{Failures: 100},
	})
	ds := digests(t, "", 10)
	claimAll(t, tr, ds)
	wantObserved(t, &obs, "claim/ok")

	srv.Kill()
	claimed := []bool{true, true}
	start := time.Now()
	err := tr.claimBools(context.Background(), testToken(), ds[:2], claimed)
	if elapsed := time.Since(start); elapsed > timeout+hangBound {
		t.Errorf("Claim against a killed server took %v, want about the %v timeout", elapsed, timeout)
	}
	if err == nil || !strings.HasPrefix(err.Error(), "dedup: redis claim: ") || isTimeout(err) {
		t.Fatalf("Claim against a killed server: %v, want a plain dedup: redis claim: error", err)
	}
	wantClaimed(t, claimed, false, false)
	wantObserved(t, &obs, "claim/error")
	if err := tr.settle(context.Background(), OpCommit, "tok", ds, false); err == nil {
		t.Fatal("Commit against a killed server succeeded")
	}
	if err := tr.settle(context.Background(), OpRelease, "tok", ds, false); err == nil {
		t.Fatal("Release against a killed server succeeded")
	}
	wantObservedBut(t, &obs, "commit/error", "release/error")

	// The restarted server lost its data and its script cache: the claim
	// reloads the script (NOSCRIPT, then EVAL) and wins every digest again.
	srv.Restart()
	claimAll(t, tr, ds)
	wantObservedBut(t, &obs, "claim/ok")
	if ok, err := srv.Client().ScriptExists(context.Background(), claimScript.Hash()).Result(); err != nil || !ok[0] {
		t.Fatalf("claim script not loaded after the restart: %v, %v", ok, err)
	}
	claimAll(t, tr, digests(t, "after", 10))
}

// TestSlowServerIsAskedAgain: a claim whose answer comes later than the
// timeout is asked again with twice the time, so a Redis that answers late
// costs latency, not an answer; one that stays silent opens its breaker,
// which ends the retries.
func TestSlowServerIsAskedAgain(t *testing.T) {
	srv := redistest.Standalone(t)
	var obs observations
	const timeout = 200 * time.Millisecond
	tr := newTier(t, Options{
		Endpoints: []string{srv.Addr()}, Window: testWindow, Timeout: timeout,
		Observe: obs.observe, Breaker: breaker.Config{Failures: 2},
	})
	ds := digests(t, "", 15)
	claimAll(t, tr, ds[:5])
	wantObserved(t, &obs, "claim/ok")

	// Slow: the server sleeps through the first try only.
	srv.Pause()
	done := make(chan []bool, 1)
	go func() {
		claimed := make([]bool, 5)
		if err := tr.claimBools(context.Background(), testToken(), ds[5:10], claimed); err != nil {
			t.Error(err)
		}
		done <- claimed
	}()
	testkit.WaitFor(t, "the first try timed out", 10*time.Second, func() bool { return obs.count("claim/timeout") == 1 })
	srv.Resume()
	wantClaimed(t, <-done, true, true, true, true, true)
	wantObserved(t, &obs, "claim/timeout", "claim/ok")

	// Silent: two timeouts open the breaker, and the third try is not sent.
	srv.Pause()
	start := time.Now()
	err := tr.claimBools(context.Background(), testToken(), ds[10:], make([]bool, 5))
	if elapsed := time.Since(start); elapsed < 3*timeout || elapsed > 3*timeout+hangBound {
		t.Errorf("Claim against a paused server took %v, want about %v (two tries)", elapsed, 3*timeout)
	}
	if !errors.Is(err, errBreakerOpen) || !strings.HasPrefix(err.Error(), "dedup: redis claim: ") {
		t.Fatalf("Claim against a paused server: %v, want its breaker open", err)
	}
	wantObserved(t, &obs, "claim/timeout", "claim/timeout", "claim/skipped")
	srv.Resume()
}

func TestBreaker(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Standalone(t)
	var obs observations
	clk := testkit.NewClock(time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)) // for the breaker
	// A lease of 1ms: the failed commit below is not retried in the
	// background, where it would go through the open breaker (and count
	// below as a command the server processed).
	tr := newTier(t, Options{
		Endpoints: []string{srv.Addr()}, Window: testWindow, Timeout: 100 * time.Millisecond, Lease: time.Millisecond,
		Observe: obs.observe,
		Breaker: breaker.Config{Failures: 3, Cooldown: 5 * time.Second, MaxCooldown: time.Minute, Now: clk.Now},
	})
	ds := digests(t, "", 4)
	claimAll(t, tr, ds[:1])
	wantObservedBut(t, &obs, "claim/ok")

	// A caller that gives up says nothing about Redis: no failure counted.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for range 5 {
		if err := tr.claimBools(cancelled, testToken(), ds, make([]bool, len(ds))); !errors.Is(err, context.Canceled) {
			t.Fatalf("Claim with a cancelled context: %v", err)
		}
	}
	obs.take()
	wantState(t, tr, breaker.Closed)

	// Three timeouts in a row open the breaker.
	openBreaker := func() {
		t.Helper()
		srv.Pause()
		for range 3 {
			if err := tr.claimBools(ctx, testToken(), ds[1:], make([]bool, 3)); !isTimeout(err) {
				t.Fatalf("Claim against a paused server: %v, want a timeout", err)
			}
		}
		srv.Resume()
		wantObservedBut(t, &obs, "claim/timeout", "claim/timeout", "claim/timeout")
		wantState(t, tr, breaker.Open)
	}
	openBreaker()

	// While open, calls fail without reaching the server.
	before := commandsProcessed(t, srv)
	for range 3 {
		claimed := []bool{true, true, true}
		start := time.Now()
		err := tr.claimBools(ctx, testToken(), ds[1:], claimed)
		if !errors.Is(err, errBreakerOpen) || err.Error() != "dedup: redis claim: node "+srv.Addr()+": circuit breaker open" {
			t.Fatalf("Claim with the breaker open: %v", err)
		}
		if elapsed := time.Since(start); elapsed > 50*time.Millisecond {
			t.Errorf("Claim with the breaker open took %v", elapsed)
		}
		wantClaimed(t, claimed, false, false, false)
	}
	if err := tr.settle(ctx, OpCommit, "tok", ds, false); !errors.Is(err, errBreakerOpen) {
		t.Fatalf("Commit with the breaker open: %v", err)
	}
	if err := tr.settle(ctx, OpRelease, "tok", ds, false); !errors.Is(err, errBreakerOpen) {
		t.Fatalf("Release with the breaker open: %v", err)
	}
	// INFO itself is the only command in between.
	if after := commandsProcessed(t, srv); after != before+1 {
		t.Fatalf("server processed %d commands while the breaker was open, want 0", after-before-1)
	}
	wantObservedBut(t, &obs, "claim/skipped", "claim/skipped", "claim/skipped", "commit/skipped", "release/skipped")

	// After the cooldown one probe goes through; its success closes. (The
	// timed-out claims ran once the server resumed and hold ds[1:] pending,
	// so the probes claim fresh digests.)
	fresh := digests(t, "fresh", 2)
	clk.Advance(5 * time.Second)
	wantState(t, tr, breaker.HalfOpen)
	claimAll(t, tr, fresh[:1])
	wantObservedBut(t, &obs, "claim/ok")
	wantState(t, tr, breaker.Closed)

	// A failed probe re-opens it for twice the cooldown.
	openBreaker()
	clk.Advance(5 * time.Second)
	srv.Pause()
	if err := tr.claimBools(ctx, testToken(), ds[2:3], make([]bool, 1)); !isTimeout(err) {
		t.Fatalf("probe against a paused server: %v, want a timeout", err)
	}
	srv.Resume()
	wantObservedBut(t, &obs, "claim/timeout")
	wantState(t, tr, breaker.Open)
	clk.Advance(5 * time.Second)
	if err := tr.claimBools(ctx, testToken(), ds[2:3], make([]bool, 1)); !errors.Is(err, errBreakerOpen) {
		t.Fatalf("Claim 5 s into a 10 s cooldown: %v, want errBreakerOpen", err)
	}
	clk.Advance(5 * time.Second)
	claimAll(t, tr, fresh[1:])
	wantObservedBut(t, &obs, "claim/skipped", "claim/ok")
	wantState(t, tr, breaker.Closed)
}

// TestCommitGoesThroughOpenBreaker: a node back before its breaker's
// cooldown ends gets the queued commit at once, while batches' claims are
// still skipped: a commit held back until its claim's lease ends would let a
// copy's claim in first.
func TestCommitGoesThroughOpenBreaker(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Standalone(t)
	var obs observations
	clk := testkit.NewClock(time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)) // the breaker's: its cooldown never ends
	tr := newTier(t, Options{
		Endpoints: []string{srv.Addr()}, Window: testWindow, Timeout: 100 * time.Millisecond, Lease: 30 * time.Second,
		Observe: obs.observe,
		Breaker: breaker.Config{Failures: 3, Cooldown: 5 * time.Second, Now: clk.Now},
	})
	ds := digests(t, "", 4)
	tok := testToken()
	wantClaimed(t, claim(t, tr, tok, ds[:1]...), true)
	srv.Pause() // a claim is asked again on a timeout: one opens the breaker
	if err := tr.claimBools(ctx, testToken(), ds[1:], make([]bool, 3)); !errors.Is(err, errBreakerOpen) {
		t.Fatalf("Claim against a paused server: %v, want its breaker open", err)
	}
	srv.Resume()
	wantState(t, tr, breaker.Open)
	obs.take()

	if err := tr.Commit(ctx, tok, ds[:1]); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	testkit.WaitFor(t, "the queued commit to land", 10*time.Second, func() bool { return obs.count("commit/ok") == 1 })
	if err := tr.claimBools(ctx, testToken(), ds[:1], make([]bool, 1)); !errors.Is(err, errBreakerOpen) {
		t.Fatalf("Claim after the commit: %v, want the breaker still open", err)
	}
	wantState(t, tr, breaker.Open)
	// Another collector finds the record committed.
	other := newTier(t, Options{Endpoints: []string{srv.Addr()}, Window: testWindow})
	wantClaimed(t, claim(t, other, testToken(), ds[:1]...), false)
	wantObservedBut(t, &obs, "commit/ok", "claim/skipped")
}

func wantState(t testing.TB, tr *Tier, want breaker.State) {
	t.Helper()
	if got := tr.Breakers(); len(got) != 1 || got[0].State != want {
		t.Fatalf("Breakers() = %v, want one in state %v", got, want)
	}
}

// claimAll claims ds under a new token and fails unless every one is won.
func claimAll(t testing.TB, tr *Tier, ds []digest.Digest) {
	t.Helper()
	got := claim(t, tr, testToken(), ds...)
	for i, ok := range got {
		if !ok {
			t.Fatalf("claimed[%d] = false, want true", i)
		}
	}
}

func commandsProcessed(t testing.TB, srv *redistest.Server) int {
	t.Helper()
	info, err := srv.Client().Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no total_commands_processed in INFO stats")
	return 0
}
