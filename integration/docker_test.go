package integration

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
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
	"github.com/ohd-dev/ohd/pkg/openhands"
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

func TestDockerContainerSettings(t *testing.T) {
	d := dockerDaemon(t, "--read-only-rootfs")
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	secretValue := "S3CRET-VALUE-do-not-leak-" + store.NewID()
	if _, err := d.ohctlIn(secretValue, "secret", "set", "api"); err != nil {
		t.Fatal(err)
	}
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", repo, "--worktree", "--grant-secret", "api")
	if c.ContainerID == "" || c.HostPort == 0 || c.State != store.StateRunning {
		t.Fatalf("create = %+v, want a running container", c)
	}
	info := inspect(t, c.ContainerID)
	hc := get(info, "HostConfig").(map[string]any)
	cfg := get(info, "Config").(map[string]any)

	if got := cfg["User"]; got != "10001:10001" {
		t.Errorf("User = %v, want the agent's own 10001:10001, not the repository owner (issue 26)", got)
	}
	if got := fmt.Sprint(hc["CapDrop"]); got != "[ALL]" {
		t.Errorf("CapDrop = %v", got)
	}
	if got := fmt.Sprint(hc["SecurityOpt"]); !strings.Contains(got, "no-new-privileges") {
		t.Errorf("SecurityOpt = %v", got)
	}
	if hc["Privileged"] != false || hc["NetworkMode"] == "host" || hc["PidMode"] == "host" {
		t.Errorf("privileged/host namespaces: %v %v %v", hc["Privileged"], hc["NetworkMode"], hc["PidMode"])
	}
	if hc["Memory"].(float64) != 268435456 || hc["PidsLimit"].(float64) != 512 || hc["NanoCpus"].(float64) <= 0 {
		t.Errorf("limits: memory %v pids %v cpus %v", hc["Memory"], hc["PidsLimit"], hc["NanoCpus"])
	}
	if hc["ReadonlyRootfs"] != true || get(hc, "Tmpfs", "/tmp") == nil {
		t.Errorf("read-only root %v, tmpfs %v", hc["ReadonlyRootfs"], hc["Tmpfs"])
	}
	// The default egress mode where ohd enters namespaces (it does, as
	// root): no network but loopback, nothing published (DESIGN §5).
	if pb, _ := get(hc, "PortBindings").(map[string]any); c.Egress != store.EgressBroker || hc["NetworkMode"] != "none" || len(pb) != 0 {
		t.Errorf("egress %q, NetworkMode %v, port bindings %v; want broker, none and none", c.Egress, hc["NetworkMode"], get(hc, "PortBindings"))
	}
	if ports, _ := get(info, "NetworkSettings", "Ports").(map[string]any); len(ports) != 0 {
		t.Errorf("published ports %v, want none", ports)
	}
	labels := cfg["Labels"].(map[string]any)
	if labels["dev.ohd.conversation"] != c.ID || labels["dev.ohd.server"] != d.serverID() {
		t.Errorf("labels = %v", labels)
	}
	if name := get(info, "Name"); name != "/ohd-"+strings.ReplaceAll(c.ID, "-", "")[:12] {
		t.Errorf("name = %v", name)
	}

	// Mounts: the worktree at its own path; the conversation's git view at
	// the repository's git dir's path; the real object store read-only as
	// the view's alternate; the hooks read-only; nothing of the real git dir
	// writable.
	alt := filepath.Join(filepath.Dir(c.GitView), "objects")
	type want struct {
		src string
		rw  bool
	}
	wantMounts := map[string]want{
		c.Worktree:                          {c.Worktree, true},
		filepath.Join(c.Worktree, ".git"):   {filepath.Join(c.Worktree, ".git"), false}, // the user's git follows it (pointers.go)
		c.CommonDir:                         {c.GitView, true},
		alt:                                 {filepath.Join(c.CommonDir, "objects"), false},
		filepath.Join(c.CommonDir, "hooks"): {filepath.Join(c.CommonDir, "hooks"), false},
		"/run/ohd":                          {"", false},
		"/run/ohd/bin/ohctl":                {"", false},
	}
	// The host's branches, read-only, as the view's remote "host" (DESIGN
	// §3: live both ways).
	hostView := filepath.Join(filepath.Dir(c.GitView), "host")
	wantMounts[hostView] = want{hostView, false}
	// The inner server's state on the host, at its own paths (DESIGN §6):
	// every relative default path of the real server.
	inner := openhands.DirsOf(filepath.Join(d.dirs.State, "inner"), c.ID)
	for _, dir := range inner.Mounted() {
		wantMounts[dir] = want{dir, true}
	}
	seen := map[string]bool{}
	for _, m := range get(info, "Mounts").([]any) {
		src, dst, rw := get(m, "Source").(string), get(m, "Destination").(string), get(m, "RW").(bool)
		seen[dst] = true
		w, ok := wantMounts[dst]
		if !ok {
			t.Errorf("unexpected mount %s from %s", dst, src)
			continue
		}
		if w.rw != rw {
			t.Errorf("mount %s: RW = %v, want %v", dst, rw, w.rw)
		}
		if w.src != "" && src != w.src {
			t.Errorf("mount %s comes from %s, want %s", dst, src, w.src)
		}
		if rw && strings.HasPrefix(src, c.CommonDir) {
			t.Errorf("mount %s: the real git dir %s is writable in the container", dst, src)
		}
	}
	for dst := range wantMounts {
		if !seen[dst] {
			t.Errorf("mount %s missing", dst)
		}
	}

	// Nothing secret anywhere in docker inspect.
	raw := inspectRaw(t, c.ContainerID)
	innerKey, _ := os.ReadFile(filepath.Join(c.BrokerDir, "session-api-key"))
	innerSecretKey, _ := os.ReadFile(filepath.Join(c.BrokerDir, "secret-key"))
	token, _ := os.ReadFile(filepath.Join(c.BrokerDir, "token"))
	masterKey, _ := os.ReadFile(filepath.Join(d.dirs.State, "master.key"))
	for what, v := range map[string]string{
		"secret value": secretValue, "inner key": strings.TrimSpace(string(innerKey)),
		"inner secret key": strings.TrimSpace(string(innerSecretKey)),
		"broker token":     strings.TrimSpace(string(token)), "master key": strings.TrimSpace(string(masterKey)),
	} {
		if len(v) < 16 {
			t.Fatalf("%s not found on the host (%q)", what, v)
		}
		if strings.Contains(raw, v) {
			t.Errorf("docker inspect shows the %s", what)
		}
	}
	if raw, _ := hex.DecodeString(strings.TrimSpace(string(masterKey))); bytes.Contains([]byte(inspectRaw(t, c.ContainerID)), raw) {
		t.Error("docker inspect holds the raw master key")
	}
	for _, e := range cfg["Env"].([]any) {
		if strings.HasPrefix(e.(string), "OH_SESSION_API_KEYS") {
			t.Errorf("env carries %s", strings.SplitN(e.(string), "=", 2)[0])
		}
	}
	d.ohctl("rm", "--discard", c.ID)
	if containerExists(c.ContainerID) {
		t.Error("container left after rm")
	}
}

func TestDockerWorktreeValidFromBothSides(t *testing.T) {
	d := dockerDaemon(t)
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", repo, "--worktree")

	// Inside: git sees the worktree on its branch.
	code, out := d.execIn(c.ID, "git", "-C", c.Worktree, "status", "--short", "--branch")
	if code != 0 || !strings.HasPrefix(out, "## openhands/"+c.ID) {
		t.Fatalf("git status inside = %d %q, want ## openhands/%s", code, out, c.ID)
	}
	// On the host, at the same time: locked, not prunable, gitdir resolves.
	e := entryFor(porcelain(t, repo), c.Worktree)
	if e == nil || e["locked"] == "" {
		t.Fatalf("host entry = %v, want it registered and locked", e)
	}
	if _, ok := e["prunable"]; ok {
		t.Errorf("host reports the live worktree prunable: %v", e)
	}
	gitdir, err := os.ReadFile(filepath.Join(c.CommonDir, "worktrees", c.AdminID, "gitdir"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(strings.TrimSpace(string(gitdir))); err != nil {
		t.Errorf("host gitdir %s does not resolve on the host: %v", gitdir, err)
	}

	// A commit made inside is published to the host's branch.
	code, out = d.execIn(c.ID, "sh", "-c", "cd "+c.Worktree+" && echo inside > made-inside.txt && git add made-inside.txt && git -c user.name=agent -c user.email=agent@example.com commit -q -m 'from the container'")
	if code != 0 {
		t.Fatalf("commit inside: %d %s", code, out)
	}
	_, inside := d.execIn(c.ID, "git", "-C", c.Worktree, "rev-parse", "HEAD")
	waitHostRef(t, repo, "refs/heads/openhands/"+c.ID, strings.TrimSpace(inside), 5*time.Second)
	if got := testenv.Git(t, repo, "log", "-1", "--format=%s", "openhands/"+c.ID); got != "from the container" {
		t.Errorf("host branch tip = %q", got)
	}

	// gc and prune inside leave the host's registrations intact.
	d.execIn(c.ID, "git", "-C", c.Worktree, "worktree", "prune")
	d.execIn(c.ID, "git", "-C", c.Worktree, "gc", "--prune=now")
	e = entryFor(porcelain(t, repo), c.Worktree)
	if e == nil {
		t.Fatal("the worktree registration is gone after gc/prune inside")
	}
	if _, ok := e["prunable"]; ok {
		t.Errorf("prunable after gc inside: %v", e)
	}
	// The config inside is the conversation's own; the hooks are the
	// repository's, read-only.
	if code, out := d.execIn(c.ID, "sh", "-c", "echo '[evil]' >> "+filepath.Join(c.CommonDir, "config")); code != 0 {
		t.Errorf("writing the view's config inside failed: %s", out)
	}
	if code, _ := d.execIn(c.ID, "sh", "-c", "echo evil >> "+filepath.Join(c.CommonDir, "hooks", "post-checkout")); code == 0 {
		t.Error("writing a hook inside the container succeeded")
	}
	if b, _ := os.ReadFile(filepath.Join(c.CommonDir, "config")); strings.Contains(string(b), "evil") {
		t.Error("the host's .git/config was changed from inside")
	}

	var rm store.Conversation
	d.ohctlJSON(&rm, "rm", c.ID)
	if !rm.Removal.BranchKept {
		t.Error("the branch with a commit from inside was not kept")
	}
	if got := porcelain(t, repo); len(got) != 1 {
		t.Errorf("registrations after rm: %v", got)
	}
}

func TestDockerNonRootRepository(t *testing.T) {
	testenv.RequireRoot(t)
	d := dockerDaemon(t)
	repo := testenv.NewRepo(t, testenv.RepoOptions{Owner: &testenv.Owner{UID: 1000, GID: 1000}})
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", repo, "--worktree")
	if c.UID != 1000 || c.GID != 1000 {
		t.Fatalf("conversation uid:gid = %d:%d, want 1000:1000", c.UID, c.GID)
	}
	// The container runs as the agent's own uid (issue 26), which git
	// in there accepts in the user's worktree (safe.directory in the
	// command scope).
	if u := get(inspect(t, c.ContainerID), "Config", "User"); u != "10001:10001" {
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

func TestDockerNonGitWorkspace(t *testing.T) {
	d := dockerDaemon(t)
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
}

func TestDockerParallelCreates(t *testing.T) {
	d := dockerDaemon(t)
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
}

func TestDockerContainerExitsDuringStart(t *testing.T) {
	// Never healthy, and gone after a second.
	d := dockerDaemonEnv(t, []string{"STANDIN_EXIT_AFTER=1s", "STANDIN_HEALTH_DELAY=1h"},
		"--forward-env", "STANDIN_EXIT_AFTER", "--forward-env", "STANDIN_HEALTH_DELAY")
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
	out, _ := dockerCmd("ps", "-aq", "--filter", "label=dev.ohd.server="+d.serverID()).Output()
	if strings.TrimSpace(string(out)) != "" {
		t.Errorf("containers left: %s", out)
	}
	if got := porcelain(t, repo); len(got) != 1 {
		t.Errorf("worktrees left: %v", got)
	}
	entries, _ := os.ReadDir(filepath.Join(d.dirs.Run, "conversations"))
	if len(entries) != 0 {
		t.Errorf("socket dirs left: %v", entries)
	}
}

func TestDockerContainerRemovedBehindOurBack(t *testing.T) {
	d := dockerDaemon(t)
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", testenv.NewRepo(t, testenv.RepoOptions{}), "--worktree")
	if err := dockerCmd("rm", "-f", c.ContainerID).Run(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitFor(t, 2*time.Second, "the record to become stopped", func() bool {
		var now store.Conversation
		d.ohctlJSON(&now, "show", c.ID)
		return now.State == store.StateStopped
	})
	t.Logf("noticed in %v", time.Since(start))
	// The next request starts it again, same worktree.
	code, out := d.execIn(c.ID, "git", "-C", c.Worktree, "status", "--short", "--branch")
	if code != 0 || !strings.HasPrefix(out, "## openhands/"+c.ID) {
		t.Errorf("after restart: %d %q", code, out)
	}
	d.ohctl("rm", c.ID)
}

func TestDockerIdleStopAndRestart(t *testing.T) {
	d := dockerDaemon(t, "--idle-timeout", "2s")
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", testenv.NewRepo(t, testenv.RepoOptions{}), "--worktree")
	waitFor(t, 30*time.Second, "the idle conversation to stop", func() bool {
		var now store.Conversation
		d.ohctlJSON(&now, "show", c.ID)
		return now.State == store.StateStopped
	})
	if get(inspect(t, c.ContainerID), "State", "Running") != false {
		t.Error("the container of a stopped conversation still runs")
	}
	keyBefore, _ := os.ReadFile(filepath.Join(c.BrokerDir, "session-api-key"))
	// Two requests at once share one start: one container, both answered.
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
	if out := run(t, "docker", "ps", "-aq", "--filter", "label=dev.ohd.conversation="+c.ID); len(strings.Fields(out)) != 1 {
		t.Errorf("containers of the conversation after concurrent starts: %q, want exactly one", out)
	}
	var now store.Conversation
	d.ohctlJSON(&now, "show", c.ID)
	if now.State != store.StateRunning || now.ContainerID != c.ContainerID || now.Worktree != c.Worktree {
		t.Errorf("after restart: state %s, container %s (was %s), worktree %s", now.State, now.ContainerID, c.ContainerID, now.Worktree)
	}
	if keyAfter, _ := os.ReadFile(filepath.Join(c.BrokerDir, "session-api-key")); len(keyAfter) == 0 || string(keyAfter) == string(keyBefore) {
		t.Error("the restarted container kept its old inner key")
	}
	d.ohctl("rm", c.ID)
}

func TestDockerReconcileAfterKill(t *testing.T) {
	d := dockerDaemon(t)
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	var a, b store.Conversation
	d.ohctlJSON(&a, "create", "--repo", repo, "--worktree")
	d.ohctlJSON(&b, "create", "--repo", repo, "--worktree")
	serverID := d.serverID()
	d.kill()

	// While ohd is down: b's container vanishes, and a stranger with our
	// label appears.
	if err := dockerCmd("rm", "-f", b.ContainerID).Run(); err != nil {
		t.Fatal(err)
	}
	stranger := strings.TrimSpace(run(t, "docker", "create", "--label", "dev.ohd.server="+serverID, "--label", "dev.ohd.conversation="+store.NewID(), testimage.Ref))

	d.start()
	var a2, b2 store.Conversation
	d.ohctlJSON(&a2, "show", a.ID)
	d.ohctlJSON(&b2, "show", b.ID)
	if a2.State != store.StateRunning || a2.ContainerID != a.ContainerID || get(inspect(t, a.ContainerID), "State", "Running") != true {
		t.Errorf("a not adopted: state %s container %s (was %s)", a2.State, a2.ContainerID, a.ContainerID)
	}
	if b2.State != store.StateStopped {
		t.Errorf("b's container is gone but its record is %s", b2.State)
	}
	if containerExists(stranger) {
		t.Error("the labelled container without a record was not removed")
	}
	// a's inner server still answers through a fresh broker and exec.
	if code, out := d.execIn(a.ID, "git", "-C", a.Worktree, "status", "--short", "--branch"); code != 0 || !strings.HasPrefix(out, "## openhands/"+a.ID) {
		t.Errorf("adopted conversation: %d %q", code, out)
	}
	d.ohctl("rm", a.ID)
	d.ohctl("rm", b.ID)
}

func TestDockerEngineUnreachableError(t *testing.T) {
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
