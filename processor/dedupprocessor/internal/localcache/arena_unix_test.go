//go:build unix

package localcache

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
