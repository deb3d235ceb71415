package testimage

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
)

// docker runs the docker CLI and returns its trimmed standard output.
func docker(t *testing.T, args ...string) string {
	t.Helper()
	out, err := dockerOutput(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func dockerOutput(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("docker %s: %v: %s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return strings.TrimSpace(stdout.String()), nil
}

// hardened are the docker run flags of a conversation container (DESIGN
// §6) that matter to what runs inside.
var hardened = []string{
	"--user", "1000:1000", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
	"--read-only", "--tmpfs", "/tmp", "--pids-limit", "512",
}

func TestImageRunsGitAndShell(t *testing.T) {
	ref := Ensure(t)
	if ref != Ref {
		t.Fatalf("Ensure = %q, want %q", ref, Ref)
	}
	if label := docker(t, "image", "inspect", "-f", `{{index .Config.Labels "`+LabelInputs+`"}}`, ref); len(label) != 64 {
		t.Errorf("image label %s = %q, want a SHA-256", LabelInputs, label)
	}

	// Only git and sh builtins: the image has no coreutils.
	script := `set -e
git --version
cd /tmp && git init -q -b main repo && cd repo
echo hi > f && git add f
git -c user.name=T -c user.email=t@example.com commit -q -m first
git worktree add -q --lock /tmp/wt -b side
git -C /tmp/wt rev-parse --abbrev-ref HEAD
git log --format=%s
test -x /usr/local/bin/ohctl && echo ohctl-ok
while read k v rest; do [ "$k" = "Uid:" ] && echo "uid=$v"; done < /proc/self/status
echo "HOME=$HOME"`
	args := append([]string{"run", "--rm"}, hardened...)
	args = append(args, ref, "/bin/sh", "-c", script)
	out := docker(t, args...)
	for _, want := range []string{"git version ", "side", "first", "ohctl-ok", "uid=1000", "HOME=/tmp"} {
		if !strings.Contains(out, want) {
			t.Errorf("script in the image printed:\n%s\nwant a line with %q", out, want)
		}
	}
}

func TestImageServesStandin(t *testing.T) {
	ref := Ensure(t)
	const key = "image-test-key"
	const id = "6f9619ff-8b86-d011-b42d-00c04fc964ff"
	args := append([]string{"run", "-d", "-p", "127.0.0.1::8000",
		"-e", "OH_SESSION_API_KEYS_0=" + key, "-e", "OHD_CONVERSATION_ID=" + id,
		"-e", "OH_CONVERSATIONS_PATH=/tmp/conversations"}, hardened...)
	cid := docker(t, append(args, ref)...)
	t.Cleanup(func() { _, _ = dockerOutput("rm", "-f", cid) })

	hostPort := docker(t, "port", cid, "8000/tcp")
	hostPort = strings.Fields(hostPort)[0] // one line per address family
	if !strings.HasPrefix(hostPort, "127.0.0.1:") {
		t.Fatalf("docker port = %q, want 127.0.0.1:PORT", hostPort)
	}
	base := "http://" + hostPort
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(base + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			logs, _ := dockerOutput("logs", cid)
			t.Fatalf("standin in the image never answered /health 200 (last error %v); logs:\n%s", err, logs)
		}
		time.Sleep(100 * time.Millisecond)
	}

	resp, err := http.Get(base + "/server_info")
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		ConversationID string `json:"conversation_id"`
		UID            int    `json:"uid"`
	}
	err = json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if err != nil || info.ConversationID != id || info.UID != 1000 {
		t.Errorf("GET /server_info = %+v, %v, want conversation %s, uid 1000", info, err, id)
	}
	req, _ := http.NewRequest("GET", base+"/api/conversations/count", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 401 {
		t.Errorf("GET /api/conversations/count without the key = %v, %v, want 401", resp, err)
	} else {
		resp.Body.Close()
	}

	// SIGTERM (docker stop) ends it cleanly, long before docker's kill.
	start := time.Now()
	docker(t, "stop", "-t", "20", cid)
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("docker stop took %s: the standin ignored SIGTERM", d)
	}
	if code := docker(t, "inspect", "-f", "{{.State.ExitCode}}", cid); code != "0" {
		t.Errorf("exit code after docker stop = %s, want 0", code)
	}
	if logs, _ := dockerOutput("logs", cid); strings.Contains(logs, key) {
		t.Errorf("container logs contain the session key:\n%s", logs)
	}
}

func TestEnsureKeepsCurrentImage(t *testing.T) {
	Ensure(t)
	before := docker(t, "image", "inspect", "-f", "{{.Id}}", Ref)
	// Bypass the per-process memo: the label check itself must find the
	// image current and not rebuild.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := ensure(ctx, Ref, false); err != nil {
		t.Fatal(err)
	}
	if after := docker(t, "image", "inspect", "-f", "{{.Id}}", Ref); after != before {
		t.Errorf("ensure rebuilt a current image: %s -> %s", before, after)
	}
}

func TestEnsureRebuildsStaleImage(t *testing.T) {
	testenv.RequireDocker(t)
	Ensure(t) // the build cache is warm, and the lock is not held by us
	const ref = "ohd-test-agent:stale-test"
	t.Cleanup(func() { _, _ = dockerOutput("image", "rm", "-f", ref) })
	// A stale image: the real one, relabelled.
	docker(t, "tag", Ref, ref)
	cid := docker(t, "create", "--label", "x=y", ref)
	docker(t, "commit", "--change", "LABEL "+LabelInputs+"=stale", cid, ref)
	docker(t, "rm", cid)
	if l := docker(t, "image", "inspect", "-f", `{{index .Config.Labels "`+LabelInputs+`"}}`, ref); l != "stale" {
		t.Fatalf("setup: label = %q", l)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := ensure(ctx, ref, false); err != nil {
		t.Fatal(err)
	}
	want := docker(t, "image", "inspect", "-f", `{{index .Config.Labels "`+LabelInputs+`"}}`, Ref)
	if got := docker(t, "image", "inspect", "-f", `{{index .Config.Labels "`+LabelInputs+`"}}`, ref); got != want {
		t.Errorf("label after ensure of a stale image = %q, want the current digest %q", got, want)
	}
}

// TestStandinRefusesOhdsOldEnvironment runs the image as ohd ran the
// agent server before it knew the real contract (the repository owner's
// uid, no HOME, no OH_CONVERSATIONS_PATH or OH_PERSISTENCE_DIR): like the
// real server (reference §6), the stand-in cannot create its relative
// default workspace/conversations under WORKDIR / and exits. As the
// image's own uid 10001 it starts, so the refusal is the directory's
// ownership, not a broken image.
func TestStandinRefusesOhdsOldEnvironment(t *testing.T) {
	ref := Ensure(t)
	old := []string{"-e", "OH_CONVERSATION_RUNTIME=local", "-e", "OH_SESSION_API_KEYS_0=k",
		"-e", "OHD_CONVERSATION_ID=6f9619ff-8b86-d011-b42d-00c04fc964ff", "-e", "GIT_CONFIG_COUNT=0"}
	// A name of its own per run: a leftover of a killed run (or another
	// run on the engine) never collides with it.
	name := "ohd-old-env-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	args := append(append([]string{"run", "--name", name}, hardened...), old...)
	_, err := dockerOutput(append(args, ref)...)
	t.Cleanup(func() { _, _ = dockerOutput("rm", "-f", name) })
	if err == nil || !strings.Contains(err.Error(), "Application startup failed") || !strings.Contains(err.Error(), "workspace/conversations") {
		t.Fatalf("the stand-in under ohd's old environment: %v\nwant it to exit at start-up on workspace/conversations", err)
	}
	if code, _ := dockerOutput("inspect", "-f", "{{.State.ExitCode}}", name); code != "1" {
		t.Errorf("exit code = %s, want 1", code)
	}
	// STANDIN_EXIT_AFTER ends it with status 3 once it has served a while.
	own := append([]string{"run", "--rm", "--user", strconv.Itoa(ImageUID), "-e", "STANDIN_EXIT_AFTER=500ms"}, old...)
	_, err = dockerOutput(append(own, ref)...)
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "listening") {
		t.Errorf("the stand-in as uid %d: %v\nwant it to listen, then exit 3 at STANDIN_EXIT_AFTER", ImageUID, err)
	}
}
