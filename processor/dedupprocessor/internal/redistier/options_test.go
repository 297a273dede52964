package redistier

import (
	"context"
	"testing"
	"time"
)

// TestUnstartedTierFailsCalls: New makes no network call, and a tier that
// was not started answers every digest Unavailable.
func TestUnstartedTierFailsCalls(t *testing.T) {
	// Nothing listens on port 1; New must not notice.
	tr := New(Options{Endpoints: []string{"127.0.0.1:1"}, Window: time.Minute, Lease: 30 * time.Second, Timeout: time.Second})
	defer tr.Close()
	if tr.leaseArg != "30000" || tr.winArg != "60000" {
		t.Fatalf("lease %s ms, window %s ms", tr.leaseArg, tr.winArg)
	}
	// Nothing to do: no round trip, no error.
	if _, err := tr.Claim(context.Background(), "tok", nil, nil, false); err != nil {
		t.Fatal(err)
	}
	if err := tr.Commit(context.Background(), "tok", nil); err != nil {
		t.Fatal(err)
	}
	if err := tr.Release(context.Background(), "tok", nil); err != nil {
		t.Fatal(err)
	}
	ds := digests(t, "", 2)
	answers := []Answer{Claimed, Claimed}
	_, err := tr.Claim(context.Background(), "tok", ds, answers, false)
	if err == nil || err.Error() != "dedup: redis claim: topology not known: the tier has not been started" {
		t.Fatalf("Claim before Start: %v", err)
	}
	if answers[0] != Unavailable || answers[1] != Unavailable {
		t.Fatalf("answers before Start = %v, want Unavailable", answers)
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
