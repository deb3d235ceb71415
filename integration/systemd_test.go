package integration

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/internal/testimage"
)

// TestSystemdUnit runs ohd as packaging/systemd/ohd.service, unchanged but
// for its paths, under a real systemd (PID 1 of a container whose /usr and
// /etc are the host's), with the Docker runtime: the unit's sandbox
// (capability bounding set, system call filter, ProtectSystem=full,
// PrivateDevices, RestrictNamespaces, MemoryDenyWriteExecute, ...) is
// applied by systemd itself, not just checked by systemd-analyze. Through
// it, ohd must: send READY=1; create conversations with worktrees in a
// repository of uid 1000 and in a shared (core.sharedRepository)
// repository, running git as their owner; serve the API and the control
// socket; stop cleanly on `systemctl stop` leaving the containers running;
// adopt them on `systemctl start`; and remove everything on DELETE.
//
// Paths that ohd hands to dockerd (worktrees, repositories, the runtime
// directory with the broker sockets, ohctl) are bind-mounted at the same
// paths, as they would be the host's own under a systemd on the host. ohd
// runs in a PID namespace of its own here, so it cannot see the
// containers' processes and uses their published ports, as it does
// without privileges; checkNetnsUnderUnit shows separately that the
// unit's sandbox lets ohd's namespace code in.
func TestSystemdUnit(t *testing.T) {
	// Docker only by design: it boots the shipped systemd unit, which runs ohd on a host's Docker; on Kubernetes ohd runs as the DaemonSet of packaging/kubernetes.
	box := bootSystemd(t, systemdOptions{})
	name, units, shared, text, d := box.name, box.units, box.shared, box.unitText, box.d
	systemctl, ohdLog, waitActive := box.systemctl, box.ohdLog, box.waitActive
	waitActive("first start")

	// The sandbox is on: ohd runs under a system call filter, with no new
	// privileges and only the unit's capabilities.
	mainPID, _ := systemctl("show", "-p", "MainPID", "--value", "ohd.service")
	status, err := dockerCmd("exec", name, "cat", "/proc/"+mainPID+"/status").Output()
	if err != nil {
		t.Fatalf("read the status of ohd (pid %s): %v", mainPID, err)
	}
	for _, want := range []string{"NoNewPrivs:\t1", "Seccomp:\t2", "CapBnd:\t" + capMask(t, text)} {
		if !strings.Contains(string(status), want+"\n") {
			t.Errorf("ohd under the unit: no %q in its /proc status:\n%s", want, status)
		}
	}

	// A repository of uid 1000 and a shared one (set-gid directories).
	// (Under the shared directory: the container sees no other.)
	owner := &testenv.Owner{UID: 1000, GID: 1000}
	newRepo := func(name string, config ...string) string {
		repo := filepath.Join(shared, name)
		testenv.Git(t, shared, "init", "-q", "-b", "main", name)
		if len(config) > 0 {
			testenv.Git(t, repo, append([]string{"config"}, config...)...)
		}
		testenv.WriteFile(t, filepath.Join(repo, "README.md"), "hello\n")
		testenv.Git(t, repo, "add", "README.md")
		testenv.Git(t, repo, "commit", "-q", "-m", "initial")
		testenv.ChownR(t, repo, owner.UID, owner.GID)
		return repo
	}
	plain := newRepo("plain")
	sharedRepo := newRepo("shared", "core.sharedRepository", "group")

	ids := map[string]string{}
	for what, repo := range map[string]string{"plain": plain, "shared": sharedRepo} {
		r := d.call("POST", "/api/conversations", map[string]any{"workspace": map[string]any{"working_dir": repo}, "worktree": true})
		if r.Status != http.StatusCreated {
			t.Fatalf("%s repository: create = %d %s\n--- ohd's log ---\n%s", what, r.Status, r.Body, ohdLog())
		}
		var info map[string]any
		r.json(t, &info)
		id := info["id"].(string)
		ids[what] = id
		c := d.record(id)
		if c.Worktree == "" || !strings.HasPrefix(c.Worktree, shared) {
			t.Fatalf("%s repository: worktree %q, want one under %s", what, c.Worktree, shared)
		}
		if code, out := d.innerExec(id, "git", "-C", c.Worktree, "status", "--short", "--branch"); code != 0 || !strings.HasPrefix(out, "## openhands/"+id) {
			t.Errorf("%s repository: git status in the container = %d %q", what, code, out)
		}
		if out := testenv.Git(t, repo, "-c", "safe.directory=*", "worktree", "list", "--porcelain"); strings.Contains(out, "prunable") {
			t.Errorf("%s repository: a worktree is prunable on the host:\n%s", what, out)
		}
		if uid := statOwner(t, c.Worktree); uid != owner.UID {
			t.Errorf("%s repository: worktree owned by uid %d, want %d (git ran as the owner)", what, uid, owner.UID)
		}
	}

	// systemctl stop: ohd exits cleanly, the containers keep running.
	cid := d.record(ids["plain"]).ContainerID
	if out, err := systemctl("stop", "ohd.service"); err != nil {
		t.Fatalf("systemctl stop: %v %s", err, out)
	}
	if res, _ := systemctl("show", "-p", "Result", "--value", "ohd.service"); res != "success" {
		t.Errorf("ohd.service stopped with result %q, want success\n%s", res, ohdLog())
	}
	if running := strings.TrimSpace(run(t, "docker", "inspect", "-f", "{{.State.Running}}", cid)); running != "true" {
		t.Errorf("the container of a conversation stopped with ohd (running=%s)", running)
	}
	if out, err := systemctl("start", "ohd.service"); err != nil {
		t.Fatalf("systemctl start: %v %s", err, out)
	}
	waitActive("restart")
	if c := d.record(ids["plain"]); c.State != "running" || c.ContainerID != cid {
		t.Errorf("after the restart: %s in container %s, want running in %s (adopted)", c.State, c.ContainerID, cid)
	}

	checkNetnsUnderUnit(t, name, units, shared, text)
	checkNsmountUnderUnit(t, name, units, shared, text)

	// DELETE removes the containers, the registrations and the branches
	// of clean worktrees.
	for what, id := range ids {
		if r := d.call("DELETE", "/api/conversations/"+id, nil); r.Status != 200 {
			t.Errorf("%s repository: DELETE = %d %s", what, r.Status, r.Body)
		}
	}
	for what, repo := range map[string]string{"plain": plain, "shared": sharedRepo} {
		if out := testenv.Git(t, repo, "-c", "safe.directory=*", "worktree", "list", "--porcelain"); strings.Count(out, "worktree ") != 1 {
			t.Errorf("%s repository: worktrees left after DELETE:\n%s", what, out)
		}
		if out := testenv.Git(t, repo, "-c", "safe.directory=*", "branch", "--list", "openhands/*"); strings.TrimSpace(out) != "" {
			t.Errorf("%s repository: branches left after DELETE: %s", what, out)
		}
	}
	if out := run(t, "docker", "ps", "-aq", "--filter", "label=dev.ohd.server="+d.serverID()); strings.TrimSpace(out) != "" {
		t.Errorf("containers left after DELETE: %s", out)
	}

	// An invalid setting fails the unit at once (RestartPreventExitStatus=),
	// with ohd's message in its log, instead of a restart every 2 s.
	if out, err := systemctl("stop", "ohd.service"); err != nil {
		t.Fatalf("systemctl stop: %v %s", err, out)
	}
	testenv.WriteFile(t, filepath.Join(units, "ohd.service.d", "typo.conf"), "[Service]\nEnvironment=OHD_RUNTIME=dockerr\n")
	if out, err := systemctl("daemon-reload"); err != nil {
		t.Fatalf("systemctl daemon-reload: %v %s", err, out)
	}
	if out, err := systemctl("start", "ohd.service"); err == nil {
		t.Errorf("systemctl start with OHD_RUNTIME=dockerr succeeded: %s", out)
	}
	time.Sleep(3 * time.Second) // past RestartSec=2s: a restart would show
	props, _ := systemctl("show", "-p", "ActiveState,Result,NRestarts,ExecMainStatus", "ohd.service")
	for _, want := range []string{"ActiveState=failed", "Result=exit-code", "NRestarts=0", "ExecMainStatus=2"} {
		if !strings.Contains(props+"\n", want+"\n") {
			t.Errorf("ohd.service with an invalid setting: want %s in\n%s", want, props)
		}
	}
	if !strings.Contains(ohdLog(), `--runtime "dockerr": use docker, kubernetes, local or auto`) {
		t.Errorf("ohd's log does not say what was wrong:\n%s", ohdLog())
	}
}

// TestSystemdSocketActivation runs ohd.socket and ohd-api.socket as
// shipped (their addresses changed) under a real systemd: systemd creates
// the control socket 0600 and holds the API port; the first ohctl call
// starts ohd.service, which takes both sockets by name instead of binding
// its own; after a stop, a request on the API port starts it again and is
// answered.
func TestSystemdSocketActivation(t *testing.T) {
	// Docker only by design: the shipped systemd socket units, for ohd on a host's Docker; on Kubernetes ohd runs as the DaemonSet of packaging/kubernetes.
	box := bootSystemd(t, systemdOptions{Sockets: true})
	d := box.d
	deadline := time.Now().Add(2 * time.Minute)
	for {
		a, _ := box.systemctl("is-active", "ohd.socket")
		b, _ := box.systemctl("is-active", "ohd-api.socket")
		if a == "active" && b == "active" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sockets not active after 2 min: ohd.socket %q, ohd-api.socket %q", a, b)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if st, _ := box.systemctl("is-active", "ohd.service"); st != "inactive" {
		t.Fatalf("ohd.service is %q before any client, want inactive", st)
	}
	checkSocket := func(when string) {
		t.Helper()
		st, err := os.Lstat(d.socket)
		if err != nil || st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: control socket %s: %v %v, want a socket 0600", when, d.socket, st.Mode(), err)
		}
	}
	checkSocket("before ohd")

	// The first ohctl call starts ohd.
	if out, err := d.ohctlErr("--json", "version"); err != nil {
		t.Fatalf("ohctl version through the socket unit: %v %s\n%s", err, out, box.ohdLog())
	}
	box.waitActive("activated by ohctl")
	if log := box.ohdLog(); !strings.Contains(log, "socket_activated=true") {
		t.Errorf("ohd did not say it took passed sockets:\n%s", log)
	}
	if r := d.call("GET", "/api/conversations/count", nil); r.Status != 200 || strings.TrimSpace(string(r.Body)) != "0" {
		t.Errorf("count through the API socket = %d %s", r.Status, r.Body)
	}
	checkSocket("with ohd")

	// Stopped, the API port still accepts; the request starts ohd.
	if out, err := box.systemctl("stop", "ohd.service"); err != nil {
		t.Fatalf("systemctl stop: %v %s", err, out)
	}
	checkSocket("after ohd stopped")
	if r := d.call("GET", "/api/conversations/count", nil); r.Status != 200 || strings.TrimSpace(string(r.Body)) != "0" {
		t.Errorf("count on the API port with ohd stopped = %d %s\n%s", r.Status, r.Body, box.ohdLog())
	}
	if st, _ := box.systemctl("is-active", "ohd.service"); st != "active" {
		t.Errorf("ohd.service is %q after a request on the API port, want active", st)
	}
	if n := strings.Count(box.ohdLog(), "address already in use"); n != 0 {
		t.Errorf("ohd tried to bind an address systemd holds:\n%s", box.ohdLog())
	}
}

// TestSystemdCredentials: with the master key and the API keys in
// systemd's credential store, ohd.service (the shipped
// LoadCredential=ohd-master-key and LoadCredential=ohd-session-api-keys,
// no drop-in) uses them: no key file is
// created in the state directory, the configured API key is the accepted
// one, and neither key is in ohd's environment or the unit's properties.
func TestSystemdCredentials(t *testing.T) {
	// Docker only by design: systemd's credential store under the shipped unit, for ohd on a host's Docker; the DaemonSet of packaging/kubernetes has its own.
	credstore := testenv.TempDir(t)
	masterKey := randomHex(t, 32)
	apiKey := "sd-credential-key-" + randomHex(t, 16)
	testenv.WriteFile(t, filepath.Join(credstore, "ohd-master-key"), masterKey+"\n")
	testenv.WriteFile(t, filepath.Join(credstore, "ohd-session-api-keys"), "# operators\n"+apiKey+"\n")
	for _, f := range []string{"ohd-master-key", "ohd-session-api-keys"} {
		if err := os.Chmod(filepath.Join(credstore, f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	box := bootSystemd(t, systemdOptions{Credstore: credstore})
	box.waitActive("start with credentials")
	d := box.d

	for _, f := range []string{"master.key", "session-api-key"} {
		if _, err := os.Stat(filepath.Join(d.dirs.State, f)); err == nil {
			t.Errorf("ohd created %s in its state directory although systemd passed the credential", f)
		}
	}
	if strings.Contains(box.ohdLog(), "created a new master key") {
		t.Errorf("ohd created a master key:\n%s", box.ohdLog())
	}
	for key, want := range map[string]int{apiKey: 200, "sd-credential-key-wrong": 401} {
		if r := d.call("GET", "/api/conversations/count", nil, "X-Session-API-Key", key); r.Status != want {
			t.Errorf("API key %q: %d %s, want %d", key, r.Status, r.Body, want)
		}
	}
	// A secret sealed with the credential's key opens after a restart.
	if _, err := d.ohctlIn("s3cr3t-value\n", "secret", "set", "tok"); err != nil {
		t.Fatalf("ohctl secret set: %v", err)
	}
	if out, err := box.systemctl("restart", "ohd.service"); err != nil {
		t.Fatalf("systemctl restart: %v %s", err, out)
	}
	box.waitActive("restart")
	if out, err := d.ohctlErr("secret", "ls"); err != nil || !strings.Contains(out, "tok") {
		t.Errorf("after a restart: ohctl secret ls = %v %q", err, out)
	}
	mainPID, _ := box.systemctl("show", "-p", "MainPID", "--value", "ohd.service")
	environ, err := dockerCmd("exec", box.name, "cat", "/proc/"+mainPID+"/environ").Output()
	if err != nil {
		t.Fatalf("read ohd's environment: %v", err)
	}
	props, _ := box.systemctl("show", "ohd.service")
	for what, text := range map[string]string{"ohd's environment": string(environ), "systemctl show ohd": props, "ohd's log": box.ohdLog()} {
		for name, secret := range map[string]string{"master key": masterKey, "API key": apiKey, "secret": "s3cr3t-value"} {
			if strings.Contains(text, secret) {
				t.Errorf("the %s is in %s", name, what)
			}
		}
	}
	if !strings.Contains(string(environ), "CREDENTIALS_DIRECTORY=") {
		t.Errorf("ohd got no CREDENTIALS_DIRECTORY: the check above saw nothing")
	}

	// (The store checks the key when it opens: the restart above proves
	// the same key came back. Another key in the credential store fails the
	// start, once, saying what to do.)
	testenv.WriteFile(t, filepath.Join(credstore, "ohd-master-key"), randomHex(t, 32)+"\n")
	if out, err := box.systemctl("restart", "ohd.service"); err == nil {
		t.Errorf("ohd started with another master key: %s", out)
	}
	time.Sleep(3 * time.Second) // past RestartSec=2s: a restart would show
	props, _ = box.systemctl("show", "-p", "ActiveState,NRestarts,ExecMainStatus", "ohd.service")
	for _, want := range []string{"ActiveState=failed", "NRestarts=0", "ExecMainStatus=2"} {
		if !strings.Contains(props+"\n", want+"\n") {
			t.Errorf("ohd.service with another master key: want %s in\n%s", want, props)
		}
	}
	if !strings.Contains(box.ohdLog(), "is not the one this state was created with") {
		t.Errorf("ohd's log does not say the key is wrong:\n%s", box.ohdLog())
	}
}

// systemdRootImage is an image with an empty root: mount points, and the
// merged-/usr symlinks; /usr and /etc come from the host.
func systemdRootImage(t *testing.T) string {
	t.Helper()
	const ref = "ohd-test-systemd-root:1"
	if dockerCmd("image", "inspect", ref).Run() == nil {
		return ref
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, dir := range []string{"etc", "usr", "run", "tmp", "var", "proc", "sys", "dev", "opt"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755}); err != nil {
			t.Fatal(err)
		}
	}
	for _, dir := range []string{"bin", "sbin", "lib", "lib64"} {
		st, err := os.Lstat("/" + dir)
		if err != nil {
			continue
		}
		h := &tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755}
		if st.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink("/" + dir)
			if err != nil {
				t.Fatal(err)
			}
			h = &tar.Header{Typeflag: tar.TypeSymlink, Name: dir, Linkname: target, Mode: 0o777}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	cmd := dockerCmd("import", "-", ref)
	cmd.Stdin = &buf
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker import: %v\n%s", err, out)
	}
	return ref
}

// capMask is the CapBnd line /proc/<pid>/status shows for the unit's
// CapabilityBoundingSet=.
func capMask(t *testing.T, unit string) string {
	t.Helper()
	numbers := map[string]uint{"CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_DAC_READ_SEARCH": 2, "CAP_FOWNER": 3,
		"CAP_KILL": 5, "CAP_SETGID": 6, "CAP_SETUID": 7, "CAP_SYS_CHROOT": 18, "CAP_SYS_PTRACE": 19, "CAP_SYS_ADMIN": 21}
	var mask uint64
	found := false
	for _, line := range strings.Split(unit, "\n") {
		if v, ok := strings.CutPrefix(line, "CapabilityBoundingSet="); ok {
			found = true
			for _, c := range strings.Fields(v) {
				n, ok := numbers[c]
				if !ok {
					t.Fatalf("CapabilityBoundingSet= names %s: add its number here", c)
				}
				mask |= 1 << n
			}
		}
	}
	if !found {
		t.Fatal("ohd.service has no CapabilityBoundingSet=")
	}
	return fmt.Sprintf("%016x", mask)
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func statOwner(t *testing.T, path string) int {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return int(st.Sys().(*syscall.Stat_t).Uid)
}

// checkNetnsUnderUnit runs ohd's namespace code (pkg/runtime's test binary
// in its probe mode) under the [Service] sandbox of ohd.service, in the
// systemd container: it must open the network namespace of a process of
// uid 1000, check its cgroup, enter it and connect to a server that
// listens on loopback there only. This is what ohd does to reach an inner
// server (CAP_SYS_PTRACE, CAP_SYS_ADMIN, RestrictNamespaces=net and
// setns in the system call filter all play a part).
func checkNetnsUnderUnit(t *testing.T, name, units, shared, unitText string) {
	t.Helper()
	probe := filepath.Join(shared, "runtime.test")
	build := exec.Command("go", "test", "-c", "-o", probe, "./pkg/runtime")
	build.Dir = moduleRoot()
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go test -c ./pkg/runtime: %v\n%s", err, out)
	}
	cid := strings.TrimSpace(run(t, "docker", "inspect", "-f", "{{.Id}}", name))
	greeting := "inside-" + randomHex(t, 8)
	// The server: uid 1000, in a network namespace of its own whose
	// loopback nothing else shares.
	dir := filepath.Join(shared, "listener")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.ChownR(t, dir, 1000, 1000)
	pidFile, logFile := filepath.Join(dir, "pid"), filepath.Join(dir, "log")
	run(t, "docker", "exec", "-d", name, "unshare", "--net", "sh", "-c",
		"exec >"+logFile+" 2>&1; ip link set lo up && exec setpriv --reuid 1000 --regid 1000 --clear-groups env OHD_TEST_NETNS_LISTEN='127.0.0.1:7777|"+pidFile+"|"+greeting+"' "+probe)
	var pid string
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(pidFile)
		if pid = string(b); err == nil {
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logFile)
			t.Fatalf("the server in its own namespace did not start in 30s: %s", log)
		}
		time.Sleep(50 * time.Millisecond)
	}

	out := filepath.Join(shared, "probe.out")
	testenv.WriteFile(t, filepath.Join(units, "ohd-netns-probe.service"),
		probeUnit(unitText, probe, "OHD_TEST_NETNS_PROBE="+pid+"|"+cid+"|127.0.0.1:7777|"+greeting, out))
	systemctl := func(args ...string) (string, error) { return systemctlIn(name, args...) }
	if msg, err := systemctl("daemon-reload"); err != nil {
		t.Fatalf("systemctl daemon-reload: %v %s", err, msg)
	}
	_, err := systemctl("start", "ohd-netns-probe.service")
	got, _ := os.ReadFile(out)
	if err != nil || !strings.Contains(string(got), "probe: ok") {
		status, _ := systemctl("status", "--no-pager", "ohd-netns-probe.service")
		t.Errorf("ohd's namespace code under the unit's sandbox: %v\n%s\n%s", err, got, status)
	}
}

// probeUnit is ohd.service's [Service] section with probe as a oneshot
// ExecStart=, env in its environment and its output appended to out.
func probeUnit(unitText, probe, env, out string) string {
	var lines []string
	for _, line := range strings.Split(unitText, "\n") {
		switch {
		case strings.HasPrefix(line, "ExecStart="):
			line = "ExecStart=" + probe
		case strings.HasPrefix(line, "Type="):
			line = "Type=oneshot"
		case strings.HasPrefix(line, "NotifyAccess="), strings.HasPrefix(line, "Restart"),
			strings.HasPrefix(line, "StateDirectory"), strings.HasPrefix(line, "RuntimeDirectory"),
			strings.HasPrefix(line, "LoadCredential="), strings.HasPrefix(line, "WantedBy="):
			continue
		}
		lines = append(lines, line)
	}
	lines = append(lines, "", "[Service]", "Environment="+env,
		"StandardOutput=append:"+out, "StandardError=append:"+out, "")
	return strings.Join(lines, "\n")
}

// checkNsmountUnderUnit runs ohd's mount namespace code (pkg/nsmount's
// test binary in its probe mode) under the [Service] sandbox of
// ohd.service, in the systemd container: it must bind a directory onto
// itself, and read-only, in the mount namespace of another process, as
// the live pins do in a running container's (issue 26: RestrictNamespaces
// must allow mnt, the system call filter @mount); the directory then
// cannot be renamed there.
func checkNsmountUnderUnit(t *testing.T, name, units, shared, unitText string) {
	t.Helper()
	probe := filepath.Join(shared, "nsmount.test")
	build := exec.Command("go", "test", "-c", "-o", probe, "./pkg/nsmount")
	build.Dir = moduleRoot()
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go test -c ./pkg/nsmount: %v\n%s", err, out)
	}
	dir := filepath.Join(shared, "pinned")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(shared, "nsmount-pid")
	run(t, "docker", "exec", "-d", name, "unshare", "--mount", "--propagation", "private", "sh", "-c",
		"echo $$ > "+pidFile+".tmp && mv "+pidFile+".tmp "+pidFile+" && exec sleep 300")
	var pid string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		b, err := os.ReadFile(pidFile)
		if pid = strings.TrimSpace(string(b)); err == nil && pid != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the process in a mount namespace of its own did not start in 30s")
		}
	}
	defer func() { _, _ = dockerCmd("exec", name, "kill", pid).CombinedOutput() }()
	out := filepath.Join(shared, "nsmount-probe.out")
	testenv.WriteFile(t, filepath.Join(units, "ohd-nsmount-probe.service"), probeUnit(unitText, probe, "OHD_TEST_NSMOUNT_PROBE="+pid+"|"+dir, out))
	systemctl := func(args ...string) (string, error) { return systemctlIn(name, args...) }
	if msg, err := systemctl("daemon-reload"); err != nil {
		t.Fatalf("systemctl daemon-reload: %v %s", err, msg)
	}
	_, err := systemctl("start", "ohd-nsmount-probe.service")
	got, _ := os.ReadFile(out)
	if err != nil || !strings.Contains(string(got), "probe: ok") {
		status, _ := systemctl("status", "--no-pager", "ohd-nsmount-probe.service")
		t.Fatalf("ohd's mount namespace code under the unit's sandbox: %v\n%s\n%s", err, got, status)
	}
	mv, err := dockerCmd("exec", name, "nsenter", "-t", pid, "-m", "sh", "-c", "mv "+dir+" "+dir+".moved; touch "+dir+"/x").CombinedOutput()
	if err == nil || !strings.Contains(strings.ToLower(string(mv)), "busy") || !strings.Contains(strings.ToLower(string(mv)), "read-only") {
		t.Errorf("in the other namespace, mv of the pinned directory and a write in it = %v %q; want EBUSY and EROFS", err, mv)
	}
}

// systemctlIn runs systemctl in container name and returns its trimmed
// output.
func systemctlIn(name string, args ...string) (string, error) {
	out, err := dockerCmd(append([]string{"exec", name, "systemctl"}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// systemdBox is a container whose PID 1 is systemd, with ohd.service
// installed (ExecStart= the test build, paths set by a drop-in).
type systemdBox struct {
	t                                    *testing.T
	name, units, shared, runDir, logFile string
	// state is the state directory, at the same path in the box.
	state    string
	unitText string // ohd.service as installed
	d        *daemon
}

// bootSystemd starts systemd in a container made of the host's /usr and
// /etc. Paths that ohd hands to dockerd (worktrees, repositories under
// shared, the runtime directory, the binaries) are bind-mounted at the
// same paths. It boots into ohd.service, or with opts.Sockets into
// sockets.target with ohd.socket and ohd-api.socket enabled (their paths
// changed as for the service) and ohd.service not started.
// systemdOptions change what bootSystemd sets up.
type systemdOptions struct {
	// Sockets installs and enables ohd.socket and ohd-api.socket and
	// boots into sockets.target instead of ohd.service.
	Sockets bool
	// Credstore, if set, is mounted read-only at /run/credstore, where
	// systemd looks for LoadCredential= files named without a path.
	Credstore string
	// DropIn lines are added to the [Service] drop-in.
	DropIn []string
	// Mounts are more docker -v arguments for the box.
	Mounts []string
	// Units are more unit files to install (name to text), not started.
	Units map[string]string
	// Users are lines added to the box's /etc/passwd (and a group of the
	// same name and id to /etc/group), for units that run as a user the
	// host lacks.
	Users []string
}

func bootSystemd(t *testing.T, opts systemdOptions) *systemdBox {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireDocker(t)
	if _, err := os.Stat("/usr/lib/systemd/systemd"); err != nil {
		testenv.Missing(t, "/usr/lib/systemd/systemd not found: install Debian's systemd package (apt-get install systemd)")
	}
	b := binaries(t)
	img := testimage.Ensure(t)
	root := systemdRootImage(t)

	suffix := randomHex(t, 4)
	box := &systemdBox{t: t, name: "ohd-systemd-test-" + suffix, shared: testenv.TempDir(t), units: t.TempDir(),
		runDir: "/run/ohd-sdtest-" + suffix}
	state := testenv.TempDir(t)
	box.state = state
	if err := os.Mkdir(box.runDir, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(box.runDir) })
	box.logFile = filepath.Join(box.shared, "ohd.log")
	listen := freePort(t)
	control := box.runDir + "/ohd.sock"

	// The units as shipped, with ExecStart= pointing at the test build,
	// and a drop-in for the paths (as an operator would write it).
	unitFile := func(name string) string {
		b, err := os.ReadFile(filepath.Join(moduleRoot(), "packaging", "systemd", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	replace := func(text, old, new string) string {
		t.Helper()
		if !strings.Contains(text, old) {
			t.Fatalf("the shipped unit has no %q", strings.TrimSpace(old))
		}
		return strings.Replace(text, old, new, 1)
	}
	box.unitText = replace(unitFile("ohd.service"), "\nExecStart=/usr/local/bin/ohd serve\n", "\nExecStart="+b.ohd+" serve\n")
	testenv.WriteFile(t, filepath.Join(box.units, "ohd.service"), box.unitText)
	env := "Environment=OHD_RUNTIME=docker OHD_IMAGE=" + img
	if !opts.Sockets {
		env += " OHD_LISTEN=" + listen
	}
	testenv.WriteFile(t, filepath.Join(box.units, "ohd.service.d", "test.conf"), strings.Join([]string{
		"[Service]",
		"RuntimeDirectory=",
		"RuntimeDirectory=" + strings.TrimPrefix(box.runDir, "/run/"),
		"Environment=OHD_RUNTIME_DIR=" + box.runDir + " OHD_CONTROL_SOCKET=" + control,
		env,
		"Environment=OHD_WORKTREE_ROOT=" + filepath.Join(box.shared, "worktrees"),
		// ohd hands dockerd paths under its state directory (the inner
		// servers' state, its copies of ohctl): the state directory is at
		// the same path in the box as on the host.
		"Environment=OHD_STATE_DIR=" + box.state,
		"Environment=OHD_MEMORY=268435456 OHD_READY_TIMEOUT=60s",
		"StandardOutput=append:" + box.logFile,
		"StandardError=append:" + box.logFile,
		strings.Join(opts.DropIn, "\n"),
		"",
	}, "\n"))
	for name, text := range opts.Units {
		testenv.WriteFile(t, filepath.Join(box.units, name), text)
	}
	bootUnit := "ohd.service"
	if opts.Sockets {
		testenv.WriteFile(t, filepath.Join(box.units, "ohd.socket"),
			replace(unitFile("ohd.socket"), "\nListenStream=/run/ohd/ohd.sock\n", "\nListenStream="+control+"\n"))
		testenv.WriteFile(t, filepath.Join(box.units, "ohd-api.socket"),
			replace(unitFile("ohd-api.socket"), "\nListenStream=127.0.0.1:8000\n", "\nListenStream="+listen+"\n"))
		// systemctl enable: the [Install] sections say sockets.target.
		wants := filepath.Join(box.units, "sockets.target.wants")
		if err := os.MkdirAll(wants, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, u := range []string{"ohd.socket", "ohd-api.socket"} {
			if err := os.Symlink("/etc/systemd/system/"+u, filepath.Join(wants, u)); err != nil {
				t.Fatal(err)
			}
		}
		bootUnit = "sockets.target"
	}

	dockerSock := "/var/run/docker.sock"
	if h := os.Getenv("DOCKER_HOST"); strings.HasPrefix(h, "unix://") {
		dockerSock = strings.TrimPrefix(h, "unix://")
	}
	args := []string{"run", "-d", "--name", box.name,
		"--network", "host", "--cgroupns", "host", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
		// systemd needs CAP_SYS_ADMIN to set up each service's namespaces;
		// the unit keeps CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH, which are
		// not in the engine's default set; CAP_NET_ADMIN is for the test's
		// own namespace (checkNetnsUnderUnit), not in the unit's set.
		"--cap-add", "SYS_ADMIN", "--cap-add", "SYS_PTRACE", "--cap-add", "DAC_READ_SEARCH", "--cap-add", "NET_ADMIN",
		"--security-opt", "seccomp=unconfined", "-e", "container=docker",
		"--tmpfs", "/run", "--tmpfs", "/tmp", "--tmpfs", "/var",
		"-v", "/usr:/usr:ro", "-v", "/etc:/etc:ro", "-v", box.units + ":/etc/systemd/system:ro",
		"-v", dockerSock + ":/run/docker.sock",
		"-v", b.dir + ":" + b.dir + ":ro",
		"-v", box.shared + ":" + box.shared, "-v", box.runDir + ":" + box.runDir,
		"-v", state + ":/var/lib/ohd", "-v", state + ":" + state,
	}
	if opts.Credstore != "" {
		args = append(args, "-v", opts.Credstore+":/run/credstore:ro")
	}
	for _, m := range opts.Mounts {
		args = append(args, "-v", m)
	}
	if len(opts.Users) > 0 {
		// The host's files plus the lines, mounted over the box's.
		for _, f := range []string{"passwd", "group"} {
			b, err := os.ReadFile("/etc/" + f)
			if err != nil {
				t.Fatal(err)
			}
			text := string(b)
			for _, u := range opts.Users {
				if f == "passwd" {
					text += u + "\n"
				} else if p := strings.Split(u, ":"); len(p) > 3 {
					text += p[0] + ":x:" + p[3] + ":\n"
				}
			}
			path := filepath.Join(t.TempDir(), f)
			testenv.WriteFile(t, path, text)
			if err := os.Chmod(path, 0o644); err != nil {
				t.Fatal(err)
			}
			args = append(args, "-v", path+":/etc/"+f+":ro")
		}
	}
	for _, dir := range []string{"/bin", "/sbin", "/lib", "/lib64"} {
		if st, err := os.Lstat(dir); err == nil && st.IsDir() {
			args = append(args, "-v", dir+":"+dir+":ro") // not a merged /usr
		}
	}
	// / is shared on a host that systemd booted; the engine makes it
	// private, which breaks what systemd mounts for a service in its own
	// namespace and moves into place (the credentials directory stays
	// empty). sh makes it shared and execs systemd as PID 1.
	args = append(args, root, "/bin/sh", "-c", `mount --make-rshared / && exec /usr/lib/systemd/systemd "$@"`, "sh",
		"--unit="+bootUnit, "--log-target=console")
	run(t, "docker", args...)
	box.d = &daemon{t: t, dirs: daemonDirs{State: state, Run: box.runDir, Worktrees: filepath.Join(box.shared, "worktrees")},
		socket: control, listen: listen, logs: &testenv.SyncBuffer{}}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := dockerCmd("logs", "--tail", "40", box.name).CombinedOutput()
			t.Logf("systemd's console:\n%s", out)
		}
		removeServerContainers(t, box.d)
		_ = dockerCmd("rm", "-f", box.name).Run()
	})
	return box
}

func (s *systemdBox) systemctl(args ...string) (string, error) { return systemctlIn(s.name, args...) }

// ohdLog is the end of what ohd wrote to its standard output and error.
func (s *systemdBox) ohdLog() string {
	b, _ := os.ReadFile(s.logFile)
	return tail(string(b), 40)
}

// waitActive waits until ohd.service is active (READY=1), at most 2 min.
func (s *systemdBox) waitActive(when string) {
	s.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, _ := s.systemctl("is-active", "ohd.service")
		if out == "active" {
			return
		}
		if out == "failed" || time.Now().After(deadline) {
			status, _ := s.systemctl("status", "--no-pager", "ohd.service")
			s.t.Fatalf("%s: ohd.service is %q\n%s\n--- ohd's log ---\n%s", when, out, status, s.ohdLog())
		}
		time.Sleep(200 * time.Millisecond)
	}
}
