// Package election is the local tier of replica election: for each tenant
// and cluster of an HA group of agents, which replica's data is delivered.
//
// The first replica seen for a cluster is elected. Its election is pending
// while the batch that took it is on its way downstream: that batch commits
// it once delivered, or releases it when delivery failed, so that a replica
// whose data was never delivered is never left elected. A committed election
// holds for the failover timeout from its last refresh; the elected
// replica's delivered batches refresh it once the update interval (plus a
// random jitter, which spreads the refreshes of many clusters) has passed
// since the last refresh. When it is not refreshed within the failover
// timeout, the next replica to send takes it over.
//
// On one gateway the table is the truth. With a shared tier the truth is in
// Redis and the table caches what Redis said, with the local clock: a
// committed election cannot change before its failover deadline, so until
// then the table answers alone, and after it the caller asks Redis again
// (Decide answers Unknown instead of taking the election itself).
//
// A Table is safe for concurrent use; every method takes one lock, held for
// a few map operations.
package election

import (
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

// Tenant is the digest of a request's tenant (metadata_keys values).
type Tenant = [digest.Size]byte

// Ref names one election: its tenant, its key (the digest of tenant and
// cluster, the same in every collector and in Redis) and the cluster's name.
type Ref struct {
	Tenant  Tenant
	Key     digest.Digest
	Cluster string
}

// Replica is a replica label value: its digest (what elections compare and
// Redis stores) and, for the gauge of elected replicas, its name when known.
type Replica struct {
	Digest digest.Digest
	Name   string
}

// State is what Decide found.
type State uint8

const (
	// Elected: a committed election holds; Decision.Replica is elected.
	Elected State = iota
	// Taken: the caller's batch holds the election, pending until it is
	// delivered; Decision.Replica is the caller's candidate.
	Taken
	// Pending: another batch holds a pending election of the cluster.
	Pending
	// Unknown: the table knows no live election and may not take one (it
	// caches a shared tier): ask the shared tier.
	Unknown
	// OverLimit: the cluster is new and its tenant already has MaxClusters
	// live elections.
	OverLimit
)

// Decision is Decide's answer.
type Decision struct {
	State   State
	Replica digest.Digest
	// Prev is the replica whose expired election a Taken election replaces,
	// if the table remembers one: committing it is a failover.
	Prev    digest.Digest
	HasPrev bool
}

// Config holds the timing and the limit. Durations are positive and
// FailoverTimeout > UpdateInterval + UpdateJitter (the caller validates).
type Config struct {
	UpdateInterval  time.Duration
	UpdateJitter    time.Duration
	FailoverTimeout time.Duration
	// MaxClusters bounds the live elections per tenant.
	MaxClusters int
	// Jitter, if set, returns a duration in [0, UpdateJitter]; tests fix
	// it. Default: uniformly random.
	Jitter func() time.Duration
}

// Table holds the elections a processor knows.
type Table struct {
	cfg       Config
	update    int64
	failover  int64
	mu        sync.Mutex
	tenants   map[Tenant]map[digest.Digest]*entry
	size      int
	lastSweep int64
}

// entry is one cluster's election. A pending entry (holder != 0) belongs to
// a batch in flight and has no deadline: the batch always ends, committing
// or releasing it. A committed entry is live until its deadline, then kept
// for one more failover timeout so that a takeover can tell it is a
// failover (the replica changed), then swept.
type entry struct {
	cluster string
	replica Replica
	holder  uint64 // the batch holding a pending election; 0: committed
	// The committed election a pending takeover replaces, restored if the
	// takeover is released.
	prev    *entry
	until   int64 // committed: live before this time (ns)
	refresh int64 // committed: refreshed by a delivered batch from this time
	// refresher is the batch carrying the due refresh, so that one batch
	// among the many in flight does.
	refresher uint64
}

func (en *entry) live(now int64) bool { return en.holder != 0 || now < en.until }

// clone copies the replica's name out of the batch's memory: the table
// outlives the batch.
func clone(r Replica) Replica { return Replica{Digest: r.Digest, Name: strings.Clone(r.Name)} }

// New returns an empty table.
func New(cfg Config) *Table {
	if cfg.Jitter == nil {
		max := int64(cfg.UpdateJitter)
		cfg.Jitter = func() time.Duration {
			if max <= 0 {
				return 0
			}
			return time.Duration(rand.Int64N(max + 1))
		}
	}
	return &Table{
		cfg:      cfg,
		update:   int64(cfg.UpdateInterval),
		failover: int64(cfg.FailoverTimeout),
		tenants:  map[Tenant]map[digest.Digest]*entry{},
	}
}

// Decide answers which replica of ref's cluster is elected, for a batch
// holding the given token, at now. When no election is live, take says
// whether the table decides: it then gives the election to candidate,
// pending under token (Taken); else it answers Unknown. A cluster the table
// does not hold, whose tenant already has MaxClusters live elections, is
// OverLimit.
func (t *Table) Decide(ref Ref, candidate Replica, token uint64, now int64, take bool) Decision {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.maybeSweep(now)
	clusters := t.tenants[ref.Tenant]
	en := clusters[ref.Key]
	switch {
	case en != nil && en.holder == token:
		return Decision{State: Taken, Replica: en.replica.Digest}
	case en != nil && en.holder != 0:
		return Decision{State: Pending, Replica: en.replica.Digest}
	case en != nil && en.live(now):
		return Decision{State: Elected, Replica: en.replica.Digest}
	}
	if !t.admit(ref.Tenant, ref.Key, clusters, now) {
		return Decision{State: OverLimit}
	}
	if !take {
		return Decision{State: Unknown}
	}
	d := Decision{State: Taken, Replica: candidate.Digest}
	if en != nil {
		d.Prev, d.HasPrev = en.replica.Digest, true
	}
	t.hold(ref, candidate, token, en)
	return d
}

// admit reports whether the tenant may have one more live election, for
// key (which has none), sweeping its dead ones when it is at the limit.
func (t *Table) admit(tenant Tenant, key digest.Digest, clusters map[digest.Digest]*entry, now int64) bool {
	if len(clusters) < t.cfg.MaxClusters {
		return true
	}
	live := 0
	for k, en := range clusters {
		switch {
		case en.live(now):
			live++
		case k == key:
		case len(clusters) >= 2*t.cfg.MaxClusters || now >= en.until+t.failover:
			// Dead, or kept only to tell a failover, at a bound of twice
			// the limit per tenant.
			delete(clusters, k)
			t.size--
		}
	}
	if len(clusters) == 0 {
		delete(t.tenants, tenant)
	}
	return live < t.cfg.MaxClusters
}

// hold makes ref pending under token for candidate, keeping the expired
// committed election it replaces (if any) to restore on release.
func (t *Table) hold(ref Ref, candidate Replica, token uint64, old *entry) {
	clusters := t.tenants[ref.Tenant]
	if clusters == nil {
		clusters = map[digest.Digest]*entry{}
		t.tenants[ref.Tenant] = clusters
	}
	en := &entry{cluster: strings.Clone(ref.Cluster), replica: clone(candidate), holder: token}
	if old != nil {
		if old.holder == 0 {
			en.prev = old
		}
	} else {
		t.size++
	}
	clusters[ref.Key] = en
}

// Hold records that the shared tier gave ref's election to candidate,
// pending under token (its answer to a batch that asked after Unknown).
// prev is the replica whose expired election it replaces, if Redis knew.
func (t *Table) Hold(ref Ref, candidate Replica, token uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.tenants[ref.Tenant][ref.Key]
	if old != nil && old.holder != 0 && old.holder != token {
		// Another batch of this process holds it here: the shared tier
		// answered both, so it cannot have; keep the table's own view.
		return
	}
	if old != nil && old.holder == token {
		return
	}
	t.hold(ref, candidate, token, old)
}

// Learn records a committed election the shared tier reported: replica is
// elected for remaining (its failover deadline, counted from now, which the
// caller takes before asking so that the deadline errs early). A pending
// election of a batch of this process is left alone.
func (t *Table) Learn(ref Ref, replica Replica, remaining time.Duration, now int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	en := t.tenants[ref.Tenant][ref.Key]
	if en != nil && en.holder != 0 {
		return
	}
	if en == nil {
		clusters := t.tenants[ref.Tenant]
		if clusters == nil {
			clusters = map[digest.Digest]*entry{}
			t.tenants[ref.Tenant] = clusters
		}
		en = &entry{cluster: strings.Clone(ref.Cluster)}
		clusters[ref.Key] = en
		t.size++
	}
	if en.replica.Digest != replica.Digest || replica.Name != "" {
		en.replica = clone(replica)
	}
	t.setDeadlines(en, now, int64(remaining))
}

// setDeadlines starts a committed election's failover timeout at
// now+remaining-failover (its last refresh) and schedules its next refresh.
func (t *Table) setDeadlines(en *entry, now, remaining int64) {
	refreshed := now + remaining - t.failover
	en.until = now + remaining
	en.refresh = refreshed + t.update + int64(t.cfg.Jitter())
	en.refresher = 0
}

// Commit makes ref's election, pending under token, committed at now: the
// batch that took it was delivered. It reports whether token held it, and
// the replica whose expired election it replaced, if known.
func (t *Table) Commit(ref Ref, token uint64, now int64) (committed bool, prev digest.Digest, hasPrev bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	en := t.tenants[ref.Tenant][ref.Key]
	if en == nil || en.holder != token {
		return false, digest.Digest{}, false
	}
	if en.prev != nil {
		prev, hasPrev = en.prev.replica.Digest, true
	}
	en.holder, en.prev = 0, nil
	t.setDeadlines(en, now, t.failover)
	return true, prev, hasPrev
}

// Release gives up ref's election pending under token: the batch that took
// it was not delivered. The expired election it replaced, if any, is
// restored (still expired), so a later takeover still counts as a failover.
func (t *Table) Release(ref Ref, token uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	clusters := t.tenants[ref.Tenant]
	en := clusters[ref.Key]
	if en == nil || en.holder != token {
		return
	}
	if en.prev != nil {
		clusters[ref.Key] = en.prev
		return
	}
	delete(clusters, ref.Key)
	t.size--
	if len(clusters) == 0 {
		delete(t.tenants, ref.Tenant)
	}
}

// TakeRefresh reports whether the batch token, which delivers data of the
// elected replica, is to refresh ref's election: the election is committed
// to replica, its refresh is due at now, and no other batch carries it. It
// also names the replica, if the table knew it only by digest.
func (t *Table) TakeRefresh(ref Ref, replica Replica, token uint64, now int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	en := t.tenants[ref.Tenant][ref.Key]
	if en == nil || en.holder != 0 || en.replica.Digest != replica.Digest {
		return false
	}
	if en.replica.Name == "" && replica.Name != "" {
		en.replica.Name = strings.Clone(replica.Name)
	}
	if now < en.refresh || en.refresher != 0 {
		return false
	}
	en.refresher = token
	return true
}

// Refreshed records a delivered refresh: replica's election holds for
// remaining from now (the full failover timeout on one gateway; what Redis
// answered with a shared tier). If the election changed meanwhile (it
// expired and another batch took it), the refresh is dropped: a local
// delivered refresh of an expired, untaken election revives it, as the
// shared tier's does.
func (t *Table) Refreshed(ref Ref, replica Replica, token uint64, remaining time.Duration, now int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	en := t.tenants[ref.Tenant][ref.Key]
	if en == nil || en.holder != 0 {
		return
	}
	if en.replica.Digest != replica.Digest {
		if en.live(now) {
			return
		}
		en.replica = clone(replica)
	}
	if en.replica.Name == "" {
		en.replica.Name = strings.Clone(replica.Name)
	}
	t.setDeadlines(en, now, int64(remaining))
}

// DropRefresh lets another batch carry ref's refresh: token's batch was not
// delivered.
func (t *Table) DropRefresh(ref Ref, token uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if en := t.tenants[ref.Tenant][ref.Key]; en != nil && en.refresher == token {
		en.refresher = 0
	}
}

// Forget drops what the table knows of ref's committed election (a shared
// tier's answer could not be had): the next batch asks again.
func (t *Table) Forget(ref Ref) {
	t.mu.Lock()
	defer t.mu.Unlock()
	clusters := t.tenants[ref.Tenant]
	if en := clusters[ref.Key]; en != nil && en.holder == 0 {
		delete(clusters, ref.Key)
		t.size--
		if len(clusters) == 0 {
			delete(t.tenants, ref.Tenant)
		}
	}
}

// Each calls fn for every live committed election whose replica's name is
// known, in no particular order, under the table's lock: fn must be quick.
func (t *Table) Each(now int64, fn func(cluster, replica string)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, clusters := range t.tenants {
		for _, en := range clusters {
			if en.holder == 0 && now < en.until && en.replica.Name != "" {
				fn(en.cluster, en.replica.Name)
			}
		}
	}
}

// Len is the number of entries held: live elections, and expired ones
// kept to tell a failover.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.size
}

// maybeSweep drops dead entries of every tenant once per failover timeout,
// so clusters that went away do not hold memory.
func (t *Table) maybeSweep(now int64) {
	if now-t.lastSweep < t.failover {
		return
	}
	t.lastSweep = now
	for tenant, clusters := range t.tenants {
		for k, en := range clusters {
			if en.holder == 0 && now >= en.until+t.failover {
				delete(clusters, k)
				t.size--
			}
		}
		if len(clusters) == 0 {
			delete(t.tenants, tenant)
		}
	}
}
