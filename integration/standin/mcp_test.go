package main

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestMCPCallSpeaksStreamableHTTP: the stand-in connects to a create
// body's remote MCP server as the SDK's client does: each auth strategy's
// header, initialize, the initialized notification and tools/list on one
// session.
func TestMCPCallSpeaksStreamableHTTP(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	mcp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var msg struct {
			Method string `json:"method"`
		}
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &msg)
		mu.Lock()
		seen = append(seen, r.URL.Path+" "+msg.Method+" auth="+r.Header.Get("Authorization")+" key="+r.Header.Get("X-Api-Key")+" session="+r.Header.Get("Mcp-Session-Id"))
		mu.Unlock()
		if r.Header.Get("Authorization") == "" && r.Header.Get("X-Api-Key") == "" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		switch msg.Method {
		case "initialize":
			w.Header().Set("Mcp-Session-Id", "s1")
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"serverInfo\":{\"name\":\"fake\"}}}\n\n")
		case "notifications/initialized":
			w.WriteHeader(http.StatusAccepted)
		case "tools/list":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"search"}]}}`)
		}
	}))
	t.Cleanup(mcp.Close)
	ts := newTestServer(t, Config{})
	id := newUUID()
	body, _ := json.Marshal(map[string]any{
		"conversation_id": id, "workspace": map[string]any{"working_dir": t.TempDir()},
		"agent": map[string]any{"mcp_config": map[string]any{"mcpServers": map[string]any{
			"bearer": map[string]any{"url": mcp.URL + "/b", "auth": map[string]any{"strategy": "bearer", "value": "tok"}},
			"basic":  map[string]any{"url": mcp.URL + "/c", "auth": map[string]any{"strategy": "basic", "username": "u", "password": "pw"}},
			"key":    map[string]any{"url": mcp.URL + "/k", "auth": map[string]any{"strategy": "api_key", "value": "k1", "header_name": "X-API-Key"}},
			"none":   map[string]any{"url": mcp.URL + "/n"},
		}}},
	})
	if code, out := ts.do(t, "POST", "/api/conversations", string(body)); code != http.StatusCreated {
		t.Fatalf("create = %d %s", code, out)
	}
	for _, server := range []string{"bearer", "basic", "key"} {
		code, out := ts.do(t, "POST", "/api/conversations/"+id+"/standin/mcp/"+server, "")
		if tools, _ := mustJSON[map[string]any](t, out)["tools"].([]any); code != http.StatusOK || len(tools) != 1 || tools[0] != "search" {
			t.Errorf("MCP call to %s = %d %s", server, code, out)
		}
	}
	code, out := ts.do(t, "POST", "/api/conversations/"+id+"/standin/mcp/none", "")
	if got := mustJSON[map[string]any](t, out); code != http.StatusBadGateway || got["status"] != 401.0 {
		t.Errorf("MCP call without credentials = %d %s, want 502 with the server's 401", code, out)
	}
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("u:pw"))
	want := []string{
		"/b initialize auth=Bearer tok key= session=", "/b notifications/initialized auth=Bearer tok key= session=s1", "/b tools/list auth=Bearer tok key= session=s1",
		"/c initialize auth=" + basic + " key= session=", "/c notifications/initialized auth=" + basic + " key= session=s1", "/c tools/list auth=" + basic + " key= session=s1",
		"/k initialize auth= key=k1 session=", "/k notifications/initialized auth= key=k1 session=s1", "/k tools/list auth= key=k1 session=s1",
		"/n initialize auth= key= session=",
	}
	mu.Lock()
	defer mu.Unlock()
	if d := cmp.Diff(want, seen); d != "" {
		t.Errorf("MCP server saw (-want +got):\n%s", d)
	}
}

// TestExposeMCP: the upstream shows every secret field of mcp_config as
// it shows the LLM key (ref §1), and nothing else.
func TestExposeMCP(t *testing.T) {
	cfg := map[string]map[string]any{"s": {
		"url": "https://m/mcp", "headers": map[string]any{"Authorization": "Bearer v"}, "env": map[string]any{"A": "e"},
		"auth": map[string]any{"strategy": "basic", "username": "u", "password": "p", "headers": map[string]any{"X": "h"}},
	}}
	got, err := exposeMCP(cfg, func(v string) (string, error) { return "<" + v + ">", nil })
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"s": map[string]any{
		"url": "https://m/mcp", "headers": map[string]any{"Authorization": "<Bearer v>"}, "env": map[string]any{"A": "<e>"},
		"auth": map[string]any{"strategy": "basic", "username": "u", "password": "<p>", "headers": map[string]any{"X": "<h>"}},
	}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("exposeMCP (-want +got):\n%s", d)
	}
}
