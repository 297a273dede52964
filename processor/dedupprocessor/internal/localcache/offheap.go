//go:build unix

package localcache

import (
	"runtime"
	"sync"
	"syscall"
	"unsafe"
)

// arena hands out the cache's pointer-free arrays from anonymous mappings,
// all unmapped together when the cache is collected. In the Go heap they
// would raise the GC's target, letting the rest of the heap grow by as much
// again (GOGC). A mapping's pages take memory only once written, so an idle
// cache costs nothing; the price is a fresh page fault per page as it fills.
type arena struct {
	mu     sync.Mutex
	mapped [][]byte
}

// alloc returns n zeroed values of the pointer-free type T from a. If the
// kernel refuses the mapping, they come from the Go heap.
func alloc[T any](a *arena, n int) []T {
	var zero T
	b, err := syscall.Mmap(-1, 0, n*int(unsafe.Sizeof(zero)), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return make([]T, n)
	}
	a.mu.Lock()
	a.mapped = append(a.mapped, b)
	a.mu.Unlock()
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n)
}

// freeAll unmaps everything: the cache that used the arena is gone.
func (a *arena) freeAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, m := range a.mapped {
		_ = syscall.Munmap(m)
	}
	a.mapped = nil
}

// populate backs s's pages in one call rather than a fault per page
// (Linux's MADV_POPULATE_WRITE; on a VM a first touch can cost microseconds).
// It reports false where it cannot, and the pages fault in as written.
func populate[T any](s []T) bool {
	if runtime.GOOS != "linux" || len(s) == 0 {
		return false
	}
	start := uintptr(unsafe.Pointer(&s[0]))
	end := start + uintptr(len(s))*unsafe.Sizeof(s[0])
	start &^= uintptr(syscall.Getpagesize() - 1)
	_, _, errno := syscall.Syscall(syscall.SYS_MADVISE, start, end-start, 23) // MADV_POPULATE_WRITE
	return errno == 0
}
