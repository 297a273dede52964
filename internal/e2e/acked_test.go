package e2e

// Acknowledged means delivered (the processor README's first guarantee),
// through the binary: copies of the same events race through one collector
// or two sharing Redis while their originals are still being exported, the
// backend refuses some exports, and nobody retries. Every event of a request
// the collectors acknowledged must reach the backend exactly once.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

const metricWaitCount = "otelcol_processor_dedup_wait_duration_count"

// ackedPipeline is a logs pipeline otlp -> dedup (keyed on event.id, with
// more settings given as YAML flow-map entries) -> the sink over gRPC.
func ackedPipeline(dedup string) string {
	return fmt.Sprintf(`
processors:
  dedup: {logs: {key: ['attributes["event.id"]']}, %s}
service:
  pipelines:
    logs:
      receivers: [otlp]
      processors: [dedup]
      exporters: [%s]
`, dedup, SinkGRPCExporter)
}

// redisSettings is the dedup setting of a shared tier on endpoints, with more
// redis settings as flow-map entries.
func redisSettings(endpoints []string, extra string) string {
	quoted := make([]string, len(endpoints))
	for i, e := range endpoints {
		quoted[i] = fmt.Sprintf("%q", e)
	}
	if extra != "" {
		extra = ", " + extra
	}
	return fmt.Sprintf("redis: {endpoints: [%s]%s}", strings.Join(quoted, ", "), extra)
}

// topology is where the collectors of a test keep their claims: nodes nil
// means each collector's local cache only.
type topology struct {
	name      string
	endpoints []string
	nodes     []*redistest.Server
}

// fleetDelivered counts the records every collector's sink accepted, by
// record (see delivered).
func fleetDelivered(cols []*running) (map[string]int, int) {
	all := map[string]int{}
	total := 0
	for _, r := range cols {
		counts, n := delivered(r.sink)
		for k, v := range counts {
			all[k] += v
		}
		total += n
	}
	return all, total
}

// fewNeedles is a sample of eventCorpus' needles: the shared strings and
// every 2000th event's, enough to show no record content is in Redis without
// matching every key against every event.
func fewNeedles(needles []string) []string {
	const shared, perEvent = 6, 3
	out := slices.Clone(needles[:shared])
	for i := shared; i+perEvent <= len(needles); i += 2000 * perEvent {
		out = append(out, needles[i:i+perEvent]...)
	}
	return out
}

// TestAckedWithoutRetries: four senders send overlapping copies of the same
// events at once, round after round, over gRPC and HTTP; each collector's
// backend answers slowly (so copies arrive while their original's batch is
// still being exported) and refuses a share of the exports at random. The
// collectors' exporters do not retry, and neither do the senders: a refused
// request is lost unless another request carried its events. Whatever
// happens to the copies, an event is delivered exactly once if a request
// carrying it was acknowledged, and not at all otherwise (with no retry and
// no queue, what the backend accepted was acknowledged). Run on one
// collector, and on two sharing a standalone Redis or a 3-master Cluster.
func TestAckedWithoutRetries(t *testing.T) {
	t.Parallel() // it mostly waits: see TestMain
	standalone := redistest.Standalone(t)
	cluster := redistest.Cluster(t, 3)
	for _, tc := range []struct {
		topology
		collectors int
	}{
		{topology{name: "local"}, 1},
		{topology{"redis", []string{standalone.Addr()}, []*redistest.Server{standalone}}, 2},
		{topology{"cluster", cluster.Addrs(), cluster.Nodes}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			settings := "pending_wait: 1s"
			if tc.endpoints != nil {
				settings += ", " + redisSettings(tc.endpoints, "")
			}
			var cols []*running
			for range tc.collectors {
				cols = append(cols, startCollector(t, nil, ackedPipeline(settings)))
			}
			runAckedWithoutRetries(t, cols, tc.nodes)
		})
	}
}

func runAckedWithoutRetries(t *testing.T, cols []*running, nodes []*redistest.Server) {
	const (
		rounds    = 24
		group     = 16 // new events per round
		senders   = 4
		failShare = 0.5
		latency   = 20 * time.Millisecond
	)
	n := rounds * group
	c, needles := eventCorpus(n)
	for i, r := range cols {
		r.sink.FailRandomly(failShare, uint64(i+1))
		r.sink.SetLatency(latency)
	}
	// Sender s sends to collector s mod len(cols), alternating gRPC and HTTP
	// so that each collector hears both.
	sends := make([]logSender, senders)
	for s := range sends {
		r := cols[s%len(cols)]
		if s/len(cols)%2 == 0 {
			sends[s] = r.grpcSender()
		} else {
			sends[s] = r.httpSender()
		}
	}
	// In round r every sender sends the round's group, each starting at
	// another event; odd senders add the second half of the previous group,
	// copies of events whose fate is already decided (or lost).
	request := func(r, s int) []int {
		idx := span(r*group, (r+1)*group)
		k := s * group / senders
		idx = append(idx[k:], idx[:k]...)
		if s%2 == 1 && r > 0 {
			idx = append(idx, span((r-1)*group+group/2, r*group)...)
		}
		return idx
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*opTimeout)
	defer cancel()
	acked := make([]bool, n)
	var mu sync.Mutex
	var ackedRecords, refusedRecordsSent, requests, failed int
	for r := range rounds {
		var wg sync.WaitGroup
		for s, send := range sends {
			idx := request(r, s)
			req := c.batch(idx...)
			wg.Go(func() {
				err := send.SendLogs(ctx, req)
				mu.Lock()
				defer mu.Unlock()
				requests++
				if err != nil {
					if !isRetryable(err) {
						t.Errorf("round %d, sender %d: %v, want acknowledged or refused for retry", r, s, err)
					}
					failed++
					refusedRecordsSent += len(idx)
					return
				}
				ackedRecords += len(idx)
				for _, i := range idx {
					acked[i] = true
				}
			})
		}
		wg.Wait()
	}

	counts, total := fleetDelivered(cols)
	want := 0
	var wrong []string
	// An acknowledged event is delivered once. An event of refused requests
	// only may be delivered once too: a request whose first call was
	// delivered and whose second was refused delivered part of its events,
	// which its retry would find delivered.
	extra := 0
	for i := range n {
		got := counts[c.recordKey(i)]
		if acked[i] {
			want++
		} else {
			extra += got
		}
		if (got != 1 && acked[i] || got > 1) && len(wrong) < 10 {
			wrong = append(wrong, fmt.Sprintf("event %d: acknowledged %v, delivered %d times", i, acked[i], got))
		}
	}
	if len(wrong) > 0 || total != want+extra {
		t.Errorf("the sinks hold %d records, want %d (each acknowledged event once, %d events of refused requests at most once); %s", total, want+extra, extra, strings.Join(wrong, "; "))
	}

	l := func(kv ...string) Labels { return sigLabels("dedup", "logs", kv...) }
	scs := scrapes(cols)
	var refusedExports, refusedRecords int
	for _, r := range cols {
		refusedExports += r.sink.Refused()
		refusedRecords += r.sink.RefusedItems()
	}
	waits := redisSum(scs, metricWaitCount, l())
	refusedWaits := redisSum(scs, metricWaitCount, l("result", "refused"))
	t.Logf("%d requests: %d acknowledged, %d refused (%d exports refused by the backend, %g after pending_wait); %g waits for copies in flight; %d of %d events delivered",
		requests, requests-failed, failed, refusedExports, refusedWaits, waits, total, n)
	if refusedExports == 0 {
		t.Fatal("the backend refused no export: the test injected no fault")
	}
	if waits == 0 {
		t.Errorf("no batch waited for a copy in flight (%s = 0): the copies did not race", metricWaitCount)
	}
	// A request fails either at the backend or after pending_wait.
	if float64(failed) != float64(refusedExports)+refusedWaits {
		t.Errorf("%d requests refused to the senders, want the %d exports the backends refused + the %g batches refused after pending_wait",
			failed, refusedExports, refusedWaits)
	}
	// Counts are of accepted calls to the next consumer: every record of an
	// acknowledged request once, unique if this collector delivered it,
	// and the records of the first calls of requests refused in their
	// second (no more than the refused requests held).
	wantSum(t, scs, metricRecords, l("outcome", "unique"), float64(total))
	if got := redisSum(scs, metricRecords, l()); got < float64(ackedRecords) || got > float64(ackedRecords+refusedRecordsSent) {
		t.Errorf("%s = %g, want between the %d records of acknowledged requests and %d more of refused ones", metricRecords, got, ackedRecords, refusedRecordsSent)
	}
	// No request repeats an event.
	wantSum(t, scs, metricDuplicates, l("caught_by", "batch"), 0)
	// A refused export releases every key it carried.
	wantSum(t, scs, metricReleased, l(), float64(refusedRecords))
	if nodes != nil {
		checkRedisContents(t, dumpRedis(t, nodes), total, 10*time.Minute, defaultLease, fewNeedles(needles))
	}
}

// TestAckedLargeRacingCopies: two senders send the same requests of 1,000
// and of 8,192 records to two collectors sharing Redis at the same moment,
// one in the order of the events and one in reverse, so each collector's
// claims (atomic only per script call of up to 1,000 keys, and per Cluster
// node) win part of a request and meet the other's pending claims on the
// rest. The backend answers slowly, so the copies meet while both batches
// are in flight. With a pending_wait far longer than any export, no request
// may be refused (waiting never deadlocks), every record is delivered
// exactly once, and once every batch has settled Redis holds no pending
// claim.
func TestAckedLargeRacingCopies(t *testing.T) {
	standalone := redistest.Standalone(t)
	cluster := redistest.Cluster(t, 3)
	for _, topo := range []topology{
		{"redis", []string{standalone.Addr()}, []*redistest.Server{standalone}},
		{"cluster", cluster.Addrs(), cluster.Nodes},
	} {
		t.Run(topo.name, func(t *testing.T) {
			// Generous timeouts: a refusal must mean batches waited on each
			// other, not a slow claim under -race on a busy machine.
			cfg := ackedPipeline("pending_wait: 20s, " + redisSettings(topo.endpoints, "timeout: 10s, lease: 1m"))
			cols := []*running{startCollector(t, nil, cfg), startCollector(t, nil, cfg)}
			runLargeRacingCopies(t, cols, topo.nodes)
		})
	}
}

func runLargeRacingCopies(t *testing.T, cols []*running, nodes []*redistest.Server) {
	sizes := []int{1000, 8192, 1000, 8192}
	n := 0
	for _, size := range sizes {
		n += size
	}
	c, needles := eventCorpus(n)
	for _, r := range cols {
		r.sink.SetLatency(50 * time.Millisecond)
	}
	sendA, sendB := cols[0].grpcSender(), cols[1].httpSender()
	ctx, cancel := context.WithTimeout(context.Background(), 2*opTimeout)
	defer cancel()
	first := 0
	for round, size := range sizes {
		idx := span(first, first+size)
		first += size
		toA := c.batch(idx...)
		slices.Reverse(idx)
		toB := c.batch(idx...)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, p := range []struct {
			name string
			send logSender
			req  plog.Logs
		}{{"A", sendA, toA}, {"B", sendB, toB}} {
			wg.Go(func() {
				<-start
				if err := p.send.SendLogs(ctx, p.req); err != nil {
					t.Errorf("round %d (%d records) to collector %s: %v, want acknowledged", round, size, p.name, err)
				}
			})
		}
		close(start)
		wg.Wait()
	}
	if t.Failed() {
		t.FailNow()
	}

	l := func(kv ...string) Labels { return sigLabels("dedup", "logs", kv...) }
	scs := scrapes(cols)
	settled := redisSum(scs, metricWaitCount, l("result", "settled"))
	t.Logf("%d rounds, %d records each way: %g waits for the other collector's batch, all settled", len(sizes), n, settled)
	if settled == 0 {
		t.Errorf("no batch waited for the other collector's (%s = 0): the copies did not race", metricWaitCount)
	}
	wantSum(t, scs, metricWaitCount, l("result", "refused"), 0)
	// Each record is unique at one collector and, at the other, a copy
	// caught by Redis.
	wantSum(t, scs, metricRecords, l("outcome", "unique"), float64(n))
	wantSum(t, scs, metricRecords, l("outcome", "duplicate"), float64(n))
	wantSum(t, scs, metricDuplicates, l("caught_by", "redis"), float64(n))
	wantSum(t, scs, metricReleased, l(), 0)

	counts, total := fleetDelivered(cols)
	bad := 0
	for i := range n {
		if got := counts[c.recordKey(i)]; got != 1 {
			if bad < 10 {
				t.Errorf("event %d delivered %d times, want once", i, got)
			}
			bad++
		}
	}
	if bad > 0 || total != n {
		t.Errorf("the sinks hold %d records, %d events not delivered exactly once; want %d", total, bad, n)
	}
	// Every claim committed: no record is held by a pending claim, and
	// no claim is left pending.
	checkRedisContents(t, dumpRedis(t, nodes), n, 10*time.Minute, time.Minute, fewNeedles(needles))
}

// scrapes reads every collector's metrics.
func scrapes(cols []*running) []Scrape {
	out := make([]Scrape, len(cols))
	for i, r := range cols {
		out[i] = r.scrape()
	}
	return out
}
