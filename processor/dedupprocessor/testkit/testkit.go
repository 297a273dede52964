// Package testkit holds the helpers the repository's tests share: a bounded
// wait on a condition, a fake clock, the exactly-once check over delivered
// records, reads of an OpenTelemetry SDK ManualReader, CPU hogs that make
// the host busy and the repository's root. The Redis harness is its sibling
// package redistest; faultproxy puts faults between a client and Redis.
//
// It lives in the processor module, not in a module of its own, so that the
// processor's go.mod requires only published modules: a module of this
// repository's in it would make every ocb manifest that builds the processor
// from a clone replace that module too. It is not under internal/ because the
// root module's tests (end to end, docs) and its benchmark driver use it as
// well, and Go lets no other module import an internal package; keeping one
// copy beats a copy per module. Only what both modules' tests need is here:
// what only the root module needs (the ocb-built binaries, the OTLP sink's
// faults) is in the root module's internal/e2e and internal/otlp. It uses
// nothing the processor does not already require, and no collector compiles
// it in: only tests and the benchmark driver import it.
package testkit

import (
	"time"
)

// TB is the part of testing.TB the kit's harness uses. A test passes its
// testing.TB; a program that runs the harness outside a test (the benchmark
// driver's Redis) passes its own.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Cleanup(func())
	TempDir() string
}

// WaitFor polls cond until it holds, for at most timeout, and fails the test
// naming what it waited for if it never does, with what detail (if given)
// says of the last poll. It and Until are the one wait of the repository's
// tests.
func WaitFor(t TB, what string, timeout time.Duration, cond func() bool, detail ...func() string) {
	t.Helper()
	if Until(time.Now().Add(timeout), cond) {
		return
	}
	for _, d := range detail {
		what += " (" + d() + ")"
	}
	t.Fatalf("%s: not after %v", what, timeout)
}

// Until polls cond until it holds or deadline has passed, and reports
// whether it held: for a wait whose end is an outcome, not a failure (a
// probe that measures how long a state lasts). Polls start at 1ms, so a
// state that holds only briefly is still seen, and back off to 20ms, so that
// a costly condition (a scrape, a Redis round trip) does not crowd out the
// code under test.
func Until(deadline time.Time, cond func() bool) bool {
	pause := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pause)
		pause = min(2*pause, 20*time.Millisecond)
	}
	return true
}
