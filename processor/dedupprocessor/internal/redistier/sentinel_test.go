package redistier

import (
	"testing"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

func TestSentinel(t *testing.T) {
	s := redistest.Sentinel(t)
	tr := newTier(t, Options{
		Endpoints:  []string{s.SentinelAddr()},
		MasterName: s.MasterName,
		KeyPrefix:  "sentinel:",
		Window:     testWindow,
	})
	ds := digests(t, "", 3)
	tok := testToken()
	wantClaimed(t, claim(t, tr, tok, ds...), true, true, true)
	commit(t, tr, tok, ds...)
	wantClaimed(t, claim(t, tr, testToken(), ds...), false, false, false)

	// The claims live on the master the sentinel named.
	master := standaloneStore{s.Master.Client()}
	for _, d := range ds {
		wantOwner(t, master, tr.lay(), d, tok)
	}
	wantCommitted(t, master, tr.lay().statusKey(0, tok))

	release(t, tr, tok, ds...)
	wantOwner(t, master, tr.lay(), ds[0], "")
}
