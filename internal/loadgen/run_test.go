package loadgen

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"
	"google.golang.org/grpc/codes"
)

var protocols = []string{GRPC, HTTP}

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
	t.Logf("summary: %s", sum.JSON())
	return sum
}

func TestRunDeliversExactCounts(t *testing.T) {
	for _, p := range protocols {
		for _, key := range []Key{KeyContent, KeyEventID} {
			t.Run(p+"/"+string(key), func(t *testing.T) {
				s := newSink(t)
				cfg := Config{Endpoint: s.endpoint(p), Protocol: p, Records: 20_000, Duplicates: 0.3,
					Batch: 500, Senders: 4, Key: key, Seed: 11}
				sum := run(t, cfg)
				c := s.counts()
				distinct := c.distinctContent
				if key == KeyEventID {
					distinct = c.distinctEventID
					if c.distinctContent != 20_000 {
						t.Errorf("event.id copies must differ in content: %d distinct contents, want 20000", c.distinctContent)
					}
				}
				if sum.Sent != 20_000 || sum.Duplicates != 6_000 || sum.Unique != 14_000 {
					t.Errorf("sent %d duplicates %d unique %d, want 20000 6000 14000", sum.Sent, sum.Duplicates, sum.Unique)
				}
				if int64(c.records) != sum.Sent || int64(distinct) != sum.Unique {
					t.Errorf("sink got %d records, %d identities; summary says %d, %d", c.records, distinct, sum.Sent, sum.Unique)
				}
				if sum.Requests != 40 || int64(c.attempts) != sum.Requests || sum.Retries != 0 || sum.Errors != 0 || sum.FailedRecords != 0 {
					t.Errorf("requests %d (sink %d) retries %d errors %d failed %d", sum.Requests, c.attempts, sum.Retries, sum.Errors, sum.FailedRecords)
				}
				if sum.CopiesInBatch+sum.CopiesSameSender+sum.CopiesOtherSender != sum.Duplicates {
					t.Errorf("copy sources %d+%d+%d != %d", sum.CopiesInBatch, sum.CopiesSameSender, sum.CopiesOtherSender, sum.Duplicates)
				}
				if sum.Seed != 11 || sum.Seconds <= 0 || sum.RecordsPerSecond <= 0 {
					t.Errorf("seed %d seconds %v rate %v", sum.Seed, sum.Seconds, sum.RecordsPerSecond)
				}
			})
		}
	}
}

func TestRunRetriesRetryableErrors(t *testing.T) {
	cases := []struct {
		name string
		code codes.Code
		http int
	}{
		{"unavailable", codes.Unavailable, http.StatusServiceUnavailable},
		{"exhausted", codes.ResourceExhausted, http.StatusTooManyRequests},
		{"gateway", codes.Aborted, http.StatusBadGateway},
	}
	for _, p := range protocols {
		for _, tc := range cases {
			t.Run(p+"/"+tc.name, func(t *testing.T) {
				s := newSink(t)
				const k = 7
				s.fail(k, tc.code, tc.http)
				sum := run(t, Config{Endpoint: s.endpoint(p), Protocol: p, Records: 3000, Duplicates: 0.25,
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
}

// A list of endpoints gets every request at each of them; a refusal by one
// sends the request to all again.
func TestRunMirrorsToEveryEndpoint(t *testing.T) {
	for _, p := range protocols {
		t.Run(p, func(t *testing.T) {
			a, b := newSink(t), newSink(t)
			const k = 3
			b.fail(k, codes.Unavailable, http.StatusServiceUnavailable)
			sum := run(t, Config{Endpoint: a.endpoint(p) + ", " + b.endpoint(p), Protocol: p, Records: 2000,
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
		})
	}
}

func TestRunDropsOnNonRetryableErrors(t *testing.T) {
	for _, p := range protocols {
		t.Run(p, func(t *testing.T) {
			s := newSink(t)
			const k = 3
			s.fail(k, codes.InvalidArgument, http.StatusBadRequest)
			sum := run(t, Config{Endpoint: s.endpoint(p), Protocol: p, Records: 3000, Duplicates: 0.3,
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
		})
	}
}

func TestRunRetryDisabled(t *testing.T) {
	for _, p := range protocols {
		t.Run(p, func(t *testing.T) {
			s := newSink(t)
			s.fail(2, codes.Unavailable, http.StatusServiceUnavailable)
			sum := run(t, Config{Endpoint: s.endpoint(p), Protocol: p, Records: 1000, Duplicates: 0.1,
				Batch: 100, Senders: 1, Retry: RetryConfig{Disabled: true}})
			if sum.Errors != 2 || sum.Retries != 0 || sum.Sent != 800 || sum.FailedRecords != 200 {
				t.Errorf("errors %d retries %d sent %d failed %d", sum.Errors, sum.Retries, sum.Sent, sum.FailedRecords)
			}
		})
	}
}

func TestRunCompresses(t *testing.T) {
	for _, p := range protocols {
		t.Run(p, func(t *testing.T) {
			s := newSink(t)
			sum := run(t, Config{Endpoint: s.endpoint(p), Protocol: p, Compression: "gzip", Records: 1000,
				Duplicates: 0.5, Batch: 250, Senders: 2})
			if c := s.counts(); sum.Sent != 1000 || sum.Unique != 500 || c.records != 1000 || c.distinctContent != 500 {
				t.Errorf("sent %d unique %d; sink %d records %d identities", sum.Sent, sum.Unique, c.records, c.distinctContent)
			}
		})
	}
}

func TestRunGivesUpAfterMaxElapsed(t *testing.T) {
	s := newSink(t)
	s.fail(1_000_000, codes.Unavailable, http.StatusServiceUnavailable)
	sum := run(t, Config{Endpoint: s.endpoint(GRPC), Records: 200, Duplicates: 0.1, Batch: 100, Senders: 2,
		Retry: RetryConfig{InitialInterval: 2 * time.Millisecond, MaxInterval: 4 * time.Millisecond, MaxElapsedTime: 150 * time.Millisecond}})
	c := s.counts()
	if sum.Sent != 0 || sum.Errors != 2 || sum.FailedRecords != 200 || sum.Retries < 2 {
		t.Errorf("sent %d errors %d failed %d retries %d", sum.Sent, sum.Errors, sum.FailedRecords, sum.Retries)
	}
	if int64(c.attempts) != sum.Requests+sum.Retries {
		t.Errorf("sink saw %d attempts, requests+retries = %d", c.attempts, sum.Requests+sum.Retries)
	}
}

func TestRunCountsPartialSuccess(t *testing.T) {
	for _, p := range protocols {
		t.Run(p, func(t *testing.T) {
			s := newSink(t)
			s.RejectEach(2)
			sum := run(t, Config{Endpoint: s.endpoint(p), Protocol: p, Records: 1000, Duplicates: 0.2, Batch: 100, Senders: 2})
			if sum.Requests != 10 || sum.Errors != 10 || sum.FailedRecords != 20 || sum.Sent != 980 || sum.Retries != 0 {
				t.Errorf("requests %d errors %d failed %d sent %d retries %d", sum.Requests, sum.Errors, sum.FailedRecords, sum.Sent, sum.Retries)
			}
		})
	}
}

func TestRunRespectsRate(t *testing.T) {
	for _, p := range protocols {
		t.Run(p, func(t *testing.T) {
			s := newSink(t)
			const records, batch, rate = 3000, 100, 10_000.0
			start := time.Now()
			sum := run(t, Config{Endpoint: s.endpoint(p), Protocol: p, Records: records, Duplicates: 0.3,
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
		})
	}
}

func TestRunSendsHeaders(t *testing.T) {
	for _, p := range protocols {
		t.Run(p, func(t *testing.T) {
			s := newSink(t)
			sum := run(t, Config{Endpoint: s.endpoint(p), Protocol: p, Records: 500, Duplicates: 0.3, Batch: 100, Senders: 2,
				Headers: map[string]string{"X-Scope-OrgID": "tenant-a", "x-team": "blue"}})
			hs := s.allHeaders()
			if sum.Sent != 500 || len(hs) != 5 {
				t.Fatalf("sent %d, sink saw %d requests", sum.Sent, len(hs))
			}
			for _, h := range hs {
				if h.Get("X-Scope-OrgID") != "tenant-a" || h.Get("X-Team") != "blue" {
					t.Fatalf("request headers %v lack X-Scope-OrgID=tenant-a, x-team=blue", h)
				}
			}
		})
	}
}

// Two runs with one seed send the same requests (in whatever order the
// senders interleave), over either protocol; another seed sends others.
func TestRunIsDeterministic(t *testing.T) {
	streams := map[string][]string{}
	for _, tc := range []struct {
		name     string
		protocol string
		seed     uint64
	}{{"grpc-1", GRPC, 99}, {"grpc-2", GRPC, 99}, {"http", HTTP, 99}, {"other-seed", GRPC, 100}} {
		s := newSink(t)
		sum := run(t, Config{Endpoint: s.endpoint(tc.protocol), Protocol: tc.protocol, Records: 4000, Duplicates: 0.35,
			Batch: 200, Senders: 3, Seed: tc.seed, Key: KeyEventID})
		if sum.Sent != 4000 {
			t.Fatalf("%s: sent %d", tc.name, sum.Sent)
		}
		streams[tc.name] = s.counts().payloads
	}
	if len(streams["grpc-1"]) != 20 {
		t.Fatalf("%d payloads", len(streams["grpc-1"]))
	}
	if !slices.Equal(streams["grpc-1"], streams["grpc-2"]) || !slices.Equal(streams["grpc-1"], streams["http"]) {
		t.Error("one seed, different streams")
	}
	for _, p := range streams["other-seed"] {
		if slices.Contains(streams["grpc-1"], p) {
			t.Fatal("seeds 99 and 100 share a request")
		}
	}
}

func TestRunStopsAtDuration(t *testing.T) {
	s := newSink(t)
	start := time.Now()
	sum := run(t, Config{Endpoint: s.endpoint(GRPC), Records: 1_000_000, Duplicates: 0.3, Batch: 100, Senders: 2,
		Rate: 5000, Duration: 200 * time.Millisecond})
	if sum.Sent == 0 || sum.Sent >= 1_000_000 || sum.Errors != 0 || sum.Sent != int64(s.counts().records) {
		t.Errorf("sent %d errors %d sink %d", sum.Sent, sum.Errors, s.counts().records)
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("a 200ms run took %v", time.Since(start))
	}
}

func TestRunStopsOnStopAndContext(t *testing.T) {
	s := newSink(t)
	stop := make(chan struct{})
	time.AfterFunc(100*time.Millisecond, func() { close(stop) })
	sum, err := Run(context.Background(), Config{Endpoint: s.endpoint(HTTP), Protocol: HTTP, Records: 1_000_000,
		Batch: 100, Senders: 2, Rate: 5000, Stop: stop})
	if err != nil || sum.Sent >= 1_000_000 || sum.Errors != 0 {
		t.Errorf("stop: err %v sent %d errors %d", err, sum.Sent, sum.Errors)
	}

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	sum, err = Run(ctx, Config{Endpoint: s.endpoint(GRPC), Records: 1_000_000, Batch: 100, Senders: 2, Rate: 5000})
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
	for _, p := range protocols {
		t.Run(p, func(t *testing.T) {
			sum := run(t, Config{Endpoint: addr, Protocol: p, Records: 300, Batch: 100, Senders: 1,
				Retry: RetryConfig{InitialInterval: time.Millisecond, MaxInterval: 2 * time.Millisecond, MaxElapsedTime: 100 * time.Millisecond}})
			if sum.Sent != 0 || sum.Errors != 3 || sum.FailedRecords != 300 || sum.Retries == 0 {
				t.Errorf("sent %d errors %d failed %d retries %d", sum.Sent, sum.Errors, sum.FailedRecords, sum.Retries)
			}
		})
	}
}

func TestRunDrawsProgress(t *testing.T) {
	s := newSink(t)
	var buf bytes.Buffer // written by Run's progress goroutine only, read after Run
	sum := run(t, Config{Endpoint: s.endpoint(GRPC), Records: 2000, Batch: 100, Senders: 2, Rate: 20_000,
		Progress: &buf, ProgressInterval: 10 * time.Millisecond})
	out := buf.String()
	if sum.Sent != 2000 || !strings.Contains(out, "/2,000 records") || !strings.Contains(out, "rec/s") ||
		!strings.HasSuffix(out, "\r\033[K") {
		t.Errorf("progress output %q", out)
	}
}

func TestProgressLine(t *testing.T) {
	got := ProgressLine(45_000, 100_000, 123_456.7, 2, 1, 1500*time.Millisecond)
	want := "[=============>                ]  45% 45,000/100,000 records  123,456 rec/s  retries 2  errors 1  1.5s"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if got := ProgressLine(10, 10, 0, 0, 0, 0); !strings.HasPrefix(got, "[==============================] 100%") {
		t.Errorf("full bar: %q", got)
	}
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -1234: "-1,234"} {
		if got := Group(n); got != want {
			t.Errorf("Group(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	cases := map[string]struct {
		cfg  Config
		want string
	}{
		"protocol":    {Config{Protocol: "udp"}, "protocol must be grpc or http"},
		"compression": {Config{Compression: "zstd"}, "compression must be none or gzip"},
		"records":     {Config{Records: -1}, "records must be >= 1"},
		"dup high":    {Config{Duplicates: 1}, "duplicates must be in [0, 1)"},
		"dup neg":     {Config{Duplicates: -0.1}, "duplicates must be in [0, 1)"},
		"dup all":     {Config{Records: 10, Duplicates: 0.97}, "leaves no original"},
		"batch":       {Config{Batch: -1}, "batch must be >= 1"},
		"senders":     {Config{Senders: -2}, "senders must be >= 1"},
		"rate":        {Config{Rate: -5}, "rate must be >= 0"},
		"key":         {Config{Key: "body"}, "key must be content or event.id"},
		"multiplier":  {Config{Retry: RetryConfig{Multiplier: 0.5}}, "retry-multiplier must be >= 1"},
		"max int":     {Config{Retry: RetryConfig{InitialInterval: time.Second, MaxInterval: time.Millisecond}}, "retry-max-interval"},
		"header":      {Config{Headers: map[string]string{"bad key": "v"}}, "invalid header name"},
	}
	for name, tc := range cases {
		err := tc.cfg.Defaults().Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", name, err, tc.want)
		}
		if _, err := Run(context.Background(), tc.cfg); err == nil {
			t.Errorf("%s: Run accepted an invalid config", name)
		}
	}
	if err := (Config{}).Defaults().Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

func TestParseHeaders(t *testing.T) {
	h, err := ParseHeaders(" X-Scope-OrgID=a , k=v=w")
	if err != nil || h["X-Scope-OrgID"] != "a" || h["k"] != "v=w" || len(h) != 2 {
		t.Errorf("ParseHeaders: %v %v", h, err)
	}
	for _, bad := range []string{"novalue", "=v", "a=b,,c=d"} {
		if _, err := ParseHeaders(bad); err == nil {
			t.Errorf("ParseHeaders(%q) accepted", bad)
		}
	}
}

// BenchmarkRun measures what the tool reaches against an in-process sink
// that decodes every request and counts its records (both share the CPU).
func BenchmarkRun(b *testing.B) {
	for _, p := range protocols {
		b.Run(p, func(b *testing.B) {
			s := newSink(b)
			s.OnLogs = func(plog.Logs, http.Header) {}
			var sent int64
			for b.Loop() {
				sum, err := Run(context.Background(), Config{Endpoint: s.endpoint(p), Protocol: p,
					Records: 200_000, Duplicates: 0.3, Batch: 1000, Senders: 4})
				if err != nil || sum.Errors != 0 {
					b.Fatalf("%v %+v", err, sum)
				}
				sent += sum.Sent
			}
			b.ReportMetric(float64(sent)/b.Elapsed().Seconds(), "records/s")
		})
	}
}
