package dedupprocessor

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

const (
	// faultTol is the timing noise the checks allow: -race on 2 busy cores.
	faultTol = 100 * time.Millisecond
	// faultCommitSlack bounds the time from an export's end to its commit
	// or release landing in Redis, when no fault hit the writes.
	faultCommitSlack = faultTimeout + faultTol
	// faultBreakerMemory: a collector whose calls failed may skip Redis
	// this long after (the breaker's cooldown doubles up to a minute).
	faultBreakerMemory = time.Minute
)

// The ops of claims, and of the writes that end or extend them.
var (
	claimOps = []string{"claim"}
	writeOps = []string{"commit", "renew", "release"}
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
	r.checkLateClaims(&v)
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
		fmt.Fprintf(&b, "try %s %s-%s records %v: %v\n", a, r.rel(a.start), r.rel(a.end), a.req.ids, a.err)
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

// skippedRedis reports whether c's breaker may have been open at t: c
// counted calls skipped, and some call of c failed before t.
func (r *faultRun) skippedRedis(c *collector, t time.Time) string {
	skipped := int64(0)
	for _, op := range []string{"claim", "recheck"} {
		skipped += c.h.redisRequests(op, "skipped")
	}
	if skipped == 0 {
		return ""
	}
	if why := r.downOn(c, nil, t.Add(-faultBreakerMemory), t); why != "" {
		return "breaker open after " + why
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

// checkAcknowledged: every record of an acknowledged request was delivered.
func (r *faultRun) checkAcknowledged(v *faultViolations) {
	delivered := r.delivered()
	for _, a := range r.attempts {
		if a.err != nil {
			continue
		}
		for _, id := range a.req.ids {
			if len(delivered[id]) == 0 {
				v.add("an acknowledged record was never delivered",
					"record %d: %s acknowledged at %s", id, a, r.rel(a.end))
			}
		}
	}
}

// checkLateClaims: a claim that lands after its request was answered (it
// was released, or committed before it landed) must not stay pending: it
// would stall every copy of its records for the lease.
func (r *faultRun) checkLateClaims(v *faultViolations) {
	for _, p := range r.probes {
		if p.status != "p" {
			continue
		}
		// Every request in flight at the claim's collector when it was
		// sent has been answered, and its writes had time to land.
		inFlight := false
		for _, a := range r.attempts {
			if p.f.ep.covers(a.c) && !a.start.After(p.f.at) && a.end.Add(faultCommitSlack).After(p.at) {
				inFlight = true
			}
		}
		if !inFlight {
			v.add("a claim that landed after its request was answered stayed pending in Redis",
				"a claim sent at %s landed %v late; at %s its status key %s was still pending",
				r.rel(p.f.at), p.late.Round(time.Millisecond), r.rel(p.at), readableKey(p.f.key))
		}
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
// another request was delivering one of its records.
type faultStalls struct {
	count   int
	longest time.Duration
	what    string
}

// checkRefusals: every refused try had an injected cause, and every stall
// is explained by a claim of a request in flight, or of a collector that
// died within the lease.
func (r *faultRun) checkRefusals(v *faultViolations) faultStalls {
	exports := map[int][]*faultExport{}
	for _, e := range r.exports {
		for _, id := range e.ids {
			exports[id] = append(exports[id], e)
		}
	}
	attempts := map[int][]*faultAttempt{}
	for _, a := range r.attempts {
		for _, id := range a.req.ids {
			attempts[id] = append(attempts[id], a)
		}
	}
	for _, a := range r.attempts {
		switch {
		case a.err == nil:
		case a.died || errors.Is(a.err, errExporterFailed):
		case !a.c.downAt.IsZero() && !a.c.downAt.After(a.end):
			// Shut down under it.
		case errors.Is(a.err, errSharedTier):
			why := r.downOn(a.c, nil, a.start.Add(-faultTol), a.end.Add(faultTol))
			if why == "" && strings.Contains(a.err.Error(), "circuit breaker open") {
				why = r.downOn(a.c, nil, a.end.Add(-faultBreakerMemory), a.end)
			}
			if why == "" {
				v.add("refused for the shared tier with no fault on its way to Redis",
					"%s, %s-%s: %v", a, r.rel(a.start), r.rel(a.end), a.err)
			}
		case errors.Is(a.err, errInFlight):
			if why := r.stallCause(a, exports, attempts); why == "" {
				v.add("refused for a pending claim that no request in flight or dead collector held (a stall)",
					"%s, %s-%s, records %v: %s", a, r.rel(a.start), r.rel(a.end), a.req.ids, r.lastExports(a, exports))
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
		if errors.Is(a.err, errInFlight) {
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

// stallCause says what held a record of a, refused at a.end for a pending
// claim: at its last look a claim was pending, which only a request in its
// claim or its export may hold (plus the commit's way to Redis), or a
// collector that died (for the lease), or one whose writes failed (until
// the writer's retries land, or the lease ends). "" if nothing did.
func (r *faultRun) stallCause(a *faultAttempt, exports map[int][]*faultExport, attempts map[int][]*faultAttempt) string {
	lastLook := a.end.Add(-maxPause - faultTol)
	for _, id := range a.req.ids {
		for _, e := range exports[id] {
			if e.a == a || e.start.Add(-faultTimeout-faultTol).After(a.end) {
				continue
			}
			if e.end.IsZero() {
				return fmt.Sprintf("record %d in export of %s", id, e.a)
			}
			hold := faultCommitSlack
			if r.downOn(e.c, writeOps, e.end.Add(-faultTol), e.end.Add(faultLease)) != "" {
				hold = faultLease + faultTimeout + faultTol
			}
			if e.end.Add(hold).After(lastLook) {
				return fmt.Sprintf("record %d in export of %s until %s", id, e.a, r.rel(e.end))
			}
		}
		for _, h := range attempts[id] {
			// A first claim lasts at most the timeout, then its release,
			// which lands soon after its request is answered.
			if h != a && h.start.Before(a.end) && h.start.Add(faultTimeout+faultCommitSlack).After(lastLook) &&
				h.end.Add(faultCommitSlack).After(lastLook) {
				return fmt.Sprintf("record %d claimed by %s at %s", id, h, r.rel(h.start))
			}
		}
	}
	for _, c := range r.collectors {
		if c.died && c.downAt.Before(a.end) && c.downAt.Add(faultLease+faultTimeout+faultTol).After(lastLook) {
			return fmt.Sprintf("collector %d died at %s", c.id, r.rel(c.downAt))
		}
	}
	return ""
}

// lastExports describes the exports of a's records that came closest
// before a's end, for a stall's message.
func (r *faultRun) lastExports(a *faultAttempt, exports map[int][]*faultExport) string {
	var out []string
	for _, id := range a.req.ids {
		var last *faultExport
		for _, e := range exports[id] {
			if e.a != a && e.start.Before(a.end) && (last == nil || e.end.After(last.end)) {
				last = e
			}
		}
		if last != nil {
			out = append(out, fmt.Sprintf("%d: exported by %s %s-%s", id, last.a, r.rel(last.start), r.rel(last.end)))
		}
	}
	if len(out) == 0 {
		return "none of its records exported before"
	}
	return "last exports of its records: " + strings.Join(out, "; ")
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
	var onlyUnchecked []string
	lostClaims := map[*collector]map[*faultAttempt]bool{}
	for id, ds := range r.delivered() {
		for k := 1; k < len(ds); k++ {
			x, y := ds[k-1], ds[k]
			cp.extra++
			causes := r.copyCauses(x, y)
			if len(causes) == 0 {
				v.add("a record delivered twice without a listed cause",
					"record %d: delivered by %s (export %s-%s), again by %s (export %s-%s)%s",
					id, x.a, r.rel(x.start), r.rel(x.end), y.a, r.rel(y.start), r.rel(y.end), r.copyContext(x, y))
				continue
			}
			cp.byCause[causes[0]]++
			switch {
			case slices.Contains(causes, "redis-data-lost"), slices.Contains(causes, "collector-killed"):
				// Listed, and nothing alive can count them.
			case slices.Contains(causes, "unchecked"):
				onlyUnchecked = append(onlyUnchecked, fmt.Sprintf("record %d: %s (export %s), again by %s (export %s)",
					id, x.a, r.rel(x.start), y.a, r.rel(y.start)))
			default: // a lost claim, or one a shutdown left behind
				if lostClaims[x.c] == nil {
					lostClaims[x.c] = map[*faultAttempt]bool{}
				}
				lostClaims[x.c][x.a] = true
			}
		}
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

// copyCauses lists the causes, among those the README lists, that explain
// y delivering again a record x delivered first.
func (r *faultRun) copyCauses(x, y *faultExport) []string {
	var causes []string
	for _, ep := range r.episodes {
		if ep.dataLoss && between(ep.from, x.start.Add(-faultTimeout-faultTol), y.start) {
			causes = append(causes, "redis-data-lost")
			break
		}
	}
	if x.c.died && !x.end.After(x.c.downAt.Add(faultTol)) && x.end.Add(faultCommitSlack).After(x.c.downAt) && !x.c.downAt.After(y.start.Add(faultTol)) {
		causes = append(causes, "collector-killed")
	}
	if r.policy == ErrorPass {
		// Either copy may have been delivered on the local cache's word: its
		// claim failed, its collector's breaker was open, or its collector
		// was closing its tier.
		for _, e := range []*faultExport{x, y} {
			if r.downOn(e.c, claimOps, e.a.start.Add(-faultTol), e.start.Add(faultTol)) != "" || r.skippedRedis(e.c, e.start) != "" ||
				!e.c.died && !e.c.downAt.IsZero() && between(e.c.downAt, e.a.start, e.start) {
				causes = append(causes, "unchecked")
				break
			}
		}
	}
	// x's claim ended before y claimed: a fault before y kept x's
	// renewals or commit from Redis.
	for _, ep := range r.episodes {
		if ep.leases && ep.covers(x.c) && !ep.from.After(earliest(x.end.Add(faultCommitSlack), y.start)) && !ep.to.Before(x.start) {
			causes = append(causes, "lease-ran-out")
			break
		}
	}
	if !x.c.died && !x.c.downAt.IsZero() && between(x.c.downAt, x.start.Add(-faultTol), earliest(x.end.Add(faultCommitSlack), y.start)) {
		causes = append(causes, "shutdown-in-flight")
	}
	return causes
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
		if n := c.unchecked(); n > 0 && (r.policy == ErrorRefuse || r.downOn(c, nil, c.started, end) == "") {
			v.add("records delivered unchecked with no fault on the way to Redis",
				"collector %d counted %d under on_error: %s", c.id, n, r.policy)
		}
		if n := c.lost(); n > 0 && r.leaseCause(c, end) == "" {
			v.add("claims lost with no fault that kept Redis from renewing them for a lease",
				"collector %d counted %d lost (commit %d, renew %d, release %d); faults on its way: %s",
				c.id, n, c.h.redisRequests("commit", "lost"), c.h.redisRequests("renew", "lost"), c.h.redisRequests("release", "lost"), r.faultsOn(c))
		}
	}
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
		v.add("tier commands of an unknown shape", "%d scripts tierOp cannot tell: update tierOp to the scripts' keys and arguments", n)
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
	for _, c := range r.collectors {
		fmt.Fprintf(&b, "  collector %d (slot %d, up %s-%s): unchecked %d, lost %d, released %d\n", c.id, c.slot, r.rel(c.started), r.rel(c.downAt),
			c.unchecked(), c.lost(), c.counter("otelcol_processor_dedup_released"))
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
