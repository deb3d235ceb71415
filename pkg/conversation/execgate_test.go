package conversation

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestRemovalHoldsOffExecs: a removal's hold waits for the exec still
// starting in its conversation, refuses new ones there (ErrConflict) but
// not in another conversation, and lets them start again once released.
func TestRemovalHoldsOffExecs(t *testing.T) {
	m := &Manager{}
	const id, other = "0b6a0a49-5d0c-4f3e-9b2a-7e0c1d2e3f40", "1c7b1b5a-6e1d-4a4f-8c3b-8f1d2e3f4a51"
	started, err := m.BeginExec(id)
	if err != nil {
		t.Fatalf("BeginExec: %v", err)
	}
	held := make(chan func())
	go func() { held <- m.holdExecs(context.Background(), id) }()
	select {
	case release := <-held:
		release()
		t.Fatal("holdExecs returned while an exec was still starting")
	case <-time.After(200 * time.Millisecond):
	}
	started()
	var release func()
	select {
	case release = <-held:
	case <-time.After(2 * time.Second):
		t.Fatal("holdExecs did not return once the exec had started")
	}
	if _, err := m.BeginExec(id); !errors.Is(err, ErrConflict) {
		t.Errorf("BeginExec during the removal = %v, want ErrConflict", err)
	}
	s2, err := m.BeginExec(other)
	if err != nil {
		t.Errorf("BeginExec in another conversation during the removal: %v", err)
	} else {
		s2()
	}
	release()
	s3, err := m.BeginExec(id)
	if err != nil {
		t.Fatalf("BeginExec after the removal gave up: %v", err)
	}
	s3()
	s3() // idempotent

	// An exec that never says it started holds the removal up for
	// execStartGrace at most.
	if _, err := m.BeginExec(id); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	m.holdExecs(context.Background(), id)()
	if took := time.Since(t0); took > execStartGrace+2*time.Second {
		t.Errorf("holdExecs waited %v for an exec that never started, want at most %v", took, execStartGrace)
	}
}
