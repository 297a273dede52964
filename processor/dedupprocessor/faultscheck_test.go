package dedupprocessor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/claim"
)

const (
	// faultTol is the timing noise the checks allow: -race on 2 busy cores.
	faultTol = 100 * time.Millisecond
	// faultCommitSlack bounds the time from an export's end to its commit
	// or release landing in Redis, when no fault hit the writes.
	faultCommitSlack = faultTimeout + faultTol
)

// The ops of claims, of elections, and of the writes that end or extend
// them.
var (
	claimOps = []string{"claim"}
	electOps = []string{"elect"}
	writeOps = []string{"commit", "renew", "release", "confirm", "unelect"}
)

// faultViolations collects what broke a promise, by promise.
type faultViolations struct {
	order []string
	by    map[string][]string
}

func (v *faultViolations) add(promise, format string, args ...any) {
	if v.by == nil {
		v.by = map[string][]string{}
	}
	if _, ok := v.by[promise]; !ok {
		v.order = append(v.order, promise)
	}
	v.by[promise] = append(v.by[promise], fmt.Sprintf(format, args...))
}

// check checks the run's promises and logs its summary, and its timeline
// if a promise broke.
func (r *faultRun) check() {
	r.mu.Lock()
	defer r.mu.Unlock()
	var v faultViolations
	r.checkAcknowledged(&v)
	stalls := r.checkRefusals(&v)
	copies := r.checkCopies(&v)
	r.checkCounters(&v)
	r.checkCensus(&v)
	r.checkProbes(&v)
	r.checkLayout(&v)
	r.checkSlots(&v)
	r.dump()
	r.t.Log(r.summary(stalls, copies))
	if len(v.order) == 0 {
		return
	}
	r.t.Log(r.timeline())
	for _, p := range v.order {
		msgs := v.by[p]
		shown := msgs[:min(len(msgs), 8)]
		r.t.Errorf("%s: %d times:\n  %s", p, len(msgs), strings.Join(shown, "\n  "))
	}
}

// dump logs every try and export of the run, with -faults.dump.
func (r *faultRun) dump() {
	if !*faultsDumpFlag && os.Getenv("FAULTS_DUMP") == "" {
		return
	}
	var b strings.Builder
	for _, a := range r.attempts {
		fmt.Fprintf(&b, "try %s %s-%s records %v: %v\n", a, r.rel(a.start), r.rel(a.end), a.records(), a.err)
	}
	for _, e := range r.exports {
		fmt.Fprintf(&b, "export %s call %d %s-%s records %v delivered %v\n", e.a, e.call, r.rel(e.start), r.rel(e.end), e.ids, e.delivered)
	}
	r.t.Log(b.String())
}

// rel is t on the run's clock, for messages.
func (r *faultRun) rel(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return fmt.Sprintf("%.3fs", t.Sub(r.start).Seconds())
}

func between(t, from, to time.Time) bool { return !t.Before(from) && !t.After(to) }

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// covers reports whether c's way to Redis goes through ep's target.
func (ep *faultEpisode) covers(c *collector) bool { return ep.scope == -1 || ep.scope == c.id }

// downOn describes a fault that made a call of one of ops (any op if ops is
// nil) fail on c's way to Redis between from and to, or kept Redis away
// then; "" if none did.
func (r *faultRun) downOn(c *collector, ops []string, from, to time.Time) string {
	for _, f := range r.firings {
		if f.down && f.ep.covers(c) && between(f.at, from, to) && (ops == nil || f.op == "" || slices.Contains(ops, f.op)) {
			return fmt.Sprintf("%s (%s) at %s", f.ep.kind, f.op, r.rel(f.at))
		}
	}
	for _, ep := range r.episodes {
		if ep.down && ep.covers(c) && !ep.from.After(to) && !ep.to.Before(from) {
			return fmt.Sprintf("%s at %s-%s", ep.kind, r.rel(ep.from), r.rel(ep.to))
		}
	}
	return ""
}

// breakerOpen describes a burst of faults after which c's breaker may
// have been open at t.
func (r *faultRun) breakerOpen(c *collector, t time.Time) string {
	for _, ep := range r.episodes {
		if ep.breaker && ep.covers(c) && between(t, ep.from, ep.to.Add(faultBreakerCooldown)) {
			return fmt.Sprintf("breaker open after %s at %s-%s", ep.kind, r.rel(ep.from), r.rel(ep.to))
		}
	}
	return ""
}

// delivered returns the exports the backend has, by event id, by start.
func (r *faultRun) delivered() map[int][]*faultExport {
	by := map[int][]*faultExport{}
	for _, e := range r.exports {
		if e.delivered {
			for _, id := range e.ids {
				by[id] = append(by[id], e)
			}
		}
	}
	for _, es := range by {
		slices.SortFunc(es, func(a, b *faultExport) int { return a.start.Compare(b.start) })
	}
	return by
}

// checkAcknowledged: every record of an acknowledged request was
// delivered; every point of an acknowledged scrape, by one replica or the
// other. Elections may drop an acknowledged point only once Redis lost
// them, or a collector's renewals failed for a lease: collectors then
// elect different replicas for a while.
func (r *faultRun) checkAcknowledged(v *faultViolations) {
	delivered := map[int]bool{}
	for _, e := range r.exports {
		if e.delivered {
			for _, id := range e.ids {
				delivered[r.pointOf(id)] = true
			}
		}
	}
	for _, a := range r.attempts {
		if a.err != nil {
			continue
		}
		for _, id := range a.records() {
			if delivered[r.pointOf(id)] {
				continue
			}
			// A scrape's point is dropped by one replica's copy on the word
			// of the other's election: both copies' tries tell.
			tries := r.triesOf(a.req)
			last := tries[0].end
			for _, t := range tries {
				if t.end.After(last) {
					last = t.end
				}
			}
			if r.signal == "metrics" && r.electionsSplit(tries[0].start.Add(-faultLease-faultTol), last) != "" {
				continue
			}
			var what []string
			for _, t := range tries {
				what = append(what, fmt.Sprintf("%s %s-%s: %v", t, r.rel(t.start), r.rel(t.end), t.err))
			}
			v.add("an acknowledged record was never delivered",
				"record %d: %s acknowledged at %s; the request's tries: %s", id, a, r.rel(a.end), strings.Join(what, "; "))
		}
	}
}

// triesOf returns the tries of every copy of req, by start.
func (r *faultRun) triesOf(req *faultRequest) []*faultAttempt {
	var tries []*faultAttempt
	for _, a := range r.attempts {
		if a.req == req {
			tries = append(tries, a)
		}
	}
	slices.SortFunc(tries, func(a, b *faultAttempt) int { return a.start.Compare(b.start) })
	return tries
}

// electionsSplit describes a fault between from and to after which
// collectors may hold different elections of one cluster: Redis lost its
// data, or a collector's renewals failed for a lease.
func (r *faultRun) electionsSplit(from, to time.Time) string {
	for _, ep := range r.episodes {
		if ep.dataLoss && !ep.from.After(to) || ep.leases && !ep.from.After(to) && !ep.to.Before(from) {
			return fmt.Sprintf("%s at %s", ep.kind, r.rel(ep.from))
		}
	}
	return ""
}

// checkProbes: a claim or election whose answer was lost, or that landed
// late, is not left pending once every request that could hold it was
// answered and its commit or release had time to land: it would stall
// every copy of its records, or its whole cluster, for the lease.
func (r *faultRun) checkProbes(v *faultViolations) {
	for _, p := range r.probes {
		if !p.pending {
			continue
		}
		what := "a claim"
		if p.f.op == "elect" {
			what = "an election"
		}
		lasted := "still pending three leases later"
		if !p.until.IsZero() {
			lasted = "pending until " + r.rel(p.until)
		}
		v.add(what+" whose answer was lost or late stayed pending after its request was answered",
			"%s (%s) sent at %s; every request in flight at its collector answered by %s; at %s its key %s was still pending (%s)",
			p.f.ep.kind, p.f.ep.detail, r.rel(p.f.at), r.rel(p.answered), r.rel(p.at), readableKey(p.f.key), lasted)
	}
}

// readableKey shows a status key with its binary token in hex.
func readableKey(key string) string {
	if i := strings.LastIndex(key, "claim:"); i >= 0 {
		return fmt.Sprintf("%s%x", key[:i+len("claim:")], key[i+len("claim:"):])
	}
	return fmt.Sprintf("%q", key)
}

// faultStalls sums up the stalls: runs of a copy's tries refused because
// another request was delivering one of its records, or deciding its
// cluster's election.
type faultStalls struct {
	count   int
	longest time.Duration
	what    string
}

// checkRefusals: every refused try had an injected cause, and every stall
// is explained by a claim of a request in flight, or of a collector that
// died within the lease.
func (r *faultRun) checkRefusals(v *faultViolations) faultStalls {
	for _, a := range r.attempts {
		switch {
		case a.err == nil:
		case a.died || errors.Is(a.err, errExporterFailed):
		case !a.c.downAt.IsZero() && !a.c.downAt.After(a.end):
			// Shut down under it.
		case errors.Is(a.err, claim.ErrSharedTier):
			why := r.downOn(a.c, nil, a.start.Add(-faultTol), a.end.Add(faultTol))
			if why == "" && strings.Contains(a.err.Error(), "circuit breaker open") {
				why = r.breakerOpen(a.c, a.end)
			}
			if why == "" {
				v.add("refused for the shared tier with no fault on its way to Redis",
					"%s, %s-%s: %v", a, r.rel(a.start), r.rel(a.end), a.err)
			}
		case errors.Is(a.err, claim.ErrInFlight):
			sharesRecord := func(ids []int) bool {
				for _, id := range ids {
					if slices.Contains(a.records(), id) {
						return true
					}
				}
				return false
			}
			held := func(e *faultExport) bool { return sharesRecord(e.ids) }
			if why := r.stallCause(a, held, func(h *faultAttempt) bool { return sharesRecord(h.records()) }); why == "" {
				v.add("refused for a pending claim that no request in flight or dead collector held (a stall)",
					"%s, %s-%s, records %v: %s%s", a, r.rel(a.start), r.rel(a.end), a.records(), r.lastExports(a, held), r.claimFaultsBefore(a, claimOps))
			}
		case errors.Is(a.err, errElectionInFlight):
			// An election is pending from its batch's lookup until its
			// first call to the exporter ends.
			sameCluster := func(h *faultAttempt) bool { return h.req.cluster == a.req.cluster }
			held := func(e *faultExport) bool { return e.call == 1 && sameCluster(e.a) }
			if why := r.stallCause(a, held, sameCluster); why == "" {
				v.add("refused for a pending election that no request in flight or dead collector held (a stall)",
					"%s, %s-%s, cluster c%d: %s%s", a, r.rel(a.start), r.rel(a.end), a.req.cluster, r.lastExports(a, held), r.claimFaultsBefore(a, electOps))
			}
		default:
			v.add("refused with an unexpected error", "%s, %s-%s: %v", a, r.rel(a.start), r.rel(a.end), a.err)
		}
	}
	// The stalls, for the summary: per copy, from the first of a run of
	// tries refused for pending claims to the try that ended it.
	var s faultStalls
	type copyKey struct{ req, copy int }
	began := map[copyKey]*faultAttempt{}
	for _, a := range r.attempts { // in answer order; a copy's tries are sequential
		k := copyKey{a.req.n, a.copy}
		if errors.Is(a.err, claim.ErrInFlight) || errors.Is(a.err, errElectionInFlight) {
			if began[k] == nil {
				began[k] = a
			}
			continue
		}
		if b := began[k]; b != nil {
			s.count++
			if d := a.end.Sub(b.start); d > s.longest {
				s.longest, s.what = d, fmt.Sprintf("request %d/%d from %s to %s", a.req.n, a.copy, r.rel(b.start), r.rel(a.end))
			}
			delete(began, k)
		}
	}
	return s
}

// stallCause says what held what a, refused at a.end, waited for (a
// record's claim, or its cluster's election; held tells the exports, and
// shares the tries, that could hold it): at its last look a claim was
// pending, which only a request in its claim or its export may hold (plus
// the commit's way to Redis), or a collector that died (for the lease), or
// one whose writes failed (until the writer's retries land, or the lease
// ends). "" if nothing did.
func (r *faultRun) stallCause(a *faultAttempt, held func(*faultExport) bool, shares func(*faultAttempt) bool) string {
	lastLook := a.end.Add(-claim.MaxPause - faultTol)
	for _, e := range r.exports {
		if e.a == a || !held(e) || e.start.Add(-faultTimeout-faultTol).After(a.end) {
			continue
		}
		if e.end.IsZero() {
			return fmt.Sprintf("in export of %s", e.a)
		}
		hold := faultCommitSlack
		if r.downOn(e.c, writeOps, e.end.Add(-faultTol), e.end.Add(faultLease)) != "" {
			hold = faultLease + faultTimeout + faultTol
		}
		if e.end.Add(hold).After(lastLook) {
			return fmt.Sprintf("in export of %s until %s", e.a, r.rel(e.end))
		}
	}
	for _, h := range r.attempts {
		// A first claim or election lasts at most the timeout, then its
		// release, which lands soon after its request is answered.
		if h != a && shares(h) && h.start.Before(a.end) && h.start.Add(faultTimeout+faultCommitSlack).After(lastLook) &&
			h.end.Add(faultCommitSlack).After(lastLook) {
			return fmt.Sprintf("taken by %s at %s", h, r.rel(h.start))
		}
	}
	for _, c := range r.collectors {
		if c.died && c.downAt.Before(a.end) && c.downAt.Add(faultLease+faultTimeout+faultTol).After(lastLook) {
			return fmt.Sprintf("collector %d died at %s", c.id, r.rel(c.downAt))
		}
	}
	return ""
}

// claimFaultsBefore lists the lost or late claims or elections (of ops)
// that could still have been pending at a's end, for a stall's message.
func (r *faultRun) claimFaultsBefore(a *faultAttempt, ops []string) string {
	var out []string
	for _, f := range r.firings {
		if f.down && slices.Contains(ops, f.op) && between(f.at, a.end.Add(-faultLease-3*faultTimeout), a.end) {
			out = append(out, fmt.Sprintf("%s (%s %s) at %s", f.ep.kind, f.op, f.ep.detail, r.rel(f.at)))
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "; before it: " + strings.Join(out, ", ")
}

// lastExports describes the export that could hold what a waited for and
// ended last before a's end, for a stall's message.
func (r *faultRun) lastExports(a *faultAttempt, held func(*faultExport) bool) string {
	var last *faultExport
	for _, e := range r.exports {
		if e.a != a && held(e) && e.start.Before(a.end) && (last == nil || e.end.After(last.end)) {
			last = e
		}
	}
	if last == nil {
		return "nothing it waited for was exported before"
	}
	return fmt.Sprintf("the last export of what it waited for: %s %s-%s", last.a, r.rel(last.start), r.rel(last.end))
}

// faultCopies counts the records delivered more than once, by cause.
type faultCopies struct {
	extra   int
	byCause map[string]int
}

// checkCopies: every record delivered twice had a cause the README lists,
// and the metric of that cause counted it.
func (r *faultRun) checkCopies(v *faultViolations) faultCopies {
	cp := faultCopies{byCause: map[string]int{}}
	// The counter counts records delivered unchecked; one such delivery
	// leaves no claim behind, so it explains the copy it is and the next.
	type delivery struct {
		e  *faultExport
		id int
	}
	var onlyUnchecked, either []string
	uncheckedDeliveries := map[delivery]bool{}
	type eitherCopy struct {
		d    delivery
		x    *faultExport
		what string
	}
	var eithers []eitherCopy
	lostClaims := map[*collector]map[*faultAttempt]bool{}
	for id, ds := range r.delivered() {
		for k := 1; k < len(ds); k++ {
			x, y := ds[k-1], ds[k]
			cp.extra++
			causes := r.copyCauses(id, x, y)
			if len(causes) == 0 {
				v.add("a record delivered twice without a listed cause",
					"record %d: delivered by %s (export %s-%s), again by %s (export %s-%s)%s",
					id, x.a, r.rel(x.start), r.rel(x.end), y.a, r.rel(y.start), r.rel(y.end), r.copyContext(x, y))
				continue
			}
			cp.byCause[causes[0]]++
			unchecked, lost := slices.Contains(causes, "unchecked"), slices.Contains(causes, "lease-ran-out") || slices.Contains(causes, "shutdown-in-flight")
			what := fmt.Sprintf("record %d (delivered %d times): %s (export %s), again by %s (export %s)", id, len(ds), x.a, r.rel(x.start), y.a, r.rel(y.start))
			switch {
			case slices.Contains(causes, "redis-data-lost"), slices.Contains(causes, "collector-killed"), slices.Contains(causes, "window-passed"):
				// Listed, and nothing alive can count them (nor should, once
				// the window passed).
			case unchecked && lost: // counted by one counter or the other
				eithers = append(eithers, eitherCopy{delivery{r.uncheckedOf(id, x, y), id}, x, what})
			case unchecked:
				d := delivery{r.uncheckedOf(id, x, y), id}
				if !uncheckedDeliveries[d] {
					uncheckedDeliveries[d] = true
					onlyUnchecked = append(onlyUnchecked, what)
				}
			default: // a lost claim, or one a shutdown left behind
				if lostClaims[x.c] == nil {
					lostClaims[x.c] = map[*faultAttempt]bool{}
				}
				lostClaims[x.c][x.a] = true
			}
		}
	}
	eitherClaims := map[*faultAttempt]bool{} // lost counts claims, unchecked records
	for _, c := range eithers {
		// Counted already: its unchecked delivery, or its claim as lost.
		if !uncheckedDeliveries[c.d] && !lostClaims[c.x.c][c.x.a] {
			either = append(either, c.what)
			eitherClaims[c.x.a] = true
		}
	}
	if r.signal == "metrics" {
		r.checkBothReplicas(v, &cp)
	}
	unchecked := int64(0)
	for _, c := range r.collectors {
		unchecked += c.unchecked()
	}
	if int64(len(onlyUnchecked)) > unchecked {
		v.add("copies delivered unchecked that the unchecked counter did not count",
			"%d copies explained only by Redis failing under on_error: pass; otelcol_processor_dedup_redis_unchecked counted %d records; the copies:\n    %s",
			len(onlyUnchecked), unchecked, strings.Join(onlyUnchecked, "\n    "))
	}
	spare := unchecked - int64(len(onlyUnchecked))
	for c, claims := range lostClaims {
		spare += max(0, c.lost()-int64(len(claims)))
	}
	for _, c := range r.collectors {
		if lostClaims[c] == nil {
			spare += c.lost()
		}
	}
	if len(eitherClaims) > 0 && int64(len(eitherClaims)) > spare {
		v.add("copies that neither the unchecked nor the lost counter counted",
			"%d copies, of the claims of %d requests, explained by Redis failing under on_error: pass or by lost claims; the counters had room for %d; the copies:\n    %s",
			len(either), len(eitherClaims), spare, strings.Join(either, "\n    "))
	}
	for c, claims := range lostClaims {
		if n := c.lost(); int64(len(claims)) > n {
			var which []string
			for a := range claims {
				which = append(which, a.String())
			}
			v.add("copies of lost claims that the lost counter did not count",
				"collector %d: copies of the claims of %d requests (%s) got through; it counted %d claims lost (redis_requests{result=\"lost\"})",
				c.id, len(claims), strings.Join(which, ", "), n)
		}
	}
	return cp
}

// faultFieldSize is the bytes of a digest a record's field holds.
const faultFieldSize = 11

// claimFailed describes a fault that failed the claim of record id by e's
// try before e: a claim command holding its field (a log record's; a point's
// key is not computed, so any claim of the try), or Redis as a whole.
func (r *faultRun) claimFailed(e *faultExport, id int) string {
	from, to := e.a.start.Add(-faultTol), e.start.Add(faultTol)
	if r.signal != "logs" {
		return r.downOn(e.c, claimOps, from, to)
	}
	field := r.field(id)
	for _, f := range r.firings {
		if !f.down || !f.ep.covers(e.c) || !between(f.at, from, to) {
			continue
		}
		if f.op == "" {
			return fmt.Sprintf("%s at %s", f.ep.kind, r.rel(f.at))
		}
		if f.op != "claim" {
			continue
		}
		for _, k := range f.fields {
			if k == field {
				return fmt.Sprintf("%s (claim) at %s", f.ep.kind, r.rel(f.at))
			}
		}
	}
	for _, ep := range r.episodes {
		if ep.down && ep.covers(e.c) && !ep.from.After(to) && !ep.to.Before(from) {
			return fmt.Sprintf("%s at %s-%s", ep.kind, r.rel(ep.from), r.rel(ep.to))
		}
	}
	return ""
}

// field returns the digest of event id as the shared tier's record hashes
// hold it (the digest's first faultFieldSize bytes: the tier's layout.go),
// from the processor's own identity of the record.
func (r *faultRun) field(id int) string {
	if k, ok := r.digests[id]; ok {
		return k
	}
	if r.identity == nil {
		set := processortest.NewNopSettings(componentType)
		p, err := newLogsProcessor(set.TelemetrySettings, set.ID, r.config(nil, faultSettings{window: r.window, slots: faultDefaultSlots}), consumertest.NewNop())
		if err != nil {
			r.t.Fatal(err)
		}
		r.identity, r.digests = p, map[int]string{}
	}
	p := r.identity
	d := firstDigest(r.t, func(b *claim.Batch) { p.Identify(context.Background(), b, events(id)) })
	b := d.Bytes()
	k := string(b[:faultFieldSize])
	r.digests[id] = k
	return k
}

// checkBothReplicas: a scrape's points delivered by both replicas had a
// cause: the elections were undecided (Redis failed under on_error: pass,
// counted), or collectors held different elections after Redis lost them,
// after renewals failed for a lease, after a collector holding one died, or
// after one shut down while the batch that held one was still exporting.
func (r *faultRun) checkBothReplicas(v *faultViolations, cp *faultCopies) {
	first := map[int]*[2]*faultExport{}
	for _, e := range r.exports {
		if !e.delivered {
			continue
		}
		for _, id := range e.ids {
			p := first[id/2]
			if p == nil {
				p = new([2]*faultExport)
				first[id/2] = p
			}
			if x := p[id%2]; x == nil || e.start.Before(x.start) {
				p[id%2] = e
			}
		}
	}
	var onlyUndecided []string
	for point, p := range first {
		if p[0] == nil || p[1] == nil {
			continue
		}
		x, y := p[0], p[1]
		if y.start.Before(x.start) {
			x, y = y, x
		}
		cp.extra++
		var causes []string
		if why := r.electionsSplit(x.a.start.Add(-faultLease-faultTol), y.start); why != "" {
			causes = append(causes, "elections-split")
		}
		if x.c.died && !x.c.downAt.After(y.start.Add(faultTol)) {
			causes = append(causes, "collector-killed")
		}
		if shutDownUnder(x, y) {
			causes = append(causes, "shutdown-in-flight")
		}
		if r.policy == ErrorPass {
			for _, e := range []*faultExport{x, y} {
				if r.downOn(e.c, electOps, e.a.start.Add(-faultTol), e.start.Add(faultTol)) != "" || r.breakerOpen(e.c, e.start) != "" ||
					!e.c.died && !e.c.downAt.IsZero() && between(e.c.downAt, e.a.start, e.start) {
					causes = append(causes, "undecided")
					break
				}
			}
		}
		if len(causes) == 0 {
			long := ""
			if x.call == 1 && x.end.Sub(x.start) > faultLease {
				long = fmt.Sprintf(" (the first call of replica %c's batch took %v, longer than the lease: its election was pending throughout)",
					'a'+x.ids[0]%2, x.end.Sub(x.start).Round(time.Millisecond))
			}
			v.add("a scrape's point delivered by both replicas without a listed cause",
				"point %d: replica %c's by %s (export %s-%s), replica %c's by %s (export %s-%s)%s%s",
				point, 'a'+x.ids[0]%2, x.a, r.rel(x.start), r.rel(x.end), 'a'+y.ids[0]%2, y.a, r.rel(y.start), r.rel(y.end), long, r.copyContext(x, y))
			continue
		}
		cp.byCause["both-replicas:"+causes[0]]++
		if len(causes) == 1 && causes[0] == "undecided" {
			onlyUndecided = append(onlyUndecided, fmt.Sprintf("point %d: %s, %s", point, x.a, y.a))
		}
	}
	undecided := int64(0)
	for _, c := range r.collectors {
		undecided += c.undecided()
	}
	if int64(len(onlyUndecided)) > undecided {
		v.add("points of both replicas delivered undecided that the undecided counter did not count",
			"%d points explained only by the election's lookup failing under on_error: pass; otelcol_processor_dedup_election_undecided{reason=\"unavailable\"} counted %d; the points:\n    %s",
			len(onlyUndecided), undecided, strings.Join(onlyUndecided, "\n    "))
	}
}

// copyCauses lists the causes, among those the README lists, that explain
// y delivering again record id, which x delivered first.
func (r *faultRun) copyCauses(id int, x, y *faultExport) []string {
	var causes []string
	// The record is remembered for the window of the collector that
	// committed it, from the commit on, which lands after x's export ended:
	// y claimed it later, a new record. Earlier, y had to be dropped, however
	// short y's collector's window.
	if !y.start.Add(faultTol).Before(x.end.Add(x.c.window)) {
		causes = append(causes, "window-passed")
	}
	for _, ep := range r.episodes {
		if ep.dataLoss && between(ep.from, x.start.Add(-faultTimeout-faultTol), y.start) {
			causes = append(causes, "redis-data-lost")
			break
		}
	}
	if x.c.died && !x.end.After(x.c.downAt.Add(faultTol)) && x.end.Add(faultCommitSlack).After(x.c.downAt) && !x.c.downAt.After(y.start.Add(faultTol)) {
		causes = append(causes, "collector-killed")
	}
	if r.uncheckedOf(id, x, y) != nil {
		causes = append(causes, "unchecked")
	}
	// x's claim ended before y claimed: a fault before y kept x's
	// renewals or commit from Redis.
	for _, ep := range r.episodes {
		if ep.leases && ep.covers(x.c) && !ep.from.After(earliest(x.end.Add(faultCommitSlack), y.start)) && !ep.to.Before(x.start) {
			causes = append(causes, "lease-ran-out")
			break
		}
	}
	if r.renewalsLost(x.c, x.start, earliest(x.end.Add(faultCommitSlack), y.start)) != "" {
		causes = append(causes, "lease-ran-out")
	}
	if shutDownUnder(x, y) {
		causes = append(causes, "shutdown-in-flight")
	}
	return causes
}

// uncheckedOf returns the first of x and y delivered on the local cache's
// word under on_error: pass (the claim of record id failed, its collector's
// breaker was open, or its collector was closing its tier), or nil.
func (r *faultRun) uncheckedOf(id int, x, y *faultExport) *faultExport {
	if r.policy != ErrorPass {
		return nil
	}
	for _, e := range []*faultExport{x, y} {
		if r.claimFailed(e, id) != "" || r.breakerOpen(e.c, e.start) != "" ||
			!e.c.died && !e.c.downAt.IsZero() && between(e.c.downAt, e.a.start, e.start) {
			return e
		}
	}
	return nil
}

// shutDownUnder reports whether x's collector began shutting down while x
// was in flight, before y: the drain waits a lease at most, then the tier
// closes and x's claims and elections lapse.
func shutDownUnder(x, y *faultExport) bool {
	return !x.c.died && !x.c.downAt.IsZero() && between(x.c.downAt, x.start.Add(-faultTol), earliest(x.end.Add(faultCommitSlack), y.start))
}

// copyContext describes what a copy's collectors went through, for its
// message.
func (r *faultRun) copyContext(x, y *faultExport) string {
	var out []string
	for _, e := range []*faultExport{x, y} {
		c := e.c
		switch {
		case c.died:
			out = append(out, fmt.Sprintf("collector %d died at %s", c.id, r.rel(c.downAt)))
		case !c.downAt.IsZero() && !c.downAt.After(e.end.Add(faultCommitSlack)):
			out = append(out, fmt.Sprintf("collector %d began shutting down at %s, with the batch in flight", c.id, r.rel(c.downAt)))
		}
		if why := r.downOn(c, nil, e.a.start.Add(-faultTol), e.end.Add(faultLease)); why != "" {
			out = append(out, fmt.Sprintf("collector %d: %s", c.id, why))
		}
	}
	if len(out) == 0 {
		return ""
	}
	return " (" + strings.Join(out, "; ") + ")"
}

// checkCounters: the unchecked and lost counters count only under faults
// that explain them.
func (r *faultRun) checkCounters(v *faultViolations) {
	for _, c := range r.collectors {
		if c.died {
			continue
		}
		end := c.downAt
		if end.IsZero() {
			end = time.Now()
		}
		// A tier closed under a batch (shutdown) fails its calls too.
		down := r.downOn(c, nil, c.started, end) != "" || !c.downAt.IsZero()
		if n := c.unchecked(); n > 0 && (r.policy == ErrorRefuse || !down) {
			v.add("records delivered unchecked with no fault on the way to Redis",
				"collector %d counted %d under on_error: %s", c.id, n, r.policy)
		}
		if n := c.undecided(); n > 0 && (r.policy == ErrorRefuse || !down) {
			v.add("points left undecided with no fault on the way to Redis",
				"collector %d counted %d under on_error: %s", c.id, n, r.policy)
		}
		if n := c.lost(); n > 0 && r.leaseCause(c, end) == "" {
			v.add("claims lost with no fault that kept Redis from renewing them for a lease",
				"collector %d counted %d lost (commit %d, renew %d, release %d); faults on its way: %s",
				c.id, n, c.h.redisRequests("commit", "lost"), c.h.redisRequests("renew", "lost"), c.h.redisRequests("release", "lost"), r.faultsOn(c))
		}
	}
}

// renewalsLost describes two renewals of c lost within a lease, between
// from and to: with a lease of three timeouts, a claim outlives it then.
func (r *faultRun) renewalsLost(c *collector, from, to time.Time) string {
	var last time.Time
	for _, f := range r.firings {
		if !f.down || f.op != "renew" || !f.ep.covers(c) || !between(f.at, from.Add(-faultLease), to) {
			continue
		}
		if !last.IsZero() && f.at.Sub(last) <= faultLease && f.at.Sub(last) > faultTol {
			return fmt.Sprintf("renewals lost at %s and %s", r.rel(last), r.rel(f.at))
		}
		last = f.at
	}
	return ""
}

// leaseCause describes a fault that may make c's claims outlive their
// lease, or forget them. Under on_error: pass, a claim whose answer was
// lost is delivered unchecked and then committed and renewed like any
// other: if it never reached Redis, or claimed nothing there, its commit
// and renewals find nothing and count it lost.
func (r *faultRun) leaseCause(c *collector, end time.Time) string {
	for _, ep := range r.episodes {
		if (ep.leases || ep.dataLoss) && ep.covers(c) || ep.collector == c {
			return ep.kind
		}
	}
	if why := r.renewalsLost(c, c.started, end); why != "" {
		return why
	}
	if r.policy == ErrorPass {
		return r.downOn(c, claimOps, c.started, end)
	}
	return ""
}

// faultsOn lists the faults that hit c's way to Redis.
func (r *faultRun) faultsOn(c *collector) string {
	var out []string
	for _, f := range r.firings {
		if f.ep.covers(c) && f.down {
			out = append(out, fmt.Sprintf("%s %s at %s", f.ep.kind, f.op, r.rel(f.at)))
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// checkCensus: the proxies told every script of the tier apart, and the
// run made the claims and commits the faults aim at.
func (r *faultRun) checkCensus(v *faultViolations) {
	if n := r.census["script"]; n > 0 {
		v.add("scripts the tier does not have", "%d: update tierOps to the tier's scripts", n)
	}
	for _, op := range []string{"claim", "commit"} {
		if r.census[op] == 0 {
			v.add("tier commands never seen", "no %s went through the proxies", op)
		}
	}
}

func (r *faultRun) summary(s faultStalls, cp faultCopies) string {
	acked, refused, died := 0, 0, 0
	for _, a := range r.attempts {
		switch {
		case a.err == nil:
			acked++
		case a.died:
			died++
		default:
			refused++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, %s, on_error: %s: %d tries: %d acknowledged, %d refused, %d at a collector that died; %d copies given up\n",
		r.seed, r.env.topology, r.policy, len(r.attempts), acked, refused, died, len(r.gaveUp))
	fmt.Fprintf(&b, "  exports %d; records delivered twice or more: %d extra deliveries %v\n", len(r.exports), cp.extra, cp.byCause)
	fmt.Fprintf(&b, "  stalls %d, longest %v (%s)\n", s.count, s.longest.Round(time.Millisecond), s.what)
	fmt.Fprintf(&b, "  tier commands %v\n", r.census)
	long, longCopies := 0, 0
	for _, e := range r.exports {
		if e.long {
			long++
		}
	}
	for _, a := range r.attempts {
		if errors.Is(a.err, claim.ErrInFlight) || errors.Is(a.err, errElectionInFlight) {
			for _, e := range r.exports {
				if e.long && e.start.Before(a.end) && (e.end.IsZero() || e.end.After(a.start)) && slices.ContainsFunc(e.ids, func(id int) bool { return slices.Contains(a.records(), id) }) {
					longCopies++
					break
				}
			}
		}
	}
	fmt.Fprintf(&b, "  scenarios: %s; window %v; exports longer than the window %d, tries refused while one held their records %d\n", r.scenarios(), r.window, long, longCopies)
	fmt.Fprintf(&b, "  redis at the end: %d groups, %d shards, %d records\n", r.layout.groups, r.layout.shards, r.layout.records)
	for _, c := range r.collectors {
		fmt.Fprintf(&b, "  collector %d (slot %d, window %v, cluster_slots %d, up %s-%s): unchecked %d, lost %d, released %d; redis requests %s\n", c.id, c.slot, c.window, c.slots, r.rel(c.started), r.rel(c.downAt),
			c.unchecked(), c.lost(), c.counter("otelcol_processor_dedup_released"), c.requests())
	}
	return b.String()
}

// timeline lists the faults as they happened, and the collectors' warnings.
func (r *faultRun) timeline() string {
	var b strings.Builder
	b.WriteString("faults:\n")
	for _, ep := range r.episodes {
		var fired []string
		for _, f := range r.firings {
			if f.ep == ep {
				fired = append(fired, fmt.Sprintf("%s@%s", f.op, r.rel(f.at)))
			}
		}
		fmt.Fprintf(&b, "  %s-%s %s scope %d node %d %s fired %v\n", r.rel(ep.from), r.rel(ep.to), ep.kind, ep.scope, ep.node, ep.detail, fired)
	}
	for _, c := range r.collectors {
		for _, l := range c.logs.All() {
			if l.Level >= 1 { // warnings and errors
				fmt.Fprintf(&b, "  collector %d at %s: %s %v\n", c.id, r.rel(l.Time), l.Message, l.ContextMap())
			}
		}
	}
	return b.String()
}

// faultLayout is what Redis held under the run's key prefix at its end:
// each group's shape, and its record hashes' fields.
type faultLayout struct {
	groups, shards, records int
	misplaced               []string // fields in a hash their group's shape does not name for them
	overfull                []string // groups holding more records than their shards are split for
	err                     error
}

// readLayout reads the layout the run left in Redis, once every collector
// is shut down.
func (r *faultRun) readLayout() {
	ctx, cancel := context.WithTimeout(context.Background(), faultHang)
	defer cancel()
	var keys []string
	var mu sync.Mutex
	scan := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, r.prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			keys = append(keys, iter.Val())
			mu.Unlock()
		}
		return iter.Err()
	}
	var err error
	switch c := r.env.client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, c)
	}
	// The groups: KeyPrefix, the tag in a Cluster, the layout's version.
	type group struct {
		shape  *redis.SliceCmd
		hashes map[string]*redis.StringSliceCmd // by shard, in hex
	}
	groups := map[string]*group{}
	pipe := r.redis().Pipeline()
	for _, k := range keys {
		rest := strings.TrimPrefix(k, r.prefix)
		g := r.prefix
		if strings.HasPrefix(rest, "{") {
			i := strings.Index(rest, "}")
			if i < 0 {
				continue
			}
			g, rest = g+rest[:i+1], rest[i+1:]
		}
		rest, ok := strings.CutPrefix(rest, "3:")
		if !ok || rest != "s" && !strings.HasPrefix(rest, "h") {
			continue
		}
		g += "3:"
		if groups[g] == nil {
			groups[g] = &group{shape: pipe.HMGet(ctx, g+"s", "L", "p", "n"), hashes: map[string]*redis.StringSliceCmd{}}
		}
		if shard, ok := strings.CutPrefix(rest, "h"); ok {
			groups[g].hashes[shard] = pipe.HKeys(ctx, k)
		}
	}
	if len(groups) > 0 {
		_, perr := pipe.Exec(ctx)
		err = errors.Join(err, perr)
	}
	l := faultLayout{groups: len(groups), err: err}
	num := func(v any) uint64 {
		s, _ := v.(string)
		n, _ := strconv.ParseUint(s, 10, 64)
		return n
	}
	for name, g := range groups {
		shape := g.shape.Val()
		if len(shape) != 3 {
			continue
		}
		level, split, n := num(shape[0]), num(shape[1]), num(shape[2])
		low := uint64(1) << level
		l.shards += int(low + split)
		if n > 32*(low+split) {
			l.overfull = append(l.overfull, fmt.Sprintf("%s: %d records counted in %d shards (L %d, p %d)", name, n, low+split, level, split))
		}
		for shard, cmd := range g.hashes {
			for _, f := range cmd.Val() {
				if f == "" { // the roll mark
					continue
				}
				l.records++
				if len(f) != faultFieldSize {
					l.misplaced = append(l.misplaced, fmt.Sprintf("%sh%s: a field of %d bytes", name, shard, len(f)))
					continue
				}
				h := uint64(f[7])<<24 | uint64(f[8])<<16 | uint64(f[9])<<8 | uint64(f[10])
				s := h % low
				if s < split {
					s = h % (2 * low)
				}
				if want := strconv.FormatUint(s, 16); want != shard {
					l.misplaced = append(l.misplaced, fmt.Sprintf("%sh%s holds %x, whose shard is %s (L %d, p %d)", name, shard, f, want, level, split))
				}
			}
		}
	}
	r.mu.Lock()
	r.layout = l
	r.mu.Unlock()
}

// checkLayout: every record Redis held at the end was in the hash its
// group's shape names for it (a record elsewhere is invisible to every
// claim: its copies get through), and each group was split for the records
// it counted.
func (r *faultRun) checkLayout(v *faultViolations) {
	l := r.layout
	if l.err != nil {
		r.t.Logf("reading the layout in Redis: %v", l.err)
	}
	if len(l.misplaced) > 0 {
		v.add("records in a hash their group's shape does not name for them", "%d: %s", len(l.misplaced), strings.Join(l.misplaced[:min(len(l.misplaced), 8)], "; "))
	}
	if len(l.overfull) > 0 {
		v.add("groups holding more records than their shards are split for", "%s", strings.Join(l.overfull, "; "))
	}
}

// checkSlots: on a Cluster, a collector whose redis.cluster_slots differs
// from the layout's (the first collector's, unless Redis lost it) says so
// once it reaches Redis, and uses the layout's (its copies are checked as
// any other's); one whose does not, says nothing.
func (r *faultRun) checkSlots(v *faultViolations) {
	if r.env.cluster == nil {
		return
	}
	for _, ep := range r.episodes {
		if ep.dataLoss {
			return // the layout may have been written anew, by any collector
		}
	}
	for _, c := range r.collectors {
		if c.logs.FilterMessageSnippet("dedup: shared tier connected").Len() == 0 {
			continue
		}
		said := c.logs.FilterMessageSnippet("another number of hash tags than redis.cluster_slots").Len()
		switch {
		case c.slots != faultDefaultSlots && said != 1:
			v.add("a collector with another redis.cluster_slots than the layout's did not say so once",
				"collector %d (cluster_slots %d, the layout's %d) said it %d times", c.id, c.slots, faultDefaultSlots, said)
		case c.slots == faultDefaultSlots && said != 0:
			v.add("a collector with the layout's redis.cluster_slots said it differs",
				"collector %d (cluster_slots %d) said it %d times", c.id, c.slots, said)
		}
	}
}
