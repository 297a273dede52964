package dedupprocessor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/claim"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

// TestRollingChangeForgetsNothing: two collectors share one explicit key
// prefix on one Redis (standalone, and a Cluster), and every request goes to
// both at once, so each record races its copy. One collector at a time is
// restarted with new settings while the load goes on: a longer window, then
// a shorter one with another cluster_slots. No record is delivered twice or
// lost, no request is refused, a collector whose cluster_slots differs from
// the layout in Redis says so once and uses the layout's, and a replay of
// every record (all committed within the shortest window) is dropped whole.
func TestRollingChangeForgetsNothing(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		rollingChange(t, []string{redistest.Standalone(t).Addr()}, false)
	})
	t.Run("cluster", func(t *testing.T) {
		rollingChange(t, redistest.Cluster(t, 3).Addrs()[:1], true)
	})
}

// rollingFleet is two collectors that a test restarts one at a time, each
// delivering to a sink that outlives its restarts.
type rollingFleet struct {
	t         *testing.T
	endpoints []string
	logger    *zap.Logger
	mu        [2]sync.RWMutex // held for writing while collector i restarts
	hs        [2]*harness
	sinks     [2]*consumertest.LogsSink

	next     atomic.Int64 // the next event id
	refused  atomic.Int64
	mistakes sync.Map // error text: errors no sender retries
	wg       sync.WaitGroup
}

// config is a collector's: the fleet's prefix, under refuse, so that a copy
// can only get through if the layout forgets or misplaces a record.
func (f *rollingFleet) config(window time.Duration, slots int) *Config {
	cfg := redisConfig(f.endpoints, ErrorRefuse)
	cfg.Window = window
	cfg.PendingWait = 2 * time.Second
	r := cfg.Redis.Get()
	r.KeyPrefix = "rolling:"
	r.Timeout = time.Second
	r.Lease = 3 * time.Second
	r.ClusterSlots = slots
	return cfg
}

// restart replaces collector i by one with cfg, once its requests in flight
// are answered; requests for it wait meanwhile.
func (f *rollingFleet) restart(i int, cfg *Config) {
	f.mu[i].Lock()
	defer f.mu[i].Unlock()
	if old := f.hs[i]; old != nil {
		if err := old.proc.Shutdown(context.Background()); err != nil {
			f.t.Errorf("collector %d: shutdown: %v", i, err)
		}
	}
	f.hs[i] = buildHarness(f.t, nil, cfg, f.sinks[i], nil, f.logger)
}

// send sends ids to collector i, and counts a refusal.
func (f *rollingFleet) send(i int, ids []int) {
	f.mu[i].RLock()
	defer f.mu[i].RUnlock()
	err := f.hs[i].consume(events(ids...))
	switch {
	case err == nil:
	case errors.Is(err, claim.ErrSharedTier) || errors.Is(err, claim.ErrInFlight):
		f.refused.Add(1)
	default:
		f.mistakes.Store(err.Error(), true)
	}
}

// request sends new events to both collectors at once.
func (f *rollingFleet) request(size int) {
	first := int(f.next.Add(int64(size))) - size
	ids := make([]int, size)
	for i := range ids {
		ids[i] = first + i
	}
	for i := range f.hs {
		f.wg.Go(func() { f.send(i, ids) })
	}
}

func rollingChange(t *testing.T, endpoints []string, cluster bool) {
	const (
		pace  = 40 * time.Millisecond
		size  = 20
		phase = time.Second // of load between two restarts
	)
	core, logs := observer.New(zap.WarnLevel)
	f := &rollingFleet{t: t, endpoints: endpoints, logger: zap.New(core)}
	for i := range f.hs {
		f.sinks[i] = new(consumertest.LogsSink)
		f.restart(i, f.config(20*time.Second, 12))
	}
	t.Cleanup(func() {
		for _, h := range f.hs {
			if err := h.proc.Shutdown(context.Background()); err != nil {
				t.Error(err)
			}
		}
	})

	stop := make(chan struct{})
	var load sync.WaitGroup
	load.Go(func() {
		tick := time.NewTicker(pace)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				f.request(size)
			}
		}
	})
	// The changes, one collector at a time, a phase of load apart. The
	// whole run lasts well within the shortest window.
	time.Sleep(phase) // load before the first change
	for _, change := range []struct {
		window time.Duration
		slots  int
	}{
		{40 * time.Second, 12}, // longer
		{10 * time.Second, 6},  // shorter, with another tag count
	} {
		for i := range f.hs {
			f.restart(i, f.config(change.window, change.slots))
			time.Sleep(phase) // load between two restarts
		}
	}
	close(stop)
	load.Wait()
	f.wg.Wait()

	total := int(f.next.Load())
	delivered := func() map[string]int {
		n := map[string]int{}
		for _, s := range f.sinks {
			for _, b := range bodies(s) {
				n[b]++
			}
		}
		return n
	}
	check := func(when string) {
		t.Helper()
		got := delivered()
		missing, twice := 0, 0
		for id := range total {
			switch n := got[fmt.Sprintf("secret body %d", id)]; {
			case n == 0:
				missing++
			case n > 1:
				twice += n - 1
			}
		}
		if missing != 0 || twice != 0 || len(got) != total {
			t.Errorf("%s: of %d events, %d never delivered, %d copies delivered twice, %d bodies delivered", when, total, missing, twice, len(got))
		}
	}
	check("under load")
	if n := f.refused.Load(); n != 0 {
		t.Errorf("%d requests refused, want none", n)
	}
	f.mistakes.Range(func(k, _ any) bool {
		t.Errorf("a request failed with an error no sender retries: %v", k)
		return true
	})

	// A replay of everything, to both: every record was committed less than
	// the shortest window ago, so every copy is a duplicate.
	ids := make([]int, total)
	for i := range ids {
		ids[i] = i
	}
	for from := 0; from < total; from += 500 {
		part := ids[from:min(from+500, total)]
		for i := range f.hs {
			f.send(i, part)
		}
	}
	check("after a replay of every record")
	if n := f.refused.Load(); n != 0 {
		t.Errorf("%d replayed requests refused, want none", n)
	}

	// Each collector restarted with another cluster_slots said once that it
	// uses the layout's tags; outside a Cluster there are none.
	said := 0
	for _, e := range logs.All() {
		if strings.Contains(e.Message, "another number of hash tags than redis.cluster_slots") {
			said++
			if tags, slots := e.ContextMap()["layout_tags"], e.ContextMap()["cluster_slots"]; tags != int64(12) || slots != int64(6) {
				t.Errorf("the adoption says layout_tags %v, cluster_slots %v; want 12 and 6", tags, slots)
			}
		}
	}
	if want := map[bool]int{true: 2, false: 0}[cluster]; said != want {
		t.Errorf("the layout's tags were reported %d times, want %d (once per collector started with another cluster_slots)", said, want)
	}
	t.Logf("rolling change: %d events, each raced by its copy, delivered once", total)
}
