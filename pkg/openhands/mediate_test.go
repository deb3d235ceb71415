package openhands_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ohd-dev/ohd/pkg/openhands"
)

const (
	convID      = "0b6f3c1e-7d2a-4f4e-9a51-3f2f0e9d8c7b"
	upstreamKey = "upstream-oh-secret-key"
	outerKey    = "outer-session-key-0123456789"
	llmKey      = "sk-real-llm-key-ZZ"
	savedValue  = "ghp_saved_secret_value_ZZ"
)

func mediator(t *testing.T, lookups *[]string) *openhands.Mediator {
	t.Helper()
	return &openhands.Mediator{
		Upstream: openhands.NewFernet(upstreamKey),
		Lookup: func(_ context.Context, name string, h map[string]string) ([]byte, error) {
			*lookups = append(*lookups, name+" "+h["X-Session-API-Key"])
			if name != "GITHUB_TOKEN" {
				return nil, errors.New("404 Secret not found")
			}
			return []byte(savedValue), nil
		},
		Hosts:     []string{"127.0.0.1:8000"},
		Forbidden: [][]byte{[]byte(outerKey), []byte(upstreamKey)},
		Relay:     "http://127.0.0.1:8751",
	}
}

func token(t *testing.T, v string) string {
	t.Helper()
	tok, err := openhands.NewFernet(upstreamKey).Encrypt([]byte(v))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func fields(t *testing.T, body string) map[string]json.RawMessage {
	t.Helper()
	var f map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &f); err != nil {
		t.Fatal(err)
	}
	return f
}

func field(t *testing.T, f map[string]json.RawMessage, k string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(f[k], &v); err != nil {
		t.Fatalf("%s: %v", k, err)
	}
	return v
}

// TestMediateCanvasCreate mediates the body of Agent Canvas's create (ref
// §2a step 5): encrypted agent_settings, secrets_encrypted, a
// LookupSecret on the upstream's saved secret with the outer key.
func TestMediateCanvasCreate(t *testing.T) {
	var lookups []string
	m := mediator(t, &lookups)
	tok := token(t, llmKey)
	body := `{"agent_settings":{"llm":{"model":"anthropic/claude-x","api_key":"` + tok + `","stream":true},
	  "condenser":{"llm":{"model":"anthropic/claude-x","api_key":"` + tok + `"}},
	  "agent_context":{"load_public_skills":true}},
	 "workspace":{"kind":"LocalWorkspace","working_dir":"/w"},
	 "secrets_encrypted":true,
	 "secrets":{"GITHUB_TOKEN":{"kind":"LookupSecret","url":"/api/settings/secrets/GITHUB_TOKEN","description":"gh","headers":{"X-Session-API-Key":"` + outerKey + `"}}}}`
	got, err := m.Create(context.Background(), convID, fields(t, body))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Fields["secrets_encrypted"]; ok {
		t.Error("secrets_encrypted was kept")
	}
	wantLLMs := []openhands.LLM{{Name: convID + ".llm", Model: "anthropic/claude-x", BaseURL: "https://api.anthropic.com", AuthHeader: "x-api-key", Key: []byte(llmKey)}}
	if d := cmp.Diff(wantLLMs, got.LLMs); d != "" {
		t.Errorf("LLMs (-want +got):\n%s", d)
	}
	wantSecrets := []openhands.Secret{{Name: convID + ".GITHUB_TOKEN", Value: []byte(savedValue)}}
	if d := cmp.Diff(wantSecrets, got.Secrets); d != "" {
		t.Errorf("Secrets (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"GITHUB_TOKEN " + outerKey}, lookups); d != "" {
		t.Errorf("upstream lookups (-want +got):\n%s", d)
	}
	as := field(t, got.Fields, "agent_settings").(map[string]any)
	llm := as["llm"].(map[string]any)
	if llm["base_url"] != "http://127.0.0.1:8751/llm/"+convID+".llm" || llm["api_key"] != openhands.PlaceholderKey || llm["stream"] != true {
		t.Errorf("agent_settings.llm = %v", llm)
	}
	cllm := as["condenser"].(map[string]any)["llm"].(map[string]any)
	if cllm["base_url"] != llm["base_url"] {
		t.Errorf("the condenser's LLM (same key) got %v, want the same profile", cllm["base_url"])
	}
	sec := field(t, got.Fields, "secrets").(map[string]any)["GITHUB_TOKEN"]
	want := map[string]any{"kind": "LookupSecret", "url": "http://127.0.0.1:8751/secrets/" + convID + ".GITHUB_TOKEN", "headers": map[string]any{}, "description": "gh"}
	if d := cmp.Diff(want, sec); d != "" {
		t.Errorf("secrets.GITHUB_TOKEN (-want +got):\n%s", d)
	}
	all, _ := json.Marshal(got.Fields)
	for _, bad := range []string{llmKey, savedValue, outerKey, upstreamKey, tok, openhands.TokenPrefix} {
		if strings.Contains(string(all), bad) {
			t.Errorf("the mediated body still holds %q", bad)
		}
	}
}

// TestMediateSDKCreate mediates the SDK's plaintext create (ref §2b):
// agent.llm with a plaintext OpenAI key, agent_context.secrets strings,
// and a StaticSecret.
func TestMediateSDKCreate(t *testing.T) {
	m := &openhands.Mediator{Relay: "http://127.0.0.1:8751"}
	body := `{"agent":{"kind":"Agent","llm":{"model":"gpt-4o","api_key":"` + llmKey + `","base_url":"https://llm.example/v1"},
	  "agent_context":{"secrets":{"API_TOKEN":"plain-ctx-value"}}},
	 "secrets":{"DB_PASSWORD":{"kind":"StaticSecret","value":"static-value"}},
	 "workspace":{"kind":"LocalWorkspace","working_dir":"/w"}}`
	got, err := m.Create(context.Background(), convID, fields(t, body))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]openhands.LLM{{Name: convID + ".llm", Model: "gpt-4o", BaseURL: "https://llm.example/v1", Key: []byte(llmKey)}}, got.LLMs); d != "" {
		t.Errorf("LLMs (-want +got):\n%s", d)
	}
	want := []openhands.Secret{
		{Name: convID + ".API_TOKEN", Value: []byte("plain-ctx-value")},
		{Name: convID + ".DB_PASSWORD", Value: []byte("static-value")},
	}
	if d := cmp.Diff(want, got.Secrets); d != "" {
		t.Errorf("Secrets (-want +got):\n%s", d)
	}
	all, _ := json.Marshal(got.Fields)
	for _, bad := range []string{llmKey, "plain-ctx-value", "static-value"} {
		if strings.Contains(string(all), bad) {
			t.Errorf("the mediated body still holds %q", bad)
		}
	}
}

func TestMediateSecretsRoute(t *testing.T) {
	m := &openhands.Mediator{Relay: "http://127.0.0.1:8751"}
	out, secrets, err := m.Secrets(context.Background(), convID, []byte(`{"secrets":{"A":"plain-a","B":{"value":"value-b"},"C":{"kind":"StaticSecret","value":"static-c"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []openhands.Secret{{convID + ".A", []byte("plain-a")}, {convID + ".B", []byte("value-b")}, {convID + ".C", []byte("static-c")}}
	if d := cmp.Diff(want, secrets); d != "" {
		t.Errorf("Secrets (-want +got):\n%s", d)
	}
	for _, v := range []string{"plain-a", "value-b", "static-c"} {
		if strings.Contains(string(out), v) {
			t.Errorf("forwarded body holds %q: %s", v, out)
		}
	}
	if !strings.Contains(string(out), `"url":"http://127.0.0.1:8751/secrets/`+convID+`.B"`) {
		t.Errorf("forwarded body = %s, want LookupSecrets on the relay", out)
	}
}

// TestMediateRefuses lists bodies ohd will not forward; each error names
// the field and never a value.
func TestMediateRefuses(t *testing.T) {
	var lookups []string
	tok := token(t, llmKey)
	other, _ := openhands.NewFernet("another key").Encrypt([]byte(llmKey))
	for _, tc := range []struct {
		name, body, field string
		m                 *openhands.Mediator
	}{
		{"token without upstream key", `{"agent":{"llm":{"model":"gpt-4o","api_key":"` + tok + `"}}}`, "agent.llm.api_key", &openhands.Mediator{}},
		{"token of another key", `{"agent":{"llm":{"model":"gpt-4o","api_key":"` + other + `"}}}`, "agent.llm.api_key", nil},
		{"unmediated provider", `{"agent":{"llm":{"model":"vertex_ai/gemini","api_key":"` + llmKey + `"}}}`, "agent.llm.model", nil},
		{"aws", `{"agent":{"llm":{"model":"bedrock/x","api_key":"k","aws_secret_access_key":"awsvalue"}}}`, "agent.llm.aws_secret_access_key", nil},
		{"mcp secret env", `{"agent_settings":{"mcp_config":{"gh":{"command":"x","env":{"GH_TOKEN":"` + tok + `"}}}}}`, "agent_settings.mcp_config.gh.env.GH_TOKEN", nil},
		{"outer key anywhere", `{"tags":{"k":"` + outerKey + `"}}`, "tags", nil},
		{"upstream token elsewhere", `{"hook_config":{"x":["` + tok + `"]}}`, "hook_config.x.0", nil},
		{"lookup without upstream", `{"secrets":{"X":{"kind":"LookupSecret","url":"/api/settings/secrets/X"}}}`, "secrets.X.url", &openhands.Mediator{}},
		{"lookup of a missing secret", `{"secrets":{"NOPE":{"kind":"LookupSecret","url":"/api/settings/secrets/NOPE"}}}`, "secrets.NOPE.url", nil},
		{"foreign lookup with credential", `{"secrets":{"X":{"kind":"LookupSecret","url":"https://vault.example/x","headers":{"Authorization":"Bearer v"}}}}`, "secrets.X.headers.Authorization", nil},
		{"copy of the key", `{"agent":{"llm":{"model":"gpt-4o","api_key":"` + llmKey + `","extra_headers":{"X":"` + llmKey + `"}}}}`, "agent", nil},
		// An LLM's credentials other than api_key are refused whether or
		// not it has an api_key.
		{"aws without api_key", `{"agent":{"llm":{"model":"bedrock/x","aws_secret_access_key":"awsvalue"}}}`, "agent.llm.aws_secret_access_key", nil},
		{"aws with null api_key", `{"agent":{"llm":{"model":"bedrock/x","api_key":null,"aws_access_key_id":"awsvalue"}}}`, "agent.llm.aws_access_key_id", nil},
		{"aws with redacted api_key", `{"agent_settings":{"condenser":{"llm":{"model":"bedrock/x","api_key":"**********","aws_session_token":"awsvalue"}}}}`, "agent_settings.condenser.llm.aws_session_token", nil},
		{"secret extra header without api_key", `{"agent":{"llm":{"model":"gpt-4o","extra_headers":{"Authorization":"Bearer sk-extra-hdr"}}}}`, "agent.llm.extra_headers.Authorization", nil},
		{"secret extra header with api_key", `{"agent":{"llm":{"model":"gpt-4o","api_key":"` + llmKey + `","extra_headers":{"X-Title":"ohd","x-api-key":"sk-extra-hdr"}}}}`, "agent.llm.extra_headers.x-api-key", nil},
		{"api_key without a model", `{"agent":{"llm":{"api_key":"` + llmKey + `"}}}`, "agent.llm.api_key", nil},
		// The inner server decodes JSON escapes: the check sees what it sees.
		{"escaped outer key", `{"tags":{"k":"\u006futer-session-key-0123456789"}}`, "tags", nil},
		{"escaped outer key as an object key", `{"tags":{"\u006futer-session-key-0123456789":"v"}}`, "tags", nil},
		{"escaped copy of the key", `{"agent":{"llm":{"model":"gpt-4o","api_key":"` + llmKey + `"}},"tags":{"k":"\u0073k-real-llm-key-ZZ"}}`, "tags", nil},
		{"escaped upstream token", `{"hook_config":{"x":["\u0067` + tok[1:] + `"]}}`, "hook_config.x.0", nil},
		{"upstream token inside a value", `{"tags":{"k":"Bearer ` + tok + `"}}`, "tags.k", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.m
			if m == nil {
				m = mediator(t, &lookups)
			}
			_, err := m.Create(context.Background(), convID, fields(t, tc.body))
			var me *openhands.Error
			if !errors.As(err, &me) || me.Field != tc.field {
				t.Fatalf("Create = %v, want an Error on %s", err, tc.field)
			}
			for _, bad := range []string{llmKey, tok, outerKey, "awsvalue", "sk-extra-hdr"} {
				if strings.Contains(err.Error(), bad) {
					t.Errorf("error %q holds a value", err)
				}
			}
		})
	}
}

// TestMediateKeepsHarmless forwards what holds no credential as the
// client sent it: an LLM without a key and with harmless extra_headers,
// and a field the mediation does not rewrite, escapes and all.
func TestMediateKeepsHarmless(t *testing.T) {
	var lookups []string
	m := mediator(t, &lookups)
	body := `{"agent":{"llm":{"model":"bedrock/x","api_key":null,"aws_secret_access_key":"**********","extra_headers":{"X-Title":"ohd","Authorization":"","Cookie":null}}},
	 "tags":{"k":"\u003c&>","outer":"outer-session-key"}}`
	got, err := m.Create(context.Background(), convID, fields(t, body))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.LLMs) != 0 || len(got.Secrets) != 0 {
		t.Errorf("LLMs %v, Secrets %v: want none", got.LLMs, got.Secrets)
	}
	if want := `{"k":"\u003c&>","outer":"outer-session-key"}`; string(got.Fields["tags"]) != want {
		t.Errorf("tags forwarded as %s, want %s byte for byte", got.Fields["tags"], want)
	}
	llm := field(t, got.Fields, "agent").(map[string]any)["llm"].(map[string]any)
	if d := cmp.Diff(map[string]any{"X-Title": "ohd", "Authorization": "", "Cookie": nil}, llm["extra_headers"]); d != "" {
		t.Errorf("agent.llm.extra_headers (-want +got):\n%s", d)
	}
}

// FuzzMediate feeds client bodies to both mediations: they never panic,
// and what they return is JSON that holds none of the values taken out.
func FuzzMediate(f *testing.F) {
	f.Add([]byte(`{"secrets":{"A":"plain-a","B":{"value":"value-b"}}}`))
	f.Add([]byte(`{"agent":{"llm":{"model":"anthropic/x","api_key":"sk-1"}},"secrets":{"S":{"kind":"StaticSecret","value":"v1"}}}`))
	f.Add([]byte(`{"agent":{"mcp_config":{"mcpServers":{"a":{"url":"https://m/mcp","headers":{"Authorization":"Bearer ${S}"},"auth":{"strategy":"header","headers":{"X":"y"}}}}}},"secrets":{"S":{"kind":"StaticSecret","value":"v1"}}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		m := &openhands.Mediator{Relay: "http://127.0.0.1:8751", Upstream: openhands.NewFernet("k")}
		if out, secrets, err := m.Secrets(context.Background(), convID, body); err == nil {
			if !json.Valid(out) {
				t.Fatalf("Secrets returned invalid JSON %q", out)
			}
			for _, s := range secrets {
				if len(s.Value) >= 4 && strings.Contains(string(out), string(s.Value)) {
					t.Fatalf("forwarded body holds the value of %s", s.Name)
				}
			}
		}
		var fields map[string]json.RawMessage
		if json.Unmarshal(body, &fields) != nil {
			return
		}
		if got, err := m.Create(context.Background(), convID, fields); err == nil {
			for k, v := range got.Fields {
				if !json.Valid(v) {
					t.Fatalf("field %s is not JSON: %q", k, v)
				}
			}
		}
	})
}
