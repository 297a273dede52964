package redistier

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, ignoreDialProber)
}

// ignoreDialProber: a go-redis pool whose every connection failed to dial
// (a killed server) dials again every second in a goroutine of its own,
// which ends within a second of the pool's Close.
var ignoreDialProber = goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")

// digests returns n distinct digests unique to the test and salt.
func digests(t testing.TB, salt string, n int) []digest.Digest {
	ds := make([]digest.Digest, n)
	for i := range ds {
		ds[i] = digest.Of(fmt.Appendf(nil, "%s/%s/%d", t.Name(), salt, i))
	}
	return ds
}

// Settings of a test tier that leaves them zero: the processor's defaults.
const (
	testTimeout   = 250 * time.Millisecond
	testTierLease = 30 * time.Second
)

// newTier returns a started tier; zero Timeout and Lease take the test
// defaults.
func newTier(t testing.TB, opts Options) *Tier {
	t.Helper()
	if opts.Timeout == 0 {
		opts.Timeout = testTimeout
	}
	if opts.Lease == 0 {
		opts.Lease = testTierLease
	}
	tr := New(opts)
	t.Cleanup(func() {
		if err := tr.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if err := tr.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	return tr
}

// lay returns the key layout of a connected tier.
func (tr *Tier) lay() *layout {
	c := tr.conn.Load()
	if c == nil {
		panic("redistier test: the tier's topology is not known")
	}
	return c.layout.Load()
}

func claim(t testing.TB, tr *Tier, token string, ds ...digest.Digest) []bool {
	t.Helper()
	claimed := make([]bool, len(ds))
	if err := tr.claimBools(context.Background(), token, ds, claimed); err != nil {
		t.Fatalf("Claim: %v", err)
	}
	return claimed
}

// claimDownstream claims ds under token as a batch that goes downstream (its
// claim renewed until settled), and fails unless every one is won.
func claimDownstream(t testing.TB, tr *Tier, token string, ds ...digest.Digest) {
	t.Helper()
	answers := make([]Answer, len(ds))
	_, err := tr.Claim(context.Background(), token, ds, answers, false)
	if err != nil || slices.ContainsFunc(answers, func(a Answer) bool { return a != Claimed }) {
		t.Fatalf("Claim: %v, %v", answers, err)
	}
}

// claimBools is Claim reduced to claimed or not. The claim is not renewed
// (as if its collector had died), so that tests see no renewals they did
// not ask for.
func (tr *Tier) claimBools(ctx context.Context, token string, ds []digest.Digest, claimed []bool) error {
	answers := make([]Answer, len(claimed))
	_, err := tr.Claim(ctx, token, ds, answers, false)
	tr.w.drop(token)
	for i, a := range answers {
		claimed[i] = a == Claimed
	}
	return err
}

// ages makes test tokens younger with every call.
var ages atomic.Uint64

// testToken returns a token younger than every one made before it.
func testToken() string { return NewToken(ages.Add(1)) }

// commit commits at once, where Commit queues.
func commit(t testing.TB, tr *Tier, token string, ds ...digest.Digest) {
	t.Helper()
	if err := tr.settle(context.Background(), OpCommit, token, ds, false); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

// release releases at once, where Release queues.
func release(t testing.TB, tr *Tier, token string, ds ...digest.Digest) {
	t.Helper()
	if err := tr.settle(context.Background(), OpRelease, token, ds, false); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

func wantClaimed(t testing.TB, got []bool, want ...bool) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("claimed = %v, want %v", got, want)
	}
}

// observations records Observe calls.
type observations struct {
	mu  sync.Mutex
	got []string
}

func (o *observations) observe(op, result string, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, op+"/"+result)
}

// count returns how many times what (op/result) was observed.
func (o *observations) count(what string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, g := range o.got {
		if g == what {
			n++
		}
	}
	return n
}

func (o *observations) take() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	got := o.got
	o.got = nil
	return got
}

// store reads keys directly, bypassing the tier.
type store interface {
	redis.Cmdable
	scanAll(t testing.TB, match string) map[string]string
}

type standaloneStore struct{ *redis.Client }

func (s standaloneStore) scanAll(t testing.TB, match string) map[string]string {
	t.Helper()
	return scanValues(t, s.Client, match)
}

type clusterStore struct{ *redis.ClusterClient }

func (s clusterStore) scanAll(t testing.TB, match string) map[string]string {
	t.Helper()
	var mu sync.Mutex
	all := map[string]string{}
	err := s.ForEachMaster(context.Background(), func(_ context.Context, c *redis.Client) error {
		kv := scanValues(t, c, match)
		mu.Lock()
		defer mu.Unlock()
		for k, v := range kv {
			all[k] = v
		}
		return nil
	})
	if err != nil {
		t.Fatalf("scan cluster: %v", err)
	}
	return all
}

// scanValues returns every key matching match, with its value, from one
// node; a hash's fields as keys of their own: the hash's name, "/", the
// field.
func scanValues(t testing.TB, c *redis.Client, match string) map[string]string {
	ctx := context.Background()
	kv := map[string]string{}
	var keys []string
	iter := c.Scan(ctx, 0, match, 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Errorf("SCAN: %v", err)
		return kv
	}
	slices.Sort(keys)
	keys = slices.Compact(keys) // SCAN may return a key twice
	for _, k := range keys {
		if typ := c.Type(ctx, k).Val(); typ == "hash" {
			for f, v := range c.HGetAll(ctx, k).Val() {
				kv[k+"/"+f] = v
			}
			continue
		}
		v, err := c.Get(ctx, k).Result()
		switch {
		case err == redis.Nil: // expired since the SCAN
		case err != nil:
			t.Errorf("GET %q: %v", k, err)
		default:
			kv[k] = v
		}
	}
	return kv
}

// hashOf returns the name of d's record hash, by its group's shape in s.
func hashOf(t testing.TB, s store, l *layout, d digest.Digest) string {
	t.Helper()
	v, err := s.HMGet(context.Background(), l.groups[l.groupOf(d)].shape, "L", "p").Result()
	if err != nil {
		t.Fatalf("HMGET shape: %v", err)
	}
	var level, split uint
	if v[0] != nil {
		if _, err := fmt.Sscan(v[0].(string), &level); err != nil {
			t.Fatalf("shape level %q: %v", v[0], err)
		}
		if _, err := fmt.Sscan(v[1].(string), &split); err != nil {
			t.Fatalf("shape split %q: %v", v[1], err)
		}
	}
	return l.hashName(d, level, split)
}

// wantOwner fails t unless d's field is held by token's claim ("": held by
// none).
func wantOwner(t testing.TB, s store, l *layout, d digest.Digest, token string) {
	t.Helper()
	v, err := s.HGet(context.Background(), hashOf(t, s, l, d), string(appendField(nil, d))).Result()
	if err == redis.Nil {
		v, err = "", nil
	}
	if err != nil {
		t.Fatalf("HGET digest %s: %v", d, err)
	}
	want := ""
	if token != "" {
		want = ClaimID(token)
	}
	if len(v) > 0 {
		v = v[stampSize:]
	}
	if v != want {
		t.Fatalf("digest %s is held by id %q, want %q", d, v, want)
	}
}

// stampSize is the bytes of a record's stamp, before its claim's id.
const stampSize = 3

// wantRecordPTTL fails t unless d's record hash outlives the window: it is
// kept a half window past its last stamp (layout.go).
func wantRecordPTTL(t testing.TB, s store, l *layout, d digest.Digest, window, lease time.Duration) {
	t.Helper()
	wantPTTL(t, s, hashOf(t, s, l, d), window, 2*window+3*lease+3*time.Second)
}

// wantCommitted fails t unless the status key holds a commit, made within
// the last minute by Redis's clock.
func wantCommitted(t testing.TB, s store, key string) {
	t.Helper()
	v, err := s.Get(context.Background(), key).Result()
	if err != nil || !strings.HasPrefix(v, "c") {
		t.Fatalf("GET %q = %q (%v), want a commit", key, v, err)
	}
	now, err := s.Time(context.Background()).Result()
	at, perr := strconv.ParseInt(v[1:], 10, 64)
	if err != nil || perr != nil || now.Unix()-at < 0 || now.Unix()-at > 60 {
		t.Fatalf("status %q holds %q: a commit at %q, now %v (%v)", key, v, v[1:], now, err)
	}
}

// electAll asks each election of es in turn, as a batch does, and sets
// answers[i] for es[i].
func electAll(ctx context.Context, tr *Tier, token string, failover time.Duration, es []Election, answers []ElectionAnswer) error {
	for i, e := range es {
		a, err := tr.Elect(ctx, token, failover, e)
		answers[i] = a
		if err != nil {
			return err
		}
	}
	return nil
}

// isRollMark reports whether k, from scanValues, is a record hash's field
// "", holding the second until which the hash is kept.
func isRollMark(k string) bool {
	name, f, ok := strings.Cut(k, "/")
	return ok && f == "" && strings.Contains(name, strconv.Itoa(layoutVersion)+":h")
}

// isRecord reports whether k, from scanValues, is a record: a field of a
// record hash but its roll mark.
func isRecord(k string) bool {
	name, f, ok := strings.Cut(k, "/")
	return ok && f != "" && strings.Contains(name, strconv.Itoa(layoutVersion)+":h")
}
