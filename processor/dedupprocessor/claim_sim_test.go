package dedupprocessor

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/otelcol-dedup/otelcol-dedup/internal/testkit"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/redistier"
)

// The claim discipline (consume.go), tested by deterministic simulation:
// the real engine, with its real local caches, runs many batches of several
// collectors at once, one step at a time in an order a seeded generator
// picks. Every call to the shared tier, every delivery, every commit and
// every pause is a step; the shared tier is a model of the Redis scripts
// whose claims are atomic per node only, so a batch's claims interleave with
// others' as they do on a Redis Cluster or across script calls. Commits
// land later, as the tier's writer sends them; answers may be lost (the
// script ran, the reply did not arrive); local caches may be smaller than a
// batch, so a batch evicts its own claims. Time is simulated: a pause lasts
// until the batches it waits for settle or its time is up, and when every
// batch waits, the clock jumps to the next wake-up.
//
// The invariants: every record of a request that was acknowledged is
// delivered, none is delivered twice, no claim is left pending, and no
// batch is refused for waiting too long. pending_wait is an hour of
// simulated time while a delivery takes at most 20 ms, so a refusal can
// only mean batches waited for each other in a cycle.

// TestClaimDisciplineSimulated runs the simulation over many seeds and
// set-ups: one or three collectors, with and without a shared tier (one
// node, or three), deliveries that fail or not.
func TestClaimDisciplineSimulated(t *testing.T) {
	seeds := 150
	if testing.Short() {
		seeds = 20
	}
	for _, setup := range []simSetup{
		{collectors: 1, nodes: 0, failRate: 0},
		{collectors: 1, nodes: 0, failRate: 0.25},
		{collectors: 3, nodes: 1, failRate: 0},
		{collectors: 3, nodes: 3, failRate: 0},
		{collectors: 3, nodes: 3, failRate: 0.25},
		{collectors: 2, nodes: 3, failRate: 0.5},
		{collectors: 3, nodes: 3, failRate: 0.25, lostRate: 0.2},
		{collectors: 2, nodes: 3, failRate: 0.25, cache: 4},
	} {
		t.Run(setup.String(), func(t *testing.T) {
			var waited, lost int
			for seed := range uint64(seeds) {
				r := runSim(t, setup, seed)
				waited += r.waits
				lost += r.lost
				if t.Failed() {
					t.Fatalf("seed %d: %s", seed, r.trace)
				}
			}
			// The simulation must reach the waits it is about: copies
			// racing make batches leave records for a second call and
			// wait for them.
			if waited == 0 {
				t.Errorf("over %d seeds: no wait for a second call; the simulation did not exercise the discipline", seeds)
			}
			if setup.lostRate > 0 && lost == 0 {
				t.Errorf("over %d seeds: no answer was lost", seeds)
			}
		})
	}
}

type simSetup struct {
	collectors int
	nodes      int // of the shared tier; 0: none
	failRate   float64
	// lostRate: the share of shared-tier node calls whose reply is lost
	// after the script ran (under on_error: refuse).
	lostRate float64
	cache    int // cache.max_entries; 0: the default
}

func (s simSetup) String() string {
	return fmt.Sprintf("collectors=%d,nodes=%d,fail=%.2f,lost=%.2f,cache=%d", s.collectors, s.nodes, s.failRate, s.lostRate, s.cache)
}

type simResult struct {
	waits int // waits that settled, each before a second call
	lost  int // answers lost
	trace string
}

const (
	simRecords    = 24 // distinct event ids
	simRequests   = 30
	simMaxBatch   = 10
	simMaxDeliver = 20 * time.Millisecond
)

func runSim(t *testing.T, setup simSetup, seed uint64) simResult {
	t.Helper()
	s := newSim(seed)
	var shared *simTier
	if setup.nodes > 0 {
		shared = &simTier{sim: s, nodes: setup.nodes, lostRate: setup.lostRate, keys: map[digest.Digest]string{}, status: map[string]byte{}}
	}
	delivered := map[string]int{}
	var trace strings.Builder
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	engines := make([]*logsProcessor, setup.collectors)
	for c := range engines {
		cfg := defaultConfig()
		cfg.Logs.Key = []string{`attributes["event.id"]`}
		cfg.PendingWait = time.Hour
		if setup.cache > 0 {
			cfg.Cache.MaxEntries = setup.cache
		}
		set := processortest.NewNopSettings(componentType)
		set.MeterProvider = mp
		next := &simConsumer{sim: s, failRate: setup.failRate, delivered: delivered, trace: &trace, collector: c}
		p, err := newLogsProcessor(set.TelemetrySettings, component.MustNewID("dedup"), cfg, next)
		if err != nil {
			t.Fatal(err)
		}
		p.clock = s
		if shared != nil {
			p.tier = shared
			p.redisPolicy = ErrorPass
			if setup.lostRate > 0 {
				p.redisPolicy = ErrorRefuse
			}
		}
		engines[c] = p
	}

	type request struct {
		collector int
		ids       []int
		err       error
	}
	reqs := make([]*request, simRequests)
	for i := range reqs {
		n := 1 + s.rng.IntN(simMaxBatch)
		ids := make([]int, n)
		for k := range ids {
			ids[k] = s.rng.IntN(simRecords)
		}
		reqs[i] = &request{collector: s.rng.IntN(setup.collectors), ids: ids}
	}
	for i, r := range reqs {
		s.spawn(func() {
			// Requests arrive over the first 50 ms, not all at once.
			s.sleep(time.Duration(s.rng.IntN(50)) * time.Millisecond)
			r.err = engines[r.collector].ConsumeLogs(context.Background(), simLogs(r.ids))
			fmt.Fprintf(&trace, "%v request %d (collector %d, ids %v): %v\n", s.at.Sub(simEpoch), i, r.collector, r.ids, r.err)
		})
	}
	if err := s.run(); err != nil {
		tr := trace.String()
		if len(tr) > 4000 {
			tr = tr[len(tr)-4000:]
		}
		t.Fatalf("seed %d: %v\n%s", seed, err, tr)
	}

	res := simResult{trace: trace.String(), waits: waitsSettled(t, reader)}
	if shared != nil {
		res.lost = shared.lost
	}
	acked := map[string]bool{}
	for i, r := range reqs {
		switch {
		case r.err == nil:
			for _, id := range r.ids {
				acked[simID(id)] = true
			}
		case errors.Is(r.err, errInFlight):
			t.Errorf("request %d refused after waiting %v: batches waited for each other", i, time.Hour)
		case !errors.Is(r.err, errSimDelivery) && !errors.Is(r.err, errSharedTier):
			t.Errorf("request %d: unexpected error %v", i, r.err)
		}
	}
	ids := make([]string, 0, len(delivered))
	for id := range delivered {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if delivered[id] > 1 {
			t.Errorf("%s delivered %d times", id, delivered[id])
		}
	}
	for id := range acked {
		if delivered[id] != 1 {
			t.Errorf("%s is in an acknowledged request but was delivered %d times", id, delivered[id])
		}
	}
	for c, e := range engines {
		if n := e.cache.Len(s.at.UnixNano()); n > simRecords {
			t.Errorf("collector %d holds %d keys for %d records", c, n, simRecords)
		}
	}
	if shared != nil {
		shared.checkNoPending(t)
	}
	return res
}

// waitsSettled is the count of the wait_duration histogram's settled
// series, over every engine.
func waitsSettled(t *testing.T, reader *sdkmetric.ManualReader) int {
	t.Helper()
	return int(testkit.HistogramCountAll(t, reader, "otelcol_processor_dedup_wait_duration", attribute.String("result", "settled")))
}

func simID(id int) string { return fmt.Sprintf("evt-%d", id) }

func simLogs(ids []int) plog.Logs {
	ld := plog.NewLogs()
	lrs := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords()
	for _, id := range ids {
		lr := lrs.AppendEmpty()
		lr.Attributes().PutStr("event.id", simID(id))
		lr.Body().SetStr("body of " + simID(id))
	}
	return ld
}

var simEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// sim is the scheduler: one actor (a goroutine) runs at a time, until it
// reaches a step; then the scheduler picks the next one among those ready.
// It is also the engines' clock.
type sim struct {
	rng    *rand.Rand
	at     time.Time // the simulated time
	actors []*simActor
	cur    *simActor     // the actor that holds the turn
	back   chan struct{} // the running actor reached a step or finished
}

type simActor struct {
	resume  chan struct{}
	done    bool
	wakeAt  time.Time       // not ready before; zero: ready
	settled <-chan struct{} // wakes it early when closed
}

func newSim(seed uint64) *sim {
	return &sim{rng: rand.New(rand.NewPCG(seed, 0x5eed)), at: simEpoch, back: make(chan struct{})}
}

func (s *sim) spawn(fn func()) {
	a := &simActor{resume: make(chan struct{})}
	s.actors = append(s.actors, a)
	go func() {
		<-a.resume
		fn()
		a.done = true
		s.back <- struct{}{}
	}()
}

// step gives the turn back to the scheduler until it is this actor's again,
// no earlier than wakeAt (unless settled closes first).
func (s *sim) step(wakeAt time.Time, settled <-chan struct{}) {
	a := s.cur
	a.wakeAt, a.settled = wakeAt, settled
	s.back <- struct{}{}
	<-a.resume
}

func (s *sim) sleep(d time.Duration) { s.step(s.at.Add(d), nil) }

// simMaxSteps bounds a run: a simulation that goes on longer is stuck in a
// livelock, or the discipline keeps batches cycling.
const simMaxSteps = 200_000

func (s *sim) run() error {
	for steps := 0; ; steps++ {
		if steps == simMaxSteps {
			return fmt.Errorf("sim: no end after %d steps (%v of simulated time): batches wait for each other", steps, s.at.Sub(simEpoch))
		}
		var ready []*simActor
		var next time.Time
		alive := 0
		for _, a := range s.actors {
			if a.done {
				continue
			}
			alive++
			if !a.wakeAt.After(s.at) || closed(a.settled) {
				ready = append(ready, a)
			} else if next.IsZero() || a.wakeAt.Before(next) {
				next = a.wakeAt
			}
		}
		if alive == 0 {
			return nil
		}
		if len(ready) == 0 {
			s.at = next
			continue
		}
		s.cur = ready[s.rng.IntN(len(ready))]
		s.cur.resume <- struct{}{}
		<-s.back
	}
}

func closed(ch <-chan struct{}) bool {
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Now and Wait make the sim the engines' clock.
func (s *sim) Now() time.Time { return s.at }

func (s *sim) Wait(ctx context.Context, settled <-chan struct{}, d time.Duration) error {
	s.step(s.at.Add(d), settled)
	return ctx.Err()
}

// errSimDelivery is the simulated next consumer's refusal.
var errSimDelivery = errors.New("sim: delivery failed")

// simConsumer is the next consumer: each delivery takes up to
// simMaxDeliver and fails at failRate.
type simConsumer struct {
	sim       *sim
	failRate  float64
	delivered map[string]int
	trace     *strings.Builder
	collector int
}

func (c *simConsumer) ConsumeLogs(_ context.Context, ld plog.Logs) error {
	c.sim.sleep(time.Duration(c.sim.rng.Int64N(int64(simMaxDeliver))))
	var ids []string
	lrs := ld.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords()
	for i := range lrs.Len() {
		v, _ := lrs.At(i).Attributes().Get("event.id")
		ids = append(ids, v.Str())
	}
	if c.sim.rng.Float64() < c.failRate {
		fmt.Fprintf(c.trace, "%v collector %d: delivery of %v failed\n", c.sim.at.Sub(simEpoch), c.collector, ids)
		return errSimDelivery
	}
	fmt.Fprintf(c.trace, "%v collector %d: delivered %v\n", c.sim.at.Sub(simEpoch), c.collector, ids)
	for _, id := range ids {
		c.delivered[id]++
	}
	return nil
}

func (c *simConsumer) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }

// simTier models the shared tier's scripts: a digest key holds the token
// of its claim, a status per token says pending ('p') or committed ('c').
// A call is atomic per node only, with a step before each node's part, as
// pipelined script calls to a Cluster's nodes are; a node's reply may be
// lost after its script ran. A commit lands some steps later, as the tier's
// writer sends it. A pending claim lives as long as its batch (the tier
// renews it while the batch is downstream).
type simTier struct {
	sim      *sim
	nodes    int
	lostRate float64
	keys     map[digest.Digest]string
	status   map[string]byte
	lost     int // replies lost
}

func (m *simTier) node(d digest.Digest) int { return int(d.Hi % uint64(m.nodes)) }

func (m *simTier) Claim(_ context.Context, token string, ds []digest.Digest, answers []redistier.Answer, _ bool) error {
	clear(answers[:len(ds)]) // Unavailable
	var err error
	for _, n := range m.sim.rng.Perm(m.nodes) {
		m.sim.step(time.Time{}, nil)
		lost := m.sim.rng.Float64() < m.lostRate
		any := false
		for i, d := range ds {
			if m.node(d) != n {
				continue
			}
			owner, held := m.keys[d]
			state, live := m.status[owner]
			a := redistier.Pending
			switch {
			case !held || !live || owner == token:
				m.keys[d] = token
				a = redistier.Claimed
				any = true
			case state == 'c':
				a = redistier.Held
			}
			if !lost {
				answers[i] = a
			}
		}
		if _, ok := m.status[token]; any && !ok {
			m.status[token] = 'p'
		}
		if lost {
			m.lost++
			err = errors.New("sim: reply lost")
		}
	}
	return err
}

// Commit lands a few steps later, in an actor of its own.
func (m *simTier) Commit(_ context.Context, token string, _ []digest.Digest) error {
	m.sim.spawn(func() {
		m.sim.sleep(time.Duration(m.sim.rng.IntN(5)) * time.Millisecond)
		if m.status[token] == 'p' {
			m.status[token] = 'c'
		}
	})
	return nil
}

func (m *simTier) Release(_ context.Context, token string, ds []digest.Digest) error {
	m.sim.step(time.Time{}, nil)
	for _, d := range ds {
		if m.keys[d] == token {
			delete(m.keys, d)
		}
	}
	delete(m.status, token)
	return nil
}

// checkNoPending: once every batch has settled, no claim is left pending.
func (m *simTier) checkNoPending(t *testing.T) {
	t.Helper()
	for tok, st := range m.status {
		if st == 'p' {
			t.Errorf("token %x still pending after every batch settled", tok)
		}
	}
}
