package integration

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/openhands"
	"github.com/ohd-dev/ohd/pkg/store"
)

// profileEnv is ohd with an upstream that holds LLM profiles and an
// agent profile, each LLM profile with its own key, on one fake
// provider: the setting of Canvas's profile launch and model picker.
// Other tests (the Canvas session replay) reuse it.
type profileEnv struct {
	b        backend
	t        *testing.T
	d        *daemon
	up       string // the upstream's base URL
	sec      canvasSecrets
	prov     *fakeLLM
	keys     map[string]string // LLM profile name → its key
	agentID  string            // the agent profile "coder" (llm_profile_ref "main")
	upstream *openhands.Fernet // the upstream's cipher
}

// profileEntries returns what an upstream stand-in's settings file needs
// for profiles (merge it into the map given to upstreamServer): LLM
// profiles "main", "cheap" and "other", each with its own key on the
// provider at provURL, and agent profile "coder" (llm_profile_ref
// "main"), whose id is returned.
func profileEntries(provURL string) (entries map[string]any, keys map[string]string, agentID string) {
	keys = map[string]string{}
	profiles := map[string]any{}
	for _, n := range []string{"main", "cheap", "other"} {
		keys[n] = "sk-" + n + "-VALUE-" + strings.ReplaceAll(store.NewID(), "-", "")
		profiles[n] = map[string]any{"model": "openai/gpt-" + n, "api_key": keys[n], "base_url": provURL + "/v1"}
	}
	agentID = store.NewID()
	entries = map[string]any{
		"profiles": profiles,
		"agent_profiles": []any{map[string]any{
			"id": agentID, "name": "coder", "agent_kind": "openhands", "revision": 3, "llm_profile_ref": "main",
			"system_message_suffix": "profile suffix", "disabled_skills": []any{},
		}},
	}
	return entries, keys, agentID
}

// newProfileEnv starts the upstream stand-in with profileEntries, and ohd
// in front of it with the upstream's secret key.
func newProfileEnv(t *testing.T, b backend) *profileEnv {
	t.Helper()
	e := &profileEnv{t: t, b: b, sec: newCanvasSecrets(), prov: newFakeLLM(t)}
	settings, keys, agentID := profileEntries(e.prov.srv.URL)
	e.keys, e.agentID = keys, agentID
	settings["llm"] = map[string]any{"model": "openai/gpt-main", "api_key": e.keys["main"], "base_url": e.prov.srv.URL + "/v1"}
	bin := buildStandin(t)
	e.up = upstreamServer(t, bin, e.sec.outerKey, e.sec.upstreamKey, settings)
	e.upstream = openhands.NewFernet(e.sec.upstreamKey)
	dir := testenv.TempDir(t)
	keysFile, upKeyFile := filepath.Join(dir, "keys"), filepath.Join(dir, "upstream-secret-key")
	if err := os.WriteFile(keysFile, []byte(e.sec.outerKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(upKeyFile, []byte(e.sec.upstreamKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.d = b.daemon(t, "--session-api-key-file", keysFile, "--upstream", e.up, "--upstream-secret-key-file", upKeyFile)
	return e
}

// caller calls ohd with the client's key (profileEnv.call, or a replay's).
type caller func(method, path string, body any, hdr ...string) apiResponse

// call calls ohd with the client's (outer) key.
func (e *profileEnv) call(method, path string, body any, hdr ...string) apiResponse {
	e.t.Helper()
	return e.d.call(method, path, body, append([]string{"X-Session-API-Key", e.sec.outerKey}, hdr...)...)
}

// canvasProfileLaunch is the create Agent Canvas sends for a profile
// launch (agent-server-adapter.ts, buildStartConversationRequest...:
// agent_profile_id instead of agent_settings, no secrets_encrypted,
// title_llm_profile from the settings).
func canvasProfileLaunch(id, agentProfileID, workingDir, titleProfile string) map[string]any {
	b := map[string]any{
		"agent_profile_id":    agentProfileID,
		"workspace":           map[string]any{"kind": "LocalWorkspace", "working_dir": workingDir},
		"client_tools":        []any{},
		"confirmation_policy": map[string]any{"kind": "NeverConfirm"},
		"max_iterations":      500, "stuck_detection": true, "autotitle": true,
		"worktree": true, "conversation_id": id,
	}
	if titleProfile != "" {
		b["title_llm_profile"] = titleProfile
	}
	return b
}

// canvasSwitchModel is Canvas's model picker in a running conversation
// (agent-server-conversation-service.api.ts switchProfile, local
// backend): the profile read with X-Expose-Secrets: encrypted, then
// switch_llm with its config, stream on and a fresh usage_id.
func canvasSwitchModel(t *testing.T, call caller, id, profile string) apiResponse {
	t.Helper()
	var p struct {
		Config map[string]any `json:"config"`
	}
	call("GET", "/api/profiles/"+profile, nil, "X-Expose-Secrets", "encrypted").json(t, &p)
	if k, _ := p.Config["api_key"].(string); !openhands.IsToken(k) {
		t.Fatalf("GET /api/profiles/%s (encrypted) through ohd: api_key %q is not a token", profile, k)
	}
	p.Config["stream"] = true
	p.Config["usage_id"] = "profile:" + profile + ":" + store.NewID()
	return call("POST", "/api/conversations/"+id+"/switch_llm", map[string]any{"llm": p.Config})
}

// llmKeyUsed has the inner server make one LLM call with the agent's
// LLM and returns what the provider got ("<path> authorization=...").
func llmKeyUsed(t *testing.T, call caller, prov *fakeLLM, id string) string {
	t.Helper()
	n := len(prov.calls())
	r := call("POST", "/api/conversations/"+id+"/standin/llm", map[string]any{"prompt": "hi"})
	calls := prov.calls()
	if r.Status != 200 || len(calls) != n+1 {
		t.Fatalf("LLM call from the inner server = %d %s (provider calls %d → %d)", r.Status, r.Body, n, len(calls))
	}
	return calls[n]
}

func (e *profileEnv) canvasSwitchModel(id, profile string) apiResponse {
	e.t.Helper()
	return canvasSwitchModel(e.t, e.call, id, profile)
}

func (e *profileEnv) llmKeyUsed(id string) string {
	e.t.Helper()
	return llmKeyUsed(e.t, e.call, e.prov, id)
}

func bearer(key string) string {
	return "/v1/chat/completions authorization=Bearer " + key + " x-api-key="
}

// assertNoKeyInContainer looks for every value in what the container can
// see or ohd keeps in the clear: the inner server's create body, docker
// inspect, every process environment of the container, every file under
// ohd's state directory (the inner server's state and profile store
// included) and ohd's log.
func (e *profileEnv) assertNoKeyInContainer(id string, values []secretValue) {
	e.t.Helper()
	body := e.call("GET", "/api/conversations/"+id+"/standin/create_body", nil)
	c := e.d.record(id)
	inspected := []byte(e.b.workload(e.t, c.ContainerID).Raw)
	llms := e.call("GET", "/api/conversations/"+id+"/standin/llms", nil)
	sinks := []sink{{"the create body the inner server received", body.Body}, {"the engine's record of the container", inspected},
		{"the inner server's LLMs (create and switches)", llms.Body}}
	if llms.Status != 200 || !strings.Contains(string(llms.Body), openhands.PlaceholderKey) {
		e.t.Fatalf("the inner server's LLMs = %d %s: the scan would prove nothing", llms.Status, llms.Body)
	}
	sinks = append(sinks, containerEnvirons(e.t, c.ContainerID)...)
	sinks = append(sinks, filesUnder(e.t, e.d.dirs.State)...)
	sinks = append(sinks, filesUnder(e.t, c.BrokerDir)...)
	sinks = append(sinks, sink{"ohd's log", []byte(e.d.logs.String())})
	if got := leaks(values, sinks); len(got) > 0 {
		e.t.Errorf("leaks:\n  %s", strings.Join(got, "\n  "))
	}
}

// secretValues are the values no container may hold.
func (e *profileEnv) secretValues() []secretValue {
	v := []secretValue{{"outer session key", []byte(e.sec.outerKey)}, {"upstream's secret key", []byte(e.sec.upstreamKey)},
		{"Fernet token prefix", []byte(openhands.TokenPrefix)}}
	for n, k := range e.keys {
		v = append(v, secretValue{"LLM key of profile " + n, []byte(k)})
	}
	return v
}

// TestBackendCanvasProfileLaunchThroughOhd: Canvas's profile launch
// (agent_profile_id, title_llm_profile) is resolved by ohd from the
// upstream's profiles; the inner server gets agent_settings with the
// relay and a placeholder, its LLM call reaches the provider with the
// profile's key, and its title call with the title profile's key
// (issue 18, acceptance 4).
func TestBackendCanvasProfileLaunchThroughOhd(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		testenv.RequireRoot(t) // reading every process's environment
		e := newProfileEnv(t, b)
		repo := testenv.NewRepo(t, testenv.RepoOptions{})

		// An unknown agent profile: 404 naming the field, as the agent server
		// answers it, and nothing is created.
		bad := store.NewID()
		if r := e.call("POST", "/api/conversations", canvasProfileLaunch(bad, store.NewID(), repo, "")); r.Status != http.StatusNotFound || !strings.Contains(string(r.Body), "agent_profile_id") {
			t.Errorf("create with an unknown agent_profile_id = %d %s, want 404 naming the field", r.Status, r.Body)
		}
		if r := e.call("GET", "/api/conversations/"+bad, nil); r.Status != http.StatusNotFound {
			t.Errorf("GET of the refused create = %d, want 404", r.Status)
		}
		if out := e.d.ohctl("secret", "ls"); strings.Contains(out, bad) {
			t.Errorf("a refused create left credentials:\n%s", out)
		}

		id := store.NewID()
		r := e.call("POST", "/api/conversations", canvasProfileLaunch(id, strings.ToUpper(e.agentID), repo, "cheap"))
		if r.Status != http.StatusCreated {
			t.Fatalf("profile launch = %d %s\n%s", r.Status, r.Body, tail(e.d.logs.String(), 30))
		}
		var inner struct {
			AgentProfileID *string `json:"agent_profile_id"`
			TitleProfile   string  `json:"title_llm_profile"`
			AgentSettings  struct {
				LLM          map[string]any `json:"llm"`
				AgentContext map[string]any `json:"agent_context"`
			} `json:"agent_settings"`
		}
		e.call("GET", "/api/conversations/"+id+"/standin/create_body", nil).json(t, &inner)
		if inner.AgentProfileID != nil || inner.TitleProfile != "cheap" {
			t.Errorf("inner create: agent_profile_id %v title_llm_profile %q, want none and \"cheap\"", inner.AgentProfileID, inner.TitleProfile)
		}
		if got := inner.AgentSettings.LLM; got["model"] != "openai/gpt-main" || got["api_key"] != openhands.PlaceholderKey || !strings.Contains(got["base_url"].(string), "/llm/"+id+".llm") || got["stream"] != true {
			t.Errorf("inner agent_settings.llm = %v, want the profile's model on the relay with the placeholder, streaming", got)
		}
		if inner.AgentSettings.AgentContext["system_message_suffix"] == nil || !strings.Contains(inner.AgentSettings.AgentContext["system_message_suffix"].(string), "profile suffix") {
			t.Errorf("inner agent_context = %v, want the profile's system_message_suffix", inner.AgentSettings.AgentContext)
		}
		if got := e.llmKeyUsed(id); got != bearer(e.keys["main"]) {
			t.Errorf("the agent's LLM call reached the provider as %q, want the profile's key", got)
		}
		// Canvas preselects the launching profile from launched_agent_profile,
		// which the inner server cannot know (it got agent_settings): ohd
		// adds it to the conversation's answers, single and listed.
		var info struct {
			Launched *struct {
				ID       string `json:"agent_profile_id"`
				Revision int    `json:"revision"`
			} `json:"launched_agent_profile"`
		}
		r.json(t, &info)
		if info.Launched == nil || info.Launched.ID != strings.ToLower(e.agentID) || info.Launched.Revision != 3 {
			t.Errorf("the 201 create answer: launched_agent_profile = %+v, want the profile %s at revision 3 (issue 28)", info.Launched, e.agentID)
		}
		info.Launched = nil
		e.call("GET", "/api/conversations/"+id, nil).json(t, &info)
		if info.Launched == nil || info.Launched.ID != strings.ToLower(e.agentID) || info.Launched.Revision != 3 {
			t.Errorf("launched_agent_profile = %+v, want the profile %s at revision 3", info.Launched, e.agentID)
		}
		var page struct {
			Items []struct {
				ID       string          `json:"id"`
				Launched json.RawMessage `json:"launched_agent_profile"`
			} `json:"items"`
		}
		e.call("GET", "/api/conversations/search", nil).json(t, &page)
		for _, it := range page.Items {
			if it.ID == id && !strings.Contains(string(it.Launched), strings.ToLower(e.agentID)) {
				t.Errorf("search: launched_agent_profile = %s", it.Launched)
			}
		}
		// The title: the inner server loads title_llm_profile from its own
		// store, as the real one does, and its call carries that key.
		n := len(e.prov.calls())
		var title struct {
			Source string `json:"source"`
			Status int    `json:"status"`
		}
		e.call("POST", "/api/conversations/"+id+"/standin/title", map[string]any{"message": "fix the bug"}).json(t, &title)
		if calls := e.prov.calls(); title.Source != "profile" || title.Status != 200 || len(calls) != n+1 || calls[n] != bearer(e.keys["cheap"]) {
			t.Errorf("title = %+v, provider calls %q, want the title profile's call with its key", title, calls[n:])
		}
		saved := false
		for _, f := range filesUnder(t, e.d.dirs.State) {
			saved = saved || strings.HasSuffix(f.name, "/profiles/cheap.json")
		}
		if !saved {
			t.Fatalf("no profiles/cheap.json in the inner server's store under %s: the scan below would not cover it", e.d.dirs.State)
		}
		e.assertNoKeyInContainer(id, e.secretValues())
		audit := e.d.ohctl("audit", id)
		for _, w := range []string{id + ".llm", openhands.ProfileScopedName(id, "cheap")} {
			if !strings.Contains(audit, w) {
				t.Errorf("ohctl audit does not show %s:\n%s", w, audit)
			}
		}
	})
}

// TestBackendSwitchLLMAndProfileThroughOhd: Canvas's model picker (switch_llm
// with the profile's token) and switch_profile are mediated: each new key
// becomes a broker profile, the inner server's next LLM call reaches the
// provider with it, bad input changes nothing, and no key reaches the
// container (issue 18, acceptance 5).
func TestBackendSwitchLLMAndProfileThroughOhd(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		testenv.RequireRoot(t)
		e := newProfileEnv(t, b)
		repo := testenv.NewRepo(t, testenv.RepoOptions{})
		id := store.NewID()
		if r := e.call("POST", "/api/conversations", canvasProfileLaunch(id, e.agentID, repo, "")); r.Status != http.StatusCreated {
			t.Fatalf("profile launch = %d %s\n%s", r.Status, r.Body, tail(e.d.logs.String(), 30))
		}
		if got := e.llmKeyUsed(id); got != bearer(e.keys["main"]) {
			t.Fatalf("before a switch the provider got %q", got)
		}

		// Canvas's model switch: switch_llm with the profile's token.
		if r := e.canvasSwitchModel(id, "other"); r.Status != 200 || strings.TrimSpace(string(r.Body)) != `{"success":true}` {
			t.Fatalf("switch_llm = %d %s", r.Status, r.Body)
		}
		if got := e.llmKeyUsed(id); got != bearer(e.keys["other"]) {
			t.Errorf("after switch_llm the provider got %q, want the new key", got)
		}
		// switch_profile by name (the SDK's; issue 28 acceptance 3: the
		// stand-in loads it from ~/.openhands/profiles, as the real server
		// does, while its profile router saves to OH_PERSISTENCE_DIR): the inner server loads the
		// profile ohd saved in its store.
		if r := e.call("POST", "/api/conversations/"+id+"/switch_profile", map[string]any{"profile_name": "cheap"}); r.Status != 200 {
			t.Fatalf("switch_profile = %d %s", r.Status, r.Body)
		}
		if got := e.llmKeyUsed(id); got != bearer(e.keys["cheap"]) {
			t.Errorf("after switch_profile the provider got %q, want the profile's key", got)
		}

		// Bad input: a 4xx naming the field, and nothing changes.
		before := e.d.ohctl("secret", "ls")
		foreign, _ := openhands.NewFernet("another-servers-key").Encrypt([]byte("sk-foreign"))
		plain := "sk-plain-VALUE-" + strings.ReplaceAll(store.NewID(), "-", "")
		for _, c := range []struct {
			name, route string
			body        any
			status      int
			field       string
		}{
			{"unknown profile", "switch_profile", map[string]any{"profile_name": "nosuch"}, 404, "profile_name"},
			{"bad profile name", "switch_profile", map[string]any{"profile_name": "../x"}, 422, "profile_name"},
			{"foreign token", "switch_llm", map[string]any{"llm": map[string]any{"model": "openai/gpt-x", "api_key": foreign}}, 422, "llm.api_key"},
			{"provider not mediated", "switch_llm", map[string]any{"llm": map[string]any{"model": "bedrock/claude", "api_key": plain}}, 422, "llm.model"},
			{"AWS keys", "switch_llm", map[string]any{"llm": map[string]any{"model": "openai/gpt-x", "aws_secret_access_key": plain}}, 422, "llm.aws_secret_access_key"},
			{"key copied elsewhere", "switch_llm", map[string]any{"llm": map[string]any{"model": "openai/gpt-x", "api_key": plain, "base_url": e.prov.srv.URL + "/v1", "usage_id": plain}}, 422, "llm"},
		} {
			r := e.call("POST", "/api/conversations/"+id+"/"+c.route, c.body)
			if r.Status != c.status || !strings.Contains(string(r.Body), c.field) {
				t.Errorf("%s: %s = %d %s, want %d naming %s", c.name, c.route, r.Status, r.Body, c.status, c.field)
			}
		}
		if after := e.d.ohctl("secret", "ls"); after != before {
			t.Errorf("refused switches changed the broker's secrets:\n%s\nwas:\n%s", after, before)
		}
		if got := e.llmKeyUsed(id); got != bearer(e.keys["cheap"]) {
			t.Errorf("after refused switches the provider got %q, want the last switched key", got)
		}
		// A plaintext key (the SDK's switch_llm) is mediated the same way.
		if r := e.call("POST", "/api/conversations/"+id+"/switch_llm", map[string]any{"llm": map[string]any{
			"model": "openai/gpt-plain", "api_key": plain, "base_url": e.prov.srv.URL + "/v1", "usage_id": "plain-switch"}}); r.Status != 200 {
			t.Fatalf("plaintext switch_llm = %d %s", r.Status, r.Body)
		}
		if got := e.llmKeyUsed(id); got != bearer(plain) {
			t.Errorf("after a plaintext switch_llm the provider got %q", got)
		}
		// Every LLM the inner server got (the create's and each switch's) is
		// on the conversation's relay with the placeholder (point 5).
		var reg struct {
			LLMs map[string]map[string]any `json:"llms"`
		}
		e.call("GET", "/api/conversations/"+id+"/standin/llms", nil).json(t, &reg)
		if len(reg.LLMs) < 3 {
			t.Errorf("the inner server has %d LLMs, want the create's and the switches'", len(reg.LLMs))
		}
		for usage, llm := range reg.LLMs {
			if base, _ := llm["base_url"].(string); llm["api_key"] != openhands.PlaceholderKey || !strings.Contains(base, "/llm/"+id+".") {
				t.Errorf("the inner server's LLM %s = api_key %v base_url %v, want the placeholder on the conversation's relay", usage, llm["api_key"], llm["base_url"])
			}
		}
		values := append(e.secretValues(), secretValue{"plaintext switched key", []byte(plain)})
		e.assertNoKeyInContainer(id, values)
		// The switched keys are the conversation's own: gone with it.
		if r := e.call("DELETE", "/api/conversations/"+id, nil); r.Status != 200 {
			t.Fatalf("delete = %d %s", r.Status, r.Body)
		}
		if out := e.d.ohctl("secret", "ls"); strings.Contains(out, id) {
			t.Errorf("the conversation's switched keys outlived it:\n%s", out)
		}
	})
}
