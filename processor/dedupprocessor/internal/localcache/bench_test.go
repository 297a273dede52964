package localcache

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

// BenchmarkClaim measures a claim of a new key and of a held key in a cache
// of 10^6 entries.
func BenchmarkClaim(b *testing.B) {
	const size = 1 << 20
	c := New(size, 1<<62)
	for i := uint64(0); i < size; i++ {
		c.Claim(hd(i), 1, 0)
	}
	b.Run("new", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			c.Claim(hd(uint64(size+i)), 2, 0)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
	})
	b.Run("held", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			c.Claim(hd(uint64(size+i%size)), 3, 0)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
	})
}

// BenchmarkMemoryPerKey reports the heap a full cache of 10^6 keys holds
// once it has evicted, per key: measured with the runtime's own accounting,
// not estimated.
func BenchmarkMemoryPerKey(b *testing.B) {
	const size = 1_000_000
	for i := 0; i < b.N; i++ {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		c := New(size, 1<<62)
		// Twice the size: the second half evicts the first, as a busy
		// cache does, so the index reaches the size it keeps.
		for k := uint64(0); k < 2*size; k++ {
			c.Claim(hd(k), 1, 0)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		// The ring and the index are mapped outside the Go heap.
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc+uint64(c.arena.size()))/size, "bytes/key")
		runtime.KeepAlive(c)
	}
}

// BenchmarkClaimBatch claims batches of 1000 new keys (30% of them held
// already) in a full cache of 10^6 keys, one by one and as a batch.
func BenchmarkClaimBatch(b *testing.B) {
	const size, batch = 1 << 20, 1000
	for _, mode := range []string{"one-by-one", "batch"} {
		b.Run(mode, func(b *testing.B) {
			c := New(size, 1<<62)
			for i := uint64(0); i < size; i++ {
				c.Claim(hd(i), 1, 0)
			}
			ds := make([]digest.Digest, batch)
			out := make([]Result, batch)
			next := uint64(size)
			b.ReportAllocs()
			b.ResetTimer()
			for n := 0; n < b.N; n++ {
				for i := range ds {
					if i%10 < 3 {
						ds[i] = hd(next - uint64(i) - 1)
					} else {
						ds[i] = hd(next)
						next++
					}
				}
				if mode == "batch" {
					c.ClaimBatch(ds, uint64(n+2), 0, out, nil)
					continue
				}
				for i, k := range ds {
					out[i], _ = c.Claim(k, uint64(n+2), 0)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/claim")
		})
	}
}

// BenchmarkClaimBatchSize claims batches of 1000 new keys in full caches
// of growing size: from one that fits the CPU's caches to one far larger,
// it shows how much of a claim is waiting for memory.
func BenchmarkClaimBatchSize(b *testing.B) {
	const batch = 1000
	for _, size := range []int{1 << 12, 1 << 16, 1 << 20, 1 << 22} {
		b.Run(fmt.Sprint("keys=", size), func(b *testing.B) {
			c := New(size, 1<<62)
			for i := uint64(0); i < uint64(size); i++ {
				c.Claim(hd(i), 1, 0)
			}
			ds := make([]digest.Digest, batch)
			out := make([]Result, batch)
			next := uint64(size)
			b.ResetTimer()
			for n := 0; n < b.N; n++ {
				for i := range ds {
					ds[i] = hd(next)
					next++
				}
				c.ClaimBatch(ds, uint64(n+2), 0, out, nil)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/claim")
		})
	}
}

// hd is the digest of key i as a hash would give it: every bit depends on
// every bit of i. The tests' d(i) keeps i's low bits in both halves, which
// packs a shard's keys into few index cells and measures probe runs no real
// digest makes.
func hd(i uint64) digest.Digest {
	return digest.Digest{Hi: mix64(i), Lo: mix64(i ^ 0x5bd1e9955bd1e995)}
}

// mix64 is splitmix64's finalizer.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// latencySink keeps the reads of BenchmarkMemoryLatency from being optimized away.
var latencySink uint64

// BenchmarkMemoryLatency is the machine's side of a full cache's claim: a
// read of a random 8 bytes in 64 MiB, one at a time (each read needs the one
// before, as a lookup's slot read needs its cell) and independent (as the
// batch prefetch issues them).
func BenchmarkMemoryLatency(b *testing.B) {
	const n = 8 << 20
	mem := make([]uint64, n)
	for i := range mem {
		mem[i] = mix64(uint64(i))
	}
	b.Run("dependent", func(b *testing.B) {
		x := uint64(1)
		for i := 0; i < b.N; i++ {
			x = mem[(x^uint64(i))&(n-1)]
		}
		latencySink = x
	})
	b.Run("independent", func(b *testing.B) {
		var acc uint64
		for i := 0; i < b.N; i++ {
			acc ^= mem[mix64(uint64(i))&(n-1)]
		}
		latencySink = acc
	})
}
