package redistier

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

// BenchmarkLayout is what a remembered record costs Redis: used_memory and
// CPU per record once b.N batches of benchBatch unique records are
// committed (-benchtime 10000x is 10^7 keys), for a 1-hour and a 7-day
// window, from an empty Redis: the shards split as the records grow.
func BenchmarkLayout(b *testing.B) {
	for _, window := range []time.Duration{time.Hour, 7 * 24 * time.Hour} {
		b.Run("window="+window.String(), func(b *testing.B) {
			srv := redistest.Standalone(b)
			tr := newTier(b, Options{Endpoints: []string{srv.Addr()}, KeyPrefix: "otelcol-dedup:", Window: window, Timeout: 5 * time.Second})
			runBatches(b, srv.Client(), tierClaimCommit(tr))
		})
	}
}

// BenchmarkLayoutSteady runs the tier at a 2-second window for b.N batches
// (-benchtime 5000x is about 10 windows here, about 500,000 records a
// window): Redis CPU per record with the shards' splits, rolls and
// expiries in it, and the memory left at the end per record claimed in the
// last two windows (what a steady load keeps: a record goes between one and
// two windows after its claim).
func BenchmarkLayoutSteady(b *testing.B) {
	const window = 2 * time.Second
	srv := redistest.Standalone(b)
	c := srv.Client()
	tr := newTier(b, Options{Endpoints: []string{srv.Addr()}, KeyPrefix: "otelcol-dedup:", Window: window, Lease: time.Second, Timeout: 5 * time.Second})
	op := tierClaimCommit(tr)
	var mu sync.Mutex
	var done []time.Time // when each batch was claimed
	before := usedMemory(b, c)
	runBatches(b, c, func(ctx context.Context, ds []digest.Digest, claimed []bool) error {
		at := time.Now()
		err := op(ctx, ds, claimed)
		mu.Lock()
		done = append(done, at)
		mu.Unlock()
		return err
	})
	recent := 0
	for _, at := range done {
		if time.Since(at) < 2*window {
			recent += benchBatch
		}
	}
	b.ReportMetric(float64(usedMemory(b, c)-before)/float64(recent), "redis-B/recent-record")
}

// tierClaimCommit claims a batch in the tier and commits it at once.
func tierClaimCommit(tr *Tier) func(context.Context, []digest.Digest, []bool) error {
	return func(ctx context.Context, ds []digest.Digest, claimed []bool) error {
		tok := testToken()
		if err := tr.claimBools(ctx, tok, ds, claimed); err != nil {
			return err
		}
		return tr.settle(ctx, OpCommit, tok, ds, false)
	}
}
