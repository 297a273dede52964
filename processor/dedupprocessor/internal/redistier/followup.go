package redistier

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

// A batch's last word on its claims, commit or release, is worth finishing
// when a node fails it. A commit that fails leaves the claim pending: when
// the lease ends the digests are free, and a copy arriving then is
// delivered again although the batch was delivered. A release that fails
// leaves the claim pending too: the sender's retry of the refused batch
// waits for it, and is refused, until the lease ends. So a failed group's
// commit or release is sent again in the background until it succeeds or
// the lease has passed. That is what carries the claims of batches caught
// by a Cluster master's death over to the replica promoted in its place,
// which holds the claims (replication) but not what came after.
const (
	followFirst = 100 * time.Millisecond
	followMost  = time.Second
	// The queue's bounds: a batch adds one entry per group whose commit or
	// release failed (a release entry holds its digests), and entries leave
	// after the lease at the latest.
	maxFollowups       = 10_000
	maxFollowupDigests = 100_000
)

// followup is one group's commit or release of one claim, to be sent again
// until until.
type followup struct {
	op    string // OpCommit or OpRelease
	token string
	group int
	ds    []digest.Digest // a release's digests
	until time.Time
}

type followups struct {
	mu      sync.Mutex
	items   []followup
	digests int
	wake    chan struct{}
}

func (f *followups) add(it followup) {
	f.mu.Lock()
	if len(f.items) < maxFollowups && f.digests+len(it.ds) <= maxFollowupDigests {
		f.items = append(f.items, it)
		f.digests += len(it.ds)
	}
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// take removes and returns the entries whose lease has not passed.
func (f *followups) take(now time.Time) []followup {
	f.mu.Lock()
	defer f.mu.Unlock()
	var live []followup
	for _, it := range f.items {
		if now.Before(it.until) {
			live = append(live, it)
		}
	}
	f.items, f.digests = f.items[:0], 0
	return live
}

// run returns the loop that sends the queued commits and releases again,
// with a pause growing from followFirst to followMost while they keep
// failing. Each round is reported to Observe as one call per operation.
func (f *followups) run(t *Tier) func() {
	return func() {
		for {
			select {
			case <-t.stop:
				return
			case <-f.wake:
			}
			for wait := followFirst; ; wait = min(2*wait, followMost) {
				timer := time.NewTimer(wait)
				select {
				case <-t.stop:
					timer.Stop()
					return
				case <-timer.C:
				}
				items := f.take(time.Now())
				c := t.conn.Load()
				if len(items) == 0 || c == nil {
					break
				}
				ctx := t.bg
				for _, op := range []string{OpCommit, OpRelease} {
					var calls []*call
					var sent []followup
					for _, it := range items {
						if it.op != op {
							continue
						}
						if op == OpCommit {
							calls = append(calls, t.commitCall(ctx, c, it.group, it.token))
						} else {
							calls = append(calls, releaseCall(ctx, c, it.group, it.token, it.ds))
						}
						sent = append(sent, it)
					}
					if len(calls) == 0 {
						continue
					}
					_ = t.run(ctx, c, op, calls)
					for i, cl := range calls {
						if cl.err != nil {
							f.add(sent[i])
						}
					}
				}
			}
		}
	}
}

// releaseCall is the release script for one group's digests ds.
func releaseCall(ctx context.Context, c *conn, g int, token string, ds []digest.Digest) *call {
	status := c.layout.statusKey(g, token)
	args := make([]any, 0, 5+len(ds))
	args = append(args, "evalsha", releaseScript.Hash(), 1+len(ds), status)
	for _, d := range ds {
		b := d.Bytes()
		args = append(args, c.layout.groups[g].prefix+string(b[:]))
	}
	args = append(args, token)
	return &call{cmd: redis.NewCmd(ctx, args...), route: status}
}
