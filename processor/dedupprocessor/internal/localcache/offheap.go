//go:build unix

package localcache

import (
	"runtime"
	"sync"
	"syscall"
	"unsafe"
)

// arena hands out the cache's pointer-free arrays from anonymous mappings,
// unmapped with the cache. In the Go heap they would raise the GC's target,
// letting the heap grow as much again (GOGC). Pages take memory once written,
// so an idle cache costs nothing, for a page fault per page as it fills.
type arena struct {
	mu     sync.Mutex
	mapped [][]byte
}

// alloc returns n zeroed pointer-free Ts from a, or from the Go heap if the
// kernel refuses.
func alloc[T any](a *arena, n int) []T {
	var zero T
	b, err := syscall.Mmap(-1, 0, n*int(unsafe.Sizeof(zero)), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return make([]T, n)
	}
	a.mu.Lock()
	a.mapped = append(a.mapped, b)
	a.mu.Unlock()
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n) //nolint:gosec // the arena: b is mapped memory sized for n T, kept in a.mapped until unmapped
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

// populate backs s's pages in one call (MADV_POPULATE_WRITE; a first touch can
// cost microseconds on a VM), or reports false: pages fault as written.
func populate[T any](s []T) bool {
	if runtime.GOOS != "linux" || len(s) == 0 {
		return false
	}
	start := uintptr(unsafe.Pointer(&s[0])) //nolint:gosec // an address compared, never dereferenced
	end := start + uintptr(len(s))*unsafe.Sizeof(s[0])
	start &^= uintptr(syscall.Getpagesize() - 1)
	_, _, errno := syscall.Syscall(syscall.SYS_MADVISE, start, end-start, 23) // MADV_POPULATE_WRITE
	return errno == 0
}
