package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/openhands"
	"github.com/ohd-dev/ohd/pkg/store"
)

// fakeLLM is an LLM provider on the host: it records the credentials
// each request arrived with and answers in the provider's shape, as a
// stream when asked.
type fakeLLM struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []string // "<path> <auth header>: <value>"
}

func newFakeLLM(t *testing.T) *fakeLLM {
	p := &fakeLLM{}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Stream bool `json:"stream"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		p.mu.Lock()
		p.seen = append(p.seen, fmt.Sprintf("%s authorization=%s x-api-key=%s", r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("X-Api-Key")))
		p.mu.Unlock()
		if req.Stream {
			w.Header().Set("Content-Type", "text/event-stream")
			for i := 0; i < 3; i++ {
				fmt.Fprintf(w, "data: {\"delta\":%d}\n\n", i)
				w.(http.Flusher).Flush()
			}
			fmt.Fprint(w, "data: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"fake","choices":[{"message":{"role":"assistant","content":"hello from the provider"}}]}`)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *fakeLLM) calls() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.seen...)
}

// buildStandin builds the stand-in agent server for the host.
func buildStandin(t *testing.T) string {
	t.Helper()
	out := filepath.Join(testenv.TempDir(t), "standin")
	cmd := exec.Command("go", "build", "-o", out, "./integration/standin")
	cmd.Dir = moduleRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the stand-in: %v\n%s", err, b)
	}
	return out
}

// upstreamServer runs the stand-in as the operator's own agent server in
// local mode on loopback, with its own OH_SECRET_KEY, the outer key as its
// session key, and settings holding an LLM key and a saved secret.
func upstreamServer(t *testing.T, bin, outerKey, secretKey string, settings map[string]any) string {
	t.Helper()
	u, _ := upstreamServerHome(t, bin, outerKey, secretKey, settings)
	return u
}

// upstreamServerHome is upstreamServer, also returning the upstream's
// HOME (what its /api/file/home answers).
func upstreamServerHome(t *testing.T, bin, outerKey, secretKey string, settings map[string]any) (string, string) {
	t.Helper()
	dir := testenv.TempDir(t)
	sf := filepath.Join(dir, "settings.json")
	b, _ := json.Marshal(settings)
	if err := os.WriteFile(sf, b, 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	cmd := exec.Command(bin)
	// Its relative defaults (workspace/bash_events) land in its own
	// directory, as the README's unit's WorkingDirectory puts them.
	cmd.Dir = dir
	cmd.Env = []string{"STANDIN_ADDR=" + addr, "OH_SESSION_API_KEYS_0=" + outerKey, "OH_SECRET_KEY=" + secretKey,
		"STANDIN_SETTINGS_FILE=" + sf, "HOME=" + dir, "OH_CONVERSATIONS_PATH=" + filepath.Join(dir, "conversations")}
	logs := &testenv.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	waitFor(t, 20*time.Second, "the upstream stand-in", func() bool {
		resp, err := http.Get("http://" + addr + "/health")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})
	return "http://" + addr, dir
}

// direct calls the upstream itself, as Canvas would without ohd.
func direct(t *testing.T, base, method, path, key string, hdr ...string) apiResponse {
	t.Helper()
	req, _ := http.NewRequest(method, base+path, nil)
	req.Header.Set("X-Session-API-Key", key)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return apiResponse{Status: resp.StatusCode, Body: b, Header: resp.Header}
}

// canvasSecrets are the values of the Canvas scenario, long enough to
// be searched for.
type canvasSecrets struct {
	outerKey, upstreamKey, llmKey, saved string
}

func newCanvasSecrets() canvasSecrets {
	v := func(what string) string { return what + "-VALUE-" + strings.ReplaceAll(store.NewID(), "-", "") }
	return canvasSecrets{outerKey: v("outerkey"), upstreamKey: v("upstreamkey"), llmKey: v("sk-llmkey"), saved: v("ghp-saved")}
}

// TestBackendCanvasThroughOhdWithUpstream replays Agent Canvas's local create
// (ref §2a) through ohd with an upstream, then has the inner server call
// the LLM and resolve the saved secret, and looks for every credential in
// everything the container can see (acceptance 1 and 2).
func TestBackendCanvasThroughOhdWithUpstream(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		testenv.RequireRoot(t) // reading every process's environment
		sec := newCanvasSecrets()
		prov := newFakeLLM(t)
		bin := buildStandin(t)
		up := upstreamServer(t, bin, sec.outerKey, sec.upstreamKey, map[string]any{
			"llm":     map[string]any{"model": "openai/gpt-fake", "api_key": sec.llmKey, "base_url": prov.srv.URL + "/v1"},
			"secrets": map[string]any{"GITHUB_TOKEN": map[string]any{"value": sec.saved, "description": "GitHub"}},
		})
		keys := filepath.Join(testenv.TempDir(t), "keys")
		upKeyFile := filepath.Join(filepath.Dir(keys), "upstream-secret-key")
		if err := os.WriteFile(keys, []byte(sec.outerKey+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(upKeyFile, []byte(sec.upstreamKey+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		d := b.daemon(t, "--session-api-key-file", keys, "--upstream", up, "--upstream-secret-key-file", upKeyFile)
		call := func(method, path string, body any, hdr ...string) apiResponse {
			t.Helper()
			return d.call(method, path, body, append([]string{"X-Session-API-Key", sec.outerKey}, hdr...)...)
		}

		// 1. GET /api/settings (redacted) and /api/profiles; 2. /api/file/home;
		// 3. the encrypted settings and the saved secrets' names: each as the
		// upstream answers it.
		same := func(path string, hdr ...string) apiResponse {
			t.Helper()
			got, want := call("GET", path, nil, hdr...), direct(t, up, "GET", path, sec.outerKey, hdr...)
			if got.Status != want.Status || !bytes.Equal(got.Body, want.Body) || got.Header.Get("Content-Type") != want.Header.Get("Content-Type") {
				t.Errorf("GET %s through ohd = %d %s, upstream = %d %s", path, got.Status, got.Body, want.Status, want.Body)
			}
			return got
		}
		same("/api/settings")
		same("/api/profiles")
		same("/api/file/home")
		same("/api/settings/secrets")
		// server_info and the encrypted settings change between two calls
		// (uptime; a fresh IV per token): the same but for those.
		var info, infoUp map[string]any
		call("GET", "/server_info", nil).json(t, &info)
		direct(t, up, "GET", "/server_info", sec.outerKey).json(t, &infoUp)
		// ... and the capabilities, which ohd sets to what it serves.
		if c, ok := info["capabilities"].([]any); !ok || len(c) != 0 {
			t.Errorf("server_info capabilities through ohd = %v, want [] (no conversation yet: ohd knows no image's)", info["capabilities"])
		}
		// ... the version, which Canvas checks (x.y.z >= 1.28.0: the
		// stand-in's is not, so ohd's contract version), and ohd's own beside
		// it (issue 28).
		if info["version"] != openhands.ContractVersion || info["ohd_version"] == nil {
			t.Errorf("server_info through ohd: version %v ohd_version %v, want %s and ohd's", info["version"], info["ohd_version"], openhands.ContractVersion)
		}
		for _, m := range []map[string]any{info, infoUp} {
			delete(m, "uptime")
			delete(m, "idle_time")
			delete(m, "capabilities")
			delete(m, "version")
			delete(m, "ohd_version")
		}
		if fmt.Sprint(info) != fmt.Sprint(infoUp) {
			t.Errorf("server_info through ohd = %v, upstream = %v", info, infoUp)
		}
		enc := call("GET", "/api/settings", nil, "X-Expose-Secrets", "encrypted")
		var settings struct {
			AgentSettings map[string]any `json:"agent_settings"`
		}
		enc.json(t, &settings)
		token, _ := settings.AgentSettings["llm"].(map[string]any)["api_key"].(string)
		if pt, err := openhands.NewFernet(sec.upstreamKey).Decrypt(token); err != nil || string(pt) != sec.llmKey {
			t.Fatalf("X-Expose-Secrets: encrypted through ohd gave api_key %q, want the upstream's token of the key (%v)", token, err)
		}

		// 4-5. The create, as Canvas builds it.
		repo := testenv.NewRepo(t, testenv.RepoOptions{})
		id := store.NewID()
		create := call("POST", "/api/conversations", map[string]any{
			"agent_settings":      settings.AgentSettings,
			"workspace":           map[string]any{"kind": "LocalWorkspace", "working_dir": repo},
			"client_tools":        []any{},
			"confirmation_policy": map[string]any{"kind": "NeverConfirm"},
			"max_iterations":      500, "stuck_detection": true, "autotitle": true,
			"worktree": true, "secrets_encrypted": true, "conversation_id": id,
			"secrets": map[string]any{"GITHUB_TOKEN": map[string]any{
				"kind": "LookupSecret", "url": "/api/settings/secrets/GITHUB_TOKEN", "description": "GitHub",
				"headers": map[string]any{"X-Session-API-Key": sec.outerKey},
			}},
		})
		if create.Status != http.StatusCreated {
			t.Fatalf("create = %d %s\n%s", create.Status, create.Body, tail(d.logs.String(), 30))
		}

		// The inner server calls the LLM: the provider gets the real key.
		llm := call("POST", "/api/conversations/"+id+"/standin/llm", map[string]any{"prompt": "hi"})
		if llm.Status != 200 || !strings.Contains(string(llm.Body), "hello from the provider") {
			t.Fatalf("LLM call from the inner server = %d %s", llm.Status, llm.Body)
		}
		// A stream cut at any hop reaches the client as a cut (the
		// provider's by the broker, the broker's by the relay, the
		// relay's by the stand-in, the stand-in's by ohd's proxy); on a
		// short one, what each hop logged says which one it was (seen
		// twice on loaded CI runs, before every hop cut rather than ended).
		stream, serr := d.callErr("POST", "/api/conversations/"+id+"/standin/llm", map[string]any{"prompt": "hi", "stream": true}, "X-Session-API-Key", sec.outerKey)
		if serr != nil || stream.Status != 200 || !strings.Contains(string(stream.Body), "data: [DONE]") {
			t.Errorf("streamed LLM call = %v %d %s\nohd's log:\n%s\nthe container's output:\n%s\naudit:\n%s", serr, stream.Status, stream.Body,
				tail(d.logs.String(), 20), tail(b.output(t, d.record(id).ContainerID), 20), tail(d.ohctl("audit", id), 10))
		}
		want := "/v1/chat/completions authorization=Bearer " + sec.llmKey + " x-api-key="
		if calls := prov.calls(); len(calls) != 2 || calls[0] != want || calls[1] != want {
			t.Errorf("provider calls = %q, want 2 × %q", calls, want)
		}
		// ... and resolves the saved secret on use.
		name := id + ".GITHUB_TOKEN"
		if r := call("GET", "/api/conversations/"+id+"/standin/secret/GITHUB_TOKEN", nil); r.Status != 200 || string(r.Body) != sec.saved {
			t.Errorf("the inner server's lookup of GITHUB_TOKEN = %d %q, want the saved value", r.Status, r.Body)
		}

		// Acceptance 2: none of the credentials is anywhere the container or
		// its state holds them.
		values := []secretValue{
			{"LLM key", []byte(sec.llmKey)}, {"saved secret", []byte(sec.saved)}, {"outer session key", []byte(sec.outerKey)},
			{"upstream's secret key", []byte(sec.upstreamKey)}, {"upstream's Fernet token", []byte(token)},
			{"Fernet token prefix", []byte(openhands.TokenPrefix)},
		}
		body := call("GET", "/api/conversations/"+id+"/standin/create_body", nil)
		c := d.record(id)
		sinks := []sink{{"the create body the inner server received", body.Body}}
		inspected := []byte(b.workload(t, c.ContainerID).Raw)
		sinks = append(sinks, sink{"the engine's record of the container", inspected})
		sinks = append(sinks, containerEnvirons(t, c.ContainerID)...)
		sinks = append(sinks, filesUnder(t, d.dirs.State)...)
		sinks = append(sinks, filesUnder(t, c.BrokerDir)...)
		sinks = append(sinks, sink{"ohd's log", []byte(d.logs.String())})
		if len(body.Body) == 0 || !strings.Contains(string(body.Body), "/secrets/"+name) {
			t.Fatalf("the inner create body %s has no LookupSecret on the relay: the scan would prove nothing", body.Body)
		}
		if got := leaks(values, sinks); len(got) > 0 {
			t.Errorf("leaks:\n  %s", strings.Join(got, "\n  "))
		}

		// The audit names the uses, never the values.
		audit := d.ohctl("audit", id)
		for _, w := range []string{name, id + ".llm"} {
			if !strings.Contains(audit, w) {
				t.Errorf("ohctl audit %s does not show %s:\n%s", id, w, audit)
			}
		}
		if got := leaks(values[:4], []sink{{"ohctl audit", []byte(audit)}}); len(got) > 0 {
			t.Errorf("%v", got)
		}
		// Revoked: the next lookup fails.
		d.ohctl("revoke", id, "secret", name)
		if r := call("GET", "/api/conversations/"+id+"/standin/secret/GITHUB_TOKEN", nil); r.Status == 200 || strings.Contains(string(r.Body), sec.saved) {
			t.Errorf("lookup after ohctl revoke = %d %q, want a failure", r.Status, r.Body)
		}
		// Removal removes the conversation's own credentials from the store.
		if r := call("DELETE", "/api/conversations/"+id, nil); r.Status != 200 {
			t.Fatalf("delete = %d %s", r.Status, r.Body)
		}
		if out := d.ohctl("secret", "ls"); strings.Contains(out, id) {
			t.Errorf("ohctl secret ls after the conversation ended still lists its secrets:\n%s", out)
		}
	})
}

// TestBackendSDKPlaintextCreateThroughOhd: the SDK's RemoteConversation create
// (ref §2b: the agent with plaintext secrets, an Anthropic LLM) and POST
// /api/conversations/{id}/secrets (plaintext and {value}) send values
// to the broker; the inner server gets lookups (acceptance 3).
func TestBackendSDKPlaintextCreateThroughOhd(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		testenv.RequireRoot(t)
		sec := newCanvasSecrets()
		prov := newFakeLLM(t)
		d := b.daemon(t)
		static, plain, valued := "static-VALUE-"+store.NewID(), "plain-VALUE-"+store.NewID(), "valued-VALUE-"+store.NewID()
		repo := testenv.NewRepo(t, testenv.RepoOptions{})
		id, _ := d.apiCreate(map[string]any{
			"agent": map[string]any{"kind": "Agent", "llm": map[string]any{
				"model": "anthropic/claude-fake", "api_key": sec.llmKey, "base_url": prov.srv.URL, "usage_id": "agent",
			}},
			"workspace":       map[string]any{"kind": "LocalWorkspace", "working_dir": repo},
			"initial_message": nil, "max_iterations": 50, "stuck_detection": true, "client_tools": []any{}, "tags": map[string]any{},
			"secrets": map[string]any{"DB_PASSWORD": map[string]any{"kind": "StaticSecret", "value": static}},
		})
		if r := d.call("POST", "/api/conversations/"+id+"/secrets", map[string]any{"secrets": map[string]any{"A": plain, "B": map[string]any{"value": valued}}}); r.Status != 200 {
			t.Fatalf("POST secrets = %d %s", r.Status, r.Body)
		}
		if r := d.call("POST", "/api/conversations/"+id+"/standin/llm", map[string]any{"prompt": "hi", "stream": true}); r.Status != 200 || !strings.Contains(string(r.Body), "[DONE]") {
			t.Fatalf("LLM call = %d %s", r.Status, r.Body)
		}
		if calls := prov.calls(); len(calls) != 1 || calls[0] != "/v1/messages authorization= x-api-key="+sec.llmKey {
			t.Errorf("provider calls = %q, want the Anthropic style with the real key", calls)
		}
		for n, v := range map[string]string{"DB_PASSWORD": static, "A": plain, "B": valued} {
			if r := d.call("GET", "/api/conversations/"+id+"/standin/secret/"+n, nil); r.Status != 200 || string(r.Body) != v {
				t.Errorf("lookup of %s = %d %q, want its value", n, r.Status, r.Body)
			}
		}
		c := d.record(id)
		body := d.call("GET", "/api/conversations/"+id+"/standin/create_body", nil)
		inspected := []byte(b.workload(t, c.ContainerID).Raw)
		sinks := append([]sink{{"the inner create body", body.Body}, {"the engine's record of the container", inspected}}, containerEnvirons(t, c.ContainerID)...)
		// The state directory but the generated key file (the outer key's
		// home on the host).
		for _, s := range filesUnder(t, d.dirs.State) {
			if filepath.Base(s.name) != "session-api-key" {
				sinks = append(sinks, s)
			}
		}
		values := []secretValue{{"LLM key", []byte(sec.llmKey)}, {"static secret", []byte(static)}, {"plain secret", []byte(plain)}, {"{value} secret", []byte(valued)}, {"outer key", []byte(d.apiKey())}}
		if got := leaks(values, sinks); len(got) > 0 {
			t.Errorf("leaks:\n  %s", strings.Join(got, "\n  "))
		}
	})
}

// containerEnvirons returns the environment of every process of the
// container (its cgroup names it).
func containerEnvirons(t *testing.T, containerID string) []sink {
	t.Helper()
	// A process's cgroup names Docker's container id; on Kubernetes
	// (containerID "pod/uid") the pod's uid, with "_" for "-" under
	// systemd's cgroup driver.
	marks := [][]byte{[]byte(containerID)}
	if _, uid, ok := strings.Cut(containerID, "/"); ok {
		marks = [][]byte{[]byte(uid), []byte(strings.ReplaceAll(uid, "-", "_"))}
	}
	var out []sink
	for pid, pe := range processEnvirons(t) {
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if slices.ContainsFunc(marks, func(m []byte) bool { return bytes.Contains(cg, m) }) {
			out = append(out, sink{fmt.Sprintf("the environment of pid %d (%q)", pid, bytes.ReplaceAll(pe[1], []byte{0}, []byte(" "))), pe[0]})
		}
	}
	if len(out) < 2 {
		t.Fatalf("found %d processes of container %s, want inner-exec and the inner server at least: the scan would prove nothing", len(out), containerID)
	}
	return out
}

// filesUnder returns every regular file under dir (ohd's store, the
// worktrees, the broker directory) as a sink.
func filesUnder(t *testing.T, dir string) []sink {
	t.Helper()
	var out []sink
	_ = filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err == nil {
			out = append(out, sink{p, b})
		}
		return nil
	})
	if len(out) == 0 {
		t.Fatalf("no files under %s", dir)
	}
	return out
}
