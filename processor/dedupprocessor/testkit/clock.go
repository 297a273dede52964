package testkit

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Clock is a fake clock: it moves only when Advance moves it, and its Wait
// (the processor's clock.Clock) ends when the time reaches its end, so a
// test drives time and can tell when a goroutine waits on it. It is safe
// for concurrent use.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []*waiter
	changed chan struct{} // closed when a waiter comes or goes
}

type waiter struct {
	at time.Time
	ch chan struct{}
}

// NewClock returns a Clock set to start.
func NewClock(start time.Time) *Clock {
	return &Clock{now: start, changed: make(chan struct{})}
}

// Now returns the fake time.
func (f *Clock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Wait returns once the fake time has reached now + d, or when wake yields
// or ctx ends.
func (f *Clock) Wait(ctx context.Context, wake <-chan struct{}, d time.Duration) error {
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

func (f *Clock) remove(w *waiter) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if i := slices.Index(f.waiters, w); i >= 0 {
		f.waiters = slices.Delete(f.waiters, i, i+1)
		f.notify()
	}
}

// notify wakes WaitForWaiters; f.mu is held.
func (f *Clock) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// Advance moves the time d forward and returns every Wait it ends.
func (f *Clock) Advance(d time.Duration) {
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
func (f *Clock) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiters)
}

// WaitForWaiters returns once at least n Waits are in progress, or ctx's
// error: how a test knows a goroutine has reached its wait.
func (f *Clock) WaitForWaiters(ctx context.Context, n int) error {
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
func (f *Clock) Next() (time.Duration, bool) {
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
