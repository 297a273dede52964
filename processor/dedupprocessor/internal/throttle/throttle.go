// Package throttle logs a recurring problem at most once an interval, with
// the occurrences since: a problem of every batch must not flood the log.
package throttle

import (
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Interval is the least time between two lines of one Log.
const Interval = 10 * time.Second

// Log is one recurring problem's line; safe for concurrent use.
type Log struct {
	logger *zap.Logger
	msg    string
	last   atomic.Int64
	count  atomic.Int64
}

// New returns the Log of msg, written to logger at warn level.
func New(logger *zap.Logger, msg string) *Log { return &Log{logger: logger, msg: msg} }

// Log notes one occurrence at now (Unix ns) and logs it with the count since
// the last line, unless a line was logged less than Interval ago.
func (t *Log) Log(now int64, err error, fields ...zap.Field) {
	if n, due := t.Due(now); due {
		t.logger.Warn(t.msg, append(fields, zap.Error(err), zap.Int64("occurrences", n))...)
	}
}

// Due notes one occurrence at now (Unix ns) and reports whether a line is
// due, and for how many occurrences: none was logged for Interval.
func (t *Log) Due(now int64) (occurrences int64, due bool) {
	n := t.count.Add(1)
	last := t.last.Load()
	if now-last < int64(Interval) || !t.last.CompareAndSwap(last, now) {
		return 0, false
	}
	t.count.Add(-n)
	return n, true
}
