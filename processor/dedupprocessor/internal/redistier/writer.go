package redistier

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

// The writer is the tier's background goroutine for claims. Each round
// sends the queued commits together (one round trip, one per master in a
// Cluster), renews each third of the lease the claims whose batches are
// downstream (so the lease bounds only how long a dead collector's claims
// stand in the way), and sends again, with a growing pause, the writes that
// failed, until they land or their claim's lease has ended (Redis has then
// freed the claim). Claims lost on the way are reported as ResultLost.
//
// The queue holds at most maxQueued writes; a batch that finds it full
// sends its own write and waits for it, so a Redis that cannot keep up
// slows the senders instead of growing the queue.
const (
	maxQueued  = 4096
	retryFirst = 100 * time.Millisecond
	retryMost  = time.Second
)

// write is one group's commit or release of one claim, or the lookup,
// confirmation or release of one election.
type write struct {
	op       string // OpCommit or OpRelease; OpElect for an election only
	token    string
	group    int
	ds       []digest.Digest // a release's digests
	election *electionWrite  // set for an election
	until    time.Time       // the claim's lease has ended by then
	pause    time.Duration   // before the next try, once one failed
	next     time.Time
}

type electionWrite struct {
	key, replica digest.Digest
	failover     time.Duration
}

type writer struct {
	mu     sync.Mutex
	queue  []write
	retry  []write
	live   map[string]*liveClaim // claims whose batches are downstream
	closed bool
	wake   chan struct{}
}

type liveClaim struct {
	groups  []int
	renewed time.Time
}

// hold starts renewing the lease of token's claim in groups, from now.
func (w *writer) hold(token string, groups []int, now time.Time) {
	if len(groups) == 0 {
		return
	}
	w.mu.Lock()
	w.live[token] = &liveClaim{groups: append([]int(nil), groups...), renewed: now}
	w.mu.Unlock()
}

// drop stops renewing token's claim.
func (w *writer) drop(token string) {
	w.mu.Lock()
	delete(w.live, token)
	w.mu.Unlock()
}

// enqueue queues ws unless the queue is full or closed, and reports whether
// it did.
func (w *writer) enqueue(ws []write) bool {
	w.mu.Lock()
	if w.closed || len(w.queue)+len(ws) > maxQueued {
		w.mu.Unlock()
		return false
	}
	w.queue = append(w.queue, ws...)
	w.mu.Unlock()
	w.signal()
	return true
}

func (w *writer) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *writer) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
}

// run is the writer's loop: a round when writes are queued, when a retry
// is due, and each third of the lease.
func (w *writer) run(t *Tier) {
	clk := t.opts.Clock
	every := max(t.opts.Lease/3, time.Millisecond)
	next := every
	for {
		if clk.Wait(t.bg, w.wake, next) != nil {
			// Close: what is left goes out once more, past the background
			// context.
			w.round(t, context.Background(), clk.Now(), every, true)
			return
		}
		next = w.round(t, t.bg, clk.Now(), every, false)
	}
}

// round sends the queued writes and the retries and renewals that are due,
// and returns when the next round is due at the latest.
func (w *writer) round(t *Tier, ctx context.Context, now time.Time, every time.Duration, last bool) time.Duration {
	w.mu.Lock()
	ws := w.queue
	w.queue = nil
	keep := w.retry[:0]
	var expired []write
	for _, r := range w.retry {
		switch {
		case !now.Before(r.until):
			expired = append(expired, r)
		case last || !now.Before(r.next):
			ws = append(ws, r)
		default:
			keep = append(keep, r)
		}
	}
	w.retry = keep
	var renew []string
	var groups [][]int
	if !last {
		for tok, lc := range w.live {
			if now.Sub(lc.renewed) >= every {
				lc.renewed = now
				renew, groups = append(renew, tok), append(groups, lc.groups)
			}
		}
	}
	w.mu.Unlock()
	t.unsent(expired)

	c := t.conn.Load() // not nil if there are writes or claims: they follow a connection
	var retry []write
	for _, op := range []string{OpCommit, OpRelease} {
		var sent []write
		for _, wr := range ws {
			if wr.op == op {
				sent = append(sent, wr)
			}
		}
		if len(sent) > 0 {
			failed, err := t.send(ctx, c, op, sent)
			t.writeError(err)
			retry = append(retry, failed...)
		}
	}
	if len(renew) > 0 {
		t.renew(ctx, c, renew, groups)
	}
	ws = retry
	if last {
		for _, wr := range ws {
			t.lost(wr.op, fmt.Errorf("dedup: redis %s: shut down before it landed", wr.op))
		}
		return every
	}
	next := every
	expired = expired[:0]
	w.mu.Lock()
	for _, wr := range ws {
		if !now.Before(wr.until) {
			expired = append(expired, wr)
			continue
		}
		wr.pause = min(max(2*wr.pause, retryFirst), retryMost)
		wr.next = now.Add(wr.pause)
		w.retry = append(w.retry, wr)
	}
	for _, r := range w.retry {
		next = min(next, max(r.next.Sub(now), time.Millisecond))
	}
	w.mu.Unlock()
	t.unsent(expired)
	return next
}

// unsent reports the writes whose claim's lease ended before they landed.
func (t *Tier) unsent(ws []write) {
	for _, wr := range ws {
		t.lost(wr.op, fmt.Errorf("dedup: redis %s: not sent before the claim's lease ended", wr.op))
	}
}

// send sends one op's writes and returns those that failed, and the
// round's error.
func (t *Tier) send(ctx context.Context, c *conn, op string, ws []write) ([]write, error) {
	calls := t.writeCalls(ctx, c, op, ws)
	err := t.run(ctx, c, op, calls)
	return t.readWrites(op, ws, calls), err
}

// retry hands writes that failed outside a round to the writer.
func (t *Tier) retry(failed []write) {
	if len(failed) == 0 {
		return
	}
	now := t.opts.Clock.Now()
	for i := range failed {
		wr := &failed[i]
		if wr.until.IsZero() {
			wr.until = now.Add(t.opts.Lease)
		}
		wr.pause, wr.next = retryFirst, now.Add(retryFirst)
	}
	t.w.mu.Lock()
	t.w.retry = append(t.w.retry, failed...)
	t.w.mu.Unlock()
	t.w.signal()
}

func (t *Tier) writeError(err error) {
	if err != nil && t.opts.OnWriteError != nil {
		t.opts.OnWriteError(err)
	}
}

func (t *Tier) writeCalls(ctx context.Context, c *conn, op string, ws []write) []*call {
	calls := make([]*call, len(ws))
	for i, wr := range ws {
		if el := wr.election; el != nil {
			key := t.electionKey(el.key)
			rep := el.replica.Bytes()
			fo := strconv.FormatInt(el.failover.Milliseconds(), 10)
			var args []any
			switch op {
			case OpElect:
				args = []any{"evalsha", electScript.Hash(), 1, key, string(rep[:]), wr.token, t.leaseArg, fo}
			case OpCommit:
				args = []any{"evalsha", confirmScript.Hash(), 1, key, string(rep[:]), wr.token, fo}
			default:
				args = []any{"evalsha", releaseElectionScript.Hash(), 1, key, wr.token, fo}
			}
			calls[i] = &call{cmd: redis.NewCmd(ctx, args...), route: key}
			continue
		}
		status := c.layout.statusKey(wr.group, wr.token)
		if op == OpCommit {
			calls[i] = &call{cmd: redis.NewCmd(ctx, "evalsha", commitScript.Hash(), 1, status, t.winArg), route: status, group: wr.group}
			continue
		}
		args := make([]any, 0, 5+len(wr.ds))
		args = append(args, "evalsha", releaseScript.Hash(), 1+len(wr.ds), status)
		for _, d := range wr.ds {
			b := d.Bytes()
			args = append(args, c.layout.groups[wr.group].prefix+string(b[:]))
		}
		args = append(args, wr.token)
		calls[i] = &call{cmd: redis.NewCmd(ctx, args...), route: status, group: wr.group}
	}
	return calls
}

// readWrites reports the commits that found their claim ended and returns
// the writes whose call failed.
func (t *Tier) readWrites(op string, ws []write, calls []*call) []write {
	var retry []write
	for i, cl := range calls {
		if cl.err != nil {
			retry = append(retry, ws[i])
			continue
		}
		if op == OpCommit && ws[i].election == nil {
			if n, _ := cl.cmd.Int64(); n == 0 {
				t.lost(OpCommit, errors.New("dedup: redis commit: the claim had ended before its commit (its lease ran out): copies of its records may be delivered again"))
			}
		}
	}
	return retry
}

// renew extends the leases of the claims of tokens, in their groups.
func (t *Tier) renew(ctx context.Context, c *conn, tokens []string, groups [][]int) {
	var calls []*call
	var owner []string
	for i, tok := range tokens {
		for _, g := range groups[i] {
			status := c.layout.statusKey(g, tok)
			calls = append(calls, &call{cmd: redis.NewCmd(ctx, "evalsha", renewScript.Hash(), 1, status, t.leaseArg), route: status, group: g})
			owner = append(owner, tok)
		}
	}
	t.writeError(t.run(ctx, c, OpRenew, calls))
	for i, cl := range calls {
		if cl.err != nil {
			continue // renewed at the next round, if the lease allows
		}
		if n, _ := cl.cmd.Int64(); n == 0 {
			t.w.mu.Lock()
			_, stillLive := t.w.live[owner[i]]
			delete(t.w.live, owner[i])
			t.w.mu.Unlock()
			if stillLive {
				t.lost(OpRenew, errors.New("dedup: redis renew: the claim of a batch still downstream had ended (its lease ran out): copies of its records may be delivered meanwhile"))
			}
		}
	}
}

// lost reports a claim the tier could not keep.
func (t *Tier) lost(op string, err error) {
	t.opts.Observe(op, ResultLost, 0)
	t.writeError(err)
}
