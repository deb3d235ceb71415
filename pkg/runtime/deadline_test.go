package runtime

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/internal/testimage"
)

// TestWedgedContainerCallsGiveUp runs the runtime's calls against a
// container on which the engine hangs (testenv.StartWedged): each one
// fails with ErrEngineTimeout instead of waiting for ever, is listed by
// Stalls, and the engine's calls on other containers still answer.
func TestWedgedContainerCallsGiveUp(t *testing.T) {
	image := testimage.Ensure(t)
	testenv.RequireLocalEngine(t)
	d, err := NewDocker(context.Background(), DockerOptions{Logger: testLogger(t), EngineTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	w := testenv.StartWedged(t, image)
	ctx := context.Background() // no deadline of the caller's: the runtime's own must hold

	// Remove comes last: the engine goes on with a removal ohd gave up
	// on, and may have stopped the container when a later call comes
	// (pause then answers "cannot pause a stopped container" at once).
	calls := []struct {
		name string
		call func() error
	}{
		{"exec", func() error {
			_, err := d.Exec(ctx, w.ID, []string{"true"}, ExecOptions{Stdout: io.Discard, Stderr: io.Discard})
			return err
		}},
		{"inspect", func() error { _, err := d.Inspect(ctx, w.ID); return err }},
		{"pause", func() error { return d.Pause(ctx, w.ID) }},
		{"remove", func() error { return d.Remove(ctx, w.ID) }},
	}
	for _, c := range calls {
		if err := c.call(); !errors.Is(err, ErrEngineTimeout) {
			t.Errorf("%s on a wedged container: %v, want ErrEngineTimeout", c.name, err)
		}
	}
	got := d.Stalls()
	if len(got) < len(calls) {
		t.Errorf("Stalls() = %v, want one per call (%d)", got, len(calls))
	}
	for _, s := range got {
		if !strings.Contains(s.String(), "timed out at") || s.Container == "" {
			t.Errorf("stall %+v reads %q", s, s)
		}
	}
	// The engine answers for the rest.
	if _, err := d.List(ctx, "no-such-server"); err != nil {
		t.Errorf("List while one container is wedged: %v", err)
	}
}

// TestExecWatchdogSparesALongCommand: a command that runs longer than
// the engine timeout, silently, is not given up (it has started).
func TestExecWatchdogSparesALongCommand(t *testing.T) {
	image := testimage.Ensure(t)
	testenv.RequireLocalEngine(t)
	d, err := NewDocker(context.Background(), DockerOptions{Logger: testLogger(t), EngineTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	out, err := testenv.Docker(time.Minute, "run", "-d", "-i", "--label", testenv.WedgeLabel+"=1", "--network", "none", "--entrypoint", "/bin/sh", image, "-c", "read x")
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(out)
	t.Cleanup(func() { _, _ = testenv.Docker(time.Minute, "rm", "-f", id) })
	// The command waits, silent, for its input, which ends after 2.5 s
	// (more than the engine timeout).
	pr, pw := io.Pipe()
	time.AfterFunc(2500*time.Millisecond, func() { pw.Close() })
	code, err := d.Exec(context.Background(), id, []string{"/bin/sh", "-c", "read x; exit 7"},
		ExecOptions{Stdin: pr, Stdout: io.Discard, Stderr: io.Discard})
	if err != nil || code != 7 {
		t.Fatalf("Exec of a silent long command = %d, %v; want 7, nil", code, err)
	}
	if s := d.Stalls(); len(s) != 0 {
		t.Errorf("Stalls() = %v, want none", s)
	}
}
