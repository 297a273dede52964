package redistier

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/otelcol-dedup/otelcol-dedup/internal/testkit/redistest"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

func TestStandalone(t *testing.T) {
	srv := redistest.Standalone(t)
	runContractSuite(t, suiteTarget{
		endpoints: []string{srv.Addr()},
		store:     standaloneStore{srv.Client()},
	})
}

// TestSteadyLoadKeepsTwoEpochs runs a steady load for four windows: every
// record committed less than a window ago is held, Redis keeps the records
// claimed in the server's current and previous epoch (and the epoch before,
// in a hash not rolled yet), so its memory stays flat however long the load
// goes on, and older records are forgotten.
func TestSteadyLoadKeepsTwoEpochs(t *testing.T) {
	const (
		window = 500 * time.Millisecond
		pace   = 50 * time.Millisecond
		size   = 100
	)
	srv := redistest.Standalone(t)
	c := srv.Client()
	tr := newTier(t, Options{Endpoints: []string{srv.Addr()}, KeyPrefix: "steady:", Window: window, Lease: window, Timeout: 5 * time.Second, Capacity: 2000})
	ctx := context.Background()
	epoch := func() int64 {
		now, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return now.UnixMilli() / window.Milliseconds()
	}
	type batch struct {
		ds        []digest.Digest
		epoch     int64 // of the claim, by the server's clock; -1: it straddled two
		committed time.Time
	}
	var batches []batch
	held := 0
	for i := range 4 * int(window/pace) {
		b := batch{ds: digests(t, strconv.Itoa(i), size), epoch: epoch()}
		tok := testToken()
		if got := claim(t, tr, tok, b.ds...); slices.Contains(got, false) {
			t.Fatalf("batch %d: claimed %v, want all", i, got)
		}
		commit(t, tr, tok, b.ds...)
		b.committed = time.Now()
		if epoch() != b.epoch {
			b.epoch = -1
		}
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

	// Redis holds the records claimed in the current and the previous epoch,
	// and those of the epoch before in hashes no claim has read (rolled)
	// since the epoch began; a batch that straddled two epochs may be in or
	// out. Nothing older: memory stays flat.
	var fields, sure, maybe int
	for range 3 {
		e := epoch()
		fields, sure, maybe = 0, 0, 0
		for k := range scanValues(t, c, "steady:*") {
			if !strings.HasPrefix(k, "steady:"+layoutVersion+statusInfix) && !isRollEpoch(k) {
				fields++
			}
		}
		for _, b := range batches {
			switch {
			case b.epoch == -1 || b.epoch == e-2:
				maybe += size
			case b.epoch >= e-1:
				sure += size
			}
		}
		if epoch() == e {
			break
		}
	}
	if fields < sure || fields > sure+maybe {
		t.Fatalf("Redis holds %d records, want %d and up to %d more", fields, sure, maybe)
	}
	// Every record hash expires by itself.
	for k := range scanValues(t, c, "steady:"+layoutVersion+"*") {
		if name, _, ok := strings.Cut(k, "/"); ok && !strings.HasPrefix(k, "steady:"+layoutVersion+statusInfix) {
			// -2: expired since the scan; -1: no expiry.
			if ttl := c.PTTL(ctx, name).Val(); ttl == -1 || ttl > 2*window {
				t.Fatalf("record hash %q expires in %v, want within two windows", name, ttl)
			}
		}
	}

	// A record claimed two epochs ago and committed more than a window ago is
	// forgotten: claimable again.
	e := epoch()
	forgotten := 0
	for _, b := range batches {
		if b.epoch != -1 && b.epoch <= e-2 && time.Since(b.committed) > window {
			wantClaimed(t, claim(t, tr, testToken(), b.ds[0]), true)
			forgotten++
		}
	}
	if forgotten == 0 {
		t.Fatal("no batch old enough to check it is forgotten")
	}
}
