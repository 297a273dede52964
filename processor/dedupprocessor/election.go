package dedupprocessor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/claim"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/election"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/identity"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/redistier"
)

// Replica election (metrics.replica_election; see the README) runs before the
// batch's life (internal/claim/consume.go) and follows its discipline: an election a batch
// takes is pending until its first call is delivered (committed) or refused
// (released), and a batch never waits holding one. With a shared tier, Redis is
// the truth, cached until each failover deadline.

// errElectionInFlight: another batch's pending election outlasted
// pending_wait: this batch's points can be neither delivered nor dropped.
var errElectionInFlight = errors.New("dedup: the replica election of a cluster in this batch is still being decided by another batch in flight; retry later")

// The undecided counter's reasons.
const (
	undecidedMissingLabel = iota
	undecidedClusterLimit
	undecidedUnavailable
	numUndecidedReasons
)

var undecidedNames = [numUndecidedReasons]string{"missing_label", "cluster_limit", "unavailable"}

// The elections counter's reasons.
const (
	electionNew = iota
	electionFailover
	numElectionReasons
)

var electionReasonNames = [numElectionReasons]string{"new", "failover"}

// dataPoint is what every point type offers the identity.
type dataPoint interface {
	Attributes() pcommon.Map
	StartTimestamp() pcommon.Timestamp
	Timestamp() pcommon.Timestamp
	Flags() pmetric.DataPointFlags
}

// pointSlice is what every point slice type offers the walk.
type pointSlice[P dataPoint] interface {
	Len() int
	At(int) P
	RemoveIf(func(P) bool)
}

// elector is a metrics processor's replica election, settled with the batch's
// first call.
type elector struct {
	cfg    *Config
	ec     *ElectionConfig
	table  *election.Table
	rounds *claim.Rounds     // the engine's: an election takes its turns with the claims
	tier   *claim.SharedTier // nil: local only
	boxes  sync.Pool

	elections     metric.Int64Counter
	electionOpts  [numElectionReasons]metric.AddOption
	undecided     metric.Int64Counter
	undecidedOpts [numUndecidedReasons]metric.AddOption
}

func newElectionTable(ec *ElectionConfig) *election.Table {
	return election.New(election.Config{
		UpdateInterval:  ec.UpdateInterval,
		UpdateJitter:    ec.UpdateJitter,
		FailoverTimeout: ec.FailoverTimeout,
		MaxClusters:     ec.MaxClusters,
	})
}

func newElector(cfg *Config, ec *ElectionConfig, table *election.Table, rounds *claim.Rounds, tier *claim.SharedTier, meter metric.Meter, base series) (*elector, error) {
	e := &elector{
		cfg: cfg, ec: ec, table: table, rounds: rounds, tier: tier,
		boxes: sync.Pool{New: func() any { return new(ballotBox) }},
	}
	var err, errU error
	e.elections, err = meter.Int64Counter("otelcol_processor_dedup_elections", metric.WithUnit("{elections}"),
		metric.WithDescription("Replicas elected for a cluster by a delivered batch, by reason: new (no other replica held the cluster), failover (took over from another replica whose election had expired)."))
	e.undecided, errU = meter.Int64Counter("otelcol_processor_dedup_election_undecided", metric.WithUnit("{records}"),
		metric.WithDescription("Data points replica election did not decide, by reason: missing_label (no cluster or replica label), cluster_limit (the tenant's max_clusters was reached), unavailable (the shared tier failed under on_error: pass); they go on to the identity dedup."))
	labelled(base, e.electionOpts[:], "reason", electionReasonNames[:])
	labelled(base, e.undecidedOpts[:], "reason", undecidedNames[:])
	return e, errors.Join(err, errU)
}

// ballotBox is a batch's elections: ballots per cluster, votes per replica,
// each point's vote.
type ballotBox struct {
	ec            *ElectionConfig
	token         uint64
	redisToken    string
	tenant        election.Tenant
	ballots       []ballot
	order         []int32 // the ballots by election key: the order they are decided in
	votes         []vote
	points        []pointVote
	lastVote      int32
	stripResource bool // in apply: an elected point has its resource's replica label

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
	candidate election.Replica // the cluster's first replica in the batch
	state     ballotState
	elected   digest.Digest
	inRedis   bool // the batch may hold it pending in the shared tier (taken, or the answer lost)
	prev      digest.Digest
	hasPrev   bool
	refresh   bool // the batch carries the election's refresh
}

// ballotState is where a batch's ballot stands.
type ballotState uint8

const (
	ballotOpen        ballotState = iota // not decided yet
	ballotElected                        // a committed election: elected is its replica
	ballotTaken                          // taken for the candidate by this batch, pending until it settles
	ballotOverLimit                      // the tenant's max_clusters was reached: undecided
	ballotUnavailable                    // the shared tier failed (on_error: pass): undecided
)

type vote struct {
	ballot  int32
	replica election.Replica
}

// pointVote is a point's vote (noVote: no labels) and whether its label is
// its resource's.
type pointVote struct {
	vote     int32
	resource bool
}

const noVote = -1

func (e *elector) put(box *ballotBox) {
	const maxRetained = 64 << 10
	if cap(box.points) > maxRetained {
		box.points = nil
	}
	*box = ballotBox{
		ballots: box.ballots[:0], order: box.order[:0], votes: box.votes[:0], points: box.points[:0],
		asked: box.asked[:0], es: box.es[:0], answers: box.answers[:0],
	}
	e.boxes.Put(box)
}

// labelValue returns the string value of attribute name in m; "" is none.
func labelValue(m pcommon.Map, name string) string {
	if v, ok := m.Get(name); ok {
		return v.AsString()
	}
	return ""
}

// scan is the first pass: each point's labels and vote.
func (e *elector) scan(ctx context.Context, cfg *Config, box *ballotBox, enc *identity.Encoder, md pmetric.Metrics) {
	box.tenant, _ = tenantDigest(ctx, cfg, enc)
	box.lastVote = noVote
	for _, rm := range md.ResourceMetrics().All() {
		res := rm.Resource().Attributes()
		cluster, replica := labelValue(res, e.ec.ClusterLabel), labelValue(res, e.ec.ReplicaLabel)
		for _, sm := range rm.ScopeMetrics().All() {
			for _, m := range sm.Metrics().All() {
				switch m.Type() {
				case pmetric.MetricTypeGauge:
					scanPoints(e, box, enc, m.Gauge().DataPoints(), cluster, replica)
				case pmetric.MetricTypeSum:
					scanPoints(e, box, enc, m.Sum().DataPoints(), cluster, replica)
				case pmetric.MetricTypeHistogram:
					scanPoints(e, box, enc, m.Histogram().DataPoints(), cluster, replica)
				case pmetric.MetricTypeExponentialHistogram:
					scanPoints(e, box, enc, m.ExponentialHistogram().DataPoints(), cluster, replica)
				case pmetric.MetricTypeSummary:
					scanPoints(e, box, enc, m.Summary().DataPoints(), cluster, replica)
				}
			}
		}
	}
}

func scanPoints[P dataPoint](e *elector, box *ballotBox, enc *identity.Encoder, points pointSlice[P], resCluster, resReplica string) {
	for i := 0; i < points.Len(); i++ {
		attrs := points.At(i).Attributes()
		cluster := cmp.Or(labelValue(attrs, e.ec.ClusterLabel), resCluster)
		pv := pointVote{vote: noVote}
		replica := labelValue(attrs, e.ec.ReplicaLabel)
		if replica == "" {
			replica, pv.resource = resReplica, true
		}
		if cluster != "" && replica != "" {
			pv.vote = box.voteOf(enc, cluster, replica)
		}
		box.points = append(box.points, pv)
	}
}

// voteOf returns the vote for (cluster, replica), adding it (and its ballot) if
// new; the last vote goes first: a resource's points mostly share labels.
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
	enc.Reset()
	enc.Raw([]byte{'R'})
	enc.String(replica)
	rep := election.Replica{Digest: enc.Digest(), Name: replica}
	if b < 0 {
		enc.Reset() // the election's key: the tenant and the cluster
		enc.Raw([]byte{'E'})
		enc.Raw(box.tenant[:])
		enc.String(cluster)
		b = int32(len(box.ballots))
		box.ballots = append(box.ballots, ballot{
			ref:       election.Ref{Tenant: box.tenant, Key: enc.Digest(), Cluster: cluster},
			candidate: rep,
		})
	}
	box.votes = append(box.votes, vote{ballot: b, replica: rep})
	box.lastVote = int32(len(box.votes) - 1)
	return box.lastVote
}

// elect scans and decides a batch's elections; on error it holds none.
func (e *elector) elect(ctx context.Context, md pmetric.Metrics) (*ballotBox, error) {
	box := e.boxes.Get().(*ballotBox)
	box.ec = e.ec
	enc := encoderPool.Get().(*identity.Encoder)
	e.scan(ctx, e.cfg, box, enc, md)
	encoderPool.Put(enc)
	if len(box.ballots) == 0 {
		return box, nil
	}
	box.token = e.rounds.NextToken()
	if e.tier != nil {
		box.redisToken = redistier.NewToken(box.token)
	}
	if err := e.decide(ctx, box); err != nil {
		e.put(box)
		return nil, err
	}
	// One batch in flight carries each due refresh.
	now := e.rounds.Now()
	for i := range box.votes {
		vt := &box.votes[i]
		bl := &box.ballots[vt.ballot]
		if bl.state == ballotElected && !bl.refresh && vt.replica.Digest == bl.elected {
			bl.refresh = e.table.TakeRefresh(bl.ref, vt.replica, box.token, now)
		}
	}
	return box, nil
}

// decide decides every ballot one at a time in key order, the same everywhere.
// Meeting another batch's pending election, it gives up those it took, waits
// holding none and asks again: as with rechecks (internal/claim/consume.go), the batch that took
// the furthest is never stopped.
func (e *elector) decide(ctx context.Context, box *ballotBox) error {
	box.order = box.order[:0]
	for i := range box.ballots {
		box.order = append(box.order, int32(i))
	}
	slices.SortFunc(box.order, func(i, j int32) int { return box.ballots[i].ref.Key.Compare(box.ballots[j].ref.Key) })
	var w *claim.Wait
	for {
		pending := false
		for _, i := range box.order {
			bl := &box.ballots[i]
			if bl.state != ballotOpen {
				continue
			}
			d := e.table.Decide(bl.ref, bl.candidate, box.token, e.rounds.Now(), e.tier == nil)
			switch d.State {
			case election.Elected:
				bl.state, bl.elected = ballotElected, d.Replica
			case election.Taken:
				bl.state, bl.elected = ballotTaken, d.Replica
			case election.OverLimit:
				bl.state = ballotOverLimit
			case election.Unknown:
				p, err := e.ask(ctx, box, i)
				if err != nil {
					e.release(ctx, box, false, true)
					e.rounds.Settled()
					return err
				}
				pending = p
			default: // Pending
				pending = true
			}
			if pending {
				break
			}
		}
		if !pending {
			if w != nil {
				w.Done(ctx)
			}
			return nil
		}
		// Waking nobody, as await: batches waiting for each other would wake
		// each other forever.
		e.release(ctx, box, false, true)
		for i := range box.ballots {
			if bl := &box.ballots[i]; bl.state == ballotTaken {
				bl.state, bl.inRedis, bl.hasPrev = ballotOpen, false, false
			}
		}
		// The release left a marker for the batch's token, so that a late
		// election of it takes nothing: the elections after the wait are
		// taken under a token of their own.
		box.token = e.rounds.NextToken()
		if e.tier != nil {
			box.redisToken = redistier.NewToken(box.token)
		}
		if w == nil {
			w = e.rounds.BeginWait()
		}
		if err := w.Pause(ctx, e.rounds.Now(), errElectionInFlight); err != nil {
			return err
		}
	}
}

// ask asks the shared tier about ballot i and reports whether another batch
// holds it pending. A lost answer may leave it taken under the batch's token,
// released with the batch; the ballot is then undecided under on_error: pass (a
// gateway deciding alone could elect another replica than its peers, each
// dropping the other's points), and the batch refused under refuse.
func (e *elector) ask(ctx context.Context, box *ballotBox, i int32) (pending bool, err error) {
	bl := &box.ballots[i]
	start := e.rounds.Now()
	a, err := e.tier.Elect(ctx, box.redisToken, e.ec.FailoverTimeout, redistier.Election{Key: bl.ref.Key, Replica: bl.candidate.Digest})
	switch a.State {
	case redistier.ElectionUnknown:
		bl.inRedis = true
		e.tier.Failed(start, err, zap.String("on_error", string(e.cfg.Redis.Get().OnError)))
		if e.tier.Refuses() || ctx.Err() != nil {
			return false, fmt.Errorf("%w: %w", claim.ErrSharedTier, err)
		}
		bl.state = ballotUnavailable
	case redistier.ElectionLive:
		e.table.Learn(bl.ref, box.replicaOf(i, a.Replica), a.Remaining, start)
		bl.state, bl.elected = ballotElected, a.Replica
	case redistier.ElectionTaken:
		e.table.Hold(bl.ref, bl.candidate, box.token)
		bl.state, bl.elected, bl.inRedis = ballotTaken, bl.candidate.Digest, true
		bl.prev, bl.hasPrev = a.Replica, a.HasPrev
	default: // pending
		return true, nil
	}
	return false, nil
}

// replicaOf returns the replica of d, named if one of ballot i's votes is.
func (box *ballotBox) replicaOf(i int32, d digest.Digest) election.Replica {
	for _, vt := range box.votes {
		if vt.ballot == i && vt.replica.Digest == d {
			return vt.replica
		}
	}
	return election.Replica{Digest: d}
}

// settle commits the batch's elections and refreshes if its first call
// passed, else releases them.
func (e *elector) settle(ctx context.Context, box *ballotBox, err error) {
	if err != nil {
		e.release(ctx, box, false, true)
	} else {
		e.commit(ctx, box)
		addEach(ctx, e.undecided, box.undecided[:], e.undecidedOpts[:])
		addEach(ctx, e.elections, box.elections[:], e.electionOpts[:])
	}
	e.rounds.Settled()
}

// release gives up the batch's elections and refreshes (with undecidedOnly, the
// undecided ones) in the table and, with shared, in the shared tier.
func (e *elector) release(ctx context.Context, box *ballotBox, undecidedOnly, shared bool) {
	var es []redistier.Election
	for i := range box.ballots {
		bl := &box.ballots[i]
		if undecidedOnly && bl.state != ballotUnavailable {
			continue
		}
		if bl.state == ballotTaken || bl.refresh {
			e.table.Release(bl.ref, box.token)
		}
		if bl.inRedis {
			es = append(es, redistier.Election{Key: bl.ref.Key})
			bl.inRedis = false
		}
		bl.refresh = false
	}
	if shared && len(es) > 0 {
		if err := e.tier.ReleaseElections(context.WithoutCancel(ctx), box.redisToken, e.ec.FailoverTimeout, es); err != nil {
			e.tier.Failed(e.rounds.Now(), err, zap.String("op", redistier.OpRelease))
		}
	}
}

// commit commits the batch's elections and refreshes, in one round trip with a
// shared tier, whose answers the table follows; undecided ones are released.
func (e *elector) commit(ctx context.Context, box *ballotBox) {
	e.release(ctx, box, true, true)
	box.asked, box.es = box.asked[:0], box.es[:0]
	for i := range box.ballots {
		if bl := &box.ballots[i]; bl.state == ballotTaken || bl.refresh {
			box.asked = append(box.asked, int32(i))
			box.es = append(box.es, redistier.Election{Key: bl.ref.Key, Replica: bl.elected})
		}
	}
	if len(box.asked) == 0 {
		return
	}
	box.answers = slices.Grow(box.answers[:0], len(box.es))[:len(box.es)]
	start := e.rounds.Now()
	if e.tier == nil {
		for k, el := range box.es {
			box.answers[k] = redistier.ElectionAnswer{State: redistier.ElectionLive, Replica: el.Replica, Remaining: e.ec.FailoverTimeout}
		}
	} else if err := e.tier.CommitElected(context.WithoutCancel(ctx), box.redisToken, e.ec.FailoverTimeout, box.es, box.answers); err != nil {
		// The tier retries the commit; until Redis confirms, the table holds
		// none of these (a lost commit would elect another replica than peers).
		e.tier.Failed(start, err, zap.String("op", redistier.OpCommit))
		e.release(ctx, box, false, false)
		return
	}
	for k, i := range box.asked {
		bl, a := &box.ballots[i], box.answers[k]
		if a.State == redistier.ElectionLive && a.Replica == bl.elected {
			committed, prev, hasPrev := e.table.Commit(bl.ref, box.replicaOf(i, bl.elected), box.token, a.Remaining, start)
			if bl.hasPrev { // the shared tier's word on the replaced replica
				prev, hasPrev = bl.prev, true
			}
			switch {
			case committed && hasPrev && prev != bl.elected:
				box.elections[electionFailover]++
			case committed:
				box.elections[electionNew]++
			}
			continue
		}
		// Lost (its lease ran out before the commit): learn who holds it.
		e.table.Release(bl.ref, box.token)
		if a.State == redistier.ElectionLive {
			e.table.Learn(bl.ref, box.replicaOf(i, a.Replica), a.Remaining, start)
		} else {
			e.table.Forget(bl.ref)
		}
	}
}

// admit reports whether the batch's next point goes on to the dedup (elected or
// undecided), else appends a duplicate.
func (box *ballotBox) admit(b *claim.Batch) bool {
	vt, bl := box.voteAt(b.Len())
	switch {
	case vt == nil:
		box.undecided[undecidedMissingLabel]++
	case bl.state == ballotOverLimit:
		box.undecided[undecidedClusterLimit]++
	case bl.state == ballotUnavailable:
		box.undecided[undecidedUnavailable]++
	case vt.replica.Digest == bl.elected:
		if box.ec.RemoveReplicaLabel {
			b.Alters = true
		}
	default:
		b.Duplicate(claim.ByElection, claim.UnknownAge)
		return false
	}
	return true
}

// elected reports whether point idx is the elected replica's, and whether its
// label is the resource's.
func (box *ballotBox) elected(idx int) (elected, resource bool) {
	vt, bl := box.voteAt(idx)
	return vt != nil && (bl.state == ballotElected || bl.state == ballotTaken) && vt.replica.Digest == bl.elected, box.points[idx].resource
}

// voteAt returns the vote of the point at verdict index idx and its ballot,
// or nils.
func (box *ballotBox) voteAt(idx int) (*vote, *ballot) {
	v := box.points[idx].vote
	if v == noVote {
		return nil, nil
	}
	return &box.votes[v], &box.ballots[box.votes[v].ballot]
}
