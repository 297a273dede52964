package redistier

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/breaker"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/clock"
)

// The Cluster executor routes each call by go-redis's slot map and sends one
// pipeline per master, concurrently, behind its breaker: a dead or slow master
// fails only its own groups (a ClusterClient pipeline stamps its deadline error
// on every command).
//
// go-redis reloads its slot map on MOVED, ASK and READONLY or once a minute,
// not on a connection error or timeout. So any trouble marks the Cluster
// degraded, reloading the map every refreshDegraded: groups follow a promoted
// replica or moved slot quickly. Failed groups are resent as errors.go tells,
// while the deadline allows; every command is idempotent.
const (
	refreshDegraded = 250 * time.Millisecond
	degradedFor     = 5 * time.Second  // after the last sign of trouble
	refreshIdle     = 10 * time.Second // the reload period otherwise
	reloadTimeout   = time.Second
	retryPause      = 25 * time.Millisecond
	maxAttempts     = 5
	forgetNode      = time.Minute // a node that left the map stays reported
)

type clusterExec struct {
	cc    *redis.ClusterClient
	brCfg breaker.Config
	clock clock.Clock
	// joined is called with a master that was not one in the last slot map
	// loaded (after the first).
	joined func(context.Context, *redis.Client)

	mu     sync.Mutex
	nodes  map[string]*clusterNode  // by address
	mapped map[string]*redis.Client // the masters of the last slot map refresh loaded

	degradedUntil atomic.Int64 // unix ns
	reload        chan struct{}
	stop          context.CancelFunc
	done          sync.WaitGroup // the refresher
}

type clusterNode struct {
	br     *breaker.Breaker
	master bool      // a master in the last slot map loaded
	seen   time.Time // when it last was
}

func newClusterExec(cc *redis.ClusterClient, cfg breaker.Config, clk clock.Clock, joined func(context.Context, *redis.Client)) *clusterExec {
	x := &clusterExec{
		cc:     cc,
		joined: joined,
		brCfg:  cfg,
		clock:  clk,
		nodes:  map[string]*clusterNode{},
		reload: make(chan struct{}, 1),
	}
	x.refresh() // now, not within the first call's deadline
	ctx, stop := context.WithCancel(context.Background())
	x.stop = stop
	x.done.Go(func() { x.refresher(ctx) })
	return x
}

func (x *clusterExec) close() error {
	x.stop()
	x.done.Wait()
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
		if len(again) == 0 || attempt == maxAttempts || !x.pause(ctx, retryPause) {
			return
		}
		todo = again
	}
}

func (x *clusterExec) send1(ctx context.Context, c *call) {
	c.node = "the master of " + c.route
	if client, err := x.cc.MasterForKey(ctx, c.route); err == nil {
		c.node = client.Options().Addr
	}
	sendEach(ctx, x.cc, []*call{c})
}

// worthRetry reports whether a failed call may succeed if sent again now.
func (x *clusterExec) worthRetry(ctx context.Context, c *call) bool {
	switch {
	case redirected(c.err):
		c.redirect = true
		return true
	case moving(c.err), redis.IsLoadingError(c.err), redis.IsMasterDownError(c.err):
		return true // may pass whatever the slot map
	case nodeDown(c.err):
		// Only if the reloaded map now routes the group elsewhere.
		client, err := x.cc.MasterForKey(ctx, c.route)
		return err == nil && ctx.Err() == nil && client.Options().Addr != c.node
	}
	return false
}

// pause waits d if ctx's deadline (wall clock, as go-redis's) leaves 2d, and
// reports if it did.
func (x *clusterExec) pause(ctx context.Context, d time.Duration) bool {
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < 2*d {
		return false
	}
	return x.clock.Wait(ctx, nil, d) == nil
}

type nodeCalls struct {
	client *redis.Client
	br     *breaker.Breaker
	ticket breaker.Ticket
	calls  []*call
}

// send sends one pipeline per master at once, and redirected calls through
// the ClusterClient.
func (x *clusterExec) send(ctx context.Context, calls []*call, retry bool) {
	var direct []*call
	var nodes []*nodeCalls
	byNode := make(map[string]*nodeCalls, 4) // br nil: the node's breaker is open
	for _, c := range calls {
		if retry { // go-redis keeps a command's reply and slot
			c.cmd = redis.NewCmd(ctx, c.cmd.Args()...)
		}
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
			br := x.breaker(addr)
			if ticket, ok := br.Allow(); ok {
				nc.br, nc.ticket = br, ticket
			} else {
				x.degraded()
			}
			byNode[addr] = nc
			nodes = append(nodes, nc)
		}
		if nc.br == nil && !c.paced {
			c.err = errBreakerOpen
			continue
		}
		nc.calls = append(nc.calls, c)
	}
	var wg sync.WaitGroup
	for _, nc := range nodes {
		if len(nc.calls) > 0 {
			wg.Go(func() { sendPipeline(ctx, nc.client, nc.calls) })
		}
	}
	if len(direct) > 0 {
		wg.Go(func() { sendEach(ctx, x.cc, direct) })
	}
	wg.Wait()

	stale := false
	for _, nc := range nodes {
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
					// A retry runs on what is left of the call's time.
					outcome = breaker.Unknown
				}
			}
		}
		if nc.br != nil { // paced calls sent through an open breaker tell it nothing
			nc.br.Done(nc.ticket, outcome)
		}
	}
	for _, c := range direct {
		stale = stale || nodeDown(c.err) || moving(c.err)
	}
	if stale {
		x.degraded()
	}
}

func (x *clusterExec) breaker(addr string) *breaker.Breaker {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := x.nodes[addr]
	if n == nil {
		// Only masters of the current map are routed to.
		n = &clusterNode{br: breaker.New(x.brCfg), master: true, seen: x.clock.Now()}
		x.nodes[addr] = n
	}
	return n.br
}

// degraded reloads the slot map now, and every refreshDegraded for degradedFor.
func (x *clusterExec) degraded() {
	now := x.clock.Now()
	if x.degradedUntil.Swap(now.Add(degradedFor).UnixNano()) < now.UnixNano() {
		wake(x.reload)
	}
}

// refresher reloads the slot map every refreshDegraded while degraded (woken
// at once), else refreshIdle.
func (x *clusterExec) refresher(ctx context.Context) {
	last := x.clock.Now()
	for x.clock.Wait(ctx, x.reload, refreshDegraded) == nil {
		if now := x.clock.Now(); now.UnixNano() >= x.degradedUntil.Load() && now.Sub(last) < refreshIdle {
			continue
		}
		x.refresh()
		last = x.clock.Now()
	}
}

// refresh reloads the slot map; a master that (re)joins gets a new breaker.
func (x *clusterExec) refresh() {
	ctx, cancel := context.WithTimeout(context.Background(), reloadTimeout)
	defer cancel()
	var mu sync.Mutex
	masters := map[string]*redis.Client{}
	// ForEachMaster begins with go-redis's only public reload of the map.
	err := x.cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		masters[c.Options().Addr] = c
		mu.Unlock()
		return nil
	})
	if err != nil {
		return
	}
	now := x.clock.Now()
	var joined []*redis.Client
	x.mu.Lock()
	first := x.mapped == nil
	for addr, c := range masters {
		n := x.nodes[addr]
		if n == nil || !n.master {
			n = &clusterNode{br: breaker.New(x.brCfg)}
			x.nodes[addr] = n
		}
		if x.mapped[addr] == nil {
			joined = append(joined, c)
		}
		n.master, n.seen = true, now
	}
	x.mapped = masters
	for addr, n := range x.nodes {
		if masters[addr] != nil {
			continue
		}
		n.master = false
		if now.Sub(n.seen) > forgetNode {
			delete(x.nodes, addr)
		}
	}
	x.mu.Unlock()
	if !first && x.joined != nil {
		for _, c := range joined {
			x.joined(ctx, c)
		}
	}
}

func (x *clusterExec) ping(ctx context.Context) {
	_ = x.cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		if x.breaker(c.Options().Addr).State() == breaker.Closed {
			_ = c.Ping(ctx).Err()
		}
		return nil
	})
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
