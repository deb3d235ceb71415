package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/openhands"
	"github.com/ohd-dev/ohd/pkg/store"
)

// fakeMCP is a remote MCP server (streamable HTTP) on the host: each path
// wants its own credential header, and it records what every request
// carried.
type fakeMCP struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []string // "<path> <method> <header>=<value>"
}

// newFakeMCP serves MCP at every path of want, which maps a path to the
// header and value it requires.
func newFakeMCP(t *testing.T, want map[string][2]string) *fakeMCP {
	m := &fakeMCP{}
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var msg struct {
			Method string `json:"method"`
			ID     any    `json:"id"`
		}
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &msg)
		need, ok := want[r.URL.Path]
		m.mu.Lock()
		m.seen = append(m.seen, fmt.Sprintf("%s %s %s=%s", r.URL.Path, msg.Method, need[0], r.Header.Get(need[0])))
		m.mu.Unlock()
		if !ok || r.Header.Get(need[0]) != need[1] {
			http.Error(w, `{"error":"unauthorized"}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Mcp-Session-Id", "session-"+strings.Trim(r.URL.Path, "/"))
		switch msg.Method {
		case "notifications/initialized":
			w.WriteHeader(http.StatusAccepted)
		case "initialize":
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"serverInfo\":{\"name\":\"fake %s\"}}}\n\n", r.URL.Path)
		default:
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%v,"result":{"tools":[{"name":"search"}]}}`, msg.ID)
		}
	}))
	t.Cleanup(m.srv.Close)
	return m
}

func (m *fakeMCP) calls() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.seen...)
}

// TestBackendMCPCredentialsThroughOhd: Agent Canvas's create (ref §2a) with the
// upstream's mcp_config (a streamable HTTP server with an Authorization
// header, one with an api_key auth, both as the upstream's Fernet tokens):
// the inner server's MCP client reaches both servers on the host with the
// real credentials, while the create body it got, its container's docker
// inspect, its processes' environments and everything ohd and the inner
// server keep hold none of them; ohctl audit shows the uses by name, and
// ohctl revoke makes the next connection fail.
func TestBackendMCPCredentialsThroughOhd(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		testenv.RequireRoot(t) // reading every process's environment
		sec := newCanvasSecrets()
		linear, docs := "lin-VALUE-"+store.NewID(), "docs-VALUE-"+store.NewID()
		mcp := newFakeMCP(t, map[string][2]string{"/linear/mcp": {"Authorization", "Bearer " + linear}, "/docs/mcp": {"X-Api-Key", docs}})
		prov := newFakeLLM(t)
		bin := buildStandin(t)
		up := upstreamServer(t, bin, sec.outerKey, sec.upstreamKey, map[string]any{
			"llm": map[string]any{"model": "openai/gpt-fake", "api_key": sec.llmKey, "base_url": prov.srv.URL + "/v1"},
			"mcp_config": map[string]any{
				"linear": map[string]any{"url": mcp.srv.URL + "/linear/mcp", "transport": "http", "headers": map[string]any{"Authorization": "Bearer " + linear}},
				"docs":   map[string]any{"url": mcp.srv.URL + "/docs/mcp", "auth": map[string]any{"strategy": "api_key", "value": docs, "header_name": "X-API-Key"}},
			},
		})
		dir := testenv.TempDir(t)
		keys, upKeyFile := filepath.Join(dir, "keys"), filepath.Join(dir, "upstream-secret-key")
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

		enc := call("GET", "/api/settings", nil, "X-Expose-Secrets", "encrypted")
		var settings struct {
			AgentSettings map[string]any `json:"agent_settings"`
		}
		enc.json(t, &settings)
		linearTok, _ := settings.AgentSettings["mcp_config"].(map[string]any)["linear"].(map[string]any)["headers"].(map[string]any)["Authorization"].(string)
		docsTok, _ := settings.AgentSettings["mcp_config"].(map[string]any)["docs"].(map[string]any)["auth"].(map[string]any)["value"].(string)
		if !openhands.IsToken(linearTok) || !openhands.IsToken(docsTok) {
			t.Fatalf("the upstream's encrypted settings hold MCP credentials %q, %q, want Fernet tokens", linearTok, docsTok)
		}
		repo := testenv.NewRepo(t, testenv.RepoOptions{})
		id := store.NewID()
		create := call("POST", "/api/conversations", map[string]any{
			"agent_settings": settings.AgentSettings,
			"workspace":      map[string]any{"kind": "LocalWorkspace", "working_dir": repo},
			"client_tools":   []any{}, "max_iterations": 500, "worktree": true, "secrets_encrypted": true, "conversation_id": id,
		})
		if create.Status != http.StatusCreated {
			t.Fatalf("create = %d %s\n%s", create.Status, create.Body, tail(d.logs.String(), 30))
		}

		// The inner server's MCP client reaches both servers, through the
		// relay in its container and the broker on the host.
		for _, server := range []string{"linear", "docs"} {
			r := call("POST", "/api/conversations/"+id+"/standin/mcp/"+server, nil)
			if r.Status != http.StatusOK || !strings.Contains(string(r.Body), `"tools":["search"]`) {
				t.Fatalf("MCP connection to %s from the inner server = %d %s\n%s", server, r.Status, r.Body, tail(d.logs.String(), 20))
			}
		}
		wantCalls := []string{
			"/linear/mcp initialize Authorization=Bearer " + linear, "/linear/mcp notifications/initialized Authorization=Bearer " + linear, "/linear/mcp tools/list Authorization=Bearer " + linear,
			"/docs/mcp initialize X-Api-Key=" + docs, "/docs/mcp notifications/initialized X-Api-Key=" + docs, "/docs/mcp tools/list X-Api-Key=" + docs,
		}
		if got := mcp.calls(); strings.Join(got, "\n") != strings.Join(wantCalls, "\n") {
			t.Errorf("the MCP servers got:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(wantCalls, "\n  "))
		}

		values := []secretValue{
			{"linear MCP token", []byte(linear)}, {"docs MCP key", []byte(docs)}, {"linear token's Fernet token", []byte(linearTok)},
			{"docs key's Fernet token", []byte(docsTok)}, {"outer session key", []byte(sec.outerKey)}, {"upstream's secret key", []byte(sec.upstreamKey)},
			{"MCP server's address", []byte(mcp.srv.URL)},
		}
		body := call("GET", "/api/conversations/"+id+"/standin/create_body", nil)
		if !strings.Contains(string(body.Body), "/mcp/"+id+".mcp.linear") {
			t.Fatalf("the inner create body %s does not point at the relay: the scan would prove nothing", body.Body)
		}
		c := d.record(id)
		inspected := []byte(b.workload(t, c.ContainerID).Raw)
		sinks := []sink{{"the create body the inner server received", body.Body}, {"the engine's record of the container", inspected}}
		sinks = append(sinks, containerEnvirons(t, c.ContainerID)...)
		dirs := openhands.DirsOf(filepath.Join(d.dirs.State, "inner"), id)
		sinks = append(sinks, filesUnder(t, dirs.Root)...)
		sinks = append(sinks, filesUnder(t, c.BrokerDir)...)
		sinks = append(sinks, sink{"ohd's log", []byte(d.logs.String())})
		if got := leaks(values, sinks); len(got) > 0 {
			t.Errorf("leaks:\n  %s", strings.Join(got, "\n  "))
		}
		// ohd's own store holds the values sealed only.
		if got := leaks(values[:2], filesUnder(t, d.dirs.State)); len(got) > 0 {
			t.Errorf("leaks in ohd's state:\n  %s", strings.Join(got, "\n  "))
		}

		name := id + ".mcp.linear"
		audit := d.ohctl("audit", id)
		if !strings.Contains(audit, name) || !strings.Contains(audit, id+".mcp.docs") {
			t.Errorf("ohctl audit %s does not show both MCP servers' uses:\n%s", id, audit)
		}
		if got := leaks(values[:2], []sink{{"ohctl audit", []byte(audit)}}); len(got) > 0 {
			t.Errorf("%v", got)
		}
		if show := d.ohctl("show", id); !strings.Contains(show, name) {
			t.Errorf("ohctl show %s does not list the MCP grant:\n%s", id, show)
		}
		d.ohctl("revoke", id, "mcp", name)
		n := len(mcp.calls())
		if r := call("POST", "/api/conversations/"+id+"/standin/mcp/linear", nil); r.Status == http.StatusOK || !strings.Contains(string(r.Body), `"status":403`) {
			t.Errorf("MCP connection after ohctl revoke = %d %s, want the broker's 403", r.Status, r.Body)
		}
		if len(mcp.calls()) != n {
			t.Errorf("the MCP server was reached after the revoke: %q", mcp.calls()[n:])
		}
		if r := call("DELETE", "/api/conversations/"+id, nil); r.Status != 200 {
			t.Fatalf("delete = %d %s", r.Status, r.Body)
		}
		if out := d.ohctl("secret", "ls"); strings.Contains(out, id) {
			t.Errorf("ohctl secret ls after the conversation ended still lists its MCP header secrets:\n%s", out)
		}
	})
}
