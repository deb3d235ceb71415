package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/openhands"
	"github.com/ohd-dev/ohd/pkg/store"
)

// TestBackendInnerStateSurvivesContainer checks the inner contract (DESIGN
// §6, reference §5-6) against the stand-in, which exits unless it gets it:
// the inner server's state lives on the host, owned by the repository
// owner; its cipher key is stable and never in the engine's record of the
// container; and after a stop, a crash of the inner process and a removal
// behind ohd's back (on Kubernetes all three a pod deleted), the next
// request starts a container with the same conversation, events and
// readable secrets, while metadata reads in between answer from the host
// files with the real status.
func TestBackendInnerStateSurvivesContainer(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		testenv.RequireRoot(t)
		d := b.daemon(t, "--inner-env", "LOG_JSON=false")
		repo := testenv.NewRepo(t, testenv.RepoOptions{Owner: &testenv.Owner{UID: 1000, GID: 1000}})
		id, _ := d.apiCreate(map[string]any{"workspace": map[string]any{"kind": "LocalWorkspace", "working_dir": repo}, "worktree": true})
		c := d.record(id)

		const llmKey = "sk-inner-state-test-value-0123456789"
		if r := d.call("POST", "/api/conversations/"+id+"/secrets", map[string]any{"secrets": map[string]any{"LLM_KEY": llmKey}}); r.Status != 200 {
			t.Fatalf("POST secrets = %d %s", r.Status, r.Body)
		}
		if r := d.call("POST", "/api/conversations/"+id+"/events", map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "remember me"}}}); r.Status != 200 {
			t.Fatalf("POST events = %d %s", r.Status, r.Body)
		}
		if r := d.call("POST", "/api/conversations/"+id+"/pause", nil); r.Status != 200 {
			t.Fatalf("pause = %d %s", r.Status, r.Body)
		}

		// The state on the host: owned by the agent's uid (the inner server
		// runs as it since issue 26; not the repository owner, whose git must
		// never read what the agent wrote), 0700, and the conversation's files
		// in it (the stand-in wrote them as the agent).
		inner := openhands.DirsOf(filepath.Join(d.dirs.State, "inner"), id)
		for _, dir := range []string{inner.Root, inner.Persistence, inner.Conversations} {
			st, err := os.Stat(dir)
			if err != nil {
				t.Fatal(err)
			}
			if sys := st.Sys().(*syscall.Stat_t); sys.Uid != agentUID || sys.Gid != agentUID || st.Mode().Perm() != 0o700 {
				t.Errorf("%s: owner %d:%d mode %o, want the agent's %d:%d 0700", dir, sys.Uid, sys.Gid, st.Mode().Perm(), agentUID, agentUID)
			}
		}
		base, err := os.ReadFile(filepath.Join(inner.StateDir(id), openhands.BaseStateFile))
		if err != nil {
			t.Fatalf("the inner server's base_state.json is not on the host: %v", err)
		}
		if strings.Contains(string(base), llmKey) || !strings.Contains(string(base), `"LLM_KEY"`) {
			t.Errorf("base_state.json on the host = %s: want the secret's source, never its value", base)
		}
		type secretReport map[string]struct {
			Readable bool   `json:"readable"`
			SHA256   string `json:"sha256"`
		}
		var before secretReport
		d.call("GET", "/api/conversations/"+id+"/standin/secrets", nil).json(t, &before)
		if !before["LLM_KEY"].Readable || before["LLM_KEY"].SHA256 == "" {
			t.Fatalf("secret report before any loss = %+v, want LLM_KEY readable", before)
		}

		// The container's configuration: the agent server's arguments and
		// environment, no key value.
		w := b.workload(t, c.ContainerID)
		if got := fmt.Sprint(w.Command); !strings.HasSuffix(got, "--host 0.0.0.0 --port 8000]") {
			t.Errorf("Cmd = %s, want the image's command then --host 0.0.0.0 --port 8000", got)
		}
		env := map[string]string{}
		for _, e := range w.Env {
			k, v, _ := strings.Cut(e, "=")
			env[k] = v
		}
		for k, want := range map[string]string{
			"HOME": inner.Home, "OH_PERSISTENCE_DIR": inner.Persistence, "OH_CONVERSATIONS_PATH": inner.Conversations,
			"OH_BASH_EVENTS_DIR": inner.BashEvents, "OH_LEASE_TTL_SECONDS": "0",
			"OH_CONVERSATION_RUNTIME": "local", "GIT_TERMINAL_PROMPT": "0", "LOG_JSON": "false",
		} {
			if env[k] != want {
				t.Errorf("env %s = %q, want %q", k, env[k], want)
			}
		}
		for _, k := range []string{openhands.SecretKeyEnv, openhands.SessionKeyEnv} {
			if _, ok := env[k]; ok {
				t.Errorf("env carries %s", k)
			}
		}
		secretKey, err := os.ReadFile(filepath.Join(c.BrokerDir, "secret-key"))
		if err != nil || len(strings.TrimSpace(string(secretKey))) < 32 {
			t.Fatalf("secret key file: %q, %v", secretKey, err)
		}
		if strings.Contains(w.Raw, strings.TrimSpace(string(secretKey))) {
			t.Error("the engine's record of the container shows the inner secret key")
		}
		mounts := map[string]bool{}
		for dst, m := range w.Mounts {
			if m.Source == dst && m.RW {
				mounts[dst] = true
			}
		}
		for _, dir := range inner.Mounted() {
			if !mounts[dir] {
				t.Errorf("mounts %v: want %s read-write at its own path", mounts, dir)
			}
		}
		hostname := w.Hostname

		losses := []struct {
			name string
			do   func(testing.TB, string)
		}{
			{"stop behind ohd's back", b.stop},
			{"crash of the inner process", b.crash},
			{"removal behind ohd's back", b.kill},
		}
		for _, loss := range losses {
			cid := d.record(id).ContainerID
			loss.do(t, cid)
			waitFor(t, 10*time.Second, "ohd to notice the "+loss.name, func() bool { return d.record(id).State == store.StateStopped })

			// No container: metadata from the host files, real status.
			r := d.call("GET", "/api/conversations/"+id, nil)
			var got map[string]any
			r.json(t, &got)
			if r.Status != 200 || r.Header.Get("X-Ohd-Source") != "host" || got["execution_status"] != "paused" {
				t.Errorf("after %s: GET = %d (source %s) %s, want status paused from the host", loss.name, r.Status, r.Header.Get("X-Ohd-Source"), r.Body)
			}
			if r := d.call("GET", "/api/conversations/count?status=paused", nil); strings.TrimSpace(string(r.Body)) != "1" {
				t.Errorf("after %s: count?status=paused = %s, want 1", loss.name, r.Body)
			}
			if r := d.call("GET", "/api/conversations?ids="+id, nil); !strings.Contains(string(r.Body), `"paused"`) {
				t.Errorf("after %s: ?ids= = %s, want the paused conversation", loss.name, r.Body)
			}
			if r := d.call("GET", "/api/conversations/search?status=paused", nil); !strings.Contains(string(r.Body), id) {
				t.Errorf("after %s: search?status=paused = %s, want the conversation", loss.name, r.Body)
			}
			if strings.Contains(string(r.Body), openhands.TokenPrefix) {
				t.Errorf("after %s: GET shows a stored token: %s", loss.name, r.Body)
			}
			if d.record(id).State != store.StateStopped {
				t.Errorf("after %s: a metadata read started the conversation", loss.name)
			}

			// The next request starts a container with the same state.
			r = d.call("GET", "/api/conversations/"+id+"/events/search", nil)
			if r.Status != 200 || !strings.Contains(string(r.Body), "remember me") {
				t.Errorf("after %s: events = %d %s, want the message\n%s", loss.name, r.Status, r.Body, tail(d.logs.String(), 20))
			}
			var rep secretReport
			r = d.call("GET", "/api/conversations/"+id+"/standin/secrets", nil)
			if err := json.Unmarshal(r.Body, &rep); err != nil {
				t.Fatalf("after %s: secret report %d %s", loss.name, r.Status, r.Body)
			}
			if !rep["LLM_KEY"].Readable || rep["LLM_KEY"].SHA256 != before["LLM_KEY"].SHA256 {
				t.Errorf("after %s: secret report %s, want LLM_KEY readable, as before the loss", loss.name, r.Body)
			}
			if r := d.call("GET", "/api/conversations/"+id, nil); r.Header.Get("X-Ohd-Source") != "inner" {
				t.Errorf("after %s: GET answered by %s, want the inner server", loss.name, r.Header.Get("X-Ohd-Source"))
			}
			if now := d.record(id); now.State != store.StateRunning || now.ContainerID == "" {
				t.Errorf("after %s: %s %s, want running", loss.name, now.State, now.ContainerID)
			} else if h := b.workload(t, now.ContainerID).Hostname; h != hostname {
				t.Errorf("after %s: hostname %v, want %v as before: the server's lease names it", loss.name, h, hostname)
			}
			if k, _ := os.ReadFile(filepath.Join(c.BrokerDir, "secret-key")); string(k) != string(secretKey) {
				t.Errorf("after %s: the inner secret key changed", loss.name)
			}
		}

		d.ohctl("rm", "--discard", id)
		if _, err := os.Stat(inner.Root); !os.IsNotExist(err) {
			t.Errorf("inner state after rm: %v, want it removed", err)
		}
	})
}

// TestServeRefusesInnerEnv checks ohd serve refuses an --inner-env that
// looks like a secret or that ohd sets, saying why, before it starts
// (with the local runtime: it needs no engine, so it is no Docker test).
func TestServeRefusesInnerEnv(t *testing.T) {
	b := binaries(t)
	for kv, want := range map[string]string{
		"OPENAI_API_KEY=sk-123":    "looks like a secret",
		"OH_CONVERSATIONS_PATH=/x": "ohd sets",
	} {
		dirs := newDirs(t)
		cmd := exec.Command(b.ohd, "serve", "--state-dir", dirs.State, "--runtime-dir", dirs.Run, "--runtime", "local", "--listen", "off", "--inner-env", kv)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), want) || strings.Contains(string(out), "sk-123") {
			t.Errorf("ohd serve --inner-env %s: %v\n%s\nwant a refusal saying %q, without the value", kv, err, out, want)
		}
	}
}

// TestDockerDefaultImageMissing runs ohd serve with its default image, the
// real agent server, which this engine does not have and cannot pull (no
// registry answers): ohd warns at start-up, and a create fails naming the
// image and how to load it, having created nothing.
func TestDockerDefaultImageMissing(t *testing.T) {
	// Docker only by design: it names Docker's pull and load; on Kubernetes a missing image fails the create at the image step (TestBackendAPICreateFailuresUndoEverything).
	testenv.RequireDocker(t)
	if out, err := dockerCmd("image", "inspect", openhands.DefaultImage).CombinedOutput(); err == nil {
		testenv.Missing(t, "the engine has %s; this test needs it absent (%s)", openhands.DefaultImage, strings.TrimSpace(string(out)))
	}
	d := startDaemon(t, daemonOptions{Runtime: "docker"})
	warned := false
	for _, l := range d.logLines() {
		if l["level"] == "WARN" && l["image"] == openhands.DefaultImage && strings.Contains(fmt.Sprint(l["msg"]), "not in the Docker engine") {
			warned = true
		}
	}
	if !warned {
		t.Errorf("no start-up warning about the missing %s:\n%s", openhands.DefaultImage, tail(d.logs.String(), 20))
	}
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	r := d.call("POST", "/api/conversations", map[string]any{"workspace": map[string]any{"working_dir": repo}, "worktree": true})
	var e struct{ Detail string }
	_ = json.Unmarshal(r.Body, &e)
	if r.Status != 503 || !strings.Contains(e.Detail, openhands.DefaultImage) || !strings.Contains(e.Detail, "docker load") || !strings.Contains(e.Detail, "--image") ||
		!strings.Contains(e.Detail, openhands.BuildCommand(openhands.DefaultImage)) {
		t.Errorf("create without the image = %d %s, want 503 naming the image, docker load, the agent server's own build command and --image", r.Status, r.Body)
	}
	if strings.Contains(e.Detail, "conversation_id") || strings.Contains(string(r.Body), `"conversation_id"`) {
		t.Errorf("the 503 names a conversation id, which no conversation has: %s", r.Body)
	}
	if !strings.Contains(d.logs.String(), "pulling image") {
		t.Errorf("no pull attempt in the log:\n%s", tail(d.logs.String(), 20))
	}
	// ohctl create says the same: the real engine, no registry.
	_, err := d.ohctlErr("create", "--repo", repo, "--worktree")
	var oe *ohctlError
	if !errors.As(err, &oe) || oe.code != 1 || !strings.Contains(oe.stderr, `"`+openhands.DefaultImage+`"`) ||
		!strings.Contains(oe.stderr, "docker pull "+openhands.DefaultImage) || !strings.Contains(oe.stderr, "docker load -i") || !strings.Contains(oe.stderr, "--image") {
		t.Errorf("ohctl create without the image = %v, want exit 1 naming the image, docker pull, docker load and --image", err)
	}
	if out := d.ohctl("--json", "ls"); strings.Contains(out, repo) {
		t.Errorf("a failed image step left a conversation: %s", out)
	}
}
