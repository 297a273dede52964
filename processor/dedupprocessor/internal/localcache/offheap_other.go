//go:build !unix

package localcache

// arena is the Go heap where mmap is not available (see offheap.go): there
// a ring takes its whole size at New.
type arena struct{}

func newArena() *arena              { return &arena{} }
func (a *arena) bytes(n int) []byte { return make([]byte, n) }
func (a *arena) free([]byte)        {}
func (a *arena) freeAll()           {}
func (a *arena) size() int          { return 0 }
