// Package breaker is a circuit breaker for calls to a shared service (the
// Redis tier): after a run of consecutive failures it stops calls for a
// cooldown, so a dead service costs nothing instead of a timeout per call,
// then lets a single probe through to find out whether it is back.
package breaker

import (
	"sync"
	"time"
)

// State is the breaker's position.
type State int

const (
	// Closed lets every call through and counts consecutive failures.
	Closed State = iota
	// Open refuses every call until the cooldown ends.
	Open
	// HalfOpen lets one probe through; its outcome closes or re-opens the
	// breaker. Calls made while the probe is out are refused.
	HalfOpen
)

func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half_open"
	}
	return "unknown"
}

// Config sets the breaker's thresholds. Zero fields take the defaults.
type Config struct {
	// Failures is the number of consecutive failed calls that opens the
	// breaker. Default 5.
	Failures int
	// Cooldown is how long the breaker stays open the first time. Each probe
	// that fails doubles it, up to MaxCooldown; a probe that succeeds resets
	// it. Default 5 s.
	Cooldown time.Duration
	// MaxCooldown caps the cooldown. Default 1 min.
	MaxCooldown time.Duration
	// Now is the clock; nil means time.Now. Tests inject a fake one.
	Now func() time.Time
}

// Defaults for a zero Config.
const (
	DefaultFailures    = 5
	DefaultCooldown    = 5 * time.Second
	DefaultMaxCooldown = time.Minute
)

// Breaker is a consecutive-failure circuit breaker. It is safe for
// concurrent use.
type Breaker struct {
	failures    int
	baseCool    time.Duration
	maxCool     time.Duration
	now         func() time.Time
	mu          sync.Mutex
	state       State
	gen         uint64 // bumped on every transition, to ignore stale outcomes
	consecutive int
	cooldown    time.Duration
	openUntil   time.Time
	probing     bool
}

// New returns a closed breaker.
func New(cfg Config) *Breaker {
	b := &Breaker{
		failures: cfg.Failures,
		baseCool: cfg.Cooldown,
		maxCool:  cfg.MaxCooldown,
		now:      cfg.Now,
	}
	if b.failures <= 0 {
		b.failures = DefaultFailures
	}
	if b.baseCool <= 0 {
		b.baseCool = DefaultCooldown
	}
	if b.maxCool <= 0 {
		b.maxCool = DefaultMaxCooldown
	}
	if b.maxCool < b.baseCool {
		b.maxCool = b.baseCool
	}
	if b.now == nil {
		b.now = time.Now
	}
	b.cooldown = b.baseCool
	return b
}

// Ticket is the permission to make one call, returned by Allow. Its outcome
// must be reported with Done exactly once.
type Ticket struct {
	gen   uint64
	probe bool
}

// Outcome is what a call told about the service's health.
type Outcome int

const (
	// Success: the service answered.
	Success Outcome = iota
	// Failure: the service failed or did not answer in time.
	Failure
	// Unknown: the call ended without telling (e.g. the caller gave up);
	// it neither resets nor counts towards the failures, and a probe that
	// ends this way lets the next call probe instead.
	Unknown
)

// Allow reports whether a call may go ahead now. If it may, the caller makes
// the call and then reports its outcome with Done(ticket, outcome).
func (b *Breaker) Allow() (Ticket, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case Open:
		if b.now().Before(b.openUntil) {
			return Ticket{}, false
		}
		b.transition(HalfOpen)
		fallthrough
	case HalfOpen:
		if b.probing {
			return Ticket{}, false
		}
		b.probing = true
		return Ticket{gen: b.gen, probe: true}, true
	}
	return Ticket{gen: b.gen}, true
}

// Done reports the outcome of a call allowed with t. Outcomes of calls that
// began before the last state change are ignored: they say nothing about the
// state the breaker has since moved to.
func (b *Breaker) Done(t Ticket, o Outcome) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t.gen != b.gen {
		return
	}
	if t.probe {
		b.probing = false
		switch o {
		case Success:
			b.cooldown = b.baseCool
			b.transition(Closed)
		case Failure:
			b.cooldown = min(2*b.cooldown, b.maxCool)
			b.open()
		}
		return
	}
	switch o {
	case Success:
		b.consecutive = 0
	case Failure:
		b.consecutive++
		if b.consecutive >= b.failures {
			b.open()
		}
	}
}

// State returns the breaker's state for a gauge. An open breaker whose
// cooldown has ended reports HalfOpen: the next call will probe.
func (b *Breaker) State() State {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == Open && !b.now().Before(b.openUntil) {
		return HalfOpen
	}
	return b.state
}

func (b *Breaker) open() {
	b.openUntil = b.now().Add(b.cooldown)
	b.transition(Open)
}

func (b *Breaker) transition(s State) {
	b.state = s
	b.gen++
	b.consecutive = 0
	b.probing = false
}
