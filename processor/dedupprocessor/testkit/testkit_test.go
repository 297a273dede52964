package testkit

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// recorder is a testing.TB that records failures; Fatal ends the goroutine
// as testing.T's does.
type recorder struct {
	testing.TB
	errors []string
	fatal  bool
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	r.fatal = true
	runtime.Goexit()
}
func (r *recorder) Fatal(args ...any) { r.Fatalf("%s", fmt.Sprint(args...)) }

// run calls f with a recorder in a goroutine of its own (Fatal ends it).
func run(f func(tb testing.TB)) *recorder {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

func TestWaitFor(t *testing.T) {
	var n atomic.Int32
	r := run(func(tb testing.TB) {
		WaitFor(tb, "three polls", time.Second, func() bool { return n.Add(1) == 3 })
	})
	if len(r.errors) != 0 || n.Load() != 3 {
		t.Fatalf("errors %q after %d polls, want none after 3", r.errors, n.Load())
	}

	start := time.Now()
	r = run(func(tb testing.TB) {
		WaitFor(tb, "never", 50*time.Millisecond, func() bool { return false })
	})
	if took := time.Since(start); !r.fatal || len(r.errors) != 1 || r.errors[0] != "never: not after 50ms" || took < 50*time.Millisecond || took > 5*time.Second {
		t.Fatalf("fatal %v, errors %q after %v; want one fatal \"never: not after 50ms\" after 50ms", r.fatal, r.errors, took)
	}

	r = run(func(tb testing.TB) {
		WaitFor(tb, "never", time.Millisecond, func() bool { return false }, func() string { return "saw 2" })
	})
	if !r.fatal || len(r.errors) != 1 || r.errors[0] != "never (saw 2): not after 1ms" {
		t.Fatalf("with a detail: fatal %v, errors %q", r.fatal, r.errors)
	}
}

var epoch = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

// TestClockWaitEndsWhenAdvanced: a wait ends when the time reaches its end,
// not before, and when its wake channel yields or its context ends.
func TestClockWaitEndsWhenAdvanced(t *testing.T) {
	f := NewClock(epoch)
	ctx := context.Background()
	done := make(chan error, 1)
	go func() { done <- f.Wait(ctx, nil, time.Second) }()
	if err := f.WaitForWaiters(ctx, 1); err != nil {
		t.Fatal(err)
	}
	f.Advance(time.Second - time.Nanosecond)
	if n := f.Waiters(); n != 1 {
		t.Fatalf("%d waiters a nanosecond before the end, want 1", n)
	}
	if d, ok := f.Next(); !ok || d != time.Nanosecond {
		t.Fatalf("Next = %v, %v; want 1ns, true", d, ok)
	}
	f.Advance(time.Nanosecond)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := f.Now(); !got.Equal(epoch.Add(time.Second)) {
		t.Fatalf("Now = %v, want %v", got, epoch.Add(time.Second))
	}

	wake := make(chan struct{}, 1)
	go func() { done <- f.Wait(ctx, wake, time.Hour) }()
	if err := f.WaitForWaiters(ctx, 1); err != nil {
		t.Fatal(err)
	}
	wake <- struct{}{}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := f.Waiters(); n != 0 {
		t.Fatalf("%d waiters after a wake, want 0", n)
	}

	cctx, cancel := context.WithCancel(ctx)
	go func() { done <- f.Wait(cctx, nil, time.Hour) }()
	if err := f.WaitForWaiters(ctx, 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("Wait after cancel = %v, want context.Canceled", err)
	}
	if err := f.Wait(ctx, nil, 0); err != nil {
		t.Fatalf("Wait(0) = %v", err)
	}
}

func TestWantEachOnce(t *testing.T) {
	for _, tc := range []struct {
		lists [][]string
		n     int
		want  string
	}{
		{[][]string{{"a", "b"}, {"c"}}, 3, ""},
		{[][]string{{"a", "b"}, {"b"}}, 2, `"b" delivered 2 times`},
		{[][]string{{"a"}, {"c"}}, 3, "2 distinct records delivered, want 3"},
	} {
		r := run(func(tb testing.TB) { WantEachOnce(tb, Counts(tc.lists...), tc.n) })
		got := ""
		if len(r.errors) > 0 {
			got = r.errors[0]
		}
		if got != tc.want || len(r.errors) > 1 || r.fatal != (tc.want != "") {
			t.Errorf("%v, %d: errors %q (fatal %v), want %q", tc.lists, tc.n, r.errors, r.fatal, tc.want)
		}
	}
}

func TestWantEach(t *testing.T) {
	want := []string{"a", "b"}
	for _, tc := range []struct {
		keys   []string
		times  int
		errors []string
	}{
		{[]string{"a", "b", "b", "a"}, 2, nil},
		{[]string{"a", "b"}, 1, nil},
		{[]string{"a", "b", "x"}, 1, []string{"sink received 3 records, want 2"}},
		{[]string{"a", "a"}, 1, []string{"record a delivered 2 times, want 1", "record b delivered 0 times, want 1"}},
	} {
		r := run(func(tb testing.TB) {
			WantEach(tb, Counts(tc.keys), want, tc.times, func(i int) string { return want[i] })
		})
		if fmt.Sprint(r.errors) != fmt.Sprint(tc.errors) || r.fatal {
			t.Errorf("%v x%d: errors %q (fatal %v), want %q", tc.keys, tc.times, r.errors, r.fatal, tc.errors)
		}
	}
}

func TestMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() {
		if err := provider.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	meter := provider.Meter("testkit")
	ctx := context.Background()
	a, b := attribute.String("p", "a"), attribute.String("p", "b")
	settled, refused := attribute.String("result", "settled"), attribute.String("result", "refused")

	counter, err := meter.Int64Counter("records")
	if err != nil {
		t.Fatal(err)
	}
	counter.Add(ctx, 3, metric.WithAttributes(a))
	counter.Add(ctx, 4, metric.WithAttributes(a, settled))
	gauge, err := meter.Int64Gauge("held")
	if err != nil {
		t.Fatal(err)
	}
	gauge.Record(ctx, 9, metric.WithAttributes(b))
	hist, err := meter.Float64Histogram("wait")
	if err != nil {
		t.Fatal(err)
	}
	hist.Record(ctx, 1, metric.WithAttributes(a, settled))
	hist.Record(ctx, 2, metric.WithAttributes(a, settled))
	hist.Record(ctx, 1, metric.WithAttributes(b, settled))
	hist.Record(ctx, 1, metric.WithAttributes(b, refused))

	for _, c := range []struct {
		what      string
		got, want uint64
	}{
		{"records{p=a}", uint64(Int64(t, reader, "records", a)), 3},
		{"records{p=a,result=settled}", uint64(Int64(t, reader, "records", a, settled)), 4},
		{"records{p=b}", uint64(Int64(t, reader, "records", b)), 0},
		{"held{p=b}", uint64(Int64(t, reader, "held", b)), 9},
		{"absent", uint64(Int64(t, reader, "absent")), 0},
		{"wait{p=a,result=settled}", HistogramCount(t, reader, "wait", a, settled), 2},
		{"wait{p=a}", HistogramCount(t, reader, "wait", a), 0},
		{"wait{result=settled,...}", HistogramCountAll(t, reader, "wait", settled), 3},
		{"records{p=a,...}", uint64(SumInt64(collect(t, reader), "records", a)), 7},
		{"records{result=settled,...}", uint64(SumInt64(collect(t, reader), "records", settled)), 4},
		{"held{...}", uint64(SumInt64(collect(t, reader), "held")), 9},
		{"wait{...}", HistogramCountAll(t, reader, "wait"), 4},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.what, c.got, c.want)
		}
	}
}

// TestHogs: the hogs run until the test ends, and are reaped then.
func TestHogs(t *testing.T) {
	var pids []int
	t.Run("hogs", func(t *testing.T) {
		pids = Hogs(t, 2)
		for _, pid := range pids {
			if err := syscall.Kill(pid, 0); err != nil {
				t.Fatalf("hog %d not running: %v", pid, err)
			}
		}
	})
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Fatalf("hog %d after its test ended: %v, want no such process", pid, err)
		}
	}
}
