package claim

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/throttle"
)

// goRedisLog routes go-redis's log, which is one for the whole process, to
// the logger of the earliest shared tier still running: each kind of line
// (go-redis's format string) at most once per throttle.Interval, for every
// tier of the collector together, with the count of the lines it stands for
// (occurrences). A Redis that is down makes every tier's pool log a failed
// dial per attempt: one line a second or more per pipeline, else.
var goRedisLog redisLogRouter

type redisLogRouter struct {
	mu      sync.Mutex
	set     bool            // redis.SetLogger was called
	targets []*redisLogSink // in the order their tiers started
}

// redisLogSink is a tier's logger and clock, and the kinds of line it
// logged.
type redisLogSink struct {
	logger *zap.Logger
	now    func() int64
	kinds  map[string]*throttle.Log // by format; guarded by the router's mu
}

func newRedisLogSink(logger *zap.Logger, now func() int64) *redisLogSink {
	return &redisLogSink{logger: logger.With(zap.String("client", "go-redis")), now: now, kinds: map[string]*throttle.Log{}}
}

// add makes s a target, the first if no other tier runs.
func (r *redisLogRouter) add(s *redisLogSink) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.set {
		redis.SetLogger(r)
		r.set = true
	}
	r.targets = append(r.targets, s)
}

// remove ends s as a target; the next one takes over.
func (r *redisLogRouter) remove(s *redisLogSink) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.targets = slices.DeleteFunc(r.targets, func(t *redisLogSink) bool { return t == s })
}

// Printf is go-redis's Logging. Lines while no tier runs (a pool closing
// after its tier) are dropped.
func (r *redisLogRouter) Printf(_ context.Context, format string, v ...any) {
	r.mu.Lock()
	if len(r.targets) == 0 {
		r.mu.Unlock()
		return
	}
	s := r.targets[0]
	k := s.kinds[format]
	if k == nil {
		k = new(throttle.Log) // its Due alone: the line is go-redis's, formatted
		s.kinds[format] = k
	}
	r.mu.Unlock()
	if n, due := k.Due(s.now()); due {
		s.logger.Warn(fmt.Sprintf(format, v...), zap.Int64("occurrences", n))
	}
}
