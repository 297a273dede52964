package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/redis/go-redis/v9"

	"github.com/otelcol-dedup/otelcol-dedup/internal/otlp"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

const metricRedisRequests = "otelcol_processor_dedup_redis_requests"

// redisConfig is a logs pipeline otlp -> dedup (keyed on event.id, shared
// tier on endpoints, extra redis settings as YAML flow-map entries) -> the
// sink over gRPC.
func redisConfig(endpoints []string, extra string) string {
	quoted := make([]string, len(endpoints))
	for i, e := range endpoints {
		quoted[i] = fmt.Sprintf("%q", e)
	}
	if extra != "" {
		extra = ", " + extra
	}
	return fmt.Sprintf(`
processors:
  dedup:
    logs:
      key: ['attributes["event.id"]']
    redis: {endpoints: [%s]%s}
service:
  pipelines:
    logs:
      receivers: [otlp]
      processors: [dedup]
      exporters: [otlp_grpc/sink]
`, strings.Join(quoted, ", "), extra)
}

// eventCorpus makes n distinct events keyed by event.id, whose attribute
// values, bodies and resource attributes are long, distinctive strings, so
// that finding one of them in Redis cannot be a coincidence.
func eventCorpus(n int) (*corpus, []string) {
	c := newCorpus(n, func(i int, lr plog.LogRecord) {
		lr.Attributes().PutStr("event.id", fmt.Sprintf("evt-%05d-7c1e", i))
		lr.Attributes().PutStr("user.email", fmt.Sprintf("user-%05d@example.invalid", i))
		lr.Body().SetStr(fmt.Sprintf("checkout body %05d: card ending 4242", i))
	})
	res := c.logs.ResourceLogs().At(0).Resource().Attributes()
	res.PutStr("service.name", "fleet-checkout-service")
	res.PutStr("host.name", "fleet-host-0001")
	needles := []string{"fleet-checkout-service", "fleet-host-0001", "event.id", "user.email", "service.name", "card ending"}
	for i := range n {
		needles = append(needles,
			fmt.Sprintf("evt-%05d-7c1e", i),
			fmt.Sprintf("user-%05d@example.invalid", i),
			fmt.Sprintf("checkout body %05d", i))
	}
	return c, needles
}

// redisSum adds a counter over both collectors' scrapes.
func redisSum(scs []Scrape, name string, labels Labels) float64 {
	var v float64
	for _, sc := range scs {
		v += sc.Sum(name, labels)
	}
	return v
}

func wantSum(t *testing.T, scs []Scrape, name string, labels Labels, want float64) {
	t.Helper()
	if got := redisSum(scs, name, labels); got != want {
		var series []Series
		for _, sc := range scs {
			series = append(series, sc.Find(name, nil)...)
		}
		t.Errorf("%s%v summed over the collectors = %g, want %g; series: %v", name, labels, got, want, series)
	}
}

// redisEntry is one key of a Redis server, or one field of a hash.
type redisEntry struct {
	node  string
	key   string
	hash  bool   // the entry is a field of the hash key
	field string // the hash's field
	value string
	pttl  time.Duration
}

// dumpRedis reads every key of every node (SCAN), with its value (a hash's
// fields each as an entry) and TTL: two pipelined round trips per page of
// keys.
func dumpRedis(t *testing.T, nodes []*redistest.Server) []redisEntry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var out []redisEntry
	for _, n := range nodes {
		cl := n.Client()
		var cursor uint64
		for {
			keys, next, err := cl.Scan(ctx, cursor, "*", 1000).Result()
			if err != nil {
				t.Fatalf("SCAN %s: %v", n.Addr(), err)
			}
			pipe := cl.Pipeline()
			types := make([]*redis.StatusCmd, len(keys))
			ttls := make([]*redis.DurationCmd, len(keys))
			for i, k := range keys {
				types[i] = pipe.Type(ctx, k)
				ttls[i] = pipe.PTTL(ctx, k)
			}
			if len(keys) > 0 {
				_, _ = pipe.Exec(ctx) // errors are read per command below
			}
			pipe = cl.Pipeline()
			gets := make([]*redis.StringCmd, len(keys))
			hashes := make([]*redis.MapStringStringCmd, len(keys))
			for i, k := range keys {
				switch typ := types[i].Val(); typ {
				case "string":
					gets[i] = pipe.Get(ctx, k)
				case "hash":
					hashes[i] = pipe.HGetAll(ctx, k)
				case "none": // expired since the SCAN (a pending claim's lease)
				default:
					t.Fatalf("key %q on %s is a %s (%v), want a string or a hash", k, n.Addr(), typ, types[i].Err())
				}
			}
			if len(keys) > 0 {
				_, _ = pipe.Exec(ctx)
			}
			for i, k := range keys {
				ttl := ttls[i].Val()
				switch {
				case gets[i] != nil:
					v, err := gets[i].Result()
					if errors.Is(err, redis.Nil) {
						continue
					}
					if err != nil {
						t.Fatalf("GET %q on %s: %v", k, n.Addr(), err)
					}
					out = append(out, redisEntry{node: n.Addr(), key: k, value: v, pttl: ttl})
				case hashes[i] != nil:
					fields, err := hashes[i].Result()
					if err != nil {
						t.Fatalf("HGETALL %q on %s: %v", k, n.Addr(), err)
					}
					for f, v := range fields {
						out = append(out, redisEntry{node: n.Addr(), key: k, hash: true, field: f, value: v, pttl: ttl})
					}
				}
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
	}
	return out
}

// The shared tier's key layout as the processor's README and redistier
// describe it: the default prefix "dedup:<8 hex>:", then either "shape" (the
// layout's version and hash tags) or, in a Cluster, a hash tag, the layout's
// version "3:", and one of: a record hash "h<shard in hex>", whose fields
// are 11 digest bytes valued with a 3-byte stamp and a claim id, and whose
// field "" holds its roll mark (a second in 10 digits); "c:" and a claim id,
// the claim's status ("p" pending, "c" and a second committed, "r"
// released); "s", the tag's shape (L, p, n).
var (
	redisKeyRE   = regexp.MustCompile(`^(dedup:[0-9a-f]{8}:(?:\{[0-9a-z]+\})?)3:((?s).*)$`)
	redisShapeRE = regexp.MustCompile(`^dedup:[0-9a-f]{8}:shape$`)
	redisHashRE  = regexp.MustCompile(`^h[0-9a-f]+$`)
	redisMarkRE  = regexp.MustCompile(`^[0-9]{10}$`)
	committedRE  = regexp.MustCompile(`^c[0-9]{10}$`)
)

// claimStatus returns the statuses of the claims in entries, by group
// prefix and claim id.
func claimStatus(entries []redisEntry) map[string]string {
	status := map[string]string{}
	for _, e := range entries {
		if m := redisKeyRE.FindStringSubmatch(e.key); m != nil && !e.hash && strings.HasPrefix(m[2], "c:") {
			status[m[1]+m[2][len("c:"):]] = e.value
		}
	}
	return status
}

// record returns the group prefix and claim id of a record entry, or false.
func record(e redisEntry) (group, id string, ok bool) {
	m := redisKeyRE.FindStringSubmatch(e.key)
	if m == nil || !e.hash || e.field == "" || len(e.value) != 3+8 {
		return "", "", false
	}
	return m[1], e.value[3:], true
}

// checkRedisContents checks what the fleet left in Redis: exactly digests
// records, each held by a committed claim, every status key expiring
// within the window and every record hash within one and a half windows
// and a few leases (the layout's stamps), the shapes never, and not one
// attribute value, body or resource attribute of the events (needles) in
// any key, field or value.
func checkRedisContents(t *testing.T, entries []redisEntry, digests int, window, lease time.Duration, needles []string) map[string]int {
	t.Helper()
	status := claimStatus(entries)
	records, uncommitted := 0, 0
	perNode := map[string]int{}
	for _, e := range entries {
		for _, s := range []string{e.key, e.field, e.value} {
			for _, n := range needles {
				if strings.Contains(s, n) {
					t.Errorf("Redis on %s holds %q (key %q, field %q, value %q): record content left the record", e.node, n, e.key, e.field, e.value)
				}
			}
		}
		if redisShapeRE.MatchString(e.key) {
			if e.pttl != -1 || (e.field != "version" && e.field != "tags") {
				t.Errorf("layout shape %q: field %q with TTL %s, want version or tags, kept", e.key, e.field, e.pttl)
			}
			continue
		}
		m := redisKeyRE.FindStringSubmatch(e.key)
		if m == nil {
			t.Errorf("key %q does not follow the layout dedup:<hex>:(shape|[{tag}]3:(h<shard>|c:<id>|s))", e.key)
			continue
		}
		rest := m[2]
		if rest == "s" {
			if e.pttl != -1 || (e.field != "L" && e.field != "p" && e.field != "n") {
				t.Errorf("tag shape %q: field %q with TTL %s, want L, p or n, kept", e.key, e.field, e.pttl)
			}
			continue
		}
		if most := map[bool]time.Duration{false: window, true: window*3/2 + 3*lease + 5*time.Second}[e.hash]; e.pttl <= 0 || e.pttl > most {
			t.Errorf("key %q has TTL %s, want in (0, %s]", e.key, e.pttl, most)
		}
		switch {
		case !e.hash && strings.HasPrefix(rest, "c:") && len(rest) == len("c:")+8:
			if !committedRE.MatchString(e.value) && e.value != "r" {
				t.Errorf("claim %q is %q, want committed (\"c\" and a second) or a release's marker (\"r\")", e.key, e.value)
			}
		case e.hash && redisHashRE.MatchString(rest) && e.field == "":
			if !redisMarkRE.MatchString(e.value) {
				t.Errorf("record hash %q has the roll mark %q, want a second in 10 digits", e.key, e.value)
			}
		case e.hash && redisHashRE.MatchString(rest) && len(e.field) == 11:
			group, id, ok := record(e)
			if !ok {
				t.Errorf("record %q/%q holds %q, want a stamp and a claim id", e.key, e.field, e.value)
				continue
			}
			records++
			perNode[e.node]++
			if !committedRE.MatchString(status[group+id]) {
				uncommitted++
			}
		default:
			t.Errorf("key %q (field %q): unexpected %q after the prefix", e.key, e.field, rest)
		}
	}
	if records != digests {
		t.Errorf("Redis holds %d records, want %d (one per unique event)", records, digests)
	}
	if uncommitted > 0 {
		t.Errorf("%d records are held by a claim that is not committed (status missing or pending); every delivered batch should have committed", uncommitted)
	}
	return perNode
}

// claimEntries is entries without the layout's and the tags' shapes.
func claimEntries(entries []redisEntry) []redisEntry {
	var out []redisEntry
	for _, e := range entries {
		if m := redisKeyRE.FindStringSubmatch(e.key); !redisShapeRE.MatchString(e.key) && (m == nil || m[2] != "s") {
			out = append(out, e)
		}
	}
	return out
}

// defaultLease is redis.lease unless a test sets it.
const defaultLease = 30 * time.Second

// runFleet starts two collectors with the same dedup config sharing the
// Redis at endpoints, sends the same 2000 events (20 batches of 100) to both
// at once from 4 goroutines, every batch to both collectors concurrently
// (gRPC to one, HTTP to the other, in opposite orders), then re-sends 4
// batches, 2 to each collector. It checks each event is delivered exactly
// once across both sinks, the summed counters, and Redis' contents. extra
// adds redis settings.
func runFleet(t *testing.T, endpoints []string, nodes []*redistest.Server, extra string) {
	const (
		n       = 2000
		size    = 100
		batches = n / size
		window  = 10 * time.Minute // the default
	)
	cfg := redisConfig(endpoints, extra)
	a := startCollector(t, nil, cfg)
	b := startCollector(t, nil, cfg)
	c, needles := eventCorpus(n)

	toA := make([]plog.Logs, batches)
	toB := make([]plog.Logs, batches)
	for k := range batches {
		idx := span(k*size, (k+1)*size)
		toA[k] = c.batch(idx...)
		slices.Reverse(idx)
		toB[k] = c.batch(idx...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	sendA, sendB := a.grpcSender(), b.httpSender()

	// Senders retry a retryable refusal, as exporters do; each attempt costs
	// the collector one claim round trip.
	var attempts atomic.Int64
	sendRetrying := func(send func() error) error {
		n, err := sendUntilAccepted(ctx, send)
		attempts.Add(int64(n))
		return err
	}
	work := make(chan int)
	errs := make(chan error, 2*batches)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for k := range work {
				var pair sync.WaitGroup
				pair.Go(func() {
					if err := sendRetrying(func() error { return sendA.SendLogs(ctx, toA[k]) }); err != nil {
						errs <- fmt.Errorf("batch %d to collector A: %w", k, err)
					}
				})
				pair.Go(func() {
					if err := sendRetrying(func() error { return sendB.SendLogs(ctx, toB[k]) }); err != nil {
						errs <- fmt.Errorf("batch %d to collector B: %w", k, err)
					}
				})
				pair.Wait()
			}
		})
	}
	for k := range batches {
		work <- k
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	// Retries of batches each collector has seen: every copy is caught by its
	// local cache (as held, or as held by the other collector), no Redis call.
	for _, k := range []int{0, 1} {
		mustSend(t, fmt.Sprintf("retry of batch %d to A", k), sendA.SendLogs(ctx, c.batch(span(k*size, (k+1)*size)...)))
	}
	for _, k := range []int{2, 3} {
		mustSend(t, fmt.Sprintf("retry of batch %d to B", k), sendB.SendLogs(ctx, c.batch(span(k*size, (k+1)*size)...)))
	}

	scs := []Scrape{a.scrape(), b.scrape()}
	l := func(kv ...string) Labels { return sigLabels("dedup", "logs", kv...) }
	const retried = 4 * size
	wantSum(t, scs, metricRecords, l("outcome", "unique"), n)
	wantSum(t, scs, metricRecords, l("outcome", "duplicate"), n+retried)
	wantSum(t, scs, metricRecords, l(), 2*n+retried)
	// Each collector saw every event once in the race: the copy that lost
	// was caught by Redis; the retries by the local cache.
	wantSum(t, scs, metricDuplicates, l("caught_by", "redis"), n)
	wantSum(t, scs, metricDuplicates, l("caught_by", "local"), retried)
	wantSum(t, scs, metricDuplicates, l("caught_by", "batch"), 0)
	wantSum(t, scs, metricDuplicates, l(), n+retried)
	wantSum(t, scs, metricReleased, l(), 0)
	for i, sc := range scs {
		// Keys a collector lost to the other are remembered too.
		wantMetric(t, sc, metricCacheEntries, l(), n)
		t.Logf("collector %c: unique %g, duplicates by redis %g, local %g", 'A'+i,
			sc.Sum(metricRecords, l("outcome", "unique")), sc.Sum(metricDuplicates, l("caught_by", "redis")), sc.Sum(metricDuplicates, l("caught_by", "local")))
	}
	// One claim round trip per attempt in the race (one per collector and
	// batch unless one was refused); none for the local retries.
	if n := attempts.Load(); n != 2*batches {
		t.Logf("%d attempts for %d requests: some were refused and retried", n, 2*batches)
	}
	wantSum(t, scs, metricRedisRequests, l("op", "claim", "result", "ok"), float64(attempts.Load()))
	wantSum(t, scs, metricRedisRequests, l("op", "claim"), float64(attempts.Load()))
	for _, res := range []string{"error", "timeout", "skipped"} {
		wantSum(t, scs, metricRedisRequests, l("result", res), 0)
	}

	a.stop()
	b.stop()
	// A batch that won anything was delivered, then its commit queued; a
	// round trip carries the commits queued while the last was in flight.
	// Whether every delivered batch committed is read from Redis below.
	if commits, delivered := scs[0].Sum(metricRedisRequests, l("op", "commit"))+scs[1].Sum(metricRedisRequests, l("op", "commit")), a.sink.Requests()+b.sink.Requests(); commits > float64(delivered) {
		t.Errorf("%g commit round trips for %d delivered batches, want at most one each", commits, delivered)
	}
	countsA, totalA := delivered(a.sink)
	countsB, totalB := delivered(b.sink)
	if totalA+totalB != n {
		t.Errorf("the sinks received %d + %d = %d records, want %d", totalA, totalB, totalA+totalB, n)
	}
	bad := 0
	for i := range n {
		k := c.recordKey(i)
		if got := countsA[k] + countsB[k]; got != 1 {
			if bad < 10 {
				t.Errorf("event %d delivered %d times (A %d, B %d), want once", i, got, countsA[k], countsB[k])
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d events not delivered exactly once", bad, n)
	}
	if float64(totalA) != scs[0].Sum(metricRecords, l("outcome", "unique")) || float64(totalB) != scs[1].Sum(metricRecords, l("outcome", "unique")) {
		t.Errorf("delivered A %d, B %d; counted unique A %g, B %g: each collector delivers exactly what it counts unique",
			totalA, totalB, scs[0].Sum(metricRecords, l("outcome", "unique")), scs[1].Sum(metricRecords, l("outcome", "unique")))
	}

	perNode := checkRedisContents(t, dumpRedis(t, nodes), n, window, defaultLease, needles)
	t.Logf("records per node: %v", perNode)
	if len(nodes) > 1 {
		for _, node := range nodes {
			if perNode[node.Addr()] == 0 {
				t.Errorf("Cluster master %s holds no record: the records are not spread over the masters", node.Addr())
			}
		}
	}
}

// TestRedisFleetStandalone: two collectors sharing one redis-server let each
// of 2000 events, sent to both at once, through exactly once.
func TestRedisFleetStandalone(t *testing.T) {
	srv := redistest.Standalone(t)
	runFleet(t, []string{srv.Addr()}, []*redistest.Server{srv}, "")
}

// TestRedisFleetCluster: the same over a 3-master Redis Cluster, every
// master given as an endpoint.
func TestRedisFleetCluster(t *testing.T) {
	cl := redistest.Cluster(t, 3)
	runFleet(t, cl.Addrs(), cl.Nodes, "")
}

// sendUntilAccepted re-sends like an OTLP exporter: on a retryable refusal
// (isRetryable) it backs off and tries again, until accepted or ctx ends. It
// returns the number of attempts.
func sendUntilAccepted(ctx context.Context, send func() error) (int, error) {
	for attempt := 1; ; attempt++ {
		err := send()
		if err == nil {
			return attempt, nil
		}
		if !isRetryable(err) {
			return attempt, err
		}
		select {
		case <-ctx.Done():
			return attempt, fmt.Errorf("still refused after %d attempts: %w (last: %v)", attempt, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// isRetryable reports whether an OTLP sender retries err: the retryable gRPC
// codes and HTTP statuses of the OTLP specification.
func isRetryable(err error) bool {
	var httpErr *otlp.HTTPError
	if errors.As(err, &httpErr) {
		switch httpErr.StatusCode {
		case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true
		}
		return false
	}
	switch status.Code(err) {
	case codes.Canceled, codes.DeadlineExceeded, codes.Aborted, codes.OutOfRange, codes.Unavailable, codes.DataLoss:
		return true
	}
	return false
}

// TestRedisRefuseWhenDown: with on_error: refuse and Redis killed, a request
// with new events is refused with a retryable error over gRPC and HTTP and
// nothing of it reaches the sink (nor the counters, nor the cache); a
// request of events the local cache already holds needs no Redis and is
// answered. Once Redis is back the sender's retry is delivered exactly once.
func TestRedisRefuseWhenDown(t *testing.T) {
	srv := redistest.Standalone(t)
	r := startCollector(t, nil, redisConfig([]string{srv.Addr()}, "on_error: refuse"))
	c, _ := eventCorpus(20)
	first, second := c.batch(span(0, 10)...), c.batch(span(10, 20)...)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	grpcS, httpS := r.grpcSender(), r.httpSender()
	l := func(kv ...string) Labels { return sigLabels("dedup", "logs", kv...) }

	mustSend(t, "events 0-9", grpcS.SendLogs(ctx, first))
	srv.Kill()

	// Only local duplicates: nothing to ask Redis, so nothing to refuse.
	mustSend(t, "events 0-9 again, Redis down", grpcS.SendLogs(ctx, first))
	// New events: refused, retryably, over both protocols.
	wantRetryable(t, grpcS.SendLogs(ctx, second))
	wantRetryable(t, httpS.SendLogs(ctx, second))
	if got := r.sink.Requests(); got != 1 {
		t.Errorf("sink got %d requests, want 1: a refused request must not be delivered", got)
	}
	sc := r.scrape()
	wantCounts(t, sc, "dedup", "logs", dedupCounts{unique: 10, duplicate: 10, local: 10, entries: 10})
	wantMetric(t, sc, metricRedisRequests, l("op", "claim", "result", "ok"), 1)
	if got := sc.Sum(metricRedisRequests, l("op", "claim")) - sc.Sum(metricRedisRequests, l("op", "claim", "result", "ok")); got != 2 {
		t.Errorf("failed claims = %g, want 2 (one per refused request); series: %v", got, sc.Find(metricRedisRequests, nil))
	}

	srv.Restart()
	rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
	defer rcancel()
	attempts, err := sendUntilAccepted(rctx, func() error { return grpcS.SendLogs(rctx, second) })
	if err != nil {
		t.Fatalf("retry of events 10-19 after Redis restarted: %v", err)
	}
	t.Logf("events 10-19 accepted on attempt %d after the restart", attempts)
	mustSend(t, "events 10-19 over HTTP, after delivery", httpS.SendLogs(ctx, second))

	sc = r.scrape()
	wantCounts(t, sc, "dedup", "logs", dedupCounts{unique: 20, duplicate: 20, local: 20, entries: 20})
	for _, s := range sc.Find(metricRedisRequests, nil) {
		t.Logf("scraped: %v", s)
	}
	r.stop()
	if got := r.sink.Requests(); got != 2 {
		t.Errorf("sink got %d requests, want 2", got)
	}
	wantEachOnce(t, r.sink, c, span(0, 20))
}

// TestRedisPassWhenDown: with on_error: pass (the default), Redis is killed
// while 3 senders stream batches of new events (each batch also carrying 10
// copies of the previous batch's events), and restarted later. Every request
// is accepted, every unique event is delivered exactly once (the local cache
// still guards the one collector), the failures are counted, and once the
// breaker lets it the shared tier is used again.
func TestRedisPassWhenDown(t *testing.T) {
	const (
		size     = 50
		copies   = 10
		streamed = 60 // batches: 0-19 Redis up, 20-39 killed after 22, 40-59 restarted
		maxExtra = 100
	)
	srv := redistest.Standalone(t)
	r := startCollector(t, nil, redisConfig([]string{srv.Addr()}, ""))
	c, _ := eventCorpus((streamed + maxExtra) * size)
	batch := func(k int) plog.Logs {
		idx := span(k*size, (k+1)*size)
		if k > 0 && k < streamed {
			idx = append(idx, span((k-1)*size, (k-1)*size+copies)...)
		}
		return c.batch(idx...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*opTimeout)
	defer cancel()
	senders := []sender{r.grpcSender(), r.httpSender(), r.grpcSender()}
	l := func(kv ...string) Labels { return sigLabels("dedup", "logs", kv...) }

	var failed atomic.Int32
	var done atomic.Int32
	stream := func(lo, hi int, during func()) {
		reqs := make([]plog.Logs, hi-lo)
		for k := lo; k < hi; k++ {
			reqs[k-lo] = batch(k)
		}
		work := make(chan int)
		var wg sync.WaitGroup
		for _, s := range senders {
			wg.Go(func() {
				for k := range work {
					if err := s.SendLogs(ctx, reqs[k-lo]); err != nil {
						t.Errorf("batch %d: %v (on_error: pass must not refuse)", k, err)
						failed.Add(1)
					}
					done.Add(1)
				}
			})
		}
		for k := lo; k < hi; k++ {
			if during != nil && k == lo+3 {
				during()
			}
			work <- k
		}
		close(work)
		wg.Wait()
	}

	stream(0, 20, nil)
	// Kill Redis with requests in flight.
	stream(20, 40, srv.Kill)
	srv.Restart()
	restartedOK := r.scrape().Sum(metricRedisRequests, l("op", "claim", "result", "ok"))
	stream(40, streamed, nil)
	// The breaker stays open a few seconds; new events keep flowing and,
	// once it lets a probe through, are claimed in Redis again.
	sent := streamed
	recovered := false
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && sent < streamed+maxExtra; {
		if r.scrape().Sum(metricRedisRequests, l("op", "claim", "result", "ok")) > restartedOK {
			recovered = true
			break
		}
		mustSend(t, fmt.Sprintf("batch %d", sent), senders[0].SendLogs(ctx, batch(sent)))
		sent++
		// The stream's pace while Redis restarts, not a wait: the events of
		// a stream arrive over time, a batch every 200 ms.
		time.Sleep(200 * time.Millisecond)
	}
	if failed.Load() > 0 {
		t.FailNow()
	}

	unique := sent * size
	dups := (streamed - 1) * copies
	sc := r.scrape()
	// A copy and its original are never in one request: whichever of the two
	// requests claims first, the other's copy is caught by the local cache,
	// never by Redis (one collector; the cache is asked first).
	wantCounts(t, sc, "dedup", "logs", dedupCounts{unique: unique, duplicate: dups, local: dups, entries: unique})
	failures := 0.0
	for _, res := range []string{"error", "timeout", "skipped"} {
		failures += sc.Sum(metricRedisRequests, l("result", res))
	}
	if failures == 0 {
		t.Errorf("no failed or skipped Redis request counted while Redis was down; series: %v", sc.Find(metricRedisRequests, nil))
	}
	for _, s := range sc.Find(metricRedisRequests, nil) {
		t.Logf("scraped: %v", s)
	}
	if !recovered {
		t.Errorf("no successful claim within 20 s of Redis restarting (%d extra batches sent): the shared tier did not recover", sent-streamed)
	} else {
		t.Logf("the shared tier was used again after %d extra batches", sent-streamed)
	}

	r.stop()
	wantEachOnce(t, r.sink, c, span(0, unique))
}

// TestRedisFleetReleaseOnFailure: collector A's exporter is refused; A
// releases the keys the request claimed, in its cache and in Redis, and
// passes the error back. The sender's retry, balanced to collector B, is
// delivered by B; a further retry to A is caught as B's (tier redis).
// Each event arrives once.
func TestRedisFleetReleaseOnFailure(t *testing.T) {
	srv := redistest.Standalone(t)
	cfg := redisConfig([]string{srv.Addr()}, "")
	a := startCollector(t, nil, cfg)
	b := startCollector(t, nil, cfg)
	c, needles := eventCorpus(20)
	req := c.batch(span(0, 20)...)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	sendA, sendB := a.grpcSender(), b.httpSender()
	l := func(kv ...string) Labels { return sigLabels("dedup", "logs", kv...) }

	a.sink.FailNext(1)
	wantRetryable(t, sendA.SendLogs(ctx, req))
	sc := a.scrape()
	wantMetric(t, sc, metricReleased, l(), 20)
	wantMetric(t, sc, metricRecords, l(), 0)
	wantMetric(t, sc, metricRedisRequests, l("op", "claim", "result", "ok"), 1)
	wantMetric(t, sc, metricRedisRequests, l("op", "release", "result", "ok"), 1)
	wantMetric(t, sc, metricRedisRequests, l("op", "commit"), 0)
	// Only the release's marker is left, for the lease, beside the shapes: a
	// claim of the same token arriving late claims nothing.
	if entries := claimEntries(dumpRedis(t, []*redistest.Server{srv})); len(entries) != 1 || entries[0].value != "r" {
		t.Errorf("Redis holds %d keys after the release, beside the shapes, want the release's marker only: %+v", len(entries), entries)
	}

	mustSend(t, "retry to B", sendB.SendLogs(ctx, req))
	mustSend(t, "retry to A", sendA.SendLogs(ctx, req))

	scA, scB := a.scrape(), b.scrape()
	wantCounts(t, scA, "dedup", "logs", dedupCounts{duplicate: 20, redis: 20, released: 20, entries: 20})
	wantCounts(t, scB, "dedup", "logs", dedupCounts{unique: 20, entries: 20})
	a.stop()
	b.stop()
	if n := a.sink.LogRecordCount(); n != 0 {
		t.Errorf("collector A delivered %d records, want 0", n)
	}
	wantEachOnce(t, b.sink, c, span(0, 20))
	checkRedisContents(t, dumpRedis(t, []*redistest.Server{srv}), 20, 10*time.Minute, defaultLease, needles)
}

// TestRedisCollectorDiesMidBatch: collector A claims a request's events in
// Redis (pending, lease 2s) and is SIGKILLed while its exporter is stalled,
// before delivering them. The sender retries, through a load balancer, to
// collector B, re-sending on every retryable refusal as exporters do. A
// collector that dies mid-batch blocks its senders' retries for the lease,
// and nothing unique is ever dropped: so once B accepts the retry, B must
// have delivered every event.
func TestRedisCollectorDiesMidBatch(t *testing.T) {
	srv := redistest.Standalone(t)
	cfg := redisConfig([]string{srv.Addr()}, "lease: 2s")
	a := startCollector(t, nil, cfg)
	b := startCollector(t, nil, cfg)
	c, _ := eventCorpus(10)
	req := c.batch(span(0, 10)...)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	sendA, sendB := a.grpcSender(), b.grpcSender()

	a.sink.Hold()
	errA := make(chan error, 1)
	go func() { errA <- sendA.SendLogs(ctx, req) }()
	testkit.WaitFor(t, "collector A's export held at its sink", opTimeout, func() bool { return a.sink.Holding() == 1 })
	pending := 0
	for _, e := range dumpRedis(t, []*redistest.Server{srv}) {
		if e.value == "p" {
			pending++
		}
	}
	if pending != 1 {
		t.Errorf("Redis holds %d pending claims while A exports, want 1", pending)
	}
	a.col.Kill()
	if err := <-errA; !isRetryable(err) {
		t.Fatalf("the sender's request to the killed collector ended with %v, want a retryable error", err)
	}
	start := time.Now()
	attempts, err := sendUntilAccepted(ctx, func() error { return sendB.SendLogs(ctx, req) })
	if err != nil {
		t.Fatalf("retry to B: %v", err)
	}
	t.Logf("B accepted the retry on attempt %d, %s after A died", attempts, time.Since(start).Round(time.Millisecond))
	sc := b.scrape()
	for _, s := range sc.Find(metricDuplicates, nil) {
		t.Logf("B scraped: %v", s)
	}
	if n := a.sink.LogRecordCount(); n != 0 {
		t.Errorf("A's stalled sink recorded %d records", n)
	}
	if n := b.sink.LogRecordCount(); n != 10 {
		t.Errorf("B accepted the sender's retry but delivered %d of its 10 events (%g dropped as Redis duplicates of A's pending claim, which A never delivered); the sender has its acceptance and will not retry, so they are lost",
			n, sc.Sum(metricDuplicates, sigLabels("dedup", "logs", "caught_by", "redis")))
		// Diagnosis: only a retry after the lease, which no sender makes once
		// accepted, would have saved them.
		testkit.WaitFor(t, "A's pending claim gone with its lease", opTimeout, func() bool {
			for _, e := range dumpRedis(t, []*redistest.Server{srv}) {
				if e.value == "p" {
					return false
				}
			}
			return true
		})
		mustSend(t, "a further retry to B after the lease", sendB.SendLogs(ctx, req))
		t.Logf("a further retry to B after A's lease ended: B delivered %d of the 10", b.sink.LogRecordCount())
		return
	}
	wantEachOnce(t, b.sink, c, span(0, 10))
}

// TestRedisRefuseWhenStalled: with on_error: refuse and Redis frozen
// (SIGSTOP: connections open, no answers), a request with new events is
// asked of Redis again, each time with twice the timeout, until Redis's
// breaker opens (five timeouts), then refused retryably; once Redis
// resumes, the sender's retries end in every event delivered exactly once.
func TestRedisRefuseWhenStalled(t *testing.T) {
	srv := redistest.Standalone(t)
	r := startCollector(t, nil, redisConfig([]string{srv.Addr()}, "on_error: refuse, timeout: 200ms"))
	c, _ := eventCorpus(10)
	req := c.batch(span(0, 10)...)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	send := r.grpcSender()
	l := func(kv ...string) Labels { return sigLabels("dedup", "logs", kv...) }

	srv.Pause()
	start := time.Now()
	wantRetryable(t, send.SendLogs(ctx, req))
	t.Logf("refused after %s", time.Since(start).Round(time.Millisecond))
	sc := r.scrape()
	wantMetric(t, sc, metricRedisRequests, l("op", "claim", "result", "timeout"), 5)
	if got := r.sink.Requests(); got != 0 {
		t.Errorf("sink got %d requests while Redis was stalled, want 0", got)
	}
	srv.Resume()

	attempts, err := sendUntilAccepted(ctx, func() error { return send.SendLogs(ctx, req) })
	if err != nil {
		t.Fatalf("retry after Redis resumed: %v", err)
	}
	sc = r.scrape()
	for _, s := range slices.Concat(sc.Find(metricRedisRequests, nil), sc.Find(metricDuplicates, nil)) {
		t.Logf("scraped: %v", s)
	}
	t.Logf("accepted on attempt %d after Redis resumed", attempts)
	r.stop()
	wantEachOnce(t, r.sink, c, span(0, 10))
}

// TestRedisFleetSentinel: two collectors find the master through a
// Sentinel (master_name); B catches A's events as Redis duplicates, and the
// keys are on the master.
func TestRedisFleetSentinel(t *testing.T) {
	set := redistest.Sentinel(t)
	cfg := redisConfig([]string{set.SentinelAddr()}, fmt.Sprintf("master_name: %q", set.MasterName))
	a := startCollector(t, nil, cfg)
	b := startCollector(t, nil, cfg)
	c, needles := eventCorpus(50)
	req := c.batch(span(0, 50)...)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	mustSend(t, "events to A", a.grpcSender().SendLogs(ctx, req))
	mustSend(t, "the same events to B", b.httpSender().SendLogs(ctx, req))

	wantCounts(t, a.scrape(), "dedup", "logs", dedupCounts{unique: 50, entries: 50})
	wantCounts(t, b.scrape(), "dedup", "logs", dedupCounts{duplicate: 50, redis: 50, entries: 50})
	a.stop()
	b.stop()
	wantEachOnce(t, a.sink, c, span(0, 50))
	if n := b.sink.LogRecordCount(); n != 0 {
		t.Errorf("collector B delivered %d records, want 0", n)
	}
	checkRedisContents(t, dumpRedis(t, []*redistest.Server{set.Master}), 50, 10*time.Minute, defaultLease, needles)
}

// TestRedisFleetRetryToPeerAfterFailedDelivery: collector A's export of a
// request stalls, while a copy of the same events reaches collector B; then
// A's export fails. A releases its claims (locally and in Redis) and passes
// the error back; the sender retries, balanced to B. A failed delivery
// releases its keys, so the sender's retry is delivered instead of being
// dropped as a duplicate of data that never arrived. Every sender
// retries on a retryable refusal; in the end every event must be delivered
// exactly once, whoever delivers it.
func TestRedisFleetRetryToPeerAfterFailedDelivery(t *testing.T) {
	srv := redistest.Standalone(t)
	cfg := redisConfig([]string{srv.Addr()}, "")
	a := startCollector(t, nil, cfg)
	b := startCollector(t, nil, cfg)
	c, _ := eventCorpus(10)
	req := c.batch(span(0, 10)...)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	sendA, sendB, sendB2 := a.grpcSender(), b.grpcSender(), b.httpSender()

	a.sink.Hold()
	errA := make(chan error, 1)
	go func() { errA <- sendA.SendLogs(ctx, req) }()
	testkit.WaitFor(t, "collector A's export held at its sink", opTimeout, func() bool { return a.sink.Holding() == 1 })
	// A copy (another agent of an HA pair, say) reaches B meanwhile; wait
	// (bounded) until B has asked Redis about it.
	copyDone := make(chan error, 1)
	go func() {
		_, err := sendUntilAccepted(ctx, func() error { return sendB2.SendLogs(ctx, req) })
		copyDone <- err
	}()
	testkit.WaitFor(t, "B's claim in Redis", opTimeout, func() bool { return b.scrape().Sum(metricRedisRequests, Labels{"op": "claim"}) > 0 })
	// A's export fails; A releases and passes the failure back, retryable.
	a.sink.FailNext(1)
	a.sink.Unhold()
	if err := <-errA; !isRetryable(err) {
		t.Fatalf("the request to A ended with %v, want a retryable error", err)
	}
	if got := a.scrape().Sum(metricReleased, nil); got != 10 {
		t.Errorf("A released %g keys, want 10", got)
	}
	// The sender's retry goes to B.
	if _, err := sendUntilAccepted(ctx, func() error { return sendB.SendLogs(ctx, req) }); err != nil {
		t.Fatalf("the sender's retry to B: %v", err)
	}
	if err := <-copyDone; err != nil {
		t.Fatalf("the copy to B: %v", err)
	}
	sc := b.scrape()
	for _, name := range []string{metricRecords, metricDuplicates} {
		for _, s := range sc.Find(name, nil) {
			t.Logf("B scraped: %v", s)
		}
	}
	a.stop()
	b.stop()
	countsA, totalA := delivered(a.sink)
	countsB, totalB := delivered(b.sink)
	if totalA+totalB != 10 {
		t.Errorf("A delivered %d and B %d records; want 10 in all: B dropped the copy as a duplicate of A's pending claim, remembered it locally for the window, and then dropped the sender's retry after A's failed delivery released it", totalA, totalB)
	}
	var wrong []int
	for i := range 10 {
		k := c.recordKey(i)
		if countsA[k]+countsB[k] != 1 {
			wrong = append(wrong, i)
		}
	}
	if len(wrong) > 0 {
		t.Errorf("events %v not delivered exactly once", wrong)
	}
}
