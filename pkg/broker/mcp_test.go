package broker_test

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/pkg/broker"
)

// fakeMCP is a remote MCP server (streamable HTTP) on the host: it wants
// its bearer token and an org header, records what each request carried
// and echoes the Authorization header back, as a careless server might.
type fakeMCP struct {
	srv     *httptest.Server
	mu      sync.Mutex
	seen    []string // "<method> <uri> auth=<Authorization> org=<X-Org> session=<Mcp-Session-Id>"
	release chan struct{}
}

func newFakeMCP(t *testing.T, token string) *fakeMCP {
	m := &fakeMCP{release: make(chan struct{})}
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		m.seen = append(m.seen, r.Method+" "+r.URL.RequestURI()+" auth="+r.Header.Get("Authorization")+" org="+r.Header.Get("X-Org")+" session="+r.Header.Get("Mcp-Session-Id"))
		m.mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, `{"error":"unauthorized"}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Mcp-Session-Id", "session-1")
		if r.Method == http.MethodGet {
			// The standing stream of server messages.
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"ping\"}\n\n")
			w.(http.Flusher).Flush()
			<-m.release
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{"echo":"`+r.Header.Get("Authorization")+`"}}`)
	}))
	t.Cleanup(m.srv.Close)
	t.Cleanup(func() {
		select {
		case <-m.release:
		default:
			close(m.release)
		}
	})
	return m
}

func (m *fakeMCP) calls() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.seen...)
}

// mcpEnv serves a Relay of conversation conv-m, granted the MCP server
// conv-m.mcp-linear (the fake at /mcp).
func mcpEnv(t *testing.T) (*env, *fakeMCP, string, string) {
	t.Helper()
	token := "lin_" + marker + "_token"
	m := newFakeMCP(t, token)
	e := newEnv(t)
	e.be.SetMCPServer(broker.MCPServer{Name: "conv-m.mcp-linear", URL: m.srv.URL + "/mcp?tenant=a", Headers: []broker.Header{
		{Name: "Authorization", Value: []byte("Bearer " + token)}, {Name: "X-Org", Value: []byte("acme")},
	}})
	ep := e.open(broker.Conversation{ID: "conv-m", UID: os.Geteuid(), GID: os.Getegid(), Epoch: 1,
		Grants: broker.Grants{MCP: []string{"conv-m.mcp-linear"}}})
	srv := httptest.NewServer(broker.NewRelay(e.client(ep)))
	t.Cleanup(srv.Close)
	return e, m, srv.URL, token
}

// TestMCPProxyInjectsHeadersAndMasksThem: through the relay, the MCP
// server gets its credential headers (not the caller's), at exactly its
// URL; the answer reaches the caller with the credential masked; the use
// is audited by name.
func TestMCPProxyInjectsHeadersAndMasksThem(t *testing.T) {
	e, m, relay, token := mcpEnv(t)
	req, _ := http.NewRequest(http.MethodPost, relay+"/mcp/conv-m.mcp-linear", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize"}`))
	req.Header.Set("Authorization", "Bearer placeholder")
	req.Header.Set("Mcp-Session-Id", "session-1")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := relayHTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Mcp-Session-Id") != "session-1" || !strings.Contains(string(b), `"echo":"Bearer `) {
		t.Fatalf("POST through the relay = %d %v %s, want the server's answer with its session id", resp.StatusCode, resp.Header, b)
	}
	if strings.Contains(string(b), token) {
		t.Errorf("the answer holds the token: %s", b)
	}
	want := "POST /mcp?tenant=a auth=Bearer " + token + " org=acme session=session-1"
	if calls := m.calls(); len(calls) != 1 || calls[0] != want {
		t.Errorf("MCP server got %q, want %q", calls, want)
	}
	rec := e.audit(1)
	if rec.Kind != "mcp" || rec.Name != "conv-m.mcp-linear" || !rec.Allowed || rec.Route != "ANY /v1/mcp/{server}/proxy" {
		t.Errorf("audit = %+v, want an allowed mcp use by name", rec)
	}
}

// TestMCPProxyStreamsAndIsRevocable: the standing SSE stream flows while
// it is open; another conversation's or an ungranted server is refused;
// a revoked grant refuses the next request.
func TestMCPProxyStreamsAndIsRevocable(t *testing.T) {
	e, m, relay, _ := mcpEnv(t)
	resp, err := relayHTTP.Get(relay + "/mcp/conv-m.mcp-linear")
	if err != nil {
		t.Fatal(err)
	}
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(resp.Body).ReadString('\n')
		line <- l
	}()
	select {
	case l := <-line:
		if l != "event: message\n" {
			t.Errorf("first line of the stream %q", l)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream's first event did not arrive while it was open: the proxy buffers")
	}
	close(m.release)
	resp.Body.Close()

	for _, path := range []string{"/mcp/conv-other.mcp-x", "/mcp/conv-m.mcp-linear/..%2F..%2Fadmin", "/mcp/conv-m.mcp-linear/admin"} {
		r, err := relayHTTP.Get(relay + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode < 400 || strings.Contains(string(b), marker) {
			t.Errorf("GET %s = %d %s, want a refusal", path, r.StatusCode, b)
		}
	}
	e.be.SetConversation(broker.Conversation{ID: "conv-m", UID: os.Geteuid(), GID: os.Getegid(), Epoch: 1})
	n := len(m.calls())
	r, err := relayHTTP.Post(relay+"/mcp/conv-m.mcp-linear", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != http.StatusForbidden || len(m.calls()) != n {
		t.Errorf("after the grant was revoked: %d %s (server calls %d → %d), want 403 and no call", r.StatusCode, b, n, len(m.calls()))
	}
}
