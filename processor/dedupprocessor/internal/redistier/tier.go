// Package redistier is the dedup processor's shared tier: it claims record
// digests in Redis (standalone, Cluster or Sentinel) so that collectors
// sharing one Redis let exactly one copy of a record through.
//
// A claim is two-phase. Claim marks the digests of a
// batch as pending under a token unique to that batch; Commit, called once
// the next consumer accepted the batch, makes them hold for the window;
// Release, called when it refused the batch, frees them so the sender's retry
// is delivered. A pending claim that is neither committed nor released (the
// collector died mid-batch) frees its digests when its lease ends.
//
// Redis holds only digests and tokens: see layout.go for the keys. A claim
// costs one script call per batch (per 1000 digests, and per tag group in a
// Cluster), all pipelined into one round trip (one per node in a Cluster); a
// commit costs one SET per batch (per tag group in a Cluster), whatever the
// batch size, because the pending/committed state lives in one status key
// per claim instead of in the TTL of every digest key.
//
// What the endpoints are is asked of them at Start (discover.go), not guessed
// from their number: the key layout differs between a Cluster and the rest,
// and every collector sharing a Redis must use the same one. In a Cluster,
// each group's answer is its own (cluster.go): a failed node fails only the
// digests of the groups it serves, which answer Unavailable.
package redistier

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/breaker"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

// Operation names and results passed to Options.Observe.
const (
	OpClaim = "claim"
	// OpRecheck: a claim of records a batch waited for, because a pending
	// claim held them (Claim with again).
	OpRecheck = "recheck"
	OpCommit  = "commit"
	OpRelease = "release"
	// OpRenew: the renewal of the leases of claims whose batches are
	// downstream (writer.go).
	OpRenew = "renew"

	ResultOK = "ok"
	// ResultError: a command failed, or the topology is not known yet
	// (Redis has not answered since Start).
	ResultError   = "error"
	ResultTimeout = "timeout"
	// ResultSkipped: a node's breaker was open and its commands were not
	// sent.
	ResultSkipped = "skipped"
	// ResultLost: a commit or renewal found its claim ended (its lease ran
	// out first), or a commit or release could not be sent before the
	// claim's lease ended. Copies of its records may be delivered again.
	ResultLost = "lost"
)

// Options configures a Tier.
type Options struct {
	// Endpoints are the addresses the tier starts from: a standalone
	// server, one or more nodes of a Redis Cluster, or Sentinels.
	Endpoints []string
	// Mode says what the endpoints are; ModeAuto (or empty) asks them at
	// Start.
	Mode Mode
	// MasterName is the master the Sentinels monitor (Sentinel only).
	MasterName string
	Username   string
	Password   string
	// DB is the database of a standalone or Sentinel server; a Cluster only
	// has database 0.
	DB  int
	TLS *tls.Config
	// KeyPrefix starts every key; it is used as given (empty is allowed).
	// In a Cluster, a prefix containing a hash tag ("{...}") puts every key
	// into one slot.
	KeyPrefix string
	// Timeout bounds each call: its round trip(s), including a reload of the
	// scripts and the retries of groups whose slot moved. Required.
	Timeout time.Duration
	// Window is how long a claimed digest is remembered, counted from the
	// claim. Required.
	Window time.Duration
	// Lease is how long a pending claim stays alive without Commit.
	// Required.
	Lease time.Duration
	// Breaker configures the circuit breakers (one per node); zero fields
	// take its defaults.
	Breaker breaker.Config
	// Observe, if set, is called once per call with the operation (OpClaim,
	// OpRecheck, OpCommit, OpRelease, OpRenew, OpElect), its result (ResultOK,
	// ResultError, ResultTimeout, ResultSkipped: the worst of its groups')
	// and its duration (zero when no round trip was made); a round of the
	// writer is one call per operation. Each claim a commit or renewal
	// found ended, and each write given up, is one more call with
	// ResultLost and no duration. It is called synchronously and
	// concurrently, and must be cheap.
	Observe func(op, result string, d time.Duration)
	// OnTopology, if set, is called when a tier whose endpoints did not
	// answer at Start learns what they are: with the mode found, or with
	// the error that says why it cannot work with them (then the tier goes
	// on failing every call, and asking again). It is called from a
	// goroutine of the tier.
	OnTopology func(Mode, error)
	// OnWriteError, if set, is called with the error of a round of the
	// writer (commits, releases, renewals sent in the background) that
	// failed or found claims ended, from a goroutine of the tier.
	OnWriteError func(error)
}

// Tier is a connection to the shared tier. It is safe for concurrent use.
type Tier struct {
	opts     Options
	timeout  time.Duration
	leaseArg string // lease in ms, as a script argument
	winArg   string // window in ms, as a script argument
	observe  func(op, result string, d time.Duration)

	conn    atomic.Pointer[conn]  // nil until the topology is known
	unknown atomic.Pointer[error] // why conn is nil

	w    writer
	stop chan struct{}
	// bg bounds the background work (discovery, the writer's retries):
	// Close cancels it.
	bg     context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed sync.Once
}

// conn is the tier connected to a topology.
type conn struct {
	mode   Mode
	layout layout
	exec   executor
}

// New validates opts and returns a Tier that has not asked Redis anything
// yet: Start does.
func New(opts Options) (*Tier, error) {
	if opts.Mode == "" {
		opts.Mode = ModeAuto
	}
	var errs []error
	if len(opts.Endpoints) == 0 {
		errs = append(errs, errors.New("endpoints must not be empty"))
	}
	for _, e := range opts.Endpoints {
		if _, _, err := net.SplitHostPort(e); err != nil {
			errs = append(errs, fmt.Errorf("endpoint %q: want host:port", e))
		}
	}
	switch opts.Mode {
	case ModeAuto, ModeCluster:
	case ModeStandalone:
		if len(opts.Endpoints) > 1 {
			errs = append(errs, fmt.Errorf("mode standalone takes one endpoint, got %d", len(opts.Endpoints)))
		}
	case ModeSentinel:
		if opts.MasterName == "" {
			errs = append(errs, errors.New("mode sentinel needs a master name"))
		}
	default:
		errs = append(errs, fmt.Errorf("unknown mode %q", opts.Mode))
	}
	if opts.MasterName != "" && opts.Mode != ModeAuto && opts.Mode != ModeSentinel {
		errs = append(errs, fmt.Errorf("a master name is for Sentinel, not mode %s", opts.Mode))
	}
	if opts.Mode == ModeCluster && opts.DB != 0 {
		errs = append(errs, fmt.Errorf("db must be 0 with a Redis Cluster, got %d", opts.DB))
	}
	if opts.DB < 0 {
		errs = append(errs, fmt.Errorf("db must be >= 0, got %d", opts.DB))
	}
	// Redis expiries are whole milliseconds.
	if opts.Window < time.Millisecond {
		errs = append(errs, fmt.Errorf("window must be >= 1ms, got %s", opts.Window))
	}
	if opts.Lease < time.Millisecond {
		errs = append(errs, fmt.Errorf("lease must be >= 1ms, got %s", opts.Lease))
	}
	if opts.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("timeout must be > 0, got %s", opts.Timeout))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("dedup: redis: %w", err)
	}
	t := &Tier{
		opts:     opts,
		timeout:  opts.Timeout,
		leaseArg: strconv.FormatInt(opts.Lease.Milliseconds(), 10),
		winArg:   strconv.FormatInt(opts.Window.Milliseconds(), 10),
		observe:  opts.Observe,
		stop:     make(chan struct{}),
	}
	t.bg, t.cancel = context.WithCancel(context.Background())
	t.w.init()
	notStarted := errors.New("the tier has not been started")
	t.unknown.Store(&notStarted)
	return t, nil
}

// Start finds out what the endpoints are and connects to them. It returns
// an error, naming the setting to change, if they cannot work as the tier
// needs: a standalone replica (read-only), Sentinels without a master name,
// endpoints of different kinds, or a Mode they contradict. If no endpoint
// answers, Start does not fail: with a Mode set, the tier connects as that
// mode; without, every call fails until the endpoints answer, which the
// tier keeps asking in the background (then Options.OnTopology is called).
// Start is bounded by the larger of Timeout and one second.
func (t *Tier) Start(ctx context.Context) error {
	mode, err := t.discover(ctx)
	switch {
	case err == nil:
	case !errors.Is(err, errNoAnswer):
		return err
	case t.opts.Mode != ModeAuto:
		mode = t.opts.Mode
	default:
		t.unknown.Store(&err)
		t.wg.Go(t.discoverLater)
	}
	if mode != "" {
		t.connect(mode)
	}
	t.wg.Go(t.w.run(t))
	return nil
}

// discoverLater asks the endpoints what they are until they answer, with a
// growing pause, and connects once they do.
func (t *Tier) discoverLater() {
	const first, most = 100 * time.Millisecond, 2 * time.Second
	wait := first
	reported := ""
	for {
		timer := time.NewTimer(wait)
		select {
		case <-t.stop:
			timer.Stop()
			return
		case <-timer.C:
		}
		wait = min(2*wait, most)
		mode, err := t.discover(t.bg)
		if err == nil {
			t.connect(mode)
			if t.opts.OnTopology != nil {
				t.opts.OnTopology(mode, nil)
			}
			return
		}
		t.unknown.Store(&err)
		if !errors.Is(err, errNoAnswer) && err.Error() != reported && t.opts.OnTopology != nil {
			reported = err.Error()
			t.opts.OnTopology("", err)
		}
	}
}

// connect builds the client and key layout of mode.
func (t *Tier) connect(mode Mode) {
	o := t.opts
	c := &conn{mode: mode, layout: newLayout(o.KeyPrefix, 0)}
	switch mode {
	case ModeCluster:
		c.layout = newLayout(o.KeyPrefix, clusterTags)
		c.exec = newClusterExec(redis.NewClusterClient(&redis.ClusterOptions{
			// go-redis appends the nodes it learns to Addrs in place: give
			// it a slice of its own (tiers of one configuration share
			// Endpoints).
			Addrs:                 slices.Clip(slices.Clone(o.Endpoints)),
			Username:              o.Username,
			Password:              o.Password,
			TLSConfig:             o.TLS,
			DialTimeout:           t.timeout,
			ReadTimeout:           t.timeout,
			WriteTimeout:          t.timeout,
			PoolTimeout:           t.timeout,
			ContextTimeoutEnabled: true,
			MaxRetries:            1,
			DialerRetries:         1,
			// The tier sends only EVAL, EVALSHA and SET of one slot each.
			DisableRoutingPolicies:   true,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		}), o.Breaker)
	case ModeSentinel:
		c.exec = &singleExec{
			client: redis.NewFailoverClient(&redis.FailoverOptions{
				MasterName:            o.MasterName,
				SentinelAddrs:         o.Endpoints,
				Username:              o.Username,
				Password:              o.Password,
				DB:                    o.DB,
				TLSConfig:             o.TLS,
				DialTimeout:           t.timeout,
				ReadTimeout:           t.timeout,
				WriteTimeout:          t.timeout,
				PoolTimeout:           t.timeout,
				ContextTimeoutEnabled: true,
				MaxRetries:            1,
				DialerRetries:         1,
				// go-redis's failover client has maintenance notifications
				// off.
			}),
			name: o.MasterName,
			br:   breaker.New(o.Breaker),
		}
	default:
		c.exec = &singleExec{
			client: redis.NewClient(&redis.Options{
				Addr:                  o.Endpoints[0],
				Username:              o.Username,
				Password:              o.Password,
				DB:                    o.DB,
				TLSConfig:             o.TLS,
				DialTimeout:           t.timeout,
				ReadTimeout:           t.timeout,
				WriteTimeout:          t.timeout,
				PoolTimeout:           t.timeout,
				ContextTimeoutEnabled: true,
				// One retry on a broken connection; every call is
				// idempotent for its token, and the call's context bounds
				// the total time.
				MaxRetries:    1,
				DialerRetries: 1,
				// Plain Redis does not know the maintenance-notifications
				// handshake and would cost a failed command per new
				// connection.
				MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
			}),
			name: o.Endpoints[0],
			br:   breaker.New(o.Breaker),
		}
	}
	t.conn.Store(c)
}

// Mode returns the topology the tier works with, or "" while it is not
// known.
func (t *Tier) Mode() Mode {
	if c := t.conn.Load(); c != nil {
		return c.mode
	}
	return ""
}

// Close sends what the writer still holds (each write tried once more,
// bounded by the timeout), stops the tier's goroutines and closes its
// connections.
func (t *Tier) Close() error {
	var err error
	t.closed.Do(func() {
		t.w.close()
		close(t.stop)
		t.cancel()
		t.wg.Wait()
		if c := t.conn.Load(); c != nil {
			err = c.exec.close()
		}
	})
	return err
}

// Breakers returns the state of every node's circuit breaker: one per
// master of a Cluster (including, for a minute, masters that left the slot
// map), one for a standalone server or Sentinel-monitored master; none while
// the topology is not known.
func (t *Tier) Breakers() []NodeBreaker {
	if c := t.conn.Load(); c != nil {
		return c.exec.breakers()
	}
	return nil
}

// NewToken returns a claim token of the given age: 16 bytes, the age
// big-endian then 64 random bits, so that two tokens never collide and a
// token read in Redis tells when its batch began. Each claim needs its own
// token: Commit and Release act on everything claimed under it.
func NewToken(age uint64) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], age)
	_, _ = rand.Read(b[8:]) // never fails (crypto/rand, Go >= 1.24)
	return string(b[:])
}

// Answer is the shared tier's answer for one digest of a claim.
type Answer uint8

const (
	// Unavailable: the tier could not answer for the digest: the node that
	// serves its group failed, or Redis did not. The claim may have been
	// made anyway (its reply was lost): Commit or Release the token's
	// digests all the same.
	Unavailable Answer = iota
	// Held: a committed claim of another token holds the digest: its
	// record was delivered.
	Held
	// Claimed: this call claimed the digest.
	Claimed
	// Pending: a pending claim of another token holds the digest: its
	// batch is still on its way downstream, and may yet be released (its
	// next consumer failed) or end with its lease (its collector died).
	Pending
)

// Claim atomically claims, under token, every digest of ds that no live
// claim holds, in one round trip (one per node in a Cluster), and answers
// for each: Claimed if this call claimed ds[i] (or token already held it),
// else Held or Pending by the state of the claim that holds it. Of any
// number of concurrent claims of a digest, in this process or in others
// sharing the Redis, exactly one gets Claimed. ds must not hold a digest
// twice; answers must have at least len(ds) elements; token must be unique
// to its claim (see NewToken).
//
// A new claim is pending: its lease is renewed in the background until
// Commit makes it hold for the window or Release ends it, and every claim
// must end with one of the two, whatever the answers (a claim whose reply
// was lost may exist all the same). Atomicity is per script call: one
// group's digests, at most maxKeysPerScript of them.
//
// Each group's answers are its own. The digests of a group whose call
// failed answer Unavailable, and the error says why; the others are
// answered. Retrying with the same token is safe: digests already held by
// the token answer Claimed. again says that the batch claims records it
// waited for (reported to Observe as OpRecheck instead of OpClaim).
func (t *Tier) Claim(ctx context.Context, token string, ds []digest.Digest, answers []Answer, again bool) error {
	op := OpClaim
	if again {
		op = OpRecheck
	}
	if len(answers) < len(ds) {
		return fmt.Errorf("dedup: redis claim: %d results for %d digests", len(answers), len(ds))
	}
	if token == "" {
		return errors.New("dedup: redis claim: empty token")
	}
	answers = answers[:len(ds)]
	clear(answers) // Unavailable
	if len(ds) == 0 {
		return nil
	}
	c, err := t.connected(op)
	if err != nil {
		return err
	}
	b := c.prepare(ds)
	defer b.free()
	calls := t.scriptCalls(ctx, c, claimScript, b, token, ds)
	err = t.run(ctx, c, op, calls)
	held := b.groups[:0]
	for _, cl := range calls {
		if cl.err == nil {
			if perr := readClaim(cl, answers); perr != nil {
				// Not what the script answers: the group stays
				// Unavailable.
				err = errors.Join(err, fmt.Errorf("dedup: redis %s: %w", op, perr))
			}
		}
		if cl.err != nil || anyClaimed(cl, answers) {
			if len(held) == 0 || held[len(held)-1] != cl.group {
				held = append(held, cl.group)
			}
		}
	}
	t.w.hold(token, held)
	return err
}

// anyClaimed reports whether the call claimed any of its digests.
func anyClaimed(cl *call, answers []Answer) bool {
	for _, i := range cl.idx {
		if answers[i] != Held && answers[i] != Pending {
			return true
		}
	}
	return false
}

// readClaim sets the answers of one claim script call from its reply.
func readClaim(cl *call, answers []Answer) error {
	switch v := cl.cmd.Val().(type) {
	case int64: // all claimed
		if v != int64(len(cl.idx)) {
			return fmt.Errorf("claim script claimed %d of %d digests", v, len(cl.idx))
		}
		for _, i := range cl.idx {
			answers[i] = Claimed
		}
		return nil
	case string:
		if len(v) != len(cl.idx) {
			return fmt.Errorf("claim script answered %d results for %d digests", len(v), len(cl.idx))
		}
		for j, i := range cl.idx {
			switch v[j] {
			case '1':
				answers[i] = Claimed
			case '2':
				answers[i] = Pending
			default:
				answers[i] = Held
			}
		}
		return nil
	default:
		return fmt.Errorf("claim script answered %T", v)
	}
}

// Commit makes the digests ds claimed under token hold for the rest of
// their window (counted from the claim): the batch that claimed them was
// delivered. It costs one command per claim (per tag group in a Cluster),
// whatever the number of digests. The commit is queued, to share a round
// trip with other claims' (writer.go), and sent by the caller only when the
// queue is full; the error is that send's. A commit that fails is sent
// again until it lands or the claim's lease has ended; one that finds the
// claim ended (its lease ran out first) is reported as ResultLost: it
// never revives the claim, whose digests may belong to another claim by
// then.
func (t *Tier) Commit(ctx context.Context, token string, ds []digest.Digest) error {
	return t.finish(ctx, OpCommit, token, ds, true)
}

// Release ends the claim of token on the digests ds: it deletes each digest
// key that still holds token (compare-and-delete) and the claim's status,
// so the digests can be claimed again at once. A digest that another claim
// took over keeps its new owner. Unlike Commit it is sent at once: the
// sender whose batch was refused retries soon, and its retry should find
// the records free, not wait for a queued release. A release that fails is
// sent again until it lands or the lease has ended. Release is idempotent;
// releasing a committed claim ends it too.
func (t *Tier) Release(ctx context.Context, token string, ds []digest.Digest) error {
	return t.finish(ctx, OpRelease, token, ds, false)
}

// finish queues the commit or release of token's claim on ds, one write per
// group, or sends it now if the queue is full or queue is false.
func (t *Tier) finish(ctx context.Context, op, token string, ds []digest.Digest, queue bool) error {
	t.w.drop(token)
	if len(ds) == 0 {
		return nil
	}
	c, err := t.connected(op)
	if err != nil {
		return err
	}
	b := c.prepare(ds)
	defer b.free()
	until := time.Now().Add(t.opts.Lease)
	ws := make([]write, 0, len(b.groups))
	for _, g := range b.groups {
		w := write{op: op, token: token, group: g, until: until}
		if op == OpRelease {
			w.ds = make([]digest.Digest, 0, b.bounds[g+1]-b.bounds[g])
			for _, i := range b.order[b.bounds[g]:b.bounds[g+1]] {
				w.ds = append(w.ds, ds[i])
			}
		}
		ws = append(ws, w)
	}
	if queue && t.w.enqueue(ws) {
		return nil
	}
	return t.send(ctx, c, op, ws)
}

// connected returns the tier's connection, or, while the topology is not
// known, an error saying why (reported to Observe as an error).
func (t *Tier) connected(op string) (*conn, error) {
	if c := t.conn.Load(); c != nil {
		return c, nil
	}
	if t.observe != nil {
		t.observe(op, ResultError, 0)
	}
	return nil, fmt.Errorf("dedup: redis %s: topology not known: %w", op, *t.unknown.Load())
}

// run sends calls with the timeout, reports the operation to the observer,
// and returns an error that tells how many groups failed and the first
// failure, or nil if none did.
func (t *Tier) run(ctx context.Context, c *conn, op string, calls []*call) error {
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, t.timeout)
	c.exec.exec(cctx, calls)
	cancel()
	d := time.Since(start)

	// The operation's result is the worst of its calls': timeout, error,
	// skipped (a node's breaker was open), ok.
	result, sent := ResultOK, false
	var first *call
	failed := 0
	for _, cl := range calls {
		r := ResultOK
		if cl.err != nil {
			failed++
			if first == nil {
				first = cl
			}
			r = resultOf(cl.err)
		}
		sent = sent || r != ResultSkipped
		if rank(r) > rank(result) {
			result = r
		}
	}
	if !sent {
		d = 0
	}
	if t.observe != nil {
		t.observe(op, result, d)
	}
	if first == nil {
		return nil
	}
	err := first.err
	if first.node != "" {
		err = nodeError{node: first.node, err: err}
	}
	if len(calls) > 1 {
		return fmt.Errorf("dedup: redis %s: %d of %d groups failed, first: %w", op, failed, len(calls), err)
	}
	return fmt.Errorf("dedup: redis %s: %w", op, err)
}

func rank(result string) int {
	switch result {
	case ResultSkipped:
		return 1
	case ResultError:
		return 2
	case ResultTimeout:
		return 3
	}
	return 0
}

func resultOf(err error) string {
	switch {
	case errors.Is(err, errBreakerOpen):
		return ResultSkipped
	case isTimeout(err):
		return ResultTimeout
	}
	return ResultError
}

// nodeError is a call's error with the node it came from.
type nodeError struct {
	node string
	err  error
}

func (e nodeError) Error() string { return "node " + e.node + ": " + e.err.Error() }
func (e nodeError) Unwrap() error { return e.err }

// batch is the per-call scratch: the digests of ds grouped by group, as
// indexes into ds.
type batch struct {
	order  []int32 // indexes of ds, grouped by group
	bounds []int32 // order[bounds[g]:bounds[g+1]] belong to group g
	next   []int32
	groups []int // the groups with digests, ascending
}

var batchPool = sync.Pool{New: func() any { return new(batch) }}

func (b *batch) free() { batchPool.Put(b) }

// prepare groups the digests of ds.
func (c *conn) prepare(ds []digest.Digest) *batch {
	b := batchPool.Get().(*batch)
	ng := len(c.layout.groups)
	b.bounds = resize(b.bounds, ng+1)
	clear(b.bounds)
	b.next = resize(b.next, ng)
	// Count per group, then place: a counting sort that keeps ds's order
	// within each group.
	for _, d := range ds {
		b.bounds[c.layout.groupOf(d)+1]++
	}
	b.groups = b.groups[:0]
	for g := 1; g <= ng; g++ {
		if b.bounds[g] > 0 {
			b.groups = append(b.groups, g-1)
		}
		b.bounds[g] += b.bounds[g-1]
	}
	b.order = resize(b.order, len(ds))
	next := b.next
	copy(next, b.bounds[:ng])
	for i, d := range ds {
		g := c.layout.groupOf(d)
		b.order[next[g]] = int32(i)
		next[g]++
	}
	return b
}

// resize returns s with length n, reusing its array if it is large enough.
func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// scriptCalls builds one EVALSHA of s per group and chunk of at most
// maxKeysPerScript digests. The claim script gets the lease, the window and
// the group's status prefix after the token (see claimScript).
func (t *Tier) scriptCalls(ctx context.Context, c *conn, s *redis.Script, b *batch, token string, ds []digest.Digest) []*call {
	n := len(b.order)
	claim := s == claimScript
	l := &c.layout
	// All keys live in one string; each key is a substring of it, and each
	// argument points at its key, so building the commands costs a few
	// allocations per batch rather than two per key.
	var sb strings.Builder
	sb.Grow(n * (len(l.groups[len(l.groups)-1].prefix) + 2 + digest.Size))
	ends := make([]int, n)
	var buf [digest.Size]byte
	for k, i := range b.order {
		sb.WriteString(l.groups[l.groupOf(ds[i])].prefix)
		sb.Write(ds[i].AppendBinary(buf[:0]))
		ends[k] = sb.Len()
	}
	all := sb.String()
	keys := make([]string, n)
	prev := 0
	for k, end := range ends {
		keys[k] = all[prev:end]
		prev = end
	}

	chunks := 0
	for _, g := range b.groups {
		m := int(b.bounds[g+1] - b.bounds[g])
		chunks += (m + maxKeysPerScript - 1) / maxKeysPerScript
	}
	// Per chunk: evalsha, sha, numkeys, status key, keys..., token, extra...
	args := make([]any, 0, n+chunks*8)
	calls := make([]call, chunks)
	out := make([]*call, 0, chunks)
	tok := &token
	for _, g := range b.groups {
		lo, hi := int(b.bounds[g]), int(b.bounds[g+1])
		for lo < hi {
			end := min(lo+maxKeysPerScript, hi)
			start := len(args)
			status := l.statusKey(g, token)
			args = append(args, "evalsha", s.Hash(), 1+end-lo, status)
			for k := lo; k < end; k++ {
				args = append(args, &keys[k])
			}
			args = append(args, tok)
			if claim {
				args = append(args, &t.leaseArg, &t.winArg, &l.groups[g].statusPrefix)
			}
			cl := &calls[len(out)]
			*cl = call{
				cmd:   redis.NewCmd(ctx, args[start:len(args):len(args)]...),
				route: status,
				group: g,
				idx:   b.order[lo:end],
			}
			out = append(out, cl)
			lo = end
		}
	}
	return out
}
