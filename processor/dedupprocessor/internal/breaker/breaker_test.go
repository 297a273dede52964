package breaker

import (
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func newTest(t *testing.T) (*Breaker, *testkit.Clock) {
	t.Helper()
	c := testkit.NewClock(time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC))
	return New(Config{Failures: 3, Cooldown: time.Second, MaxCooldown: 3 * time.Second, Now: c.Now}), c
}

func call(t *testing.T, b *Breaker, o Outcome) {
	t.Helper()
	tk, ok := b.Allow()
	if !ok {
		t.Fatalf("Allow refused in state %v", b.State())
	}
	b.Done(tk, o)
}

func refused(t *testing.T, b *Breaker) {
	t.Helper()
	if _, ok := b.Allow(); ok {
		t.Fatalf("Allow granted in state %v, want refused", b.State())
	}
}

func wantState(t *testing.T, b *Breaker, want State) {
	t.Helper()
	if got := b.State(); got != want {
		t.Fatalf("State() = %v, want %v", got, want)
	}
}

func TestOpensAfterConsecutiveFailures(t *testing.T) {
	b, _ := newTest(t)
	call(t, b, Failure)
	call(t, b, Failure)
	call(t, b, Success) // resets the run
	call(t, b, Failure)
	call(t, b, Failure)
	call(t, b, Unknown) // neither resets nor counts
	wantState(t, b, Closed)
	call(t, b, Failure)
	wantState(t, b, Open)
	refused(t, b)
}

func TestProbeClosesOrReopensWithBackoff(t *testing.T) {
	b, c := newTest(t)
	for range 3 {
		call(t, b, Failure)
	}
	c.Advance(999 * time.Millisecond)
	refused(t, b)
	c.Advance(time.Millisecond)
	wantState(t, b, HalfOpen)

	probe, ok := b.Allow()
	if !ok {
		t.Fatal("probe refused after the cooldown")
	}
	refused(t, b) // one probe at a time
	b.Done(probe, Failure)
	wantState(t, b, Open)

	// The cooldown doubled to 2 s.
	c.Advance(1999 * time.Millisecond)
	refused(t, b)
	c.Advance(time.Millisecond)
	call(t, b, Failure)
	// 4 s would exceed MaxCooldown: 3 s.
	c.Advance(2999 * time.Millisecond)
	refused(t, b)
	c.Advance(time.Millisecond)

	call(t, b, Success)
	wantState(t, b, Closed)
	// A success resets the cooldown to 1 s.
	for range 3 {
		call(t, b, Failure)
	}
	c.Advance(time.Second)
	call(t, b, Success)
	wantState(t, b, Closed)
}

func TestUnknownProbeLetsTheNextCallProbe(t *testing.T) {
	b, c := newTest(t)
	for range 3 {
		call(t, b, Failure)
	}
	c.Advance(time.Second)
	call(t, b, Unknown)
	wantState(t, b, HalfOpen)
	call(t, b, Success)
	wantState(t, b, Closed)
}

func TestStaleOutcomesAreIgnored(t *testing.T) {
	b, c := newTest(t)
	// Calls that started while closed and end after the breaker opened.
	var stale []Ticket
	for range 5 {
		tk, ok := b.Allow()
		if !ok {
			t.Fatal("refused while closed")
		}
		stale = append(stale, tk)
	}
	for _, tk := range stale[:3] {
		b.Done(tk, Failure)
	}
	wantState(t, b, Open)
	b.Done(stale[3], Success) // must not close it
	wantState(t, b, Open)

	c.Advance(time.Second)
	probe, _ := b.Allow()
	b.Done(stale[4], Failure) // must not count as the probe's outcome
	wantState(t, b, HalfOpen)
	b.Done(probe, Success)
	wantState(t, b, Closed)
}

func TestConcurrentUse(_ *testing.T) {
	b := New(Config{})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				if tk, ok := b.Allow(); ok {
					b.Done(tk, Outcome((g+i)%3))
				}
				_ = b.State()
			}
		}()
	}
	wg.Wait()
}

func TestDefaults(t *testing.T) {
	b := New(Config{})
	if c := b.cfg; c.Failures != DefaultFailures || c.Cooldown != DefaultCooldown || c.MaxCooldown != DefaultMaxCooldown || c.Now == nil {
		t.Fatalf("defaults = %d, %v, %v", c.Failures, c.Cooldown, c.MaxCooldown)
	}
	for _, s := range []State{Closed, Open, HalfOpen} {
		if s.String() == "unknown" {
			t.Errorf("State %d has no name", s)
		}
	}
}

// String names a state in test output.
func (s State) String() string {
	if s < Closed || s > Open {
		return "unknown"
	}
	return [...]string{"closed", "half_open", "open"}[s]
}
