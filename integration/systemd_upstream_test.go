package integration

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
)

// TestSystemdUpstreamUnit runs packaging/systemd/openhands-upstream.service,
// unchanged but for its paths (the server binary: the stand-in, which
// keeps the agent server's relative defaults; the credential files; the
// port), under a real systemd beside ohd.service with the README's
// drop-in (OHD_UPSTREAM): the unit starts as its own user, the server runs
// in its state directory with its conversations, persistence and
// bash-events paths there, and ohd passes a client's non-conversation
// routes to it (a terminal command runs and its events land in the
// unit's state directory).
func TestSystemdUpstreamUnit(t *testing.T) {
	// Docker only by design: the shipped upstream unit beside ohd.service on a host's Docker, under a real systemd.
	standin := buildStandin(t)
	port := freePort(t)
	_, portNum, _ := strings.Cut(port, ":")
	credstore := testenv.TempDir(t)
	key := "sd-upstream-key-" + randomHex(t, 16)
	testenv.WriteFile(t, filepath.Join(credstore, "ohd-session-api-keys"), key+"\n")
	testenv.WriteFile(t, filepath.Join(credstore, "ohd-upstream-secret-key"), randomHex(t, 32)+"\n")

	shipped, err := os.ReadFile(filepath.Join(moduleRoot(), "packaging", "systemd", "openhands-upstream.service"))
	if err != nil {
		t.Fatal(err)
	}
	unit := string(shipped)
	for old, new := range map[string]string{
		"exec /usr/local/bin/openhands-agent-server ": "exec " + standin + " ",
		"/etc/credstore/": "/run/credstore/",
		"--port 18000'":   "--port " + portNum + "'",
	} {
		if !strings.Contains(unit, old) {
			t.Fatalf("the shipped upstream unit has no %q", old)
		}
		unit = strings.ReplaceAll(unit, old, new)
	}
	// ohd's drop-in exactly as the README gives it (issue 28: the set-up
	// followed as written answered 401 to every call, because the shipped
	// unit did not load the ohd-session-api-keys credential and only this
	// test's own drop-in did), with the upstream's port made this test's.
	dropIn := readmeFence(t, "ohd's unit is the shipped `ohd.service` with a drop-in")
	if !strings.HasPrefix(dropIn, "[Service]\n") || !strings.Contains(dropIn, "http://127.0.0.1:18000") {
		t.Fatalf("the README's drop-in for ohd is not the [Service] section naming the upstream on 127.0.0.1:18000:\n%s", dropIn)
	}
	dropIn = strings.ReplaceAll(strings.TrimPrefix(dropIn, "[Service]\n"), "127.0.0.1:18000", port)
	box := bootSystemd(t, systemdOptions{
		Credstore: credstore,
		DropIn:    []string{dropIn},
		Units:     map[string]string{"openhands-upstream.service": unit},
		Users:     []string{"openhands:x:10001:10001::/home/openhands:/usr/sbin/nologin"},
		Mounts:    []string{filepath.Dir(standin) + ":" + filepath.Dir(standin) + ":ro"},
	})
	box.waitActive("ohd with an upstream")
	if out, err := box.systemctl("start", "openhands-upstream.service"); err != nil {
		status, _ := box.systemctl("status", "--no-pager", "openhands-upstream.service")
		t.Fatalf("systemctl start openhands-upstream: %v %s\n%s", err, out, status)
	}
	in := func(args ...string) string {
		out, _ := dockerCmd(append([]string{"exec", box.name}, args...)...).CombinedOutput()
		return strings.TrimSpace(string(out))
	}
	waitFor(t, time.Minute, "the upstream to answer /health", func() bool {
		resp, err := http.Get("http://" + port + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	props, _ := box.systemctl("show", "-p", "ActiveState", "-p", "User", "-p", "WorkingDirectory", "openhands-upstream.service")
	for _, want := range []string{"ActiveState=active", "User=openhands", "WorkingDirectory=/var/lib/openhands-upstream"} {
		if !strings.Contains(props+"\n", want+"\n") {
			t.Errorf("openhands-upstream.service: want %s in\n%s", want, props)
		}
	}

	// Canvas's first calls, with the operator's key K: ohd's own routes and
	// the upstream's (a wrong key is refused by ohd).
	for _, c := range []struct {
		path, key string
		want      int
	}{
		{"/api/conversations/count", key, http.StatusOK},
		{"/api/conversations/search", key, http.StatusOK},
		{"/api/conversations?ids=" + randomHex(t, 16), key, http.StatusOK},
		{"/api/conversations/count", key + "-wrong", http.StatusUnauthorized},
		{"/api/conversations/search", "", http.StatusUnauthorized},
	} {
		if r := box.d.call("GET", c.path, nil, "X-Session-API-Key", c.key); r.Status != c.want {
			t.Errorf("GET %s with key %q = %d %s, want %d", c.path, c.key, r.Status, r.Body, c.want)
		}
	}

	// A terminal command through ohd (no cid: the upstream's).
	r := box.d.call("POST", "/api/bash/execute_bash_command", map[string]any{"command": "pwd", "cwd": nil}, "X-Session-API-Key", key)
	if r.Status != http.StatusOK || !strings.Contains(string(r.Body), `"stdout":"/var/lib/openhands-upstream\n"`) {
		t.Errorf("execute_bash_command through ohd = %d %s, want the upstream's answer, run in its state directory", r.Status, r.Body)
	}
	// Its paths: in the state directory, owned by the unit's user.
	for _, dir := range []string{"conversations", "bash_events"} {
		path := "/var/lib/openhands-upstream/" + dir
		if got := in("stat", "-c", "%U %F", path); got != "openhands directory" {
			t.Errorf("%s in the box: %q, want a directory of openhands", path, got)
		}
	}
	if got := in("sh", "-c", "ls /var/lib/openhands-upstream/bash_events | wc -l"); got != "2" {
		t.Errorf("the upstream's bash events dir holds %s files, want the command's 2", got)
	}
	if got := in("ls", "/var/lib/openhands-upstream"); strings.Contains(got, "workspace") {
		t.Errorf("the upstream made a relative workspace/ in its directory (%s): a path is not set", got)
	}
}

// readmeFence returns the text of the first fenced block of README.md
// after the line that starts with marker, without its fences.
func readmeFence(t *testing.T, marker string) string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(moduleRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "\n"+marker)
	if !ok {
		t.Fatalf("README.md has no line starting %q", marker)
	}
	_, rest, ok = strings.Cut(rest, "\n```")
	if !ok {
		t.Fatalf("README.md has no fenced block after %q", marker)
	}
	_, rest, _ = strings.Cut(rest, "\n") // the fence's info string
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatalf("README.md: the block after %q is not closed", marker)
	}
	return block
}
