package dedupprocessor

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/faultproxy"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

// A run's settings. The lease is the least the configuration allows (three
// timeouts, a renewal each timeout), so leases run out within a run; the
// timeout is long enough that a loaded 2-core machine under -race does not
// time out on its own. Slow exports take longer than the lease, so only
// renewals keep their claims.
const (
	faultTimeout     = 300 * time.Millisecond
	faultLease       = 3 * faultTimeout
	faultPendingWait = 300 * time.Millisecond
	faultSendFor     = 4 * time.Second  // new requests start for this long
	faultGiveUp      = 25 * time.Second // a sender stops retrying a request this long after its first try
	faultHang        = faultGiveUp + 30*time.Second
	faultCollectors  = 3
	faultSenders     = 6
	faultRequests    = 20_000 // more than the senders can send in faultSendFor
	// The windows of the runs whose scenarios need the window to pass
	// within the run (settings changed mid-run, exports longer than the
	// window); every other run keeps the default's (10 minutes). Never
	// shorter than faultMinWindow: the lease must fit in the window.
	faultShortWindow = 1500 * time.Millisecond
	faultMinWindow   = time.Second
	// The burst scenario's records: from faultBurstIDs on, none of the
	// stream's.
	faultBurstIDs = 10_000_000
)

// faultEnv is the Redis a topology's runs share: runs keep apart by their
// key prefix.
type faultEnv struct {
	topology string
	server   *redistest.Server   // standalone: each collector reaches it through a proxy of its own
	cluster  *faultproxy.Cluster // cluster: every collector reaches each node through the node's proxy
	client   redis.Cmdable       // the test's own, past the faults
	runs     int
}

// redis returns the test's own client of the run's Redis.
func (r *faultRun) redis() redis.Cmdable { return r.env.client }

// faultRun is one seeded run: the collectors, what was sent and delivered,
// and the faults injected, each stamped with its time.
type faultRun struct {
	t      *testing.T
	env    *faultEnv
	signal string // "logs", or "metrics" with replica election
	seed   uint64
	policy ErrorPolicy
	prefix string
	reqs   []*faultRequest
	start  time.Time

	mu         sync.Mutex
	collectors []*collector // every incarnation, in start order
	live       []*collector // per slot, its incarnation that is up; nil while down
	attempts   []*faultAttempt
	exports    []*faultExport
	episodes   []*faultEpisode
	firings    []faultFiring
	census     map[string]int // tier commands seen by the proxies, by op
	gaveUp     []*faultAttempt
	probes     []faultProbe
	inFlight   map[*faultAttempt]bool     // tries sent and not answered yet
	tainted    map[taintKey]*faultEpisode // connections a fault broke

	// The records' digests, computed by a processor of their identity.
	identity *logsProcessor
	digests  map[int]string
	rules    []ruleOn

	// What the seed chose besides the faults (planScenarios):
	// the schedule, the window the run's collectors start with, and what
	// each slot's next incarnation is configured with.
	plan     []plannedFault
	window   time.Duration
	settings [faultCollectors]faultSettings
	bursts   int         // burst requests made
	layout   faultLayout // what Redis held at the end of the run

	ended chan struct{}  // closed once every sender is done: dead collectors' exports return
	calls sync.WaitGroup // ConsumeLogs calls
}

// ruleOn is a rule and the proxy it was added to, removed at the end.
type ruleOn struct {
	p *faultproxy.Proxy
	r *faultproxy.Rule
}

func newFaultRun(t *testing.T, env *faultEnv, signal string, seed uint64, policy ErrorPolicy) *faultRun {
	env.runs++
	r := &faultRun{
		t:        t,
		env:      env,
		signal:   signal,
		seed:     seed,
		policy:   policy,
		prefix:   fmt.Sprintf("faults%d:", env.runs),
		live:     make([]*collector, faultCollectors),
		census:   map[string]int{},
		inFlight: map[*faultAttempt]bool{},
		tainted:  map[taintKey]*faultEpisode{},
		ended:    make(chan struct{}),
	}
	if signal == "metrics" {
		r.reqs = faultScrapeStream()
	} else {
		r.reqs = faultRequestStream(seed)
	}
	r.plan = r.makePlan()
	for i := range r.settings {
		r.settings[i] = faultSettings{window: r.window, slots: faultDefaultSlots}
	}
	return r
}

// faultSettings is what a collector is configured with beyond what every
// collector of a run shares.
type faultSettings struct {
	window time.Duration
	slots  int // redis.cluster_slots
}

// faultDefaultSlots is the collectors' redis.cluster_slots unless a
// settings change gives one another.
const faultDefaultSlots = 12

// faultRand returns a generator for one decision of the run: its draws
// depend only on the seed and the decision's coordinates.
func faultRand(seed uint64, coords ...uint64) *rand.Rand {
	h := uint64(0x9e3779b97f4a7c15)
	for _, c := range coords {
		h ^= c + 0x9e3779b97f4a7c15 + h<<6 + h>>2
		h *= 0xbf58476d1ce4e5b9
	}
	return rand.New(rand.NewPCG(seed, h))
}

// faultRequest is one request of the run's stream: a batch of logs with
// event ids, or one scrape of an HA pair's cluster (replica a's copy 0,
// replica b's copy 1).
type faultRequest struct {
	n       int
	records [2][]int // per copy: the event ids, or the points' ids
	racing  bool     // also sent at once to another collector, as a copy of its own
	cluster int      // metrics: the HA pair's cluster
}

// A scrape's point ids: point s of scrape n of replica r is
// (n*faultSeries+s)*2 + r, so that id/2 names the point whichever replica
// scraped it.
const faultSeries = 3

// pointOf returns the replica-independent id of a record: a log record's
// event id, a point's id without its replica.
func (r *faultRun) pointOf(id int) int {
	if r.signal == "metrics" {
		return id / 2
	}
	return id
}

// records returns the records a try sends.
func (a *faultAttempt) records() []int { return a.req.records[a.copy] }

// faultRequestStream draws the run's requests: about a third of their
// records repeat a record of the last few hundred (copies racing between
// requests and collectors), some repeat one of their own request.
func faultRequestStream(seed uint64) []*faultRequest {
	rng := faultRand(seed, 1)
	var recent []int
	next := 0
	reqs := make([]*faultRequest, faultRequests)
	for i := range reqs {
		size := 1 + rng.IntN(24)
		ids := make([]int, 0, size)
		for range size {
			switch p := rng.Float64(); {
			case p < 0.3 && len(recent) > 0:
				ids = append(ids, recent[rng.IntN(len(recent))])
			case p < 0.35 && len(ids) > 0:
				ids = append(ids, ids[rng.IntN(len(ids))])
			default:
				ids = append(ids, next)
				recent = append(recent, next)
				next++
			}
		}
		if len(recent) > 300 {
			recent = recent[len(recent)-300:]
		}
		reqs[i] = &faultRequest{n: i, records: [2][]int{ids, ids}, racing: rng.Float64() < 0.2, cluster: -1}
	}
	return reqs
}

// faultScrapeStream is the metrics runs' requests: scrapes of HA pairs,
// each sent by both replicas at once (to collectors the load balancer
// picks). A cluster lives for faultSenders scrapes, which the senders
// send side by side, so every few requests a new cluster's replicas race
// to be elected.
func faultScrapeStream() []*faultRequest {
	reqs := make([]*faultRequest, faultRequests)
	for n := range reqs {
		req := &faultRequest{n: n, racing: true, cluster: n / faultSenders}
		for r := range 2 {
			for s := range faultSeries {
				req.records[r] = append(req.records[r], (n*faultSeries+s)*2+r)
			}
		}
		reqs[n] = req
	}
	return reqs
}

// scrapeOf builds the copy of a scrape that replica which sent: the
// cluster and replica labels on the resource, as an OTLP agent sets them,
// each point carrying its id.
func scrapeOf(req *faultRequest, which int) pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	res := rm.Resource().Attributes()
	res.PutStr("service.name", "node-exporter")
	res.PutStr("cluster", fmt.Sprintf("c%d", req.cluster))
	res.PutStr("__replica__", string(rune('a'+which)))
	m := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName("up")
	ts := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC).Add(time.Duration(req.n) * 15 * time.Second)
	ts = ts.Add(time.Duration(which) * 3 * time.Millisecond) // each replica scrapes at its own time
	points := m.SetEmptyGauge().DataPoints()
	for _, id := range req.records[which] {
		p := points.AppendEmpty()
		p.Attributes().PutInt("point", int64(id))
		p.SetTimestamp(pcommon.NewTimestampFromTime(ts))
		p.SetDoubleValue(1)
	}
	return md
}

// pointIDs returns the ids of a batch's points, in order.
func pointIDs(md pmetric.Metrics) []int {
	var ids []int
	for i := 0; i < md.ResourceMetrics().Len(); i++ {
		sms := md.ResourceMetrics().At(i).ScopeMetrics()
		for j := 0; j < sms.Len(); j++ {
			ms := sms.At(j).Metrics()
			for k := 0; k < ms.Len(); k++ {
				dps := ms.At(k).Gauge().DataPoints()
				for l := 0; l < dps.Len(); l++ {
					v, _ := dps.At(l).Attributes().Get("point")
					ids = append(ids, int(v.Int()))
				}
			}
		}
	}
	return ids
}

// collector is one incarnation of one of the run's collectors: a logs
// dedup processor in front of its exporter.
type collector struct {
	id            int // incarnation, in start order
	slot          int // the collector it is an incarnation of
	h             *harness
	proc          component.Component
	consume       func(context.Context, *faultAttempt) error
	proxy         *faultproxy.Proxy // standalone: its own way to Redis
	logs          *observer.ObservedLogs
	started       time.Time
	crashed       chan struct{} // closed when it dies
	faultSettings               // what it was configured with

	// Under the run's lock.
	downAt   time.Time // when it died or its shutdown began
	died     bool
	longLeft int        // exports still to make longer than the window
	longRand *rand.Rand // their lengths
}

// The metrics runs' replica election: refreshed often, never failing
// over within a run (a run holds its elections to the end), and room for
// every cluster of a run.
const (
	faultUpdate   = 300 * time.Millisecond
	faultFailover = time.Minute
)

func (r *faultRun) config(endpoints []string, set faultSettings) *Config {
	cfg := redisConfig(endpoints, r.policy)
	cfg.PendingWait = faultPendingWait
	cfg.Window = set.window
	rc := cfg.Redis.Get()
	rc.Timeout, rc.Lease, rc.KeyPrefix, rc.ClusterSlots = faultTimeout, faultLease, r.prefix, set.slots
	if r.signal == "metrics" {
		el := cfg.Metrics.ReplicaElection.GetOrInsertDefault()
		el.UpdateInterval, el.UpdateJitter, el.FailoverTimeout, el.MaxClusters = faultUpdate, faultUpdate/3, faultFailover, 100_000
	}
	return cfg
}

// startCollector starts a new incarnation of slot's collector, with the
// configuration of the run, and the window and cluster_slots of the slot's
// last settings change, if any.
func (r *faultRun) startCollector(slot int) *collector {
	r.mu.Lock()
	c := &collector{id: len(r.collectors), slot: slot, crashed: make(chan struct{}), faultSettings: r.settings[slot]}
	r.collectors = append(r.collectors, c)
	r.mu.Unlock()
	var endpoints []string
	if r.env.server != nil {
		c.proxy = faultproxy.New(r.t, r.env.server.Addr())
		r.watch(c.proxy)
		endpoints = []string{c.proxy.Addr()}
	} else {
		endpoints = r.env.cluster.Addrs()
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	r.t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	core, logs := observer.New(zapcore.InfoLevel)
	set := processortest.NewNopSettings(componentType)
	set.MeterProvider, set.Logger = mp, zap.New(core)
	cfg := r.config(endpoints, c.faultSettings)
	if err := cfg.Validate(); err != nil {
		r.t.Fatalf("config: %v", err)
	}
	next := &faultExporter{r: r, c: c}
	if r.signal == "metrics" {
		proc, err := NewFactory().CreateMetrics(context.Background(), set, cfg, next)
		if err != nil {
			r.t.Fatal(err)
		}
		c.proc = proc
		c.consume = func(ctx context.Context, a *faultAttempt) error {
			return proc.ConsumeMetrics(ctx, scrapeOf(a.req, a.copy))
		}
	} else {
		proc, err := NewFactory().CreateLogs(context.Background(), set, cfg, next)
		if err != nil {
			r.t.Fatal(err)
		}
		c.proc = proc
		c.consume = func(ctx context.Context, a *faultAttempt) error {
			return proc.ConsumeLogs(ctx, events(a.records()...))
		}
	}
	if err := c.proc.Start(context.Background(), nil); err != nil {
		r.t.Fatal(err)
	}
	c.h, c.logs, c.started = &harness{t: r.t, reader: reader, id: set.ID, signal: r.signal}, logs, time.Now()
	r.mu.Lock()
	r.live[slot] = c
	r.mu.Unlock()
	return c
}

// stop shuts c down (it must be down already: no new request reaches it).
func (r *faultRun) stop(c *collector) {
	if err := c.proc.Shutdown(context.Background()); err != nil {
		r.t.Errorf("collector %d: shutdown: %v", c.id, err)
	}
}

// down takes c out of the load balancer's rotation.
func (r *faultRun) down(c *collector, died bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c.downAt, c.died = time.Now(), died
	if r.live[c.slot] == c {
		r.live[c.slot] = nil
	}
}

// attemptKey carries an attempt to the exporter, as a request's context
// carries its client metadata.
type attemptKey struct{}

// faultAttempt is one try of one copy of a request at one collector.
type faultAttempt struct {
	req   *faultRequest
	copy  int // 0: the request; 1: its racing copy
	n     int // the copy's attempt number, from 0
	c     *collector
	calls atomic.Int32 // calls made to the exporter
	start time.Time

	// Under the run's lock, once answered.
	end  time.Time
	err  error
	died bool // its collector died before answering
}

func (a *faultAttempt) String() string {
	return fmt.Sprintf("request %d/%d try %d at collector %d", a.req.n, a.copy, a.n, a.c.id)
}

// faultExport is one call of a collector's exporter.
type faultExport struct {
	a         *faultAttempt
	c         *collector
	call      int // 1: the batch's first call, 2: its second
	ids       []int
	start     time.Time
	end       time.Time // under the run's lock; zero while in flight
	delivered bool      // the backend has the records
	long      bool      // made longer than its collector's window
}

var (
	errExporterFailed = errors.New("exporter: the backend refused the batch (injected)")
	errCollectorDied  = errors.New("the collector died (injected): the connection was reset")
)

// faultExporter is a collector's exporter with retry: it delivers to the
// run's backend, sometimes slowly (longer than the lease), and fails at a
// rate; the seed decides each call's fate.
type faultExporter struct {
	r *faultRun
	c *collector
}

func (x *faultExporter) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }

func (x *faultExporter) ConsumeLogs(ctx context.Context, ld plog.Logs) error {
	return x.export(ctx, func() []int { return eventIDs(ld) })
}

func (x *faultExporter) ConsumeMetrics(ctx context.Context, md pmetric.Metrics) error {
	return x.export(ctx, func() []int { return pointIDs(md) })
}

// export delivers the records of ids to the backend, in the time and with
// the outcome the seed gives the call.
func (x *faultExporter) export(ctx context.Context, ids func() []int) error {
	r, c := x.r, x.c
	select {
	case <-c.crashed: // a dead collector exports nothing
		<-r.ended
		return errCollectorDied
	default:
	}
	a := ctx.Value(attemptKey{}).(*faultAttempt)
	call := int(a.calls.Add(1))
	e := &faultExport{a: a, c: c, call: call, ids: ids(), start: time.Now()}
	rng := faultRand(r.seed, 2, uint64(a.req.n), uint64(a.copy), uint64(a.n), uint64(call))
	var delay time.Duration
	switch p := rng.Float64(); {
	case p < 0.80:
		delay = time.Duration(rng.IntN(3)) * time.Millisecond
	case p < 0.94:
		delay = time.Duration(20+rng.IntN(130)) * time.Millisecond
	default: // slower than the lease: only renewals keep its claims
		delay = faultLease + time.Duration(rng.Int64N(int64(faultLease)))
	}
	fail := rng.Float64() < 0.08
	r.mu.Lock()
	if c.longLeft > 0 && call == 1 { // a long-export scenario: up to three windows
		c.longLeft--
		delay, e.long = c.window+time.Millisecond+time.Duration(c.longRand.Int64N(int64(2*c.window))), true
	}
	r.exports = append(r.exports, e)
	r.mu.Unlock()
	slow := time.NewTimer(delay) // the injected slowness itself
	defer slow.Stop()
	select {
	case <-slow.C:
	case <-c.crashed:
		// Killed mid-export: the backend may or may not have the data.
		r.exported(e, rng.IntN(2) == 0)
		<-r.ended
		return errCollectorDied
	}
	r.exported(e, !fail)
	if fail {
		return errExporterFailed
	}
	return nil
}

func (r *faultRun) exported(e *faultExport, delivered bool) {
	r.mu.Lock()
	e.end, e.delivered = time.Now(), delivered
	r.mu.Unlock()
}

// eventIDs returns the event ids of a batch's records, in order.
func eventIDs(ld plog.Logs) []int {
	var ids []int
	for i := 0; i < ld.ResourceLogs().Len(); i++ {
		sls := ld.ResourceLogs().At(i).ScopeLogs()
		for j := 0; j < sls.Len(); j++ {
			lrs := sls.At(j).LogRecords()
			for k := 0; k < lrs.Len(); k++ {
				v, _ := lrs.At(k).Attributes().Get("event.id")
				id, err := strconv.Atoi(strings.TrimPrefix(v.AsString(), "evt-"))
				if err != nil {
					panic(fmt.Sprintf("record without a test event.id: %q", v.AsString()))
				}
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// run starts the collectors, the senders and the fault schedule, and
// returns once every request was answered or given up and every collector
// is shut down.
func (r *faultRun) run() {
	r.start = time.Now()
	if r.env.cluster != nil {
		for _, p := range r.env.cluster.Proxies {
			r.watch(p)
		}
	}
	for slot := range faultCollectors {
		r.startCollector(slot)
	}
	schedule := r.inject()
	var senders sync.WaitGroup
	for s := range faultSenders {
		senders.Go(func() { r.sender(s) })
	}
	r.bounded("every request answered or given up", senders.Wait)
	r.bounded("the fault schedule over", schedule.Wait)
	close(r.ended)
	r.bounded("every call to a collector returned", r.calls.Wait)
	// Not under r.mu: the census rule's Match takes r.mu under the proxy's
	// lock, and Remove takes the proxy's lock.
	r.mu.Lock()
	rules := r.rules
	r.mu.Unlock()
	r.bounded("the fault rules removed", func() {
		for _, ro := range rules {
			ro.r.Remove()
		}
	})
	r.mu.Lock()
	var up []*collector
	for _, c := range r.collectors {
		if c.downAt.IsZero() || c.died {
			up = append(up, c)
		}
	}
	r.mu.Unlock()
	for _, c := range up {
		r.stop(c)
	}
	r.readLayout()
}

// bounded runs wait, failing the test with every goroutine's stack if it
// has not returned after faultHang: a hang is a finding of its own.
func (r *faultRun) bounded(what string, wait func()) {
	done := make(chan struct{})
	go func() { wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(faultHang):
		_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 2)
		r.t.Fatalf("%s: not after %v (goroutines above)", what, faultHang)
	}
}

// sender sends its share of the stream, one request at a time (and its
// racing copy beside it), each until acknowledged.
func (r *faultRun) sender(s int) {
	rng := faultRand(r.seed, 3, uint64(s))
	for k := s; k < len(r.reqs) && time.Since(r.start) < faultSendFor; k += faultSenders {
		req := r.reqs[k]
		var copies sync.WaitGroup
		if req.racing {
			copies.Go(func() { r.deliver(req, 1) })
		}
		r.deliver(req, 0)
		copies.Wait()
		time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond) // the sender's pace
	}
}

// deliver sends one copy of req as an exporter with retry does: a refused
// try is retried, at whichever collector the load balancer picks, after a
// growing backoff, until acknowledged or faultGiveUp after the first. The
// first backoff is drawn (exporters wait 5 s by default; here up to
// 600 ms), so that retries come both before and after the claims of their
// refused tries land late.
func (r *faultRun) deliver(req *faultRequest, which int) {
	first := time.Now()
	backoff := time.Duration(faultRand(r.seed, 7, uint64(req.n), uint64(which)).Int64N(int64(600 * time.Millisecond)))
	for n := 0; ; n++ {
		a := &faultAttempt{req: req, copy: which, n: n, c: r.pick(req, which, n), start: time.Now()}
		r.mu.Lock()
		r.inFlight[a] = true
		r.mu.Unlock()
		died, err := r.try(a)
		r.mu.Lock()
		a.end, a.err, a.died = time.Now(), err, died
		r.attempts = append(r.attempts, a)
		delete(r.inFlight, a)
		r.mu.Unlock()
		if err == nil {
			return
		}
		if time.Since(first) > faultGiveUp {
			r.mu.Lock()
			r.gaveUp = append(r.gaveUp, a)
			r.mu.Unlock()
			return
		}
		time.Sleep(backoff) // the sender's retry backoff
		backoff = min(2*backoff, time.Second)
	}
}

// pick is the load balancer: the seed picks one of the collectors up; a
// racing copy's first try goes to another than its request's.
func (r *faultRun) pick(req *faultRequest, which, n int) *collector {
	h := faultRand(r.seed, 4, uint64(req.n), uint64(n)).Uint64()
	for {
		r.mu.Lock()
		var up []*collector
		for _, c := range r.live {
			if c != nil {
				up = append(up, c)
			}
		}
		r.mu.Unlock()
		if len(up) > 0 {
			return up[(h+uint64(which))%uint64(len(up))]
		}
		time.Sleep(5 * time.Millisecond) // every collector down: a sender's connect retry
	}
}

// try sends one attempt; a collector that dies meanwhile resets the
// connection, which the sender sees at once.
func (r *faultRun) try(a *faultAttempt) (died bool, err error) {
	ctx := context.WithValue(context.Background(), attemptKey{}, a)
	done := make(chan error, 1)
	r.calls.Go(func() { done <- a.c.consume(ctx, a) })
	select {
	case err := <-done:
		return false, err
	case <-a.c.crashed:
		select {
		case err := <-done: // it answered as it died
			return false, err
		default:
			return true, errCollectorDied
		}
	}
}

// counter returns a collector's counter series name with attrs.
func (c *collector) counter(name string, attrs ...attribute.KeyValue) int64 {
	return c.h.metric(name, attrs...)
}

// lost returns how many claims c counted lost.
func (c *collector) lost() int64 {
	var n int64
	for _, op := range []string{"commit", "renew", "release"} {
		n += c.h.redisRequests(op, "lost")
	}
	return n
}

func (c *collector) unchecked() int64 {
	return c.counter("otelcol_processor_dedup_redis_unchecked")
}

// requests lists c's round trips to Redis that did not succeed, by op and
// result.
func (c *collector) requests() string {
	var out []string
	for _, op := range []string{"claim", "recheck", "commit", "release", "renew", "elect"} {
		for _, res := range []string{"error", "timeout", "skipped", "lost"} {
			if n := c.h.redisRequests(op, res); n > 0 {
				out = append(out, fmt.Sprintf("%s/%s %d", op, res, n))
			}
		}
	}
	if len(out) == 0 {
		return "all ok"
	}
	return strings.Join(out, ", ")
}

// undecided returns the points c left undecided because Redis failed.
func (c *collector) undecided() int64 {
	if c.h.signal != "metrics" {
		return 0
	}
	return c.counter("otelcol_processor_dedup_election_undecided", attribute.String("reason", "unavailable"))
}
