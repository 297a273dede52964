package clock

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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
