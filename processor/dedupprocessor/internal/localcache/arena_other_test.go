//go:build !unix

package localcache

func (a *arena) size() int { return 0 }
