package topk

import (
	"fmt"
	"slices"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func weights[V any](s *Summary[V]) map[string]float64 {
	out := map[string]float64{}
	for e := range s.All() {
		out[e.Key] = e.Weight()
	}
	return out
}

func TestHoldsEveryKeyExactlyWhileThereIsRoom(t *testing.T) {
	s := New[int](3)
	for _, kw := range []struct {
		key string
		w   float64
	}{{"a", 1}, {"b", 2}, {"a", 3}, {"c", 1}, {"b", 1}} {
		e, added := s.Add(kw.key, kw.w, func(*Entry[int]) { t.Fatalf("evicted with room") })
		if added != (e.Value == 0) {
			t.Fatalf("%s: added %v but its value is %d", kw.key, added, e.Value)
		}
		e.Value++
	}
	if got, want := weights(s), map[string]float64{"a": 4, "b": 3, "c": 1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("weights %v, want %v", got, want)
	}
	if e := s.Get("a"); e == nil || e.Value != 2 {
		t.Fatalf("Get(a) = %+v, want the entry added to twice", e)
	}
	if s.Get("d") != nil {
		t.Fatal("Get(d) found a key never added")
	}
}

func TestANewKeyReplacesTheLightestAndInheritsItsWeight(t *testing.T) {
	s := New[string](2)
	a, _ := s.Add("a", 5, nil)
	a.Value = "kept"
	b, _ := s.Add("b", 1, nil)
	b.Value = "b's"
	var evicted []string
	c, added := s.Add("c", 1, func(e *Entry[string]) { evicted = append(evicted, e.Key+"="+e.Value) })
	if !added || c.Value != "" || c.Weight() != 2 {
		t.Fatalf("c: added %v, value %q, weight %g; want added, empty, 2 (1 + b's 1)", added, c.Value, c.Weight())
	}
	if !slices.Equal(evicted, []string{"b=b's"}) {
		t.Fatalf("evicted %q, want [b=b's]", evicted)
	}
	if s.Get("b") != nil || s.Get("a").Value != "kept" || s.Len() != 2 {
		t.Fatalf("after eviction: %v", weights(s))
	}
}

func TestScaleKeepsTheOrderAndLetsNewKeysIn(t *testing.T) {
	s := New[int](2)
	s.Add("old", 1000, nil)
	s.Add("mid", 10, nil)
	s.Scale(1.0 / 1024)  // old ~0.98, mid ~0.01
	s.Add("new", 5, nil) // replaces mid
	if s.Get("mid") != nil || s.Get("new") == nil {
		t.Fatalf("weights %v, want old and new", weights(s))
	}
	for range 2 {
		s.Add("newer", 1, nil) // replaces old (~0.98) at its first add, then grows
	}
	if s.Get("old") != nil || s.Get("newer") == nil || s.Get("new") == nil {
		t.Fatalf("weights %v: after the decay, old should have given way to newer", weights(s))
	}
}

// A flood of 10^6 distinct keys, each once, with two heavy keys among them
// (each over 1/k of the total): the summary never holds more than k keys,
// and holds both heavy ones with weights that bound theirs from above by at
// most the total's 1/k.
func TestFloodOfDistinctKeysKeepsTheBoundAndTheHeavyKeys(t *testing.T) {
	const k, flood = 20, 1_000_000
	s := New[int](k)
	heavy := map[string]float64{}
	total := 0.0
	for i := range flood {
		s.Add(fmt.Sprintf("flood-%d", i), 1, nil)
		total++
		if i%8 == 0 {
			for _, h := range []string{"checkout", "billing"} {
				s.Add(h, 1, nil)
				heavy[h]++
				total++
			}
		}
		if s.Len() > k || len(s.byKey) > k || cap(s.heap) > k {
			t.Fatalf("after %d keys: %d held, %d indexed, heap capacity %d; bound %d", i+1, s.Len(), len(s.byKey), cap(s.heap), k)
		}
	}
	for h, own := range heavy {
		if own <= total/k {
			t.Fatalf("%s's weight %g is not over the total's 1/k (%g): the test proves nothing", h, own, total/k)
		}
		e := s.Get(h)
		if e == nil {
			t.Fatalf("%s (%g of %g) is not held", h, own, total)
		}
		if e.Weight() < own || e.Weight() > own+total/k {
			t.Errorf("%s: weight %g, want between its own %g and %g", h, e.Weight(), own, own+total/k)
		}
	}
}
