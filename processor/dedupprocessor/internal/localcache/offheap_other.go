//go:build !unix

package localcache

// arena is the Go heap where mmap is not (see offheap.go): a ring takes its
// whole size at New.
type arena struct{}

func alloc[T any](_ *arena, n int) []T { return make([]T, n) }
func (a *arena) freeAll()              {}
func populate[T any](_ []T) bool       { return false }
