// Package redistier is the dedup processor's shared tier: it claims record
// digests in Redis (standalone, Cluster or Sentinel) so that collectors
// sharing one Redis let exactly one copy of a record through.
//
// A claim is two-phase (DESIGN §2 item 6). Claim marks the digests of a
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
// Measured on the 2-core development machine (Redis 7.0.15, loopback, 4
// callers, batches of 1000 unique digests), claim+commit moves 403k records/s
// where redis-benchmark's pipelined SET NX PX moves 454k (89%), at 161 bytes
// of Redis memory per record; bench_test.go has the full comparison.
package redistier

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/breaker"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

// Defaults for zero Options fields.
const (
	DefaultTimeout = 250 * time.Millisecond
	// DefaultLease is 30 s. A lease must outlast the longest time a batch
	// can spend in the next consumer between Claim and Commit/Release: if it
	// ends first, another instance may take the digests over and a copy gets
	// through. The next consumer normally returns within milliseconds (the
	// exporters' sending queue accepts the batch) or within an exporter's
	// timeout (5 s by default for OTLP); 30 s covers both with a wide margin.
	// It must also stay short, because it is how long a collector that died
	// mid-batch blocks its senders' retries of that batch, which retry for
	// minutes (5 min by default in the Collector). A pipeline whose exporter
	// retries synchronously (retry_on_failure without sending_queue) can
	// block for up to its max_elapsed_time and needs a longer lease.
	DefaultLease = 30 * time.Second
)

// Operation names and results passed to Options.Observe.
const (
	OpClaim = "claim"
	// OpRecheck: a repeated claim of digests that were held by a pending
	// claim, while waiting for its outcome.
	OpRecheck = "recheck"
	OpCommit  = "commit"
	OpRelease = "release"

	ResultOK      = "ok"
	ResultError   = "error"
	ResultTimeout = "timeout"
	// ResultSkipped: the breaker was open and no request was made.
	ResultSkipped = "skipped"
)

// ErrBreakerOpen is returned (wrapped) when the circuit breaker is open and
// the call was not attempted.
var ErrBreakerOpen = errors.New("circuit breaker open")

// Options configures a Tier.
type Options struct {
	// Endpoints: one address is a standalone server, several are seeds of a
	// Redis Cluster; with MasterName set they are Sentinel addresses.
	Endpoints []string
	// MasterName selects Sentinel: the name of the monitored master.
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
	// scripts and a retry on a broken connection. Default DefaultTimeout.
	Timeout time.Duration
	// Window is how long a claimed digest is remembered, counted from the
	// claim. Required.
	Window time.Duration
	// Lease is how long a pending claim stays alive without Commit. Default
	// DefaultLease, whose comment explains the choice.
	Lease time.Duration
	// Breaker configures the circuit breaker; zero fields take its defaults
	// (open after 5 consecutive failures for 5 s, doubling to 1 min).
	Breaker breaker.Config
	// Observe, if set, is called once per call with the operation (OpClaim,
	// OpCommit, OpRelease), its result (ResultOK, ResultError, ResultTimeout,
	// ResultSkipped) and its duration (zero when skipped). It is called
	// synchronously and concurrently, and must be cheap.
	Observe func(op, result string, d time.Duration)
}

// Tier is a connection to the shared tier. It is safe for concurrent use.
type Tier struct {
	client   redis.UniversalClient
	layout   layout
	timeout  time.Duration
	leaseArg string // lease in ms, as a script argument
	winArg   string // window in ms, as a script argument
	breaker  *breaker.Breaker
	observe  func(op, result string, d time.Duration)
}

// New validates opts and returns a Tier. It makes no network call: the first
// Claim connects.
func New(opts Options) (*Tier, error) {
	var errs []error
	if len(opts.Endpoints) == 0 {
		errs = append(errs, errors.New("endpoints must not be empty"))
	}
	for _, e := range opts.Endpoints {
		if _, _, err := net.SplitHostPort(e); err != nil {
			errs = append(errs, fmt.Errorf("endpoint %q: want host:port", e))
		}
	}
	cluster := opts.MasterName == "" && len(opts.Endpoints) > 1
	if cluster && opts.DB != 0 {
		errs = append(errs, fmt.Errorf("db must be 0 with a Redis Cluster, got %d", opts.DB))
	}
	if opts.DB < 0 {
		errs = append(errs, fmt.Errorf("db must be >= 0, got %d", opts.DB))
	}
	// Redis expiries are whole milliseconds.
	if opts.Window < time.Millisecond {
		errs = append(errs, fmt.Errorf("window must be >= 1ms, got %s", opts.Window))
	}
	if opts.Lease != 0 && opts.Lease < time.Millisecond {
		errs = append(errs, fmt.Errorf("lease must be >= 1ms (or 0 for the default), got %s", opts.Lease))
	}
	if opts.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout must be >= 0, got %s", opts.Timeout))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("dedup: redis: %w", err)
	}
	timeout := orDefault(opts.Timeout, DefaultTimeout)
	lease := orDefault(opts.Lease, DefaultLease)

	client := redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs:      opts.Endpoints,
		MasterName: opts.MasterName,
		Username:   opts.Username,
		Password:   opts.Password,
		DB:         opts.DB,
		TLSConfig:  opts.TLS,

		DialTimeout:           timeout,
		ReadTimeout:           timeout,
		WriteTimeout:          timeout,
		PoolTimeout:           timeout,
		ContextTimeoutEnabled: true,
		// One retry on a broken connection; every call is idempotent for
		// its token, and the call's context bounds the total time.
		MaxRetries:    1,
		DialerRetries: 1,
		// Plain Redis does not know the maintenance-notifications handshake
		// and would cost a failed command per new connection.
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	return &Tier{
		client:   client,
		layout:   newLayout(opts.KeyPrefix, cluster),
		timeout:  timeout,
		leaseArg: strconv.FormatInt(lease.Milliseconds(), 10),
		winArg:   strconv.FormatInt(opts.Window.Milliseconds(), 10),
		breaker:  breaker.New(opts.Breaker),
		observe:  opts.Observe,
	}, nil
}

func orDefault(v, def time.Duration) time.Duration {
	if v == 0 {
		return def
	}
	return v
}

// Close closes the connections.
func (t *Tier) Close() error {
	return t.client.Close()
}

// BreakerState returns the circuit breaker's state, for a gauge.
func (t *Tier) BreakerState() breaker.State {
	return t.breaker.State()
}

// NewToken returns a claim token of the given age: 16 bytes, the age
// big-endian then 64 random bits. Tokens compare bytewise, so a token made
// with a smaller age is older, and two tokens of one age still differ and
// are ordered. Each claiming batch needs its own token: Commit and Release
// act on everything claimed under it.
//
// The age lets batches that meet each other's pending claims decide who
// waits (see PendingOlder); any number that grows with the time a batch
// started will do, e.g. microseconds since the epoch.
func NewToken(age uint64) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], age)
	_, _ = rand.Read(b[8:]) // never fails (crypto/rand, Go >= 1.24)
	return string(b[:])
}

// Answer is the shared tier's answer for one digest of a claim.
type Answer uint8

const (
	// Held: a committed claim of another token holds the digest: its
	// record was delivered.
	Held Answer = iota
	// Claimed: this call claimed the digest.
	Claimed
	// Pending: a pending claim of a younger token holds the digest: its
	// batch is still on its way downstream, and may yet be released (its
	// next consumer failed) or end with its lease (its collector died).
	Pending
	// PendingOlder: as Pending, but the holder's token is older than the
	// caller's (tokens compare bytewise; see NewToken).
	PendingOlder
)

// ClaimAnswers atomically claims, under token, every digest of ds that no
// live claim holds, in one round trip (one per node in a Cluster), and
// answers for each: Claimed if this call claimed ds[i] (or token already
// held it), else Held, Pending or PendingOlder by the state and age of the
// claim that holds it. Of any number of concurrent claims of a digest, in
// this process or in others sharing the Redis, exactly one gets Claimed; so
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
//
// On error, every answer is Held, and some digests may have been claimed
// anyway (the reply was lost): they stay pending until the lease ends, or
// until Release with the same token. Retrying with the same token is safe:
// digests already held by the token answer Claimed.
func (t *Tier) ClaimAnswers(ctx context.Context, token string, ds []digest.Digest, answers []Answer) error {
	return t.claimAs(ctx, OpClaim, token, ds, answers, false)
}

// ClaimDistinct is ClaimAnswers for a caller that never passes a digest
// twice in one call: it skips looking for repeats (a map of the batch's
// digests, about a fifth of the client's CPU per claim). A digest passed
// twice anyway would be answered Claimed at both positions.
func (t *Tier) ClaimDistinct(ctx context.Context, token string, ds []digest.Digest, answers []Answer) error {
	return t.claimAs(ctx, OpClaim, token, ds, answers, true)
}

// Recheck is ClaimAnswers for digests a previous call of the same token
// found Pending, reported to Observe as OpRecheck so that waiting on other
// claims is told apart from claiming.
func (t *Tier) Recheck(ctx context.Context, token string, ds []digest.Digest, answers []Answer) error {
	return t.claimAs(ctx, OpRecheck, token, ds, answers, false)
}

func (t *Tier) claimAs(ctx context.Context, op, token string, ds []digest.Digest, answers []Answer, distinct bool) error {
	if len(answers) < len(ds) {
		return fmt.Errorf("dedup: redis claim: %d results for %d digests", len(answers), len(ds))
	}
	if token == "" {
		return errors.New("dedup: redis claim: empty token")
	}
	answers = answers[:len(ds)]
	clear(answers)
	if len(ds) == 0 {
		return nil
	}
	err := t.call(ctx, op, func(ctx context.Context) error {
		return t.claim(ctx, token, ds, answers, distinct)
	})
	if err != nil {
		clear(answers)
	}
	return err
}

// Commit makes the digests claimed under token hold for the rest of their
// window (counted from the claim), in one round trip that costs one command
// per batch (per tag group in a Cluster), whatever the batch size. ds are
// the digests the claim won; passing others is harmless, but in a Cluster it
// may leave a stray status key for a window in a group where the claim won
// nothing. A digest that another claim took over after this claim's lease
// ended stays with that claim; a digest whose lease ended but was not taken
// over becomes committed again. Commit is idempotent.
func (t *Tier) Commit(ctx context.Context, token string, ds []digest.Digest) error {
	if len(ds) == 0 {
		return nil
	}
	return t.call(ctx, OpCommit, func(ctx context.Context) error {
		gs := t.groupsOf(ds)
		cmds := make([]redis.Cmder, 0, len(gs))
		for _, g := range gs {
			cmds = append(cmds, redis.NewStatusCmd(ctx, "set", t.layout.statusKey(g, token), "c", "px", t.winArg))
		}
		return t.exec(ctx, cmds)
	})
}

// Release ends the claim of token on the digests ds: it deletes each digest
// key that still holds token (compare-and-delete) and the claim's status, so
// the digests can be claimed again at once. A digest that another claim took
// over keeps its new owner. Release is idempotent; releasing a committed
// claim ends it too.
func (t *Tier) Release(ctx context.Context, token string, ds []digest.Digest) error {
	if len(ds) == 0 {
		return nil
	}
	return t.call(ctx, OpRelease, func(ctx context.Context) error {
		// A repeated digest is harmless here (its second delete finds
		// nothing), so no need to look for repeats.
		b := t.prepare(ds, true)
		defer b.free()
		return t.execScripts(ctx, t.scriptCmds(ctx, releaseScript, b, token, ds))
	})
}

// call runs one operation through the breaker with the timeout, and reports
// it to the observer.
func (t *Tier) call(ctx context.Context, op string, fn func(context.Context) error) error {
	ticket, ok := t.breaker.Allow()
	if !ok {
		if t.observe != nil {
			t.observe(op, ResultSkipped, 0)
		}
		return fmt.Errorf("dedup: redis %s: %w", op, ErrBreakerOpen)
	}
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, t.timeout)
	err := fn(cctx)
	cancel()
	d := time.Since(start)

	result, outcome := ResultOK, breaker.Success
	switch {
	case err == nil:
	case ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded):
		// The caller gave up: that says nothing about Redis.
		result, outcome = ResultError, breaker.Unknown
	case IsTimeout(err):
		result, outcome = ResultTimeout, breaker.Failure
	default:
		result, outcome = ResultError, breaker.Failure
	}
	t.breaker.Done(ticket, outcome)
	if t.observe != nil {
		t.observe(op, result, d)
	}
	if err != nil {
		return fmt.Errorf("dedup: redis %s: %w", op, err)
	}
	return nil
}

// IsTimeout reports whether err is a timeout: no answer from Redis within
// the call's deadline, or no free connection in time.
func IsTimeout(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redis.ErrPoolTimeout) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

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
func (t *Tier) prepare(ds []digest.Digest, distinct bool) *batch {
	b := batchPool.Get().(*batch)
	ng := len(t.layout.groups)
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
		b.bounds[t.layout.groupOf(d)+1]++
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
		g := t.layout.groupOf(d)
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

// resize returns s with length n, reusing its array if it is large enough.
func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// groupsOf returns the groups the digests of ds belong to.
func (t *Tier) groupsOf(ds []digest.Digest) []int {
	if len(t.layout.groups) == 1 {
		return []int{0}
	}
	var seen [clusterTags]bool
	gs := make([]int, 0, min(len(ds), clusterTags))
	for _, d := range ds {
		g := t.layout.groupOf(d)
		if !seen[g] {
			seen[g] = true
			gs = append(gs, g)
		}
	}
	return gs
}

// scriptCall is one script invocation: its command and the indexes of ds
// its digest keys stand for.
type scriptCall struct {
	cmd *redis.Cmd
	idx []int32
}

// scriptCmds builds one EVALSHA of s per group and chunk of at most
// maxKeysPerScript digests. The claim script gets the lease, the window and
// the group's status prefix after the token.
func (t *Tier) scriptCmds(ctx context.Context, s *redis.Script, b *batch, token string, ds []digest.Digest) []scriptCall {
	n := len(b.order)
	claim := s == claimScript
	// All keys live in one string; each key is a substring of it, and each
	// argument points at its key, so building the commands costs a few
	// allocations per batch rather than two per key.
	var sb strings.Builder
	sb.Grow(n * (len(t.layout.groups[len(t.layout.groups)-1].prefix) + 2 + digest.Size))
	ends := make([]int, n)
	var buf [digest.Size]byte
	for k, i := range b.order {
		sb.WriteString(t.layout.groups[t.layout.groupOf(ds[i])].prefix)
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

	ng := len(t.layout.groups)
	chunks := 0
	for g := range ng {
		if m := int(b.bounds[g+1] - b.bounds[g]); m > 0 {
			chunks += (m + maxKeysPerScript - 1) / maxKeysPerScript
		}
	}
	// Per chunk: evalsha, sha, numkeys, status key, keys..., token, extra...
	args := make([]any, 0, n+chunks*8)
	calls := make([]scriptCall, 0, chunks)
	tok := &token
	for g := range ng {
		lo, hi := int(b.bounds[g]), int(b.bounds[g+1])
		for lo < hi {
			end := min(lo+maxKeysPerScript, hi)
			start := len(args)
			args = append(args, "evalsha", s.Hash(), 1+end-lo, t.layout.statusKey(g, token))
			for k := lo; k < end; k++ {
				args = append(args, &keys[k])
			}
			args = append(args, tok)
			if claim {
				args = append(args, &t.leaseArg, &t.winArg, &t.layout.groups[g].statusPrefix)
			}
			calls = append(calls, scriptCall{
				cmd: redis.NewCmd(ctx, args[start:len(args):len(args)]...),
				idx: b.order[lo:end],
			})
			lo = end
		}
	}
	return calls
}

// claim runs the claim script over ds and fills answers.
func (t *Tier) claim(ctx context.Context, token string, ds []digest.Digest, answers []Answer, distinct bool) error {
	b := t.prepare(ds, distinct)
	defer b.free()
	calls := t.scriptCmds(ctx, claimScript, b, token, ds)
	if err := t.execScripts(ctx, calls); err != nil {
		return err
	}
	for _, c := range calls {
		switch res := c.cmd.Val().(type) {
		case int64: // all claimed
			if res != int64(len(c.idx)) {
				return fmt.Errorf("claim script claimed %d of %d digests", res, len(c.idx))
			}
			for _, i := range c.idx {
				answers[i] = Claimed
			}
		case string:
			if len(res) != len(c.idx) {
				return fmt.Errorf("claim script answered %d results for %d digests", len(res), len(c.idx))
			}
			for j, i := range c.idx {
				switch res[j] {
				case '1':
					answers[i] = Claimed
				case '2':
					answers[i] = Pending
				case '3':
					answers[i] = PendingOlder
				default:
					answers[i] = Held
				}
			}
		default:
			return fmt.Errorf("claim script answered %T", res)
		}
	}
	return nil
}

// execScripts sends the script calls in one pipeline. Calls answered
// NOSCRIPT (the server restarted, failed over or flushed its scripts) are
// sent again as EVAL with the script's source, which also reloads it.
func (t *Tier) execScripts(ctx context.Context, calls []scriptCall) error {
	cmds := make([]redis.Cmder, len(calls))
	for i, c := range calls {
		cmds[i] = c.cmd
	}
	err := t.exec(ctx, cmds)
	if err == nil {
		return nil
	}
	var retry []redis.Cmder
	for i, c := range calls {
		cerr := c.cmd.Err()
		if cerr == nil {
			continue
		}
		if !redis.HasErrorPrefix(cerr, "NOSCRIPT") {
			return cerr
		}
		args := c.cmd.Args()
		args[0], args[1] = "eval", scriptSource(args[1])
		calls[i].cmd = redis.NewCmd(ctx, args...)
		retry = append(retry, calls[i].cmd)
	}
	if len(retry) == 0 {
		return err
	}
	return t.exec(ctx, retry)
}

func scriptSource(sha any) string {
	switch sha {
	case claimScript.Hash():
		return claimSource
	case releaseScript.Hash():
		return releaseSource
	}
	panic(fmt.Sprintf("redistier: unknown script %v", sha))
}

// exec sends cmds in one round trip (one per node in a Cluster) and returns
// the first error.
func (t *Tier) exec(ctx context.Context, cmds []redis.Cmder) error {
	if len(cmds) == 1 {
		return t.client.Process(ctx, cmds[0])
	}
	pipe := t.client.Pipeline()
	for _, c := range cmds {
		_ = pipe.Process(ctx, c)
	}
	_, err := pipe.Exec(ctx)
	return err
}
