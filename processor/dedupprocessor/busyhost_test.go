package dedupprocessor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/claim"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

// The busy host's load: requests of 5,000 records (an agent's batch
// processor sends up to 8,192), each sent to both collectors at once.
const (
	busyRequestSize = 5000
	busyRequests    = 12
	busyHogs        = 8 // busy processes beside the test, on the machine's 2 cores
	busyGiveUp      = 30 * time.Second
)

// TestBusyHostKeepsDeduplicating: two collectors with the default Redis
// settings (timeout 250ms, on_error: pass) share one redis-server and get
// copies of the same requests of 5,000 records at once, first on a quiet
// host, then with busy processes crowding the machine's cores. Redis is up
// throughout: a slow answer costs latency, not copies, so both runs
// deliver each record exactly once and nothing unchecked. The latency the
// busy host adds to a request is logged, not asserted.
func TestBusyHostKeepsDeduplicating(t *testing.T) {
	srv := redistest.Standalone(t)
	quiet := runBusyHost(t, srv, "quiet", 0, 0)
	busy := runBusyHost(t, srv, "busy", busyHogs, busyRequests*busyRequestSize)
	t.Logf("latency per request, quiet host: %s", quiet)
	t.Logf("latency per request, %d busy processes: %s", busyHogs, busy)
	t.Logf("added by the busy host: p50 %v, p90 %v, max %v",
		(busy.p(50) - quiet.p(50)).Round(time.Millisecond), (busy.p(90) - quiet.p(90)).Round(time.Millisecond), (busy.p(100) - quiet.p(100)).Round(time.Millisecond))
}

// busyLatencies are the times from a request's first try to its
// acknowledgement.
type busyLatencies []time.Duration

// p returns the q-th percentile.
func (l busyLatencies) p(q int) time.Duration {
	s := slices.Sorted(slices.Values(l))
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, len(s)*q/100)]
}

func (l busyLatencies) String() string {
	return fmt.Sprintf("%d requests, p50 %v, p90 %v, max %v", len(l), l.p(50).Round(time.Millisecond), l.p(90).Round(time.Millisecond), l.p(100).Round(time.Millisecond))
}

// runBusyHost sends busyRequests requests, records first+0 on, to both
// collectors at once, with hogs busy processes running, and checks each
// record was delivered once.
func runBusyHost(t *testing.T, srv *redistest.Server, name string, hogs, first int) busyLatencies {
	var lat busyLatencies
	t.Run(name, func(t *testing.T) {
		sink := &countingLogs{counts: map[int]int{}}
		var hs [2]*harness
		for i := range hs {
			cfg := defaultConfig()
			cfg.Logs.Key = []string{`attributes["event.id"]`}
			rc := cfg.Redis.GetOrInsertDefault() // timeout 250ms, on_error: pass
			rc.Endpoints, rc.KeyPrefix = []string{srv.Addr()}, "busyhost:"+name+":"
			hs[i] = newHarness(t, cfg, sink)
		}
		if hogs > 0 {
			testkit.Hogs(t, hogs)
		}
		var mu sync.Mutex
		refused := 0
		for r := range busyRequests {
			ids := make([]int, busyRequestSize)
			for i := range ids {
				ids[i] = first + r*busyRequestSize + i
			}
			var copies sync.WaitGroup
			for _, h := range hs {
				copies.Go(func() {
					start := time.Now()
					n, err := sendUntilAcknowledged(h, ids)
					mu.Lock()
					defer mu.Unlock()
					refused += n
					if err != nil {
						t.Errorf("request %d: %v", r, err)
						return
					}
					lat = append(lat, time.Since(start))
				})
			}
			copies.Wait()
		}
		want := busyRequests * busyRequestSize
		twice, missing := 0, 0
		for i := first; i < first+want; i++ {
			switch n := sink.count(i); {
			case n == 0:
				missing++
			case n > 1:
				twice += n - 1
			}
		}
		unchecked := hs[0].metric("otelcol_processor_dedup_redis_unchecked") + hs[1].metric("otelcol_processor_dedup_redis_unchecked")
		timeouts := hs[0].redisRequests("claim", "timeout") + hs[1].redisRequests("claim", "timeout")
		t.Logf("%s host: %d records sent to both collectors, %d tries refused and retried, %d claims timed out", name, want, refused, timeouts)
		if twice != 0 || missing != 0 || unchecked != 0 {
			t.Errorf("%s host, Redis up throughout: %d of %d copies delivered twice, %d records never delivered, %d records delivered unchecked; want 0, 0 and 0",
				name, twice, want, missing, unchecked)
		}
	})
	return lat
}

// sendUntilAcknowledged sends a request of ids to h as an exporter with
// retry does, and returns how many tries were refused.
func sendUntilAcknowledged(h *harness, ids []int) (int, error) {
	give := time.Now().Add(busyGiveUp)
	for refused := 0; ; refused++ {
		err := h.consume(events(ids...))
		if err == nil {
			return refused, nil
		}
		if !errors.Is(err, claim.ErrInFlight) || time.Now().After(give) {
			return refused, err
		}
		time.Sleep(50 * time.Millisecond) // the sender's retry backoff
	}
}

// countingLogs counts the deliveries of each event id, for any number of
// collectors at once.
type countingLogs struct {
	mu     sync.Mutex
	counts map[int]int
}

func (c *countingLogs) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }

func (c *countingLogs) ConsumeLogs(_ context.Context, ld plog.Logs) error {
	ids := eventIDs(ld)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		c.counts[id]++
	}
	return nil
}

func (c *countingLogs) count(id int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[id]
}
