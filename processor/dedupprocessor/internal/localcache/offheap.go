//go:build unix

package localcache

import (
	"sync"
	"syscall"
	"unsafe"
)

// The ring and the index hold no pointers, so they need not live in the Go
// heap: mapped with mmap, they cost the memory of their keys and no more.
// In the heap they would also raise the garbage collector's target, which
// lets the rest of the heap grow by as much again before a collection
// (GOGC), so a large cache would cost about twice its size at peak. A
// mapping's pages take memory only once written, so a ring and an index
// mapped whole cost an idle cache nothing. The price is paid while a cache
// fills: each page is faulted in fresh, where the heap would reuse memory
// it freed.

// arena hands out the cache's pointer-free arrays from anonymous mappings,
// all unmapped together when the cache is collected.
type arena struct {
	mu     sync.Mutex
	mapped [][]byte
}

func newArena() *arena { return &arena{} }

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

// size is the number of bytes mapped.
func (a *arena) size() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, m := range a.mapped {
		n += len(m)
	}
	return n
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
