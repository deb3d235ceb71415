package main

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ohd-dev/ohd/pkg/openhands"
)

// TestProfilesAsTheServer: an unknown agent_profile_id answers 404 and
// creates nothing; a saved LLM profile is read back without its key and
// switched to by name; switch_llm decrypts a token and keeps the first
// LLM of a usage_id, as the real server does (profiles.go cites it).
func TestProfilesAsTheServer(t *testing.T) {
	// The real server's layout (ref §10): OH_PERSISTENCE_DIR is
	// $HOME/.openhands, where switch_profile looks.
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("OH_PERSISTENCE_DIR", filepath.Join(home, ".openhands"))
	t.Setenv("OH_SECRET_KEY", "standin-secret-key")
	ts := newTestServer(t, Config{})
	dir := t.TempDir()

	id := "7d1c0e2a-1b3c-4d5e-8f90-a1b2c3d4e5f6"
	body := `{"workspace":{"working_dir":"` + dir + `"},"conversation_id":"` + id + `","agent_profile_id":"00000000-0000-0000-0000-0000000000aa"}`
	if code, out := ts.do(t, "POST", "/api/conversations", body); code != http.StatusNotFound || !strings.Contains(string(out), "Agent profile with id '00000000-0000-0000-0000-0000000000aa' not found") {
		t.Errorf("create with an unknown agent_profile_id = %d %s, want 404", code, out)
	}
	if code, _ := ts.do(t, "GET", "/api/conversations/"+id, ""); code != http.StatusNotFound {
		t.Errorf("the refused create made conversation %s (%d)", id, code)
	}

	if code, out := ts.do(t, "POST", "/api/profiles/fast", `{"llm":{"model":"openai/fast","api_key":"sk-fast","base_url":"http://p/v1"},"include_secrets":true}`); code != http.StatusCreated {
		t.Fatalf("save profile = %d %s", code, out)
	}
	code, out := ts.do(t, "GET", "/api/profiles/fast", "")
	if p := mustJSON[struct {
		Config map[string]any `json:"config"`
		Set    bool           `json:"api_key_set"`
	}](t, out); code != 200 || p.Config["api_key"] != nil || !p.Set || p.Config["model"] != "openai/fast" {
		t.Errorf("GET /api/profiles/fast = %d %s, want the config with a null api_key", code, out)
	}

	c := ts.create(t, dir, "")
	if code, out := ts.do(t, "POST", "/api/conversations/"+c.ID+"/switch_profile", `{"profile_name":"nosuch"}`); code != http.StatusNotFound || !strings.Contains(string(out), "Profile 'nosuch' not found") {
		t.Errorf("switch_profile to an unknown profile = %d %s", code, out)
	}
	if code, out := ts.do(t, "POST", "/api/conversations/"+c.ID+"/switch_profile", `{"profile_name":"fast"}`); code != 200 || strings.TrimSpace(string(out)) != `{"success":true}` {
		t.Fatalf("switch_profile = %d %s", code, out)
	}
	if llm, _ := agentLLM(c.ID); llm["api_key"] != "sk-fast" || llm["usage_id"] != "profile:fast" {
		t.Errorf("after switch_profile the agent's LLM is %v", llm)
	}
	// With OH_PERSISTENCE_DIR elsewhere, the router saves where
	// switch_profile does not look: 404, as measured on the real server.
	t.Setenv("OH_PERSISTENCE_DIR", t.TempDir())
	if code, out := ts.do(t, "POST", "/api/profiles/elsewhere", `{"llm":{"model":"openai/e","api_key":"sk-e"},"include_secrets":true}`); code != http.StatusCreated {
		t.Fatalf("save profile = %d %s", code, out)
	}
	if code, out := ts.do(t, "POST", "/api/conversations/"+c.ID+"/switch_profile", `{"profile_name":"elsewhere"}`); code != http.StatusNotFound {
		t.Errorf("switch_profile to a profile saved outside ~/.openhands = %d %s, want 404 as the real server", code, out)
	}
	tok, _ := openhands.NewFernet("standin-secret-key").Encrypt([]byte("sk-switched"))
	sw := func(key, usage string) {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"llm": map[string]any{"model": "openai/x", "api_key": key, "usage_id": usage}})
		if code, out := ts.do(t, "POST", "/api/conversations/"+c.ID+"/switch_llm", string(b)); code != 200 {
			t.Fatalf("switch_llm = %d %s", code, out)
		}
	}
	sw(tok, "u1")
	if llm, _ := agentLLM(c.ID); llm["api_key"] != "sk-switched" {
		t.Errorf("switch_llm with a token: the agent's key is %v, want it decrypted", llm["api_key"])
	}
	sw("sk-other", "u1") // the same usage_id: the cached LLM stays
	if llm, _ := agentLLM(c.ID); llm["api_key"] != "sk-switched" {
		t.Errorf("a second switch_llm with usage_id u1 replaced the cached LLM: %v", llm["api_key"])
	}
	if code, _ := ts.do(t, "POST", "/api/conversations/"+c.ID+"/switch_llm", `{}`); code != http.StatusUnprocessableEntity {
		t.Errorf("switch_llm without llm = %d, want 422", code)
	}
}
