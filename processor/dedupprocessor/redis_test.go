package dedupprocessor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/config/configopaque"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/config/configtls"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/otel/attribute"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/claim"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/redistier"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/faultproxy"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

func redisConfig(endpoints []string, onError ErrorPolicy) *Config {
	cfg := defaultConfig()
	cfg.Logs.Key = []string{`attributes["event.id"]`}
	cfg.PendingWait = 5 * time.Second // generous: -race on 2 busy cores
	cfg.Redis = configoptional.Some(RedisConfig{ClusterSlots: 12,
		Endpoints: endpoints,
		Mode:      RedisModeAuto,
		Timeout:   300 * time.Millisecond,
		Lease:     30 * time.Second,
		OnError:   onError,
	})
	return cfg
}

// events builds one batch of records with the given event ids.
func events(ids ...int) plog.Logs {
	recs := make([]rec, len(ids))
	for i, id := range ids {
		recs[i] = rec{body: fmt.Sprintf("secret body %d", id), resource: "svc",
			attrs: map[string]any{"event.id": fmt.Sprintf("evt-%d", id), "user.email": "someone@example.com"}}
	}
	return logs(recs...)
}

func (h *harness) redisRequests(op, result string) int64 {
	return h.metric("otelcol_processor_dedup_redis_requests", attribute.String("op", op), attribute.String("result", result))
}

// TestTwoInstancesShareRedisExactlyOnce plays two collectors behind a load
// balancer: both get copies of the same events at the same moment, and
// each event is delivered by exactly one of them.
func TestTwoInstancesShareRedisExactlyOnce(t *testing.T) {
	srv := redistest.Standalone(t)
	const nEvents, batchSize = 2000, 100
	sinks := []*consumertest.LogsSink{new(consumertest.LogsSink), new(consumertest.LogsSink)}
	hs := []*harness{
		newHarness(t, redisConfig([]string{srv.Addr()}, ErrorPass), sinks[0]),
		newHarness(t, redisConfig([]string{srv.Addr()}, ErrorPass), sinks[1]),
	}
	var wg sync.WaitGroup
	for inst := range 2 {
		for sender := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for start := 0; start < nEvents; start += batchSize {
					ids := make([]int, batchSize)
					for i := range ids {
						ids[i] = start + (i*7+sender*13)%batchSize
					}
					if err := hs[inst].consume(events(ids...)); err != nil {
						t.Error(err)
					}
				}
			}()
		}
	}
	wg.Wait()
	var got [][]string
	for _, s := range sinks {
		got = append(got, bodies(s))
	}
	testkit.WantEachOnce(t, testkit.Counts(got...), nEvents)
	u0, u1 := hs[0].outcome("unique"), hs[1].outcome("unique")
	r0, r1 := hs[0].tier("redis"), hs[1].tier("redis")
	d0, d1 := hs[0].outcome("duplicate"), hs[1].outcome("duplicate")
	if u0+u1 != nEvents || d0+d1 != 3*nEvents {
		t.Fatalf("unique %d+%d, duplicate %d+%d; want %d unique and %d duplicates", u0, u1, d0, d1, nEvents, 3*nEvents)
	}
	if r0+r1 == 0 {
		t.Fatal("no duplicate was caught by the shared tier: the instances did not race")
	}
	// Every instance claims; commits come from the batches that won something,
	// which may all be on one side of the race, and reach Redis after their
	// batch returned.
	c0, c1 := hs[0].redisRequests("claim", "ok"), hs[1].redisRequests("claim", "ok")
	var commits int64
	testkit.WaitFor(t, "a commit counted", 5*time.Second, func() bool {
		commits = hs[0].redisRequests("commit", "ok") + hs[1].redisRequests("commit", "ok")
		return commits != 0
	})
	if c0 == 0 || c1 == 0 || commits == 0 {
		t.Fatalf("claims ok %d and %d, commits ok %d: round trips not counted", c0, c1, commits)
	}
	if f := hs[0].redisRequests("claim", "error") + hs[1].redisRequests("claim", "error"); f != 0 {
		t.Fatalf("%d failed claims", f)
	}
	assertOnlyDigestsInRedis(t, srv)
}

// assertOnlyDigestsInRedis scans every key and value: no record content
// (bodies, attribute values) may ever reach Redis.
func assertOnlyDigestsInRedis(t *testing.T, srv *redistest.Server) {
	t.Helper()
	ctx := context.Background()
	c := srv.Client()
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) == 0 {
		t.Fatal("no keys in Redis")
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, "dedup:") {
			t.Fatalf("key %q lacks the namespace prefix", k)
		}
		// A status key's value, or a record hash's fields and values.
		var v string
		if c.Type(ctx, k).Val() == "hash" {
			kv, err := c.HGetAll(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			v = fmt.Sprint(kv)
		} else if v, err = c.Get(ctx, k).Result(); err != nil {
			t.Fatal(err)
		}
		for _, secret := range []string{"secret", "evt-", "someone@example.com", "svc"} {
			if strings.Contains(k, secret) || strings.Contains(v, secret) {
				t.Fatalf("record content %q found in Redis key %q = %q", secret, k, v)
			}
		}
	}
}

// TestFailedDeliveryReleasesSharedClaims: instance A claims, its exporter
// fails; the sender's retry lands on instance B and is delivered.
func TestFailedDeliveryReleasesSharedClaims(t *testing.T) {
	srv := redistest.Standalone(t)
	flaky := &flakyLogs{fail: 1}
	a := newHarness(t, redisConfig([]string{srv.Addr()}, ErrorPass), flaky)
	sinkB := new(consumertest.LogsSink)
	b := newHarness(t, redisConfig([]string{srv.Addr()}, ErrorPass), sinkB)
	if err := a.consume(events(1, 2, 3)); err == nil {
		t.Fatal("A's next consumer failed but A returned no error")
	}
	if r := a.metric("otelcol_processor_dedup_released"); r != 3 {
		t.Fatalf("released = %d, want 3", r)
	}
	if err := b.consume(events(1, 2, 3)); err != nil {
		t.Fatal(err)
	}
	if n := sinkB.LogRecordCount(); n != 3 {
		t.Fatalf("B delivered %d of the retry, want 3", n)
	}
	// And now both instances know them.
	if err := a.consume(events(1, 2, 3)); err != nil {
		t.Fatal(err)
	}
	if n, d := flaky.sink.LogRecordCount(), a.tier("redis"); n != 0 || d != 3 {
		t.Fatalf("A delivered %d, redis duplicates %d; want 0 and 3", n, d)
	}
}

// TestRedisDownPassKeepsEveryUnique kills Redis mid-stream: under pass,
// every unique record is still delivered and duplicates are caught by the
// local tier; when Redis is back, the shared tier works again.
func TestRedisDownPassKeepsEveryUnique(t *testing.T) {
	srv := redistest.Standalone(t)
	sink := new(consumertest.LogsSink)
	h := newHarness(t, redisConfig([]string{srv.Addr()}, ErrorPass), sink)
	if err := h.consume(events(1, 2)); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	for i := range 10 {
		if err := h.consume(events(10+i, 10+i, 1)); err != nil {
			t.Fatalf("pass must not fail the batch: %v", err)
		}
	}
	// 2 + 10 uniques; each batch had one in-batch copy and a local copy of 1.
	if n := sink.LogRecordCount(); n != 12 {
		t.Fatalf("delivered %d, want 12", n)
	}
	failed := h.redisRequests("claim", "error") + h.redisRequests("claim", "timeout")
	skipped := h.redisRequests("claim", "skipped")
	if failed+skipped != 10 || failed < 1 || skipped < 1 {
		t.Fatalf("claims failed=%d skipped=%d: want 10 in all, the breaker opening after the first failures", failed, skipped)
	}
	if s := h.metric("otelcol_processor_dedup_redis_breaker_state", attribute.String("node", srv.Addr())); s != 2 {
		t.Fatalf("breaker state = %d, want 2 (open)", s)
	}
	srv.Restart()
	// The breaker probes Redis again after its cooldown: batches keep
	// coming until it has closed.
	next := 1000
	testkit.WaitFor(t, "the breaker closed after Redis came back", 20*time.Second, func() bool {
		next++
		if err := h.consume(events(next)); err != nil {
			t.Fatal(err)
		}
		return h.metric("otelcol_processor_dedup_redis_breaker_state", attribute.String("node", srv.Addr())) == 0
	})
	before := h.redisRequests("claim", "ok")
	if err := h.consume(events(500)); err != nil {
		t.Fatal(err)
	}
	if after := h.redisRequests("claim", "ok"); after != before+1 {
		t.Fatalf("claim ok went %d -> %d, want +1", before, after)
	}
}

// TestRedisDownRefuseDeliversNoDuplicate: under refuse, batches fail while
// Redis is down and nothing is delivered; the sender's retries after Redis
// returns are delivered exactly once.
func TestRedisDownRefuseDeliversNoDuplicate(t *testing.T) {
	srv := redistest.Standalone(t)
	sink := new(consumertest.LogsSink)
	h := newHarness(t, redisConfig([]string{srv.Addr()}, ErrorRefuse), sink)
	if err := h.consume(events(1)); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	err := h.consume(events(1, 2, 3))
	if !errors.Is(err, claim.ErrSharedTier) {
		t.Fatalf("error = %v, want the retryable shared-tier error", err)
	}
	if n := sink.LogRecordCount(); n != 1 {
		t.Fatalf("delivered %d while Redis was down, want 1 (the first batch)", n)
	}
	srv.Restart()
	// Redis lost its data (no persistence): the retry of 1 is delivered again.
	// Every other copy is caught.
	testkit.WaitFor(t, "the retry accepted after Redis came back", 20*time.Second, func() bool {
		return h.consume(events(2, 3, 2)) == nil
	})
	if err := h.consume(events(2, 3)); err != nil {
		t.Fatal(err)
	}
	if got := bodies(sink); fmt.Sprint(got) != "[secret body 1 secret body 2 secret body 3]" {
		t.Fatalf("delivered %v", got)
	}
}

func TestDefaultKeyPrefixSeparatesProcessorsAndConfigs(t *testing.T) {
	a := redisConfig([]string{"127.0.0.1:1"}, ErrorPass)
	b := redisConfig([]string{"127.0.0.1:2"}, ErrorRefuse)
	id := component.MustNewID("dedup")
	if defaultKeyPrefix(id, a) != defaultKeyPrefix(id, b) {
		t.Fatal("one processor ID with the same identity settings must share a prefix (a fleet)")
	}
	if defaultKeyPrefix(id, a) == defaultKeyPrefix(component.MustNewIDWithName("dedup", "b"), a) {
		t.Fatal("two processor IDs share a prefix")
	}
	// A rolling change of the window (or of the Redis settings) keeps the
	// fleet on one key space: the layout's records carry their own windows.
	b.Window, b.Redis.Get().Lease, b.Redis.Get().ClusterSlots = 2*a.Window, a.Redis.Get().Lease/2, 2*a.Redis.Get().ClusterSlots
	if defaultKeyPrefix(id, a) != defaultKeyPrefix(id, b) {
		t.Fatal("a change of window, lease or cluster_slots moved the default key prefix")
	}
	b.Logs.Key = []string{`attributes["other.id"]`}
	if defaultKeyPrefix(id, a) == defaultKeyPrefix(id, b) {
		t.Fatal("configs with different keys share a prefix")
	}
}

// TestRedisTLSAndACLThroughConfig checks the processor's own settings reach
// the client: configtls files and an ACL user; a wrong password degrades
// (pass) with every claim counted as an error, never a failed batch.
func TestRedisTLSAndACLThroughConfig(t *testing.T) {
	srv := redistest.Standalone(t, redistest.WithTLS(), redistest.WithACLUser("dedup", "s3cret"))
	files := srv.TLS()
	tlsCfg := configtls.ClientConfig{}
	tlsCfg.CAFile, tlsCfg.CertFile, tlsCfg.KeyFile = files.CAFile, files.ClientCertFile, files.ClientKeyFile
	for _, tt := range []struct {
		password string
		ok       bool
	}{{"s3cret", true}, {"wrong", false}} {
		t.Run("password="+tt.password, func(t *testing.T) {
			cfg := redisConfig([]string{srv.Addr()}, ErrorPass)
			r := cfg.Redis.Get()
			r.Username, r.Password = "dedup", configopaque.String(tt.password)
			r.TLS = configoptional.Some(tlsCfg)
			sink := new(consumertest.LogsSink)
			h := newHarness(t, cfg, sink)
			if err := h.consume(events(1, 1, 2)); err != nil {
				t.Fatal(err)
			}
			if n := sink.LogRecordCount(); n != 2 {
				t.Fatalf("delivered %d, want 2", n)
			}
			ok, failed := h.redisRequests("claim", "ok"), h.redisRequests("claim", "error")
			if tt.ok && (ok != 1 || failed != 0) || !tt.ok && (ok != 0 || failed != 1) {
				t.Fatalf("claim ok=%d error=%d", ok, failed)
			}
		})
	}
}

// gatedLogs holds each batch until released, then answers with err. With
// hold set, only the batches it names are held; the others are delivered
// at once.
type gatedLogs struct {
	entered chan struct{}
	release chan error
	hold    func(plog.Logs) bool
	sink    consumertest.LogsSink
}

func newGatedLogs() *gatedLogs {
	return &gatedLogs{entered: make(chan struct{}, 16), release: make(chan error, 16)}
}

func (g *gatedLogs) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }

func (g *gatedLogs) ConsumeLogs(ctx context.Context, ld plog.Logs) error {
	if g.hold != nil && !g.hold(ld) {
		return g.sink.ConsumeLogs(ctx, ld)
	}
	g.entered <- struct{}{}
	if err := <-g.release; err != nil {
		return err
	}
	return g.sink.ConsumeLogs(ctx, ld)
}

// TestCopyOfARecordInFlightElsewhereWaits: instance B gets a copy of records
// instance A is still delivering. B waits for A's outcome instead of
// dropping the copy: A fails, releases, and B delivers; A succeeds, and B's
// copy is a duplicate.
func TestCopyOfARecordInFlightElsewhereWaits(t *testing.T) {
	srv := redistest.Standalone(t)
	for _, tc := range []struct {
		name      string
		aResult   error
		bDelivers int
	}{
		{"owner fails", errors.New("exporter down"), 3},
		{"owner delivers", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gate := newGatedLogs()
			cfg := redisConfig([]string{srv.Addr()}, ErrorPass)
			cfg.Redis.Get().KeyPrefix = "otelcol-dedup:" + t.Name() + ":"
			a := newHarness(t, cfg, gate)
			sinkB := new(consumertest.LogsSink)
			b := newHarness(t, cfg, sinkB)
			aDone := make(chan error, 1)
			go func() { aDone <- a.consume(events(1, 2, 3)) }()
			<-gate.entered // A has claimed, and is delivering
			bDone := make(chan error, 1)
			go func() { bDone <- b.consume(events(1, 2, 3)) }()
			testkit.WaitFor(t, "B's claim met A's pending claims", 10*time.Second, func() bool { return b.redisRequests("claim", "ok") == 1 })
			select {
			case err := <-bDone:
				t.Fatalf("B answered while A's claim was pending: %v", err)
			default:
			}
			gate.release <- tc.aResult
			if err := <-aDone; (err != nil) != (tc.aResult != nil) {
				t.Fatalf("A returned %v", err)
			}
			if err := <-bDone; err != nil {
				t.Fatalf("B returned %v", err)
			}
			if n := sinkB.LogRecordCount(); n != tc.bDelivers {
				t.Fatalf("B delivered %d, want %d", n, tc.bDelivers)
			}
			if tc.bDelivers == 0 && b.tier("redis") != 3 {
				t.Fatalf("B's redis duplicates = %d, want 3", b.tier("redis"))
			}
		})
	}
}

// TestLocalWaitThenSharedClaimIsAClaim: a batch that waits only for a batch
// of its own collector claims in Redis once that wait is over, and that
// first call is counted as a claim: op="recheck" is for records another
// collector was still delivering.
func TestLocalWaitThenSharedClaimIsAClaim(t *testing.T) {
	srv := redistest.Standalone(t)
	cfg := redisConfig([]string{srv.Addr()}, ErrorRefuse)
	cfg.Redis.Get().KeyPrefix = "otelcol-dedup:" + t.Name() + ":"
	gate := newGatedLogs()
	gate.hold = holding("secret body 1") // only the first request is held
	h := newHarness(t, cfg, gate)

	first := consumeAsync(h, events(1, 2))
	<-gate.entered // claimed in both tiers, being delivered
	copyDone := consumeAsync(h, events(2, 3))
	// The copy's first call delivers 3; 2 waits for the first request.
	testkit.WaitFor(t, "the copy's first call", 10*time.Second, func() bool { return gate.sink.LogRecordCount() == 1 })
	notYet(t, copyDone, "the copy's request")
	gate.release <- nil
	if err := <-first; err != nil {
		t.Fatalf("first request: %v", err)
	}
	if err := <-copyDone; err != nil {
		t.Fatalf("the copy's request: %v", err)
	}
	assertBodies(t, &gate.sink, "secret body 3", "secret body 1", "secret body 2")
	if claims, rechecks := h.redisRequests("claim", "ok"), h.redisRequests("recheck", "ok"); claims != 2 || rechecks != 0 {
		t.Fatalf("redis requests: %d claims, %d rechecks; want 2 claims (one per batch), 0 rechecks", claims, rechecks)
	}
	if h.tier("local") != 1 {
		t.Fatalf("local duplicates = %d, want 1", h.tier("local"))
	}
}

// TestCopyOfARecordPendingTooLongIsRefused: the owner of a pending claim is
// gone (it never commits nor releases). A copy is refused with a retryable
// error, never dropped; once the lease ends, the retry is delivered.
func TestCopyOfARecordPendingTooLongIsRefused(t *testing.T) {
	srv := redistest.Standalone(t)
	cfg := redisConfig([]string{srv.Addr()}, ErrorPass)
	r := cfg.Redis.Get()
	r.Lease, cfg.PendingWait = 900*time.Millisecond, 200*time.Millisecond
	// The dead owner: a claim written through the tier and then abandoned.
	owner := redistier.New(redistier.Options{Endpoints: r.Endpoints, KeyPrefix: defaultKeyPrefix(component.MustNewID("dedup"), cfg), Window: cfg.Window, Lease: r.Lease, Timeout: r.Timeout})
	if err := owner.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	sink := new(consumertest.LogsSink)
	h := newHarness(t, cfg, sink)
	lp := h.proc.(*logsProcessor)
	var ds []digest.Digest
	ld := events(7, 8)
	b := claim.NewBatch(2, 0)
	lp.Identify(context.Background(), b, ld)
	ds = append(ds, batchDigests(b)...)
	if _, err := owner.Claim(context.Background(), redistier.NewToken(1), ds, make([]redistier.Answer, len(ds)), false); err != nil {
		t.Fatal(err)
	}
	owner.Close() // dies: its claim is renewed no more
	if err := h.consume(events(7, 8)); !errors.Is(err, claim.ErrInFlight) {
		t.Fatalf("error = %v, want the retryable pending error", err)
	}
	if n := sink.LogRecordCount(); n != 0 {
		t.Fatalf("delivered %d while the claim was pending", n)
	}
	time.Sleep(r.Lease) // the lease runs out: the passage of time is the point
	if err := h.consume(events(7, 8)); err != nil {
		t.Fatalf("retry after the lease: %v", err)
	}
	if n := sink.LogRecordCount(); n != 2 {
		t.Fatalf("retry delivered %d, want 2", n)
	}
}

// TestBatchLargerThanTheCacheLosesNothing: a request with more records than
// the local cache holds, with a copy of its first record at its end, claims
// each record once. Its export fails, so every claim is released: a copy of
// the first record from another sender is then delivered, not dropped as a
// copy of a record that never arrived.
func TestBatchLargerThanTheCacheLosesNothing(t *testing.T) {
	srv := redistest.Standalone(t)
	cfg := redisConfig([]string{srv.Addr()}, ErrorPass)
	cfg.Cache.MaxEntries = 10
	next := newGatedLogs()
	h := newHarness(t, cfg, next)
	ids := []int{1}
	for id := 100; id < 110; id++ {
		ids = append(ids, id)
	}
	ids = append(ids, 1)
	next.release <- errors.New("backend down")
	if err := h.consume(events(ids...)); err == nil {
		t.Fatal("the failed export was acknowledged")
	}
	next.release <- nil
	if err := h.consume(events(1)); err != nil {
		t.Fatalf("another sender's copy: %v", err)
	}
	assertBodies(t, &next.sink, "secret body 1")
	if n := h.metric("otelcol_processor_dedup_released"); n != 11 {
		t.Fatalf("released = %d, want the 11 records claimed", n)
	}
}

// TestLostClaimAnswerIsReleased: a claim whose replies are lost (the
// connection cut after the script ran, on both of go-redis's tries) may
// have been made all the same. Under on_error: refuse the batch is refused,
// and its claim is released by compare-and-delete, so the sender's retry is
// delivered at once instead of waiting out the lease.
func TestLostClaimAnswerIsReleased(t *testing.T) {
	srv := redistest.Standalone(t)
	proxy := faultproxy.New(t, srv.Addr())
	cfg := redisConfig([]string{proxy.Addr()}, ErrorRefuse)
	cfg.Window = 2 * time.Hour
	cfg.Redis.Get().Lease = time.Hour // only a release can free the claim in time
	sink := new(consumertest.LogsSink)
	h := newHarness(t, cfg, sink)
	cut := proxy.Add(&faultproxy.Rule{Match: faultproxy.Script(redistier.ScriptHash("claim")), Fault: faultproxy.CutAfter(), Times: 2})
	err := h.consume(events(1, 2))
	if !errors.Is(err, claim.ErrSharedTier) {
		t.Fatalf("claim whose replies were lost: %v, want the retryable shared-tier error", err)
	}
	if cut.Fired() != 2 || proxy.ScriptAnswered(redistier.ScriptHash("claim")) != 2 {
		t.Fatalf("claims cut %d, run %d; want both tries run and cut", cut.Fired(), proxy.ScriptAnswered(redistier.ScriptHash("claim")))
	}
	if err := h.consume(events(1, 2)); err != nil {
		t.Fatalf("the retry: %v", err)
	}
	assertBodies(t, sink, "secret body 1", "secret body 2")
}

// TestSlowClaimAnswerIsAskedAgain: a claim whose reply comes after the
// timeout is asked again (same token, twice the time), so a Redis that is
// up but slow costs latency, not a pass under on_error: pass.
func TestSlowClaimAnswerIsAskedAgain(t *testing.T) {
	srv := redistest.Standalone(t)
	proxy := faultproxy.New(t, srv.Addr())
	cfg := redisConfig([]string{proxy.Addr()}, ErrorPass)
	cfg.Redis.Get().Timeout = 200 * time.Millisecond
	sink := new(consumertest.LogsSink)
	h := newHarness(t, cfg, sink)
	proxy.Add(&faultproxy.Rule{Match: faultproxy.Script(redistier.ScriptHash("claim")), Fault: faultproxy.DelayReply(300 * time.Millisecond), Times: 1})
	if err := h.consume(events(1, 2)); err != nil {
		t.Fatal(err)
	}
	assertBodies(t, sink, "secret body 1", "secret body 2")
	if got := h.metric("otelcol_processor_dedup_redis_unchecked"); got != 0 {
		t.Fatalf("%d records delivered unchecked, want 0: the claim was asked again", got)
	}
	if to, ok := h.redisRequests("claim", "timeout"), h.redisRequests("claim", "ok"); to != 1 || ok != 1 {
		t.Fatalf("claims: %d timed out, %d ok; want 1 and 1", to, ok)
	}
}
