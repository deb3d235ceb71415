package runtime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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

// TestPauseSparesAStartingProcess (issue 27): the engine's freeze must
// never stop a process the container runtime is still starting (runc's
// init of an exec, which names itself runc:[2:INIT]): the engine then
// hangs on the container for ever. Here a process of that name (the
// host's sh, copied under it, blocked on a FIFO) stands in for one: while
// it lives, Pause waits and gives up at its deadline with the container
// left running; once it is gone, Pause freezes the container.
func TestPauseSparesAStartingProcess(t *testing.T) {
	d, server := testDocker(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sh, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(sh)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "runc:[2:INIT]"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(fifo, 0o666)
	spec := baseSpec(t, server)
	spec.Mounts = append(spec.Mounts, Mount{Source: dir, Target: "/x", ReadOnly: true})
	id := mustStart(t, d, spec).ContainerID
	// However the test ends, the stand-in leaves and the container is not
	// left frozen (a frozen container here would stall later tests).
	t.Cleanup(func() {
		if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_, _ = w.WriteString("go\n")
			_ = w.Close()
		}
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = d.Unpause(cctx, id)
		_ = d.Remove(cctx, id)
	})

	ctx := context.Background()
	cg, _ := d.freezerOf(ctx, id)
	if cg == "" {
		t.Fatal("the container's freezer cgroup is not visible from the host")
	}
	if out, err := dockerCmd("exec", "-d", id, "/x/runc:[2:INIT]", "-c", "read x < /x/fifo").CombinedOutput(); err != nil {
		t.Fatalf("docker exec -d: %v\n%s", err, out)
	}
	waitStarting := func(want bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; {
			got, err := startingIn(cg)
			if err != nil {
				t.Fatal(err)
			}
			if (len(got) > 0) == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("processes being started in the container: %v, want some: %v", got, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitStarting(true)
	paused := func() string {
		out, err := dockerCmd("inspect", "-f", "{{.State.Paused}}", id).Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}

	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	err = d.Pause(short, id)
	cancel()
	if err == nil || !strings.Contains(err.Error(), "still starting") {
		_ = d.Unpause(ctx, id)
		t.Fatalf("Pause while a process is being started = %v, want it refused", err)
	}
	if p := paused(); p != "false" {
		_ = d.Unpause(ctx, id)
		t.Fatalf("after the refused Pause, State.Paused = %s, want false", p)
	}

	// The reader waits in its open of the FIFO: a writer's open without
	// blocking meets it.
	var w *os.File
	for deadline := time.Now().Add(30 * time.Second); ; {
		if w, err = os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	_, _ = w.WriteString("go\n")
	_ = w.Close()
	waitStarting(false)
	long, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := d.Pause(long, id); err != nil {
		t.Fatalf("Pause once nothing is being started: %v", err)
	}
	if p := paused(); p != "true" {
		t.Errorf("after Pause, State.Paused = %s, want true", p)
	}
	if err := d.Unpause(long, id); err != nil {
		t.Fatal(err)
	}
}
