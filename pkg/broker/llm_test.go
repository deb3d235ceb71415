package broker_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/ohd-dev/ohd/pkg/broker"
)

const llmKey = "sk-" + marker + "-0123456789abcdef"

// fakeProvider is an LLM provider: it checks that requests carry the key
// and none of the caller's credentials, and answers in the ways that could
// leak the key: echoing it in headers and bodies, streaming it split
// across writes, redirecting with it.
type fakeProvider struct {
	srv     *httptest.Server
	release chan struct{} // closed by the test to let a stream finish
	mu      sync.Mutex
	seen    []string // problems with requests the provider received
	headers []http.Header
}

func newFakeProvider(t *testing.T) *fakeProvider {
	p := &fakeProvider{release: make(chan struct{})}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *fakeProvider) problem(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen = append(p.seen, fmt.Sprintf(format, args...))
}

func (p *fakeProvider) serve(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.headers = append(p.headers, r.Header.Clone())
	p.mu.Unlock()
	if r.URL.Path == "/base/v1/x-api-key" {
		if r.Header.Get("X-Api-Key") != llmKey || r.Header.Get("Authorization") != "" {
			p.problem("x-api-key profile: X-Api-Key %q, Authorization %q", r.Header.Get("X-Api-Key"), r.Header.Get("Authorization"))
		}
	} else if got := r.Header.Get("Authorization"); got != "Bearer "+llmKey {
		p.problem("%s: Authorization %q, want the injected key", r.URL.Path, got)
	}
	for _, h := range []string{"Cookie", "X-Ohd-Request", "Proxy-Authorization", "X-Custom-Hop"} {
		if v := r.Header.Get(h); v != "" {
			p.problem("%s: header %s: %q reached the provider", r.URL.Path, h, v)
		}
	}
	if r.URL.Path != "/base/v1/x-api-key" && r.Header.Get("X-Api-Key") != "" {
		p.problem("the caller's X-Api-Key reached the provider")
	}
	switch r.URL.Path {
	case "/base/v1/chat/completions":
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Echo-Key", "key="+llmKey)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"echo":%q,"query":%q,"auth":%q}`, body, r.URL.RawQuery, r.Header.Get("Authorization"))
	case "/base/v1/stream":
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		fmt.Fprint(w, "data: first\n\n")
		fl.Flush()
		select {
		case <-p.release:
		case <-r.Context().Done():
			return
		}
		// The key split across two writes: the broker must hold back
		// the start until it knows.
		fmt.Fprint(w, "data: "+llmKey[:5])
		fl.Flush()
		fmt.Fprint(w, llmKey[5:]+" tail\n\n")
		fl.Flush()
		fmt.Fprint(w, "data: [DONE]\n\n")
	case "/base/v1/cut":
		// The provider's connection is lost mid-stream: the answer ends
		// without its last chunk.
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			p.problem("hijack: %v", err)
			return
		}
		conn.Close()
	case "/base/v1/error":
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"error":"invalid api key %s"}`, llmKey)
	case "/base/v1/redirect":
		http.Redirect(w, r, "http://elsewhere.invalid/?k="+llmKey, http.StatusFound)
	case "/base/v1/gzip":
		w.Header().Set("Content-Encoding", "gzip")
		fmt.Fprint(w, "not really gzip")
	case "/base/v1/x-api-key":
		fmt.Fprint(w, "ok")
	default:
		http.NotFound(w, r)
	}
}

func (p *fakeProvider) check(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.seen {
		t.Error("provider:", s)
	}
	for _, h := range p.headers {
		for k, vv := range h {
			for _, v := range vv {
				if strings.Contains(v, "ohd1.") {
					t.Errorf("provider received the broker token in %s", k)
				}
			}
		}
	}
}

func llmEnv(t *testing.T) (*env, broker.Endpoint, *fakeProvider) {
	t.Helper()
	p := newFakeProvider(t)
	e := newEnv(t)
	ep := e.open(broker.Conversation{
		ID: "conv-l", UID: os.Geteuid(), GID: os.Getegid(), Epoch: 1,
		Grants: broker.Grants{LLM: []string{"openai", "anthropic", "disclosed", "missing"}},
	})
	e.be.SetLLMProfile(broker.LLMProfile{Name: "openai", Model: "gpt-x", BaseURL: p.srv.URL + "/base", APIKey: []byte(llmKey)})
	e.be.SetLLMProfile(broker.LLMProfile{Name: "anthropic", Model: "claude-x", BaseURL: p.srv.URL + "/base/", APIKey: []byte(llmKey), AuthHeader: "x-api-key"})
	e.be.SetLLMProfile(broker.LLMProfile{Name: "disclosed", Model: "m", BaseURL: p.srv.URL, APIKey: []byte("sk-" + marker + "-disclosed"), AllowDisclosure: true})
	e.be.SetLLMProfile(broker.LLMProfile{Name: "ungranted", Model: "m", BaseURL: p.srv.URL, APIKey: []byte(llmKey)})
	t.Cleanup(func() { p.check(t) })
	return e, ep, p
}

// proxy sends a request through the proxy route with the caller's own
// credentials set (which must not reach the provider) and returns the
// answer; the whole answer is watched by the hygiene check.
func proxy(t *testing.T, e *env, ep broker.Endpoint, method, path, body string) (*http.Response, string) {
	t.Helper()
	hdr := authed(e.token("conv-l", 1))
	hdr.Set("Cookie", "session=caller")
	hdr.Set("X-Api-Key", "caller-key")
	hdr.Set("Connection", "X-Custom-Hop")
	hdr.Set("X-Custom-Hop", "1")
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	resp, b := e.request(ep.Socket, method, path, hdr, rd)
	e.watch(fmt.Sprintf("%d %v %s", resp.StatusCode, resp.Header, b))
	return resp, string(b)
}

func TestLLMProxyInjectsKey(t *testing.T) {
	e, ep, _ := llmEnv(t)
	n := e.auditCount()
	resp, body := proxy(t, e, ep, http.MethodPost, "/v1/llm/openai/proxy/v1/chat/completions?model=x", `{"prompt":"hi"}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("proxy = %d %s", resp.StatusCode, body)
	}
	mask := strings.Repeat("*", len(llmKey))
	if want := fmt.Sprintf(`{"echo":"{\"prompt\":\"hi\"}","query":"model=x","auth":"Bearer %s"}`, mask); body != want {
		t.Errorf("proxied body = %s, want %s", body, want)
	}
	if got := resp.Header.Get("X-Echo-Key"); got != "key="+mask {
		t.Errorf("X-Echo-Key = %q, want the key masked", got)
	}
	rec := e.audit(n + 1)
	if !rec.Allowed || rec.Status != 200 || rec.Kind != "llm" || rec.Name != "openai" || rec.Route != "ANY /v1/llm/{profile}/proxy/{path...}" {
		t.Errorf("audit record %+v", rec)
	}

	resp, body = proxy(t, e, ep, http.MethodPost, "/v1/llm/anthropic/proxy/v1/x-api-key", "{}")
	if resp.StatusCode != http.StatusOK || body != "ok" {
		t.Errorf("x-api-key profile: %d %s", resp.StatusCode, body)
	}
}

func TestLLMProxyStreams(t *testing.T) {
	e, ep, p := llmEnv(t)
	c := e.client(ep)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://x/v1/llm/openai/proxy/v1/stream", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d %v", resp.StatusCode, resp.Header)
	}
	br := bufio.NewReader(resp.Body)
	// The provider is blocked until release: this read succeeds only if
	// the broker sent the first event on without waiting for the rest.
	first, err := br.ReadString('\n')
	if err != nil || first != "data: first\n" {
		t.Fatalf("first line = %q, %v (before the provider sent the rest)", first, err)
	}
	close(p.release)
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	e.watch(string(rest))
	want := "\ndata: " + strings.Repeat("*", len(llmKey)) + " tail\n\ndata: [DONE]\n\n"
	if string(rest) != want {
		t.Errorf("rest of the stream = %q, want %q", rest, want)
	}
}

func TestLLMProxyNeverShowsKey(t *testing.T) {
	e, ep, p := llmEnv(t)
	mask := strings.Repeat("*", len(llmKey))
	t.Run("provider error echoing the key", func(t *testing.T) {
		resp, body := proxy(t, e, ep, http.MethodGet, "/v1/llm/openai/proxy/v1/error", "")
		if resp.StatusCode != http.StatusUnauthorized || body != `{"error":"invalid api key `+mask+`"}` {
			t.Errorf("error passthrough = %d %s", resp.StatusCode, body)
		}
	})
	t.Run("redirect is passed back, not followed", func(t *testing.T) {
		resp, _ := proxy(t, e, ep, http.MethodGet, "/v1/llm/openai/proxy/v1/redirect", "")
		if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "http://elsewhere.invalid/?k="+mask {
			t.Errorf("redirect = %d, Location %q", resp.StatusCode, resp.Header.Get("Location"))
		}
	})
	t.Run("encoded answer refused", func(t *testing.T) {
		resp, body := proxy(t, e, ep, http.MethodGet, "/v1/llm/openai/proxy/v1/gzip", "")
		if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, `"code":"bad_gateway"`) {
			t.Errorf("gzip answer = %d %s, want 502 bad_gateway", resp.StatusCode, body)
		}
	})
	t.Run("dot-dot out of the base URL", func(t *testing.T) {
		resp, body := proxy(t, e, ep, http.MethodGet, "/v1/llm/openai/proxy/v1/%2e%2e/%2e%2e/admin", "")
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("dot-dot = %d %s, want 400", resp.StatusCode, body)
		}
	})
	t.Run("provider down", func(t *testing.T) {
		p.srv.Close()
		resp, body := proxy(t, e, ep, http.MethodGet, "/v1/llm/openai/proxy/v1/chat/completions", "")
		if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, `"code":"bad_gateway"`) {
			t.Errorf("provider down = %d %s, want 502 bad_gateway", resp.StatusCode, body)
		}
	})
}

func TestLLMDisclosure(t *testing.T) {
	e, ep, _ := llmEnv(t)
	tok := e.token("conv-l", 1)
	get := func(name string) (int, string) {
		resp, b := e.request(ep.Socket, http.MethodGet, "/v1/llm/"+name, authed(tok), nil)
		return resp.StatusCode, string(b)
	}
	status, notGranted := get("ungranted")
	if status != http.StatusForbidden {
		t.Fatalf("GET /v1/llm/ungranted = %d %s, want 403", status, notGranted)
	}
	for _, name := range []string{"openai", "missing", "nonexistent"} {
		if s, b := get(name); s != status || b != notGranted {
			t.Errorf("GET /v1/llm/%s = %d %s, want the same answer as for a profile not granted: %d %s", name, s, b, status, notGranted)
		}
	}
	c := e.client(ep)
	got, err := c.LLM(context.Background(), "disclosed")
	if err != nil || string(got.APIKey) != "sk-"+marker+"-disclosed" || got.Model != "m" {
		t.Errorf("LLM(disclosed) = %+v, %v", got, err)
	}
}

// TestLLMProxyClientGoneMidStream: the client leaves while the provider
// is still streaming; the audit record blames the client (client_gone),
// not the provider (upstream_interrupted).
func TestLLMProxyClientGoneMidStream(t *testing.T) {
	e, ep, p := llmEnv(t)
	defer close(p.release)
	c := e.client(ep)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://x/v1/llm/openai/proxy/v1/stream", nil)
	n := e.auditCount()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if first, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || first != "data: first\n" {
		t.Fatalf("first line = %q, %v", first, err)
	}
	cancel() // the client leaves mid-stream
	resp.Body.Close()
	if rec := e.audit(n + 1); rec.Reason != "client_gone" || rec.Route != "ANY /v1/llm/{profile}/proxy/{path...}" {
		t.Errorf("audit of a stream the client left = %+v, want reason client_gone", rec)
	}
}

// TestLLMProxyCutStreamIsCut: the provider's stream is cut mid-way (its
// connection lost): the client's read ends in an error, never a clean end
// that would make the part look like the whole answer; the audit says
// upstream_interrupted.
func TestLLMProxyCutStreamIsCut(t *testing.T) {
	e, ep, _ := llmEnv(t)
	c := e.client(ep)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://x/v1/llm/openai/proxy/v1/cut", nil)
	n := e.auditCount()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Errorf("a cut stream read to a clean end (%q): the client takes the part for the whole", got)
	}
	if string(got) != "data: first\n\n" {
		t.Errorf("stream before the cut = %q, want the first event", got)
	}
	if rec := e.audit(n + 1); rec.Reason != "upstream_interrupted" || !rec.Allowed {
		t.Errorf("audit of a cut stream = %+v, want reason upstream_interrupted", rec)
	}
}

// TestLLMProxyRefusesWebSockets: a real WebSocket client (what the OpenAI
// Realtime API needs) through the LLM proxy is refused before anything
// reaches the provider, with a message saying it is not supported.
func TestLLMProxyRefusesWebSockets(t *testing.T) {
	e, ep, p := llmEnv(t)
	p.mu.Lock()
	before := len(p.headers)
	p.mu.Unlock()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", ep.Socket)
	}}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hdr := authed(e.token("conv-l", 1))
	_, resp, err := websocket.Dial(ctx, "ws://x/v1/llm/openai/proxy/v1/realtime?model=gpt-realtime", &websocket.DialOptions{HTTPClient: hc, HTTPHeader: hdr})
	if err == nil {
		t.Fatal("a WebSocket through the LLM proxy was accepted")
	}
	if resp == nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("WebSocket dial: %v, response %+v; want 400", err, resp)
	}
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), "WebSocket APIs (such as the OpenAI Realtime API) are not supported") {
		t.Errorf("refusal body = %s", body)
	}
	p.mu.Lock()
	after := len(p.headers)
	p.mu.Unlock()
	if after != before {
		t.Errorf("the provider saw %d requests, want none", after-before)
	}
}
