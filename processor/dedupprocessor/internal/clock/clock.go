// Package clock is the processor's one clock: the wall clock in a
// collector, a simulated one in tests, so that a test drives the processor's
// time (tokens and leases included) instead of waiting for it. The tests
// that still sleep do so where real time passing is the scenario itself,
// and say so where they sleep: a sender's pace or retry backoff, a lease
// running out on Redis's clock, a fault's length.
package clock

import (
	"context"
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
