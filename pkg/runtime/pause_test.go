package runtime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
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

// standIn is a container in which a process stands in for one the
// container runtime is still starting: the host's sh, copied under the
// name runc's init gives itself (runc:[2:INIT]) and blocked reading a
// FIFO until the test lets it go.
type standIn struct {
	id   string // the container
	cg   string // its freezer cgroup, as the host sees it
	fifo string // what the stand-in reads, on the host
}

// newStandIn starts the container (removed, thawed first, when t ends,
// with the stand-in let go) with the stand-in's binary at /x.
func newStandIn(t *testing.T, d *Docker, server string) *standIn {
	t.Helper()
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
	s := &standIn{fifo: filepath.Join(dir, "fifo")}
	if err := syscall.Mkfifo(s.fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(s.fifo, 0o666)
	spec := baseSpec(t, server)
	spec.Mounts = append(spec.Mounts, Mount{Source: dir, Target: "/x", ReadOnly: true})
	s.id = mustStart(t, d, spec).ContainerID
	// However the test ends, the stand-in leaves and the container is not
	// left frozen (a frozen container here would stall later tests). The
	// CLI, not d: a test may have made d's engine refuse calls.
	t.Cleanup(func() {
		s.tryRelease()
		_ = dockerCmd("unpause", s.id).Run()
		_ = dockerCmd("rm", "-f", s.id).Run()
	})
	if s.cg, _ = d.freezerOf(context.Background(), s.id); s.cg == "" {
		t.Fatal("the container's freezer cgroup is not visible from the host")
	}
	return s
}

// launch starts the stand-in (docker exec -d) and waits until it is seen
// as a process being started.
func (s *standIn) launch(t *testing.T) {
	t.Helper()
	if out, err := dockerCmd("exec", "-d", s.id, "/x/runc:[2:INIT]", "-c", "read x < /x/fifo").CombinedOutput(); err != nil {
		t.Fatalf("docker exec -d: %v\n%s", err, out)
	}
	s.waitStarting(t, true)
}

// waitStarting waits until processes being started are (want) or are
// not in the container.
func (s *standIn) waitStarting(t *testing.T, want bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		got, err := startingIn(s.cg)
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

// tryRelease lets the stand-in go if it waits in its open of the FIFO (a
// writer's open without blocking then meets it, frozen or not).
func (s *standIn) tryRelease() error {
	w, err := os.OpenFile(s.fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	_, _ = w.WriteString("go\n")
	return w.Close()
}

// release is tryRelease, retried for up to 30 s.
func (s *standIn) release(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err := s.tryRelease()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("let the stand-in go: %v", err)
		}
	}
}

// paused is the engine's State.Paused of container id.
func paused(t *testing.T, id string) string {
	t.Helper()
	out, err := dockerCmd("inspect", "-f", "{{.State.Paused}}", id).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// frozen reports whether the cgroup dir is frozen, from its own files.
func frozen(t *testing.T, dir string) bool {
	t.Helper()
	if b, err := os.ReadFile(filepath.Join(dir, "freezer.state")); err == nil {
		return strings.TrimSpace(string(b)) == "FROZEN"
	}
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(b), "frozen 1")
}

// TestPauseSparesAStartingProcess (issue 27): the engine's freeze must
// never stop a process the container runtime is still starting (runc's
// init of an exec, which names itself runc:[2:INIT]): the engine then
// hangs on the container for ever. While a stand-in for one lives (see
// standIn), Pause waits and gives up at its deadline with the container
// left running; once it is gone, Pause freezes the container.
func TestPauseSparesAStartingProcess(t *testing.T) {
	d, server := testDocker(t)
	s := newStandIn(t, d, server)
	ctx := context.Background()
	s.launch(t)

	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	err := d.Pause(short, s.id)
	cancel()
	if err == nil || !strings.Contains(err.Error(), "still starting") {
		_ = d.Unpause(ctx, s.id)
		t.Fatalf("Pause while a process is being started = %v, want it refused", err)
	}
	if p := paused(t, s.id); p != "false" {
		_ = d.Unpause(ctx, s.id)
		t.Fatalf("after the refused Pause, State.Paused = %s, want false", p)
	}

	s.release(t)
	s.waitStarting(t, false)
	long, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := d.Pause(long, s.id); err != nil {
		t.Fatalf("Pause once nothing is being started: %v", err)
	}
	if p := paused(t, s.id); p != "true" {
		t.Errorf("after Pause, State.Paused = %s, want true", p)
	}
	if err := d.Unpause(long, s.id); err != nil {
		t.Fatal(err)
	}
}

// unpauseRefused is the engine, except that it refuses every unpause
// (as an engine stuck on the process its freeze stopped fails to
// answer one) and runs beforePause before its first pause.
type unpauseRefused struct {
	engine
	beforePause func()
	onUnpause   func()
	unpauses    atomic.Int32
}

func (e *unpauseRefused) ContainerPause(ctx context.Context, id string, o client.ContainerPauseOptions) (client.ContainerPauseResult, error) {
	if f := e.beforePause; f != nil {
		e.beforePause = nil
		f()
	}
	return e.engine.ContainerPause(ctx, id, o)
}

func (e *unpauseRefused) ContainerUnpause(context.Context, string, client.ContainerUnpauseOptions) (client.ContainerUnpauseResult, error) {
	e.unpauses.Add(1)
	if f := e.onUnpause; f != nil {
		f()
	}
	return client.ContainerUnpauseResult{}, errors.New("engine unpause refused by the test")
}

// TestPauseThawsTheFreezerWhenTheEngineCannot (issue 27, acceptance 2):
// when the engine's freeze catches a process being started and the
// engine's own unpause fails, Pause thaws the container's freezer itself
// (the stand-in then finishes its start) and, once nothing is starting,
// freezes it again: the engine, which still holds the container paused
// and answers the next pause "already paused", must not leave it running
// while Pause reports it frozen. The engine's unpause then thaws it.
func TestPauseThawsTheFreezerWhenTheEngineCannot(t *testing.T) {
	d, server := testDocker(t)
	eng := d.api
	s := newStandIn(t, d, server)
	refusing := &unpauseRefused{engine: eng}
	// The stand-in appears just before the engine freezes, as an exec's
	// init does when it starts as the pause lands; it is let go (it runs
	// on once thawed) when the engine's unpause has been refused.
	refusing.beforePause = func() { s.launch(t) }
	// It may be frozen before it opened the FIFO: let it go once thawed.
	released := make(chan error, 1)
	refusing.onUnpause = func() {
		go func() {
			var err error
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if err = s.tryRelease(); err == nil {
					break
				}
			}
			released <- err
		}()
	}
	d.api = refusing
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := d.Pause(ctx, s.id)
	d.api = eng
	if err != nil {
		t.Fatalf("Pause with the engine refusing to unpause: %v", err)
	}
	if n := refusing.unpauses.Load(); n != 1 {
		t.Fatalf("the engine was asked to unpause %d times, want 1: the freeze did not catch the stand-in, the test shows nothing", n)
	}
	if err := <-released; err != nil {
		t.Fatalf("let the stand-in go: %v", err)
	}
	if got, _ := startingIn(s.cg); len(got) != 0 {
		t.Errorf("after Pause, processes still being started: %v (the freezer was not thawed for them)", got)
	}
	if !frozen(t, s.cg) {
		t.Errorf("after Pause returned, the container's freezer %s is not frozen: its processes run on", s.cg)
	}
	if p := paused(t, s.id); p != "true" {
		t.Errorf("after Pause, State.Paused = %s, want true", p)
	}
	if err := d.Unpause(ctx, s.id); err != nil {
		t.Fatalf("Unpause: %v", err)
	}
	if frozen(t, s.cg) {
		t.Errorf("after the engine's Unpause, the freezer %s is still frozen", s.cg)
	}
	if code, err := d.Exec(ctx, s.id, []string{"/bin/sh", "-c", "exit 0"}, ExecOptions{}); err != nil || code != 0 {
		t.Errorf("exec after Unpause = %d, %v", code, err)
	}
}
