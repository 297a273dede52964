//go:build unix

package localcache

import "testing"

// TestMappedMemoryPerKey: a full cache holds its keys in its mappings at
// its fixed cost per key, 32 bytes of ring slot and its share of the index
// (the figure the processor's README sizes caches by), whatever went
// through it.
func TestMappedMemoryPerKey(t *testing.T) {
	const size = 100_000
	c := New(size, 1<<62)
	for k := uint64(0); k < 3*size; k++ {
		c.Claim(hd(k), 1, 0)
	}
	if perKey := float64(c.arena.size()) / size; perKey < 32 || perKey > 56 {
		t.Fatalf("mapped %d bytes for %d keys: %.1f bytes per key, want 32 to 56", c.arena.size(), size, perKey)
	}
}
