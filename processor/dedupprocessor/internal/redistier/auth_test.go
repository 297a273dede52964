package redistier

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

func TestTLS(t *testing.T) {
	srv := redistest.Standalone(t, redistest.WithTLS())
	ds := digests(t, "", 2)

	tr := newTier(t, Options{Endpoints: []string{srv.Addr()}, TLS: srv.ClientTLS(), Window: testWindow})
	wantClaimed(t, claim(t, tr, "tok-a", ds...), true, true)
	wantClaimed(t, claim(t, tr, "tok-b", ds...), false, false)

	// The server requires a client certificate.
	noCert := srv.ClientTLS()
	noCert.Certificates = nil
	var obs observations
	tr = newTier(t, Options{Endpoints: []string{srv.Addr()}, TLS: noCert, Window: testWindow, Timeout: 2 * time.Second, Observe: obs.observe})
	err := tr.claimBools(context.Background(), "tok-c", ds, make([]bool, len(ds)))
	if err == nil {
		t.Fatal("Claim without a client certificate succeeded")
	}
	if isTimeout(err) {
		t.Errorf("isTimeout(%v) = true, want a plain error", err)
	}
	wantObserved(t, &obs, "claim/error")

	// Nor does plain text reach a TLS-only server.
	tr = newTier(t, Options{Endpoints: []string{srv.Addr()}, Window: testWindow, Timeout: 2 * time.Second})
	if err := tr.claimBools(context.Background(), "tok-c", ds, make([]bool, len(ds))); err == nil {
		t.Fatal("plain-text Claim to a TLS-only server succeeded")
	}
}

func TestACLUser(t *testing.T) {
	srv := redistest.Standalone(t, redistest.WithACLUser("dedup", "s3cret"))
	ds := digests(t, "", 2)

	tr := newTier(t, Options{Endpoints: []string{srv.Addr()}, Username: "dedup", Password: "s3cret", Window: testWindow})
	wantClaimed(t, claim(t, tr, "tok-a", ds...), true, true)

	var obs observations
	tr = newTier(t, Options{Endpoints: []string{srv.Addr()}, Username: "dedup", Password: "wrong", Window: testWindow, Observe: obs.observe})
	err := tr.claimBools(context.Background(), "tok-b", ds, make([]bool, len(ds)))
	if err == nil || !strings.Contains(err.Error(), "WRONGPASS") || !strings.HasPrefix(err.Error(), "dedup: redis claim: ") {
		t.Fatalf("Claim with a wrong password: %v, want dedup: redis claim: WRONGPASS ...", err)
	}
	if isTimeout(err) || errors.Is(err, errBreakerOpen) {
		t.Errorf("wrong password classified as timeout or breaker: %v", err)
	}
	wantObserved(t, &obs, "claim/error")
}

func wantObserved(t testing.TB, o *observations, want ...string) {
	t.Helper()
	if got := o.take(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("observed %v, want %v", got, want)
	}
}

// wantObservedBut is wantObserved, leaving out the writes reported lost:
// with a lease of a millisecond, the writer gives up a failed commit or
// release at a moment of its own.
func wantObservedBut(t testing.TB, o *observations, want ...string) {
	t.Helper()
	var got []string
	for _, g := range o.take() {
		if !strings.HasSuffix(g, "/"+ResultLost) {
			got = append(got, g)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("observed %v, want %v", got, want)
	}
}
