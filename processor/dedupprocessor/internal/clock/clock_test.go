package clock

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var epoch = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

// TestFakeWaitEndsWhenAdvanced: a wait ends when the time reaches its end,
// not before, and when its wake channel yields or its context ends.
func TestFakeWaitEndsWhenAdvanced(t *testing.T) {
	f := NewFake(epoch)
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

// TestWallWait: the wall clock's wait ends on its timer, its wake or its
// context.
func TestWallWait(t *testing.T) {
	ctx := context.Background()
	if err := (Wall{}).Wait(ctx, nil, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	wake := make(chan struct{})
	close(wake)
	if err := (Wall{}).Wait(ctx, wake, time.Hour); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := (Wall{}).Wait(cctx, nil, time.Hour); err != context.Canceled {
		t.Fatalf("Wait after cancel = %v, want context.Canceled", err)
	}
}
