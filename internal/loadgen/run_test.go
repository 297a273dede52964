package loadgen

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// fastRetry keeps retry tests short; the jitter stays on.
var fastRetry = RetryConfig{InitialInterval: time.Millisecond, MaxInterval: 5 * time.Millisecond}

func run(t *testing.T, cfg Config) Summary {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sum, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("summary: %+v", sum)
	return sum
}

func TestRunDeliversExactCounts(t *testing.T) {
	s := newSink(t)
	sum := run(t, Config{Endpoint: s.GRPCEndpoint(), Records: 20_000, Duplicates: 0.3,
		Batch: 500, Senders: 4, Seed: 11})
	c := s.counts()
	if sum.Sent != 20_000 || sum.Duplicates != 6_000 || sum.Unique != 14_000 {
		t.Errorf("sent %d duplicates %d unique %d, want 20000 6000 14000", sum.Sent, sum.Duplicates, sum.Unique)
	}
	if int64(c.records) != sum.Sent || int64(c.distinctContent) != sum.Unique || int64(c.distinctEventID) != sum.Unique {
		t.Errorf("sink got %d records, %d contents, %d event.ids; summary says %d, %d", c.records, c.distinctContent, c.distinctEventID, sum.Sent, sum.Unique)
	}
	if sum.Requests != 40 || int64(c.attempts) != sum.Requests || sum.Retries != 0 || sum.Errors != 0 || sum.FailedRecords != 0 {
		t.Errorf("requests %d (sink %d) retries %d errors %d failed %d", sum.Requests, c.attempts, sum.Retries, sum.Errors, sum.FailedRecords)
	}
	if sum.Seed != 11 || sum.Seconds <= 0 || sum.RecordsPerSecond <= 0 || sum.LatencyP50 <= 0 || sum.LatencyP99 < sum.LatencyP50 {
		t.Errorf("seed %d seconds %v rate %v latency %v %v", sum.Seed, sum.Seconds, sum.RecordsPerSecond, sum.LatencyP50, sum.LatencyP99)
	}
}

func TestRunRetriesRetryableErrors(t *testing.T) {
	cases := []struct {
		name string
		code codes.Code
	}{
		{"unavailable", codes.Unavailable},
		{"exhausted", codes.ResourceExhausted},
		{"deadline", codes.DeadlineExceeded},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newSink(t)
			const k = 7
			s.fail(k, tc.code)
			sum := run(t, Config{Endpoint: s.GRPCEndpoint(), Records: 3000, Duplicates: 0.25,
				Batch: 100, Senders: 4, Seed: 3, Retry: fastRetry})
			c := s.counts()
			if sum.Sent != 3000 || sum.Unique != 2250 || sum.Duplicates != 750 || sum.Errors != 0 || sum.FailedRecords != 0 {
				t.Errorf("sent %d unique %d duplicates %d errors %d failed %d", sum.Sent, sum.Unique, sum.Duplicates, sum.Errors, sum.FailedRecords)
			}
			if sum.Retries != k || c.refused != k {
				t.Errorf("retries %d, sink refused %d; want %d", sum.Retries, c.refused, k)
			}
			if sum.Requests != 30 || int64(c.attempts) != sum.Requests+sum.Retries {
				t.Errorf("requests %d retries %d, sink saw %d attempts", sum.Requests, sum.Retries, c.attempts)
			}
			if c.records != 3000 || c.distinctContent != 2250 {
				t.Errorf("sink got %d records, %d identities", c.records, c.distinctContent)
			}
		})
	}
}

// A list of endpoints gets every request at each of them; a refusal by one
// sends the request to all again.
func TestRunMirrorsToEveryEndpoint(t *testing.T) {
	a, b := newSink(t), newSink(t)
	const k = 3
	b.fail(k, codes.Unavailable)
	sum := run(t, Config{Endpoint: a.GRPCEndpoint() + ", " + b.GRPCEndpoint(), Records: 2000,
		Duplicates: 0.3, Batch: 100, Senders: 2, Seed: 5, Retry: fastRetry})
	if sum.Sent != 2000 || sum.Unique != 1400 || sum.Requests != 20 || sum.Retries != k || sum.Errors != 0 {
		t.Errorf("sent %d unique %d requests %d retries %d errors %d", sum.Sent, sum.Unique, sum.Requests, sum.Retries, sum.Errors)
	}
	ca, cb := a.counts(), b.counts()
	if ca.attempts != 20+k || cb.attempts != 20+k || cb.refused != k {
		t.Errorf("attempts %d and %d, refused %d; want %d each, %d refused", ca.attempts, cb.attempts, cb.refused, 20+k, k)
	}
	// a accepted the k attempts b refused: it got those records twice.
	if cb.records != 2000 || cb.distinctContent != 1400 || ca.distinctContent != 1400 || ca.records != 2000+k*100 {
		t.Errorf("records %d and %d, identities %d and %d", ca.records, cb.records, ca.distinctContent, cb.distinctContent)
	}
}

func TestRunDropsOnNonRetryableErrors(t *testing.T) {
	s := newSink(t)
	const k = 3
	s.fail(k, codes.InvalidArgument)
	sum := run(t, Config{Endpoint: s.GRPCEndpoint(), Records: 3000, Duplicates: 0.3,
		Batch: 100, Senders: 2, Seed: 5, Retry: fastRetry})
	c := s.counts()
	if sum.Errors != k || sum.FailedRecords != k*100 || sum.Retries != 0 {
		t.Errorf("errors %d failed %d retries %d, want %d %d 0", sum.Errors, sum.FailedRecords, sum.Retries, k, k*100)
	}
	if sum.Sent != 3000-k*100 || int64(c.records) != sum.Sent || int64(c.distinctContent) != sum.Unique ||
		sum.Duplicates != sum.Sent-sum.Unique {
		t.Errorf("sent %d unique %d duplicates %d; sink %d records %d identities", sum.Sent, sum.Unique, sum.Duplicates, c.records, c.distinctContent)
	}
	if int64(c.attempts) != sum.Requests || sum.Requests != 30 {
		t.Errorf("requests %d, sink saw %d", sum.Requests, c.attempts)
	}
	if !strings.Contains(sum.LastError, "sink refused") {
		t.Errorf("last error %q", sum.LastError)
	}
}

func TestRunGivesUpAfterMaxElapsed(t *testing.T) {
	s := newSink(t)
	s.fail(1_000_000, codes.Unavailable)
	sum := run(t, Config{Endpoint: s.GRPCEndpoint(), Records: 200, Duplicates: 0.1, Batch: 100, Senders: 2,
		Retry: RetryConfig{InitialInterval: 2 * time.Millisecond, MaxInterval: 4 * time.Millisecond, MaxElapsedTime: 150 * time.Millisecond}})
	c := s.counts()
	if sum.Sent != 0 || sum.Errors != 2 || sum.FailedRecords != 200 || sum.Retries < 2 {
		t.Errorf("sent %d errors %d failed %d retries %d", sum.Sent, sum.Errors, sum.FailedRecords, sum.Retries)
	}
	if int64(c.attempts) != sum.Requests+sum.Retries {
		t.Errorf("sink saw %d attempts, requests+retries = %d", c.attempts, sum.Requests+sum.Retries)
	}
}

func TestRunRespectsRate(t *testing.T) {
	s := newSink(t)
	const records, batch, rate = 3000, 100, 10_000.0
	start := time.Now()
	sum := run(t, Config{Endpoint: s.GRPCEndpoint(), Records: records, Duplicates: 0.3,
		Batch: batch, Senders: 4, Rate: rate})
	elapsed := time.Since(start)
	// The last batch may start (records-batch)/rate after the first:
	// a lower bound only, never an upper one.
	floor := time.Duration(float64(records-batch) / rate * float64(time.Second))
	if elapsed < floor || sum.Seconds < floor.Seconds() {
		t.Errorf("%d records at %v/s took %v (summary %.3fs), want >= %v", records, rate, elapsed, sum.Seconds, floor)
	}
	if sum.Sent != records {
		t.Errorf("sent %d", sum.Sent)
	}
}

// Two runs with one seed send the same requests (in whatever order the
// senders interleave); another seed sends others.
func TestRunIsDeterministic(t *testing.T) {
	streams := map[string][]string{}
	for _, tc := range []struct {
		name string
		seed uint64
	}{{"first", 99}, {"second", 99}, {"other-seed", 100}} {
		s := newSink(t)
		sum := run(t, Config{Endpoint: s.GRPCEndpoint(), Records: 4000, Duplicates: 0.35,
			Batch: 200, Senders: 3, Seed: tc.seed})
		if sum.Sent != 4000 {
			t.Fatalf("%s: sent %d", tc.name, sum.Sent)
		}
		streams[tc.name] = s.counts().payloads
	}
	if len(streams["first"]) != 20 {
		t.Fatalf("%d payloads", len(streams["first"]))
	}
	if !slices.Equal(streams["first"], streams["second"]) {
		t.Error("one seed, different streams")
	}
	for _, p := range streams["other-seed"] {
		if slices.Contains(streams["first"], p) {
			t.Fatal("seeds 99 and 100 share a request")
		}
	}
}

func TestRunStopsOnContext(t *testing.T) {
	s := newSink(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	sum, err := Run(ctx, Config{Endpoint: s.GRPCEndpoint(), Records: 1_000_000, Batch: 100, Senders: 2, Rate: 5000})
	if !errors.Is(err, context.Canceled) || sum.Sent >= 1_000_000 {
		t.Errorf("cancel: err %v sent %d", err, sum.Sent)
	}
}

func TestRunCountsUnreachableEndpoint(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	sum := run(t, Config{Endpoint: addr, Records: 300, Batch: 100, Senders: 1,
		Retry: RetryConfig{InitialInterval: time.Millisecond, MaxInterval: 2 * time.Millisecond, MaxElapsedTime: 100 * time.Millisecond}})
	if sum.Sent != 0 || sum.Errors != 3 || sum.FailedRecords != 300 || sum.Retries == 0 {
		t.Errorf("sent %d errors %d failed %d retries %d", sum.Sent, sum.Errors, sum.FailedRecords, sum.Retries)
	}
}

func TestConfigValidate(t *testing.T) {
	cases := map[string]struct {
		cfg  Config
		want string
	}{
		"records":  {Config{Records: -1}, "records must be >= 1"},
		"dup high": {Config{Duplicates: 1}, "duplicates must be in [0, 1) (a fraction of records)\nduplicates leaves no original to copy: lower it"},
		"dup neg":  {Config{Duplicates: -0.1}, "duplicates must be in [0, 1) (a fraction of records)"},
		"dup all":  {Config{Records: 10, Duplicates: 0.97}, "duplicates leaves no original to copy: lower it"},
		"batch":    {Config{Batch: -1}, "batch and senders must be >= 1"},
		"senders":  {Config{Senders: -2}, "batch and senders must be >= 1"},
		"rate":     {Config{Rate: -5}, "rate must be >= 0 records/s (0 = as fast as possible)"},
		"backoff":  {Config{Retry: RetryConfig{InitialInterval: time.Second, MaxInterval: time.Millisecond}}, "the longest backoff must be at least the first"},
	}
	for name, tc := range cases {
		if _, err := Run(context.Background(), tc.cfg); err == nil || err.Error() != tc.want {
			t.Errorf("%s: got %v, want %q", name, err, tc.want)
		}
	}
	if err := (Config{}).withDefaults().validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

// BenchmarkRun measures what the tool reaches against an in-process sink
// that decodes every request and counts its records (both share the CPU).
func BenchmarkRun(b *testing.B) {
	s := newSink(b)
	s.OnLogs = func(plog.Logs) {}
	var sent int64
	for b.Loop() {
		sum, err := Run(context.Background(), Config{Endpoint: s.GRPCEndpoint(),
			Records: 200_000, Duplicates: 0.3, Batch: 1000, Senders: 4})
		if err != nil || sum.Errors != 0 {
			b.Fatalf("%v %+v", err, sum)
		}
		sent += sum.Sent
	}
	b.ReportMetric(float64(sent)/b.Elapsed().Seconds(), "records/s")
}

func TestRetryable(t *testing.T) {
	st, err := status.New(codes.ResourceExhausted, "slow down").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(3 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if retry, d := retryable(st.Err()); !retry || d != 3*time.Second {
		t.Errorf("RetryInfo: %v %v", retry, d)
	}
	for c, want := range map[codes.Code]bool{
		codes.Unavailable: true, codes.DeadlineExceeded: true, codes.ResourceExhausted: true, codes.Aborted: true,
		codes.InvalidArgument: false, codes.Unauthenticated: false, codes.PermissionDenied: false, codes.Internal: false, codes.Unimplemented: false,
	} {
		if got, _ := retryable(status.Error(c, "x")); got != want {
			t.Errorf("%v retryable = %v, want %v", c, got, want)
		}
	}
	if retry, _ := retryable(&net.OpError{Op: "dial", Err: errors.New("connection refused")}); !retry {
		t.Error("a refused connection is not retried")
	}
}
