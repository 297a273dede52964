// Package election is the local tier of replica election: per tenant and
// cluster, which replica's data is delivered.
//
// An election a batch takes is pending until the batch commits (delivered)
// or releases it: a replica never delivered is never left elected. A
// committed election holds for the failover timeout from its last refresh,
// so the table answers alone until then from what Redis said, and after it
// Decide answers Unknown. A Table is safe for concurrent use.
package election

import (
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

// Tenant is the digest of a request's tenant: its auth_attributes, then its
// metadata_keys values (the processor's tenantDigest).
type Tenant = [digest.Size]byte

// Ref names one election; Key, the digest of tenant and cluster, is the same
// everywhere.
type Ref struct {
	Tenant  Tenant
	Key     digest.Digest
	Cluster string
}

// Replica is a replica label value: its digest, which elections compare, and
// its name if known.
type Replica struct {
	Digest digest.Digest
	Name   string
}

// State is what Decide found.
type State uint8

const (
	Elected   State = iota // a committed election holds
	Taken                  // the caller's batch holds it, pending
	Pending                // another batch holds it, pending
	Unknown                // no live election, and the caller asks the shared tier
	OverLimit              // new cluster, and its tenant has MaxClusters live elections
)

// Decision is Decide's answer.
type Decision struct {
	State   State
	Replica digest.Digest
}

// Config holds the timing and limit; the caller ensures FailoverTimeout >
// UpdateInterval+UpdateJitter.
type Config struct {
	UpdateInterval  time.Duration
	UpdateJitter    time.Duration
	FailoverTimeout time.Duration
	MaxClusters     int                  // live elections per tenant
	Jitter          func() time.Duration // in [0, UpdateJitter]; default uniform
}

// Table holds the elections a processor knows.
type Table struct {
	cfg       Config
	failover  int64
	mu        sync.Mutex
	tenants   map[Tenant]map[digest.Digest]*entry
	lastSweep int64
}

// entry is one cluster's election. A pending one (holder != 0) has no deadline:
// its batch ends. A committed one is live until its deadline, then kept a
// failover timeout to tell a failover.
type entry struct {
	cluster   string
	replica   Replica
	holder    uint64 // the batch holding it pending; 0: committed
	prev      *entry // the expired election a pending takeover replaces
	until     int64  // committed: live before this time (ns)
	refresh   int64  // committed: refreshed by a delivered batch from this time
	refresher uint64 // the one batch carrying the due refresh
}

func (en *entry) live(now int64) bool { return en.holder != 0 || now < en.until }

// clone copies the name out of the batch's memory: the table outlives it.
func clone(r Replica) Replica { return Replica{Digest: r.Digest, Name: strings.Clone(r.Name)} }

// New returns an empty table.
func New(cfg Config) *Table {
	if cfg.Jitter == nil {
		n := max(int64(cfg.UpdateJitter), 0) + 1
		cfg.Jitter = func() time.Duration { return time.Duration(rand.Int64N(n)) }
	}
	return &Table{
		cfg:      cfg,
		failover: int64(cfg.FailoverTimeout),
		tenants:  map[Tenant]map[digest.Digest]*entry{},
	}
}

// Decide answers which replica of ref's cluster is elected for token's batch.
// If none is live, with take it gives it to candidate, pending; else Unknown.
func (t *Table) Decide(ref Ref, candidate Replica, token uint64, now int64, take bool) Decision {
	t.mu.Lock()
	defer t.mu.Unlock()
	// Dead entries go once per failover timeout: gone clusters hold no memory.
	if now-t.lastSweep >= t.failover {
		t.lastSweep = now
		t.sweep(func(en *entry) bool { return now >= en.until+t.failover })
	}
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
	t.put(ref, &entry{replica: clone(candidate), holder: token, prev: en})
	return Decision{State: Taken, Replica: candidate.Digest}
}

// admit reports whether the tenant may add a live election, sweeping dead
// ones at the limit.
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
			// Dead, or kept to tell a failover past twice the limit.
			t.remove(tenant, clusters, k)
		}
	}
	return live < t.cfg.MaxClusters
}

// put makes en ref's election, naming ref's cluster, and returns it.
func (t *Table) put(ref Ref, en *entry) *entry {
	clusters := t.tenants[ref.Tenant]
	if clusters == nil {
		clusters = map[digest.Digest]*entry{}
		t.tenants[ref.Tenant] = clusters
	}
	en.cluster = strings.Clone(ref.Cluster)
	clusters[ref.Key] = en
	return en
}

// remove deletes tenant's entry key, and the tenant once it has none.
func (t *Table) remove(tenant Tenant, clusters map[digest.Digest]*entry, key digest.Digest) {
	delete(clusters, key)
	if len(clusters) == 0 {
		delete(t.tenants, tenant)
	}
}

// Hold records that Redis gave ref to candidate, pending under token, unless
// an election pends here.
func (t *Table) Hold(ref Ref, candidate Replica, token uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if old := t.tenants[ref.Tenant][ref.Key]; old == nil || old.holder == 0 {
		t.put(ref, &entry{replica: clone(candidate), holder: token, prev: old})
	}
}

// Learn records that the shared tier reported replica elected for remaining
// from now (taken before asking: early), leaving a pending election alone.
func (t *Table) Learn(ref Ref, replica Replica, remaining time.Duration, now int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	en := t.tenants[ref.Tenant][ref.Key]
	switch {
	case en == nil:
		en = t.put(ref, &entry{})
	case en.holder != 0:
		return
	}
	if en.replica.Digest != replica.Digest || replica.Name != "" {
		en.replica = clone(replica)
	}
	t.setDeadlines(en, now, int64(remaining))
}

// setDeadlines makes a committed election live for remaining, next refreshed
// from now+remaining-failover.
func (t *Table) setDeadlines(en *entry, now, remaining int64) {
	en.until = now + remaining
	en.refresh = now + remaining - t.failover + int64(t.cfg.UpdateInterval) + int64(t.cfg.Jitter())
	en.refresher = 0
}

// Commit records what token's delivered batch carried: replica's election, live
// for remaining from now. One pending under token is committed (reported, with
// the replica it replaced), a committed one refreshed, an expired one revived,
// as in Redis; one pending elsewhere or live for another replica stays.
func (t *Table) Commit(ref Ref, replica Replica, token uint64, remaining time.Duration, now int64) (committed bool, prev digest.Digest, hasPrev bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	en := t.tenants[ref.Tenant][ref.Key]
	switch {
	case en == nil || en.holder != 0 && en.holder != token:
		return
	case en.holder == token:
		if en.prev != nil {
			prev, hasPrev = en.prev.replica.Digest, true
		}
		en.holder, en.prev, committed = 0, nil, true
	case en.replica.Digest != replica.Digest:
		if en.live(now) {
			return
		}
		en.replica = clone(replica)
	}
	if en.replica.Name == "" {
		en.replica.Name = strings.Clone(replica.Name)
	}
	t.setDeadlines(en, now, int64(remaining))
	return committed, prev, hasPrev
}

// Release gives up what token's batch holds of ref's election: the election
// pending under token, restoring the expired one it replaced, or the refresh it
// carried.
func (t *Table) Release(ref Ref, token uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	clusters := t.tenants[ref.Tenant]
	en := clusters[ref.Key]
	switch {
	case en == nil:
	case en.holder != token:
		if en.refresher == token {
			en.refresher = 0
		}
	case en.prev != nil:
		clusters[ref.Key] = en.prev
	default:
		t.remove(ref.Tenant, clusters, ref.Key)
	}
}

// TakeRefresh reports whether token's batch carries ref's due refresh, naming
// a digest-only replica.
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

// Forget drops ref's committed election: the next batch asks again.
func (t *Table) Forget(ref Ref) {
	t.mu.Lock()
	defer t.mu.Unlock()
	clusters := t.tenants[ref.Tenant]
	if en := clusters[ref.Key]; en != nil && en.holder == 0 {
		t.remove(ref.Tenant, clusters, ref.Key)
	}
}

// MaxClusters is the most live elections a tenant has.
func (t *Table) MaxClusters() int { return t.cfg.MaxClusters }

// ForgetCommitted drops the committed elections, asked again in Redis;
// pending ones stay with batches.
func (t *Table) ForgetCommitted() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sweep(func(*entry) bool { return true })
}

// Each calls fn, under the lock, for every live committed election whose
// replica is named.
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

// sweep drops the committed entries dead reports true for.
func (t *Table) sweep(dead func(*entry) bool) {
	for tenant, clusters := range t.tenants {
		for k, en := range clusters {
			if en.holder == 0 && dead(en) {
				t.remove(tenant, clusters, k)
			}
		}
	}
}
