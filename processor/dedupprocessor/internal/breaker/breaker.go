// Package breaker is a circuit breaker: after a run of consecutive failures
// it refuses calls for a cooldown, so a dead service costs nothing instead
// of a timeout per call, then lets a single probe through.
package breaker

import (
	"cmp"
	"sync"
	"time"
)

// State is the breaker's position; its value is the breaker-state gauge's.
type State int

const (
	Closed   State = iota
	HalfOpen       // one probe goes through; its outcome closes or re-opens the breaker
	Open
)

// Config sets the breaker's thresholds. Zero fields take the defaults.
type Config struct {
	Failures int // consecutive failed calls that open the breaker
	// Cooldown is how long the breaker stays open the first time. Each probe
	// that fails doubles it, up to MaxCooldown; one that succeeds resets it.
	Cooldown    time.Duration
	MaxCooldown time.Duration
	Now         func() time.Time // the clock
}

// Defaults for a zero Config.
const (
	DefaultFailures    = 5
	DefaultCooldown    = 5 * time.Second
	DefaultMaxCooldown = time.Minute
)

// Breaker is a consecutive-failure circuit breaker. It is safe for concurrent
// use.
type Breaker struct {
	cfg         Config // defaults filled in
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
	cfg.Failures = cmp.Or(cfg.Failures, DefaultFailures)
	cfg.Cooldown = cmp.Or(cfg.Cooldown, DefaultCooldown)
	cfg.MaxCooldown = max(cmp.Or(cfg.MaxCooldown, DefaultMaxCooldown), cfg.Cooldown)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Breaker{cfg: cfg, cooldown: cfg.Cooldown}
}

// Ticket is the permission to make one call. Its outcome must be reported
// with Done exactly once.
type Ticket struct {
	gen   uint64
	probe bool
}

// Outcome is what a call told about the service's health.
type Outcome int

// The outcomes. Unknown (the caller gave up) neither resets nor counts
// towards the failures; a probe ending so lets the next call probe.
const (
	Success Outcome = iota
	Failure
	Unknown
)

// Allow reports whether a call may go ahead now.
func (b *Breaker) Allow() (Ticket, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case Open:
		if b.cfg.Now().Before(b.openUntil) {
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

// Done reports the outcome of a call allowed with t, ignored if it began
// before a state change.
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
			b.cooldown = b.cfg.Cooldown
			b.transition(Closed)
		case Failure:
			b.cooldown = min(2*b.cooldown, b.cfg.MaxCooldown)
			b.open()
		}
		return
	}
	switch o {
	case Success:
		b.consecutive = 0
	case Failure:
		b.consecutive++
		if b.consecutive >= b.cfg.Failures {
			b.open()
		}
	}
}

// State returns the state: HalfOpen once an open breaker's cooldown ends (the
// next call probes).
func (b *Breaker) State() State {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == Open && !b.cfg.Now().Before(b.openUntil) {
		return HalfOpen
	}
	return b.state
}

func (b *Breaker) open() {
	b.openUntil = b.cfg.Now().Add(b.cooldown)
	b.transition(Open)
}

func (b *Breaker) transition(s State) {
	b.state = s
	b.gen++
	b.consecutive = 0
	b.probing = false
}
