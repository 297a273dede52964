package e2e

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

// Replica election end to end: two independent agents scrape (or generate)
// the same series, each at its own times, through the real binary.

const (
	metricElections = "otelcol_processor_dedup_elections"
	metricElected   = "otelcol_processor_dedup_elected_replica"
	metricUndecided = "otelcol_processor_dedup_election_undecided"

	// Short election timings for tests: the agents scrape every 250 ms.
	testUpdate       = 300 * time.Millisecond
	testFailover     = 2 * time.Second
	testScrapeEvery  = 250 * time.Millisecond
	electionCluster  = "ha-1"
	electionReplicaA = "agent-a"
	electionReplicaB = "agent-b"
)

// electionYAML is a metrics pipeline otlp -> dedup/ha (replica election on
// Mimir's labels with the test's timings, plus redisYAML if not empty) ->
// the sink.
func electionYAML(redisYAML string) string {
	return fmt.Sprintf(`
processors:
  dedup/ha:
    metrics:
      replica_election:
        update_interval: %s
        update_jitter: 0s
        failover_timeout: %s
%s
service:
  pipelines:
    metrics:
      receivers: [otlp]
      processors: [dedup/ha]
      exporters: [otlp_grpc/sink]
`, testUpdate, testFailover, redisYAML)
}

func redisYAML(endpoints ...string) string {
	q := make([]string, len(endpoints))
	for i, e := range endpoints {
		q[i] = fmt.Sprintf("%q", e)
	}
	return fmt.Sprintf("    redis: {endpoints: [%s], on_error: refuse}", strings.Join(q, ", "))
}

// target is the scraped application: a /metrics endpoint both agents
// scrape. Each agent asks with its own ?agent= parameter (a scrape
// parameter, not a label: the series are the same for both), and the value
// served tells who scraped it: 1e6 × agent number + the agent's scrape count.
type target struct {
	srv    *httptest.Server
	mu     sync.Mutex
	scrape map[string]int
}

func newTarget(t *testing.T) *target {
	tg := &target{scrape: map[string]int{}}
	tg.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		agent := r.URL.Query().Get("agent")
		tg.mu.Lock()
		tg.scrape[agent]++
		n := tg.scrape[agent]
		tg.mu.Unlock()
		num := map[string]int{electionReplicaA: 1, electionReplicaB: 2}[agent]
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintf(w, "# TYPE ha_test_value gauge\nha_test_value{queue=\"orders\"} %d\n", num*1_000_000+n)
	}))
	t.Cleanup(tg.srv.Close)
	return tg
}

// agentYAML is an agent scraping tg as replica of electionCluster (Prometheus
// external labels, which the receiver puts on every point) and exporting
// OTLP to gateway.
func agentYAML(tg *target, replica, gateway string) string {
	return fmt.Sprintf(`
extensions:
  health_check: {endpoint: %q}
receivers:
  prometheus:
    config:
      global:
        scrape_interval: %s
        scrape_timeout: %s
        external_labels: {cluster: %s, __replica__: %s}
      scrape_configs:
        - job_name: app
          params: {agent: [%s]}
          static_configs:
            - targets: [%q]
exporters:
  otlp_grpc:
    endpoint: %q
    tls: {insecure: true}
service:
  extensions: [health_check]
  telemetry:
    metrics: {level: none}
  pipelines:
    metrics:
      receivers: [prometheus]
      exporters: [otlp_grpc]
`, ListenHealth, testScrapeEvery, testScrapeEvery, electionCluster, replica, replica,
		strings.TrimPrefix(tg.srv.URL, "http://"), gateway)
}

// startScraper starts one Prometheus-scraping agent; it is stopped by PID
// when the test ends.
func startScraper(t *testing.T, tg *target, replica, gateway string) *Collector {
	t.Helper()
	return startProcess(t, agentBinary(t), map[string]any{}, nil, []string{agentYAML(tg, replica, gateway)}).col
}

// testPoint is one delivered ha_test_value point.
type testPoint struct {
	agent     int // 1 (a) or 2 (b), from the value
	ts        time.Time
	replica   string // the __replica__ label left on it, if any
	cluster   string
	scrapeSeq int
}

// testPoints returns the ha_test_value points the sinks received, in
// timestamp order, staleness markers left out.
func testPoints(sinks ...*testSink) []testPoint {
	var out []testPoint
	for _, s := range sinks {
		for _, md := range s.Metrics() {
			for i := range md.ResourceMetrics().Len() {
				rm := md.ResourceMetrics().At(i)
				for j := range rm.ScopeMetrics().Len() {
					ms := rm.ScopeMetrics().At(j).Metrics()
					for k := range ms.Len() {
						m := ms.At(k)
						if m.Name() != "ha_test_value" || m.Type() != pmetric.MetricTypeGauge {
							continue
						}
						for p := range m.Gauge().DataPoints().Len() {
							dp := m.Gauge().DataPoints().At(p)
							if dp.Flags().NoRecordedValue() || math.IsNaN(dp.DoubleValue()) {
								continue
							}
							tp := testPoint{agent: int(dp.DoubleValue()) / 1_000_000, scrapeSeq: int(dp.DoubleValue()) % 1_000_000, ts: dp.Timestamp().AsTime()}
							for _, attrs := range []pcommon.Map{rm.Resource().Attributes(), dp.Attributes()} {
								if v, ok := attrs.Get("__replica__"); ok {
									tp.replica = v.AsString()
								}
								if v, ok := attrs.Get("cluster"); ok {
									tp.cluster = v.AsString()
								}
							}
							out = append(out, tp)
						}
					}
				}
			}
		}
	}
	slices.SortStableFunc(out, func(a, b testPoint) int { return a.ts.Compare(b.ts) })
	return out
}

// waitPoints waits, bounded, until cond holds for the sinks' points.
func waitPoints(t *testing.T, what string, within time.Duration, cond func([]testPoint) bool, sinks ...*testSink) []testPoint {
	t.Helper()
	var pts []testPoint
	testkit.WaitFor(t, what, within, func() bool {
		pts = testPoints(sinks...)
		return cond(pts)
	}, func() string { return fmt.Sprintf("delivered %d points: %v", len(pts), summarize(pts)) })
	return pts
}

// summarize renders points as runs of one agent: "a×12 b×30".
func summarize(pts []testPoint) string {
	var runs []string
	for i := 0; i < len(pts); {
		j := i
		for j < len(pts) && pts[j].agent == pts[i].agent {
			j++
		}
		runs = append(runs, fmt.Sprintf("%c×%d", 'a'+rune(pts[i].agent-1), j-i))
		i = j
	}
	return strings.Join(runs, " ")
}

func countAgent(pts []testPoint, agent int) int {
	n := 0
	for _, p := range pts {
		if p.agent == agent {
			n++
		}
	}
	return n
}

// runAgentsFailover runs two agents scraping one target, agent a sending to
// gateways[0] and b to gateways[len-1], and checks that the backend gets
// exactly one agent's points, then, once that agent stops, the other's,
// continuing the series within the failover timeout; never both.
func runAgentsFailover(t *testing.T, gateways []*running) {
	tg := newTarget(t)
	sinks := make([]*testSink, len(gateways))
	for i, g := range gateways {
		sinks[i] = g.sink
	}
	agents := map[int]*Collector{
		1: startScraper(t, tg, electionReplicaA, gateways[0].ports.OTLPGRPC),
		2: startScraper(t, tg, electionReplicaB, gateways[len(gateways)-1].ports.OTLPGRPC),
	}
	// Both agents scrape and send; one is elected.
	pts := waitPoints(t, "10 points delivered", 30*time.Second, func(p []testPoint) bool { return len(p) >= 10 }, sinks...)
	elected := pts[0].agent
	other := 3 - elected
	// Stop the elected agent (its last scrape may still arrive).
	if err := agents[elected].Stop(stopGrace); err != nil {
		t.Fatalf("stop agent %d: %v", elected, err)
	}
	stopped := time.Now()
	waitPoints(t, "the other agent's points after the elected one stopped", 30*time.Second,
		func(p []testPoint) bool { return countAgent(p, other) >= 8 }, sinks...)
	t.Logf("took over %s after the elected agent stopped", time.Since(stopped).Round(10*time.Millisecond))
	scs := make([]Scrape, len(gateways))
	for i, g := range gateways {
		scs[i] = g.scrape()
	}
	if err := agents[other].Stop(stopGrace); err != nil {
		t.Fatal(err)
	}
	for _, g := range gateways {
		g.stop()
	}
	pts = testPoints(sinks...)

	// One run of each agent: the elected one's, then the other's.
	if s := summarize(pts); s != fmt.Sprintf("%c×%d %c×%d", 'a'+rune(elected-1), countAgent(pts, elected), 'a'+rune(other-1), countAgent(pts, other)) {
		t.Fatalf("delivered runs %s, want one run of the elected agent, then one of the other", s)
	}
	// No point twice, the replica label removed, the cluster label kept.
	seen := map[[2]int]bool{}
	for _, p := range pts {
		if k := [2]int{p.agent, p.scrapeSeq}; seen[k] {
			t.Fatalf("scrape %d of agent %d delivered twice", p.scrapeSeq, p.agent)
		} else {
			seen[k] = true
		}
		if p.replica != "" || p.cluster != electionCluster {
			t.Fatalf("a point arrived with __replica__=%q cluster=%q, want the replica label removed and cluster %q", p.replica, p.cluster, electionCluster)
		}
	}
	// The series continues: the other agent's first point comes within the
	// failover timeout (plus a refresh interval, two scrapes and a second of
	// slack for a loaded machine) of the stopped agent's last.
	last, first := lastOf(pts, elected), firstOf(pts, other)
	if gap := first.Sub(last); gap > testFailover+testUpdate+2*testScrapeEvery+time.Second {
		t.Errorf("the series paused %s at the failover, want at most about the failover timeout (%s)", gap, testFailover)
	}
	l := func(kv ...string) Labels { return sigLabels("dedup/ha", "metrics", kv...) }
	wantSum(t, scs, metricElections, l("reason", "new"), 1)
	wantSum(t, scs, metricElections, l("reason", "failover"), 1)
	wantSum(t, scs, metricUndecided, l(), 0)
	// Every point reached the processor with both labels and a distinct
	// identity: the delivered ones are unique (the scrapes' own up and
	// scrape_* series included), the rest duplicates caught by election.
	if u, e := redisSum(scs, metricRecords, l("outcome", "unique")), redisSum(scs, metricDuplicates, l("caught_by", "election")); u < float64(len(pts)) || e == 0 {
		t.Errorf("unique = %g (delivered %d test points), election duplicates = %g", u, len(pts), e)
	}
	wantSum(t, scs, metricDuplicates, l("caught_by", "local"), 0)
	// The gauge names the agent that took over, on the gateways that
	// saw its data.
	wantReplica := []string{electionReplicaA, electionReplicaB}[other-1]
	if got := redisSum(scs, metricElected, l("cluster", electionCluster, "replica", wantReplica)); got < 1 {
		t.Errorf("elected_replica{cluster=%s,replica=%s} = %g; series %v", electionCluster, wantReplica, got, scs[0].Find(metricElected, nil))
	}
	if got := redisSum(scs, metricElected, l("replica", []string{electionReplicaA, electionReplicaB}[elected-1])); got != 0 {
		t.Errorf("the stopped agent is still reported elected: %g", got)
	}
}

func lastOf(pts []testPoint, agent int) time.Time {
	var t time.Time
	for _, p := range pts {
		if p.agent == agent {
			t = p.ts
		}
	}
	return t
}

func firstOf(pts []testPoint, agent int) time.Time {
	for _, p := range pts {
		if p.agent == agent {
			return p.ts
		}
	}
	return time.Time{}
}

// TestElectionAgentsOneGateway: two Prometheus-receiver agents, an HA pair
// scraping one target, send to one gateway.
func TestElectionAgentsOneGateway(t *testing.T) {
	t.Parallel() // it mostly waits: see TestMain
	g := startCollector(t, nil, electionYAML(""))
	runAgentsFailover(t, []*running{g})
}

// TestElectionAgentsTwoGatewaysRedis: each agent sends to its own gateway;
// the gateways share a Redis Cluster, where the election is held.
func TestElectionAgentsTwoGatewaysRedis(t *testing.T) {
	t.Parallel() // it mostly waits: see TestMain
	cl := redistest.Cluster(t, 3)
	cfg := electionYAML(redisYAML(cl.Addrs()...))
	runAgentsFailover(t, []*running{startCollector(t, nil, cfg), startCollector(t, nil, cfg)})
}

// generated is one scrape of the series up and queue_depth{queue=orders}
// by replica of electionCluster at its own time: replica b 7 ms after a;
// the value is 1e6 × agent number + s.
func generated(replica string, s int) pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("service.name", "app")
	rm.Resource().Attributes().PutStr("cluster", electionCluster)
	rm.Resource().Attributes().PutStr("__replica__", replica)
	ts := baseTime.Add(time.Duration(s) * 15 * time.Second)
	num := 1
	if replica == electionReplicaB {
		ts, num = ts.Add(7*time.Millisecond), 2
	}
	m := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName("ha_test_value")
	dp := m.SetEmptyGauge().DataPoints().AppendEmpty()
	dp.Attributes().PutStr("queue", "orders")
	dp.SetTimestamp(pcommon.NewTimestampFromTime(ts))
	dp.SetDoubleValue(float64(num*1_000_000 + s))
	return md
}

// TestElectionRefusedBatchDoesNotElect: two OTLP senders generate the same
// series at their own times. The backend refuses the first batch, replica
// a's; a's election is given up with it, so replica b, the next to send,
// is elected, and a's retry is a duplicate. On one gateway, and on two
// sharing Redis (a sends to one, b to the other).
func TestElectionRefusedBatchDoesNotElect(t *testing.T) {
	for _, tc := range []struct {
		name     string
		gateways int
	}{{"one gateway", 1}, {"two gateways sharing Redis", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := electionYAML("")
			if tc.gateways == 2 {
				cfg = electionYAML(redisYAML(redistest.Standalone(t).Addr()))
			}
			gs := []*running{startCollector(t, nil, cfg)}
			if tc.gateways == 2 {
				gs = append(gs, startCollector(t, nil, cfg))
			}
			a, b := gs[0].grpcSender(), gs[len(gs)-1].grpcSender()
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			defer cancel()
			gs[0].sink.FailNext(1)
			if err := a.SendMetrics(ctx, generated(electionReplicaA, 0)); status.Code(err) != codes.Unavailable {
				t.Fatalf("a's first batch, refused downstream: %v, want Unavailable", err)
			}
			mustSend(t, "b 0", b.SendMetrics(ctx, generated(electionReplicaB, 0)))
			mustSend(t, "a 0 (retry)", a.SendMetrics(ctx, generated(electionReplicaA, 0)))
			for s := 1; s <= 3; s++ {
				mustSend(t, "a", a.SendMetrics(ctx, generated(electionReplicaA, s)))
				mustSend(t, "b", b.SendMetrics(ctx, generated(electionReplicaB, s)))
			}
			scs := make([]Scrape, len(gs))
			sinks := make([]*testSink, len(gs))
			for i, g := range gs {
				scs[i], sinks[i] = g.scrape(), g.sink
			}
			for _, g := range gs {
				g.stop()
			}
			if s := summarize(testPoints(sinks...)); s != "b×4" {
				t.Errorf("delivered %s, want b×4", s)
			}
			l := func(kv ...string) Labels { return sigLabels("dedup/ha", "metrics", kv...) }
			wantSum(t, scs, metricElections, l("reason", "new"), 1)
			wantSum(t, scs, metricDuplicates, l("caught_by", "election"), 4)
			wantSum(t, scs, metricRecords, l("outcome", "unique"), 4)
			wantSum(t, scs, metricReleased, l(), 1)
		})
	}
}
