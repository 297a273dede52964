package redistier

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

func TestStandalone(t *testing.T) {
	srv := redistest.Standalone(t)
	runContractSuite(t, suiteTarget{
		endpoints: []string{srv.Addr()},
		store:     standaloneStore{srv.Client()},
	})
}

// TestSteadyLoadStaysFlat runs a steady load for twelve windows: every
// record committed less than a window ago is held; Redis keeps a record
// until its stamp (its claim's second, plus the window and three leases)
// passes, and deletes it at the next roll of its hash (within half a window
// and a second), so its memory stays flat however long the load goes on;
// every record hash expires by itself; and a record committed more than a
// window ago is forgotten: claimable again.
func TestSteadyLoadStaysFlat(t *testing.T) {
	const (
		window = time.Second
		lease  = time.Second
		pace   = 50 * time.Millisecond
		size   = 100
		// A record's stamp is its claim's second plus this (layout.go), and
		// a hash written to is rolled at least every half window, in seconds.
		stampAfter = 1 + 3 + 1
		rollEvery  = 1
	)
	srv := redistest.Standalone(t)
	c := srv.Client()
	tr := newTier(t, Options{Endpoints: []string{srv.Addr()}, KeyPrefix: "steady:", Window: window, Lease: lease})
	ctx := context.Background()
	second := func() int64 {
		now, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return now.Unix()
	}
	type batch struct {
		ds        []digest.Digest
		first     int64 // the server's second before the claim
		last      int64 // and after it
		committed time.Time
	}
	var batches []batch
	held := 0
	for i := range 12 * int(window/pace) {
		b := batch{ds: digests(t, strconv.Itoa(i), size), first: second()}
		tok := testToken()
		if got := claim(t, tr, tok, b.ds...); slices.Contains(got, false) {
			t.Fatalf("batch %d: claimed %v, want all", i, got)
		}
		b.last = second()
		commit(t, tr, tok, b.ds...)
		b.committed = time.Now()
		// The first record of each batch committed less than half a window
		// ago (the other half to spare for a slow claim) is held.
		for _, old := range batches {
			if time.Since(old.committed) < window/2 {
				wantClaimed(t, claim(t, tr, testToken(), old.ds[0]), false)
				held++
			}
		}
		batches = append(batches, b)
		time.Sleep(pace) // the load's pace
	}
	if held < len(batches) {
		t.Fatalf("%d records checked held, want at least %d", held, len(batches))
	}

	// Redis holds every record whose stamp has not passed, and none whose
	// stamp passed more than a roll ago (a second of slack for the rolls'
	// own seconds): memory stays flat.
	var records, sure, most int
	for range 3 {
		now := second()
		records, sure, most = 0, 0, 0
		for k := range scanValues(t, c, "steady:*") {
			if isRecord(k) {
				records++
			}
		}
		for _, b := range batches {
			if b.first+stampAfter > now {
				sure += size
			}
			if b.last+stampAfter+rollEvery+1 >= now {
				most += size
			}
		}
		if second() == now {
			break
		}
	}
	if records < sure || records > most || most >= len(batches)*size {
		t.Fatalf("Redis holds %d records, want %d to %d of the %d claimed", records, sure, most, len(batches)*size)
	}
	// Every record hash expires by itself, a half window after its stamps.
	for k := range scanValues(t, c, "steady:3:h*") {
		if name, _, ok := strings.Cut(k, "/"); ok {
			// -2: expired since the scan; -1: no expiry.
			if ttl := c.PTTL(ctx, name).Val(); ttl == -1 || ttl > (stampAfter+rollEvery+2)*time.Second {
				t.Fatalf("record hash %q expires in %v, want within %ds", name, ttl, stampAfter+rollEvery+2)
			}
		}
	}

	// A record committed more than a window ago is forgotten, whether or
	// not its field is still in Redis: claimable again.
	forgotten := 0
	for _, b := range batches {
		if time.Since(b.committed) > window+100*time.Millisecond {
			wantClaimed(t, claim(t, tr, testToken(), b.ds[0]), true)
			forgotten++
		}
	}
	if forgotten == 0 {
		t.Fatal("no batch old enough to check it is forgotten")
	}
}
