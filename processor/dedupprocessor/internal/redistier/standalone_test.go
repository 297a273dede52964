package redistier

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/redistest"
)

func TestStandalone(t *testing.T) {
	srv := redistest.Standalone(t)
	runContractSuite(t, suiteTarget{
		endpoints: []string{srv.Addr()},
		store:     standaloneStore{srv.Client()},
	})
}

// TestRecheckReadsOnlyHolders: a recheck that names the holders of the
// digests it waits for costs the server one status read per holder, not a
// command per digest, as the server's own command counts show.
func TestRecheckReadsOnlyHolders(t *testing.T) {
	srv := redistest.Standalone(t)
	ctx := context.Background()
	tr := newTier(t, Options{Endpoints: []string{srv.Addr()}, KeyPrefix: "cost:", Window: time.Minute})
	ds := digests(t, "", 200)
	h1, h2, waiter := NewToken(1), NewToken(2), NewToken(3)
	claim(t, tr, h1, ds[:100]...)
	claim(t, tr, h2, ds[100:]...)
	answers, holders := make([]Answer, len(ds)), make([]string, len(ds))
	if err := tr.ClaimHolders(ctx, waiter, ds, answers, holders, true); err != nil {
		t.Fatal(err)
	}
	calls := func() map[string]int64 {
		t.Helper()
		info, err := srv.Client().Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		n := map[string]int64{}
		for _, line := range strings.Split(info, "\n") {
			name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
			if !ok {
				continue
			}
			v, _, _ := strings.Cut(rest, ",")
			n[name], _ = strconv.ParseInt(v, 10, 64)
		}
		return n
	}
	before := calls()
	if err := tr.Recheck(ctx, waiter, nil, ds, answers, holders); err != nil {
		t.Fatal(err)
	}
	after := calls()
	for i, a := range answers {
		if a != Pending {
			t.Fatalf("digest %d: %v, want Pending", i, a)
		}
	}
	got := map[string]int64{}
	for name, n := range after {
		if d := n - before[name]; d != 0 {
			got[name] = d
		}
	}
	// The INFO call itself is counted once, from before.
	want := map[string]int64{"evalsha": 1, "get": 2, "exists": 2, "info": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("server commands of the recheck: %v, want %v", got, want)
	}
}
