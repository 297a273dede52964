package dedupprocessor

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

// TestOneClusterEndpoint: a managed Redis Cluster hands out one
// configuration endpoint. Two collectors given only that one node find the
// Cluster, use its key layout, and race the same 2000 events: each is
// delivered once.
func TestOneClusterEndpoint(t *testing.T) {
	cl := redistest.NewCluster(t, redistest.ClusterConfig{Masters: 3})
	endpoint := cl.Addrs()[1:2]
	const n, size = 2000, 100
	sinks := []*consumertest.LogsSink{new(consumertest.LogsSink), new(consumertest.LogsSink)}
	hs := []*harness{
		newHarness(t, redisConfig(endpoint, ErrorRefuse), sinks[0]),
		newHarness(t, redisConfig(endpoint, ErrorRefuse), sinks[1]),
	}
	var wg sync.WaitGroup
	for i, h := range hs {
		wg.Go(func() {
			for start := 0; start < n; start += size {
				ids := make([]int, size)
				for k := range ids {
					ids[k] = start + (k*7+i*13)%size
				}
				if err := h.consume(events(ids...)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	var got [][]string
	for _, s := range sinks {
		got = append(got, bodies(s))
	}
	testkit.WantEachOnce(t, testkit.Counts(got...), n)
	if u := hs[0].outcome("unique") + hs[1].outcome("unique"); u != n {
		t.Fatalf("unique = %d, want %d", u, n)
	}
	if d := hs[0].tier("redis") + hs[1].tier("redis"); d != n {
		t.Fatalf("redis duplicates = %d, want %d: every event raced its copy", d, n)
	}
	for _, h := range hs {
		if e := h.redisRequests("claim", "error"); e != 0 {
			t.Fatalf("%d claims failed", e)
		}
	}
	// The keys carry the Cluster layout's hash tags, spread over every
	// master, not the one node the collectors were given.
	for _, node := range cl.Nodes {
		keys, err := node.Client().Keys(context.Background(), "dedup:*{*}*").Result()
		if err != nil || len(keys) == 0 {
			t.Fatalf("master %s holds %d tagged keys (%v)", node.Addr(), len(keys), err)
		}
	}
}

// startProcessor creates and starts a logs processor with cfg (a nil
// logger: none) and returns Start's error; a processor that started is shut
// down when the test ends.
func startProcessor(t *testing.T, cfg *Config, host component.Host, logger *zap.Logger) error {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	set := processortest.NewNopSettings(componentType)
	if logger != nil {
		set.Logger = logger
	}
	proc, err := NewFactory().CreateLogs(context.Background(), set, cfg, new(consumertest.LogsSink))
	if err != nil {
		t.Fatal(err)
	}
	if err := proc.Start(context.Background(), host); err != nil {
		return err
	}
	t.Cleanup(func() {
		if err := proc.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return nil
}

// TestStartFailsOnUnusableTopology: a topology the tier cannot work with is
// a configuration error: the processor's Start fails with one line naming
// the setting and the fix, instead of letting every copy through.
func TestStartFailsOnUnusableTopology(t *testing.T) {
	sen := redistest.Sentinel(t)
	master, replica := sen.Master.Addr(), sen.Replica.Addr()
	for _, tc := range []struct {
		name      string
		endpoints []string
		mode      RedisMode
		want      string
	}{
		{"Sentinel without master_name", []string{sen.SentinelAddr()}, RedisModeAuto,
			"dedup: redis.endpoints are Sentinels (" + sen.SentinelAddr() + ") but redis.master_name is empty; set it to the master they monitor (mymaster)"},
		{"a replica as the endpoint", []string{replica}, RedisModeAuto,
			"dedup: redis.endpoints: " + replica + " is a read-only replica of " + master + "; list the master " + master + " instead (or its Sentinels, with redis.master_name)"},
		{"cluster mode, standalone server", []string{master}, RedisModeCluster,
			`dedup: redis.mode is "cluster" but ` + master + ` is a standalone server; set redis.mode to "standalone" (or "auto")`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := redisConfig(tc.endpoints, ErrorPass)
			cfg.Redis.Get().Mode = tc.mode
			err := startProcessor(t, cfg, nil, nil)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Start: %v\nwant %s", err, tc.want)
			}
		})
	}
}

// TestRedisDownAtStart: Redis is down when the collector starts. The start
// does not fail; batches follow on_error (refused under refuse, delivered
// on the local cache's word under pass) until Redis comes up, which the
// tier notices by itself; then the shared tier works: the copies of events
// another collector delivered are caught.
func TestRedisDownAtStart(t *testing.T) {
	srv := redistest.Standalone(t)
	for _, policy := range []ErrorPolicy{ErrorRefuse, ErrorPass} {
		t.Run(string(policy), func(t *testing.T) {
			srv.Kill()
			cfg := redisConfig([]string{srv.Addr()}, policy)
			cfg.Redis.Get().KeyPrefix = "down:" + string(policy) + ":"
			core, logs := observer.New(zap.InfoLevel)
			sink := new(consumertest.LogsSink)
			h := newHarness(t, cfg, sink, zap.New(core))
			if n := logs.FilterMessage("dedup: shared tier: Redis did not answer at start; until it does, batches follow redis.on_error").Len(); n != 1 {
				t.Fatalf("%d warnings about Redis at start, want 1", n)
			}
			err := h.consume(events(1, 2))
			switch policy {
			case ErrorRefuse:
				if err == nil {
					t.Fatal("refuse: a batch was accepted while Redis was unknown")
				}
			case ErrorPass:
				if err != nil {
					t.Fatalf("pass: %v", err)
				}
			}
			if e := h.redisRequests("claim", "error"); e != 1 {
				t.Fatalf("claim errors = %d, want 1", e)
			}
			if u := h.metric("otelcol_processor_dedup_redis_unchecked"); policy == ErrorPass && u != 2 {
				t.Fatalf("unchecked = %d, want 2", u)
			}
			srv.Restart()
			testkit.WaitFor(t, "the tier finding Redis after its start", 10*time.Second, func() bool {
				return logs.FilterMessage("dedup: shared tier connected: Redis answered").Len() > 0
			})
			// Another collector delivered events 10-19; this one gets copies.
			other := newHarness(t, cfg, new(consumertest.LogsSink))
			if err := other.consume(events(10, 11, 12, 13, 14, 15, 16, 17, 18, 19)); err != nil {
				t.Fatal(err)
			}
			before := sink.LogRecordCount()
			if err := h.consume(events(10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20)); err != nil {
				t.Fatal(err)
			}
			if got := sink.LogRecordCount() - before; got != 1 {
				t.Fatalf("delivered %d of the batch, want 1 (events 10-19 are copies)", got)
			}
			if d := h.tier("redis"); d != 10 {
				t.Fatalf("redis duplicates = %d, want 10", d)
			}
		})
	}
}

// TestTopologyFoundLaterUnusable: Redis is down at start, and what comes up
// at the endpoint is a replica. The processor logs an error naming the fix,
// reports a permanent error status, and keeps degrading per on_error.
func TestTopologyFoundLaterUnusable(t *testing.T) {
	master := redistest.Standalone(t, redistest.WithConfig("repl-diskless-sync-delay 0"))
	replica := redistest.Replica(t, master)
	replica.Kill()
	cfg := redisConfig([]string{replica.Addr()}, ErrorPass)
	core, logs := observer.New(zap.InfoLevel)
	host := &statusHost{}
	if err := startProcessor(t, cfg, host, zap.New(core)); err != nil {
		t.Fatal(err)
	}
	replica.Restart()
	want := "dedup: redis.endpoints: " + replica.Addr() + " is a read-only replica of " + master.Addr() + "; list the master " + master.Addr() + " instead (or its Sentinels, with redis.master_name)"
	testkit.WaitFor(t, "a status reported after the replica's start", 10*time.Second, func() bool { return host.last() != nil })
	ev := host.last()
	if ev.Status() != componentstatus.StatusPermanentError || ev.Err() == nil || ev.Err().Error() != want {
		t.Fatalf("status %v, %v; want a permanent error: %s", ev.Status(), ev.Err(), want)
	}
	entries := logs.FilterMessage("dedup: shared tier cannot work with what Redis answered; batches follow redis.on_error until the configuration is fixed").All()
	if len(entries) != 1 || entries[0].Level != zap.ErrorLevel {
		t.Fatalf("error log entries: %v", entries)
	}
}

// statusHost is a component.Host that records the status events the
// processor reports.
type statusHost struct {
	mu     sync.Mutex
	events []*componentstatus.Event
}

func (h *statusHost) GetExtensions() map[component.ID]component.Component { return nil }

func (h *statusHost) Report(ev *componentstatus.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, ev)
}

func (h *statusHost) last() *componentstatus.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.events) == 0 {
		return nil
	}
	return h.events[len(h.events)-1]
}

var _ componentstatus.Reporter = (*statusHost)(nil)

// TestDeadMasterLeavesOnlyItsRecordsUnchecked: one master of a Cluster
// without replicas is dead. Under pass, a batch is still checked for the
// records whose keys live on the other masters; only the dead master's
// records are delivered on the local cache's word (unchecked). A second
// collector that gets copies of the batch catches every checked record as
// a duplicate and delivers the unchecked ones again: the duplicates the
// outage let through are exactly the unchecked records. Under refuse, the
// batch is refused.
func TestDeadMasterLeavesOnlyItsRecordsUnchecked(t *testing.T) {
	cl := redistest.NewCluster(t, redistest.ClusterConfig{Masters: 3, Config: []string{"cluster-require-full-coverage no"}})
	dead, _ := cl.MasterOf(0)
	ids := make([]int, 300)
	for i := range ids {
		ids[i] = i
	}
	// A collector for each policy, started while every master is up.
	sinkA, sinkB := new(consumertest.LogsSink), new(consumertest.LogsSink)
	a := newHarness(t, redisConfig(cl.Addrs(), ErrorPass), sinkA)
	b := newHarness(t, redisConfig(cl.Addrs(), ErrorPass), sinkB)
	cfgR := redisConfig(cl.Addrs(), ErrorRefuse)
	cfgR.Redis.Get().KeyPrefix = "refuse:"
	sinkR := new(consumertest.LogsSink)
	r := newHarness(t, cfgR, sinkR)
	dead.Kill()

	if err := a.consume(events(ids...)); err != nil {
		t.Fatal(err)
	}
	if err := b.consume(events(ids...)); err != nil {
		t.Fatal(err)
	}
	k := a.metric("otelcol_processor_dedup_redis_unchecked")
	if k == 0 || k >= int64(len(ids)) {
		t.Fatalf("unchecked = %d of %d: want the dead master's share only", k, len(ids))
	}
	if n := sinkA.LogRecordCount(); n != len(ids) {
		t.Fatalf("A delivered %d, want %d", n, len(ids))
	}
	if u, d, n := b.metric("otelcol_processor_dedup_redis_unchecked"), b.tier("redis"), int64(sinkB.LogRecordCount()); u != k || d != int64(len(ids))-k || n != k {
		t.Fatalf("B: unchecked %d, redis duplicates %d, delivered %d; want %d, %d, %d", u, d, n, k, int64(len(ids))-k, k)
	}
	t.Logf("%d of %d records on the dead master: unchecked", k, len(ids))

	if err := r.consume(events(ids...)); err == nil || sinkR.LogRecordCount() != 0 {
		t.Fatalf("refuse: consume returned %v and delivered %d; want a refusal, nothing delivered", err, sinkR.LogRecordCount())
	}
}
