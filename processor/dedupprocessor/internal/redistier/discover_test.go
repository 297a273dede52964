package redistier

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

// startErr starts a tier with opts (test defaults for zero fields) and
// returns Start's error; a tier that started is closed at the end of the
// test and its mode returned.
func startErr(t *testing.T, opts Options) (Mode, error) {
	t.Helper()
	if opts.Timeout == 0 {
		opts.Timeout = testTimeout
	}
	if opts.Lease == 0 {
		opts.Lease = testTierLease
	}
	if opts.Window == 0 {
		opts.Window = testWindow
	}
	tr := New(opts)
	t.Cleanup(func() { _ = tr.Close() })
	if err := tr.Start(context.Background()); err != nil {
		return "", err
	}
	return tr.Mode(), nil
}

// TestDiscover: the topology comes from what the servers say, whatever the
// number of endpoints, and a configuration that cannot work fails Start with
// one line naming the setting to change.
func TestDiscover(t *testing.T) {
	sen := redistest.Sentinel(t) // a master, its replica, a Sentinel
	cl := redistest.NewCluster(t, redistest.ClusterConfig{Masters: 3, Replicas: 1})
	clusterMaster, clusterReplica := cl.MasterOf(0)
	master, replica, sentinel := sen.Master.Addr(), sen.Replica.Addr(), sen.SentinelAddr()
	dead := deadAddr(t)

	for _, tc := range []struct {
		name string
		opts Options
		want Mode
		err  string
	}{
		{name: "standalone master", opts: Options{Endpoints: []string{master}}, want: ModeStandalone},
		{name: "one Cluster master (a configuration endpoint)", opts: Options{Endpoints: []string{clusterMaster.Addr()}}, want: ModeCluster},
		{name: "one Cluster replica", opts: Options{Endpoints: []string{clusterReplica.Addr()}}, want: ModeCluster},
		{name: "every Cluster node", opts: Options{Endpoints: cl.Addrs()}, want: ModeCluster},
		{name: "a Cluster node and a dead one", opts: Options{Endpoints: []string{dead, clusterMaster.Addr()}}, want: ModeCluster},
		{name: "Sentinel with master_name", opts: Options{Endpoints: []string{sentinel}, MasterName: sen.MasterName}, want: ModeSentinel},
		{name: "explicit mode that the server confirms", opts: Options{Endpoints: []string{clusterMaster.Addr()}, Mode: ModeCluster}, want: ModeCluster},
		// The layout's shape is read from Redis before the first claim,
		// so a set mode waits for an answer too.
		{name: "explicit mode, nothing answers", opts: Options{Endpoints: []string{dead}, Mode: ModeStandalone}, want: ""},
		{name: "nothing answers", opts: Options{Endpoints: []string{dead}}, want: ""},

		{name: "standalone replica", opts: Options{Endpoints: []string{replica}},
			err: "redis.endpoints: " + replica + " is a read-only replica of " + master + "; list the master " + master + " instead (or its Sentinels, with redis.master_name)"},
		{name: "replica with explicit standalone mode", opts: Options{Endpoints: []string{replica}, Mode: ModeStandalone},
			err: "redis.endpoints: " + replica + " is a read-only replica of " + master + "; list the master " + master + " instead (or its Sentinels, with redis.master_name)"},
		{name: "Sentinel without master_name", opts: Options{Endpoints: []string{sentinel}},
			err: "redis.endpoints are Sentinels (" + sentinel + ") but redis.master_name is empty; set it to the master they monitor (mymaster)"},
		{name: "Sentinel, unknown master_name", opts: Options{Endpoints: []string{sentinel}, MasterName: "other"},
			err: `redis.master_name "other" is not monitored by the Sentinels (` + sentinel + "); they monitor mymaster"},
		{name: "cluster mode, standalone server", opts: Options{Endpoints: []string{master}, Mode: ModeCluster},
			err: `redis.mode is "cluster" but ` + master + ` is a standalone server; set redis.mode to "standalone" (or "auto")`},
		{name: "standalone mode, Cluster node", opts: Options{Endpoints: []string{clusterMaster.Addr()}, Mode: ModeStandalone},
			err: `redis.mode is "standalone" but ` + clusterMaster.Addr() + ` is a Redis Cluster node; set redis.mode to "cluster" (or "auto")`},
		{name: "sentinel mode, Cluster node", opts: Options{Endpoints: []string{clusterMaster.Addr()}, Mode: ModeSentinel, MasterName: "m"},
			err: `redis.mode is "sentinel" but ` + clusterMaster.Addr() + ` is a Redis Cluster node; set redis.mode to "cluster" (or "auto")`},
		{name: "master_name with a Cluster node", opts: Options{Endpoints: []string{clusterMaster.Addr()}, MasterName: "m"},
			err: "redis.master_name is set but " + clusterMaster.Addr() + " is a Redis Cluster node, not a Sentinel; remove redis.master_name"},
		{name: "master_name with a standalone server", opts: Options{Endpoints: []string{master}, MasterName: "m"},
			err: "redis.master_name is set but " + master + " is a standalone server, not a Sentinel; remove redis.master_name, or list the Sentinels in redis.endpoints"},
		{name: "Cluster with db 1", opts: Options{Endpoints: []string{clusterMaster.Addr()}, DB: 1},
			err: "redis.db must be 0 with a Redis Cluster (" + clusterMaster.Addr() + " is a Cluster node), got 1"},
		{name: "two standalone servers", opts: Options{Endpoints: []string{master, dead, master}},
			err: "redis.endpoints lists 3 endpoints but " + master + " is a standalone server; list one standalone server, the nodes of one Redis Cluster, or Sentinels with redis.master_name"},
		{name: "a standalone server and a Sentinel", opts: Options{Endpoints: []string{master, sentinel}},
			err: "redis.endpoints mix a standalone server (" + master + ") and a Sentinel (" + sentinel + "); list endpoints of one kind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mode, err := startErr(t, tc.opts)
			switch {
			case tc.err != "" && (err == nil || err.Error() != tc.err):
				t.Fatalf("Start: %v\nwant %s", err, tc.err)
			case tc.err == "" && err != nil:
				t.Fatalf("Start: %v", err)
			case mode != tc.want:
				t.Fatalf("mode %q, want %q", mode, tc.want)
			}
		})
	}
}

// TestDiscoverWithoutHello: a server that refuses HELLO (Redis before 6,
// or the command renamed) tells its mode in INFO.
func TestDiscoverWithoutHello(t *testing.T) {
	srv := redistest.Standalone(t, redistest.WithConfig(`rename-command HELLO ""`))
	if err := srv.Client().Do(context.Background(), "hello").Err(); err == nil {
		t.Fatal("HELLO answered; the test needs a server that refuses it")
	}
	mode, err := startErr(t, Options{Endpoints: []string{srv.Addr()}})
	if err != nil || mode != ModeStandalone {
		t.Fatalf("Start: mode %q, %v; want standalone", mode, err)
	}
}

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	srv := redistest.Standalone(t)
	addr := srv.Addr()
	srv.Kill()
	return addr
}

// TestDiscoverLater: Redis is down when the tier starts, or is a Cluster
// that cannot serve yet. Start does not fail; calls fail (counted as errors,
// no round trip) until the tier, asking in the background, finds the server;
// then they work. A server found later that cannot work is reported, and
// calls keep failing.
func TestDiscoverLater(t *testing.T) {
	t.Run("comes up", func(t *testing.T) {
		srv := redistest.Standalone(t)
		srv.Kill()
		var obs observations
		found := make(chan error, 4)
		tr := newTier(t, Options{Endpoints: []string{srv.Addr()}, Window: testWindow, Observe: obs.observe,
			OnTopology: modeFound(ModeStandalone, found)})
		if m := tr.Mode(); m != "" {
			t.Fatalf("mode %q with the server down", m)
		}
		ds := digests(t, "", 3)
		answers := []Answer{Claimed, Claimed, Claimed}
		_, err := tr.Claim(context.Background(), testToken(), ds, answers, false)
		if err == nil || !strings.HasPrefix(err.Error(), "dedup: redis claim: topology not known: no endpoint told what it is: "+srv.Addr()+": ") {
			t.Fatalf("claim with the topology unknown: %v", err)
		}
		if answers[0] != Unavailable || answers[2] != Unavailable {
			t.Fatalf("answers %v, want Unavailable", answers)
		}
		wantObserved(t, &obs, "claim/error")

		srv.Restart()
		waitFound(t, found)
		claimAll(t, tr, ds)
		wantObserved(t, &obs, "claim/ok")
	})

	t.Run("a Cluster that is down", func(t *testing.T) {
		cl := redistest.Cluster(t, 3)
		ctx := context.Background()
		// The master of the shape's slot answers CLUSTERDOWN while another
		// is hung past the node timeout.
		owner, _ := cl.MasterOf(int(cl.Client().ClusterKeySlot(ctx, shapeKey("")).Val()))
		hung := cl.Nodes[0]
		if hung == owner {
			hung = cl.Nodes[1]
		}
		hung.Pause()
		defer hung.Resume()
		testkit.WaitFor(t, "CLUSTERDOWN from "+owner.Addr(), 20*time.Second, func() bool {
			err := owner.Client().Set(ctx, shapeKey(""), "x", time.Second).Err()
			return err != nil && strings.HasPrefix(err.Error(), "CLUSTERDOWN")
		})
		found := make(chan error, 4)
		tr := newTier(t, Options{Endpoints: []string{owner.Addr()}, Window: testWindow, OnTopology: modeFound(ModeCluster, found)})
		if m := tr.Mode(); m != "" {
			t.Fatalf("mode %q with the Cluster down", m)
		}
		hung.Resume()
		cl.WaitHealthy()
		waitFound(t, found)
		claimAll(t, tr, digests(t, "", 3))
	})

	t.Run("comes up as a replica", func(t *testing.T) {
		master := redistest.Standalone(t, redistest.WithConfig("repl-diskless-sync-delay 0"))
		replica := redistest.Replica(t, master)
		replica.Kill()
		var mu sync.Mutex
		var reported []string
		tr := newTier(t, Options{Endpoints: []string{replica.Addr()}, Window: testWindow,
			OnTopology: func(m Mode, err error) {
				mu.Lock()
				defer mu.Unlock()
				reported = append(reported, string(m)+"/"+errString(err))
			}})
		replica.Restart()
		want := "/redis.endpoints: " + replica.Addr() + " is a read-only replica of " + master.Addr() + "; list the master " + master.Addr() + " instead (or its Sentinels, with redis.master_name)"
		var got []string
		testkit.WaitFor(t, "a report after the replica's start", 10*time.Second, func() bool {
			mu.Lock()
			defer mu.Unlock()
			got = append([]string(nil), reported...)
			return len(got) > 0
		})
		if len(got) != 1 || got[0] != want {
			t.Fatalf("reported %q, want [%q]", got, want)
		}
		_, err := tr.Claim(context.Background(), testToken(), digests(t, "", 1), make([]Answer, 1), false)
		if err == nil || err.Error() != "dedup: redis claim: topology not known: "+want[1:] {
			t.Fatalf("claim: %v", err)
		}
	})
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// modeFound is an OnTopology that sends on found what the tier found: nil
// once it connects as want, else an error.
func modeFound(want Mode, found chan<- error) func(Mode, error) {
	return func(m Mode, err error) {
		if err == nil && m != want {
			err = errors.New("found mode " + string(m))
		}
		found <- err
	}
}

// waitFound waits, at most 10 s, for what modeFound sends.
func waitFound(t *testing.T, found <-chan error) {
	t.Helper()
	select {
	case err := <-found:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the tier did not connect within 10s")
	}
}
