package dedupprocessor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/otel/attribute"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/claim"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

// consumeAsync runs ConsumeLogs on its own goroutine.
func consumeAsync(h *harness, ld plog.Logs) <-chan error {
	done := make(chan error, 1)
	go func() { done <- h.consume(ld) }()
	return done
}

// notYet fails if done has an answer within a short while.
func notYet(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s returned (%v) while the batch holding its record was still in flight", what, err)
	case <-time.After(100 * time.Millisecond):
	}
}

// holding returns a gate predicate that holds the batches with body.
func holding(body string) func(plog.Logs) bool {
	return func(ld plog.Logs) bool {
		sink := new(consumertest.LogsSink)
		_ = sink.ConsumeLogs(context.Background(), ld)
		return slices.Contains(bodies(sink), body)
	}
}

// TestCopyWaitsForTheBatchInFlight: on one collector, a copy of a record
// whose batch is still being delivered is neither dropped nor delivered at
// once. Its request delivers its other records at once (the first call),
// without waiting, then waits, holding nothing pending, for the batch in
// flight: if that delivery fails (and its sender never retries), the copy
// is delivered in a second call; if it succeeds, the copy is a duplicate.
// Either way the record reaches the next consumer once, and the copy's
// request is answered only after both calls. A copy of the whole request
// has no first call, and its second call gets the request as it came.
func TestCopyWaitsForTheBatchInFlight(t *testing.T) {
	for _, tc := range []struct {
		name      string
		copy      []int
		firstCall int               // records the copy's first call delivers
		want      map[bool][]string // by whether the first delivery fails
	}{
		{"part of the request", []int{2, 3}, 1, map[bool][]string{
			true: {"secret body 3", "secret body 2"}, false: {"secret body 3", "secret body 1", "secret body 2"}}},
		{"the whole request", []int{2, 1}, 0, map[bool][]string{
			true: {"secret body 2", "secret body 1"}, false: {"secret body 1", "secret body 2"}}},
	} {
		for _, firstFails := range []bool{true, false} {
			name := map[bool]string{true: "first delivery fails", false: "first delivery succeeds"}[firstFails]
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				cfg := defaultConfig()
				cfg.PendingWait = time.Minute
				next := newGatedLogs()
				next.hold = holding("secret body 1")
				h := newHarness(t, cfg, next)

				first := consumeAsync(h, events(1, 2))
				<-next.entered // the first batch is being delivered
				copyDone := consumeAsync(h, events(tc.copy...))
				if tc.firstCall > 0 {
					testkit.WaitFor(t, "the copy's first call", 10*time.Second, func() bool { return len(bodies(&next.sink)) == tc.firstCall })
				}
				notYet(t, copyDone, "the copy's request")
				if n := len(bodies(&next.sink)); n != tc.firstCall {
					t.Fatalf("%d records delivered while the copy waits, want %d", n, tc.firstCall)
				}

				if firstFails {
					next.release <- errors.New("backend refused")
					if slices.Contains(tc.copy, 1) {
						next.release <- nil // the copy's second call, now carrying record 1
					}
				} else {
					next.release <- nil
				}
				if err := <-first; firstFails != (err != nil) {
					t.Fatalf("first request: %v", err)
				}
				if err := <-copyDone; err != nil {
					t.Fatalf("the copy's request: %v", err)
				}
				assertBodies(t, &next.sink, tc.want[firstFails]...)
				if n := h.histogramCount("otelcol_processor_dedup_wait_duration", attribute.String("result", "settled")); n != 1 {
					t.Fatalf("settled waits = %d, want 1", n)
				}
				assertSourceTotals(h) // the records of both calls, once
			})
		}
	}
}

// TestSecondCallCarriesItsRecordsWhole: the records a request leaves for its
// second call move out of its first call's data: the first call delivers the
// rest, and the second delivers those records alone, each under its own
// resource and scope, with the identity attribute of its own digest.
func TestSecondCallCarriesItsRecordsWhole(t *testing.T) {
	cfg := defaultConfig()
	cfg.PendingWait = time.Minute
	cfg.IdentityAttribute = "dedup.id"
	event := func(id int, service string) rec {
		return rec{body: fmt.Sprintf("secret body %d", id), resource: service, attrs: map[string]any{"n": int64(id)}}
	}
	// Each record's identity attribute, delivered alone.
	alone := new(consumertest.LogsSink)
	if err := newHarness(t, cfg, alone).consume(logs(event(1, "a"), event(2, "b"))); err != nil {
		t.Fatal(err)
	}
	want := deliveredUnits(alone)

	next := newGatedLogs()
	next.hold = holding("secret body 1")
	h := newHarness(t, cfg, next)
	first := consumeAsync(h, logs(event(1, "a"), event(2, "b")))
	<-next.entered // records 1 and 2 are being delivered
	copyDone := consumeAsync(h, logs(event(3, "a"), event(1, "a"), event(4, "b"), event(2, "b"), event(5, "c")))
	testkit.WaitFor(t, "the copy's first call", 10*time.Second, func() bool { return len(bodies(&next.sink)) == 3 })
	next.release <- errors.New("backend refused")
	next.release <- nil // the copy's second call, carrying record 1
	if err := <-first; err == nil {
		t.Fatal("the refused request was answered without error")
	}
	if err := <-copyDone; err != nil {
		t.Fatalf("the copy's request: %v", err)
	}
	calls := next.sink.AllLogs()
	if len(calls) != 2 {
		t.Fatalf("%d calls to the next consumer, want 2", len(calls))
	}
	firstCall := new(consumertest.LogsSink)
	_ = firstCall.ConsumeLogs(context.Background(), calls[0])
	if got := fmt.Sprint(deliveredUnits(firstCall)); !strings.Contains(got, "a/test/secret body 3") || !strings.Contains(got, "b/test/secret body 4") ||
		!strings.Contains(got, "c/test/secret body 5") || strings.Count(got, "secret body") != 3 {
		t.Fatalf("first call delivered %s, want records 3, 4 and 5 under their resources", got)
	}
	secondCall := new(consumertest.LogsSink)
	_ = secondCall.ConsumeLogs(context.Background(), calls[1])
	if got := deliveredUnits(secondCall); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("second call delivered\n%v\nwant, as records 1 and 2 delivered alone:\n%v", got, want)
	}
}

// TestDuplicateFoundWhileWaitingIsMarked: with action mark, a request whose
// two records wait for two batches in flight delivers both in its second
// call when one of those batches commits and the other fails: the record of
// the committed batch marked, whichever the look met first.
func TestDuplicateFoundWhileWaitingIsMarked(t *testing.T) {
	cfg := defaultConfig()
	cfg.PendingWait = time.Minute
	cfg.Action = ActionMark
	next := newGatedLogs()
	next.hold = func(plog.Logs) bool { return true }
	h := newHarness(t, cfg, next)
	one, two := consumeAsync(h, events(1)), consumeAsync(h, events(2))
	<-next.entered
	<-next.entered // both batches are being delivered
	copies := consumeAsync(h, events(1, 2))
	notYet(t, copies, "the copies' request")
	next.release <- nil // one of the two batches is delivered
	var failed <-chan error
	select {
	case err := <-one:
		if err != nil {
			t.Fatal(err)
		}
		failed = two
	case err := <-two:
		if err != nil {
			t.Fatal(err)
		}
		failed = one
	}
	time.Sleep(200 * time.Millisecond) // the copies' request looks again: one record held, one pending
	next.release <- errors.New("backend refused")
	if err := <-failed; err == nil {
		t.Fatal("the refused batch was answered without error")
	}
	<-next.entered // the copies' second call
	next.release <- nil
	if err := <-copies; err != nil {
		t.Fatalf("the copies' request: %v", err)
	}
	calls := next.sink.AllLogs()
	if len(calls) != 2 {
		t.Fatalf("%d calls delivered, want 2 (the batch delivered, the copies' second call)", len(calls))
	}
	marked := 0
	for _, lr := range calls[1].ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().All() {
		if v, ok := lr.Attributes().Get(cfg.MarkAttribute); ok && v.Bool() {
			marked++
		}
	}
	if n := calls[1].LogRecordCount(); n != 2 || marked != 1 {
		t.Fatalf("the copies' second call delivered %d records, %d marked; want 2, 1 marked", n, marked)
	}
}

// deliveredUnits lists each record a sink got as service/scope/body/dedup.id.
func deliveredUnits(sink *consumertest.LogsSink) []string {
	var out []string
	for _, ld := range sink.AllLogs() {
		for _, rl := range ld.ResourceLogs().All() {
			svc, _ := rl.Resource().Attributes().Get("service.name")
			for _, sl := range rl.ScopeLogs().All() {
				for _, lr := range sl.LogRecords().All() {
					id, _ := lr.Attributes().Get("dedup.id")
					out = append(out, svc.AsString()+"/"+sl.Scope().Name()+"/"+lr.Body().AsString()+"/"+id.AsString())
				}
			}
		}
	}
	return out
}

// TestCopyRefusedAfterPendingWait: when the batch in flight outlasts
// pending_wait, the copy's request is refused with the retryable error,
// after delivering its other records; its retry after the first delivery
// finds every record delivered.
func TestCopyRefusedAfterPendingWait(t *testing.T) {
	cfg := defaultConfig()
	cfg.PendingWait = 50 * time.Millisecond
	next := newGatedLogs()
	next.hold = holding("secret body 1")
	h := newHarness(t, cfg, next)

	first := consumeAsync(h, events(1))
	<-next.entered
	if err := h.consume(events(1, 2)); !errors.Is(err, claim.ErrInFlight) {
		t.Fatalf("copy: %v, want the retryable in-flight error", err)
	}
	next.release <- nil
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	// The retry: records 1 and 2 were delivered, so nothing goes on.
	if err := h.consume(events(1, 2)); err != nil {
		t.Fatal(err)
	}
	if n := h.histogramCount("otelcol_processor_dedup_wait_duration", attribute.String("result", "refused")); n != 1 {
		t.Fatalf("refused waits = %d, want 1", n)
	}
	assertBodies(t, &next.sink, "secret body 2", "secret body 1")
}

// TestLargeRacingCopiesNeverDeadlock: two collectors get the same requests
// at the same moment, each request larger than one claim script takes, so
// on standalone Redis as on a Cluster each batch wins part of a record set
// and meets the other's pending claims on the rest. None of them is refused
// (they used to wait for each other until pending_wait), every record is
// delivered once, and nothing is left pending in Redis.
func TestLargeRacingCopiesNeverDeadlock(t *testing.T) {
	cluster := redistest.Cluster(t, 3)
	standalone := redistest.Standalone(t)
	for _, topo := range []struct {
		name      string
		endpoints []string
	}{
		{"standalone", []string{standalone.Addr()}},
		{"cluster", cluster.Addrs()},
	} {
		t.Run(topo.name, func(t *testing.T) {
			const requests, size = 6, 2500
			sinks := []*consumertest.LogsSink{new(consumertest.LogsSink), new(consumertest.LogsSink)}
			var hs []*harness
			for i := range sinks {
				cfg := redisConfig(topo.endpoints, ErrorRefuse)
				cfg.Redis.Get().KeyPrefix = "race:" + t.Name() + ":"
				// Large batches under -race on a busy machine: a timed-out
				// claim would be refused for another reason than the one
				// tested here.
				cfg.Redis.Get().Timeout = 10 * time.Second
				cfg.Redis.Get().Lease = time.Minute
				cfg.PendingWait = 10 * time.Second // a refusal would mean batches waited on each other
				// Redis timeouts are not this test's subject: 12 claims of 2500
				// records at once can take longer than 300ms on 2 busy cores.
				cfg.Redis.Get().Timeout = 5 * time.Second
				hs = append(hs, newHarness(t, cfg, sinks[i]))
			}
			var wg sync.WaitGroup
			start := make(chan struct{})
			for r := range requests {
				ids := make([]int, size)
				for i := range ids {
					ids[i] = r*size + i
				}
				for i, h := range hs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						// The two collectors walk the records in opposite
						// orders: each claims first what the other claims last.
						own := slices.Clone(ids)
						if i == 1 {
							slices.Reverse(own)
						}
						if err := h.consume(events(own...)); err != nil {
							t.Errorf("collector %d, request %d: %v", i, r, err)
						}
					}()
				}
			}
			close(start)
			wg.Wait()
			var got [][]string
			for _, s := range sinks {
				got = append(got, bodies(s))
			}
			testkit.WantEachOnce(t, testkit.Counts(got...), requests*size)
			for i, h := range hs {
				if n := h.histogramCount("otelcol_processor_dedup_wait_duration", attribute.String("result", "refused")); n != 0 {
					t.Errorf("collector %d refused %d batches", i, n)
				}
			}
		})
	}
}

// TestSecondCallRemembersFromItsOwnClaim: a record a request delivers in its
// second call is remembered for the window from that call's claim, not from
// when the request arrived. Here the first call takes 1.6 s of a 2 s window;
// a copy sent 0.6 s after the second call delivered the record is dropped.
func TestSecondCallRemembersFromItsOwnClaim(t *testing.T) {
	cfg := defaultConfig()
	cfg.Logs.Key = []string{`attributes["event.id"]`}
	cfg.Window = 2 * time.Second
	cfg.PendingWait = time.Minute
	clk := newFakeClock()
	gate := newGatedLogs()
	gate.hold = holding("secret body 2")
	next, err := consumer.NewLogs(func(ctx context.Context, ld plog.Logs) error {
		if holding("secret body 1")(ld) {
			clk.Advance(1600 * time.Millisecond) // the first call's export
		}
		return gate.ConsumeLogs(ctx, ld)
	})
	if err != nil {
		t.Fatal(err)
	}
	h := newClockedHarness(t, cfg, next, clk)

	inFlight := consumeAsync(h, events(2))
	<-gate.entered // record 2 is being delivered by another batch
	request := consumeAsync(h, events(1, 2))
	// The request delivered record 1 and waits for record 2's batch.
	if err := clk.WaitForWaiters(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	gate.release <- errors.New("exporter down") // record 2's batch fails: the request claims it
	if err := <-inFlight; err == nil {
		t.Fatal("the failed batch was acknowledged")
	}
	<-gate.entered // the request's second call
	gate.release <- nil
	if err := <-request; err != nil {
		t.Fatal(err)
	}
	clk.Advance(600 * time.Millisecond)
	gate.release <- nil // were the copy delivered, it would pass
	if err := h.consume(events(2)); err != nil {
		t.Fatal(err)
	}
	if got, want := bodies(&gate.sink), []string{"secret body 1", "secret body 2"}; !slices.Equal(got, want) {
		t.Fatalf("delivered %q, want %q", got, want)
	}
	if got := h.tier("local"); got != 1 {
		t.Fatalf("duplicates caught by the local tier = %d, want 1", got)
	}
}

// TestClaimHeldWhileItsExportOutlastsTheWindow: a batch stays downstream for
// three windows. Its records stay held the whole time, in both tiers: a
// copy at the same collector (the local tier; fake time) or at another
// collector sharing Redis (the shared tier; real time, a 1 s window) is
// never delivered while the batch is downstream, and once the batch is
// delivered the copy is a duplicate: a record is remembered for a window
// from its delivery, however long its export took.
func TestClaimHeldWhileItsExportOutlastsTheWindow(t *testing.T) {
	t.Run("local", func(t *testing.T) {
		cfg := defaultConfig()
		cfg.Window = time.Minute
		cfg.PendingWait = time.Hour
		clk := newFakeClock()
		next := newGatedLogs()
		next.hold = holding("secret body 1")
		h := newClockedHarness(t, cfg, next, clk)
		first := consumeAsync(h, events(1))
		<-next.entered // the batch is downstream
		clk.Advance(3 * cfg.Window)
		copyDone := consumeAsync(h, events(1))
		notYet(t, copyDone, "a copy three windows into the export")
		next.release <- nil
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		if err := <-copyDone; err != nil {
			t.Fatal(err)
		}
		assertBodies(t, &next.sink, "secret body 1")
		if n := h.tier("local"); n != 1 {
			t.Fatalf("duplicates caught locally = %d, want 1", n)
		}
	})

	t.Run("shared", func(t *testing.T) {
		const window = time.Second
		srv := redistest.Standalone(t)
		newCfg := func() *Config {
			cfg := redisConfig([]string{srv.Addr()}, ErrorRefuse)
			cfg.Window, cfg.PendingWait = window, 200*time.Millisecond
			cfg.Redis.Get().Lease = window
			return cfg
		}
		next := newGatedLogs()
		next.hold = holding("secret body 1")
		a := newHarness(t, newCfg(), next)
		sink := new(consumertest.LogsSink)
		b := newHarness(t, newCfg(), sink)
		first := consumeAsync(a, events(1))
		<-next.entered // the batch is downstream at a
		start := time.Now()
		for time.Since(start) < 3*window {
			// Copies of the held record and new records, into the same
			// hashes, at the other collector: the copy waits and is
			// refused for retry, never delivered.
			if err := b.consume(events(1, int(time.Since(start)/time.Millisecond)+100)); !errors.Is(err, claim.ErrInFlight) {
				t.Fatalf("a copy %v into the export: %v, want a refusal for retry", time.Since(start).Round(time.Millisecond), err)
			}
		}
		next.release <- nil
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		if err := b.consume(events(1)); err != nil {
			t.Fatal(err)
		}
		if slices.Contains(bodies(sink), "secret body 1") {
			t.Fatalf("the record held downstream for three windows was delivered by the other collector too: %q", bodies(sink))
		}
		if n := b.tier("redis"); n != 1 {
			t.Fatalf("duplicates caught in Redis at the other collector = %d, want 1", n)
		}
		if n := a.redisRequests("renew", "lost") + a.redisRequests("commit", "lost"); n != 0 {
			t.Fatalf("%d renewals or commits lost", n)
		}
	})
}
