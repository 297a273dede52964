package redistier

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/breaker"
)

// The Cluster executor: each call's groups are routed through go-redis's
// slot map to the master that serves their slot (MasterForKey, no round
// trip), and each master gets its own pipeline, sent concurrently, behind its
// own circuit breaker. So a dead or hung master fails only its own groups, at
// once when its breaker is open, and a slow one cannot make the healthy
// masters' answers miss the deadline (a single ClusterClient pipeline stamps
// its deadline error on every command it holds, healthy nodes' replies
// included).
//
// go-redis reloads its slot map on MOVED, ASK and READONLY replies, or when
// the map is older than a minute: never on a connection error or a timeout,
// so on its own it would keep sending a dead master's groups to the dead
// address until that minute is over. Here every sign of trouble (a node
// that does not answer, an open breaker, a moving slot) marks the Cluster
// degraded, and while it is, the map is reloaded every refreshDegraded, so
// the groups follow a promoted replica or a moved slot within a fraction of
// a second of the Cluster finishing. A promoted replica has an address of
// its own, hence a closed breaker: recovery does not wait for the dead
// master's cooldown.
//
// Within a call, groups answered MOVED or ASK are sent again through the
// ClusterClient, which follows the redirection; groups answered TRYAGAIN (a
// multi-key command in a slot being migrated), CLUSTERDOWN (a slot without
// a master, between a master's failure and its replica's promotion),
// LOADING or READONLY, and groups whose dead node's slots have moved since,
// are sent again after retryPause, while the call's deadline allows. Every
// command is idempotent for its token, so a retry is safe even when the
// first attempt's reply was lost.
const (
	refreshDegraded = 250 * time.Millisecond
	// degradedFor is how long after the last sign of trouble the map keeps
	// being reloaded every refreshDegraded.
	degradedFor = 5 * time.Second
	// refreshIdle is the reload period otherwise; it also notices masters
	// that joined or left.
	refreshIdle   = 10 * time.Second
	reloadTimeout = time.Second
	// retryPause is the pause before a call's retry; a retry is made only
	// while the deadline leaves at least two pauses.
	retryPause  = 25 * time.Millisecond
	maxAttempts = 5
	// forgetNode is how long a node that left the slot map stays known, with
	// its breaker's state reported.
	forgetNode = time.Minute
)

type clusterExec struct {
	cc    *redis.ClusterClient
	brCfg breaker.Config

	mu    sync.Mutex
	nodes map[string]*clusterNode // by address

	degradedUntil atomic.Int64 // unix ns
	reload        chan struct{}
	stop, done    chan struct{}
}

type clusterNode struct {
	br     *breaker.Breaker
	master bool      // a master in the last slot map loaded
	seen   time.Time // when it last was
}

func newClusterExec(cc *redis.ClusterClient, cfg breaker.Config) *clusterExec {
	x := &clusterExec{
		cc:     cc,
		brCfg:  cfg,
		nodes:  map[string]*clusterNode{},
		reload: make(chan struct{}, 1),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	// Load the slot map now: the first call would otherwise pay for it
	// within its own deadline.
	x.refresh()
	go x.refresher()
	return x
}

func (x *clusterExec) close() error {
	close(x.stop)
	<-x.done
	return x.cc.Close()
}

func (x *clusterExec) exec(ctx context.Context, calls []*call) {
	todo := calls
	for attempt := 1; ; attempt++ {
		x.send(ctx, todo, attempt > 1)
		var again []*call
		for _, c := range todo {
			if c.err != nil && x.worthRetry(ctx, c) {
				again = append(again, c)
			}
		}
		if len(again) == 0 || attempt == maxAttempts || !pause(ctx, retryPause) {
			return
		}
		for _, c := range again {
			// go-redis keeps a command's reply and slot: a retry needs a
			// fresh one.
			c.cmd = redis.NewCmd(ctx, c.cmd.Args()...)
		}
		todo = again
	}
}

// worthRetry reports whether a failed call may succeed if sent again now.
func (x *clusterExec) worthRetry(ctx context.Context, c *call) bool {
	switch {
	case redirected(c.err):
		c.redirect = true
		return true
	case retriable(c.err):
		return true
	case nodeDown(c.err) || errors.Is(c.err, errBreakerOpen):
		// Only if the slot map now routes the group to another node (the
		// map was reloaded meanwhile: a replica was promoted).
		client, err := x.cc.MasterForKey(ctx, c.route)
		return err == nil && ctx.Err() == nil && client.Options().Addr != c.node
	}
	return false
}

// pause waits d, if ctx's deadline leaves at least 2d; it reports whether it
// did.
func pause(ctx context.Context, d time.Duration) bool {
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < 2*d {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// nodeCalls is one node's share of an attempt.
type nodeCalls struct {
	client *redis.Client
	br     *breaker.Breaker
	ticket breaker.Ticket
	calls  []*call
}

// send routes calls to their masters and sends one pipeline per master, all
// at once; calls to be redirected go through the ClusterClient.
func (x *clusterExec) send(ctx context.Context, calls []*call, retry bool) {
	var direct []*call
	byNode := make(map[string]*nodeCalls, 4)
	var order []string
	for _, c := range calls {
		if c.redirect {
			c.redirect, c.node = false, ""
			direct = append(direct, c)
			continue
		}
		client, err := x.cc.MasterForKey(ctx, c.route)
		if err != nil {
			c.node, c.err = "", err
			x.degraded()
			continue
		}
		addr := client.Options().Addr
		c.node = addr
		nc := byNode[addr]
		if nc == nil {
			nc = &nodeCalls{client: client}
			byNode[addr] = nc
			order = append(order, addr)
		}
		nc.calls = append(nc.calls, c)
	}
	var allowed []*nodeCalls
	for _, addr := range order {
		nc := byNode[addr]
		nc.br = x.breaker(addr)
		ticket, ok := nc.br.Allow()
		if !ok {
			for _, c := range nc.calls {
				c.err = errBreakerOpen
			}
			x.degraded()
			continue
		}
		nc.ticket = ticket
		allowed = append(allowed, nc)
	}
	var wg sync.WaitGroup
	for _, nc := range allowed {
		wg.Go(func() { sendPipeline(ctx, nc.client, nc.calls) })
	}
	if len(direct) > 0 {
		wg.Go(func() { sendEach(ctx, x.cc, direct) })
	}
	wg.Wait()

	stale := false
	for _, nc := range allowed {
		outcome := breaker.Success
		for _, c := range nc.calls {
			if c.err == nil {
				continue
			}
			down := nodeDown(c.err)
			stale = stale || down || moving(c.err)
			if down || !moving(c.err) {
				outcome = failureOutcome(ctx)
				if retry && isTimeout(c.err) {
					// A retry runs on what is left of the call's time:
					// missing the deadline then says little about the node.
					outcome = breaker.Unknown
				}
			}
		}
		nc.br.Done(nc.ticket, outcome)
	}
	for _, c := range direct {
		stale = stale || nodeDown(c.err) || moving(c.err)
	}
	if stale {
		x.degraded()
	}
}

// breaker returns the breaker of the master at addr.
func (x *clusterExec) breaker(addr string) *breaker.Breaker {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := x.nodes[addr]
	if n == nil {
		// Only masters of the current map are routed to.
		n = &clusterNode{br: breaker.New(x.brCfg), master: true, seen: time.Now()}
		x.nodes[addr] = n
	}
	return n.br
}

// degraded notes a sign of trouble: the slot map is reloaded now, and every
// refreshDegraded for degradedFor.
func (x *clusterExec) degraded() {
	now := time.Now()
	if x.degradedUntil.Swap(now.Add(degradedFor).UnixNano()) < now.UnixNano() {
		select {
		case x.reload <- struct{}{}:
		default:
		}
	}
}

func (x *clusterExec) refresher() {
	defer close(x.done)
	tick := time.NewTicker(refreshDegraded)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-x.stop:
			return
		case <-x.reload:
		case now := <-tick.C:
			if now.UnixNano() >= x.degradedUntil.Load() && now.Sub(last) < refreshIdle {
				continue
			}
		}
		x.refresh()
		last = time.Now()
	}
}

// refresh reloads the slot map and updates the known masters: one that
// (re)joins as a master starts with a closed breaker, and one that left the
// map is forgotten after forgetNode.
func (x *clusterExec) refresh() {
	ctx, cancel := context.WithTimeout(context.Background(), reloadTimeout)
	defer cancel()
	var mu sync.Mutex
	masters := map[string]bool{}
	// ForEachMaster begins with a synchronous reload of the map (CLUSTER
	// SLOTS from one node): go-redis has no other public one.
	err := x.cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		masters[c.Options().Addr] = true
		mu.Unlock()
		return nil
	})
	if err != nil {
		return
	}
	now := time.Now()
	x.mu.Lock()
	defer x.mu.Unlock()
	for addr := range masters {
		n := x.nodes[addr]
		if n == nil || !n.master {
			n = &clusterNode{br: breaker.New(x.brCfg)}
			x.nodes[addr] = n
		}
		n.master, n.seen = true, now
	}
	for addr, n := range x.nodes {
		if masters[addr] {
			continue
		}
		n.master = false
		if now.Sub(n.seen) > forgetNode {
			delete(x.nodes, addr)
		}
	}
}

func (x *clusterExec) breakers() []NodeBreaker {
	x.mu.Lock()
	out := make([]NodeBreaker, 0, len(x.nodes))
	for addr, n := range x.nodes {
		out = append(out, NodeBreaker{Node: addr, State: n.br.State()})
	}
	x.mu.Unlock()
	slices.SortFunc(out, func(a, b NodeBreaker) int { return strings.Compare(a.Node, b.Node) })
	return out
}
