package localcache

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func d(i uint64) digest.Digest { return digest.Digest{Hi: i * 0x9e3779b97f4a7c15, Lo: i} }

// Claim is ClaimBatch for one digest, which also returns the token that
// holds it: the reference ClaimBatch is tested against.
func (c *Cache) Claim(d digest.Digest, token uint64, now int64) (Result, uint64) {
	s := &c.shards[d.Lo&c.mask]
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire(now)
	r, holder, _ := s.claim(d, token, now, c.window)
	return r, holder
}

// release is ReleaseBatch for one digest: it reports whether d was released.
func (c *Cache) release(d digest.Digest, token uint64) bool {
	return c.ReleaseBatch([]digest.Digest{d}, token) == 1
}

func TestClaimWithinAndAfterWindow(t *testing.T) {
	c := New(10, 100)
	if r, _ := c.Claim(d(1), 7, 1000); r != Claimed {
		t.Fatalf("first claim: got %v, want Claimed", r)
	}
	if r, owner := c.Claim(d(1), 7, 1050); r != HeldBySelf || owner != 7 {
		t.Fatalf("same token: got %v/%d, want HeldBySelf/7", r, owner)
	}
	if r, owner := c.Claim(d(1), 8, 1099); r != Held || owner != 7 {
		t.Fatalf("other token inside window: got %v/%d, want Held/7", r, owner)
	}
	// The window is fixed from the first claim: the sightings above did not
	// extend it, so at 1100 the key is new again.
	if r, _ := c.Claim(d(1), 9, 1100); r != Claimed {
		t.Fatalf("at window end: got %v, want Claimed", r)
	}
	if n := c.Len(1100); n != 1 {
		t.Fatalf("Len = %d, want 1", n)
	}
	if n := c.Len(1200); n != 0 {
		t.Fatalf("Len after expiry = %d, want 0", n)
	}
	if ev := c.Evictions(); ev != 0 {
		t.Fatalf("Evictions = %d, want 0 (expiry is not eviction)", ev)
	}
}

func TestEvictsOldestFirstAndCountsEarlyEvictions(t *testing.T) {
	c := New(3, 1000)
	for i := uint64(1); i <= 3; i++ {
		c.Claim(d(i), i, int64(i))
	}
	// Full: claiming a 4th evicts key 1 (the oldest) before its window ended.
	if r, _ := c.Claim(d(4), 4, 10); r != Claimed {
		t.Fatalf("claim into full cache: got %v, want Claimed (a new key is never refused)", r)
	}
	if got := c.Evictions(); got != 1 {
		t.Fatalf("Evictions = %d, want 1", got)
	}
	if r, _ := c.Claim(d(1), 99, 11); r != Claimed {
		t.Fatalf("evicted key 1: got %v, want Claimed", r)
	}
	// That evicted key 2, the next oldest; 3 and 4 are still held.
	for _, k := range []uint64{3, 4} {
		if r, _ := c.Claim(d(k), 99, 12); r != Held {
			t.Fatalf("key %d: got %v, want Held", k, r)
		}
	}
	if r, _ := c.Claim(d(2), 99, 13); r != Claimed {
		t.Fatalf("key 2 should have been evicted second")
	}
	if got := c.Evictions(); got != 3 {
		t.Fatalf("Evictions = %d, want 3", got)
	}
	if n := c.Len(13); n != 3 {
		t.Fatalf("Len = %d, want 3 (the bound)", n)
	}
	// Evicting a key whose window already ended is not an early eviction.
	c2 := New(1, 10)
	c2.Claim(d(1), 1, 0)
	c2.Claim(d(2), 2, 10)
	if got := c2.Evictions(); got != 0 {
		t.Fatalf("Evictions after expiry = %d, want 0", got)
	}
}

func TestReleaseOnlyByOwner(t *testing.T) {
	c := New(10, 1000)
	c.Claim(d(1), 5, 0)
	if c.release(d(1), 6) {
		t.Fatal("released by a token that does not own the key")
	}
	if !c.release(d(1), 5) {
		t.Fatal("owner could not release")
	}
	if c.release(d(1), 5) {
		t.Fatal("released twice")
	}
	if r, _ := c.Claim(d(1), 7, 1); r != Claimed {
		t.Fatalf("after release: got %v, want Claimed", r)
	}
	c.Disown(d(1), 7)
	if c.release(d(1), 7) {
		t.Fatal("released a disowned key")
	}
	if n := c.Len(2); n != 1 {
		t.Fatalf("Len = %d, want 1", n)
	}
}

func TestReleasedSlotsDoNotCount(t *testing.T) {
	c := New(2, 1000)
	c.Claim(d(1), 1, 0)
	c.release(d(1), 1)
	c.Claim(d(2), 2, 1)
	c.Claim(d(3), 3, 2) // the released slot is reclaimed, not an eviction of a live key
	if got := c.Evictions(); got != 0 {
		t.Fatalf("Evictions = %d, want 0", got)
	}
	if n := c.Len(3); n != 2 {
		t.Fatalf("Len = %d, want 2", n)
	}
}

func TestInsertAndRange(t *testing.T) {
	c := New(10, 1000)
	if !c.Insert(d(1), 500, 0) {
		t.Fatal("Insert refused a fresh key")
	}
	if c.Insert(d(1), 600, 0) {
		t.Fatal("Insert accepted a held key")
	}
	if c.Insert(d(2), 5, 10) {
		t.Fatal("Insert accepted an already expired key")
	}
	c.Claim(d(3), 3, 20)
	got := map[digest.Digest]int64{}
	c.Range(20, func(k digest.Digest, exp int64) { got[k] = exp })
	if len(got) != 2 || got[d(1)] != 500 || got[d(3)] != 1020 {
		t.Fatalf("Range = %v", got)
	}
	if r, _ := c.Claim(d(1), 4, 500); r != Claimed {
		t.Fatalf("inserted key past its expiry: got %v, want Claimed", r)
	}
}

func TestLargeCacheIsShardedAndBounded(t *testing.T) {
	const size = 100_000
	c := New(size, 1<<62)
	for i := uint64(0); i < 3*size; i++ {
		c.Claim(d(i), 1, 0)
	}
	if n := c.Len(0); n != size {
		t.Fatalf("Len = %d, want %d", n, size)
	}
	if ev := c.Evictions(); ev != 2*size {
		t.Fatalf("Evictions = %d, want %d", ev, 2*size)
	}
}

// TestConcurrentClaimsExactlyOnce races goroutines over the same digests:
// each digest is Claimed exactly once in total.
func TestConcurrentClaimsExactlyOnce(t *testing.T) {
	const keys, workers = 20_000, 8
	c := New(1_000_000, 1<<62)
	var claimed atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range uint64(keys) {
				k := (i + uint64(w)*97) % keys
				if r, _ := c.Claim(d(k), uint64(w+1), 0); r == Claimed {
					claimed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if got := claimed.Load(); got != keys {
		t.Fatalf("claimed %d times, want exactly %d", got, keys)
	}
}

// TestPendingUntilEnd: a key is pending while the token that claimed it is
// in flight, told apart by the holder's age, and committed once the token
// has ended; a key released before End is gone, never committed.
func TestPendingUntilEnd(t *testing.T) {
	for _, size := range []int{100, 1 << 17} { // one shard, and 64
		testPendingUntilEnd(t, New(size, 1000))
	}
}

func testPendingUntilEnd(t *testing.T, c *Cache) {
	c.Begin(5)
	c.Begin(9)
	if r, _ := c.Claim(d(1), 5, 0); r != Claimed {
		t.Fatalf("first claim: %v", r)
	}
	if r, _ := c.Claim(d(2), 9, 0); r != Claimed {
		t.Fatalf("first claim: %v", r)
	}
	c.Begin(7)
	for _, tc := range []struct {
		key  uint64
		want Result
	}{{1, Pending}, {2, Pending}} {
		if r, owner := c.Claim(d(tc.key), 7, 1); r != tc.want {
			t.Errorf("key %d held by %d: %v, want %v", tc.key, owner, r, tc.want)
		}
	}
	out := make([]Result, 3)
	c.ClaimBatch([]digest.Digest{d(1), d(2), d(3)}, 7, 1, out, nil)
	if want := []Result{Pending, Pending, Claimed}; !slices.Equal(out, want) {
		t.Errorf("ClaimBatch: %v, want %v", out, want)
	}

	c.End(5) // delivered: its key is committed
	if r, _ := c.Claim(d(1), 7, 2); r != Held {
		t.Errorf("key of an ended token: %v, want Held", r)
	}
	if !c.release(d(2), 9) { // refused downstream: released, then ended
		t.Fatal("release")
	}
	c.End(9)
	if r, _ := c.Claim(d(2), 7, 2); r != Claimed {
		t.Errorf("key released before End: %v, want Claimed", r)
	}

	// Range leaves out what is still pending: token 7 holds 2 and 3.
	var got []digest.Digest
	c.Range(3, func(k digest.Digest, _ int64) { got = append(got, k) })
	if want := []digest.Digest{d(1)}; !slices.Equal(got, want) {
		t.Errorf("Range: %v, want %v", got, want)
	}
	c.End(7)
	got = got[:0]
	c.Range(3, func(k digest.Digest, _ int64) { got = append(got, k) })
	if len(got) != 3 {
		t.Errorf("Range after End: %d keys, want 3", len(got))
	}
}

// TestPendingKeyOutlivesItsWindow: a key whose window ends while its batch
// is still in flight stays pending until the batch ends, so a copy waits for
// the export's outcome instead of being claimed anew; once the batch ends,
// the key is gone as its window says.
func TestPendingKeyOutlivesItsWindow(t *testing.T) {
	for _, size := range []int{100, 1 << 17} { // one shard, and 64
		c := New(size, 1000)
		c.Begin(5)
		if r, _ := c.Claim(d(1), 5, 0); r != Claimed {
			t.Fatalf("claim: %v", r)
		}
		c.Begin(7)
		if r, _ := c.Claim(d(1), 7, 5000); r != Pending {
			t.Fatalf("a copy after the window, the batch still in flight: %v, want Pending", r)
		}
		if n := c.Len(5000); n != 1 {
			t.Fatalf("Len = %d, want the pending key", n)
		}
		c.End(5)
		if r, _ := c.Claim(d(1), 7, 5000); r != Claimed {
			t.Fatalf("a copy after the window, the batch ended: %v, want Claimed", r)
		}
		c.End(7)
	}
}

// A copy's age comes from its holder's claim: ClaimBatch tells when each
// digest it answers Held was claimed, for claimed and restored (inserted)
// keys alike, and leaves the other answers' entries alone.
func TestClaimBatchTellsWhenTheHolderClaimed(t *testing.T) {
	const window = 100
	c := New(10, window)
	out := make([]Result, 3)
	c.ClaimBatch([]digest.Digest{d(1)}, 5, 1000, out[:1], nil)
	if !c.Insert(d(2), 1080, 1010) { // restored: claimed at 980
		t.Fatal("Insert")
	}
	claimed := []int64{-1, -1, -1}
	c.ClaimBatch([]digest.Digest{d(1), d(2), d(3)}, 6, 1050, out, claimed)
	if want := []Result{Held, Held, Claimed}; !slices.Equal(out, want) {
		t.Fatalf("results %v, want %v", out, want)
	}
	if want := []int64{1000, 980, -1}; !slices.Equal(claimed, want) {
		t.Fatalf("claimed at %v, want %v", claimed, want)
	}
}
