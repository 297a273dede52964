package dedupprocessor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/otel/attribute"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/election"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/identity"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

// Replica election at the processor: two replicas of one cluster send the
// same series at their own times, and one replica's points are delivered.

const (
	testUpdate   = 10 * time.Second
	testFailover = 30 * time.Second
)

// electionConfig is replica election with Mimir's labels on top of the
// default identity, with a test's update interval and failover timeout and
// no jitter.
func electionConfig() *Config {
	cfg := defaultConfig()
	cfg.PendingWait = 5 * time.Second // generous: -race on 2 busy cores
	el := cfg.Metrics.ReplicaElection.GetOrInsertDefault()
	el.UpdateInterval, el.UpdateJitter, el.FailoverTimeout = testUpdate, 0, testFailover
	return cfg
}

// newFakeClock returns a clock for the processor that moves only when the
// test advances it.
func newFakeClock() *testkit.Clock {
	return testkit.NewClock(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC))
}

// electHarness runs one metrics processor.
type electHarness struct {
	*harness
	p     *metricsProcessor
	clock *testkit.Clock
}

// newElectHarness makes a metrics processor of cfg sending to next. With a
// clock, the processor's time is the clock's.
func newElectHarness(t *testing.T, cfg *Config, next consumer.Metrics, clk *testkit.Clock) *electHarness {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	if clk != nil {
		cfg.clock = clk
	}
	p, h := signalHarness(t, "metrics", func(set processor.Settings) (processor.Metrics, error) {
		return NewFactory().CreateMetrics(context.Background(), set, cfg, next)
	})
	mp := p.(*metricsProcessor)
	if err := p.Start(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return &electHarness{harness: h, p: mp, clock: clk}
}

func (h *electHarness) send(md pmetric.Metrics) error {
	return h.p.ConsumeMetrics(context.Background(), md)
}

func (h *electHarness) mustSend(md pmetric.Metrics) {
	h.t.Helper()
	if err := h.send(md); err != nil {
		h.t.Fatal(err)
	}
}

func (h *electHarness) elections(reason string) int64 {
	return h.metric("otelcol_processor_dedup_elections", attribute.String("reason", reason))
}

func (h *electHarness) undecided(reason string) int64 {
	return h.metric("otelcol_processor_dedup_election_undecided", attribute.String("reason", reason))
}

func (h *electHarness) elected(cluster, replica string) int64 {
	return h.metric("otelcol_processor_dedup_elected_replica", attribute.String("cluster", cluster), attribute.String("replica", replica))
}

// labelPlace says where a scrape puts its cluster and replica labels.
type labelPlace int

const (
	onResource labelPlace = iota // a resource attribute (an OTLP agent, the resource processor)
	onPoints                     // point attributes (Prometheus external labels)
	noReplica                    // the cluster label only
)

// scrape is one scrape by replica of cluster: n gauge points of the series
// up{instance=i}, at the replica's own time for scrape number s (replica b
// scrapes 3 ms after a), with the value s.
func scrape(cluster, replica string, s, n int, place labelPlace) pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	res := rm.Resource().Attributes()
	res.PutStr("service.name", "node-exporter")
	if place == onResource || place == noReplica {
		res.PutStr("cluster", cluster)
	}
	if place == onResource {
		res.PutStr("__replica__", replica)
	}
	m := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName("up")
	ts := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC).Add(time.Duration(s) * 15 * time.Second)
	if replica == "b" {
		ts = ts.Add(3 * time.Millisecond)
	}
	points := m.SetEmptyGauge().DataPoints()
	for i := range n {
		p := points.AppendEmpty()
		p.Attributes().PutInt("instance", int64(i))
		if place == onPoints {
			p.Attributes().PutStr("cluster", cluster)
			p.Attributes().PutStr("__replica__", replica)
		}
		p.SetTimestamp(pcommon.NewTimestampFromTime(ts))
		p.SetDoubleValue(float64(s))
	}
	return md
}

// delivered describes every delivered point as "replica/scrape" (replica
// "-" when its label was removed), in delivery order, after checking the
// label was removed wherever it should be.
func delivered(t *testing.T, sink *consumertest.MetricsSink) []string {
	t.Helper()
	var out []string
	for _, md := range sink.AllMetrics() {
		for i := 0; i < md.ResourceMetrics().Len(); i++ {
			rm := md.ResourceMetrics().At(i)
			ms := rm.ScopeMetrics().At(0).Metrics()
			for j := 0; j < ms.Len(); j++ {
				dps := ms.At(j).Gauge().DataPoints()
				for k := 0; k < dps.Len(); k++ {
					dp := dps.At(k)
					replica := "-"
					if v, ok := rm.Resource().Attributes().Get("__replica__"); ok {
						replica = v.Str()
					}
					if v, ok := dp.Attributes().Get("__replica__"); ok {
						replica = v.Str()
					}
					// Replica b scrapes 3 ms after a: its timestamps tell it
					// apart even once the label is gone.
					from := "a"
					if dp.Timestamp().AsTime().Nanosecond() != 0 {
						from = "b"
					}
					if replica != "-" && replica != from {
						t.Fatalf("a point of replica %s is labelled %s", from, replica)
					}
					if _, marked := dp.Attributes().Get("dedup.duplicate"); marked {
						from += "(marked)"
					}
					out = append(out, fmt.Sprintf("%s%s/%d", from, map[bool]string{true: "", false: "+label"}[replica == "-"], int(dp.DoubleValue())))
				}
			}
		}
	}
	return out
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func wantDelivered(t *testing.T, sink *consumertest.MetricsSink, want ...[]string) {
	t.Helper()
	got := delivered(t, sink)
	w := slices.Concat(want...)
	if !slices.Equal(got, w) {
		t.Fatalf("delivered %q,\nwant %q", got, w)
	}
}

// TestElectionDeliversOneReplica: two replicas send the same series, in
// turn and in one request; only the first one's points are delivered, with
// the replica label removed, whether the labels are resource or point
// attributes; the other's are counted as duplicates caught by election.
func TestElectionDeliversOneReplica(t *testing.T) {
	for _, place := range []labelPlace{onResource, onPoints} {
		t.Run(map[labelPlace]string{onResource: "resource labels", onPoints: "point labels"}[place], func(t *testing.T) {
			sink := new(consumertest.MetricsSink)
			h := newElectHarness(t, electionConfig(), sink, nil)
			h.mustSend(scrape("c1", "a", 0, 4, place))
			h.mustSend(scrape("c1", "b", 0, 4, place))
			h.mustSend(scrape("c1", "b", 1, 4, place))
			h.mustSend(scrape("c1", "a", 1, 4, place))
			// Both replicas in one request (a relay batched them).
			both := scrape("c1", "b", 2, 4, place)
			scrape("c1", "a", 2, 4, place).ResourceMetrics().MoveAndAppendTo(both.ResourceMetrics())
			h.mustSend(both)
			// a's retry of scrape 1 is still an identity duplicate.
			h.mustSend(scrape("c1", "a", 1, 4, place))

			wantDelivered(t, sink, repeat("a/0", 4), repeat("a/1", 4), repeat("a/2", 4))
			for _, w := range []struct {
				got, want int64
				what      string
			}{
				{h.outcome("unique"), 12, "unique"},
				{h.outcome("duplicate"), 16, "duplicate"},
				{h.tier("election"), 12, "tier election"},
				{h.tier("local"), 4, "tier local"},
				{h.elections("new"), 1, "elections new"},
				{h.elections("failover"), 0, "elections failover"},
				{h.undecided("missing_label"), 0, "undecided"},
				{h.elected("c1", "a"), 1, "elected c1=a"},
				{h.elected("c1", "b"), 0, "elected c1=b"},
			} {
				if w.got != w.want {
					t.Errorf("%s = %d, want %d", w.what, w.got, w.want)
				}
			}
		})
	}
}

// TestElectionKeepsTheReplicaLabelWhenAsked: remove_replica_label: false
// delivers the elected replica's points as they came.
func TestElectionKeepsTheReplicaLabelWhenAsked(t *testing.T) {
	sink := new(consumertest.MetricsSink)
	cfg := electionConfig()
	cfg.Metrics.ReplicaElection.Get().RemoveReplicaLabel = false
	h := newElectHarness(t, cfg, sink, nil)
	h.mustSend(scrape("c1", "a", 0, 2, onPoints))
	h.mustSend(scrape("c1", "b", 0, 2, onResource))
	h.mustSend(scrape("c1", "a", 1, 2, onResource))
	wantDelivered(t, sink, repeat("a+label/0", 2), repeat("a+label/1", 2))
}

// TestElectionMarks: under action: mark, the other replica's points are
// delivered marked, with their replica label.
func TestElectionMarks(t *testing.T) {
	sink := new(consumertest.MetricsSink)
	cfg := electionConfig()
	cfg.Action = ActionMark
	h := newElectHarness(t, cfg, sink, nil)
	h.mustSend(scrape("c1", "a", 0, 2, onPoints))
	h.mustSend(scrape("c1", "b", 0, 2, onPoints))
	wantDelivered(t, sink, repeat("a/0", 2), repeat("b(marked)+label/0", 2))
	if got := h.tier("election"); got != 2 {
		t.Errorf("tier election = %d, want 2", got)
	}
}

// TestElectionFailover, on the processor's clock: the elected replica's
// data refreshes its election every update_interval; once it has sent
// nothing for failover_timeout, the next replica to send is elected, and
// the first one's later points are duplicates.
func TestElectionFailover(t *testing.T) {
	sink := new(consumertest.MetricsSink)
	clock := newFakeClock()
	h := newElectHarness(t, electionConfig(), sink, clock)
	h.mustSend(scrape("c1", "a", 0, 2, onResource)) // a elected at 0s
	clock.Advance(testUpdate)
	h.mustSend(scrape("c1", "a", 1, 2, onResource)) // 10s: refreshes a
	clock.Advance(testFailover - testUpdate)
	h.mustSend(scrape("c1", "b", 2, 2, onResource)) // 30s: a holds until 40s
	clock.Advance(testUpdate - time.Millisecond)
	h.mustSend(scrape("c1", "b", 3, 2, onResource)) // 39.999s: still a's
	if got := h.elections("failover"); got != 0 {
		t.Fatalf("failovers before the timeout = %d", got)
	}
	clock.Advance(time.Millisecond)
	h.mustSend(scrape("c1", "b", 4, 2, onResource)) // 40s: b takes over
	h.mustSend(scrape("c1", "a", 5, 2, onResource)) // a is back: a duplicate now
	clock.Advance(testUpdate)
	h.mustSend(scrape("c1", "b", 6, 2, onResource))

	wantDelivered(t, sink, repeat("a/0", 2), repeat("a/1", 2), repeat("b/4", 2), repeat("b/6", 2))
	if n, f := h.elections("new"), h.elections("failover"); n != 1 || f != 1 {
		t.Errorf("elections new = %d, failover = %d, want 1 and 1", n, f)
	}
	if a, b := h.elected("c1", "a"), h.elected("c1", "b"); a != 0 || b != 1 {
		t.Errorf("elected_replica{c1,a} = %d, {c1,b} = %d, want 0 and 1", a, b)
	}
}

// TestElectionNotHandedToUndeliveredReplica: the next consumer refuses the
// batch that elected replica a; a's election is released with its claims,
// so b, the next to send, is elected, and a's retry is a duplicate.
func TestElectionNotHandedToUndeliveredReplica(t *testing.T) {
	sink := new(consumertest.MetricsSink)
	next := &failingMetrics{sink: sink}
	h := newElectHarness(t, electionConfig(), next, nil)
	next.failNext.Store(1)
	if err := h.send(scrape("c1", "a", 0, 3, onResource)); err == nil {
		t.Fatal("the refused batch's request succeeded")
	}
	h.mustSend(scrape("c1", "b", 0, 3, onResource))
	h.mustSend(scrape("c1", "a", 0, 3, onResource)) // a's retry
	wantDelivered(t, sink, repeat("b/0", 3))
	if n := h.elections("new"); n != 1 {
		t.Errorf("elections new = %d, want 1 (b's)", n)
	}
	if got := h.metric("otelcol_processor_dedup_released"); got != 3 {
		t.Errorf("released = %d, want 3 (a's claims)", got)
	}
	if got := h.elected("c1", "b"); got != 1 {
		t.Errorf("elected_replica{c1,b} = %d, want 1", got)
	}
}

// failingMetrics refuses its next failNext batches.
type failingMetrics struct {
	sink     *consumertest.MetricsSink
	failNext atomic.Int32
}

func (f *failingMetrics) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }

func (f *failingMetrics) ConsumeMetrics(ctx context.Context, md pmetric.Metrics) error {
	if f.failNext.Add(-1) >= 0 {
		return errors.New("backend refused")
	}
	return f.sink.ConsumeMetrics(ctx, md)
}

// gatedMetrics holds every batch until the test releases it.
type gatedMetrics struct {
	entered chan struct{}
	release chan error
	sink    consumertest.MetricsSink
}

func newGatedMetrics() *gatedMetrics {
	return &gatedMetrics{entered: make(chan struct{}, 16), release: make(chan error, 16)}
}

func (g *gatedMetrics) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }

func (g *gatedMetrics) ConsumeMetrics(ctx context.Context, md pmetric.Metrics) error {
	g.entered <- struct{}{}
	if err := <-g.release; err != nil {
		return err
	}
	return g.sink.ConsumeMetrics(ctx, md)
}

// waitEntered waits, bounded, for the next batch to reach g.
func (g *gatedMetrics) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no batch reached the next consumer within 10s")
	}
}

// result waits, bounded, for a request's answer.
func result(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("no answer within 10s")
		return nil
	}
}

func sendAsync(h *electHarness, md pmetric.Metrics) <-chan error {
	done := make(chan error, 1)
	go func() { done <- h.send(md) }()
	return done
}

// TestElectionPendingUntilDelivered: while the batch that took a's
// election is downstream, batches of the same cluster (of b, and a's next
// one) wait for it. If it fails, b's batch takes the election; if it is
// delivered, b's points are duplicates and a's next batch is delivered.
func TestElectionPendingUntilDelivered(t *testing.T) {
	for _, firstFails := range []bool{true, false} {
		t.Run(map[bool]string{true: "first delivery fails", false: "first delivery succeeds"}[firstFails], func(t *testing.T) {
			next := newGatedMetrics()
			h := newElectHarness(t, electionConfig(), next, nil)
			first := sendAsync(h, scrape("c1", "a", 0, 2, onResource))
			next.waitEntered(t) // a's batch is being delivered, its election pending
			bDone := sendAsync(h, scrape("c1", "b", 0, 2, onResource))
			select {
			case err := <-bDone:
				t.Fatalf("b's request returned (%v) while a's election was pending", err)
			case <-time.After(100 * time.Millisecond):
			}
			if firstFails {
				next.release <- errors.New("backend refused")
			} else {
				next.release <- nil
			}
			if err := result(t, first); firstFails != (err != nil) {
				t.Fatalf("a's request: %v", err)
			}
			if firstFails {
				next.waitEntered(t) // b's batch, now elected
				next.release <- nil
			}
			if err := result(t, bDone); err != nil {
				t.Fatalf("b's request: %v", err)
			}
			aNext := sendAsync(h, scrape("c1", "a", 1, 2, onResource))
			if !firstFails {
				next.waitEntered(t)
				next.release <- nil
			}
			if err := result(t, aNext); err != nil {
				t.Fatal(err)
			}
			if firstFails {
				wantDelivered(t, &next.sink, repeat("b/0", 2))
			} else {
				wantDelivered(t, &next.sink, repeat("a/0", 2), repeat("a/1", 2))
			}
			if n := h.histogramCount("otelcol_processor_dedup_wait_duration", attribute.String("result", "settled")); n != 1 {
				t.Errorf("settled waits = %d, want 1", n)
			}
		})
	}
}

// TestElectionRefusedAfterPendingWait: a batch whose cluster's election is
// still pending after pending_wait is refused for retry, delivering
// nothing, and holds no election afterwards.
func TestElectionRefusedAfterPendingWait(t *testing.T) {
	next := newGatedMetrics()
	cfg := electionConfig()
	cfg.PendingWait = 50 * time.Millisecond
	h := newElectHarness(t, cfg, next, nil)
	first := sendAsync(h, scrape("c1", "a", 0, 2, onResource))
	next.waitEntered(t)
	err := h.send(scrape("c1", "b", 0, 2, onResource))
	if !errors.Is(err, errElectionInFlight) {
		t.Fatalf("b's request: %v, want errElectionInFlight", err)
	}
	next.release <- errors.New("backend refused") // a's delivery fails too
	if err := result(t, first); err == nil {
		t.Fatal("a's request succeeded")
	}
	// Neither a nor b holds the cluster: b's retry is elected.
	done := sendAsync(h, scrape("c1", "b", 0, 2, onResource))
	next.waitEntered(t)
	next.release <- nil
	if err := result(t, done); err != nil {
		t.Fatal(err)
	}
	wantDelivered(t, &next.sink, repeat("b/0", 2))
	if n := h.histogramCount("otelcol_processor_dedup_wait_duration", attribute.String("result", "refused")); n != 1 {
		t.Errorf("refused waits = %d, want 1", n)
	}
}

// TestElectionUndecided: points without a cluster or replica label, and
// points of clusters past max_clusters, are not decided by election: both
// replicas' points go on to the identity dedup (which drops exact copies),
// counted by reason.
func TestElectionUndecided(t *testing.T) {
	sink := new(consumertest.MetricsSink)
	cfg := electionConfig()
	cfg.Metrics.ReplicaElection.Get().MaxClusters = 1
	h := newElectHarness(t, cfg, sink, nil)
	h.mustSend(scrape("c1", "a", 0, 2, noReplica))
	h.mustSend(scrape("c1", "b", 0, 2, noReplica))
	h.mustSend(scrape("c1", "b", 0, 2, noReplica)) // an exact copy
	h.mustSend(scrape("c1", "a", 1, 2, onResource))
	h.mustSend(scrape("c2", "a", 1, 2, onResource)) // past max_clusters: 1
	h.mustSend(scrape("c2", "b", 1, 2, onResource))
	h.mustSend(scrape("c1", "b", 1, 2, onResource))
	wantDelivered(t, sink,
		repeat("a/0", 2), repeat("b/0", 2), // no replica label
		repeat("a/1", 2),
		repeat("a+label/1", 2), repeat("b+label/1", 2)) // undecided: labels kept
	if m, l := h.undecided("missing_label"), h.undecided("cluster_limit"); m != 6 || l != 4 {
		t.Errorf("undecided missing_label = %d, cluster_limit = %d, want 6 and 4", m, l)
	}
	if d, e := h.tier("local"), h.tier("election"); d != 2 || e != 2 {
		t.Errorf("duplicates local = %d, election = %d, want 2 and 2", d, e)
	}
	if got := h.elected("c2", "a") + h.elected("c2", "b"); got != 0 {
		t.Errorf("c2 elected: %d", got)
	}
}

// TestElectionPerTenant: with metadata_keys, two tenants' clusters of the
// same name have elections of their own.
func TestElectionPerTenant(t *testing.T) {
	sink := new(consumertest.MetricsSink)
	cfg := electionConfig()
	cfg.MetadataKeys = []string{"X-Scope-OrgID"}
	h := newElectHarness(t, cfg, sink, nil)
	tenant := func(id string) context.Context {
		return client.NewContext(context.Background(), client.Info{Metadata: client.NewMetadata(map[string][]string{"X-Scope-OrgID": {id}})})
	}
	for _, s := range []struct {
		tenant, replica string
	}{{"acme", "a"}, {"globex", "b"}, {"acme", "b"}, {"globex", "a"}} {
		if err := h.p.ConsumeMetrics(tenant(s.tenant), scrape("c1", s.replica, 0, 1, onResource)); err != nil {
			t.Fatal(err)
		}
	}
	wantDelivered(t, sink, []string{"a/0", "b/0"})
	if a, b := h.elected("c1", "a"), h.elected("c1", "b"); a != 1 || b != 1 {
		t.Errorf("elected_replica{c1,a} = %d, {c1,b} = %d, want 1 and 1", a, b)
	}
}

// TestElectionOnlyForMetrics: the setting is the metrics section's; a logs
// pipeline with the same processor config is unaffected.
func TestElectionOnlyForMetrics(t *testing.T) {
	sink := new(consumertest.LogsSink)
	cfg := electionConfig()
	h := newHarness(t, cfg, sink)
	ld := logs(rec{body: "x", resource: "svc", attrs: map[string]any{"cluster": "c1", "__replica__": "a"}},
		rec{body: "y", resource: "svc", attrs: map[string]any{"cluster": "c1", "__replica__": "b"}})
	if err := h.consume(ld); err != nil {
		t.Fatal(err)
	}
	assertBodies(t, sink, "x", "y")
}

// TestElectionSharedTier plays two collectors sharing Redis (standalone
// and Cluster): replica a's data reaches one, b's the other, each in turn
// and then both at once; only a's points are delivered, across both. A
// batch refused downstream elects nobody; the other replica takes over
// after the failover timeout, on the Redis server's clock.
func TestElectionSharedTier(t *testing.T) {
	for _, topo := range []string{"standalone", "cluster"} {
		t.Run(topo, func(t *testing.T) {
			var endpoints []string
			if topo == "standalone" {
				endpoints = []string{redistest.Standalone(t).Addr()}
			} else {
				endpoints = redistest.Cluster(t, 3).Addrs()
			}
			// Short, but long enough that b, sending every ~100 ms, keeps its
			// election on a loaded machine.
			const update, failover = 200 * time.Millisecond, 2 * time.Second
			newCfg := func() *Config {
				cfg := electionConfig()
				el := cfg.Metrics.ReplicaElection.Get()
				el.UpdateInterval, el.FailoverTimeout = update, failover
				cfg.Redis = configoptional.Some(RedisConfig{ClusterSlots: 12, Endpoints: endpoints, Mode: RedisModeAuto, Timeout: 2 * time.Second, Lease: 30 * time.Second, OnError: ErrorRefuse})
				return cfg
			}
			sinks := []*consumertest.MetricsSink{new(consumertest.MetricsSink), new(consumertest.MetricsSink)}
			fail := &failingMetrics{sink: sinks[0]}
			hs := []*electHarness{newElectHarness(t, newCfg(), fail, nil), newElectHarness(t, newCfg(), sinks[1], nil)}

			// Collector 0 gets a's first scrape, refuses it downstream.
			fail.failNext.Store(1)
			if err := hs[0].send(scrape("c1", "a", 0, 3, onResource)); err == nil {
				t.Fatal("the refused batch's request succeeded")
			}
			// b's first scrape reaches collector 1: b is elected, not a.
			hs[1].mustSend(scrape("c1", "b", 0, 3, onResource))
			hs[0].mustSend(scrape("c1", "a", 0, 3, onResource)) // a's retry
			// Then both, at both collectors, concurrently, for a while
			// (several update intervals): b's election is refreshed.
			var wg sync.WaitGroup
			for s := 1; s <= 8; s++ {
				for i, rep := range []string{"a", "b"} {
					wg.Go(func() {
						if err := hs[(s+i)%2].send(scrape("c1", rep, s, 3, onResource)); err != nil {
							t.Error(err)
						}
					})
				}
				wg.Wait()
				time.Sleep(update / 2) // scrapes come at their own pace: time passing is the point
			}
			if t.Failed() {
				return
			}
			// b stops; a keeps sending, to both: after the failover timeout
			// it takes over.
			deadline := time.Now().Add(10 * failover)
			s := 9
			for ; time.Now().Before(deadline); s++ {
				hs[s%2].mustSend(scrape("c1", "a", s, 3, onResource))
				if hs[0].elections("failover")+hs[1].elections("failover") == 1 {
					break
				}
				time.Sleep(update) // a scrapes at its own pace while the failover timeout runs
			}
			hs[(s+1)%2].mustSend(scrape("c1", "b", s+1, 3, onResource)) // b is back: too late

			var got []string
			for _, sink := range sinks {
				got = append(got, delivered(t, sink)...)
			}
			sort.Slice(got, func(i, j int) bool {
				var ri, rj string
				var si, sj int
				_, _ = fmt.Sscanf(got[i], "%1s/%d", &ri, &si) // a malformed entry sorts first
				_, _ = fmt.Sscanf(got[j], "%1s/%d", &rj, &sj)
				return si < sj || si == sj && ri < rj
			})
			want := slices.Concat(repeat("b/0", 3))
			for i := 1; i <= 8; i++ {
				want = append(want, repeat(fmt.Sprintf("b/%d", i), 3)...)
			}
			if len(got) < len(want)+3 || !slices.Equal(got[:len(want)], want) {
				t.Fatalf("delivered %q,\nwant %q then a's after the failover", got, want)
			}
			for _, p := range got[len(want):] {
				if p[0] != 'a' {
					t.Fatalf("after the failover, delivered %q: %q", p, got[len(want):])
				}
			}
			if n := hs[0].elections("new") + hs[1].elections("new"); n != 1 {
				t.Errorf("elections new = %d, want 1", n)
			}
			if n := hs[0].elections("failover") + hs[1].elections("failover"); n != 1 {
				t.Errorf("elections failover = %d, want 1", n)
			}
		})
	}
}

// TestElectionRedisDownPassesBothReplicas: with Redis down under on_error:
// pass, a collector that knows no election of a cluster cannot decide it
// alone (its peers could elect the other replica, and each would drop the
// points the other keeps): both replicas' points are delivered, counted
// undecided "unavailable", and no election is made or counted.
func TestElectionRedisDownPassesBothReplicas(t *testing.T) {
	srv := redistest.Standalone(t)
	newCfg := func() *Config {
		cfg := electionConfig()
		cfg.Redis = configoptional.Some(RedisConfig{ClusterSlots: 12, Endpoints: []string{srv.Addr()}, Mode: RedisModeStandalone, Timeout: 200 * time.Millisecond, Lease: 30 * time.Second, OnError: ErrorPass})
		return cfg
	}
	sinks := []*consumertest.MetricsSink{new(consumertest.MetricsSink), new(consumertest.MetricsSink)}
	hs := []*electHarness{newElectHarness(t, newCfg(), sinks[0], nil), newElectHarness(t, newCfg(), sinks[1], nil)}
	srv.Kill()
	hs[0].mustSend(scrape("c1", "a", 0, 2, onResource))
	hs[1].mustSend(scrape("c1", "b", 0, 2, onResource))
	hs[0].mustSend(scrape("c1", "b", 1, 2, onResource))
	hs[1].mustSend(scrape("c1", "a", 1, 2, onResource))
	wantDelivered(t, sinks[0], repeat("a+label/0", 2), repeat("b+label/1", 2))
	wantDelivered(t, sinks[1], repeat("b+label/0", 2), repeat("a+label/1", 2))
	for i, h := range hs {
		if u, n := h.undecided("unavailable"), h.elections("new"); u != 4 || n != 0 {
			t.Errorf("collector %d: undecided unavailable = %d, elections new = %d; want 4 and 0", i, u, n)
		}
	}
}

// TestElectionNotSettledWhileRedisHasNotConfirmed: a batch took a's
// election in Redis, and Redis died while the batch was downstream, so its
// confirmation cannot land (the tier retries it). The collector does not
// hold a elected on its own word: b's next points, Redis still down, go on
// undecided instead of being dropped as another replica's. Were the
// confirmation never to land, its peers could elect b.
func TestElectionNotSettledWhileRedisHasNotConfirmed(t *testing.T) {
	srv := redistest.Standalone(t)
	cfg := electionConfig()
	cfg.Redis = configoptional.Some(RedisConfig{ClusterSlots: 12, Endpoints: []string{srv.Addr()}, Mode: RedisModeStandalone, Timeout: 200 * time.Millisecond, Lease: 30 * time.Second, OnError: ErrorPass})
	next := newGatedMetrics()
	h := newElectHarness(t, cfg, next, nil)
	first := sendAsync(h, scrape("c1", "a", 0, 2, onResource))
	next.waitEntered(t) // a's batch holds the election in Redis, pending
	srv.Kill()
	next.release <- nil
	if err := result(t, first); err != nil {
		t.Fatalf("a's request: %v", err)
	}
	done := sendAsync(h, scrape("c1", "b", 0, 2, onResource))
	next.waitEntered(t)
	next.release <- nil
	if err := result(t, done); err != nil {
		t.Fatalf("b's request: %v", err)
	}
	wantDelivered(t, &next.sink, repeat("a/0", 2), repeat("b+label/0", 2))
	if u, d := h.undecided("unavailable"), h.tier("election"); u != 2 || d != 0 {
		t.Errorf("undecided unavailable = %d, election duplicates = %d; want 2 and 0", u, d)
	}
}

// TestElectionAfterAWaitTakesAfresh: a batch carrying two HA clusters takes
// the first one's election, meets the second one's pending at another
// collector, gives up what it took and waits. Once the other batch is
// delivered, it decides both afresh, under a token of its own: the first
// cluster's replica is elected and delivered, the second cluster's points
// are duplicates of the replica elected there. Under refuse the batch is
// not refused; under pass nothing is left undecided.
func TestElectionAfterAWaitTakesAfresh(t *testing.T) {
	for _, policy := range []ErrorPolicy{ErrorRefuse, ErrorPass} {
		t.Run(string(policy), func(t *testing.T) {
			srv := redistest.Standalone(t)
			newCfg := func() *Config {
				cfg := electionConfig()
				cfg.Redis = configoptional.Some(RedisConfig{ClusterSlots: 12, Endpoints: []string{srv.Addr()}, Mode: RedisModeAuto, Timeout: 2 * time.Second, Lease: 30 * time.Second, OnError: policy})
				return cfg
			}
			first, second := clustersInKeyOrder()
			gate := newGatedMetrics()
			other := newElectHarness(t, newCfg(), gate, nil)
			sink := new(consumertest.MetricsSink)
			h := newElectHarness(t, newCfg(), sink, nil)

			held := sendAsync(other, scrape(second, "a", 0, 2, onResource))
			gate.waitEntered(t) // the second cluster's election is pending at the other collector
			md := scrape(first, "a", 0, 2, onResource)
			scrape(second, "b", 0, 2, onResource).ResourceMetrics().MoveAndAppendTo(md.ResourceMetrics())
			done := sendAsync(h, md)
			select {
			case err := <-done:
				t.Fatalf("the batch returned (%v) while an election it carries was pending", err)
			case <-time.After(200 * time.Millisecond): // it waits
			}
			gate.release <- nil
			if err := result(t, held); err != nil {
				t.Fatal(err)
			}
			if err := result(t, done); err != nil {
				t.Fatalf("the batch that waited: %v", err)
			}
			wantDelivered(t, sink, repeat("a/0", 2))
			if n := h.undecided("unavailable"); n != 0 {
				t.Errorf("undecided for an unavailable tier: %d, want 0", n)
			}
			if n := h.elections("new"); n != 1 {
				t.Errorf("elections new = %d, want 1 (the first cluster's)", n)
			}
		})
	}
}

// clustersInKeyOrder returns two cluster names whose elections a batch
// decides in this order (by their keys, for the default tenant).
func clustersInKeyOrder() (string, string) {
	key := func(cluster string) digest.Digest {
		var enc identity.Encoder
		var tenant election.Tenant
		enc.Raw([]byte{'E'})
		enc.Raw(tenant[:])
		enc.String(cluster)
		return enc.Digest()
	}
	if key("c1").Compare(key("c2")) < 0 {
		return "c1", "c2"
	}
	return "c2", "c1"
}
