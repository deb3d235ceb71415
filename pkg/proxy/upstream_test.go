package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/ohd-dev/ohd/pkg/broker"
	"github.com/ohd-dev/ohd/pkg/openhands"
	"github.com/ohd-dev/ohd/pkg/store"
)

// memSecrets is an in-memory SecretStore.
type memSecrets struct {
	mu       sync.Mutex
	secrets  map[string]string
	profiles map[string]store.LLMProfile
	mcps     map[string]store.MCPServer
}

func newMemSecrets() *memSecrets {
	return &memSecrets{secrets: map[string]string{}, profiles: map[string]store.LLMProfile{}, mcps: map[string]store.MCPServer{}}
}

func (m *memSecrets) PutMCPServer(s store.MCPServer) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mcps[s.Name] = s
	return nil
}

// deleteScoped removes conversation id's own credentials ("<id>."), as
// the manager's undo of a failed create does (store.DeleteScoped).
func (m *memSecrets) deleteScoped(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mp := range []map[string]string{m.secrets} {
		for k := range mp {
			if strings.HasPrefix(k, id+".") {
				delete(mp, k)
			}
		}
	}
	for k := range m.profiles {
		if strings.HasPrefix(k, id+".") {
			delete(m.profiles, k)
		}
	}
	for k := range m.mcps {
		if strings.HasPrefix(k, id+".") {
			delete(m.mcps, k)
		}
	}
}

func (m *memSecrets) SetSecret(name string, v []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.secrets[name] = string(v)
	return nil
}

func (m *memSecrets) PutLLMProfile(p store.LLMProfile) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.profiles[p.Name] = p
	return nil
}

func (m *memSecrets) secret(name string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.secrets[name]
}

// Grant records a grant on the fake's record, as the manager does.
func (f *fakeConversations) Grant(id, kind, name string) (store.Conversation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.convs[id]
	if !ok {
		return store.Conversation{}, errNotFoundForTest
	}
	c.rec.Grants.Add(kind, name)
	return c.rec, nil
}

var errNotFoundForTest = io.ErrUnexpectedEOF

// fakeUpstream is the operator's agent server: it records what it got
// and answers with headers and a body a proxy could easily alter.
type fakeUpstream struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []*http.Request
}

func newFakeUpstream(t *testing.T) *fakeUpstream {
	u := &fakeUpstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.reqs = append(u.reqs, r.Clone(context.Background()))
		u.mu.Unlock()
		switch {
		case r.URL.Path == "/sockets/bash-events":
			c, err := websocket.Accept(w, r, nil)
			if err != nil {
				return
			}
			defer c.CloseNow()
			for {
				typ, b, err := c.Read(r.Context())
				if err != nil {
					return
				}
				_ = c.Write(r.Context(), typ, append([]byte("echo:"), b...))
			}
		case r.URL.Path == "/api/settings/secrets/GITHUB_TOKEN":
			if r.Header.Get("X-Session-API-Key") != outerKeys[0] {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			io.WriteString(w, "ghp-saved-value")
		case r.URL.Path == "/api/auth/workspace-session":
			http.SetCookie(w, &http.Cookie{Name: openhands.WorkspaceCookie, Value: r.Header.Get("X-Session-API-Key"), Path: "/api/conversations", HttpOnly: true})
			w.WriteHeader(http.StatusNoContent)
		default:
			h := w.Header()
			h.Set("Content-Type", "application/json")
			h["X-Odd-Case"] = []string{"a", "b"}
			h.Set("Connection", "X-Hop")
			h.Set("X-Hop", "dropped")
			w.WriteHeader(http.StatusTeapot)
			io.WriteString(w, `{"expose":"`+r.Header.Get("X-Expose-Secrets")+`",  "path":"`+r.URL.RequestURI()+`", "raw":"<&>"}`)
		}
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *fakeUpstream) last() *http.Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.reqs[len(u.reqs)-1]
}

func withUpstream(u string, mem *memSecrets) func(*Options) {
	return func(o *Options) {
		o.Upstream, _ = url.Parse(u)
		o.Secrets = mem
	}
}

func TestUpstreamRoutesWithoutUpstreamAnswer404NamingTheFlag(t *testing.T) {
	p := startProxy(t, newFake(t), nil)
	for _, path := range []string{"/api/settings", "/api/profiles", "/api/file/home", "/api/skills"} {
		resp, b := p.do(t, "GET", path, outerKeys[0], nil)
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), "--upstream") {
			t.Errorf("GET %s = %d %s, want 404 naming --upstream", path, resp.StatusCode, b)
		}
	}
	if resp, _ := p.do(t, "GET", "/api/settings", "", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /api/settings without a key = %d, want 401", resp.StatusCode)
	}
}

func TestUpstreamPassesAnswersByteForByte(t *testing.T) {
	up := newFakeUpstream(t)
	p := startProxy(t, newFake(t), withUpstream(up.srv.URL, newMemSecrets()))

	direct, err := http.NewRequest("GET", up.srv.URL+"/api/settings?x=%2F1", nil)
	if err != nil {
		t.Fatal(err)
	}
	direct.Header.Set("X-Expose-Secrets", "encrypted")
	dr, err := http.DefaultClient.Do(direct)
	if err != nil {
		t.Fatal(err)
	}
	db, _ := io.ReadAll(dr.Body)
	dr.Body.Close()

	resp, b := p.do(t, "GET", "/api/settings?x=%2F1", outerKeys[1], nil, "X-Expose-Secrets", "encrypted")
	if resp.StatusCode != dr.StatusCode || string(b) != string(db) {
		t.Errorf("through ohd: %d %s; direct: %d %s", resp.StatusCode, b, dr.StatusCode, db)
	}
	if !strings.Contains(string(b), `"expose":"encrypted"`) {
		t.Errorf("the upstream did not get X-Expose-Secrets: %s", b)
	}
	if got := up.last().Header.Get("X-Session-API-Key"); got != outerKeys[1] {
		t.Errorf("upstream got X-Session-API-Key %q, want the client's", got)
	}
	for _, h := range []string{"Content-Type", "X-Odd-Case", "Content-Length"} {
		if d := cmp.Diff(dr.Header.Values(h), resp.Header.Values(h)); d != "" {
			t.Errorf("header %s (-direct +ohd):\n%s", h, d)
		}
	}
	if resp.Header.Get("X-Hop") != "" {
		t.Errorf("a hop-by-hop header passed: %v", resp.Header)
	}

	// The workspace-session cookie comes back, and opens a
	// conversation's workspace route (ref §8).
	resp, _ = p.do(t, "POST", "/api/auth/workspace-session", outerKeys[0], nil)
	if resp.StatusCode != http.StatusNoContent || len(resp.Cookies()) != 1 || resp.Cookies()[0].Value != outerKeys[0] {
		t.Errorf("POST /api/auth/workspace-session = %d cookies %v, want 204 and the upstream's cookie", resp.StatusCode, resp.Cookies())
	}
}

func TestUpstreamDownAnswers502NamingIt(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := startProxy(t, newFake(t), withUpstream("http://"+addr, nil))
	resp, b := p.do(t, "GET", "/api/settings", outerKeys[0], nil)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(b), "upstream agent server http://"+addr) {
		t.Errorf("GET /api/settings, upstream down = %d %s, want 502 naming it", resp.StatusCode, b)
	}
}

func TestUpstreamWebSocketFirstMessageAuth(t *testing.T) {
	up := newFakeUpstream(t)
	p := startProxy(t, newFake(t), withUpstream(up.srv.URL, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://"+p.host+"/sockets/bash-events?resend_mode=all", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"auth","session_api_key":"`+outerKeys[0]+`"}`)); err != nil {
		t.Fatal(err)
	}
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"command":"ls"}`)); err != nil {
		t.Fatal(err)
	}
	_, b, err := c.Read(ctx)
	if err != nil || string(b) != `echo:{"command":"ls"}` {
		t.Fatalf("read = %q, %v; want the upstream's echo (and no auth frame)", b, err)
	}
	r := up.last()
	if r.Header.Get("X-Session-API-Key") != outerKeys[0] || r.URL.RawQuery != "resend_mode=all" {
		t.Errorf("upstream dial: key %q query %q", r.Header.Get("X-Session-API-Key"), r.URL.RawQuery)
	}

	// A bad key in the query is refused before the upgrade, as on a
	// conversation's socket (reference §7: 403 on the handshake).
	bad, resp, err := websocket.Dial(ctx, "ws://"+p.host+"/sockets/bash-events?session_api_key=wrong", nil)
	if err == nil {
		bad.CloseNow()
		t.Fatal("a bad key was upgraded")
	}
	if resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("bad key: %v, want 403 on the handshake", err)
	}
}

// TestGlobalRouteWithCIDGoesToTheConversation: the deprecated global
// routes with ?cid= reach that conversation's inner server, with the
// inner key and without cid or the client's key.
func TestGlobalRouteWithCIDGoesToTheConversation(t *testing.T) {
	var mu sync.Mutex
	var got *http.Request
	inner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Clone(context.Background())
		mu.Unlock()
		io.WriteString(w, "inner")
	}))
	t.Cleanup(inner.Close)
	fake := newFake(t)
	id := fake.addCustom(inner.Listener.Addr().String(), []byte("inner-key"))
	p := startProxy(t, fake, withUpstream(newFakeUpstream(t).srv.URL, nil))
	resp, b := p.do(t, "GET", "/api/git/changes/src?cid="+strings.ToUpper(id)+"&x=1", outerKeys[0], nil)
	if resp.StatusCode != http.StatusOK || string(b) != "inner" {
		t.Fatalf("GET /api/git/changes?cid= = %d %s, want the inner server's answer", resp.StatusCode, b)
	}
	mu.Lock()
	defer mu.Unlock()
	if got.URL.RequestURI() != "/api/git/changes/src?x=1" || got.Header.Get("X-Session-API-Key") != "inner-key" {
		t.Errorf("inner got %s with key %q", got.URL.RequestURI(), got.Header.Get("X-Session-API-Key"))
	}
	if resp, _ := p.do(t, "GET", "/api/git/changes/src?cid="+id, outerKeys[0], nil, "X-Expose-Secrets", "plaintext"); resp.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("X-Expose-Secrets on a ?cid= route = %d, want 422", resp.StatusCode)
	}
	if resp, _ := p.do(t, "GET", "/api/conversations/"+id+"/events", outerKeys[0], nil, "X-Expose-Secrets", "encrypted"); resp.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("X-Expose-Secrets on a conversation route = %d, want 422", resp.StatusCode)
	}
}

// TestCreateMediatesCanvasLookupAndPostSecrets: a LookupSecret on the
// upstream's saved secret is read with the outer key and becomes the
// conversation's broker secret; POST .../secrets values likewise.
func TestCreateMediatesCanvasLookupAndPostSecrets(t *testing.T) {
	up := newFakeUpstream(t)
	fake := newFake(t)
	fake.tap = true
	mem := newMemSecrets()
	p := startProxy(t, fake, withUpstream(up.srv.URL, mem))
	id := p.create(t, map[string]any{
		"secrets_encrypted": true,
		"secrets": map[string]any{"GITHUB_TOKEN": map[string]any{
			"kind": "LookupSecret", "url": "/api/settings/secrets/GITHUB_TOKEN",
			"headers": map[string]any{"X-Session-API-Key": outerKeys[0]},
		}},
	})
	name := id + ".GITHUB_TOKEN"
	if v := mem.secret(name); v != "ghp-saved-value" {
		t.Errorf("broker secret %s = %q, want the upstream's saved value", name, v)
	}
	fwd := string(fake.tapOf(id).requests()[0].body)
	for _, bad := range []string{outerKeys[0], "ghp-saved-value", "secrets_encrypted"} {
		if strings.Contains(fwd, bad) {
			t.Errorf("forwarded create holds %q: %s", bad, fwd)
		}
	}
	if !strings.Contains(fwd, `"url":"http://`+broker.RelayAddr+`/secrets/`+name+`"`) {
		t.Errorf("forwarded create %s: no LookupSecret on the relay", fwd)
	}
	if c, _ := fake.Get(id); cmp.Diff(store.Grants{Secrets: []string{name}}, c.Grants) != "" {
		d := cmp.Diff(store.Grants{Secrets: []string{name}}, c.Grants)
		t.Errorf("grants (-want +got):\n%s", d)
	}

	// Later requests go through the tap too.
	fake.mu.Lock()
	fake.convs[id].addr = fake.taps[id].addr
	fake.mu.Unlock()
	resp, b := p.do(t, "POST", "/api/conversations/"+id+"/secrets", outerKeys[0],
		strings.NewReader(`{"secrets":{"A":"plain-a","B":{"value":"value-b"}}}`), "Content-Type", "application/json")
	reqs := fake.tapOf(id).requests()
	if len(reqs) != 2 || reqs[1].path != "/api/conversations/"+id+"/secrets" {
		t.Fatalf("POST secrets = %d %s; inner server got %d requests", resp.StatusCode, b, len(reqs))
	}
	last := string(reqs[len(reqs)-1].body)
	if strings.Contains(last, "plain-a") || strings.Contains(last, "value-b") || !strings.Contains(last, "/secrets/"+id+".B") {
		t.Errorf("forwarded secrets body = %s, want lookups only", last)
	}
	if mem.secret(id+".A") != "plain-a" || mem.secret(id+".B") != "value-b" {
		t.Errorf("broker secrets A, B = %q, %q", mem.secret(id+".A"), mem.secret(id+".B"))
	}
	c, _ := fake.Get(id)
	if d := cmp.Diff([]string{id + ".A", id + ".B", id + ".GITHUB_TOKEN"}, c.Grants.Secrets, cmpopts.SortSlices(func(a, b string) bool { return a < b })); d != "" {
		t.Errorf("grants after POST secrets (-want +got):\n%s", d)
	}

	// The inner server decodes the path: an escaped spelling of the route
	// is mediated all the same, never forwarded with its value (a dotted
	// one is redirected to the clean path before any forward).
	for i, tail := range []string{"secret%73", "secrets/", "x/../secrets"} {
		name, value := fmt.Sprintf("E%d", i), fmt.Sprintf("escaped-route-value-%d", i)
		resp, b := p.do(t, "POST", "/api/conversations/"+id+"/"+tail, outerKeys[0],
			strings.NewReader(`{"secrets":{"`+name+`":"`+value+`"}}`), "Content-Type", "application/json")
		for _, r := range fake.tapOf(id).requests() {
			if strings.Contains(string(r.body), value) {
				t.Errorf("POST .../%s (%d %s): the inner server got the value: %s", tail, resp.StatusCode, b, r.body)
			}
		}
		if mem.secret(id+"."+name) != value && resp.StatusCode != http.StatusTemporaryRedirect {
			t.Errorf("POST .../%s = %d %s: the value is neither in the broker nor the request redirected", tail, resp.StatusCode, b)
		}
	}
}

// TestCreateMediatesMCPCredentials: a remote MCP server's Authorization
// header (a token of the upstream's key, as Canvas sends it) becomes the
// conversation's broker MCP server, granted as such (its header's secret
// is not granted as a secret); the inner server gets the relay's URL.
func TestCreateMediatesMCPCredentials(t *testing.T) {
	fake := newFake(t)
	fake.tap = true
	mem := newMemSecrets()
	upKey := []byte("upstream-secret-key-for-mcp")
	tok, err := openhands.NewFernet(string(upKey)).Encrypt([]byte("Bearer lin-mcp-token-value"))
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, fake, func(o *Options) { o.Secrets, o.UpstreamSecretKey = mem, upKey })
	id := p.create(t, map[string]any{
		"secrets_encrypted": true,
		"agent_settings": map[string]any{"mcp_config": map[string]any{"linear": map[string]any{
			"url": "https://mcp.linear.app/mcp", "transport": "http", "headers": map[string]any{"Authorization": tok},
		}}},
	})
	name := id + ".mcp.linear"
	mem.mu.Lock()
	rec := mem.mcps[name]
	mem.mu.Unlock()
	want := store.MCPServer{Name: name, URL: "https://mcp.linear.app/mcp", Headers: []store.MCPHeader{{Name: "Authorization", Secret: name + ".h1"}}}
	if d := cmp.Diff(want, rec); d != "" {
		t.Errorf("broker MCP server (-want +got):\n%s", d)
	}
	if v := mem.secret(name + ".h1"); v != "Bearer lin-mcp-token-value" {
		t.Errorf("header secret = %q, want the decrypted header", v)
	}
	if c, _ := fake.Get(id); cmp.Diff(store.Grants{MCP: []string{name}}, c.Grants) != "" {
		d := cmp.Diff(store.Grants{MCP: []string{name}}, c.Grants)
		t.Errorf("grants (-want +got):\n%s", d)
	}
	fwd := string(fake.tapOf(id).requests()[0].body)
	if strings.Contains(fwd, "lin-mcp-token-value") || strings.Contains(fwd, tok) || strings.Contains(fwd, "mcp.linear.app") ||
		!strings.Contains(fwd, `"url":"http://`+broker.RelayAddr+`/mcp/`+name+`"`) {
		t.Errorf("forwarded create = %s, want the relay's URL and no credential", fwd)
	}
}

// TestWorkspaceCookieOpensWorkspaceRoutesOnly: the cookie the upstream's
// POST /api/auth/workspace-session sets authenticates GET
// /api/conversations/{id}/workspace[/...] and nothing else (ref §8).
func TestWorkspaceCookieOpensWorkspaceRoutesOnly(t *testing.T) {
	inner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Cookie") != "" {
			http.Error(w, "cookie forwarded", http.StatusTeapot)
			return
		}
		io.WriteString(w, "inner "+r.URL.Path)
	}))
	t.Cleanup(inner.Close)
	fake := newFake(t)
	id := fake.addCustom(inner.Listener.Addr().String(), []byte("inner-key"))
	p := startProxy(t, fake, nil)
	cookie := openhands.WorkspaceCookie + "=" + outerKeys[0]
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/api/conversations/" + id + "/workspace", http.StatusOK},
		{"GET", "/api/conversations/" + id + "/workspace/index.html", http.StatusOK},
		{"GET", "/api/conversations/" + id + "/events", http.StatusUnauthorized},
		{"POST", "/api/conversations/" + id + "/workspace/x", http.StatusUnauthorized},
		{"GET", "/api/settings", http.StatusUnauthorized},
	} {
		resp, b := p.do(t, tc.method, tc.path, "", nil, "Cookie", cookie)
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s with the cookie only = %d %s, want %d", tc.method, tc.path, resp.StatusCode, b, tc.want)
		}
	}
	if resp, _ := p.do(t, "GET", "/api/conversations/"+id+"/workspace", "", nil, "Cookie", openhands.WorkspaceCookie+"=wrong"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a wrong cookie = %d, want 401", resp.StatusCode)
	}
}

// TestFailedCreateRemovesMediatedCredentials: when the inner server
// refuses the create, the profiles and secrets mediation stored for it
// are gone again; a body ohd will not forward stores nothing.
func TestFailedCreateRemovesMediatedCredentials(t *testing.T) {
	fake := newFake(t)
	fake.badWorkingDir = true
	mem := newMemSecrets()
	fake.undoScoped = mem.deleteScoped
	p := startProxy(t, fake, func(o *Options) { o.Secrets = mem })
	body := `{"workspace":{"kind":"LocalWorkspace","working_dir":"` + fake.root + `"},` +
		`"agent":{"llm":{"model":"gpt-4o","api_key":"sk-mediated-then-undone"}},` +
		`"secrets":{"S":{"kind":"StaticSecret","value":"static-then-undone"}},` +
		`"agent_settings":{"mcp_config":{"m":{"url":"https://m.example/mcp","headers":{"Authorization":"Bearer mcp-then-undone"}}}}}`
	resp, b := p.do(t, "POST", "/api/conversations", outerKeys[0], strings.NewReader(body), "Content-Type", "application/json")
	if resp.StatusCode < 400 {
		t.Fatalf("create with a bad working dir = %d %s, want a failure", resp.StatusCode, b)
	}
	mem.mu.Lock()
	left, profiles, mcps := len(mem.secrets), len(mem.profiles), len(mem.mcps)
	mem.mu.Unlock()
	if left != 0 || profiles != 0 || mcps != 0 {
		t.Errorf("after the failed create the store holds %d secrets, %d profiles and %d MCP servers, want none", left, profiles, mcps)
	}

	fake.badWorkingDir = false
	resp, b = p.do(t, "POST", "/api/conversations", outerKeys[0], strings.NewReader(
		`{"workspace":{"kind":"LocalWorkspace","working_dir":"`+fake.root+`"},"agent":{"llm":{"model":"gpt-4o","api_key":"sk-x"}},"tags":{"k":"`+outerKeys[1]+`"}}`),
		"Content-Type", "application/json")
	if resp.StatusCode != http.StatusUnprocessableEntity || strings.Contains(string(b), outerKeys[1]) {
		t.Errorf("create carrying ohd's key = %d %s, want 422 without the key", resp.StatusCode, b)
	}
	if len(fake.createRequests()) != 1 || len(mem.secrets) != 0 {
		t.Errorf("a refused body reached Create or stored secrets (%d creates, %d secrets)", len(fake.createRequests()), len(mem.secrets))
	}
}

// TestSwitchLLMMediated: switch_llm's key becomes a broker profile of the
// conversation, granted to it, and the inner server gets the relay and
// the placeholder; bad input stores nothing; no other method passes.
func TestSwitchLLMMediated(t *testing.T) {
	up := newFakeUpstream(t)
	fake := newFake(t)
	fake.tap = true
	mem := newMemSecrets()
	p := startProxy(t, fake, withUpstream(up.srv.URL, mem))
	id := p.create(t, nil)
	fake.mu.Lock()
	fake.convs[id].addr = fake.taps[id].addr
	fake.mu.Unlock()
	resp, b := p.do(t, "POST", "/api/conversations/"+id+"/switch_llm", outerKeys[0],
		strings.NewReader(`{"llm":{"model":"anthropic/claude-x","api_key":"sk-switched-key","usage_id":"u"}}`), "Content-Type", "application/json")
	reqs := fake.tapOf(id).requests()
	if len(reqs) != 2 || reqs[1].path != "/api/conversations/"+id+"/switch_llm" {
		t.Fatalf("switch_llm = %d %s; inner server got %d requests", resp.StatusCode, b, len(reqs))
	}
	fwd := string(reqs[1].body)
	c, _ := fake.Get(id)
	if len(c.Grants.LLM) != 1 {
		t.Fatalf("grants after switch_llm = %+v, want one LLM profile", c.Grants)
	}
	name := c.Grants.LLM[0]
	if !strings.HasPrefix(name, id+".llm-") || mem.secret(name) != "sk-switched-key" || mem.profiles[name].AuthHeader != "x-api-key" || mem.profiles[name].BaseURL != "https://api.anthropic.com" {
		t.Errorf("broker profile %s = %+v key %q", name, mem.profiles[name], mem.secret(name))
	}
	if strings.Contains(fwd, "sk-switched-key") || !strings.Contains(fwd, `"base_url":"http://`+broker.RelayAddr+`/llm/`+name+`"`) || !strings.Contains(fwd, openhands.PlaceholderKey) {
		t.Errorf("forwarded switch_llm = %s, want the relay and the placeholder", fwd)
	}
	for _, bad := range []string{`{"llm":{"model":"vertex_ai/x","api_key":"sk-v"}}`, `{"llm":{"model":"openai/x","api_key":"gAAAAAnot-a-token"}}`, `{"llm":"x"}`} {
		resp, b := p.do(t, "POST", "/api/conversations/"+id+"/switch_llm", outerKeys[0], strings.NewReader(bad), "Content-Type", "application/json")
		if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(string(b), "llm") {
			t.Errorf("switch_llm %s = %d %s, want 422 naming the field", bad, resp.StatusCode, b)
		}
	}
	if c, _ := fake.Get(id); len(c.Grants.LLM) != 1 || len(fake.tapOf(id).requests()) != 2 {
		t.Errorf("refused switches changed grants %+v or reached the inner server", c.Grants)
	}
	for _, tail := range []string{"switch_llm", "switch_profile", "switch%5Fllm"} {
		if resp, _ := p.do(t, "PUT", "/api/conversations/"+id+"/"+tail, outerKeys[0], strings.NewReader(`{"llm":{"model":"openai/x","api_key":"sk-put"}}`)); resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("PUT .../%s = %d, want 405", tail, resp.StatusCode)
		}
	}
	// switch_profile: an upstream without the profile answers 404 (the
	// fake answers 418 to everything else: 502 naming the upstream).
	resp, b = p.do(t, "POST", "/api/conversations/"+id+"/switch_profile", outerKeys[0], strings.NewReader(`{"profile_name":"fast"}`))
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(b), "profile_name") {
		t.Errorf("switch_profile with an upstream that fails = %d %s, want 502 naming the field", resp.StatusCode, b)
	}
	if got := up.last(); got.URL.Path != "/api/profiles/fast" || got.Header.Get("X-Expose-Secrets") != "encrypted" || got.Header.Get("X-Session-API-Key") != outerKeys[0] {
		t.Errorf("the upstream got %s %v, want GET /api/profiles/fast encrypted with the client's key", got.URL.Path, got.Header)
	}
}
