package claim

import (
	"context"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/clock"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/throttle"
)

// Rounds is what a processor's batches share to take turns on a record: the
// clock, the tokens that name their rounds, and the wait for another round
// (or a replica election, which takes its turns the same way) to settle.
type Rounds struct {
	clock       clock.Clock
	tokens      atomic.Uint64
	settled     settledSignal // a round or an election settled: committed or released
	pendingWait time.Duration
	refused     *throttle.Log
	observer    Observer
}

// Now is the time on the processor's clock (Unix ns).
func (r *Rounds) Now() int64 { return r.clock.Now().UnixNano() }

// NextToken returns a token above all before and at least the time in µs:
// shared tokens tell their age.
func (r *Rounds) NextToken() uint64 {
	now := uint64(r.clock.Now().UnixMicro())
	for {
		last := r.tokens.Load()
		t := max(last+1, now)
		if r.tokens.CompareAndSwap(last, t) {
			return t
		}
	}
}

// Settled wakes the batches waiting for a round or an election to settle.
func (r *Rounds) Settled() { r.settled.broadcast() }

// MaxPause bounds the pause between rechecks (nothing wakes a batch when
// other collectors' claims settle): short next to exports, long next to
// rechecks.
const MaxPause = 16 * time.Millisecond

// Wait is one batch's wait for the claims or elections of batches in flight.
type Wait struct {
	r     *Rounds
	start time.Time
	d     time.Duration // the next pause
}

// BeginWait starts a batch's wait.
func (r *Rounds) BeginWait() *Wait {
	return &Wait{r: r, start: r.clock.Now(), d: time.Millisecond}
}

// Pause returns when a round or election settles, or after the pause
// (doubling up to MaxPause); past pending_wait, it logs, records and returns
// refused.
func (w *Wait) Pause(ctx context.Context, now int64, refused error, fields ...zap.Field) error {
	settled := w.r.settled.channel()
	if w.r.clock.Now().Add(w.d).After(w.start.Add(w.r.pendingWait)) {
		w.r.refused.Log(now, refused, fields...)
		w.r.observer.Waited(ctx, w.r.clock.Now().Sub(w.start), true)
		return refused
	}
	err := w.r.clock.Wait(ctx, settled, w.d)
	w.d = min(2*w.d, MaxPause)
	return err
}

// Done records a wait that ended with the batch going on.
func (w *Wait) Done(ctx context.Context) {
	w.r.observer.Waited(ctx, w.r.clock.Now().Sub(w.start), false)
}

// settledSignal wakes waiters when a round or election ends; only waiters
// make its channel: cheap.
type settledSignal struct{ ch atomic.Pointer[chan struct{}] }

// channel returns a channel closed at the next broadcast.
func (s *settledSignal) channel() <-chan struct{} {
	for {
		if ch := s.ch.Load(); ch != nil {
			return *ch
		}
		if ch := make(chan struct{}); s.ch.CompareAndSwap(nil, &ch) {
			return ch
		}
	}
}

func (s *settledSignal) broadcast() {
	if s.ch.Load() != nil {
		if ch := s.ch.Swap(nil); ch != nil {
			close(*ch)
		}
	}
}
