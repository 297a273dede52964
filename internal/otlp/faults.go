package otlp

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"
)

// Faults decides the requests a fake backend receives (its Gate is a
// Sink's Gate): it accepts them, or refuses the next ones or a share of them
// at random, answers slowly, or holds them until told to let them through,
// and counts what it decided. Its methods are safe for concurrent use.
type Faults struct {
	mu                                       sync.Mutex
	requests, refused, refusedItems, holding int // holding: requests waiting on Hold
	failNext                                 int
	failErr                                  error
	failRand                                 *rand.Rand // not nil while FailRandomly is in force
	failP                                    float64
	latency                                  time.Duration
	hold                                     chan struct{} // not nil while Hold is in force; closed by Unhold
}

// ErrRefused is how Faults refuses a request unless FailWith says
// otherwise; the sink answers it as a backend that is unavailable.
var ErrRefused = errors.New("the sink refused the request")

// Gate decides a request of items: it calls keep, which records it, and
// returns nil, or returns the refusal. While Hold is in force the request
// first waits, then for the latency; a request whose client gave up
// meanwhile (ctx ended) is refused.
func (f *Faults) Gate(ctx context.Context, items int, keep func()) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests++
	refuse := func() error {
		f.refused++
		f.refusedItems += items
		if f.failErr != nil {
			return f.failErr
		}
		return ErrRefused
	}
	if f.failNext > 0 {
		f.failNext--
		return refuse()
	}
	if hold := f.hold; hold != nil {
		f.holding++
		gaveUp := f.waitLocked(ctx, hold, nil)
		f.holding--
		// A FailNext given while the request waited applies to it: a
		// backend that stalls, then fails.
		if gaveUp || f.failNext > 0 {
			if !gaveUp {
				f.failNext--
			}
			return refuse()
		}
	}
	if f.latency > 0 {
		timer := time.NewTimer(f.latency)
		gaveUp := f.waitLocked(ctx, nil, timer.C)
		timer.Stop()
		if gaveUp {
			return refuse()
		}
	}
	if f.failRand != nil && f.failRand.Float64() < f.failP {
		return refuse()
	}
	keep()
	return nil
}

// waitLocked releases the lock until a or b is ready (nil channels never
// are) or ctx ends, and reports whether ctx ended: the client gave up.
func (f *Faults) waitLocked(ctx context.Context, a <-chan struct{}, b <-chan time.Time) (gaveUp bool) {
	f.mu.Unlock()
	defer f.mu.Lock()
	select {
	case <-a:
	case <-b:
	case <-ctx.Done():
		return true
	}
	return false
}

// FailNext makes the next n requests, of any signal and over either
// protocol, fail. Refused requests are not recorded.
func (f *Faults) FailNext(n int) { lockedSet(f, &f.failNext, n) }

// FailWith sets the error a refusal returns (by default ErrRefused): the
// sink answers a gRPC status error with its code.
func (f *Faults) FailWith(err error) { lockedSet(f, &f.failErr, err) }

// FailRandomly makes every request from now on fail, like FailNext, with
// probability p (0 stops it), drawn from a generator seeded with seed: the
// n-th decision is the same on every run, whichever request it falls to.
// FailNext and Hold are decided first.
func (f *Faults) FailRandomly(p float64, seed uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failP, f.failRand = p, nil
	if p > 0 {
		f.failRand = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	}
}

// SetLatency makes every request from now on wait d before it is decided, as
// a slow backend does; a request whose client gives up meanwhile is refused.
func (f *Faults) SetLatency(d time.Duration) { lockedSet(f, &f.latency, d) }

// Hold makes every request from now on wait, before it is recorded, until
// Unhold or the client gives up; an exporter sending to the sink blocks as
// on a stalled backend. FailNext(n) then Unhold makes n of the held
// requests fail when released.
func (f *Faults) Hold() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hold == nil {
		f.hold = make(chan struct{})
	}
}

// Unhold lets the held requests, and later ones, through.
func (f *Faults) Unhold() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hold != nil {
		close(f.hold)
		f.hold = nil
	}
}

// Holding is how many requests are waiting on Hold.
func (f *Faults) Holding() int { return lockedGet(f, &f.holding) }

// Requests is how many requests were decided, refused ones included.
func (f *Faults) Requests() int { return lockedGet(f, &f.requests) }

// Refused is how many requests were refused: on FailNext's or
// FailRandomly's orders, or because their client gave up while they waited.
func (f *Faults) Refused() int { return lockedGet(f, &f.refused) }

// RefusedItems is how many items (log records, spans or data points) the
// refused requests carried.
func (f *Faults) RefusedItems() int { return lockedGet(f, &f.refusedItems) }

func lockedGet[T any](f *Faults, field *T) T {
	f.mu.Lock()
	defer f.mu.Unlock()
	return *field
}

func lockedSet[T any](f *Faults, field *T, v T) {
	f.mu.Lock()
	defer f.mu.Unlock()
	*field = v
}
