// Package topk keeps the heaviest keys of a weighted stream in bounded
// memory: Space-Saving (Metwally, Agrawal and El Abbadi, "Efficient
// Computation of Frequent and Top-k Elements in Data Streams", 2005), with
// weighted additions and a decay the caller applies.
//
// A Summary holds at most k keys. A key not held, added to a full summary,
// takes the place of the lightest key and inherits its weight. So the
// memory is k entries whatever the number of distinct keys, every key whose
// weight exceeds the total's 1/k is held, and a held key's weight
// overestimates its own by at most what it inherited.
package topk

import (
	"iter"
	"slices"
	"strings"
)

// Summary is the k heaviest keys seen; it is not safe for concurrent use.
type Summary[V any] struct {
	k     int
	byKey map[string]*Entry[V]
	heap  []*Entry[V] // a min-heap by weight: heap[0] is the lightest
}

// Entry is a held key, its weight and the caller's value for it.
type Entry[V any] struct {
	Key    string
	Value  V
	weight float64
	at     int // its index in the heap
}

// Weight is the entry's weight: its own, plus at most what it inherited.
func (e *Entry[V]) Weight() float64 { return e.weight }

// New returns a summary of at most k (>= 1) keys.
func New[V any](k int) *Summary[V] {
	k = max(k, 1)
	return &Summary[V]{k: k, byKey: make(map[string]*Entry[V], k), heap: make([]*Entry[V], 0, k)}
}

// Len is the number of keys held, at most k.
func (s *Summary[V]) Len() int { return len(s.heap) }

// Get returns key's entry, or nil if it is not held.
func (s *Summary[V]) Get(key string) *Entry[V] { return s.byKey[key] }

// Add adds w (> 0) to key's weight and returns its entry, and whether it was
// not held before (its Value is then the zero value). A key not held, added
// to a full summary, replaces the lightest key, whose entry evicted (if not
// nil) sees first. The summary keeps its own copy of key.
func (s *Summary[V]) Add(key string, w float64, evicted func(*Entry[V])) (*Entry[V], bool) {
	if e := s.byKey[key]; e != nil {
		e.weight += w
		s.down(e.at)
		return e, false
	}
	key = strings.Clone(key)
	if len(s.heap) < s.k {
		e := &Entry[V]{Key: key, weight: w, at: len(s.heap)}
		s.heap = append(s.heap, e)
		s.byKey[key] = e
		s.up(e.at)
		return e, true
	}
	e := s.heap[0]
	if evicted != nil {
		evicted(e)
	}
	delete(s.byKey, e.Key)
	var zero V
	e.Key, e.Value, e.weight = key, zero, e.weight+w
	s.byKey[key] = e
	s.down(0)
	return e, true
}

// Scale multiplies every weight by f (0 < f <= 1), keeping their order: a
// decay, so that keys that stopped growing give way to those that grow now.
func (s *Summary[V]) Scale(f float64) {
	for _, e := range s.heap {
		e.weight *= f
	}
}

// All yields the entries held, in no particular order; the caller must not
// add while iterating.
func (s *Summary[V]) All() iter.Seq[*Entry[V]] {
	return slices.Values(s.heap)
}

func (s *Summary[V]) less(i, j int) bool { return s.heap[i].weight < s.heap[j].weight }

func (s *Summary[V]) swap(i, j int) {
	s.heap[i], s.heap[j] = s.heap[j], s.heap[i]
	s.heap[i].at, s.heap[j].at = i, j
}

func (s *Summary[V]) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !s.less(i, parent) {
			return
		}
		s.swap(i, parent)
		i = parent
	}
}

func (s *Summary[V]) down(i int) {
	for {
		least, l, r := i, 2*i+1, 2*i+2
		if l < len(s.heap) && s.less(l, least) {
			least = l
		}
		if r < len(s.heap) && s.less(r, least) {
			least = r
		}
		if least == i {
			return
		}
		s.swap(i, least)
		i = least
	}
}
