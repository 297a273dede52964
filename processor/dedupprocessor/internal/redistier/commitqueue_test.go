package redistier

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/redistest"
)

// TestCommitLater: queued commits land, several batches' in one round trip
// at most as many as the batches; Close sends those still queued; and a
// closed tier queues nothing, so its callers commit themselves.
func TestCommitLater(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) ([]string, store)
	}{
		{"standalone", func(t *testing.T) ([]string, store) {
			srv := redistest.Standalone(t)
			return []string{srv.Addr()}, standaloneStore{srv.Client()}
		}},
		{"cluster", func(t *testing.T) ([]string, store) {
			cl := redistest.Cluster(t, 3)
			return cl.Addrs(), clusterStore{cl.Client()}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			endpoints, st := tc.store(t)
			var obs observations
			tr, err := New(Options{Endpoints: endpoints, Window: testWindow, Lease: time.Minute, Timeout: testTimeout, Observe: obs.observe})
			if err != nil {
				t.Fatal(err)
			}
			if tr.CommitLater(testToken(), digests(t, "early", 1)) {
				t.Fatal("CommitLater queued a commit before the tier knew its topology")
			}
			if err := tr.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			const batches = 40
			type claimed struct {
				token string
				keys  []string // status keys
			}
			var all []claimed
			for range batches {
				tok := testToken()
				ds := digests(t, tok, 30)
				claimAllAs(t, tr, tok, ds)
				c := claimed{token: tok}
				for _, g := range tr.conn.Load().groupsOf(ds) {
					c.keys = append(c.keys, tr.lay().statusKey(g, tok))
				}
				all = append(all, c)
			}
			obs.take()
			// Queued back to back, and Close right after: whatever the loop
			// has not sent yet, Close sends.
			for i, c := range all {
				if !tr.CommitLater(c.token, digests(t, c.token, 30)) {
					t.Fatalf("batch %d: CommitLater refused with the queue far from full", i)
				}
			}
			if err := tr.Close(); err != nil {
				t.Fatal(err)
			}
			rounds := 0
			for _, o := range obs.take() {
				if o != "commit/ok" {
					t.Errorf("observed %s, want only commit/ok", o)
				}
				rounds++
			}
			if rounds < 1 || rounds > batches {
				t.Errorf("%d commit rounds for %d batches, want 1 to %d", rounds, batches, batches)
			}
			for _, c := range all {
				for _, key := range c.keys {
					wantValue(t, st, key, "c")
					wantPTTL(t, st, key, testWindow-10*time.Second, testWindow)
				}
			}
			if tr.CommitLater(testToken(), digests(t, "late", 1)) {
				t.Error("CommitLater queued a commit on a closed tier")
			}
		})
	}
}

// TestCommitLaterFull: a batch that finds the queue full is told to commit
// itself.
func TestCommitLaterFull(t *testing.T) {
	srv := redistest.Standalone(t)
	tr := newTier(t, Options{Endpoints: []string{srv.Addr()}, Window: testWindow})
	// Hold the queue's lock so the loop cannot take what is queued.
	tr.commits.mu.Lock()
	tr.commits.items = make([]queuedCommit, maxQueuedCommits)
	tr.commits.mu.Unlock()
	if tr.CommitLater(testToken(), digests(t, "", 1)) {
		t.Fatal("CommitLater queued a commit beyond maxQueuedCommits")
	}
}

// TestCommitLaterFails: a round that fails is reported, and its commits are
// sent again until they land: the claims end committed, not with the lease.
func TestCommitLaterFails(t *testing.T) {
	srv := redistest.Standalone(t)
	var mu sync.Mutex
	var failures []error
	const timeout = 200 * time.Millisecond
	tr := newTier(t, Options{
		Endpoints: []string{srv.Addr()}, Window: testWindow, Lease: time.Minute, Timeout: timeout,
		OnCommitError: func(err error) {
			mu.Lock()
			failures = append(failures, err)
			mu.Unlock()
		},
	})
	tok := testToken()
	ds := digests(t, "", 10)
	status := tr.lay().statusKey(0, tok)
	claimAllAs(t, tr, tok, ds)

	srv.Pause()
	if !tr.CommitLater(tok, ds) {
		t.Fatal("CommitLater refused")
	}
	deadline := time.Now().Add(timeout + hangBound)
	for {
		mu.Lock()
		n := len(failures)
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the failed round was not reported to OnCommitError")
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	if !isTimeout(failures[0]) {
		t.Errorf("OnCommitError got %v, want a timeout", failures[0])
	}
	mu.Unlock()
	srv.Resume()
	// The followups send it again (first after 100 ms, then growing).
	deadline = time.Now().Add(5 * time.Second)
	for {
		v, err := srv.Client().Get(context.Background(), status).Result()
		if err == nil && v == "c" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status %q = %q (%v) 5 s after the server resumed, want c", status, v, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// claimAllAs claims ds under token, and fails unless every one is won.
func claimAllAs(t testing.TB, tr *Tier, token string, ds []digest.Digest) {
	t.Helper()
	for i, ok := range claim(t, tr, token, ds...) {
		if !ok {
			t.Fatalf("digest %d not claimed", i)
		}
	}
}
