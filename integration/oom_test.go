package integration

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/store"
)

// TestOOMInsideIsNotADeath: a process inside a conversation's container
// (a build) runs out of memory and the kernel kills it; the engine sends
// "oom" but the container and its inner server run on. ohd must not take
// that for a death: the record stays running, and forwarded requests keep
// working with the inner key the server has (a stop-and-restart would
// write a fresh key the running server never sees: every request 401).
func TestOOMInsideIsNotADeath(t *testing.T) {
	// Docker only by design: it waits for Docker's own "oom" event; TestBackendOOMInsideIsNotADeath is this test on both backends.
	d := dockerDaemon(t) // containers get 256 MiB
	id, _ := d.apiCreate(map[string]any{"workspace": map[string]any{"working_dir": testenv.NewRepo(t, testenv.RepoOptions{})}})
	c := d.record(id)
	if code, out := d.innerExec(id, "sh", "-c", "echo before"); code != 0 || !strings.Contains(out, "before") {
		t.Fatalf("exec before the OOM: %d %q", code, out)
	}
	since := time.Now().Add(-time.Second).Unix()
	// sh doubles a string until the cgroup's limit: the kernel kills it.
	code, out := d.execIn(id, "sh", "-c", "a=0123456789abcdef; while :; do a=\"$a$a\"; done")
	if code == 0 {
		t.Fatalf("the memory hog exited 0: %q", out)
	}
	waitFor(t, 30*time.Second, "the engine's oom event", func() bool {
		ev, _ := dockerCmd("events", "--since", strconv.FormatInt(since, 10), "--until", strconv.FormatInt(time.Now().Unix(), 10),
			"--filter", "container="+c.ContainerID, "--filter", "event=oom", "--format", "{{.Action}}").Output()
		return strings.Contains(string(ev), "oom")
	})
	// ohd has seen it once it logged it, either way.
	waitFor(t, 30*time.Second, "ohd to see the oom event", func() bool {
		l := d.logs.String()
		return strings.Contains(l, "killed for lack of memory") || strings.Contains(l, "conversation container gone")
	})
	if got := d.record(id); got.State != store.StateRunning || got.ContainerID != c.ContainerID {
		t.Errorf("after an OOM kill inside: state %s container %s, want running %s", got.State, shortID(got.ContainerID), shortID(c.ContainerID))
	}
	if !containerRunning(t, c.ContainerID) {
		t.Fatal("the container itself stopped: the test's hog killed more than one process")
	}
	if code, out := d.innerExec(id, "sh", "-c", "echo after"); code != 0 || !strings.Contains(out, "after") {
		t.Errorf("exec after the OOM: %d %q", code, out)
	}
}

func containerRunning(t *testing.T, id string) bool {
	out, err := dockerCmd("inspect", "-f", "{{.State.Running}}", id).Output()
	return err == nil && strings.TrimSpace(string(out)) == "true"
}

// TestBackendOrphanContainerIsRemoved: a container of this ohd whose
// conversation is over (here: none was ever recorded, as when the engine
// finishes the create of an ohd killed mid-create after the next ohd's
// reconcile) is removed by the periodic sweep, and a live conversation's
// container is left alone.
func TestBackendOrphanContainerIsRemoved(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		d := b.daemon(t)
		id, _ := d.apiCreate(map[string]any{"workspace": map[string]any{"working_dir": testenv.NewRepo(t, testenv.RepoOptions{})}})
		live := d.record(id)
		orphan := b.stranger(t, d.serverID())
		waitFor(t, 60*time.Second, "the orphan container to be removed", func() bool {
			return !b.exists(t, orphan)
		})
		if !b.running(t, live.ContainerID) {
			t.Errorf("the live conversation's container %s was removed too", shortID(live.ContainerID))
		}
	})
}
