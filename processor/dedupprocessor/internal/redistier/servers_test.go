package redistier

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

// reports records OnNewServer's calls.
type reports struct {
	mu  sync.Mutex
	ids []string
}

func (r *reports) add(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = append(r.ids, id)
}

func (r *reports) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ids)
}

// runIDOf is the run_id a server gives in INFO server.
func runIDOf(t *testing.T, s *redistest.Server) string {
	t.Helper()
	info, err := s.Client().Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	return runID(info)
}

// TestOnlyANewMasterIsReported: the tier reports a server not seen before
// only when it answers as a master (restarted, or promoted): connections to
// a Cluster's replicas, through which the slot map is loaded, and to
// Sentinels are never reported.
func TestOnlyANewMasterIsReported(t *testing.T) {
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.NewCluster(t, redistest.ClusterConfig{Masters: 3, Replicas: 1, NodeTimeout: time.Second})
		var r reports
		tr := newTier(t, Options{Endpoints: cl.Addrs()[:1], KeyPrefix: "servers:", Window: testWindow, OnNewServer: r.add})
		x := tr.conn.Load().exec.(*clusterExec)
		// The slot map loaded again and again, and a connection to every
		// replica, as reloads through replicas make them.
		for range 5 {
			x.refresh()
		}
		if err := x.cc.ForEachSlave(context.Background(), func(ctx context.Context, c *redis.Client) error {
			return c.Ping(ctx).Err()
		}); err != nil {
			t.Fatal(err)
		}
		claimAll(t, tr, digests(t, "", 100))
		if got := r.got(); len(got) != 0 {
			t.Fatalf("reported %q with no master restarted or promoted", got)
		}

		_, replica := cl.MasterOf(0)
		cl.Failover(replica)
		claimAll(t, tr, digests(t, "after", 100))
		want := runIDOf(t, replica)
		testkit.WaitFor(t, "the promoted replica reported", 10*time.Second, func() bool { return len(r.got()) > 0 })
		time.Sleep(time.Second) // a second more of refreshes: nothing else is reported
		if got := r.got(); len(got) != 1 || got[0] != want {
			t.Fatalf("reported %q, want the promoted replica %q alone", got, want)
		}
	})

	t.Run("sentinel", func(t *testing.T) {
		s := redistest.Sentinel(t)
		var r reports
		tr := newTier(t, Options{Endpoints: []string{s.SentinelAddr()}, MasterName: s.MasterName, KeyPrefix: "servers:", Window: testWindow, OnNewServer: r.add})
		claimAll(t, tr, digests(t, "", 100))
		if got := r.got(); len(got) != 0 {
			t.Fatalf("reported %q with no master restarted", got)
		}
		s.Master.Restart()
		testkit.WaitFor(t, "the tier claims again after the master's restart", 10*time.Second, func() bool {
			answers := make([]Answer, 1)
			_, err := tr.Claim(context.Background(), testToken(), digests(t, time.Now().String(), 1), answers, false)
			return err == nil
		})
		want := runIDOf(t, s.Master)
		if got := r.got(); len(got) != 1 || got[0] != want || strings.TrimSpace(want) == "" {
			t.Fatalf("reported %q, want the restarted master %q alone", got, want)
		}
	})
}
