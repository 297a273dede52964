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
	// OpRecheck: a repeated claim of digests that were held by a pending
	// claim, while waiting for its outcome.
	OpRecheck = "recheck"
	OpCommit  = "commit"
	OpRelease = "release"

	ResultOK = "ok"
	// ResultError: a command failed, or the topology is not known yet
	// (Redis has not answered since Start).
	ResultError   = "error"
	ResultTimeout = "timeout"
	// ResultSkipped: a node's breaker was open and its commands were not
	// sent.
	ResultSkipped = "skipped"
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
	// OpRecheck, OpCommit, OpRelease), its result (ResultOK, ResultError,
	// ResultTimeout, ResultSkipped: the worst of its groups') and its
	// duration (zero when no round trip was made); a round of queued
	// commits (CommitLater) is one call. It is called synchronously and
	// concurrently, and must be cheap.
	Observe func(op, result string, d time.Duration)
	// OnTopology, if set, is called when a tier whose endpoints did not
	// answer at Start learns what they are: with the mode found, or with
	// the error that says why it cannot work with them (then the tier goes
	// on failing every call, and asking again). It is called from a
	// goroutine of the tier.
	OnTopology func(Mode, error)
	// OnCommitError, if set, is called with the error of a round of queued
	// commits (CommitLater) that failed, from a goroutine of the tier. The
	// failed groups are sent again in the background, as Commit's are.
	OnCommitError func(error)
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

	follow  followups
	commits commitQueue
	stop    chan struct{}
	// bg bounds the background work (discovery, followups): Close cancels
	// it.
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
	t.follow.wake = make(chan struct{}, 1)
	t.commits.wake = make(chan struct{}, 1)
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
	t.wg.Go(t.follow.run(t))
	t.wg.Go(t.commits.run(t))
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

// Close sends the commits still queued (CommitLater), stops the tier's
// goroutines and closes its connections.
func (t *Tier) Close() error {
	var err error
	t.closed.Do(func() {
		t.commits.close()
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
// big-endian then 64 random bits. Tokens compare bytewise, so a token made
// with a smaller age is older, and two tokens of one age still differ and
// are ordered. Each claiming batch needs its own token: Commit and Release
// act on everything claimed under it.
//
// The age lets batches that meet each other's pending claims decide who
// waits (see PendingOlder); any number that grows with the time a batch
// started will do, e.g. microseconds since the epoch. Bytes 9 and 10 are
// tokenFlag: they say that the token's claims carry a waiting mark when its
// batch waits for a younger one (claimScript); an earlier version's token,
// 64 random bits there, lacks them but for a chance of one in 65,536, and is
// taken as marked.
func NewToken(age uint64) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], age)
	copy(b[8:10], tokenFlag)
	_, _ = rand.Read(b[10:]) // never fails (crypto/rand, Go >= 1.24)
	return string(b[:])
}

// tokenFlag is bytes 9 and 10 of every token NewToken makes (213 and 58 in
// claimScript).
const tokenFlag = "\xd5\x3a"

// Answer is the shared tier's answer for one digest of a claim.
type Answer uint8

const (
	// Unavailable: the tier could not answer for the digest: the node that
	// serves its group failed, or Redis did not. The claim may have been
	// made anyway (its reply was lost).
	Unavailable Answer = iota
	// Held: a committed claim of another token holds the digest: its
	// record was delivered.
	Held
	// Claimed: this call claimed the digest.
	Claimed
	// Pending: a pending claim of an older token holds the digest (tokens
	// compare bytewise; see NewToken): its batch is still on its way
	// downstream, and may yet be released (its next consumer failed) or
	// end with its lease (its collector died). That batch is not marked as
	// waiting for a younger batch, so it cannot be waiting for the
	// caller: the caller may wait for it while holding its own claims.
	Pending
	// PendingOlder: as Pending, but the holder is marked as waiting for a
	// younger batch, which may be the caller: the caller gives up its own
	// claims before it waits.
	PendingOlder
	// PendingYounger: as Pending, but the holder's token is younger than
	// the caller's. The caller may wait for it holding its claims, and is
	// marked as waiting for a younger batch where it holds claims.
	PendingYounger
)

// ClaimAnswers atomically claims, under token, every digest of ds that no
// live claim holds, in one round trip (one per node in a Cluster), and
// answers for each: Claimed if this call claimed ds[i] (or token already
// held it), else Held, Pending, PendingOlder or PendingYounger by the state
// and age of the claim that holds it. Of any number of concurrent claims of
// a digest, in this process or in others sharing the Redis, exactly one gets
// Claimed; so
// does exactly one position if a digest occurs several times in ds (the
// others are Held).
//
// A new claim is pending: it holds for the lease unless Commit makes it hold
// for the window or Release ends it. A digest whose claim ended (window over,
// lease over without commit, released) is claimed afresh, and its window
// restarts. token must be unique to its batch (see NewToken) and non-empty;
// answers must have at least len(ds) elements.
//
// Atomicity is per script call: one group's digests, at most
// maxKeysPerScript of them. A batch larger than that, or spread over a
// Cluster's nodes, may win some digests and meet another batch's pending
// claims on others; PendingOlder tells the caller which of the two yields.
// A call that meets a pending claim of a younger token marks the token as
// waiting in every group it holds claims in (markWaiting), so that a
// younger claim meeting it then answers PendingOlder.
//
// Each group's answers are its own. The digests of a group whose call
// failed answer Unavailable, and the error says why; the others are
// answered. An error leaves no answer other than Unavailable only when
// nothing could be asked. Digests answered Unavailable may have been
// claimed anyway (the reply was lost): they stay pending until the lease
// ends, or until Release with the same token. Retrying with the same token
// is safe: digests already held by the token answer Claimed.
func (t *Tier) ClaimAnswers(ctx context.Context, token string, ds []digest.Digest, answers []Answer) error {
	return t.claimAs(ctx, OpClaim, token, nil, ds, answers, nil, false)
}

// ClaimDistinct is ClaimAnswers for a caller that never passes a digest
// twice in one call: it skips looking for repeats (a map of the batch's
// digests, about a fifth of the client's CPU per claim). A digest passed
// twice anyway would be answered Claimed at both positions.
func (t *Tier) ClaimDistinct(ctx context.Context, token string, ds []digest.Digest, answers []Answer) error {
	return t.claimAs(ctx, OpClaim, token, nil, ds, answers, nil, true)
}

// ClaimHolders is ClaimAnswers, or ClaimDistinct if distinct, that also
// sets holders[i] to the token of the claim holding ds[i] when ds[i] is
// answered Pending, PendingOlder or PendingYounger, and to "" otherwise:
// what Recheck needs to wait for it cheaply. holders must have at least
// len(ds) elements.
func (t *Tier) ClaimHolders(ctx context.Context, token string, ds []digest.Digest, answers []Answer, holders []string, distinct bool) error {
	clear(holders[:min(len(holders), len(ds))]) // answers only: a first claim names no holder
	return t.claimAs(ctx, OpClaim, token, nil, ds, answers, holders, distinct)
}

// Recheck is ClaimAnswers for digests a previous call of the same token
// found pending, reported to Observe as OpRecheck so that waiting on other
// claims is told apart from claiming. held are the digests the token
// already holds: if the call meets a younger claim, their groups are marked
// too (markWaiting).
//
// holders, if not nil, holds for each digest the token of the claim a
// previous call found holding it ("" if none), and receives the holders of
// this call's pending answers, as in ClaimHolders. While a named holder's
// claim is alive, its digests are answered from its status alone: Held once
// it is committed (its batch delivered every record it claimed or found
// delivered), pending while it is pending, without writing or even reading
// the digest keys; once it has ended, they are claimed as by ClaimAnswers.
func (t *Tier) Recheck(ctx context.Context, token string, held, ds []digest.Digest, answers []Answer, holders []string) error {
	return t.claimAs(ctx, OpRecheck, token, held, ds, answers, holders, false)
}

// HoldersPending reports whether any of the claims holders names is still
// pending, each read in the group of its digest (ds[i] for holders[i]; ""
// names none): one status read per holder and group, in one round trip
// (one per node in a Cluster), reported to Observe as OpRecheck. It claims
// nothing. A batch that gave its claims up for an older one asks this
// before claiming again: while that claim is pending, claiming again would
// meet it and give up again. An error says nothing either way.
func (t *Tier) HoldersPending(ctx context.Context, ds []digest.Digest, holders []string) (bool, error) {
	c, err := t.connected(OpRecheck)
	if err != nil {
		return false, err
	}
	seen := make(map[string]bool)
	var calls []*call
	for i, h := range holders[:min(len(holders), len(ds))] {
		if h == "" {
			continue
		}
		key := c.layout.statusKey(c.layout.groupOf(ds[i]), h)
		if seen[key] {
			continue
		}
		seen[key] = true
		// GETRANGE answers "" for a missing key, where GET answers nil,
		// which the client reports as an error.
		calls = append(calls, &call{cmd: redis.NewCmd(ctx, "getrange", key, 0, 0), route: key})
	}
	if len(calls) == 0 {
		return false, nil
	}
	if err := t.run(ctx, c, OpRecheck, calls); err != nil {
		return false, err
	}
	for _, cl := range calls {
		if v, _ := cl.cmd.Val().(string); v == "p" {
			return true, nil
		}
	}
	return false, nil
}

func (t *Tier) claimAs(ctx context.Context, op, token string, held, ds []digest.Digest, answers []Answer, holders []string, distinct bool) error {
	if len(answers) < len(ds) {
		return fmt.Errorf("dedup: redis claim: %d results for %d digests", len(answers), len(ds))
	}
	if holders != nil && len(holders) < len(ds) {
		return fmt.Errorf("dedup: redis claim: %d holders for %d digests", len(holders), len(ds))
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
	b := c.prepare(ds, distinct)
	defer b.free()
	for i, first := range b.unique {
		if !first {
			answers[i] = Held // a repeat: its first occurrence is answered
		}
	}
	calls := t.scriptCalls(ctx, c, claimScript, b, token, ds, holders)
	if holders != nil {
		// Each holder is now answered anew: it stays only for a digest
		// still pending.
		clear(holders[:len(ds)])
	}
	err = t.run(ctx, c, op, calls)
	for _, cl := range calls {
		if cl.err == nil {
			if perr := readClaim(cl, answers, holders); perr != nil {
				// Not what the script answers: the group stays
				// Unavailable.
				err = errors.Join(err, fmt.Errorf("dedup: redis %s: %w", op, perr))
			}
		}
	}
	t.markWaiting(ctx, c, token, held, calls, answers)
	return err
}

// markWaiting sets the waiting mark of token in every group where it holds
// claims (won by this call, or held: won before), if a call of the claim
// met a younger pending claim: the batch is about to wait for a younger
// batch, and a younger batch waiting for its claims must give way (see
// PendingOlder). The last call of a group (its calls run in order) that
// met one set the mark there itself; every other group is marked here. A failed mark leaves a younger batch waiting for this
// one, until pending_wait ends the wait. The marks are part of the claim's
// call: they are not reported to Observe apart.
func (t *Tier) markWaiting(ctx context.Context, c *conn, token string, held []digest.Digest, calls []*call, answers []Answer) {
	if !slices.Contains(answers, PendingYounger) {
		return
	}
	need := make(map[string]bool) // status keys of the groups to mark
	if len(held) > 0 {
		for _, g := range c.groupsOf(held) {
			need[c.layout.statusKey(g, token)] = true
		}
	}
	marked := make(map[string]bool) // by the group's last call
	for _, cl := range calls {
		won, met := false, false
		for _, i := range cl.idx {
			won = won || answers[i] == Claimed
			met = met || answers[i] == PendingYounger
		}
		need[cl.route] = need[cl.route] || won
		marked[cl.route] = met
	}
	for status, m := range marked {
		if m {
			delete(need, status)
		}
	}
	marks := make([]*call, 0, len(need))
	for status, ok := range need {
		if !ok {
			continue
		}
		marks = append(marks, &call{cmd: redis.NewCmd(ctx, "set", status+"w", "1", "px", t.leaseArg), route: status})
	}
	if len(marks) > 0 {
		cctx, cancel := context.WithTimeout(ctx, t.timeout)
		c.exec.exec(cctx, marks)
		cancel()
	}
}

// readClaim sets the answers of one claim script call from its reply, and
// the holders of the digests it found pending if holders is not nil.
func readClaim(cl *call, answers []Answer, holders []string) error {
	var res, hidx string
	var tokens []any
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
		res = v
	case []any: // some pending: answers, holder indexes, holders
		if len(v) < 3 {
			return fmt.Errorf("claim script answered %d elements", len(v))
		}
		var ok1, ok2 bool
		res, ok1 = v[0].(string)
		hidx, ok2 = v[1].(string)
		if !ok1 || !ok2 || len(hidx) != 2*len(cl.idx) {
			return errors.New("claim script answered a malformed holder list")
		}
		tokens = v[2:]
	default:
		return fmt.Errorf("claim script answered %T", v)
	}
	if len(res) != len(cl.idx) {
		return fmt.Errorf("claim script answered %d results for %d digests", len(res), len(cl.idx))
	}
	for j, i := range cl.idx {
		switch res[j] {
		case '1':
			answers[i] = Claimed
		case '2':
			answers[i] = Pending
		case '3':
			answers[i] = PendingOlder
		case '4':
			answers[i] = PendingYounger
		default:
			answers[i] = Held
		}
		if holders == nil || hidx == "" {
			continue
		}
		if n := int(binary.BigEndian.Uint16([]byte(hidx[2*j:]))); n > 0 {
			if n > len(tokens) {
				return fmt.Errorf("claim script named holder %d of %d", n, len(tokens))
			}
			if h, ok := tokens[n-1].(string); ok {
				holders[i] = h
			}
		}
	}
	return nil
}

// Commit makes the digests claimed under token hold for the rest of their
// window (counted from the claim), in one round trip that costs one command
// per batch (per tag group in a Cluster), whatever the batch size. ds are
// the digests the claim won; passing others is harmless, but in a Cluster it
// may leave a stray status key for a window in a group where the claim won
// nothing. A digest that another claim took over after this claim's lease
// ended stays with that claim; a digest whose lease ended but was not taken
// over becomes committed again. Commit is idempotent.
//
// A group whose commit fails is committed again in the background, with a
// growing pause, until it succeeds or the lease has passed (followup.go): a
// claim left pending would free its digests when the lease ends, and a copy
// arriving then would be delivered again.
func (t *Tier) Commit(ctx context.Context, token string, ds []digest.Digest) error {
	if len(ds) == 0 {
		return nil
	}
	c, err := t.connected(OpCommit)
	if err != nil {
		return err
	}
	gs := c.groupsOf(ds)
	calls := make([]*call, len(gs))
	for i, g := range gs {
		calls[i] = t.commitCall(ctx, c, g, token)
	}
	err = t.run(ctx, c, OpCommit, calls)
	if err != nil {
		until := time.Now().Add(t.opts.Lease)
		for i, cl := range calls {
			if cl.err != nil {
				t.follow.add(followup{op: OpCommit, token: token, group: gs[i], until: until})
			}
		}
	}
	return err
}

func (t *Tier) commitCall(ctx context.Context, c *conn, g int, token string) *call {
	key := c.layout.statusKey(g, token)
	return &call{cmd: redis.NewCmd(ctx, "set", key, "c", "px", t.winArg), route: key}
}

// Release ends the claim of token on the digests ds: it deletes each digest
// key that still holds token (compare-and-delete) and the claim's status, so
// the digests can be claimed again at once. A digest that another claim took
// over keeps its new owner. Release is idempotent; releasing a committed
// claim ends it too.
//
// Release is a batch's last word: a group whose release fails is released
// again in the background until it succeeds or the lease has passed, so the
// token must not claim again afterwards (see Yield).
func (t *Tier) Release(ctx context.Context, token string, ds []digest.Digest) error {
	return t.release(ctx, token, ds, true)
}

// Yield is Release for a batch that will claim again under the same token:
// a group whose release fails is not released again later, which could
// undo the new claim. Its claim stays until the lease ends, or until the
// batch claims it again.
func (t *Tier) Yield(ctx context.Context, token string, ds []digest.Digest) error {
	return t.release(ctx, token, ds, false)
}

func (t *Tier) release(ctx context.Context, token string, ds []digest.Digest, follow bool) error {
	if len(ds) == 0 {
		return nil
	}
	c, err := t.connected(OpRelease)
	if err != nil {
		return err
	}
	// A repeated digest is harmless here (its second delete finds nothing),
	// so no need to look for repeats.
	b := c.prepare(ds, true)
	defer b.free()
	calls := t.scriptCalls(ctx, c, releaseScript, b, token, ds, nil)
	err = t.run(ctx, c, OpRelease, calls)
	if err != nil && follow {
		until := time.Now().Add(t.opts.Lease)
		for _, cl := range calls {
			if cl.err == nil {
				continue
			}
			group := make([]digest.Digest, len(cl.idx))
			for k, i := range cl.idx {
				group[k] = ds[i]
			}
			t.follow.add(followup{op: OpRelease, token: token, group: c.layout.groupOf(group[0]), ds: group, until: until})
		}
	}
	return err
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

// batch is the per-call scratch: the unique digests of ds grouped by group,
// as indexes into ds.
type batch struct {
	order  []int32 // indexes of ds, unique digests only, grouped by group
	bounds []int32 // order[bounds[g]:bounds[g+1]] belong to group g
	next   []int32
	unique []bool // unique[i]: ds[i] is the first occurrence of its digest
	seen   map[digest.Digest]struct{}
}

var batchPool = sync.Pool{New: func() any { return new(batch) }}

func (b *batch) free() {
	clear(b.seen)
	batchPool.Put(b)
}

// smallBatch is the size up to which in-call duplicates are found by
// comparing pairs instead of with a map.
const smallBatch = 16

// prepare groups the digests of ds, dropping repeats of a digest within ds
// (their claimed entries stay false) unless distinct says there are none.
func (c *conn) prepare(ds []digest.Digest, distinct bool) *batch {
	b := batchPool.Get().(*batch)
	ng := len(c.layout.groups)
	b.bounds = resize(b.bounds, ng+1)
	clear(b.bounds)
	b.next = resize(b.next, ng)
	b.unique = resize(b.unique, len(ds))
	clear(b.unique)
	if !distinct && len(ds) > smallBatch && b.seen == nil {
		b.seen = make(map[digest.Digest]struct{}, len(ds))
	}
	// Count per group, then place: a counting sort that keeps ds's order
	// within each group.
	unique := b.unique
	for i, d := range ds {
		if !distinct && b.repeated(ds, i) {
			continue
		}
		unique[i] = true
		b.bounds[c.layout.groupOf(d)+1]++
	}
	for g := 1; g <= ng; g++ {
		b.bounds[g] += b.bounds[g-1]
	}
	b.order = resize(b.order, int(b.bounds[ng]))
	next := b.next
	copy(next, b.bounds[:ng])
	for i, d := range ds {
		if !unique[i] {
			continue
		}
		g := c.layout.groupOf(d)
		b.order[next[g]] = int32(i)
		next[g]++
	}
	return b
}

// repeated reports whether ds[i] occurred earlier in ds.
func (b *batch) repeated(ds []digest.Digest, i int) bool {
	d := ds[i]
	if len(ds) <= smallBatch {
		for _, e := range ds[:i] {
			if e == d {
				return true
			}
		}
		return false
	}
	if _, dup := b.seen[d]; dup {
		return true
	}
	b.seen[d] = struct{}{}
	return false
}

// appendHolders appends to args the claim script's holder arguments for the
// digests at idx: two bytes per digest indexing the tokens that follow,
// each token once. Nothing if holders names none of them.
func appendHolders(args []any, holders []string, idx []int32) []any {
	if holders == nil {
		return args
	}
	known := false
	for _, i := range idx {
		if holders[i] != "" {
			known = true
			break
		}
	}
	if !known {
		return args
	}
	hidx := make([]byte, 2*len(idx))
	num := make(map[string]int)
	var tokens []any
	for k, i := range idx {
		h := holders[i]
		if h == "" {
			continue
		}
		n, ok := num[h]
		if !ok {
			tokens = append(tokens, h)
			n = len(tokens)
			num[h] = n
		}
		binary.BigEndian.PutUint16(hidx[2*k:], uint16(n))
	}
	args = append(args, string(hidx))
	return append(args, tokens...)
}

// resize returns s with length n, reusing its array if it is large enough.
func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// groupsOf returns the groups the digests of ds belong to.
func (c *conn) groupsOf(ds []digest.Digest) []int {
	ng := len(c.layout.groups)
	if ng == 1 {
		return []int{0}
	}
	seen := make([]bool, ng)
	gs := make([]int, 0, min(len(ds), ng))
	for _, d := range ds {
		g := c.layout.groupOf(d)
		if !seen[g] {
			seen[g] = true
			gs = append(gs, g)
		}
	}
	return gs
}

// scriptCalls builds one EVALSHA of s per group and chunk of at most
// maxKeysPerScript digests. The claim script gets the lease, the window and
// the group's status prefix after the token, and the holders of its digests
// where holders names any (see claimScript).
func (t *Tier) scriptCalls(ctx context.Context, c *conn, s *redis.Script, b *batch, token string, ds []digest.Digest, holders []string) []*call {
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

	ng := len(l.groups)
	chunks := 0
	for g := range ng {
		if m := int(b.bounds[g+1] - b.bounds[g]); m > 0 {
			chunks += (m + maxKeysPerScript - 1) / maxKeysPerScript
		}
	}
	// Per chunk: evalsha, sha, numkeys, status key, keys..., token, extra...
	args := make([]any, 0, n+chunks*8)
	calls := make([]call, chunks)
	out := make([]*call, 0, chunks)
	tok := &token
	for g := range ng {
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
				args = appendHolders(args, holders, b.order[lo:end])
			}
			cl := &calls[len(out)]
			*cl = call{
				cmd:   redis.NewCmd(ctx, args[start:len(args):len(args)]...),
				route: status,
				idx:   b.order[lo:end],
			}
			out = append(out, cl)
			lo = end
		}
	}
	return out
}
