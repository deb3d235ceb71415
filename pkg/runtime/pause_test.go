package runtime

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestPauseFreezesAndForceRemoveNeedsNoUnpause: a paused container runs
// nothing (an exec cannot start in it), Pause and Unpause are idempotent,
// a paused container is removed at once, and a stopped one gives
// ErrNotRunning.
func TestPauseFreezesAndForceRemoveNeedsNoUnpause(t *testing.T) {
	d, server := testDocker(t)
	ctx := context.Background()
	inst := mustStart(t, d, baseSpec(t, server))
	id := inst.ContainerID
	for range 2 {
		if err := d.Pause(ctx, id); err != nil {
			t.Fatalf("Pause: %v", err)
		}
	}
	if code, err := d.Exec(ctx, id, []string{"/bin/sh", "-c", "exit 0"}, ExecOptions{}); err == nil && code == 0 {
		t.Error("an exec ran in a paused container")
	}
	for range 2 {
		if err := d.Unpause(ctx, id); err != nil {
			t.Fatalf("Unpause: %v", err)
		}
	}
	if code, err := d.Exec(ctx, id, []string{"/bin/sh", "-c", "exit 0"}, ExecOptions{}); err != nil || code != 0 {
		t.Errorf("exec after Unpause = %d, %v", code, err)
	}
	if err := d.Pause(ctx, id); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := d.Remove(ctx, id); err != nil {
		t.Fatalf("Remove of a paused container: %v", err)
	}
	if took := time.Since(t0); took > 5*time.Second {
		t.Errorf("Remove of a paused container took %v", took)
	}
	if err := d.Pause(ctx, id); !errors.Is(err, ErrNotFound) {
		t.Errorf("Pause of a removed container = %v, want ErrNotFound", err)
	}
	stopped := mustStart(t, d, baseSpec(t, server))
	if err := d.Stop(ctx, stopped.ContainerID, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := d.Pause(ctx, stopped.ContainerID); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Pause of a stopped container = %v, want ErrNotRunning", err)
	}
}
