package openhands_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ohd-dev/ohd/pkg/openhands"
)

const agentProfileID = "5c1d2a4e-9f1b-4c3e-8a7d-0e1f2a3b4c5d"

// upstreamProfiles is a Fetcher over a fixed upstream: LLM profile
// "main" (its key a token), agent profile "coder" naming it and MCP
// server "gh", settings with MCP servers "gh" and "other".
func upstreamProfiles(t *testing.T, calls *[]string) openhands.Fetcher {
	t.Helper()
	answers := map[string]string{
		"/api/agent-profiles": `{"profiles":[{"id":"` + agentProfileID + `","name":"coder"},{"id":null,"name":"x"}],"active_agent_profile_id":null}`,
		"/api/agent-profiles/coder": `{"name":"coder","profile":{"id":"` + agentProfileID + `","name":"coder","agent_kind":"openhands",
			"revision":7,"llm_profile_ref":"main","mcp_server_refs":["gh"],"tools":null,"system_message_suffix":"be brief","disabled_skills":["a"],
			"condenser":{"enabled":true},"enable_sub_agents":false}}`,
		"/api/profiles/main": `{"name":"main","config":{"model":"openai/gpt-5","api_key":"` + token(t, llmKey) + `","base_url":"https://llm.example/v1","provider_connection_id":null},"api_key_set":true}`,
		"/api/profiles/conn": `{"name":"conn","config":{"model":"openai/gpt-5","api_key":null,"provider_connection_id":"c1"},"api_key_set":true}`,
		"/api/settings":      `{"agent_settings":{"mcp_config":{"gh":{"url":"https://mcp.example/mcp"},"other":{"url":"https://o.example/mcp"}},"agent_context":{"load_memory":true}}}`,
	}
	return func(_ context.Context, path string, encrypted bool) (int, []byte, error) {
		*calls = append(*calls, path)
		if a, ok := answers[path]; ok {
			return 200, []byte(a), nil
		}
		return 404, []byte(`{"detail":"Not Found"}`), nil
	}
}

func TestResolveAgentProfile(t *testing.T) {
	var lookups, calls []string
	m := mediator(t, &lookups)
	m.Fetch = upstreamProfiles(t, &calls)
	f := fields(t, `{"agent_profile_id":"`+strings.ToUpper(agentProfileID)+`","workspace":{"working_dir":"/w"},"title_llm_profile":"main"}`)
	launched, err := m.ResolveAgentProfile(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"agent_profile_id":"` + agentProfileID + `","revision":7}`; string(launched) != want {
		t.Errorf("launched_agent_profile = %s, want %s", launched, want)
	}
	if _, ok := f["agent_profile_id"]; ok {
		t.Errorf("agent_profile_id is still in the body")
	}
	got := field(t, f, "agent_settings")
	want := map[string]any{
		"schema_version": float64(5), "agent_kind": "openhands",
		"llm":        map[string]any{"model": "openai/gpt-5", "api_key": token(t, llmKey), "base_url": "https://llm.example/v1", "stream": true},
		"mcp_config": map[string]any{"gh": map[string]any{"url": "https://mcp.example/mcp"}},
		"agent_context": map[string]any{"skills": []any{}, "system_message_suffix": "be brief", "load_project_skills": true,
			"load_user_skills": true, "load_public_skills": true, "disabled_skills": []any{"a"}, "load_memory": true},
		"tools": nil, "condenser": map[string]any{"enabled": true}, "enable_sub_agents": false,
	}
	// The token differs each time it is made: compare what it opens.
	llm := got.(map[string]any)["llm"].(map[string]any)
	if pt, err := openhands.NewFernet(upstreamKey).Decrypt(llm["api_key"].(string)); err != nil || string(pt) != llmKey {
		t.Errorf("agent_settings.llm.api_key does not open to the profile's key (%v)", err)
	}
	llm["api_key"] = want["llm"].(map[string]any)["api_key"]
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("agent_settings (-want +got):\n%s", d)
	}
	// Then the create mediates it like Canvas's own agent_settings.
	med, err := m.Create(context.Background(), convID, f)
	if err != nil || len(med.LLMs) != 1 || string(med.LLMs[0].Key) != llmKey || med.LLMs[0].Name != convID+".llm" {
		t.Fatalf("Create after the resolution = %+v, %v", med, err)
	}
}

func TestResolveAgentProfileErrors(t *testing.T) {
	var lookups, calls []string
	m := mediator(t, &lookups)
	m.Fetch = upstreamProfiles(t, &calls)
	for _, c := range []struct {
		name, body string
		status     int
		msg        string
	}{
		{"unknown id", `{"agent_profile_id":"00000000-0000-0000-0000-000000000000"}`, 404, "Agent profile with id '00000000-0000-0000-0000-000000000000' not found"},
		{"not a uuid", `{"agent_profile_id":"coder"}`, 0, "want a UUID"},
		{"with agent", `{"agent_profile_id":"` + agentProfileID + `","agent":{"llm":{"model":"x"}}}`, 0, "mutually exclusive"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := fields(t, c.body)
			before := len(f)
			_, err := m.ResolveAgentProfile(context.Background(), f)
			var me *openhands.Error
			if !errors.As(err, &me) || me.Status != c.status || me.Field != "agent_profile_id" || !strings.Contains(me.Msg, c.msg) {
				t.Fatalf("ResolveAgentProfile(%s) = %v, want status %d naming agent_profile_id: %q", c.body, err, c.status, c.msg)
			}
			if len(f) != before || f["agent_settings"] != nil {
				t.Errorf("a refused resolution changed the body: %v", f)
			}
		})
	}
	m.Fetch = nil
	_, err := m.ResolveAgentProfile(context.Background(), fields(t, `{"agent_profile_id":"`+agentProfileID+`"}`))
	var me *openhands.Error
	if !errors.As(err, &me) || me.Status != http.StatusNotFound || !strings.Contains(me.Msg, "--upstream") {
		t.Errorf("without an upstream: %v, want 404 naming --upstream", err)
	}
}

func TestProfileLLMAndSwitch(t *testing.T) {
	var lookups, calls []string
	m := mediator(t, &lookups)
	m.Fetch = upstreamProfiles(t, &calls)
	ctx := context.Background()
	var me *openhands.Error
	if _, err := m.ProfileLLM(ctx, "profile_name", "nosuch"); !errors.As(err, &me) || me.Status != 404 || me.Msg != "Profile 'nosuch' not found" {
		t.Errorf("unknown profile: %v", err)
	}
	if _, err := m.ProfileLLM(ctx, "profile_name", "../main"); !errors.As(err, &me) || me.Status != 0 || len(calls) > 1 {
		t.Errorf("bad name: %v (calls %q), want a 422 before any upstream call", err, calls)
	}
	if _, err := m.ProfileLLM(ctx, "profile_name", "conn"); err == nil || !strings.Contains(err.Error(), "provider connection") {
		t.Errorf("a profile keyed by a provider connection: %v, want refused", err)
	}
	llm, err := m.ProfileLLM(ctx, "profile_name", "main")
	if err != nil {
		t.Fatal(err)
	}
	name := openhands.ProfileScopedName(convID, "main")
	l, err := m.MediateLLM(ctx, convID, name, llm, "profile_name")
	if err != nil || l == nil || l.Name != name || string(l.Key) != llmKey || l.BaseURL != "https://llm.example/v1" {
		t.Fatalf("MediateLLM = %+v, %v", l, err)
	}
	if llm["api_key"] != openhands.PlaceholderKey || llm["base_url"] != "http://127.0.0.1:8751/llm/"+name {
		t.Errorf("mediated profile LLM = %v, want the relay and the placeholder", llm)
	}
	if _, ok := llm["provider_connection_id"]; ok {
		t.Errorf("provider_connection_id is passed to the inner server")
	}

	out, l, err := m.SwitchLLM(ctx, convID, convID+".llm-x", []byte(`{"llm":{"model":"anthropic/claude","api_key":"`+token(t, llmKey)+`","usage_id":"u"}}`))
	if err != nil || l == nil || l.AuthHeader != "x-api-key" || string(l.Key) != llmKey {
		t.Fatalf("SwitchLLM = %+v, %v", l, err)
	}
	want := `{"llm":{"api_key":"` + openhands.PlaceholderKey + `","base_url":"http://127.0.0.1:8751/llm/` + convID + `.llm-x","model":"anthropic/claude","usage_id":"u"}}`
	if string(out) != want {
		t.Errorf("SwitchLLM body = %s, want %s", out, want)
	}
	for _, c := range []struct{ body, field string }{
		{`{"llm":{"model":"openai/x","usage_id":"` + outerKey + `"}}`, "llm"},
		{`{"llm":{"model":"openai/x"},"x":"` + outerKey + `"}`, "body"},
		{`{"llm":{"model":"vertex_ai/x","api_key":"k"}}`, "llm.model"},
		{`{"llm":{"api_key":"k"}}`, "llm.model"},
		{`{"llm":"x"}`, "llm"},
		{`[]`, "body"},
		{`{"llm":{"model":"openai/x","api_key":"sk-long-key","extra":"sk-long-key"}}`, "llm"},
	} {
		if _, _, err := m.SwitchLLM(ctx, convID, "n", []byte(c.body)); !errors.As(err, &me) || me.Field != c.field {
			t.Errorf("SwitchLLM(%s) = %v, want an error naming %s", c.body, err, c.field)
		}
	}
}

// FuzzSwitchLLM feeds switch_llm bodies to the mediation: it never
// panics, and what it returns is JSON holding no key it took out.
func FuzzSwitchLLM(f *testing.F) {
	f.Add([]byte(`{"llm":{"model":"openai/x","api_key":"sk-1234","base_url":"https://a/v1"}}`))
	f.Add([]byte(`{"llm":{"model":"anthropic/x","api_key":"sk-ant-oat-1","condenser":{"llm":{"model":"openai/y","api_key":"k2"}}}}`))
	f.Add([]byte(`{"llm":{"model":"openai/x","extra_headers":{"Authorization":"Bearer z"}}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		m := &openhands.Mediator{Relay: "http://127.0.0.1:8751", Upstream: openhands.NewFernet("k")}
		out, l, err := m.SwitchLLM(context.Background(), convID, convID+".llm-f", body)
		if err != nil {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("SwitchLLM returned invalid JSON %q", out)
		}
		if l != nil && len(l.Key) >= 4 && strings.Contains(string(out), string(l.Key)) {
			t.Fatalf("the forwarded body holds the key")
		}
	})
}

func TestWithLaunchedProfile(t *testing.T) {
	launched := json.RawMessage(`{"agent_profile_id":"` + agentProfileID + `","revision":7}`)
	for _, c := range []struct{ info, want string }{
		{`{"id":"x","launched_agent_profile":null}`, `{"id":"x","launched_agent_profile":` + string(launched) + `}`},
		{`{"id":"x"}`, `{"id":"x","launched_agent_profile":` + string(launched) + `}`},
		// The inner server's own record wins.
		{`{"id":"x","launched_agent_profile":{"agent_profile_id":"y","revision":1}}`, `{"id":"x","launched_agent_profile":{"agent_profile_id":"y","revision":1}}`},
		{`not json`, `not json`},
	} {
		if got := openhands.WithLaunchedProfile(json.RawMessage(c.info), launched); string(got) != c.want {
			t.Errorf("WithLaunchedProfile(%s) = %s, want %s", c.info, got, c.want)
		}
	}
	if got := openhands.WithLaunchedProfile(json.RawMessage(`{"id":"x"}`), nil); string(got) != `{"id":"x"}` {
		t.Errorf("without a launched profile: %s", got)
	}
}
