// Package clock is the processor's one clock: the wall clock in a
// collector, a simulated one in tests, so that a test drives time (tokens
// and leases included) and sleeps nowhere.
package clock

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Clock tells the time and waits.
type Clock interface {
	Now() time.Time
	// Wait returns nil once d has passed or wake yields (is closed, or has a
	// value sent on it: nil never yields), or ctx's error if ctx ends first.
	Wait(ctx context.Context, wake <-chan struct{}, d time.Duration) error
}

// Wall is the wall clock.
type Wall struct{}

// Now returns time.Now().
func (Wall) Now() time.Time { return time.Now() }

// Wait waits on a timer.
func (Wall) Wait(ctx context.Context, wake <-chan struct{}, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-wake:
	case <-t.C:
	}
	return nil
}

// Fake is a clock that moves only when Advance or Set move it. It is safe
// for concurrent use.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters []*waiter
	changed chan struct{} // closed when a waiter comes or goes
}

type waiter struct {
	at time.Time
	ch chan struct{}
}

// NewFake returns a Fake set to start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, changed: make(chan struct{})}
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Wait returns once the fake time has reached now + d, or when wake yields
// or ctx ends.
func (f *Fake) Wait(ctx context.Context, wake <-chan struct{}, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	f.mu.Lock()
	w := &waiter{at: f.now.Add(d), ch: make(chan struct{})}
	f.waiters = append(f.waiters, w)
	f.notify()
	f.mu.Unlock()
	select {
	case <-ctx.Done():
		f.remove(w)
		return ctx.Err()
	case <-wake:
		f.remove(w)
	case <-w.ch:
	}
	return nil
}

func (f *Fake) remove(w *waiter) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if i := slices.Index(f.waiters, w); i >= 0 {
		f.waiters = slices.Delete(f.waiters, i, i+1)
		f.notify()
	}
}

// notify wakes WaitForWaiters; f.mu is held.
func (f *Fake) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// Advance moves the time d forward and returns every Wait it ends.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	keep := f.waiters[:0]
	for _, w := range f.waiters {
		if f.now.Before(w.at) {
			keep = append(keep, w)
		} else {
			close(w.ch)
		}
	}
	if len(keep) != len(f.waiters) {
		clear(f.waiters[len(keep):])
		f.waiters = keep
		f.notify()
	}
}

// Waiters returns how many Waits are in progress.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiters)
}

// WaitForWaiters returns once at least n Waits are in progress, or ctx's
// error: how a test knows a goroutine has reached its wait.
func (f *Fake) WaitForWaiters(ctx context.Context, n int) error {
	for {
		f.mu.Lock()
		got, changed := len(f.waiters), f.changed
		f.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

// Next returns how long until the earliest Wait in progress ends, and
// false if none is in progress.
func (f *Fake) Next() (time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.waiters) == 0 {
		return 0, false
	}
	next := f.waiters[0].at
	for _, w := range f.waiters[1:] {
		if w.at.Before(next) {
			next = w.at
		}
	}
	return max(next.Sub(f.now), 0), true
}
