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
// Election is a stage of its own, before the batch's life (consume.go), and
// follows its discipline: a batch never waits holding a pending election.
// An election a batch takes (the cluster had none live) is pending until the
// batch's first call is delivered (committed) or refused (released), so a
// replica whose data never arrived is never left elected. A batch that
// meets another batch's pending election gives up the elections it took and
// waits holding none, bounded by pending_wait, then is refused for retry.
// Elections are decided before any claim, so no claim waits on them. The
// elected replica's delivered batches refresh its election once
// update_interval (plus jitter) has passed since the last refresh.
//
// With a shared tier, Redis is the truth and the local table caches what it
// said: a committed election cannot change before its failover deadline,
// so until then a batch decides without a round trip. Only a cluster this
// collector knows no live election of (its first batch here, or after the
// deadline) costs a round trip of its own. When that round trip fails under
// on_error: pass, the cluster's points go on undecided (reason
// "unavailable"): a gateway deciding alone could elect another replica than
// its peers, and each would drop the points the other keeps.

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
	undecidedUnavailable
	numUndecidedReasons
)

var undecidedNames = [numUndecidedReasons]string{"missing_label", "cluster_limit", "unavailable"}

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
// batch, a vote per (cluster, replica) seen, and each point's vote. Its
// elections are held under tokens of their own.
type ballotBox struct {
	token      uint64
	redisToken string
	settled    bool // committed or released
	tenant     election.Tenant
	ballots    []ballot
	votes      []vote
	points     []pointVote // per data point, in walk order
	// stripResource[i]: remove the replica label from resource i (a kept
	// point of the elected replica took its label from there).
	stripResource []bool
	strips        int // points or resources to strip the label from
	lastVote      int32

	undecided [numUndecidedReasons]int64
	elections [numElectionReasons]int64

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
	ballotUnavailable // the shared tier failed under on_error: pass
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

// put returns a batch's ballot box to the pool, emptied.
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
func (e *elector) scan(ctx context.Context, cfg *Config, box *ballotBox, enc *identity.Encoder, md pmetric.Metrics) {
	box.tenant, _ = tenantDigest(ctx, cfg, enc)
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

// elect is the election stage of a metrics batch: scan, then decide every
// cluster's election. On error the batch holds no election and is refused.
func (e *elector) elect(ctx context.Context, eng *engine, md pmetric.Metrics) (*ballotBox, error) {
	box := e.boxes.Get().(*ballotBox)
	enc := encoderPool.Get().(*identity.Encoder)
	e.scan(ctx, eng.cfg, box, enc, md)
	encoderPool.Put(enc)
	if len(box.ballots) == 0 {
		return box, nil
	}
	box.token = eng.nextToken()
	if eng.electTier != nil {
		box.redisToken = redistier.NewToken(box.token)
	}
	if err := e.decide(ctx, eng, box); err != nil {
		e.put(box)
		return nil, err
	}
	// The elected replica's data refreshes its election, once due; one
	// batch in flight carries the refresh.
	now := eng.now()
	for i := range box.votes {
		vt := &box.votes[i]
		bl := &box.ballots[vt.ballot]
		if bl.state == ballotElected && !bl.took && !bl.refresh && vt.replica.Digest == bl.elected {
			bl.refresh = e.table.TakeRefresh(bl.ref, vt.replica, box.token, now)
		}
	}
	return box, nil
}

// decide decides every ballot. A look that meets another batch's pending
// election gives up the elections this batch took, then waits (as await
// does), holding none, before looking again.
func (e *elector) decide(ctx context.Context, eng *engine, box *ballotBox) error {
	var w *wait
	defer func() {
		if w != nil {
			w.end()
		}
	}()
	for {
		pending := false
		now := eng.now()
		box.asked = box.asked[:0]
		for i := range box.ballots {
			bl := &box.ballots[i]
			if bl.state != ballotOpen {
				continue
			}
			d := e.table.Decide(bl.ref, bl.candidate, box.token, now, eng.electTier == nil)
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
			default: // Pending
				pending = true
			}
		}
		if len(box.asked) > 0 {
			p, err := e.ask(ctx, eng, box)
			if err != nil {
				e.release(ctx, eng, box, true)
				return err
			}
			pending = pending || p
		}
		if !pending {
			if w != nil {
				w.record(ctx, waitSettled)
			}
			return nil
		}
		// Nobody is woken by this release, as by await's: two batches that
		// wait for each other's elections would wake each other without end.
		e.release(ctx, eng, box, false)
		for i := range box.ballots {
			if bl := &box.ballots[i]; bl.took {
				bl.state, bl.took, bl.inRedis, bl.hasPrev = ballotOpen, false, false, false
			}
		}
		if w == nil {
			w = eng.beginWait()
		}
		if err := w.pause(ctx); err != nil {
			if errors.Is(err, errWaitedOut) {
				eng.refused.log(eng.now(), errElectionInFlight)
				w.record(ctx, waitRefused)
				return errElectionInFlight
			}
			return err
		}
	}
}

// ask asks the shared tier about the ballots in box.asked, in one round
// trip, and reports whether one is pending. Under on_error: pass, a failed
// call leaves those ballots undecided.
func (e *elector) ask(ctx context.Context, eng *engine, box *ballotBox) (pending bool, err error) {
	box.es = box.es[:0]
	for _, i := range box.asked {
		bl := &box.ballots[i]
		box.es = append(box.es, redistier.Election{Key: bl.ref.Key, Replica: bl.candidate.Digest})
	}
	box.answers = resize(box.answers, len(box.es))
	start := eng.now()
	if err := eng.electTier.Elect(ctx, box.redisToken, e.failover, box.es, box.answers); err != nil {
		if eng.redisPolicy == ErrorRefuse || ctx.Err() != nil {
			eng.tierError.log(start, err, zap.String("on_error", string(eng.redisPolicy)))
			for _, i := range box.asked {
				box.ballots[i].took, box.ballots[i].inRedis = true, true // the answer may have been lost
			}
			return false, fmt.Errorf("%w: %w", errSharedTier, err)
		}
		eng.tierError.log(start, err, zap.String("on_error", string(ErrorPass)))
		for _, i := range box.asked {
			box.ballots[i].state = ballotUnavailable
		}
		return false, nil
	}
	for k, i := range box.asked {
		bl, a := &box.ballots[i], box.answers[k]
		switch a.State {
		case redistier.ElectionLive:
			e.table.Learn(bl.ref, box.replicaOf(i, a.Replica), a.Remaining, start)
			bl.state, bl.elected = ballotElected, a.Replica
		case redistier.ElectionTaken:
			e.table.Hold(bl.ref, bl.candidate, box.token)
			bl.state, bl.elected, bl.took, bl.inRedis = ballotElected, bl.candidate.Digest, true, true
			bl.prev, bl.hasPrev = a.Replica, a.HasPrev
		default: // pending
			pending = true
		}
	}
	return pending, nil
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

// settle ends the batch's elections with its first call: committed (with
// the refreshes it carried) if that call was accepted, else released.
func (e *elector) settle(ctx context.Context, eng *engine, box *ballotBox, err error) {
	if box.settled {
		return
	}
	box.settled = true
	if err != nil {
		e.release(ctx, eng, box, true)
		return
	}
	e.commit(ctx, eng, box)
	eng.tel.recordElections(ctx, box)
	eng.ended.broadcast()
}

// release gives up every election the batch took and the refreshes it
// carried, and, with wake, wakes the batches waiting for them.
func (e *elector) release(ctx context.Context, eng *engine, box *ballotBox, wake bool) {
	var keys []digest.Digest
	for i := range box.ballots {
		bl := &box.ballots[i]
		if bl.took {
			e.table.Release(bl.ref, box.token)
			if bl.inRedis {
				keys = append(keys, bl.ref.Key)
			}
		}
		if bl.refresh {
			e.table.DropRefresh(bl.ref, box.token)
			bl.refresh = false
		}
	}
	if len(keys) > 0 && eng.electTier != nil {
		if err := eng.electTier.ReleaseElections(context.WithoutCancel(ctx), box.redisToken, e.failover, keys); err != nil {
			eng.tierError.log(eng.now(), err, zap.String("op", redistier.OpRelease))
		}
	}
	if wake {
		eng.ended.broadcast()
	}
}

// commit commits the elections the batch took and the refreshes it
// carried: with a shared tier, in one round trip.
func (e *elector) commit(ctx context.Context, eng *engine, box *ballotBox) {
	box.asked, box.es = box.asked[:0], box.es[:0]
	for i := range box.ballots {
		bl := &box.ballots[i]
		if bl.took || bl.refresh {
			box.asked = append(box.asked, int32(i))
		}
	}
	start := eng.now()
	if eng.electTier == nil || len(box.asked) == 0 {
		for _, i := range box.asked {
			e.commitOne(box, i, start, e.failover)
		}
		return
	}
	for _, i := range box.asked {
		bl := &box.ballots[i]
		box.es = append(box.es, redistier.Election{Key: bl.ref.Key, Replica: bl.elected})
	}
	box.answers = resize(box.answers, len(box.es))
	if err := eng.electTier.CommitElected(context.WithoutCancel(ctx), box.redisToken, e.failover, box.es, box.answers); err != nil {
		// The data was delivered, and the shared tier retries the commit
		// until it lands or the lease ends. Until Redis says so, this
		// collector does not hold the elections as settled: were the
		// commit never to land, it would elect another replica than its
		// peers. The next batch of these clusters asks Redis again.
		eng.tierError.log(start, err, zap.String("op", redistier.OpCommit))
		for _, i := range box.asked {
			bl := &box.ballots[i]
			if bl.took {
				e.table.Release(bl.ref, box.token)
			}
			if bl.refresh {
				e.table.DropRefresh(bl.ref, box.token)
			}
		}
		return
	}
	for k, i := range box.asked {
		bl, a := &box.ballots[i], box.answers[k]
		if a.State == redistier.ElectionLive && a.Replica == bl.elected {
			e.commitOne(box, i, start, a.Remaining)
			continue
		}
		// Another replica or batch holds it: this batch's election was lost
		// (its lease ran out before the commit). Learn who holds it.
		if bl.took {
			e.table.Release(bl.ref, box.token)
		}
		if a.State == redistier.ElectionLive {
			e.table.Learn(bl.ref, box.replicaOf(i, a.Replica), a.Remaining, start)
		} else {
			e.table.Forget(bl.ref)
		}
	}
}

// commitOne commits in the local table the election ballot i took, or the
// refresh it carried, for remaining from now, and counts a new election.
func (e *elector) commitOne(box *ballotBox, i int32, now int64, remaining time.Duration) {
	bl := &box.ballots[i]
	if bl.took {
		committed, prev, hasPrev := e.table.Commit(bl.ref, box.token, now)
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
	e.table.Refreshed(bl.ref, box.replicaOf(i, bl.elected), box.token, remaining, now)
}

// admit is the identity walk's verdict of election on the data point at
// verdict index idx: true if the point goes on to the identity dedup
// (elected, or undecided), false if it is a duplicate of another replica
// (its verdict is then appended to b).
func (e *elector) admit(box *ballotBox, b *batch, idx int, action Action) bool {
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
	case bl.state == ballotUnavailable:
		box.undecided[undecidedUnavailable]++
		return true
	case vt.replica.Digest == bl.elected:
		if e.strip {
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
	b.duplicate(tierElection, action)
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
