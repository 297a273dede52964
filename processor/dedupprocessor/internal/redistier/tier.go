// Package redistier is the dedup processor's shared tier: it claims record
// digests in Redis (standalone, Cluster or Sentinel) so that collectors
// sharing one Redis let exactly one copy of a record through.
//
// A claim is two-phase: Claim marks a batch's digests pending under the
// batch's token, then Commit makes them hold for the window or Release frees
// them; a claim neither committed nor released ends with its lease. The
// protocol is argued in the processor's internal/claim/consume.go and README; the keys are
// in layout.go. Start asks the endpoints their topology (discover.go) and
// reads the layout's shape, which every collector sharing a key prefix
// shares through Redis.
package redistier

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/breaker"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/clock"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

// Operation names and results passed to Options.Observe.
const (
	OpClaim   = "claim"
	OpRecheck = "recheck" // a claim of records a batch waited for (Claim with recheck)
	OpCommit  = "commit"
	OpRelease = "release"
	OpRenew   = "renew" // lease renewals of claims whose batches are downstream

	ResultOK      = "ok"
	ResultError   = "error" // also: the topology is not known yet
	ResultTimeout = "timeout"
	ResultSkipped = "skipped" // a node's breaker was open: nothing sent
	ResultLost    = "lost"    // a claim ended before its commit or renewal landed, or a write was given up
)

// Options configures a Tier.
type Options struct {
	// Endpoints: a standalone server, nodes of one Redis Cluster, or Sentinels.
	Endpoints  []string
	Mode       Mode   // ModeAuto (or empty) asks the endpoints at Start
	MasterName string // Sentinel only
	Username   string
	Password   string
	DB         int // 0 in a Cluster
	TLS        *tls.Config
	KeyPrefix  string // starts every key, as given
	// ClusterSlots is the number of hash tags, each one slot, a Cluster's
	// keys are spread over when this tier creates the layout; a layout
	// already in Redis keeps its own (layout.go). 0: 12.
	ClusterSlots int
	// Timeout bounds each try of a call, including a reload of the scripts
	// and the retries of groups whose slot moved; a claim that timed out is
	// tried again with twice the time, within a third of the lease
	// (patiently). Required, as are Window (counted from the commit) and
	// Lease (a pending claim's life without renewal).
	Timeout time.Duration
	Window  time.Duration
	Lease   time.Duration
	Breaker breaker.Config // one breaker per node; zero fields take defaults
	Clock   clock.Clock    // leases, retries, renewals, breakers, durations; nil: the wall clock
	// Observe is called, concurrently, per operation of a call with its worst
	// result and duration (0: none), and with ResultLost per claim lost.
	Observe func(op, result string, d time.Duration)
	// OnNewServer, if set, is called (from go-redis's connection setup) when
	// a server not seen before answers after the tier connected (see servers).
	OnNewServer func(runID string)
	// OnTopology, if set, gets the mode or the error a tier that got no answer
	// at Start learns later (a refusal, see Denied, included); OnWriteError
	// gets a writer flush's error.
	OnTopology   func(Mode, error)
	OnWriteError func(error)
	// OnShape, if set, is called when the tier finds the layout's shape in
	// Redis changed (its keys were deleted and another collector wrote it
	// anew) and adopts it.
	OnShape func(now, was Shape)
}

// Tier is a connection to the shared tier. It is safe for concurrent use.
type Tier struct {
	opts     Options
	leaseArg string // lease in ms, as a script argument
	winArg   string // window in ms, as a script argument

	conn    atomic.Pointer[conn]  // nil until the topology is known
	unknown atomic.Pointer[error] // why conn is nil

	w      writer
	bg     context.Context // the background work's; Close cancels it
	cancel context.CancelFunc
	wg     sync.WaitGroup
	shut   atomic.Bool // Close was called: calls fail
}

type conn struct {
	mode   Mode
	layout atomic.Pointer[layout]
	exec   executor
	srv    *servers
}

// New returns a Tier that has not asked Redis anything yet (config.go
// validates the options).
func New(opts Options) *Tier {
	opts.Mode = cmp.Or(opts.Mode, ModeAuto)
	opts.Clock = cmp.Or[clock.Clock](opts.Clock, clock.Wall{})
	if opts.Observe == nil {
		opts.Observe = func(string, string, time.Duration) {}
	}
	if opts.Breaker.Now == nil {
		opts.Breaker.Now = opts.Clock.Now
	}
	t := &Tier{
		opts:     opts,
		leaseArg: strconv.FormatInt(opts.Lease.Milliseconds(), 10),
		winArg:   strconv.FormatInt(opts.Window.Milliseconds(), 10),
		w:        writer{live: map[string][]*renewal{}, wake: make(chan struct{}, 1)},
	}
	t.bg, t.cancel = context.WithCancel(context.Background())
	notStarted := errors.New("the tier has not been started")
	t.unknown.Store(&notStarted)
	return t
}

// Start learns what the endpoints are and connects, or fails if they cannot
// work (see decide). If none answers, it connects as Mode, or waits for them.
func (t *Tier) Start(ctx context.Context) error {
	if err := t.discoverAndConnect(ctx); err != nil {
		if !errors.Is(err, errNoAnswer) {
			return err
		}
		t.unknown.Store(&err)
		t.wg.Go(t.discoverLater)
	}
	t.wg.Go(func() { t.w.run(t) })
	return nil
}

// discoverAndConnect asks the endpoints what they are (or takes Mode) and
// connects; an error wrapping errNoAnswer means nothing answered.
func (t *Tier) discoverAndConnect(ctx context.Context) error {
	mode, err := t.discover(ctx)
	if errors.Is(err, errNoAnswer) && t.opts.Mode != ModeAuto {
		mode, err = t.opts.Mode, nil
	}
	if err != nil {
		return err
	}
	return t.connect(ctx, mode)
}

// discoverLater asks the endpoints, with a growing pause, until they answer.
func (t *Tier) discoverLater() {
	const first, most = 100 * time.Millisecond, 2 * time.Second
	wait := first
	reported := ""
	for t.opts.Clock.Wait(t.bg, nil, wait) == nil {
		wait = min(2*wait, most)
		err := t.discoverAndConnect(t.bg)
		if err == nil {
			if t.opts.OnTopology != nil {
				t.opts.OnTopology(t.Mode(), nil)
			}
			return
		}
		t.unknown.Store(&err)
		if (!errors.Is(err, errNoAnswer) || Denied(err)) && err.Error() != reported && t.opts.OnTopology != nil {
			reported = err.Error()
			t.opts.OnTopology("", err)
		}
	}
}

// connect builds the client of mode and reads the layout's shape (writing it
// if it is not there yet); it fails if Redis does not answer (errNoAnswer) or
// holds another layout.
func (t *Tier) connect(ctx context.Context, mode Mode) error {
	o := t.opts
	u := redis.UniversalOptions{
		// A copy: go-redis appends the Cluster nodes it learns, and tiers
		// share Endpoints.
		Addrs:       slices.Clip(slices.Clone(o.Endpoints)),
		MasterName:  o.MasterName,
		Username:    o.Username,
		Password:    o.Password,
		DB:          o.DB,
		TLSConfig:   o.TLS,
		DialTimeout: o.Timeout,
		// Each call's context bounds it: longer for a retry (patiently).
		ReadTimeout:           max(o.Timeout, t.renewEvery()),
		WriteTimeout:          max(o.Timeout, t.renewEvery()),
		PoolTimeout:           o.Timeout,
		ContextTimeoutEnabled: true,
		// One retry on a broken connection: every call is idempotent.
		MaxRetries:    1,
		DialerRetries: 1,
		// Plain Redis does not know this handshake: a failed command per new
		// connection.
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
	c := &conn{mode: mode, srv: &servers{seen: map[string]bool{}, fn: o.OnNewServer}}
	u.OnConnect = c.srv.onConnect
	proposed := Shape{Version: layoutVersion}
	switch mode {
	case ModeCluster:
		co := u.Cluster()
		co.DisableRoutingPolicies = true // the tier sends only EVAL, EVALSHA and SET of one slot each
		proposed.Tags = cmp.Or(o.ClusterSlots, defaultTags)
		c.exec = newClusterExec(redis.NewClusterClient(co), o.Breaker, o.Clock, c.srv.checkMaster)
	case ModeSentinel:
		c.exec = &singleExec{client: redis.NewFailoverClient(u.Failover()), name: o.MasterName, br: breaker.New(o.Breaker)}
	default:
		c.exec = &singleExec{client: redis.NewClient(u.Simple()), name: o.Endpoints[0], br: breaker.New(o.Breaker)}
	}
	pctx, cancel := context.WithTimeout(ctx, max(o.Timeout, minProbeTimeout))
	defer cancel()
	shape, err := t.readShape(pctx, c, proposed)
	if err != nil {
		_ = c.exec.close()
		return err
	}
	c.layout.Store(newLayout(o.KeyPrefix, shape))
	c.exec.ping(pctx) // the baseline: every master; a server not seen after it is reported
	c.srv.mu.Lock()
	c.srv.armed = true
	c.srv.mu.Unlock()
	t.conn.Store(c)
	return nil
}

// readShape returns the layout's shape in Redis, writing want if there is
// none; an error wrapping errNoAnswer if Redis did not answer or cannot serve
// yet (nodeDown, moving: loading, a failover, a Cluster recovering), another
// if it refuses or holds a layout this tier cannot work with.
func (t *Tier) readShape(ctx context.Context, c *conn, want Shape) (Shape, error) {
	key := shapeKey(t.opts.KeyPrefix)
	cl := &call{op: "shape", route: key, cmd: redis.NewCmd(ctx, "evalsha", shapeScript.Hash(), 1, key, want.Version, want.Tags)}
	c.exec.send1(ctx, cl)
	switch {
	case cl.err == nil:
	case Denied(cl.err):
		return Shape{}, refused{node: cl.node, err: cl.err}
	case !nodeDown(cl.err) && !moving(cl.err):
		return Shape{}, fmt.Errorf("reading the layout's shape (%s): %w", key, cl.err)
	default: // no answer yet: down, loading, or a Cluster failing over
		return Shape{}, fmt.Errorf("%w: reading the layout's shape (%s): %w", errNoAnswer, key, cl.err)
	}
	var got Shape
	vals, err := cl.cmd.StringSlice()
	if err == nil && len(vals) == 2 {
		got.Version, err = strconv.Atoi(vals[0])
		if err == nil {
			got.Tags, err = strconv.Atoi(vals[1])
		}
	}
	switch {
	case err != nil || len(vals) != 2:
		return Shape{}, fmt.Errorf("redis.key_prefix %q: %s holds %q, not a layout's shape; give the processor a key prefix of its own", t.opts.KeyPrefix, key, vals)
	case got.Version != layoutVersion:
		return Shape{}, fmt.Errorf("redis.key_prefix %q holds a key layout of version %d (%s) and this collector uses version %d; give it another redis.key_prefix, or delete the keys under the prefix once no collector of version %d uses it",
			t.opts.KeyPrefix, got.Version, key, layoutVersion, got.Version)
	case (got.Tags > 0) != (want.Tags > 0) || got.Tags < 0 || got.Tags > clusterSlots/4:
		return Shape{}, fmt.Errorf("redis.key_prefix %q holds a layout of %d hash tags (%s) that a %s cannot use; give the processor a key prefix of its own", t.opts.KeyPrefix, got.Tags, key, kindName[string(c.mode)])
	}
	return got, nil
}

// refused is a node's refusal of the tier's user (Denied): like no answer,
// it is asked again in the background, and it names the node.
type refused struct {
	node string
	err  error
}

func (r refused) Error() string   { return r.node + ": " + r.err.Error() }
func (r refused) Unwrap() []error { return []error{r.err, errNoAnswer} }

// checkShape reads the shape again (writing this tier's if it is gone) and
// adopts another one written meanwhile.
func (t *Tier) checkShape(ctx context.Context, c *conn) {
	l := c.layout.Load()
	got, err := t.readShape(ctx, c, l.shape)
	if err != nil || got == l.shape {
		return
	}
	c.layout.Store(newLayout(t.opts.KeyPrefix, got))
	if t.opts.OnShape != nil {
		t.opts.OnShape(got, l.shape)
	}
}

// Shape returns the layout's shape the tier uses, if connected.
func (t *Tier) Shape() (Shape, bool) {
	if c := t.conn.Load(); c != nil {
		return c.layout.Load().shape, true
	}
	return Shape{}, false
}

// Mode returns the topology the tier works with, or "" while it is unknown.
func (t *Tier) Mode() Mode {
	if c := t.conn.Load(); c != nil {
		return c.mode
	}
	return ""
}

// Close stops the tier after its batches: calls fail, renewals stop, the
// writes left get two tries.
func (t *Tier) Close() error {
	if t.shut.Swap(true) {
		return nil
	}
	t.w.mu.Lock()
	t.w.closed = true
	t.w.mu.Unlock()
	t.cancel()
	t.wg.Wait()
	if c := t.conn.Load(); c != nil {
		return c.exec.close()
	}
	return nil
}

// Breakers returns the state of every node's circuit breaker, if connected.
func (t *Tier) Breakers() []NodeBreaker {
	if c := t.conn.Load(); c != nil {
		return c.exec.breakers()
	}
	return nil
}

// NewToken returns a claim token, age then 64 random bits: tokens never
// collide, and tell when a batch began. Commit and Release act on all it holds.
func NewToken(age uint64) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], age)
	_, _ = rand.Read(b[8:]) // never fails (crypto/rand, Go >= 1.24)
	return string(b[:])
}

// Answer is the shared tier's answer for one digest of a claim.
type Answer uint8

const (
	Unavailable Answer = iota // the node failed; the claim may exist: settle it all the same
	Held                      // by a committed claim of another token: delivered
	Claimed                   // by this token
	Pending                   // by a pending claim of another token, still downstream
)

// Claim claims under token every digest of distinct ds that no live claim
// holds, in one round trip (one per node in a Cluster), and sets answers[i]
// for ds[i]. Of concurrent claims of a digest, anywhere, exactly one gets
// Claimed; atomicity is per script call (one group's digests, at most
// maxKeysPerScript). The claim is pending, its lease renewed in the
// background, and must end with Commit or Release whatever the answers. A
// failed group's digests answer Unavailable. Retrying with the same token
// is safe. It returns the ClaimID of a pending claim it met, if any. With
// recheck (OpRecheck), it claims one call at a time in (group, digest) order,
// stopping at the first digest held pending: the rest answer Pending,
// untried (see the processor's internal/claim/consume.go for why).
func (t *Tier) Claim(ctx context.Context, token string, ds []digest.Digest, answers []Answer, recheck bool) (holder string, err error) {
	return t.ClaimAges(ctx, token, ds, answers, nil, recheck)
}

// ClaimAges is Claim that also sets, if ages is not nil, ages[i] for each
// ds[i]: for a digest answered Held, the time since its holder's commit, to
// the second (Redis's clock); for the others, -1.
func (t *Tier) ClaimAges(ctx context.Context, token string, ds []digest.Digest, answers []Answer, ages []time.Duration, recheck bool) (holder string, err error) {
	op := OpClaim
	if recheck {
		op = OpRecheck
	}
	answers = answers[:len(ds)]
	clear(answers) // Unavailable
	if ages != nil {
		ages = ages[:len(ds)]
		for i := range ages {
			ages[i] = -1
		}
	}
	if len(ds) == 0 {
		return "", nil
	}
	c, err := t.connected(op)
	if err != nil {
		return "", err
	}
	l := c.layout.Load()
	b := prepare(l, ds, recheck, true)
	defer groupingPool.Put(b)
	calls := t.claimCalls(ctx, l, b, op, token, recheck)
	if !recheck {
		err = t.patiently(ctx, c, calls)
	}
	var held []*renewal
	for i, cl := range calls {
		if recheck {
			err = errors.Join(err, t.patiently(ctx, c, calls[i:i+1]))
		}
		if cl.err != nil {
			continue
		}
		owner, perr := readClaim(cl, answers, ages)
		if perr != nil {
			// The group stays Unavailable.
			err = errors.Join(err, fmt.Errorf("dedup: redis %s: %w", op, perr))
			continue
		}
		holder = cmp.Or(holder, owner)
		if slices.ContainsFunc(cl.idx, func(i int32) bool { return answers[i] == Claimed }) {
			key := l.statusKey(cl.group, token)
			if len(held) == 0 || held[len(held)-1].key != key {
				held = append(held, &renewal{token: token, key: key, group: &l.groups[cl.group]})
			}
			r := held[len(held)-1]
			r.fields = append(r.fields, *cl.fields)
		}
		if recheck && owner != "" { // stopped at a pending digest: the rest stay untried
			for _, rest := range calls[i+1:] {
				for _, k := range rest.idx {
					answers[k] = Pending
				}
			}
			break
		}
	}
	t.w.hold(token, held, t.opts.Clock.Now())
	return holder, err
}

// patiently runs calls within the timeout, then resends those that timed out,
// with twice the time each try, while their breaker allows and a third of the
// lease has not passed: a slow Redis costs latency, not an answer.
func (t *Tier) patiently(ctx context.Context, c *conn, calls []*call) error {
	start := t.opts.Clock.Now()
	timeout := t.opts.Timeout
	_ = t.run(ctx, c, calls, timeout)
	for ctx.Err() == nil {
		var again []*call
		for _, cl := range calls {
			if cl.err != nil && isTimeout(cl.err) {
				again = append(again, cl)
			}
		}
		timeout *= 2
		if len(again) == 0 || t.opts.Clock.Now().Add(timeout).Sub(start) > t.renewEvery() {
			break
		}
		for _, cl := range again {
			cl.cmd, cl.err = redis.NewCmd(ctx, cl.cmd.Args()...), nil
		}
		_ = t.run(ctx, c, again, timeout)
	}
	return t.failure(calls)
}

// readClaim sets a claim call's answers (and ages, if not nil) from its
// reply and returns the first pending claim met.
func readClaim(cl *call, answers []Answer, ages []time.Duration) (owner string, err error) {
	switch v := cl.cmd.Val().(type) {
	case int64: // all claimed
		if v != int64(len(cl.idx)) {
			return "", fmt.Errorf("claim script claimed %d of %d digests", v, len(cl.idx))
		}
		for _, i := range cl.idx {
			answers[i] = Claimed
		}
		return "", nil
	case string:
		if v == "r" {
			return "", errors.New("the claim's token was released before the claim arrived")
		}
		return "", fmt.Errorf("claim script answered %q", v)
	case []any:
		var codes, blocker, held string
		if len(v) == 3 {
			codes, _ = v[0].(string)
			blocker, _ = v[1].(string)
			held, _ = v[2].(string)
		}
		if len(codes) != len(cl.idx) {
			return "", fmt.Errorf("claim script answered %d results for %d digests", len(codes), len(cl.idx))
		}
		for j, i := range cl.idx {
			switch codes[j] {
			case '1':
				answers[i] = Claimed
			case '2', '3':
				answers[i] = Pending
			default:
				answers[i] = Held
				if len(held) >= 3 {
					if ages != nil {
						ages[i] = time.Duration(int(held[0])<<16|int(held[1])<<8|int(held[2])) * time.Second
					}
					held = held[3:]
				}
			}
		}
		return blocker, nil
	default:
		return "", fmt.Errorf("claim script answered %T", v)
	}
}

// Commit makes the digests ds token claimed hold for their window: the batch
// was delivered. It is queued, or sent now if the queue is full (the error is
// that send's); a claim that landed but is no longer pending is reported
// ResultLost, and committed.
func (t *Tier) Commit(ctx context.Context, token string, ds []digest.Digest) error {
	return t.settle(ctx, OpCommit, token, ds, true)
}

// Release ends token's claim on ds (a digest taken over keeps its owner) now,
// so the sender's retry finds its records free; idempotent, even if committed.
func (t *Tier) Release(ctx context.Context, token string, ds []digest.Digest) error {
	return t.settle(ctx, OpRelease, token, ds, false)
}

// settle queues a commit or release, a write per group, or sends it now if
// !queue or full.
func (t *Tier) settle(ctx context.Context, op, token string, ds []digest.Digest, queue bool) error {
	c, held, err := t.beginSettle(op, token, len(ds))
	if c == nil {
		return err
	}
	l := c.layout.Load()
	b := prepare(l, ds, false, op == OpRelease)
	defer groupingPool.Put(b)
	until := t.opts.Clock.Now().Add(t.opts.Lease)
	ws := make([]write, 0, len(b.groups))
	for _, g := range b.groups {
		w := write{op: op, token: token, group: &l.groups[g], status: l.statusKey(g, token), until: until}
		if op == OpCommit {
			w.landed = slices.ContainsFunc(held, func(r *renewal) bool { return r.key == w.status })
		}
		if op == OpRelease {
			w.fields = string(b.fields[b.bounds[g]*fieldSize : b.bounds[g+1]*fieldSize])
		}
		ws = append(ws, w)
	}
	if queue && t.w.enqueue(ws) {
		return nil
	}
	_, err = t.send(ctx, c, ws)
	return err
}

// beginSettle stops token's renewals and returns the connection for n keys, or
// nil: nothing to send, or no connection (the write lost, err says why); and
// the claims and elections it was renewing.
func (t *Tier) beginSettle(op, token string, n int) (*conn, []*renewal, error) {
	held := t.w.drop(token)
	if n == 0 {
		return nil, nil, nil
	}
	c, err := t.connected(op)
	if err != nil && (op != OpCommit || len(held) > 0) {
		t.lost(op, err)
	}
	return c, held, err
}

// errClosed fails the calls made after Close.
var errClosed = errors.New("the tier is shut down")

// connected returns the connection, or why there is none.
func (t *Tier) connected(op string) (*conn, error) {
	if t.shut.Load() {
		t.opts.Observe(op, ResultError, 0)
		return nil, fmt.Errorf("dedup: redis %s: %w", op, errClosed)
	}
	if c := t.conn.Load(); c != nil {
		return c, nil
	}
	t.opts.Observe(op, ResultError, 0)
	return nil, fmt.Errorf("dedup: redis %s: topology not known: %w", op, *t.unknown.Load())
}

// run sends calls within timeout, reports each operation's worst result to
// Observe, returns failure.
func (t *Tier) run(ctx context.Context, c *conn, calls []*call, timeout time.Duration) error {
	start := t.opts.Clock.Now()
	cctx, cancel := context.WithTimeout(ctx, timeout)
	c.exec.exec(cctx, calls)
	cancel()
	d := t.opts.Clock.Now().Sub(start)
	type report struct {
		op, result string
		d          time.Duration // zero while none of its calls was sent
	}
	var ops []report
	for _, cl := range calls {
		k := slices.IndexFunc(ops, func(r report) bool { return r.op == cl.op })
		if k < 0 {
			k = len(ops)
			ops = append(ops, report{op: cl.op, result: ResultOK})
		}
		r := ResultError
		switch {
		case cl.err == nil:
			r = ResultOK
		case errors.Is(cl.err, errBreakerOpen):
			r = ResultSkipped
		case isTimeout(cl.err):
			r = ResultTimeout
		}
		if r != ResultSkipped {
			ops[k].d = d
		}
		if slices.Index(severity, r) > slices.Index(severity, ops[k].result) {
			ops[k].result = r
		}
	}
	for _, r := range ops {
		t.opts.Observe(r.op, r.result, r.d)
	}
	return t.failure(calls)
}

// failure names how many of calls failed and the first failure, or is nil.
func (t *Tier) failure(calls []*call) error {
	i := slices.IndexFunc(calls, func(cl *call) bool { return cl.err != nil })
	if i < 0 {
		return nil
	}
	failed := 0
	for _, cl := range calls[i:] {
		if cl.err != nil {
			failed++
		}
	}
	first := calls[i]
	op, err := first.op, first.err
	if first.node != "" {
		err = fmt.Errorf("node %s: %w", first.node, err)
	}
	if len(calls) > 1 {
		return fmt.Errorf("dedup: redis %s: %d of %d calls failed, first: %w", op, failed, len(calls), err)
	}
	return fmt.Errorf("dedup: redis %s: %w", op, err)
}

// severity orders the results: an operation's is the worst of its calls'.
var severity = []string{ResultOK, ResultSkipped, ResultError, ResultTimeout}

// grouping is ds grouped by group, as indexes into ds, and their fields.
type grouping struct {
	order  []int32 // indexes of ds, grouped by group
	bounds []int32 // order[bounds[g]:bounds[g+1]] belong to group g
	next   []int32
	groups []int  // the groups with digests, ascending
	fields []byte // the fields of ds in order's order, fieldSize bytes each
}

var groupingPool = sync.Pool{New: func() any { return new(grouping) }}

// prepare groups ds by a counting sort, keeping ds's order in each group or,
// with sorted, the digests' (a recheck claims in one global order), and with
// pack packs their fields in that order (claims and releases send them; a
// commit names its claim alone).
func prepare(l *layout, ds []digest.Digest, sorted, pack bool) *grouping {
	b := groupingPool.Get().(*grouping)
	ng := len(l.groups)
	b.bounds = slices.Grow(b.bounds[:0], ng+1)[:ng+1]
	clear(b.bounds)
	for _, d := range ds {
		b.bounds[l.groupOf(d)+1]++
	}
	b.groups = b.groups[:0]
	for g := 1; g <= ng; g++ {
		if b.bounds[g] > 0 {
			b.groups = append(b.groups, g-1)
		}
		b.bounds[g] += b.bounds[g-1]
	}
	b.order = slices.Grow(b.order[:0], len(ds))[:len(ds)]
	b.next = append(b.next[:0], b.bounds[:ng]...)
	next := b.next
	for i, d := range ds {
		g := l.groupOf(d)
		b.order[next[g]] = int32(i)
		next[g]++
	}
	if sorted {
		for _, g := range b.groups {
			slices.SortFunc(b.order[b.bounds[g]:b.bounds[g+1]], func(i, j int32) int { return ds[i].Compare(ds[j]) })
		}
	}
	b.fields = b.fields[:0]
	if pack {
		b.fields = slices.Grow(b.fields, len(ds)*fieldSize)
		for _, i := range b.order {
			b.fields = appendField(b.fields, ds[i])
		}
	}
	return b
}

// claimArgs are the strings of one claim call that are not the group's or
// the tier's: the arguments point at them, so that none is copied or boxed.
type claimArgs struct{ status, fields string }

// claimCalls builds a claim call per group and chunk of at most
// maxKeysPerScript digests, each chunk's fields packed into one argument;
// recheck makes each stop at its first pending key. A batch costs a few
// allocations per call, none per digest.
func (t *Tier) claimCalls(ctx context.Context, l *layout, b *grouping, op, token string, recheck bool) []*call {
	all := string(b.fields)
	chunks := 0
	for _, g := range b.groups {
		m := int(b.bounds[g+1] - b.bounds[g])
		chunks += (m + maxKeysPerScript - 1) / maxKeysPerScript
	}
	stop := &stopNever
	if recheck {
		stop = &stopAtPending
	}
	id := ClaimID(token)
	strs := make([]claimArgs, chunks)
	args := make([]any, 0, chunks*claimArgc)
	calls := make([]call, chunks)
	out := make([]*call, 0, chunks)
	for _, g := range b.groups {
		gr := &l.groups[g]
		status := l.statusKey(g, token)
		lo, hi := int(b.bounds[g]), int(b.bounds[g+1])
		for lo < hi {
			end := min(lo+maxKeysPerScript, hi)
			k := len(out)
			strs[k] = claimArgs{status: status, fields: all[lo*fieldSize : end*fieldSize]}
			start := len(args)
			args = append(args, "evalsha", &claimSHA, 3, &strs[k].status, &gr.shape, &gr.fence,
				&id, &t.leaseArg, &t.winArg, stop, &strs[k].fields)
			cl := &calls[k]
			*cl = call{
				op:     op,
				cmd:    redis.NewCmd(ctx, args[start:len(args):len(args)]...),
				route:  status,
				group:  g,
				idx:    b.order[lo:end],
				fields: &strs[k].fields,
			}
			out = append(out, cl)
			lo = end
		}
	}
	return out
}

// claimArgc is the arguments of a claim call.
const claimArgc = 11

// The scripts' hashes, as arguments.
var claimSHA, releaseSHA, commitSHA, renewSHA = claimScript.Hash(), releaseScript.Hash(), commitScript.Hash(), renewScript.Hash()

// The claim script's stop argument: stop at the first pending key or not.
var stopNever, stopAtPending = "0", "1"
