// Package testkit holds the helpers the repository's tests share: a bounded
// wait on a condition, a fake clock, the exactly-once check over delivered
// records, reads of an OpenTelemetry SDK ManualReader, CPU hogs that make
// the host busy and the ocb-built binaries the end-to-end and docs tests
// run. The Redis harness
// is its sibling package redistest; faultproxy puts faults between a client
// and Redis.
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
// says of the last poll. It is the one wait of the repository's tests. Polls
// start at 1ms, so a state that holds only briefly is still seen, and back
// off to 20ms, so that a costly condition (a scrape, a Redis round trip)
// does not crowd out the code under test.
func WaitFor(t TB, what string, timeout time.Duration, cond func() bool, detail ...func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	pause := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			for _, d := range detail {
				what += " (" + d() + ")"
			}
			t.Fatalf("%s: not after %v", what, timeout)
		}
		time.Sleep(pause)
		pause = min(2*pause, 20*time.Millisecond)
	}
}
