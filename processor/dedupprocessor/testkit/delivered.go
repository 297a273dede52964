package testkit

import "testing"

// Counts returns how many times each key occurs over the lists: with one
// list of record keys per sink, how many times each record was delivered.
func Counts(lists ...[]string) map[string]int {
	counts := map[string]int{}
	for _, l := range lists {
		for _, k := range l {
			counts[k]++
		}
	}
	return counts
}

// WantEachOnce fails the test unless counts (deliveries per record key)
// holds exactly n distinct records, each delivered exactly once.
func WantEachOnce(t testing.TB, counts map[string]int, n int) {
	t.Helper()
	if len(counts) != n {
		t.Fatalf("%d distinct records delivered, want %d", len(counts), n)
	}
	for k, c := range counts {
		if c != 1 {
			t.Fatalf("%q delivered %d times", k, c)
		}
	}
}

// WantEach reports an error unless counts (deliveries per record key) holds
// exactly the records want, each delivered times times, and nothing else.
// name(i) names want[i] in the errors.
func WantEach(t testing.TB, counts map[string]int, want []string, times int, name func(i int) string) {
	t.Helper()
	total := 0
	for _, c := range counts {
		total += c
	}
	if total != times*len(want) {
		t.Errorf("sink received %d records, want %d", total, times*len(want))
	}
	for i, k := range want {
		if n := counts[k]; n != times {
			t.Errorf("record %s delivered %d times, want %d", name(i), n, times)
		}
	}
}
