package election

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	update   = 15 * time.Second
	failover = 30 * time.Second
	t0       = int64(1_000_000_000_000)
)

func at(d time.Duration) int64 { return t0 + int64(d) }

func newTable(maxClusters int, jitter time.Duration) *Table {
	return New(Config{
		UpdateInterval:  update,
		UpdateJitter:    jitter,
		FailoverTimeout: failover,
		MaxClusters:     maxClusters,
		Jitter:          func() time.Duration { return jitter },
	})
}

// entries is the number of entries tb holds, expired ones kept included.
func entries(tb *Table) int {
	n := 0
	for _, clusters := range tb.tenants {
		n += len(clusters)
	}
	return n
}

func ref(tenant byte, cluster string) Ref {
	t := Tenant{tenant}
	return Ref{Tenant: t, Key: digest.Of(append(t[:], cluster...)), Cluster: cluster}
}

func rep(name string) Replica { return Replica{Digest: digest.Of([]byte(name)), Name: name} }

var a, b, c = rep("a"), rep("b"), rep("c")

func want(t *testing.T, got Decision, state State, replica Replica) {
	t.Helper()
	if got.State != state || (state != OverLimit && state != Unknown && got.Replica != replica.Digest) {
		t.Fatalf("decision = %+v, want state %d replica %s", got, state, replica.Name)
	}
}

// elect takes and commits r's election of rf at now under token.
func elect(t *testing.T, tb *Table, rf Ref, r Replica, token uint64, now int64) {
	t.Helper()
	want(t, tb.Decide(rf, r, token, now, true), Taken, r)
	if ok, _, _ := tb.Commit(rf, r, token, failover, now); !ok {
		t.Fatal("commit failed")
	}
}

func TestFirstReplicaElectedOnceDelivered(t *testing.T) {
	tb := newTable(10, 0)
	x := ref(0, "x")
	// Batch 1 (replica a) takes the election: pending.
	want(t, tb.Decide(x, a, 1, t0, true), Taken, a)
	// Its own second look still finds it its own.
	want(t, tb.Decide(x, a, 1, t0, true), Taken, a)
	// Another batch waits for it, whatever its age.
	want(t, tb.Decide(x, b, 2, t0, true), Pending, a)
	want(t, tb.Decide(x, b, 0, t0, true), Pending, a)
	if ok, _, hasPrev := tb.Commit(x, a, 1, failover, t0); !ok || hasPrev {
		t.Fatalf("commit = %v, hasPrev %v", ok, hasPrev)
	}
	want(t, tb.Decide(x, b, 2, at(time.Second), true), Elected, a)
	// A token that did not take it cannot commit or release it.
	if ok, _, _ := tb.Commit(x, b, 2, failover, t0); ok {
		t.Fatal("token 2 committed an election it did not hold")
	}
	tb.Release(x, 2)
	want(t, tb.Decide(x, b, 3, at(time.Second), true), Elected, a)
}

func TestReleasedElectionIsNotHeld(t *testing.T) {
	tb := newTable(10, 0)
	x := ref(0, "x")
	want(t, tb.Decide(x, a, 1, t0, true), Taken, a)
	tb.Release(x, 1) // a's batch was refused downstream
	if n := entries(tb); n != 0 {
		t.Fatalf("%d entries after the only election was released", n)
	}
	// b's batch is the next to send: b is elected, not a.
	want(t, tb.Decide(x, b, 2, t0, true), Taken, b)
	tb.Commit(x, b, 2, failover, t0)
	want(t, tb.Decide(x, a, 3, t0, true), Elected, b)
}

func TestFailoverAfterTimeout(t *testing.T) {
	tb := newTable(10, 0)
	x := ref(0, "x")
	elect(t, tb, x, a, 1, t0)
	// Up to the failover timeout, b is not elected.
	want(t, tb.Decide(x, b, 2, at(failover-time.Nanosecond), true), Elected, a)
	// Then the next replica to send takes over; committing it is a
	// failover from a.
	want(t, tb.Decide(x, b, 3, at(failover), true), Taken, b)
	ok, prev, hasPrev := tb.Commit(x, b, 3, failover, at(failover))
	if !ok || !hasPrev || prev != a.Digest {
		t.Fatalf("commit = %v prev %v %v", ok, prev, hasPrev)
	}
	want(t, tb.Decide(x, a, 4, at(failover+time.Second), true), Elected, b)
}

func TestReleasedTakeoverRestoresTheExpiredElection(t *testing.T) {
	tb := newTable(10, 0)
	x := ref(0, "x")
	elect(t, tb, x, a, 1, t0)
	want(t, tb.Decide(x, b, 2, at(failover), true), Taken, b)
	tb.Release(x, 2)
	// a's expired election is back, so c's takeover is still a failover
	// from a; b was never elected.
	want(t, tb.Decide(x, c, 3, at(failover+time.Second), true), Taken, c)
	if ok, prev, hasPrev := tb.Commit(x, c, 3, failover, at(failover+time.Second)); !ok || !hasPrev || prev != a.Digest {
		t.Fatalf("commit = %v prev %v %v, want a", ok, prev, hasPrev)
	}
}

func TestRefreshKeepsTheElectionAlive(t *testing.T) {
	tb := newTable(10, 0)
	x := ref(0, "x")
	elect(t, tb, x, a, 1, t0)
	if tb.TakeRefresh(x, a, 2, at(update-time.Nanosecond)) {
		t.Fatal("refresh taken before update_interval")
	}
	if tb.TakeRefresh(x, b, 2, at(update)) {
		t.Fatal("a replica that is not elected took the refresh")
	}
	if !tb.TakeRefresh(x, a, 2, at(update)) {
		t.Fatal("refresh not taken when due")
	}
	// One batch carries it at a time; a failed one hands it on.
	if tb.TakeRefresh(x, a, 3, at(update)) {
		t.Fatal("a second batch took the refresh")
	}
	tb.Release(x, 2)
	if !tb.TakeRefresh(x, a, 3, at(update)) {
		t.Fatal("refresh not taken after the first carrier failed")
	}
	tb.Commit(x, a, 3, failover, at(update))
	// Alive until update+failover now, not failover.
	want(t, tb.Decide(x, b, 4, at(update+failover-time.Nanosecond), true), Elected, a)
	want(t, tb.Decide(x, b, 5, at(update+failover), true), Taken, b)
}

func TestRefreshJitter(t *testing.T) {
	tb := newTable(10, 4*time.Second)
	x := ref(0, "x")
	elect(t, tb, x, a, 1, t0)
	if tb.TakeRefresh(x, a, 2, at(update+4*time.Second-time.Nanosecond)) {
		t.Fatal("refresh taken before update_interval + jitter")
	}
	if !tb.TakeRefresh(x, a, 2, at(update+4*time.Second)) {
		t.Fatal("refresh not taken at update_interval + jitter")
	}
}

func TestDefaultJitterIsBounded(t *testing.T) {
	tb := New(Config{UpdateInterval: update, UpdateJitter: 3 * time.Second, FailoverTimeout: failover, MaxClusters: 10})
	seen := map[bool]bool{}
	for range 200 {
		j := tb.cfg.Jitter()
		if j < 0 || j > 3*time.Second {
			t.Fatalf("jitter %s out of [0, 3s]", j)
		}
		seen[j > 1500*time.Millisecond] = true
	}
	if !seen[true] || !seen[false] {
		t.Fatal("200 jitters all in one half of the range")
	}
}

func TestRefreshOfAnElectionTakenOverIsDropped(t *testing.T) {
	tb := newTable(10, 0)
	x := ref(0, "x")
	elect(t, tb, x, a, 1, t0)
	if !tb.TakeRefresh(x, a, 2, at(update)) {
		t.Fatal("refresh not taken")
	}
	// a's refreshing batch is slow; a's election expires and b takes it.
	elect(t, tb, x, b, 3, at(failover))
	tb.Commit(x, a, 2, failover, at(failover+time.Second))
	want(t, tb.Decide(x, a, 4, at(failover+time.Second), true), Elected, b)
}

func TestSharedTableAsksAndLearns(t *testing.T) {
	tb := newTable(10, 0)
	x := ref(0, "x")
	want(t, tb.Decide(x, a, 1, t0, false), Unknown, a)
	// Redis says b is elected for 10 more seconds.
	tb.Learn(x, Replica{Digest: b.Digest}, 10*time.Second, t0)
	want(t, tb.Decide(x, a, 2, at(10*time.Second-time.Nanosecond), false), Elected, b)
	want(t, tb.Decide(x, a, 3, at(10*time.Second), false), Unknown, a)
	// Its refresh is due update_interval after its last refresh in Redis
	// (failover-10s ago).
	if tb.TakeRefresh(x, b, 4, at(update-(failover-10*time.Second)-time.Nanosecond)) {
		t.Fatal("refresh taken early")
	}
	if !tb.TakeRefresh(x, b, 4, at(update-(failover-10*time.Second))) {
		t.Fatal("refresh not taken when due")
	}
	// Redis gave the election to batch 5 (replica a), pending.
	tb.Hold(x, a, 5)
	want(t, tb.Decide(x, a, 5, at(11*time.Second), false), Taken, a)
	want(t, tb.Decide(x, b, 6, at(11*time.Second), false), Pending, a)
	// A Learn while a batch of this process holds it changes nothing.
	tb.Learn(x, c, time.Minute, at(11*time.Second))
	want(t, tb.Decide(x, b, 6, at(11*time.Second), false), Pending, a)
	tb.Commit(x, a, 5, failover, at(12*time.Second))
	want(t, tb.Decide(x, b, 6, at(12*time.Second), false), Elected, a)
	tb.Forget(x)
	want(t, tb.Decide(x, b, 7, at(12*time.Second), false), Unknown, a)
}

func TestClusterLimitPerTenant(t *testing.T) {
	tb := newTable(2, 0)
	elect(t, tb, ref(0, "x"), a, 1, t0)
	want(t, tb.Decide(ref(0, "y"), a, 2, t0, true), Taken, a) // pending counts too
	want(t, tb.Decide(ref(0, "z"), a, 3, t0, true), OverLimit, a)
	want(t, tb.Decide(ref(0, "z"), a, 3, t0, false), OverLimit, a)
	// Another tenant has its own limit.
	want(t, tb.Decide(ref(1, "z"), a, 4, t0, true), Taken, a)
	// y's batch fails: its slot is free again.
	tb.Release(ref(0, "y"), 2)
	want(t, tb.Decide(ref(0, "z"), a, 5, t0, true), Taken, a)
	tb.Commit(ref(0, "z"), a, 5, failover, t0)
	want(t, tb.Decide(ref(0, "y"), a, 6, t0, true), OverLimit, a)
	// x and z expire: y fits, and x, expired, can be taken back only
	// while the tenant has room.
	want(t, tb.Decide(ref(0, "y"), a, 7, at(failover), true), Taken, a)
	want(t, tb.Decide(ref(0, "x"), b, 8, at(failover), true), Taken, b)
	want(t, tb.Decide(ref(0, "z"), b, 9, at(failover), true), OverLimit, a)
}

func TestTableStaysBounded(t *testing.T) {
	tb := newTable(3, 0)
	// Clusters come and go: a new one every failover timeout.
	for i := range 50 {
		now := at(time.Duration(i) * failover)
		elect(t, tb, ref(0, fmt.Sprint("c", i)), a, uint64(i+1), now)
		if n := entries(tb); n > 2*3 {
			t.Fatalf("after %d clusters the table holds %d entries, want at most %d", i+1, n, 2*3)
		}
	}
	// Long after, the sweep drops every dead entry.
	tb.Decide(ref(9, "other"), a, 100, at(60*failover), true)
	if n := entries(tb); n != 1 {
		t.Fatalf("%d entries after the sweep, want 1 (the new election)", n)
	}
}

func TestEachReportsLiveNamedElections(t *testing.T) {
	tb := newTable(10, 0)
	elect(t, tb, ref(0, "x"), a, 1, t0)
	elect(t, tb, ref(1, "x"), a, 2, t0)
	elect(t, tb, ref(0, "y"), b, 3, at(failover/2))
	want(t, tb.Decide(ref(0, "p"), c, 4, t0, true), Taken, c)      // pending: not reported
	tb.Learn(ref(0, "u"), Replica{Digest: c.Digest}, failover, t0) // no name yet: not reported
	got := func(now int64) []string {
		var out []string
		tb.Each(now, func(cluster, replica string) { out = append(out, cluster+"="+replica) })
		slices.Sort(out)
		return out
	}
	if g := got(t0 + 1); !slices.Equal(g, []string{"x=a", "x=a", "y=b"}) {
		t.Fatalf("Each = %q", g)
	}
	// The name is learned from the replica's data.
	tb.TakeRefresh(ref(0, "u"), c, 5, t0+1)
	if g := got(t0 + 1); !slices.Equal(g, []string{"u=c", "x=a", "x=a", "y=b"}) {
		t.Fatalf("Each = %q", g)
	}
	if g := got(at(failover)); !slices.Equal(g, []string{"y=b"}) {
		t.Fatalf("Each after x and u expired = %q", g)
	}
}
