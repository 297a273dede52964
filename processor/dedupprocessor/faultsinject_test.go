package dedupprocessor

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/redistier"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/faultproxy"
)

// tierOps names the tier's scripts by their SHA1.
var tierOps = map[string]string{
	redistier.ScriptHash("claim"):            "claim", // claims and rechecks
	redistier.ScriptHash("commit"):           "commit",
	redistier.ScriptHash("release"):          "release",
	redistier.ScriptHash("renew"):            "renew", // of claims, stamping their records anew
	redistier.ScriptHash("renew-election"):   "renew",
	redistier.ScriptHash("shape"):            "", // the layout's shape, read at connect and now and then: not a claim's
	redistier.ScriptHash("elect"):            "elect",
	redistier.ScriptHash("confirm"):          "confirm",
	redistier.ScriptHash("release-election"): "unelect",
	redistier.ScriptHash("access"):           "", // the start's access check: no claim
}

// tierOp names what a command of the shared tier does: the op of its
// script, "script" for a script the tier does not have (the census fails
// the run then), "" for any other command (connection set-up, pings,
// CLUSTER SLOTS, ...).
func (r *faultRun) tierOp(c faultproxy.Command) string {
	sha := c.Script()
	if sha == "" {
		return ""
	}
	if op, ok := tierOps[sha]; ok && (op == "" || len(c.Args) >= 4) {
		return op
	}
	return "script"
}

// watch adds the census to a proxy: a rule that never fires and counts the
// tier's commands by op. A command that follows a faulted one on its
// connection fails with it (a dropped reply silences the connection, a cut
// ends it, a late command holds back those behind it: a Cluster pipeline
// carries several groups' claims): it is recorded as hit too.
func (r *faultRun) watch(p *faultproxy.Proxy) {
	r.addRule(p, &faultproxy.Rule{
		Fault: faultproxy.DelayReply(0),
		Match: func(cmd faultproxy.Command) bool {
			op := r.tierOp(cmd)
			if op == "" {
				return false
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			r.census[op]++
			if ep := r.tainted[taintKey{p, cmd.Conn}]; ep != nil {
				r.firings = append(r.firings, firing(ep, cmd, op, true))
			}
			return false
		},
	})
}

// taintKey is a connection through a proxy.
type taintKey struct {
	p    *faultproxy.Proxy
	conn int
}

// firing records a command that fault episode ep hit.
func firing(ep *faultEpisode, cmd faultproxy.Command, op string, down bool) faultFiring {
	f := faultFiring{ep: ep, at: time.Now(), op: op, key: cmd.Args[3], down: down}
	n, _ := strconv.Atoi(cmd.Args[2])
	switch argv := cmd.Args[min(3+n, len(cmd.Args)):]; {
	case op == "claim" && len(argv) == 5: // ARGV: id, lease, window, stop, the fields packed
		for packed := argv[4]; len(packed) >= faultFieldSize; packed = packed[faultFieldSize:] {
			f.fields = append(f.fields, packed[:faultFieldSize])
		}
	case op == "elect" && len(argv) >= 2: // ARGV: replica, token, ...
		f.token = argv[1]
	}
	return f
}

// pendingFor reports whether a claim's status key or an election's value
// is pending, for the election under the token of f: a batch's claim has
// a status key of its own, while the next batch of a cluster may hold its
// election pending rightly. An election's value is "p", the replica's 16
// bytes, the token's 16 bytes, and more.
func pendingFor(f faultFiring, v string) bool {
	if !strings.HasPrefix(v, "p") {
		return false
	}
	return f.op != "elect" || len(v) >= 33 && v[17:33] == f.token
}

func (r *faultRun) addRule(p *faultproxy.Proxy, rule *faultproxy.Rule) {
	p.Add(rule)
	r.mu.Lock()
	r.rules = append(r.rules, ruleOn{p, rule})
	r.mu.Unlock()
}

// faultEpisode is one fault of the schedule as it happened.
type faultEpisode struct {
	kind     string
	scope    int // the collector whose way to Redis it hit; -1: every collector's
	node     int // the Cluster node; -1 on standalone
	from, to time.Time
	detail   string

	// What it may cause besides failed calls.
	down      bool       // Redis could not be reached at all from from to to
	dataLoss  bool       // Redis forgot its keys
	leases    bool       // renewals failed long enough that claims may outlive their lease
	breaker   bool       // enough calls failed in a row to open a breaker
	collector *collector // the collector that died or was shut down
}

// faultBreakerCooldown is how long a breaker opened by a burst of faults
// may stay open after it: the breaker's first cooldown, and its probe.
const faultBreakerCooldown = 5*time.Second + faultTimeout

// faultFiring is one command a fault hit.
type faultFiring struct {
	ep     *faultEpisode
	at     time.Time
	op     string
	key    string   // a script's first key: a claim's status key, an election's key
	fields []string // a claim's records, as the tier's fields
	token  string   // an election's token
	down   bool     // the command failed (timed out, was cut, or landed late); else it was only slow
}

// faultProbe is what Redis held under the key of a claim or election
// whose answer was lost or late, once every request that could hold it was
// answered.
type faultProbe struct {
	f        faultFiring
	answered time.Time // when the last request in flight at its collector was
	at       time.Time // when it was read for the verdict
	pending  bool
	until    time.Time // how long it then stayed pending (zero: past three leases)
}

func (r *faultRun) episode(ep *faultEpisode) *faultEpisode {
	r.mu.Lock()
	r.episodes = append(r.episodes, ep)
	r.mu.Unlock()
	return ep
}

// hit adds to p a rule that puts fault on the tier commands of ops (any
// tier command if ops is empty) that fire says to, recording each (and
// sending it to fired, if not nil and not full).
func (r *faultRun) hit(p *faultproxy.Proxy, ep *faultEpisode, ops []string, fault faultproxy.Fault, down bool, fire func() bool, fired ...chan<- faultFiring) {
	r.addRule(p, &faultproxy.Rule{
		Fault: fault,
		Match: func(cmd faultproxy.Command) bool {
			op := r.tierOp(cmd)
			if op == "" || len(ops) > 0 && !slices.Contains(ops, op) || !fire() {
				return false
			}
			f := firing(ep, cmd, op, down)
			r.mu.Lock()
			r.firings = append(r.firings, f)
			if down {
				r.tainted[taintKey{p, cmd.Conn}] = ep
			}
			r.mu.Unlock()
			for _, ch := range fired {
				select {
				case ch <- f:
				default:
				}
			}
			return true
		},
	})
}

// probe follows the claim or election a fault hit (its key is a claim's
// status key, or an election's key; "p..." is pending): once the command
// has landed (late after it was sent) and every request that was in flight
// at its collector has been answered, it waits for the key to stop being
// pending, for faultCommitSlack at most. A collector that died meanwhile
// leaves its claims pending for the lease: no verdict then.
func (r *faultRun) probe(fired <-chan faultFiring, late time.Duration) {
	var f faultFiring
	select {
	case f = <-fired:
	case <-time.After(time.Until(r.start.Add(faultSendFor))):
		return
	}
	time.Sleep(time.Until(f.at.Add(late + faultTol))) // until it landed
	settled := func() (answered, died bool) {
		r.mu.Lock()
		defer r.mu.Unlock()
		for a := range r.inFlight {
			if f.ep.covers(a.c) && !a.start.After(f.at) {
				return false, false
			}
		}
		for _, c := range r.collectors {
			if f.ep.covers(c) && c.died {
				return true, true
			}
		}
		return true, false
	}
	died := false
	if !testkit.Until(time.Now().Add(faultHang), func() bool {
		answered, d := settled()
		died = d
		return answered
	}) || died {
		return
	}
	p := faultProbe{f: f, answered: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), faultHang)
	defer cancel()
	var getErr error
	clusterDown := false
	settledBy := func(end time.Time) bool {
		return testkit.Until(end, func() bool {
			v, err := r.redis().Get(ctx, f.key).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				if strings.HasPrefix(err.Error(), "CLUSTERDOWN") {
					clusterDown = true
					return false // the Cluster is failing over: ask again
				}
				getErr = err
				return true
			}
			return !pendingFor(f, v)
		})
	}
	// The verdict: settled within faultCommitSlack of the answer or not;
	// then, for its message, how long it stays pending.
	if settledBy(p.answered.Add(faultCommitSlack)) {
		p.at = time.Now()
	} else {
		p.at, p.pending = time.Now(), true
		if settledBy(p.answered.Add(3 * faultLease)) {
			p.until = time.Now()
		}
	}
	if getErr != nil {
		r.t.Errorf("probe of %s: %v", readableKey(f.key), getErr)
		return
	}
	if clusterDown && p.pending {
		// Its commit or release could not land while the Cluster was down.
		r.t.Logf("probe of %s: the Cluster was down meanwhile: a stall cannot be told from the outage", readableKey(f.key))
		return
	}
	r.mu.Lock()
	r.probes = append(r.probes, p)
	r.mu.Unlock()
}

// times fires n times. A rule's Match runs under its proxy's lock, so no
// other lock is needed.
func times(n int) func() bool {
	return func() bool {
		n--
		return n >= 0
	}
}

// after fires once, on the first command after one was sent to fired.
func after(fired <-chan faultFiring) func() bool {
	armed, done := false, false
	return func() bool {
		if !armed {
			select {
			case <-fired:
				armed = true
			default:
			}
		}
		if armed && !done {
			done = true
			return true
		}
		return false
	}
}

// while fires with probability p until stop is closed.
func while(rng *rand.Rand, p float64, stop <-chan struct{}) func() bool {
	return func() bool {
		select {
		case <-stop:
			return false
		default:
			return rng.Float64() < p
		}
	}
}

// The faults a schedule draws from: name, weight, and whether a run has at
// most one (each keeps Redis or a collector away for seconds).
type faultKind struct {
	name   string
	weight int
	once   bool
}

var faultKinds = map[string][]faultKind{
	"standalone": {
		{"slow", 2, false}, {"drop-claim-reply", 2, false}, {"drop-reply", 1, false}, {"late-claim", 2, false},
		{"cut", 1, false}, {"cut-all", 1, false}, {"renew-blip", 1, false}, {"renewals-blocked", 1, false},
		{"restart", 1, true}, {"shutdown", 1, true}, {"crash", 1, true},
	},
	"cluster": {
		{"slow", 2, false}, {"drop-claim-reply", 2, false}, {"drop-reply", 1, false}, {"late-claim", 2, false},
		{"cut", 1, false}, {"cut-all", 1, false}, {"renew-blip", 1, false}, {"renewals-blocked", 1, false},
		{"restart", 1, true}, {"master-replies-dropped", 1, true}, {"shutdown", 1, true},
	},
}

// plannedFault is a fault of the schedule before it happens.
type plannedFault struct {
	at     time.Duration
	kind   string
	target int // a collector slot (standalone) or a node
	rng    *rand.Rand
}

// makePlan draws the run's fault schedule from the seed: 5 to 8 faults in
// the first faultSendFor, the last a second before its end; then the
// scenarios (planScenarios), and the window the run starts with.
func (r *faultRun) makePlan() []plannedFault {
	rng := faultRand(r.seed, 5)
	kinds := faultKinds[r.env.topology]
	if r.signal == "metrics" {
		kinds = append(slices.Clip(kinds), faultKind{"drop-elect-reply", 2, false}, faultKind{"late-elect", 1, false})
	}
	used := map[string]bool{}
	var plan []plannedFault
	for i := range 5 + rng.IntN(4) {
		total := 0
		for _, k := range kinds {
			if !k.once || !used[k.name] {
				total += k.weight
			}
		}
		pick := rng.IntN(total)
		var kind faultKind
		for _, k := range kinds {
			if k.once && used[k.name] {
				continue
			}
			if pick -= k.weight; pick < 0 {
				kind = k
				break
			}
		}
		used[kind.name] = true
		plan = append(plan, plannedFault{
			at:     300*time.Millisecond + time.Duration(rng.Int64N(int64(faultSendFor-1300*time.Millisecond))),
			kind:   kind.name,
			target: rng.IntN(3),
			rng:    faultRand(r.seed, 6, uint64(i)),
		})
	}
	plan = append(plan, r.planScenarios()...)
	slices.SortFunc(plan, func(a, b plannedFault) int { return int(a.at - b.at) })
	return plan
}

// inject plays the schedule; the WaitGroup is done when every fault is
// over (the collectors taken down are up again).
func (r *faultRun) inject() *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Go(func() {
		for _, f := range r.plan {
			time.Sleep(time.Until(r.start.Add(f.at))) // the schedule itself
			r.apply(f, &wg)
		}
	})
	return &wg
}

// target returns the proxy a fault on target goes through, and the scope
// of the episode: on standalone, the current incarnation of the target
// slot's collector (or of another if it is down); on a Cluster, the node's.
func (r *faultRun) target(target int) (*faultproxy.Proxy, int, int) {
	if r.env.cluster != nil {
		return r.env.cluster.Proxies[target], -1, target
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range faultCollectors {
		if c := r.live[(target+i)%faultCollectors]; c != nil {
			return c.proxy, c.id, -1
		}
	}
	return nil, 0, -1
}

func (r *faultRun) apply(f plannedFault, wg *sync.WaitGroup) {
	rng := f.rng
	now := time.Now()
	switch f.kind {
	case "restart":
		ep := &faultEpisode{kind: f.kind, scope: -1, node: -1, down: true, dataLoss: true, leases: true, breaker: true}
		if r.env.cluster != nil {
			ep.node = f.target
		}
		ep.from = now
		r.episode(ep)
		if r.env.cluster != nil {
			// A restarted master refuses writes (CLUSTERDOWN) until the
			// Cluster took it back: Redis down for as long.
			r.env.cluster.Servers.Nodes[f.target].Restart()
			r.env.cluster.Servers.WaitHealthy()
		} else {
			r.env.server.Restart()
		}
		r.mu.Lock()
		ep.to = time.Now()
		r.mu.Unlock()
		return
	case "shutdown", "crash":
		r.takeDown(f, wg)
		return
	case "settings-longer", "settings-shorter":
		wg.Go(func() { r.reconfigure(f) })
		return
	case "long-export":
		r.longExports(f)
		return
	case "burst":
		wg.Go(func() { r.burst(f) })
		return
	case "scripts-fail":
		wg.Go(func() { r.scriptsFail(f) })
		return
	}
	p, scope, node := r.target(f.target)
	if p == nil {
		return
	}
	ep := &faultEpisode{kind: f.kind, scope: scope, node: node, from: now}
	var stop chan struct{}
	window := func(d time.Duration) {
		stop = make(chan struct{})
		wg.Go(func() {
			time.Sleep(d) // the fault's length
			close(stop)
			r.mu.Lock()
			ep.to = time.Now()
			r.mu.Unlock()
		})
	}
	switch f.kind {
	case "slow": // slow is not down: well within the timeout
		d := time.Duration(5+rng.IntN(int(faultTimeout/4/time.Millisecond-5))) * time.Millisecond
		ep.detail = fmt.Sprintf("replies %v late, half of them", d)
		window(time.Second + time.Duration(rng.Int64N(int64(time.Second))))
		r.hit(p, r.episode(ep), nil, faultproxy.DelayReply(d), false, while(rng, 0.5, stop))
	case "drop-claim-reply", "drop-elect-reply":
		op := strings.TrimSuffix(strings.TrimPrefix(f.kind, "drop-"), "-reply")
		fired := make(chan faultFiring, 1)
		r.hit(p, r.episode(ep), []string{op}, faultproxy.DropReply(), true, times(1), fired)
		wg.Go(func() { r.probe(fired, 0) })
	case "drop-reply":
		n := 1 + rng.IntN(2)
		ep.detail = fmt.Sprintf("%d replies", n)
		r.hit(p, r.episode(ep), nil, faultproxy.DropReply(), true, times(n))
	case "late-claim", "late-elect": // lands after its call timed out, and after its release
		op := strings.TrimPrefix(f.kind, "late-")
		d := faultTimeout*3/2 + time.Duration(rng.Int64N(int64(faultTimeout*3/2)))
		ep.detail = fmt.Sprintf("lands %v late", d.Round(time.Millisecond))
		fired := make(chan faultFiring, 1)
		r.hit(p, r.episode(ep), []string{op}, faultproxy.DelayRequest(d), true, times(1), fired)
		wg.Go(func() { r.probe(fired, d) })
	case "cut":
		fault, what := faultproxy.CutBefore(), "before"
		if rng.IntN(2) == 0 {
			fault, what = faultproxy.CutAfter(), "after"
		}
		ep.detail = "the connection cut " + what + " a command"
		r.hit(p, r.episode(ep), nil, fault, true, times(1))
	case "cut-all":
		ep.to = now
		r.episode(ep)
		r.mu.Lock()
		r.firings = append(r.firings, faultFiring{ep: ep, at: now, down: true})
		r.mu.Unlock()
		p.CutAll()
	case "renew-blip":
		// One renewal's answer lost, then the next commit's, so that the
		// writer's next round runs a timeout late: the renewal due next
		// must still land within the lease.
		ep.detail = "a renewal's reply, then the next commit's"
		fired := make(chan faultFiring, 1)
		r.hit(p, r.episode(ep), []string{"renew"}, faultproxy.DropReply(), true, times(1), fired)
		r.hit(p, ep, []string{"commit"}, faultproxy.DropReply(), true, after(fired))
	case "renewals-blocked": // for longer than the lease
		// Every renewal failing in a row may open the breaker, which then
		// skips the claims too.
		ep.leases, ep.breaker = true, true
		window(faultLease*3/2 + time.Duration(rng.Int64N(int64(faultLease/2))))
		r.hit(p, r.episode(ep), []string{"renew"}, faultproxy.CutBefore(), true, while(rng, 1, stop))
	case "master-replies-dropped":
		ep.leases, ep.breaker = true, true
		window(time.Second)
		r.hit(p, r.episode(ep), nil, faultproxy.DropReply(), true, while(rng, 0.5, stop))
	default:
		r.t.Fatalf("unknown fault %q", f.kind)
	}
	if stop == nil {
		r.mu.Lock()
		ep.to = ep.from // an episode of single commands: its firings tell when
		r.mu.Unlock()
	}
}

// takeDown shuts down (gracefully, batches in flight included) or kills a
// collector, then starts a new incarnation of it on the same configuration
// a while later. At least two collectors stay up.
func (r *faultRun) takeDown(f plannedFault, wg *sync.WaitGroup) {
	r.mu.Lock()
	var c *collector
	up := 0
	for i := range faultCollectors {
		if x := r.live[(f.target+i)%faultCollectors]; x != nil {
			up++
			if c == nil {
				c = x
			}
		}
	}
	r.mu.Unlock()
	if up < faultCollectors {
		return
	}
	died := f.kind == "crash"
	r.down(c, died)
	ep := r.episode(&faultEpisode{kind: f.kind, scope: c.id, node: -1, from: c.downAt, to: c.downAt, collector: c})
	if died {
		ep.down, ep.leases = true, true
		c.proxy.Refuse(true) // its connections die with it
		c.proxy.CutAll()
		close(c.crashed)
	}
	gap := 300*time.Millisecond + time.Duration(f.rng.Int64N(int64(500*time.Millisecond)))
	wg.Go(func() {
		if !died {
			r.stop(c)
		}
		time.Sleep(gap) // down for a while
		r.startCollector(c.slot)
	})
}

// The scenarios a run may add to its faults, each drawn on its own with
// probability 1/2 (from a stream of the seed of its own, so that a seed's
// other faults stay the ones it always had), where it applies:
//
//   - settings: a collector shut down and started again on the same Redis
//     with a window longer than the run's, later one with a shorter (and, on
//     a Cluster, another redis.cluster_slots each time), while copies race
//     between collectors;
//   - burst (logs): two extra senders send, for a while, requests of
//     hundreds of new records each, each racing with its copy at another
//     collector, so that the shards split (tens of thousands of records)
//     while claims race;
//   - long-export: a collector's next few exports last one to three
//     windows, so that a claim is held only by its renewals while copies
//     of its records arrive;
//   - scripts-fail: Redis refuses writes (maxmemory 1, noeviction) on the
//     standalone server or one Cluster node for a while, then, for another
//     while, the scripts that change a group's record count fail after
//     their writes (its shape's count is not a number).
//
// A run with settings or long-export has a window of seconds (the window
// must pass within the run); every other run the default's.
var faultScenarios = []string{"settings", "burst", "long-export", "scripts-fail"}

// planScenarios draws the run's scenarios and its window.
func (r *faultRun) planScenarios() []plannedFault {
	r.window = defaultConfig().Window
	var plan []plannedFault
	at := func(rng *rand.Rand, from, to time.Duration) time.Duration {
		return from + time.Duration(rng.Int64N(int64(to-from)))
	}
	for k, name := range faultScenarios {
		rng := faultRand(r.seed, 8, uint64(k))
		if rng.IntN(2) == 0 || name == "burst" && r.signal != "logs" {
			continue
		}
		f := plannedFault{kind: name, target: rng.IntN(3), rng: faultRand(r.seed, 9, uint64(k))}
		switch name {
		case "settings":
			longer, shorter := f, f
			longer.kind, longer.at = "settings-longer", at(rng, 500*time.Millisecond, 1500*time.Millisecond)
			shorter.kind, shorter.at = "settings-shorter", at(rng, 2*time.Second, 3*time.Second)
			shorter.target, shorter.rng = rng.IntN(3), faultRand(r.seed, 9, uint64(k), 1)
			plan = append(plan, longer, shorter)
			continue
		case "long-export":
			f.at = at(rng, 300*time.Millisecond, 1500*time.Millisecond)
		case "burst":
			f.at = at(rng, 300*time.Millisecond, 2*time.Second)
		case "scripts-fail":
			f.at = at(rng, 500*time.Millisecond, 3*time.Second)
		}
		plan = append(plan, f)
	}
	for _, f := range plan {
		if strings.HasPrefix(f.kind, "settings") || f.kind == "long-export" {
			rng := faultRand(r.seed, 8, 100)
			r.window = faultShortWindow + time.Duration(rng.Int64N(int64(500*time.Millisecond)))
			break
		}
	}
	return plan
}

// scenarios lists what the run's scenarios did, for its summary.
func (r *faultRun) scenarios() string {
	var out []string
	for _, ep := range r.episodes {
		switch ep.kind {
		case "settings-longer", "settings-shorter", "long-export", "burst", "oom", "script-error":
			out = append(out, fmt.Sprintf("%s at %s: %s", ep.kind, r.rel(ep.from), ep.detail))
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// reconfigure shuts a collector down gracefully and starts a new
// incarnation with a longer or shorter window than the run's (and, on a
// Cluster, a redis.cluster_slots drawn anew), on the same Redis and key
// prefix. It waits until every collector is up: at least two stay up.
func (r *faultRun) reconfigure(f plannedFault) {
	rng := f.rng
	set := faultSettings{window: r.window, slots: faultDefaultSlots}
	if f.kind == "settings-longer" {
		set.window = r.window + time.Second + time.Duration(rng.Int64N(int64(time.Second)))
	} else {
		set.window = faultMinWindow + time.Duration(rng.Int64N(int64(r.window-faultMinWindow)))
	}
	if r.env.cluster != nil {
		slots := []int{1, 3, 6, 24, faultDefaultSlots}
		if f.kind == "settings-longer" { // at least one change of cluster_slots
			slots = slots[:4]
		}
		set.slots = slots[rng.IntN(len(slots))]
	}
	gap := 100*time.Millisecond + time.Duration(rng.Int64N(int64(200*time.Millisecond)))
	var c *collector
	testkit.Until(time.Now().Add(2*time.Second), func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, x := range r.live {
			if x == nil {
				return false
			}
		}
		c = r.live[f.target]
		r.settings[c.slot] = set
		c.downAt = time.Now()
		r.live[c.slot] = nil
		return true
	})
	if c == nil {
		r.episode(&faultEpisode{kind: f.kind, scope: -1, node: -1, from: time.Now(), to: time.Now(), detail: "skipped: a collector stayed down"})
		return
	}
	ep := r.episode(&faultEpisode{kind: f.kind, scope: c.id, node: -1, from: c.downAt, to: c.downAt, collector: c,
		detail: fmt.Sprintf("collector %d (window %v, cluster_slots %d) restarted with window %v, cluster_slots %d", c.id, c.window, c.slots, set.window, set.slots)})
	r.stop(c)
	time.Sleep(gap) // down for a while
	r.startCollector(c.slot)
	if f.kind == "settings-shorter" {
		n := r.lateCopies(rng)
		r.mu.Lock()
		ep.detail += fmt.Sprintf("; then %d requests sent again within their windows", n)
		r.mu.Unlock()
	}
}

// Late copies: for faultLateFor, every faultLatePace, a request delivered
// a while ago, still within the window of the collector that delivered it
// by faultLateMargin at least, is sent again (as a sender whose
// acknowledgement was lost would), to whichever collector the load
// balancer picks: each of its records must be dropped, also by a collector
// whose window is shorter than the record's age.
const (
	faultLateFor    = time.Second
	faultLatePace   = 100 * time.Millisecond
	faultLateMargin = 400 * time.Millisecond
)

// lateCopies sends the late copies of the settings scenario, and returns
// how many.
func (r *faultRun) lateCopies(rng *rand.Rand) (sent int) {
	var copies sync.WaitGroup
	for start := time.Now(); time.Since(start) < faultLateFor; time.Sleep(faultLatePace) {
		now := time.Now()
		r.mu.Lock()
		var old []*faultExport
		for _, e := range r.exports {
			if e.delivered && !e.end.IsZero() && e.a.req.n < faultRequests && now.Sub(e.end) > 300*time.Millisecond && now.Sub(e.end) < e.c.window-faultLateMargin {
				old = append(old, e)
			}
		}
		r.mu.Unlock()
		if len(old) == 0 {
			continue
		}
		e := old[rng.IntN(len(old))]
		copies.Go(func() { r.deliver(e.a.req, e.a.copy) })
		sent++
	}
	copies.Wait()
	return sent
}

// longExports makes the next 2 to 4 first calls of a collector's exporter
// last longer than its window, up to three windows (at most three seconds
// past it).
func (r *faultRun) longExports(f plannedFault) {
	n := 2 + f.rng.IntN(3)
	r.mu.Lock()
	var c *collector
	for i := range faultCollectors {
		if c = r.live[(f.target+i)%faultCollectors]; c != nil {
			break
		}
	}
	if c != nil {
		c.longLeft, c.longRand = n, f.rng
	}
	r.mu.Unlock()
	if c == nil {
		return
	}
	r.episode(&faultEpisode{kind: f.kind, scope: c.id, node: -1, from: time.Now(), to: time.Now(),
		detail: fmt.Sprintf("collector %d's next %d exports last %v to %v", c.id, n, c.window, c.window+min(2*c.window, faultLongMost))})
}

// faultLongMost bounds how much longer than its window a long export is.
const faultLongMost = 3 * time.Second

// Bursts: each of faultBurstSenders sends requests of faultBurstSize
// records on average for faultBurstFor, each with its copy at another
// collector at once, and about one record in 20 a copy of one of its last
// request's.
const (
	faultBurstSenders = 2
	faultBurstSize    = 800
	faultBurstFor     = 1500 * time.Millisecond
)

// burst sends the burst scenario's requests, as the senders do. On 2
// busy cores under -race, the load may slow Redis and the collectors past
// the timeout: while the burst lasts, a call may fail (Redis counts as
// down, and a breaker may open), so under on_error: pass its records are
// delivered unchecked (and must be counted so), under refuse refused, and
// a copy gets through under refuse only if something else explains it.
func (r *faultRun) burst(f plannedFault) {
	ep := r.episode(&faultEpisode{kind: f.kind, scope: -1, node: -1, from: time.Now(), down: true, breaker: true})
	records := 0
	var senders sync.WaitGroup
	for s := range faultBurstSenders {
		rng := faultRand(r.seed, 10, uint64(s))
		senders.Go(func() {
			var last []int
			for start := time.Now(); time.Since(start) < faultBurstFor; {
				size := faultBurstSize/2 + rng.IntN(faultBurstSize)
				ids := make([]int, 0, size)
				r.mu.Lock()
				n := faultRequests + r.bursts
				r.bursts++
				for range size {
					if len(last) > 0 && rng.IntN(20) == 0 {
						ids = append(ids, last[rng.IntN(len(last))])
						continue
					}
					ids = append(ids, faultBurstIDs+records)
					records++
				}
				r.mu.Unlock()
				req := &faultRequest{n: n, records: [2][]int{ids, ids}, racing: true, cluster: -1}
				last = ids
				var copies sync.WaitGroup
				copies.Go(func() { r.deliver(req, 1) })
				r.deliver(req, 0)
				copies.Wait()
			}
		})
	}
	senders.Wait()
	r.mu.Lock()
	ep.to, ep.detail = time.Now(), fmt.Sprintf("%d requests, %d new records", r.bursts, records)
	r.mu.Unlock()
}

// scriptsFail makes the scripts fail on the standalone server or one
// Cluster node: first Redis refuses writes (maxmemory, noeviction), which
// fails a script at its first write (Redis never stops a script after it
// wrote); then a group's record count, in its shape, is not a number, so
// every script that changes it (a claim of new records, a release of some)
// fails after its writes: they stay, Redis does not roll them back.
func (r *faultRun) scriptsFail(f plannedFault) {
	rng := f.rng
	node := -1
	var client *redis.Client
	if r.env.cluster != nil {
		node = f.target
		client = r.env.cluster.Servers.Nodes[node].Client()
	} else {
		client = r.env.server.Client()
	}
	ctx := context.Background() // the server's own client, closed with the test

	oom := &faultEpisode{kind: "oom", scope: -1, node: node, down: true, breaker: true, leases: true}
	d := 300*time.Millisecond + time.Duration(rng.Int64N(int64(400*time.Millisecond)))
	policy := "noeviction"
	if v, err := client.ConfigGet(ctx, "maxmemory-policy").Result(); err == nil && v["maxmemory-policy"] != "" {
		policy = v["maxmemory-policy"]
	}
	// Redis is shared by the topology's runs: a run that stops here leaves
	// it taking writes again.
	r.t.Cleanup(func() {
		_ = client.ConfigSet(context.Background(), "maxmemory", "0").Err()
		_ = client.ConfigSet(context.Background(), "maxmemory-policy", policy).Err()
	})
	oom.from = time.Now()
	r.episode(oom)
	err := errors.Join(client.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(), client.ConfigSet(ctx, "maxmemory", "1").Err())
	time.Sleep(d) // the fault's length
	err = errors.Join(err, client.ConfigSet(ctx, "maxmemory", "0").Err(), client.ConfigSet(ctx, "maxmemory-policy", policy).Err())
	r.mu.Lock()
	oom.to, oom.detail = time.Now(), fmt.Sprintf("writes refused for %v", d.Round(time.Millisecond))
	if err != nil {
		oom.detail += fmt.Sprintf(" (%v)", err)
	}
	r.mu.Unlock()

	time.Sleep(100 * time.Millisecond)
	broken := &faultEpisode{kind: "script-error", scope: -1, node: node, down: true, breaker: true}
	d = 300*time.Millisecond + time.Duration(rng.Int64N(int64(400*time.Millisecond)))
	var shapes []string
	iter := client.Scan(ctx, 0, r.prefix+"*3:s", 1000).Iterator()
	for iter.Next(ctx) {
		shapes = append(shapes, iter.Val())
	}
	broken.from = time.Now()
	r.episode(broken)
	counts := map[string]string{}
	for _, k := range shapes {
		v, err := faultBreakCount.Run(ctx, client, []string{k}).Text()
		if err == nil && v != "" {
			counts[k] = v
		}
	}
	time.Sleep(d) // the fault's length
	for k, v := range counts {
		_ = faultMendCount.Run(ctx, client, []string{k}, v).Err()
	}
	r.mu.Lock()
	broken.to = time.Now()
	broken.detail = fmt.Sprintf("the record count of %d of %d groups not a number for %v", len(counts), len(shapes), d.Round(time.Millisecond))
	if err := iter.Err(); err != nil {
		broken.detail += fmt.Sprintf(" (%v)", err)
	}
	r.mu.Unlock()
}

// faultBreakCount sets a group's record count to a word, answering what it
// was; faultMendCount puts it back, unless Redis lost it meanwhile. The
// scripts that would have changed it failed: it is still right.
var (
	faultBreakCount = redis.NewScript(`
local n = redis.call('HGET', KEYS[1], 'n')
if not n then return '' end
redis.call('HSET', KEYS[1], 'n', 'broken')
return n`)
	faultMendCount = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'n') == 'broken' then redis.call('HSET', KEYS[1], 'n', ARGV[1]) end
return 1`)
)
