package localcache

import (
	"syscall"
	"testing"
)

// BenchmarkFirstTouch is the machine's side of a growing cache: the cost of
// writing to a 4 KiB page of memory just taken from the kernel (a page
// fault; in a VM, possibly also the host's), per page, next to a write to a
// page already mapped. A cache that grows pays the first for every page of
// its ring and index; populated is what it pays where it backs them ahead.
func BenchmarkFirstTouch(b *testing.B) {
	const region = 16 << 20
	page := syscall.Getpagesize()
	// populated: each 64 KiB backed first in one call, as the cache backs
	// its ring ahead of its writes (see populate).
	for _, ahead := range []bool{false, true} {
		b.Run(map[bool]string{false: "fresh", true: "populated"}[ahead], func(b *testing.B) {
			for done := 0; done < b.N; {
				mem, err := syscall.Mmap(-1, 0, region, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
				if err != nil {
					b.Fatal(err)
				}
				for i := 0; i < region && done < b.N; i += page {
					if ahead && i%(64<<10) == 0 && !populate(mem[i:i+64<<10]) {
						b.Fatal("populate refused")
					}
					mem[i] = 1
					done++
				}
				b.StopTimer()
				if err := syscall.Munmap(mem); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
	b.Run("mapped", func(b *testing.B) {
		mem := make([]byte, region)
		for i := 0; i < region; i += page {
			mem[i] = 1
		}
		b.ResetTimer()
		for done := 0; done < b.N; {
			for i := 0; i < region && done < b.N; i += page {
				mem[i]++
				done++
			}
		}
	})
}
