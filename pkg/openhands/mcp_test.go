package openhands_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ohd-dev/ohd/pkg/openhands"
)

const mcpToken = "lin_api_token_ZZ"

// TestMediateMCPCanvas: Canvas's mcp_config (ref §2a: the upstream's
// settings, headers as Fernet tokens; in both the plain and the
// mcpServers shape) becomes broker MCP servers; the inner server gets the
// relay's URL and no credential.
func TestMediateMCPCanvas(t *testing.T) {
	var lookups []string
	m := mediator(t, &lookups)
	tok := token(t, "Bearer "+mcpToken)
	for _, shape := range []string{"plain", "mcpServers"} {
		t.Run(shape, func(t *testing.T) {
			servers := `{"linear":{"url":"https://mcp.linear.app/mcp?tenant=a","transport":"http","headers":{"Authorization":"` + tok + `"},"timeout":30},
			  "docs":{"url":"https://docs.example/mcp"},
			  "fs":{"command":"mcp-fs","args":["/w"],"env":{"LOG_LEVEL":"` + token(t, "debug") + `"}}}`
			if shape == "mcpServers" {
				servers = `{"mcpServers":` + servers + `}`
			}
			body := `{"agent_settings":{"mcp_config":` + servers + `},"secrets_encrypted":true}`
			got, err := m.Create(context.Background(), convID, fields(t, body))
			if err != nil {
				t.Fatal(err)
			}
			name := convID + ".mcp.linear"
			want := []openhands.MCP{{Name: name, URL: "https://mcp.linear.app/mcp?tenant=a", Headers: []openhands.MCPHeader{
				{Name: "Authorization", Secret: name + ".h1", Value: []byte("Bearer " + mcpToken)},
			}}}
			if d := cmp.Diff(want, got.MCPs); d != "" {
				t.Errorf("MCPs (-want +got):\n%s", d)
			}
			cfg := field(t, got.Fields, "agent_settings").(map[string]any)["mcp_config"].(map[string]any)
			if shape == "mcpServers" {
				cfg = cfg["mcpServers"].(map[string]any)
			}
			wantCfg := map[string]any{
				"linear": map[string]any{"url": "http://127.0.0.1:8751/mcp/" + name, "transport": "http", "timeout": float64(30)},
				"docs":   map[string]any{"url": "https://docs.example/mcp"},
				"fs":     map[string]any{"command": "mcp-fs", "args": []any{"/w"}, "env": map[string]any{"LOG_LEVEL": "debug"}},
			}
			if d := cmp.Diff(wantCfg, cfg); d != "" {
				t.Errorf("mcp_config (-want +got):\n%s", d)
			}
			all, _ := json.Marshal(got.Fields)
			for _, bad := range []string{mcpToken, openhands.TokenPrefix} {
				if strings.Contains(string(all), bad) {
					t.Errorf("the mediated body still holds %q", bad)
				}
			}
		})
	}
}

// TestMediateMCPAuth: each auth strategy becomes the header the SDK would
// send (config.py _normalize_server_for_fastmcp), and ${NAME} in a header
// is expanded from the body's own secrets.
func TestMediateMCPAuth(t *testing.T) {
	m := &openhands.Mediator{Relay: "http://127.0.0.1:8751"}
	for _, tc := range []struct {
		name, server string
		want         []openhands.MCPHeader
	}{
		{"bearer", `{"url":"https://m.example/mcp","auth":{"strategy":"bearer","value":"` + mcpToken + `"}}`,
			[]openhands.MCPHeader{{Name: "Authorization", Value: []byte("Bearer " + mcpToken)}}},
		{"api_key as bearer", `{"url":"https://m.example/mcp","auth":{"strategy":"api_key","value":"` + mcpToken + `"}}`,
			[]openhands.MCPHeader{{Name: "Authorization", Value: []byte("Bearer " + mcpToken)}}},
		{"api_key header", `{"url":"https://m.example/mcp","auth":{"strategy":"api_key","value":"` + mcpToken + `","header_name":"X-API-Key"}}`,
			[]openhands.MCPHeader{{Name: "X-API-Key", Value: []byte(mcpToken)}}},
		{"basic", `{"url":"https://m.example/mcp","auth":{"strategy":"basic","username":"u","password":"` + mcpToken + `"}}`,
			[]openhands.MCPHeader{{Name: "Authorization", Value: []byte("Basic " + base64.StdEncoding.EncodeToString([]byte("u:"+mcpToken)))}}},
		{"header", `{"url":"https://m.example/mcp","headers":{"X-Org":"acme"},"auth":{"strategy":"header","headers":{"X-Token":"` + mcpToken + `"}}}`,
			[]openhands.MCPHeader{{Name: "X-Org", Value: []byte("acme")}, {Name: "X-Token", Value: []byte(mcpToken)}}},
		{"reference", `{"url":"https://m.example/mcp","headers":{"Authorization":"Bearer ${LINEAR_TOKEN}","X-Region":"${REGION:-eu}"}}`,
			[]openhands.MCPHeader{{Name: "Authorization", Value: []byte("Bearer " + mcpToken)}, {Name: "X-Region", Value: []byte("eu")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"agent":{"mcp_config":{"s":` + tc.server + `}},"secrets":{"LINEAR_TOKEN":{"kind":"StaticSecret","value":"` + mcpToken + `"}}}`
			got, err := m.Create(context.Background(), convID, fields(t, body))
			if err != nil {
				t.Fatal(err)
			}
			for i := range tc.want {
				tc.want[i].Secret = convID + ".mcp.s.h" + string(rune('1'+i))
			}
			if len(got.MCPs) != 1 {
				t.Fatalf("MCPs = %+v, want one", got.MCPs)
			}
			if d := cmp.Diff(tc.want, got.MCPs[0].Headers); d != "" {
				t.Errorf("headers (-want +got):\n%s", d)
			}
			srv := field(t, got.Fields, "agent").(map[string]any)["mcp_config"].(map[string]any)["s"].(map[string]any)
			if srv["auth"] != nil || srv["headers"] != nil || srv["url"] != "http://127.0.0.1:8751/mcp/"+convID+".mcp.s" {
				t.Errorf("inner server config = %v, want the relay's url and no auth or headers", srv)
			}
		})
	}
}

// TestMediateMCPRefuses: what would put an MCP credential into the
// container, or cannot be relayed, is refused naming the field.
func TestMediateMCPRefuses(t *testing.T) {
	var lookups []string
	for _, tc := range []struct {
		name, server, field string
	}{
		{"stdio secret env", `{"command":"gh-mcp","env":{"GITHUB_TOKEN":"` + mcpToken + `"}}`, "agent.mcp_config.s.env.GITHUB_TOKEN"},
		{"stdio secret env reference", `{"command":"gh-mcp","env":{"GITHUB_TOKEN":"${GITHUB_TOKEN}"}}`, "agent.mcp_config.s.env.GITHUB_TOKEN"},
		{"oauth", `{"url":"https://m.example/mcp","auth":{"strategy":"oauth2","state":{"tokens":{"access_token":"` + mcpToken + `"}}}}`, "agent.mcp_config.s.auth"},
		{"sse", `{"url":"https://m.example/mcp","transport":"sse","headers":{"Authorization":"` + mcpToken + `"}}`, "agent.mcp_config.s.transport"},
		{"sse inferred", `{"url":"https://m.example/sse","headers":{"Authorization":"` + mcpToken + `"}}`, "agent.mcp_config.s.transport"},
		{"stdio headers", `{"command":"x","headers":{"Authorization":"` + mcpToken + `"}}`, "agent.mcp_config.s"},
		{"url credentials", `{"url":"https://u:` + mcpToken + `@m.example/mcp","headers":{"X":"` + mcpToken + `"}}`, "agent.mcp_config.s.url"},
		{"auth beside Authorization", `{"url":"https://m.example/mcp","headers":{"Authorization":"a"},"auth":{"strategy":"bearer","value":"` + mcpToken + `"}}`, "agent.mcp_config.s.auth"},
		{"unknown strategy", `{"url":"https://m.example/mcp","auth":{"strategy":"magic","value":"` + mcpToken + `"}}`, "agent.mcp_config.s.auth.strategy"},
		{"missing reference", `{"url":"https://m.example/mcp","headers":{"Authorization":"Bearer ${NOPE}"}}`, "agent.mcp_config.s.headers.Authorization"},
		{"outer key", `{"url":"https://m.example/mcp","headers":{"X-Session-API-Key":"` + outerKey + `"}}`, "agent.mcp_config.s.headers.X-Session-API-Key"},
		{"copy elsewhere", `{"url":"https://m.example/mcp","headers":{"Authorization":"` + mcpToken + `"},"description":"` + mcpToken + `"}`, "agent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := mediator(t, &lookups).Create(context.Background(), convID, fields(t, `{"agent":{"mcp_config":{"s":`+tc.server+`}}}`))
			var me *openhands.Error
			if !errors.As(err, &me) || me.Field != tc.field {
				t.Fatalf("Create = %v, want an Error on %s", err, tc.field)
			}
			for _, bad := range []string{mcpToken, outerKey} {
				if strings.Contains(err.Error(), bad) {
					t.Errorf("error %q holds a value", err)
				}
			}
		})
	}
}
