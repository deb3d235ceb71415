package integration

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/internal/testimage"
	"github.com/ohd-dev/ohd/pkg/store"
)

// dockerDaemon starts ohd with the docker runtime and the test image.
func dockerDaemon(t testing.TB, extra ...string) *daemon {
	t.Helper()
	return dockerDaemonEnv(t, nil, extra...)
}

// dockerDaemonEnv is dockerDaemon with extra environment for ohd.
func dockerDaemonEnv(t testing.TB, env []string, extra ...string) *daemon {
	t.Helper()
	testenv.RequireDocker(t)
	img := testimage.Ensure(t)
	ensurePackageWedge(t, img)
	d := startDaemon(t, daemonOptions{Runtime: "docker", Env: env, Args: append([]string{"--image", img, "--memory", "268435456", "--ready-timeout", "60s"}, extra...)})
	t.Cleanup(func() { removeServerContainers(t, d) })
	return d
}

// removeServerContainers force-removes every container of d's server, so
// a failed test leaves nothing running.
func removeServerContainers(t testing.TB, d *daemon) {
	id := d.serverID()
	if id == "" {
		return
	}
	out, _ := dockerCmd("ps", "-aq", "--filter", "label=dev.ohd.server="+id).Output()
	for _, c := range strings.Fields(string(out)) {
		_ = dockerCmd("rm", "-f", c).Run()
	}
}

func (d *daemon) serverID() string {
	out, err := d.ohctlErr("--json", "version")
	if err != nil {
		return d.cachedServerID
	}
	var v struct {
		OHD struct {
			ServerID string `json:"server_id"`
		} `json:"ohd"`
	}
	if json.Unmarshal([]byte(out), &v) == nil && v.OHD.ServerID != "" {
		d.cachedServerID = v.OHD.ServerID
	}
	return d.cachedServerID
}

// inspect returns docker inspect of a container as decoded JSON.
func inspect(t testing.TB, id string) map[string]any {
	t.Helper()
	out, err := dockerCmd("inspect", id).Output()
	if err != nil {
		t.Fatalf("docker inspect %s: %v", id, err)
	}
	var list []map[string]any
	if err := json.Unmarshal(out, &list); err != nil || len(list) != 1 {
		t.Fatalf("docker inspect %s: %v", id, err)
	}
	return list[0]
}

func inspectRaw(t testing.TB, id string) string {
	t.Helper()
	out, err := dockerCmd("inspect", id).Output()
	if err != nil {
		t.Fatalf("docker inspect %s: %v", id, err)
	}
	return string(out)
}

// get walks a decoded JSON value along keys.
func get(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func containerExists(id string) bool {
	return dockerCmd("inspect", id).Run() == nil
}

// execIn runs a command in a conversation's container through ohctl exec
// and returns its exit code and output.
func (d *daemon) execIn(id string, cmd ...string) (int, string) {
	d.t.Helper()
	out, err := d.ohctlErr(append([]string{"exec", id, "--"}, cmd...)...)
	if err == nil {
		return 0, out
	}
	var oe *ohctlError
	if errors.As(err, &oe) {
		return oe.code, out + oe.stderr
	}
	d.t.Fatalf("ohctl exec: %v", err)
	return -1, ""
}

// TestBackendNonRootRepository: a repository owned by uid 1000; the
// agent runs as its own uid, writes in the worktree, and the user edits
// what it wrote.
func TestBackendNonRootRepository(t *testing.T) {
	testenv.RequireRoot(t)
	eachBackend(t, nonRootRepository)
}

func nonRootRepository(t *testing.T, b backend) {
	d := b.daemon(t)
	repo := testenv.NewRepo(t, testenv.RepoOptions{Owner: &testenv.Owner{UID: 1000, GID: 1000}})
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", repo, "--worktree")
	if c.UID != 1000 || c.GID != 1000 {
		t.Fatalf("conversation uid:gid = %d:%d, want 1000:1000", c.UID, c.GID)
	}
	// The container runs as the agent's own uid (issue 26), which git
	// in there accepts in the user's worktree (safe.directory in the
	// command scope).
	if u := b.workload(t, c.ContainerID).User; u != "10001:10001" {
		t.Errorf("container user = %v, want the agent's 10001:10001", u)
	}
	code, out := d.execIn(c.ID, "sh", "-c", "echo hi > "+filepath.Join(c.Worktree, "agent.txt")+" && git -C "+c.Worktree+" status --short --branch")
	if code != 0 || strings.Contains(out, "dubious") {
		t.Fatalf("write + git status as the agent: %d %s", code, out)
	}
	st, err := os.Stat(filepath.Join(c.Worktree, "agent.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 10001 || sys.Gid != 10001 {
		t.Errorf("file written by the agent is owned by %d:%d on the host, want the agent's 10001:10001", sys.Uid, sys.Gid)
	}
	// The user edits it.
	edit := testenv.AsUser(exec.Command("sh", "-c", "echo user >> agent.txt"), 1000, 1000)
	edit.Dir = c.Worktree
	if out, err := edit.CombinedOutput(); err != nil {
		t.Errorf("the user cannot edit the agent's file: %v %s", err, out)
	}
	d.ohctl("rm", "--discard", c.ID)
}

// TestBackendNonGitWorkspace: a folder that is no repository is mounted
// at its own path, without a worktree, and create says so in a note.
func TestBackendNonGitWorkspace(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		d := b.daemon(t)
		dir := testenv.TempDir(t)
		testenv.WriteFile(t, filepath.Join(dir, "hello.txt"), "hi\n")
		var c store.Conversation
		d.ohctlJSON(&c, "create", "--repo", dir, "--worktree")
		if c.Worktree != "" || c.State != store.StateRunning || len(c.Notes) == 0 {
			t.Fatalf("create = %+v, want running without a worktree and a note", c)
		}
		code, out := d.execIn(c.ID, "sh", "-c", "read l < "+filepath.Join(dir, "hello.txt")+" && echo $l")
		if code != 0 || strings.TrimSpace(out) != "hi" {
			t.Errorf("workspace not mounted at its own path: %d %q", code, out)
		}
		d.ohctl("rm", c.ID)
	})
}

// TestBackendParallelCreates: eight creates at once on one repository
// each get a running conversation in a container of its own.
func TestBackendParallelCreates(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		d := b.daemon(t)
		repo := testenv.NewRepo(t, testenv.RepoOptions{})
		const n = 8
		ids := make([]string, n)
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out, err := d.ohctlErr("--json", "create", "--repo", repo, "--worktree")
				if err != nil {
					t.Errorf("create %d: %v", i, err)
					return
				}
				var c store.Conversation
				if err := jsonUnmarshal(out, &c); err != nil {
					t.Error(err)
					return
				}
				ids[i] = c.ID
			}()
		}
		wg.Wait()
		containers := map[string]bool{}
		for _, id := range ids {
			if id == "" {
				continue
			}
			var c store.Conversation
			d.ohctlJSON(&c, "show", id)
			if c.State != store.StateRunning || containers[c.ContainerID] {
				t.Errorf("conversation %s: state %s container %s (duplicate %v)", id, c.State, c.ContainerID, containers[c.ContainerID])
			}
			containers[c.ContainerID] = true
		}
		for _, id := range ids {
			if id != "" {
				wg.Add(1)
				go func() { defer wg.Done(); d.ohctl("rm", "--discard", id) }()
			}
		}
		wg.Wait()
	})
}

// TestBackendContainerExitsDuringStart: a container that never gets
// healthy and exits fails the create with the exit and its log's tail,
// and leaves no container, worktree or socket directory.
func TestBackendContainerExitsDuringStart(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		// Never healthy, and gone after a second.
		d := b.start(t, daemonOptions{Env: []string{"STANDIN_EXIT_AFTER=1s", "STANDIN_HEALTH_DELAY=1h"},
			Args: []string{"--forward-env", "STANDIN_EXIT_AFTER", "--forward-env", "STANDIN_HEALTH_DELAY"}})
		repo := testenv.NewRepo(t, testenv.RepoOptions{})
		_, err := d.ohctlErr("create", "--repo", repo, "--worktree")
		var oe *ohctlError
		if !errors.As(err, &oe) {
			t.Fatal("create succeeded although the container exits")
		}
		for _, want := range []string{"step container failed", "exit"} {
			if !strings.Contains(oe.stderr, want) {
				t.Errorf("error %q lacks %q", oe.stderr, want)
			}
		}
		if !strings.Contains(oe.stderr, "exiting") && !strings.Contains(oe.stderr, "STANDIN_EXIT_AFTER") {
			t.Errorf("error carries no log tail: %q", oe.stderr)
		}
		if left := b.ofServer(t, d.serverID()); len(left) != 0 {
			t.Errorf("containers left: %s", left)
		}
		if got := porcelain(t, repo); len(got) != 1 {
			t.Errorf("worktrees left: %v", got)
		}
		entries, _ := os.ReadDir(filepath.Join(d.dirs.Run, "conversations"))
		if len(entries) != 0 {
			t.Errorf("socket dirs left: %v", entries)
		}
	})
}

// TestBackendContainerRemovedBehindOurBack: the engine's removal of a
// conversation's container (docker rm -f; a pod deleted) is noticed at
// once from the engine's events, and the next request starts it again on
// the same worktree.
func TestBackendContainerRemovedBehindOurBack(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		d := b.daemon(t)
		var c store.Conversation
		d.ohctlJSON(&c, "create", "--repo", testenv.NewRepo(t, testenv.RepoOptions{}), "--worktree")
		b.kill(t, c.ContainerID)
		start := time.Now()
		waitFor(t, 2*time.Second, "the record to become stopped", func() bool {
			return d.show(c.ID).State == store.StateStopped
		})
		t.Logf("noticed in %v", time.Since(start))
		// The next request starts it again, same worktree.
		code, out := d.execIn(c.ID, "git", "-C", c.Worktree, "status", "--short", "--branch")
		if code != 0 || !strings.HasPrefix(out, "## openhands/"+c.ID) {
			t.Errorf("after restart: %d %q", code, out)
		}
		d.ohctl("rm", c.ID)
	})
}

// TestBackendIdleStopAndRestart: an idle conversation stops; two requests
// at once then share one start (one container, both answered), and the
// started container gets a fresh inner key.
func TestBackendIdleStopAndRestart(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		d := b.daemon(t, "--idle-timeout", "2s")
		var c store.Conversation
		d.ohctlJSON(&c, "create", "--repo", testenv.NewRepo(t, testenv.RepoOptions{}), "--worktree")
		waitFor(t, 60*time.Second, "the idle conversation to stop", func() bool {
			return d.show(c.ID).State == store.StateStopped
		})
		if b.running(t, c.ContainerID) {
			t.Error("the container of a stopped conversation still runs")
		}
		keyBefore, _ := os.ReadFile(filepath.Join(c.BrokerDir, "session-api-key"))
		var wg sync.WaitGroup
		for i := 0; i < 2; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out, err := d.ohctlErr("exec", c.ID, "--", "git", "-C", c.Worktree, "status", "--short", "--branch")
				if err != nil || !strings.HasPrefix(out, "## openhands/"+c.ID) {
					t.Errorf("request %d after idle stop: %v %q", i, err, out)
				}
			}()
		}
		wg.Wait()
		if ids := b.ofConversation(t, c.ID); len(ids) != 1 {
			t.Errorf("containers of the conversation after concurrent starts: %q, want exactly one", ids)
		}
		now := d.show(c.ID)
		// Both answers prove the start; on a loaded machine two idle
		// seconds may pass before this look, and the idle stop then
		// rightly stops it again (a second "why=idle" in the log).
		idleStops := 0
		for _, l := range strings.Split(d.logs.String(), "\n") {
			if strings.Contains(l, "conversation stopped") && strings.Contains(l, c.ID) && strings.Contains(l, "why=idle") {
				idleStops++
			}
		}
		if now.State == store.StateStopped && idleStops >= 2 {
			t.Logf("stopped again for idleness before the check (%d idle stops); the start was shared: one container", idleStops)
			now.State = store.StateRunning
		}
		if now.State != store.StateRunning || now.Worktree != c.Worktree || (now.ContainerID == c.ContainerID) != b.stoppedKeepsContainer {
			t.Errorf("after restart: state %s, container %s (was %s; the same one wanted: %v), worktree %s",
				now.State, now.ContainerID, c.ContainerID, b.stoppedKeepsContainer, now.Worktree)
		}
		if keyAfter, _ := os.ReadFile(filepath.Join(c.BrokerDir, "session-api-key")); len(keyAfter) == 0 || string(keyAfter) == string(keyBefore) {
			t.Error("the restarted container kept its old inner key")
		}
		d.ohctl("rm", c.ID)
	})
}

func TestDockerEngineUnreachableError(t *testing.T) {
	// Docker only by design: the message of an unreachable Docker engine.
	binaries(t)
	dirs := newDirs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, built.ohd, "serve", "--runtime", "docker", "--state-dir", dirs.State, "--runtime-dir", dirs.Run, "--listen", "off")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "DOCKER_HOST=unix:///nonexistent/docker.sock"}
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatal("ohd --runtime docker started without an engine")
	}
	for _, want := range []string{"/nonexistent/docker.sock", "--runtime local", "start Docker"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("error %q lacks %q", out, want)
		}
	}
}

func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

// waitHostRef waits until ref in the host repository repo is want.
func waitHostRef(t testing.TB, repo, ref, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var got string
	for time.Now().Before(deadline) {
		got, _ = testenv.GitOutput(repo, "-c", "safe.directory=*", "rev-parse", "--verify", "--quiet", ref)
		if strings.TrimSpace(got) == want {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("host %s = %q after %v, want %s", ref, strings.TrimSpace(got), timeout, want)
}
