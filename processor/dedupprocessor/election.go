package dedupprocessor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.uber.org/zap"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/election"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/identity"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/redistier"
)

// Replica election: the second way of deciding what is a duplicate, for
// metric data points of HA pairs of agents (metrics.replica_election).
//
// Before the identity walk, a batch looks up each data point's cluster and
// replica labels (the point's attributes first, then its resource's), and
// asks, once per cluster in the batch, which replica is elected. Points of
// the elected replica go on to the identity dedup (key, ignore, conditions)
// as any other; points of another replica are duplicates (tier "election");
// points without both labels, or of a cluster past max_clusters, go on
// undecided.
//
// Elections follow the claim discipline (claim.go). An election a batch
// takes (the cluster had none live) is pending until the batch is delivered
// (committed) or refused (released), so a replica whose data never arrived
// is never left elected. A batch that meets another batch's pending
// election waits for it, bounded by pending_wait, then is refused for
// retry. Elections are decided before any claim: a batch waiting for an
// election holds no claim, so no claim waits on it; among batches waiting
// for elections, wait-die by age applies as for claims (one that meets an
// older batch's pending election gives up the elections it took and waits
// holding nothing). The elected replica's delivered batches refresh its
// election once update_interval (plus jitter) has passed since the last
// refresh: with a shared tier, in the round trip that commits their claims.
//
// With a shared tier, the local table caches what Redis said: a committed
// election cannot change before its failover deadline, so until then a
// batch decides without a round trip. Only a cluster this collector knows
// no live election of (its first batch here, or after the deadline) costs a
// round trip of its own, before the claims, which depend on its answer.

// errElectionInFlight is returned when a cluster of the batch still has
// another batch's pending election after pending_wait: that batch's replica
// may or may not end up elected, so the batch's points can be neither
// delivered nor dropped yet.
var errElectionInFlight = errors.New("dedup: the replica election of a cluster in this batch is still being decided by another batch in flight; retry later")

// Why election did not decide a point; the undecided counter's attribute.
type undecidedReason int

const (
	undecidedMissingLabel undecidedReason = iota
	undecidedClusterLimit
	numUndecidedReasons
)

var undecidedNames = [numUndecidedReasons]string{"missing_label", "cluster_limit"}

// Why a replica was elected; the elections counter's attribute.
type electionReason int

const (
	electionNew      electionReason = iota // no other replica held the cluster before
	electionFailover                       // took over from another replica, whose election had expired
	numElectionReasons
)

var electionReasonNames = [numElectionReasons]string{"new", "failover"}

// electionTier is what elections need of the shared tier: redistier.Tier,
// whose methods document the contract.
type electionTier interface {
	Elect(ctx context.Context, token string, failover time.Duration, es []redistier.Election, answers []redistier.ElectionAnswer) error
	CommitElected(ctx context.Context, token string, failover time.Duration, es []redistier.Election, answers []redistier.ElectionAnswer) error
	ReleaseElections(ctx context.Context, token string, failover time.Duration, keys []digest.Digest) error
}

// elector is a metrics processor's replica election.
type elector struct {
	cluster, replica string // the label names
	strip            bool
	failover         time.Duration
	table            *election.Table
	boxes            sync.Pool
}

func newElector(cfg *ElectionConfig) *elector {
	return &elector{
		cluster:  cfg.ClusterLabel,
		replica:  cfg.ReplicaLabel,
		strip:    cfg.RemoveReplicaLabel,
		failover: cfg.FailoverTimeout,
		table: election.New(election.Config{
			UpdateInterval:  cfg.UpdateInterval,
			UpdateJitter:    cfg.UpdateJitter,
			FailoverTimeout: cfg.FailoverTimeout,
			MaxClusters:     cfg.MaxClusters,
		}),
		boxes: sync.Pool{New: func() any { return new(ballotBox) }},
	}
}

// ballotBox is one batch's election state: a ballot per cluster in the
// batch, a vote per (cluster, replica) seen, and each point's vote.
type ballotBox struct {
	tenant  election.Tenant
	ballots []ballot
	votes   []vote
	points  []pointVote // per data point, in walk order
	// stripResource[i]: remove the replica label from resource i (a kept
	// point of the elected replica took its label from there).
	stripResource []bool
	strips        int // points or resources to strip the label from
	lastVote      int32

	undecided [numUndecidedReasons]int64
	elections [numElectionReasons]int64

	local       bool // the shared tier failed under on_error: pass: decided here
	waitedSince time.Time

	// Scratch for the shared tier's calls.
	asked   []int32
	es      []redistier.Election
	answers []redistier.ElectionAnswer
}

// ballot is one cluster's election as a batch sees it.
type ballot struct {
	ref       election.Ref
	candidate election.Replica // the first replica of the cluster in the batch
	state     ballotState
	elected   digest.Digest
	took      bool // the batch holds the election, pending
	inRedis   bool // ... and holds it in the shared tier too
	prev      digest.Digest
	hasPrev   bool
	refresh   bool // the batch carries the election's refresh
}

type ballotState uint8

const (
	ballotOpen ballotState = iota
	ballotElected
	ballotOverLimit
)

// vote is a (cluster, replica) pair seen in the batch.
type vote struct {
	ballot  int32
	replica election.Replica
}

// pointVote is a data point's vote (noVote: it lacks a label) and, when its
// replica label is its resource's, the resource's index (else -1).
type pointVote struct {
	vote     int32
	resource int32
}

const noVote = -1

func (e *elector) get() *ballotBox { return e.boxes.Get().(*ballotBox) }

func (e *elector) put(box *ballotBox) {
	const maxRetained = 64 << 10
	if cap(box.points) > maxRetained {
		box.points = nil
	}
	*box = ballotBox{
		ballots: box.ballots[:0], votes: box.votes[:0], points: box.points[:0],
		stripResource: box.stripResource[:0],
		asked:         box.asked[:0], es: box.es[:0], answers: box.answers[:0],
	}
	e.boxes.Put(box)
}

// electionDigest is an election's key: the tenant and the cluster.
func electionDigest(enc *identity.Encoder, tenant election.Tenant, cluster string) digest.Digest {
	enc.Reset()
	enc.Raw([]byte{'E'})
	enc.Raw(tenant[:])
	enc.String(cluster)
	return enc.Digest()
}

func replicaDigest(enc *identity.Encoder, replica string) digest.Digest {
	enc.Reset()
	enc.Raw([]byte{'R'})
	enc.String(replica)
	return enc.Digest()
}

// label returns the string value of attribute name in m, if it has one.
func label(m pcommon.Map, name string) (string, bool) {
	v, ok := m.Get(name)
	if !ok {
		return "", false
	}
	if v.Type() == pcommon.ValueTypeStr {
		return v.Str(), v.Str() != ""
	}
	s := v.AsString()
	return s, s != ""
}

// scan is the first pass: each point's labels and vote.
func (e *elector) scan(ctx context.Context, eng *engine, box *ballotBox, enc *identity.Encoder, md pmetric.Metrics) {
	box.tenant, _ = tenantDigest(ctx, eng.cfg, enc)
	box.lastVote = noVote
	rms := md.ResourceMetrics()
	for i := 0; i < rms.Len(); i++ {
		rm := rms.At(i)
		resCluster, resHasCluster := label(rm.Resource().Attributes(), e.cluster)
		resReplica, resHasReplica := label(rm.Resource().Attributes(), e.replica)
		box.stripResource = append(box.stripResource, false)
		sms := rm.ScopeMetrics()
		for j := 0; j < sms.Len(); j++ {
			ms := sms.At(j).Metrics()
			for k := 0; k < ms.Len(); k++ {
				m := ms.At(k)
				switch m.Type() {
				case pmetric.MetricTypeGauge:
					scanPoints(e, box, enc, m.Gauge().DataPoints(), int32(i), resCluster, resReplica, resHasCluster, resHasReplica)
				case pmetric.MetricTypeSum:
					scanPoints(e, box, enc, m.Sum().DataPoints(), int32(i), resCluster, resReplica, resHasCluster, resHasReplica)
				case pmetric.MetricTypeHistogram:
					scanPoints(e, box, enc, m.Histogram().DataPoints(), int32(i), resCluster, resReplica, resHasCluster, resHasReplica)
				case pmetric.MetricTypeExponentialHistogram:
					scanPoints(e, box, enc, m.ExponentialHistogram().DataPoints(), int32(i), resCluster, resReplica, resHasCluster, resHasReplica)
				case pmetric.MetricTypeSummary:
					scanPoints(e, box, enc, m.Summary().DataPoints(), int32(i), resCluster, resReplica, resHasCluster, resHasReplica)
				}
			}
		}
	}
}

func scanPoints[P dataPoint](e *elector, box *ballotBox, enc *identity.Encoder, points pointSlice[P], res int32,
	resCluster, resReplica string, resHasCluster, resHasReplica bool,
) {
	for i := 0; i < points.Len(); i++ {
		attrs := points.At(i).Attributes()
		cluster, ok := label(attrs, e.cluster)
		if !ok {
			cluster, ok = resCluster, resHasCluster
		}
		if !ok {
			box.points = append(box.points, pointVote{vote: noVote, resource: -1})
			continue
		}
		replica, fromPoint := label(attrs, e.replica)
		if !fromPoint {
			if !resHasReplica {
				box.points = append(box.points, pointVote{vote: noVote, resource: -1})
				continue
			}
			replica = resReplica
		}
		pv := pointVote{vote: box.voteOf(enc, cluster, replica), resource: -1}
		if !fromPoint {
			pv.resource = res
		}
		box.points = append(box.points, pv)
	}
}

// voteOf returns the index of the vote for (cluster, replica), adding it
// (and its cluster's ballot) if it is new to the batch. Points of one
// resource mostly share their labels, so the last vote is looked at first.
func (box *ballotBox) voteOf(enc *identity.Encoder, cluster, replica string) int32 {
	if v := box.lastVote; v != noVote {
		if vt := &box.votes[v]; vt.replica.Name == replica && box.ballots[vt.ballot].ref.Cluster == cluster {
			return v
		}
	}
	b := int32(-1)
	for i := range box.votes {
		vt := &box.votes[i]
		if box.ballots[vt.ballot].ref.Cluster != cluster {
			continue
		}
		b = vt.ballot
		if vt.replica.Name == replica {
			box.lastVote = int32(i)
			return int32(i)
		}
	}
	rep := election.Replica{Digest: replicaDigest(enc, replica), Name: replica}
	if b < 0 {
		b = int32(len(box.ballots))
		box.ballots = append(box.ballots, ballot{
			ref:       election.Ref{Tenant: box.tenant, Key: electionDigest(enc, box.tenant, cluster), Cluster: cluster},
			candidate: rep,
		})
	}
	box.votes = append(box.votes, vote{ballot: b, replica: rep})
	box.lastVote = int32(len(box.votes) - 1)
	return box.lastVote
}

// electReplicas is the election stage of a metrics batch: scan, then decide every
// cluster's election. On error the batch holds no election and is refused.
func (e *engine) electReplicas(ctx context.Context, b *batch, enc *identity.Encoder, md pmetric.Metrics) error {
	box := e.elect.get()
	b.ballots = box
	e.elect.scan(ctx, e, box, enc, md)
	if len(box.ballots) == 0 {
		return nil
	}
	if err := e.decideElections(ctx, b); err != nil {
		return err
	}
	// The elected replica's data refreshes its election, once due; one
	// batch in flight carries the refresh.
	now := e.now()
	for i := range box.votes {
		vt := &box.votes[i]
		bl := &box.ballots[vt.ballot]
		if bl.state == ballotElected && !bl.took && !bl.refresh && vt.replica.Digest == bl.elected {
			bl.refresh = e.elect.table.TakeRefresh(bl.ref, vt.replica, b.token, now)
		}
	}
	return nil
}

// decideElections decides every ballot, waiting for other batches' pending
// elections as the claim discipline waits for their pending claims.
func (e *engine) decideElections(ctx context.Context, b *batch) error {
	box := b.ballots
	var deadline time.Time
	pause := time.Millisecond
	waiters := false
	defer func() {
		if waiters {
			e.ended.waiters.Add(-1)
		}
	}()
	for {
		// Taken before the look, so that a batch ending after it wakes
		// this one (once it waits at all).
		var settled <-chan struct{}
		if waiters {
			settled = e.ended.channel()
		}
		waiting, yield := false, false
		now := e.now()
		box.asked = box.asked[:0]
		for i := range box.ballots {
			bl := &box.ballots[i]
			if bl.state != ballotOpen {
				continue
			}
			d := e.elect.table.Decide(bl.ref, bl.candidate, b.token, now, e.electTier == nil || box.local)
			switch d.State {
			case election.Elected:
				bl.state, bl.elected = ballotElected, d.Replica
			case election.Taken:
				bl.state, bl.elected, bl.took = ballotElected, d.Replica, true
				bl.prev, bl.hasPrev = d.Prev, d.HasPrev
			case election.OverLimit:
				bl.state = ballotOverLimit
			case election.Unknown:
				box.asked = append(box.asked, int32(i))
			case election.PendingOlder:
				waiting, yield = true, true
			default: // Pending
				waiting = true
			}
		}
		if len(box.asked) > 0 {
			w, y, err := e.askElections(ctx, b)
			if err != nil {
				return err
			}
			if box.local {
				continue // the shared tier failed: decide here, at once
			}
			waiting, yield = waiting || w, yield || y
		}
		if !waiting {
			if !box.waitedSince.IsZero() {
				e.tel.recordWait(ctx, e.clock.now().Sub(box.waitedSince), waitSettled)
			}
			return nil
		}
		if box.waitedSince.IsZero() {
			box.waitedSince = e.clock.now()
			deadline = box.waitedSince.Add(e.cfg.PendingWait)
			e.ended.waiters.Add(1)
			waiters = true
			settled = e.ended.channel()
		}
		if yield {
			e.giveUpElections(ctx, b)
		}
		if e.clock.now().Add(pause).After(deadline) {
			e.refused.log(b.now, errElectionInFlight)
			e.tel.recordWait(ctx, e.clock.now().Sub(box.waitedSince), waitRefused)
			e.releaseElections(ctx, b)
			return errElectionInFlight
		}
		if err := e.clock.pause(ctx, settled, pause); err != nil {
			e.releaseElections(ctx, b)
			return err
		}
		pause = min(2*pause, maxPause)
	}
}

// askElections asks the shared tier about the ballots in box.asked, in one
// round trip. It reports whether one is pending (and held by an older
// batch). Under on_error: pass, a failed call leaves the batch's elections
// to the local table (box.local), which decides them at the next look.
func (e *engine) askElections(ctx context.Context, b *batch) (waiting, yield bool, err error) {
	box := b.ballots
	if b.redisToken == "" {
		b.redisToken = redistier.NewToken(b.token)
	}
	box.es = box.es[:0]
	for _, i := range box.asked {
		bl := &box.ballots[i]
		box.es = append(box.es, redistier.Election{Key: bl.ref.Key, Replica: bl.candidate.Digest})
	}
	if cap(box.answers) < len(box.es) {
		box.answers = make([]redistier.ElectionAnswer, len(box.es))
	}
	answers := box.answers[:len(box.es)]
	start := e.now()
	if err := e.electTier.Elect(ctx, b.redisToken, e.elect.failover, box.es, answers); err != nil {
		if e.redisPolicy == ErrorRefuse || ctx.Err() != nil {
			e.releaseElections(ctx, b)
			e.tierError.log(b.now, err, zap.String("on_error", string(e.redisPolicy)))
			return false, false, fmt.Errorf("%w: %w", errSharedTier, err)
		}
		e.tierError.log(b.now, err, zap.String("on_error", "pass"))
		box.local = true
		return false, false, nil
	}
	for k, i := range box.asked {
		bl, a := &box.ballots[i], answers[k]
		switch a.State {
		case redistier.ElectionLive:
			e.elect.table.Learn(bl.ref, box.replicaOf(i, a.Replica), a.Remaining, start)
			bl.state, bl.elected = ballotElected, a.Replica
		case redistier.ElectionTaken:
			e.elect.table.Hold(bl.ref, bl.candidate, b.token)
			bl.state, bl.elected, bl.took, bl.inRedis = ballotElected, bl.candidate.Digest, true, true
			bl.prev, bl.hasPrev = a.Replica, a.HasPrev
		case redistier.ElectionPendingOlder:
			waiting, yield = true, true
		default: // ElectionPending
			waiting = true
		}
	}
	return waiting, yield, nil
}

// replicaOf returns the replica of digest d as the batch knows it: with its
// name if one of ballot i's votes is of d.
func (box *ballotBox) replicaOf(i int32, d digest.Digest) election.Replica {
	for _, vt := range box.votes {
		if vt.ballot == i && vt.replica.Digest == d {
			return vt.replica
		}
	}
	return election.Replica{Digest: d}
}

// giveUpElections releases the elections the batch took, to wait holding
// none: it met an older batch's pending election. Their ballots are decided
// again after the wait.
func (e *engine) giveUpElections(ctx context.Context, b *batch) {
	e.releaseElections(ctx, b)
	for i := range b.ballots.ballots {
		if bl := &b.ballots.ballots[i]; bl.took {
			bl.state, bl.took, bl.inRedis, bl.hasPrev = ballotOpen, false, false, false
		}
	}
	e.ended.broadcast()
}

// releaseElections gives up every election the batch took and the
// refreshes it carried: it was not delivered.
func (e *engine) releaseElections(ctx context.Context, b *batch) {
	box := b.ballots
	if box == nil {
		return
	}
	var keys []digest.Digest
	for i := range box.ballots {
		bl := &box.ballots[i]
		if bl.took {
			e.elect.table.Release(bl.ref, b.token)
			if bl.inRedis {
				keys = append(keys, bl.ref.Key)
			}
		}
		if bl.refresh {
			e.elect.table.DropRefresh(bl.ref, b.token)
		}
	}
	if len(keys) > 0 && e.electTier != nil {
		if err := e.electTier.ReleaseElections(context.WithoutCancel(ctx), b.redisToken, e.elect.failover, keys); err != nil {
			e.tierError.log(b.now, err, zap.String("op", redistier.OpRelease))
		}
	}
}

// commitElections commits, once the batch was delivered, the elections it
// took and the refreshes it carried, with its shared claims: with a shared
// tier, in one round trip.
func (e *engine) commitElections(ctx context.Context, b *batch) {
	box := b.ballots
	box.asked, box.es = box.asked[:0], box.es[:0]
	for i := range box.ballots {
		bl := &box.ballots[i]
		if bl.took || bl.refresh {
			box.asked = append(box.asked, int32(i))
		}
	}
	shared := e.electTier != nil && !box.local && len(box.asked) > 0
	if !shared {
		now := e.now()
		for _, i := range box.asked {
			e.commitElection(b, i, now, e.elect.failover)
		}
		return
	}
	for _, i := range box.asked {
		bl := &box.ballots[i]
		box.es = append(box.es, redistier.Election{Key: bl.ref.Key, Replica: bl.elected})
	}
	if cap(box.answers) < len(box.es) {
		box.answers = make([]redistier.ElectionAnswer, len(box.es))
	}
	answers := box.answers[:len(box.es)]
	start := e.now()
	if err := e.electTier.CommitElected(context.WithoutCancel(ctx), b.redisToken, e.elect.failover, box.es, answers); err != nil {
		// The data was delivered: the elections hold here; in Redis a
		// pending one ends with its lease, as a claim's does.
		e.tierError.log(b.now, err, zap.String("op", redistier.OpCommit))
		for _, i := range box.asked {
			e.commitElection(b, i, start, e.elect.failover)
		}
		return
	}
	for k, i := range box.asked {
		bl, a := &box.ballots[i], answers[k]
		if a.State == redistier.ElectionLive && a.Replica == bl.elected {
			e.commitElection(b, i, start, a.Remaining)
			continue
		}
		// Another replica or batch holds it: this batch's election was lost
		// (its lease ran out before the commit). Learn who holds it.
		if bl.took {
			e.elect.table.Release(bl.ref, b.token)
		}
		if a.State == redistier.ElectionLive {
			e.elect.table.Learn(bl.ref, box.replicaOf(i, a.Replica), a.Remaining, start)
		} else {
			e.elect.table.Forget(bl.ref)
		}
	}
}

// commitElection commits in the local table the election ballot i took, or
// the refresh it carried, for remaining from now, and counts a new
// election.
func (e *engine) commitElection(b *batch, i int32, now int64, remaining time.Duration) {
	box := b.ballots
	bl := &box.ballots[i]
	if bl.took {
		committed, prev, hasPrev := e.elect.table.Commit(bl.ref, b.token, now)
		if !committed {
			return
		}
		if bl.hasPrev {
			prev, hasPrev = bl.prev, true
		}
		reason := electionNew
		if hasPrev && prev != bl.elected {
			reason = electionFailover
		}
		box.elections[reason]++
	}
	e.elect.table.Refreshed(bl.ref, box.replicaOf(i, bl.elected), b.token, remaining, now)
}

// admitPoint is the second pass's verdict of election on the data point at
// verdict index idx: true if the point goes on to the identity dedup
// (elected, or undecided), false if it is a duplicate of another replica
// (its verdict is then appended).
func (e *engine) admitPoint(b *batch, idx int) bool {
	box := b.ballots
	pv := box.points[idx]
	if pv.vote == noVote {
		box.undecided[undecidedMissingLabel]++
		return true
	}
	vt := &box.votes[pv.vote]
	bl := &box.ballots[vt.ballot]
	switch {
	case bl.state == ballotOverLimit:
		box.undecided[undecidedClusterLimit]++
		return true
	case vt.replica.Digest == bl.elected:
		if e.elect.strip {
			if pv.resource >= 0 {
				if !box.stripResource[pv.resource] {
					box.stripResource[pv.resource] = true
					box.strips++
				}
			} else {
				box.strips++
			}
		}
		return true
	}
	b.duplicate(tierElection, e.cfg.Action)
	return false
}

// stripPoint says whether to remove the replica label from the attributes
// of the kept point at verdict index idx: it is of the elected replica and
// its label is its own.
func (box *ballotBox) stripPoint(idx int) bool {
	pv := box.points[idx]
	if pv.vote == noVote || pv.resource >= 0 {
		return false
	}
	vt := &box.votes[pv.vote]
	bl := &box.ballots[vt.ballot]
	return bl.state == ballotElected && vt.replica.Digest == bl.elected
}
