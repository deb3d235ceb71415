package repolock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
)

// testCtx is a context that ends with the test.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestLockAcrossProcesses: the file lock excludes a second Locks (another
// process) while the first holds it, and a waiter gives up when its
// context ends.
func TestLockAcrossProcesses(t *testing.T) {
	dir := testenv.TempDir(t)
	a, b := &Locks{Dir: dir}, &Locks{Dir: dir}
	key := "/some/repo/.git"
	unlock, err := a.Lock(testCtx(t), key)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(testCtx(t), 100*time.Millisecond)
	defer cancel()
	if _, err := b.Lock(ctx, key); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Lock while held = %v, want context.DeadlineExceeded", err)
	}
	// Same Locks, same key: the in-process lock also waits.
	ctx2, cancel2 := context.WithTimeout(testCtx(t), 50*time.Millisecond)
	defer cancel2()
	if _, err := a.Lock(ctx2, key); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("nested Lock = %v, want context.DeadlineExceeded", err)
	}
	// Another repository is independent.
	u2, err := b.Lock(testCtx(t), "/other/repo/.git")
	if err != nil {
		t.Fatalf("Lock(other repo): %v", err)
	}
	u2()
	unlock()
	u3, err := b.Lock(testCtx(t), key)
	if err != nil {
		t.Fatalf("Lock after release: %v", err)
	}
	u3()
}
