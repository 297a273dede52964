package redistier

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The writer is the tier's background goroutine. Each flush renews the pending
// claims and elections whose batches are downstream once a third of the lease
// has passed since their last renewal landed, sends the queued commits, and
// retries, with a growing pause, the failed writes until they land or their
// lease has ended (freeing the claim). A flush is one round trip per master,
// sent even to a master whose breaker is open (call.paced). A batch that finds
// the queue full (maxQueued) sends its own write: a slow Redis slows the
// senders, not grows the queue.
const (
	maxQueued  = 4096
	retryFirst = 100 * time.Millisecond
	retryMost  = time.Second
)

// write is one group's commit or release of a claim, or one election's.
type write struct {
	op       string // OpCommit or OpRelease
	token    string
	group    *group
	status   string        // the claim's status key in the group
	fields   string        // a release's packed fields
	election *Election     // set for an election
	failover time.Duration // an election's
	until    time.Time     // the claim's lease has ended by then
	// landed: a commit's claim is known to have reached Redis; one whose
	// answer never came back delivered its records unchecked, counted as
	// such, so its commit ending or finding no claim is not a claim lost.
	landed bool
	pause  time.Duration // before the next try, once one failed
	next   time.Time
}

// renewal is a pending claim's group, or a pending election, whose batch is
// downstream.
type renewal struct {
	token  string
	key    string    // the group's status key, or the election's key
	group  *group    // a claim's group; nil for an election, pending under the token
	fields []string  // a claim's packed fields, a string per script call
	landed time.Time // when the lease was last set: the claim, or a renewal sent then that landed
	// stamped: when the claim's records were last stamped (layout.go): the
	// claim, or a renewal that stamped them anew and landed.
	stamped time.Time
	retry   time.Time // a renewal that failed is tried again from then
}

type writer struct {
	mu     sync.Mutex
	queue  []write
	retry  []write
	live   map[string][]*renewal // by token
	closed bool
	wake   chan struct{}
}

// hold starts renewing token's claims or elections rs, leased and stamped at
// now.
func (w *writer) hold(token string, rs []*renewal, now time.Time) {
	if len(rs) == 0 {
		return
	}
	w.mu.Lock()
	for _, r := range rs {
		r.landed, r.stamped = now, now
		w.live[token] = append(w.live[token], r)
	}
	w.mu.Unlock()
}

// drop stops renewing token's claims and elections and returns them.
func (w *writer) drop(token string) []*renewal {
	w.mu.Lock()
	defer w.mu.Unlock()
	rs := w.live[token]
	delete(w.live, token)
	return rs
}

// forget stops renewing r, whose claim or election ended, and reports whether
// it still was.
func (w *writer) forget(r *renewal) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	rs := w.live[r.token]
	i := slices.Index(rs, r)
	if i < 0 {
		return false
	}
	if rs = slices.Delete(rs, i, i+1); len(rs) == 0 {
		delete(w.live, r.token)
	} else {
		w.live[r.token] = rs
	}
	return true
}

// enqueue queues ws unless the queue is full or closed.
func (w *writer) enqueue(ws []write) bool {
	w.mu.Lock()
	if w.closed || len(w.queue)+len(ws) > maxQueued {
		w.mu.Unlock()
		return false
	}
	w.queue = append(w.queue, ws...)
	w.mu.Unlock()
	wake(w.wake)
	return true
}

// wake sends on ch unless a wake is pending there already.
func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// run is the writer's loop, a flush whenever work is queued or due; once
// closed, it drains.
func (w *writer) run(t *Tier) {
	clk := t.opts.Clock
	next := time.Duration(0)
	pinged := clk.Now()
	for clk.Wait(t.bg, w.wake, next) == nil {
		now := clk.Now()
		next = w.flush(t.bg, t, now)
		if now.Sub(pinged) >= max(t.renewEvery(), time.Second) {
			// A restarted or failed-over master shows on a new connection:
			// ping however quiet.
			// The shape is read again: a collector that finds it gone (the
			// keys were deleted) writes its own, and adopts another written
			// meanwhile, so that the fleet agrees again.
			if c := t.conn.Load(); c != nil {
				ctx, cancel := context.WithTimeout(t.bg, t.opts.Timeout)
				c.exec.ping(ctx)
				t.checkShape(ctx, c)
				cancel()
			}
			pinged = now
		}
	}
	deadline := clk.Now().Add(2*t.opts.Timeout + retryFirst) // two tries of each write
	for now := clk.Now(); w.left() > 0 && now.Before(deadline); now = clk.Now() {
		w.flush(context.Background(), t, now)
		if w.left() > 0 {
			_ = clk.Wait(context.Background(), nil, min(retryFirst, deadline.Sub(now)))
		}
	}
	w.mu.Lock()
	left := append(w.queue, w.retry...) //nolint:gocritic // w.queue is dropped on the next line: reusing its array is the point
	w.queue, w.retry = nil, nil
	w.mu.Unlock()
	t.lostAll(left, "shut down before it landed")
}

func (w *writer) left() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue) + len(w.retry)
}

// flush sends the due renewals, queued writes and due retries (once closed,
// every retry and no renewal), and returns when the next flush is due.
func (w *writer) flush(ctx context.Context, t *Tier, now time.Time) time.Duration {
	every := t.renewEvery()
	w.mu.Lock()
	ws := w.queue
	w.queue = nil
	keep := w.retry[:0]
	var expired []write
	for _, r := range w.retry {
		switch {
		case !now.Before(r.until):
			expired = append(expired, r)
		case w.closed || !now.Before(r.next):
			ws = append(ws, r)
		default:
			keep = append(keep, r)
		}
	}
	w.retry = keep
	var renew []*renewal
	if !w.closed {
		for _, rs := range w.live {
			for _, r := range rs {
				if !now.Before(r.landed.Add(every)) && !now.Before(r.retry) {
					renew = append(renew, r)
				}
			}
		}
	}
	w.mu.Unlock()
	t.lostAll(expired, "not sent before the claim's lease ended")
	if len(ws) == 0 && len(renew) == 0 {
		return w.nextRound(now, every)
	}

	c := t.conn.Load() // not nil if there are writes or claims: they follow a connection
	calls := make([]*call, 0, len(renew)+len(ws))
	firsts := make([]int, len(renew)+1) // renewal i's calls are calls[firsts[i]:firsts[i+1]]
	restamp := make([]bool, len(renew))
	for i, r := range renew {
		firsts[i] = len(calls)
		if r.group == nil { // an election's renewal checks its holder
			calls = append(calls, &call{op: OpRenew, cmd: redis.NewCmd(ctx, "evalsha", renewElectionScript.Hash(), 1, r.key, t.leaseArg, r.token), route: r.key})
			continue
		}
		// Stamps last three leases past the window (layout.go): the records
		// of a batch downstream for a lease since they were stamped are
		// stamped anew, so that they outlive its commit however late.
		fields := []string{""}
		if restamp[i] = !now.Before(r.stamped.Add(t.opts.Lease)); restamp[i] {
			fields = r.fields
		}
		id := ClaimID(r.token)
		for _, f := range fields {
			calls = append(calls, &call{op: OpRenew, route: r.key,
				cmd: redis.NewCmd(ctx, "evalsha", renewSHA, 3, r.key, r.group.shape, r.group.fence, t.leaseArg, id, t.winArg, f)})
		}
	}
	firsts[len(renew)] = len(calls)
	nRenew := len(calls)
	calls = append(calls, t.writeCalls(ctx, ws)...)
	for _, cl := range calls {
		cl.paced = true
	}
	t.writeError(t.run(ctx, c, calls, t.opts.Timeout))

	for i, r := range renew {
		var n int64 = 1
		var err error
		for _, cl := range calls[firsts[i]:firsts[i+1]] {
			m, e := cl.cmd.Int64()
			n, err = min(n, m), cmp.Or(err, e)
		}
		switch {
		case err == nil && n == 1:
			w.mu.Lock()
			r.landed, r.retry = now, time.Time{}
			if restamp[i] {
				r.stamped = now
			}
			w.mu.Unlock()
		case err == nil:
			if w.forget(r) {
				t.lost(OpRenew, errors.New("dedup: redis renew: the claim of a batch still downstream had ended (its lease ran out): copies of its records may be delivered meanwhile"))
			}
		case !now.Before(r.landed.Add(t.opts.Lease)):
			if w.forget(r) {
				t.lost(OpRenew, fmt.Errorf("dedup: redis renew: not renewed before the lease ended: %w", err))
			}
		default:
			w.mu.Lock()
			r.retry = now.Add(retryFirst)
			w.mu.Unlock()
		}
	}
	t.retry(t.readWrites(ws, calls[nRenew:]), now, true)
	return w.nextRound(now, every)
}

func (w *writer) nextRound(now time.Time, every time.Duration) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	next := every
	for _, r := range w.retry {
		next = min(next, r.next.Sub(now))
	}
	for _, rs := range w.live {
		for _, r := range rs {
			next = min(next, max(r.landed.Add(every).Sub(now), r.retry.Sub(now)))
		}
	}
	return max(next, time.Millisecond)
}

// renewEvery is a third of the lease: a failed renewal is tried again in time.
func (t *Tier) renewEvery() time.Duration { return max(t.opts.Lease/3, time.Millisecond) }

func (t *Tier) lostAll(ws []write, why string) {
	for _, wr := range ws {
		if wr.op == OpCommit && wr.election == nil && !wr.landed {
			continue
		}
		t.lost(wr.op, fmt.Errorf("dedup: redis %s: %s", wr.op, why))
	}
}

// send sends writes now and hands those that failed to the writer.
func (t *Tier) send(ctx context.Context, c *conn, ws []write) ([]*call, error) {
	calls := t.writeCalls(ctx, ws)
	err := t.run(ctx, c, calls, t.opts.Timeout)
	t.retry(t.readWrites(ws, calls), t.opts.Clock.Now(), false)
	return calls, err
}

// retry hands failed writes to the writer (pause doubling); outside a flush,
// after Close, they are lost.
func (t *Tier) retry(failed []write, now time.Time, inRound bool) {
	if len(failed) == 0 {
		return
	}
	for i := range failed {
		wr := &failed[i]
		wr.pause = min(max(2*wr.pause, retryFirst), retryMost)
		wr.next = now.Add(wr.pause)
	}
	t.w.mu.Lock()
	if t.w.closed && !inRound {
		t.w.mu.Unlock()
		t.lostAll(failed, "failed after the tier was shut down")
		return
	}
	t.w.retry = append(t.w.retry, failed...)
	t.w.mu.Unlock()
	if !inRound {
		wake(t.w.wake)
	}
}

func (t *Tier) writeError(err error) {
	if err != nil && t.opts.OnWriteError != nil {
		t.opts.OnWriteError(err)
	}
}

func (t *Tier) writeCalls(ctx context.Context, ws []write) []*call {
	calls := make([]*call, len(ws))
	for i, wr := range ws {
		if el := wr.election; el != nil {
			key := t.electionKey(el.Key)
			rep := el.Replica.Bytes()
			fo := strconv.FormatInt(wr.failover.Milliseconds(), 10)
			var args []any
			if wr.op == OpCommit {
				args = []any{"evalsha", confirmScript.Hash(), 1, key, string(rep[:]), wr.token, fo}
			} else {
				args = []any{"evalsha", releaseElectionScript.Hash(), 2, key, t.electionMarker(el.Key, wr.token), wr.token, fo, t.leaseArg}
			}
			calls[i] = &call{op: wr.op, cmd: redis.NewCmd(ctx, args...), route: key}
			continue
		}
		if wr.op == OpCommit {
			calls[i] = &call{op: OpCommit, cmd: redis.NewCmd(ctx, "evalsha", commitSHA, 1, wr.status, t.winArg), route: wr.status}
			continue
		}
		calls[i] = &call{op: OpRelease, route: wr.status,
			cmd: redis.NewCmd(ctx, "evalsha", releaseSHA, 3, wr.status, wr.group.shape, wr.group.fence, ClaimID(wr.token), t.leaseArg, wr.fields)}
	}
	return calls
}

// readWrites reports the commits that found their claim ended, and returns
// the writes that failed.
func (t *Tier) readWrites(ws []write, calls []*call) []write {
	var retry []write
	for i, cl := range calls {
		if cl.err != nil {
			retry = append(retry, ws[i])
			continue
		}
		if n, _ := cl.cmd.Int64(); ws[i].landed && n == 0 {
			t.lost(OpCommit, errors.New("dedup: redis commit: the claim was not pending at its commit (its lease had ended): copies of its records may have been delivered meanwhile"))
		}
	}
	return retry
}

// lost reports a claim the tier could not keep.
func (t *Tier) lost(op string, err error) {
	t.opts.Observe(op, ResultLost, 0)
	t.writeError(err)
}
