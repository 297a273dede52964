package localcache

import "testing"

// TestBytes: Bytes counts the ring's slots as their pages are backed (64 KiB
// at a time, up to the ring) and the index's buckets in use (128 at first,
// four times as many as keys need them, up to 2.5 cells a key): 54.9 bytes a
// key once full, which a container or memory_limiter must leave room for.
func TestBytes(t *testing.T) {
	// One shard of 1000 keys: a 32,000-byte ring, an index of up to 358
	// buckets (2.5 cells a key, 7 cells a bucket) of 64 bytes.
	c := New(1000, 1<<62)
	steps := []struct {
		keys int
		want int64
	}{
		{0, 128 * 64},            // the first buckets
		{1, 1000*32 + 128*64},    // the ring, all within its first 64 KiB
		{358, 1000*32 + 128*64},  // 358 keys fit 128 buckets at 40%
		{359, 1000*32 + 358*64},  // the index grows to full size
		{2000, 1000*32 + 358*64}, // evicting: nothing more
	}
	n := 0
	for _, s := range steps {
		for ; n < s.keys; n++ {
			c.Claim(d(uint64(n)), 1, 0)
		}
		if got := c.Bytes(); got != s.want {
			t.Fatalf("after %d keys: Bytes() = %d, want %d", s.keys, got, s.want)
		}
	}

	// 2^16 keys, 64 shards of 1024: rings of 32,768 bytes, indexes of 366
	// buckets.
	const size = 1 << 16
	c = New(size, 1<<62)
	for k := uint64(0); k < 2*size; k++ {
		c.Claim(d(k), 1, 0)
	}
	const full = 64 * (1024*32 + 366*64)
	if got := c.Bytes(); got != full {
		t.Fatalf("full: Bytes() = %d, want %d (%.2f bytes a key)", got, full, float64(full)/size)
	}
	// Where mmap is, the arena maps the arrays whole, each rounded to pages.
	if mapped := int64(c.arena.size()); mapped != 0 && (mapped < full || mapped > full+64*2*4096) {
		t.Fatalf("mapped %d bytes, Bytes() %d: more than the pages' rounding apart", mapped, full)
	}
}
