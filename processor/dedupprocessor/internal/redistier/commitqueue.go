package redistier

import (
	"context"
	"sync"
	"time"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

// A commit is the one part of a batch's conversation with Redis that its
// sender need not wait for. The batch has been delivered, so no record
// depends on the commit: until it lands, the batch's claims are pending,
// and a copy meeting them on another collector waits for them (it is never
// dropped on a pending claim's word); a commit that never lands (the
// collector dies first) lets a copy through once the lease ends, as a
// commit lost on the way always did. So a batch may queue its commit and
// answer its sender, and one goroutine sends every commit queued meanwhile
// in one pipeline: one round trip (per master in a Cluster) for all the
// batches that ended while the last one was in flight, instead of one each.
// A round that fails hands its groups to the followups, as Commit does, and
// Close sends what is still queued before the connections close.

// maxQueuedCommits bounds the queue, in groups (one per batch on a
// standalone server, one per tag group a batch touched in a Cluster). A
// batch that finds it full commits itself, and its sender waits for that:
// a Redis that cannot keep up slows the senders rather than letting the
// queue, and the window in which copies wait, grow without bound.
const maxQueuedCommits = 4096

// queuedCommit is one group's commit of one claim.
type queuedCommit struct {
	token string
	group int
}

type commitQueue struct {
	mu     sync.Mutex
	items  []queuedCommit
	spare  []queuedCommit
	closed bool
	wake   chan struct{}
}

// CommitLater queues the commit of the digests ds claimed under token, to be
// sent with the other queued commits in one round trip, and returns true;
// what Commit says of ds holds. It returns false, queuing nothing, when the
// queue is full, the topology is not known yet or the tier is closing: the
// caller then calls Commit. A queued commit that fails is reported to
// Options.OnCommitError and sent again in the background like Commit's.
func (t *Tier) CommitLater(token string, ds []digest.Digest) bool {
	if len(ds) == 0 {
		return true
	}
	c := t.conn.Load()
	if c == nil {
		return false
	}
	gs := c.groupsOf(ds)
	q := &t.commits
	q.mu.Lock()
	if q.closed || len(q.items)+len(gs) > maxQueuedCommits {
		q.mu.Unlock()
		return false
	}
	for _, g := range gs {
		q.items = append(q.items, queuedCommit{token: token, group: g})
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return true
}

// close stops the queue taking commits; those queued are still sent.
func (q *commitQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
}

// run returns the loop that sends the queued commits: at once when the
// first arrives, then, while rounds find more queued, round after round.
// Its rounds are not cancelled by Close (each is bounded by the timeout):
// Close waits for the round in flight, then the loop sends what is still
// queued and returns.
func (q *commitQueue) run(t *Tier) func() {
	return func() {
		ctx := context.Background()
		for {
			select {
			case <-t.stop:
				for q.send(ctx, t) {
				}
				return
			case <-q.wake:
			}
			for q.send(ctx, t) {
			}
		}
	}
}

// send sends one round of the queued commits, and reports whether there
// were any.
func (q *commitQueue) send(ctx context.Context, t *Tier) bool {
	q.mu.Lock()
	items := q.items
	q.items, q.spare = q.spare[:0], nil
	q.mu.Unlock()
	if len(items) == 0 {
		q.recycle(items)
		return false
	}
	// CommitLater queues only once connected, and the connection is never
	// taken back.
	c := t.conn.Load()
	calls := make([]*call, len(items))
	for i, it := range items {
		calls[i] = t.commitCall(ctx, c, it.group, it.token)
	}
	if err := t.run(ctx, c, OpCommit, calls); err != nil {
		// The lease is counted from each claim; from now is the longest
		// any of them can still be pending.
		until := time.Now().Add(t.opts.Lease)
		for i, cl := range calls {
			if cl.err != nil {
				t.follow.add(followup{op: OpCommit, token: items[i].token, group: items[i].group, until: until})
			}
		}
		if t.opts.OnCommitError != nil {
			t.opts.OnCommitError(err)
		}
	}
	q.recycle(items)
	return true
}

// recycle keeps items' array for the next round.
func (q *commitQueue) recycle(items []queuedCommit) {
	clear(items)
	q.mu.Lock()
	q.spare = items[:0]
	q.mu.Unlock()
}
