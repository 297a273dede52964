package snapshot

import (
	"container/heap"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/localcache"
)

// Save returns a snapshot of c's committed keys at now, locking one shard at a
// time so claims go on. Pending keys are left out: after a crash, their batches
// undelivered, restored keys would drop their retries.
func Save(c *localcache.Cache, meta Meta, now int64) []byte {
	meta.WrittenAt = now
	dst := make([]byte, 0, encodedLen(c.Len(now)))
	return appendEncode(dst, meta, func(fn func(digest.Digest, int64)) { c.Range(now, fn) })
}

// Restore inserts the entries of b live at now into c, earliest expiry first,
// clamped to now+window, and returns the Meta and how many it inserted; nothing
// unless b passes every check.
func Restore(c *localcache.Cache, b []byte, fingerprint uint64, window, now int64) (Meta, int, error) {
	meta, entries, err := parse(b, fingerprint)
	if err != nil {
		return Meta{}, 0, err
	}
	limit := addSat(now, window)
	restored := 0
	inExpiryOrder(entries, func(i int) {
		d, expires := entryAt(entries, i)
		if expires = min(expires, limit); expires > now && c.Insert(d, expires, now) {
			restored++
		}
	})
	return meta, restored, nil
}

// run is a stretch of entries [next, end) in expiry order; expires is entry
// next's.
type run struct {
	next, end int
	expires   int64
}

// runs is a min-heap of runs, by expiry then position.
type runs []run

func (h runs) Len() int      { return len(h) }
func (h runs) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h runs) Less(i, j int) bool {
	return h[i].expires < h[j].expires || h[i].expires == h[j].expires && h[i].next < h[j].next
}
func (h *runs) Push(x any) { *h = append(*h, x.(run)) }
func (h *runs) Pop() any {
	*h = (*h)[:len(*h)-1]
	return nil
}

// inExpiryOrder calls fn with each entry's index, by expiry then position. A
// cache takes keys in expiry order, and a snapshot is sorted only per shard:
// its few runs are merged in place through a min-heap.
func inExpiryOrder(entries []byte, fn func(i int)) {
	n := len(entries) / entryLen
	var h runs
	start := 0
	for i := 1; i <= n; i++ {
		if i == n || expiryAt(entries, i) < expiryAt(entries, i-1) {
			h = append(h, run{start, i, expiryAt(entries, start)})
			start = i
		}
	}
	heap.Init(&h)
	for len(h) > 0 {
		top := &h[0]
		fn(top.next)
		if top.next++; top.next < top.end {
			top.expires = expiryAt(entries, top.next)
			heap.Fix(&h, 0)
		} else {
			heap.Pop(&h)
		}
	}
}
