package otlp

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var protocols = []string{GRPC, HTTP}

// testSink is a sink whose requests Faults decide.
type testSink struct {
	*Sink
	*Faults
}

func newSink(t *testing.T) *testSink {
	t.Helper()
	s, err := NewSink()
	if err != nil {
		t.Fatal(err)
	}
	f := &Faults{}
	s.Gate = f.Gate
	t.Cleanup(func() { _ = s.Close() })
	t.Cleanup(f.Unhold)
	return &testSink{s, f}
}

func newClient(t *testing.T, s *testSink, protocol string) *Client {
	t.Helper()
	endpoint := s.GRPCEndpoint()
	if protocol == HTTP {
		endpoint = s.HTTPEndpoint()
	}
	c, err := NewClient(protocol, endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func logs(n int) plog.Logs {
	ld := plog.NewLogs()
	lrs := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords()
	for i := range n {
		lrs.AppendEmpty().Attributes().PutInt("i", int64(i))
	}
	return ld
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Every signal arrives over either protocol; the sink keeps copies and
// counts items.
func TestSendEverySignal(t *testing.T) {
	for _, p := range protocols {
		s := newSink(t)
		c := newClient(t, s, p)
		ctx := ctxT(t)
		td := ptrace.NewTraces()
		td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans().AppendEmpty().SetName("s")
		md := pmetric.NewMetrics()
		md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty().SetEmptyGauge().DataPoints().AppendEmpty()
		for _, err := range []error{c.SendLogs(ctx, logs(3)), c.SendTraces(ctx, td), c.SendMetrics(ctx, md), c.SendMetrics(ctx, md)} {
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
		}
		got := [...]int{s.LogRecordCount(), s.SpanCount(), s.DataPointCount(), len(s.Logs()), len(s.Traces()), len(s.Metrics()), s.Requests()}
		if got != [...]int{3, 1, 2, 1, 1, 2, 4} {
			t.Errorf("%s: [logs spans points, requests kept of each, requests] = %v", p, got)
		}
	}
}

// OnLogs takes the logs instead of the sink.
func TestOnLogs(t *testing.T) {
	for _, p := range protocols {
		s := newSink(t)
		seen := 0
		s.OnLogs = func(ld plog.Logs) { seen += ld.LogRecordCount() } // under the sink's lock
		c := newClient(t, s, p)
		if err := c.SendLogs(ctxT(t), logs(5)); err != nil {
			t.Fatal(err)
		}
		if seen != 5 || len(s.Logs()) != 0 || s.LogRecordCount() != 5 {
			t.Errorf("%s: OnLogs saw %d records, the sink kept %d requests and counts %d records", p, seen, len(s.Logs()), s.LogRecordCount())
		}
	}
}

// A refusal is the code or status FailWith sets; refused requests are
// counted, not kept.
func TestFailNext(t *testing.T) {
	for _, p := range protocols {
		s := newSink(t)
		c := newClient(t, s, p)
		ctx := ctxT(t)
		s.FailNext(1)
		err := c.SendLogs(ctx, logs(4))
		var he *HTTPError
		if status.Code(err) != codes.Unavailable && (!errors.As(err, &he) || he.StatusCode != http.StatusServiceUnavailable) {
			t.Errorf("%s: %v, want Unavailable / 503", p, err)
		}
		s.FailWith(status.Error(codes.InvalidArgument, "the sink refused the request"))
		s.FailNext(1)
		err = c.SendLogs(ctx, logs(2))
		if status.Code(err) != codes.InvalidArgument && (!errors.As(err, &he) || he.StatusCode != http.StatusBadRequest || he.Message != "the sink refused the request") {
			t.Errorf("%s: %v, want InvalidArgument / 400", p, err)
		}
		if err := c.SendLogs(ctx, logs(1)); err != nil {
			t.Fatal(err)
		}
		if s.Requests() != 3 || s.Refused() != 2 || s.RefusedItems() != 6 || s.LogRecordCount() != 1 {
			t.Errorf("%s: requests %d refused %d (%d items), kept %d records", p, s.Requests(), s.Refused(), s.RefusedItems(), s.LogRecordCount())
		}
	}
}

// A held request waits until Unhold; one whose client gives up while held,
// or while the latency runs, is refused.
func TestHoldAndLatency(t *testing.T) {
	s := newSink(t)
	c := newClient(t, s, GRPC)
	send := func(ctx context.Context) <-chan error {
		done := make(chan error, 1)
		go func() { done <- c.SendLogs(ctx, logs(1)) }()
		return done
	}
	s.Hold()
	held := send(context.Background())
	ctx, giveUp := context.WithCancel(context.Background())
	gaveUp := send(ctx)
	testkit.WaitFor(t, "two requests held", 10*time.Second, func() bool { return s.Holding() == 2 })
	giveUp()
	if err := <-gaveUp; err == nil {
		t.Error("a held request whose client gave up was accepted")
	}
	testkit.WaitFor(t, "the request given up refused", 10*time.Second, func() bool { return s.Refused() == 1 })
	s.Unhold()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	s.SetLatency(time.Minute)
	ctx, giveUp = context.WithCancel(context.Background())
	slow := send(ctx)
	testkit.WaitFor(t, "the slow request received", 10*time.Second, func() bool { return s.Requests() == 3 })
	giveUp()
	if err := <-slow; err == nil {
		t.Error("a slow answer the client gave up on was accepted")
	}
	testkit.WaitFor(t, "the slow request refused", 10*time.Second, func() bool { return s.Refused() == 2 })
	if s.LogRecordCount() != 1 {
		t.Errorf("kept %d records, want 1", s.LogRecordCount())
	}
}

func TestNewClientEndpoints(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:4318":         "http://127.0.0.1:4318",
		"http://gw:4318/":        "http://gw:4318",
		"https://gw.example:443": "https://gw.example:443",
	} {
		c, err := NewClient(HTTP, in)
		if err != nil || c.base != want {
			t.Errorf("NewClient(http, %q): %v; want %v", in, err, want)
		}
	}
	if _, err := NewClient("udp", "127.0.0.1:1"); err == nil {
		t.Error("NewClient(udp) accepted")
	}
}
