package redistier

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

// The fleet ACL tests run every kind of call the tier sends under the ACL
// that deploy/redis/fleet.acl gives (docs/security.md): discovery, the
// start's access and durability checks, claims and rechecks, commits,
// releases, lease renewals, elections, and a Cluster's or Sentinel's
// failover. Then Redis's ACL LOG of every server holds exactly what the ACL
// refuses on purpose: CONFIG GET (it would show the server's passwords),
// once per master, from the durability check, which says what it could not
// check instead.

const fleetPassword = "fleet-s3cret"

// underFleetACL connects a tier as the fleet's user to opts.Endpoints and
// runs every kind of call once; then, if failover is set, runs it and claims
// until a claim lands.
func underFleetACL(t *testing.T, opts Options, failover func()) *Tier {
	t.Helper()
	ctx := context.Background()
	opts.Username, opts.Password, opts.KeyPrefix = redistest.FleetUser, fleetPassword, redistest.FleetKeyPrefix
	opts.Window = testWindow
	opts.Lease = 600 * time.Millisecond // renewed every 200 ms
	var renewed, failed atomic.Int64
	opts.Observe = func(op, result string, _ time.Duration) {
		switch {
		case op == OpRenew && result == ResultOK:
			renewed.Add(1)
		case result != ResultOK:
			failed.Add(1)
		}
	}
	tr := newTier(t, opts)
	if err := tr.Unknown(); err != nil {
		t.Fatalf("discovery: %v", err)
	}
	if err := tr.Access(ctx); err != nil {
		t.Fatalf("Access: %v", err)
	}
	if warnings, unchecked := tr.Durability(ctx); len(warnings) != 0 || unchecked == "" {
		t.Fatalf("Durability = %q, %q; want no warning and what could not be checked", warnings, unchecked)
	}

	ds := digests(t, "", 40)
	committed, released := testToken(), testToken()
	claimDownstream(t, tr, committed, ds[:20]...)
	claimDownstream(t, tr, released, ds[20:]...)
	testkit.WaitFor(t, "a renewal of the pending claims", 5*time.Second, func() bool { return renewed.Load() > 0 })
	if err := tr.settle(ctx, OpCommit, committed, ds[:20], false); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if err := tr.Release(ctx, released, ds[20:]); err != nil {
		t.Fatalf("Release: %v", err)
	}
	answers := make([]Answer, len(ds))
	if _, err := tr.Claim(ctx, testToken(), ds, answers, true); err != nil {
		t.Fatalf("recheck: %v", err)
	}

	elect := Election{Key: ds[0], Replica: ds[1]}
	token := testToken()
	a, err := tr.Elect(ctx, token, time.Minute, elect)
	if err != nil || a.State != ElectionTaken {
		t.Fatalf("Elect: %+v, %v", a, err)
	}
	if err := tr.CommitElected(ctx, token, time.Minute, []Election{elect}, []ElectionAnswer{a}); err != nil {
		t.Fatalf("CommitElected: %v", err)
	}
	other := Election{Key: ds[2], Replica: ds[3]}
	token = testToken()
	if a, err := tr.Elect(ctx, token, time.Minute, other); err != nil || a.State != ElectionTaken {
		t.Fatalf("Elect: %+v, %v", a, err)
	}
	if err := tr.ReleaseElections(ctx, token, time.Minute, []Election{other}); err != nil {
		t.Fatalf("ReleaseElections: %v", err)
	}

	if n := failed.Load(); n != 0 {
		t.Fatalf("%d calls failed", n)
	}
	if failover != nil {
		failover()
		more := digests(t, "after the failover", 40)
		testkit.WaitFor(t, "a claim through the new master", 30*time.Second, func() bool {
			err := tr.claimBools(ctx, testToken(), more, make([]bool, len(more)))
			return err == nil
		})
	}
	return tr
}

// wantOnlyConfigGetRefused fails unless the ACL LOG of each server holds
// exactly the refusals of CONFIG GET by the fleet's user, configGets[i] for
// servers[i], and nothing else (no refused login, command, key).
func wantOnlyConfigGetRefused(t *testing.T, servers []*redistest.Server, configGets []int) {
	t.Helper()
	for i, s := range servers {
		entries, err := s.Client().Do(context.Background(), "acl", "log").Slice()
		if err != nil {
			t.Fatalf("%s: ACL LOG: %v", s.Addr(), err)
		}
		n := 0
		for _, e := range entries {
			m, _ := e.(map[any]any)
			if m == nil || m["username"] != redistest.FleetUser || m["reason"] != "command" || m["object"] != "config|get" {
				t.Errorf("%s: ACL LOG: %v", s.Addr(), e)
				continue
			}
			count, _ := m["count"].(int64)
			n += int(count)
		}
		if n != configGets[i] {
			t.Errorf("%s: %d CONFIG GET refused, want %d", s.Addr(), n, configGets[i])
		}
	}
}

func TestFleetACLStandalone(t *testing.T) {
	srv := redistest.Standalone(t, redistest.WithConfig(redistest.FleetACL(t, fleetPassword)))
	underFleetACL(t, Options{Endpoints: []string{srv.Addr()}}, nil)
	wantOnlyConfigGetRefused(t, []*redistest.Server{srv}, []int{1})
}

// TestFleetACLCluster: the ACL on every node of a Cluster with replicas, a
// replica promoted by a failover included (Redis does not replicate ACL
// users).
func TestFleetACLCluster(t *testing.T) {
	cl := redistest.NewCluster(t, redistest.ClusterConfig{Masters: 3, Replicas: 1, Config: []string{redistest.FleetACL(t, fleetPassword)}})
	_, replica := cl.MasterOf(0)
	underFleetACL(t, Options{Endpoints: cl.Addrs()}, func() { cl.Failover(replica) })
	// One CONFIG GET per master, of the three the Cluster had at start.
	want := make([]int, len(cl.Nodes))
	for i := range 3 {
		want[i] = 1
	}
	wantOnlyConfigGetRefused(t, cl.Nodes, want)
}

// TestFleetACLSentinel: the ACL on the master and its replica, none on the
// Sentinel (the tier reaches Sentinels without credentials), through a
// failover that promotes the replica.
func TestFleetACLSentinel(t *testing.T) {
	sen := redistest.Sentinel(t, redistest.WithConfig(redistest.FleetACL(t, fleetPassword)))
	failover := func() {
		ctx := context.Background()
		if err := sen.Sentinel.Client().Do(ctx, "sentinel", "failover", sen.MasterName).Err(); err != nil {
			t.Fatal(err)
		}
		want := []string{"127.0.0.1", strconv.Itoa(sen.Replica.Port())}
		testkit.WaitFor(t, "the Sentinel naming the replica master", 30*time.Second, func() bool {
			addr, err := sen.Sentinel.Client().Do(ctx, "sentinel", "get-master-addr-by-name", sen.MasterName).StringSlice()
			role, _ := sen.Replica.Client().Do(ctx, "role").Slice()
			return err == nil && fmt.Sprint(addr) == fmt.Sprint(want) && len(role) > 0 && role[0] == "master"
		})
	}
	underFleetACL(t, Options{Endpoints: []string{sen.SentinelAddr()}, MasterName: sen.MasterName}, failover)
	wantOnlyConfigGetRefused(t, []*redistest.Server{sen.Master, sen.Replica, sen.Sentinel}, []int{1, 0, 0})
}
