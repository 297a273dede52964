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

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/claim"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
)

// The claim discipline (consume.go), tested by deterministic simulation on
// one collector: the real engine, with its real local cache, runs many
// batches at once, one step at a time in an order a seeded generator picks.
// Every delivery and every pause is a step; the local cache may be smaller
// than a batch, so a batch evicts its own claims. Time is simulated: a
// pause lasts until the batches it waits for settle or its time is up, and
// when every batch waits, the clock jumps to the next wake-up. The shared
// tier is tested for real, through injected faults (faults_test.go).
//
// The invariants: every record of a request that was acknowledged is
// delivered, none is delivered twice, and no batch is refused for waiting
// too long. pending_wait is an hour of simulated time while a delivery
// takes at most 20 ms, so a refusal can only mean batches waited for each
// other in a cycle.

// TestClaimDisciplineSimulated runs the simulation over many seeds and
// set-ups: deliveries that fail or not, a cache smaller than a batch.
func TestClaimDisciplineSimulated(t *testing.T) {
	seeds := 150
	if testing.Short() {
		seeds = 20
	}
	for _, setup := range []simSetup{
		{failRate: 0},
		{failRate: 0.25},
		{failRate: 0.5},
		{failRate: 0.25, cache: 4},
	} {
		t.Run(setup.String(), func(t *testing.T) {
			var waited int
			for seed := range uint64(seeds) {
				r := runSim(t, setup, seed)
				waited += r.waits
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
		})
	}
}

type simSetup struct {
	failRate float64
	cache    int // cache.max_entries; 0: the default
}

func (s simSetup) String() string {
	return fmt.Sprintf("fail=%.2f,cache=%d", s.failRate, s.cache)
}

type simResult struct {
	waits int // waits that settled, each before a second call
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
	delivered := map[string]int{}
	var trace strings.Builder
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	engines := make([]*logsProcessor, 1)
	for c := range engines {
		cfg := defaultConfig()
		cfg.Logs.Key = []string{`attributes["event.id"]`}
		cfg.PendingWait = time.Hour
		if setup.cache > 0 {
			cfg.Cache.MaxEntries = setup.cache
		}
		cfg.clock = s
		set := processortest.NewNopSettings(componentType)
		set.MeterProvider = mp
		next := &simConsumer{sim: s, failRate: setup.failRate, delivered: delivered, trace: &trace, collector: c}
		p, err := newLogsProcessor(set.TelemetrySettings, component.MustNewID("dedup"), cfg, next)
		if err != nil {
			t.Fatal(err)
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
		reqs[i] = &request{ids: ids}
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
	acked := map[string]bool{}
	for i, r := range reqs {
		switch {
		case r.err == nil:
			for _, id := range r.ids {
				acked[simID(id)] = true
			}
		case errors.Is(r.err, claim.ErrInFlight):
			t.Errorf("request %d refused after waiting %v: batches waited for each other", i, time.Hour)
		case !errors.Is(r.err, errSimDelivery):
			t.Errorf("request %d: unexpected error %v", i, r.err)
		}
	}
	ids := make([]string, 0, len(delivered))
	for id := range delivered {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	// A cache smaller than the records evicts keys before their window
	// ends: copies then get through (counted as evictions), but nothing
	// acknowledged is lost.
	for _, id := range ids {
		if delivered[id] > 1 && setup.cache == 0 {
			t.Errorf("%s delivered %d times", id, delivered[id])
		}
	}
	for id := range acked {
		if delivered[id] == 0 || delivered[id] > 1 && setup.cache == 0 {
			t.Errorf("%s is in an acknowledged request but was delivered %d times", id, delivered[id])
		}
	}
	for c, e := range engines {
		if n := e.Cache().Len(s.at.UnixNano()); n > simRecords {
			t.Errorf("collector %d holds %d keys for %d records", c, n, simRecords)
		}
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
