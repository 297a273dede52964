package redistier

import (
	"context"
	"testing"
	"time"
)

func TestNewRejectsBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"no endpoints", Options{Window: time.Minute},
			"dedup: redis: endpoints must not be empty"},
		{"bad endpoint", Options{Endpoints: []string{"localhost"}, Window: time.Minute},
			`dedup: redis: endpoint "localhost": want host:port`},
		{"no window", Options{Endpoints: []string{"127.0.0.1:1"}},
			"dedup: redis: window must be >= 1ms, got 0s"},
		{"cluster db", Options{Endpoints: []string{"127.0.0.1:1", "127.0.0.1:2"}, DB: 1, Window: time.Minute},
			"dedup: redis: db must be 0 with a Redis Cluster, got 1"},
		{"negative", Options{Endpoints: []string{"127.0.0.1:1"}, Window: time.Minute, Lease: -1, Timeout: -1},
			"dedup: redis: lease must be >= 1ms (or 0 for the default), got -1ns\ntimeout must be >= 0, got -1ns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := New(tc.opts)
			if err == nil {
				_ = tr.Close()
				t.Fatal("New succeeded")
			}
			if err.Error() != tc.want {
				t.Fatalf("New: %q, want %q", err, tc.want)
			}
		})
	}
}

func TestNewMakesNoNetworkCall(t *testing.T) {
	// Nothing listens on port 1; New must not notice.
	tr := newTier(t, Options{Endpoints: []string{"127.0.0.1:1"}, Window: time.Minute})
	if tr.timeout != DefaultTimeout || tr.leaseArg != "30000" || tr.winArg != "60000" {
		t.Fatalf("defaults: timeout %v, lease %s ms, window %s ms", tr.timeout, tr.leaseArg, tr.winArg)
	}
	// Nothing to do: no round trip, no error.
	if err := tr.claimBools(context.Background(), "tok", nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := tr.Commit(context.Background(), "tok", nil); err != nil {
		t.Fatal(err)
	}
	if err := tr.Release(context.Background(), "tok", nil); err != nil {
		t.Fatal(err)
	}
	ds := digests(t, "", 2)
	if err := tr.claimBools(context.Background(), "tok", ds, make([]bool, 1)); err == nil {
		t.Fatal("Claim with too short a result slice succeeded")
	}
	if err := tr.claimBools(context.Background(), "", ds, make([]bool, 2)); err == nil {
		t.Fatal("Claim with an empty token succeeded")
	}
}

// TestNewToken: tokens are 16 bytes, never repeat, and order by age first
// (bytewise, as the claim script compares them), then by their random part.
func TestNewToken(t *testing.T) {
	seen := map[string]bool{}
	prev := ""
	for age := range uint64(1000) {
		tok := NewToken(age<<40 | age) // every byte of the age counts
		same := NewToken(age<<40 | age)
		if len(tok) != 16 || seen[tok] || tok == same {
			t.Fatalf("NewToken(%d) = %q (len %d, repeated %v)", age, tok, len(tok), seen[tok] || tok == same)
		}
		if prev >= tok {
			t.Fatalf("NewToken(%d) = %x is not after the previous age's %x", age, tok, prev)
		}
		seen[tok], prev = true, max(tok, same)
	}
}
