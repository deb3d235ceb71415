package broker_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/pkg/broker"
)

func TestBodyTooLarge(t *testing.T) {
	e := newEnv(t, func(o *broker.Options) { o.Limits.MaxBody = 1024 })
	ep := e.open(broker.Conversation{ID: "conv-1", UID: os.Geteuid(), GID: os.Getegid(), Epoch: 1, Grants: broker.Grants{Git: []string{"git.example.com"}}})
	tok := e.token("conv-1", 1)
	big := "protocol=https\nhost=git.example.com\nwwwauth[]=" + strings.Repeat("a", 1024) + "\n"
	for _, chunked := range []bool{false, true} {
		t.Run(fmt.Sprintf("chunked=%v", chunked), func(t *testing.T) {
			var body io.Reader = strings.NewReader(big)
			if chunked {
				body = io.MultiReader(body) // hides the length
			}
			n := e.auditCount()
			resp, b := e.request(ep.Socket, http.MethodPost, "/v1/git-credential?action=get", authed(tok), body)
			if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), `"code":"too_large"`) {
				t.Errorf("oversize body = %d %s, want 413 too_large", resp.StatusCode, b)
			}
			if rec := e.audit(n + 1); rec.Status != 413 || rec.Allowed || rec.Reason != "too_large" {
				t.Errorf("audit record %+v", rec)
			}
		})
	}
}

func TestRateLimit(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e := newEnv(t, func(o *broker.Options) {
		o.Now = clock
		o.Limits.Rate = 0.5 // a token every 2s
		o.Limits.Burst = 3
	})
	ep := e.open(broker.Conversation{ID: "conv-1", UID: os.Geteuid(), GID: os.Getegid(), Epoch: 1})
	other := e.open(broker.Conversation{ID: "conv-2", UID: os.Geteuid(), GID: os.Getegid(), Epoch: 1})
	whoami := func(ep broker.Endpoint, id string) *http.Response {
		resp, _ := e.request(ep.Socket, http.MethodGet, "/v1/whoami", authed(e.token(id, 1)), nil)
		return resp
	}
	for i := range 3 {
		if resp := whoami(ep, "conv-1"); resp.StatusCode != 200 {
			t.Fatalf("request %d within the burst = %d", i, resp.StatusCode)
		}
	}
	n := e.auditCount()
	resp := whoami(ep, "conv-1")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "2" {
		t.Errorf("request over the rate = %d, Retry-After %q; want 429 and 2", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if rec := e.audit(n + 1); rec.Code != "rate_limited" || rec.Reason != "rate" || rec.Status != 429 {
		t.Errorf("audit record %+v", rec)
	}
	// Another conversation has its own bucket.
	if resp := whoami(other, "conv-2"); resp.StatusCode != 200 {
		t.Errorf("other conversation = %d, want 200", resp.StatusCode)
	}
	mu.Lock()
	now = now.Add(2 * time.Second)
	mu.Unlock()
	if resp := whoami(ep, "conv-1"); resp.StatusCode != 200 {
		t.Errorf("after the refill = %d, want 200", resp.StatusCode)
	}
}

// TestSlowHeadersCutOff trickles a request's headers slower than the
// header timeout allows: the broker must drop the connection.
func TestSlowHeadersCutOff(t *testing.T) {
	e := newEnv(t, func(o *broker.Options) { o.Limits.ReadHeaderTimeout = 200 * time.Millisecond })
	ep := e.open(broker.Conversation{ID: "conv-1", UID: os.Geteuid(), GID: os.Getegid(), Epoch: 1})
	conn, err := net.Dial("unix", ep.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	closed := make(chan error, 1)
	go func() {
		_, err := conn.Read(make([]byte, 1))
		closed <- err
	}()
	start := time.Now()
	if _, err := io.WriteString(conn, "GET /v1/whoami HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case err := <-closed:
			if err == nil {
				t.Fatalf("the broker answered a request whose headers never ended")
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("cut off after %v", d)
			}
			return
		case <-tick.C:
			if time.Since(start) > 30*time.Second {
				t.Fatal("a client trickling headers was not cut off in 30s")
			}
			// The broker may already have closed; a write error is fine.
			_, _ = fmt.Fprintf(conn, "X-Trickle-%d: 1\r\n", i)
		}
	}
}

// TestConversationIsolation fills conversation A's in-flight budget with
// slow LLM requests: A's next request is refused with 429, and B is
// served meanwhile.
func TestConversationIsolation(t *testing.T) {
	const inFlight = 4
	var arrived atomic.Int32
	arrivedCh := make(chan struct{}, inFlight)
	release := make(chan struct{})
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		arrivedCh <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		fmt.Fprint(w, "done")
	}))
	t.Cleanup(provider.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	e := newEnv(t, func(o *broker.Options) { o.Limits.LLMInFlight = inFlight })
	grants := broker.Grants{LLM: []string{"slow"}}
	a := e.open(broker.Conversation{ID: "conv-a", UID: os.Geteuid(), GID: os.Getegid(), Epoch: 1, Grants: grants})
	b := e.open(broker.Conversation{ID: "conv-b", UID: os.Geteuid(), GID: os.Getegid(), Epoch: 1, Grants: grants})
	e.be.SetLLMProfile(broker.LLMProfile{Name: "slow", BaseURL: provider.URL, APIKey: []byte("sk-" + marker)})

	ca := e.client(a)
	var wg sync.WaitGroup
	errs := make(chan error, inFlight)
	for range inFlight {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, "http://x/v1/llm/slow/proxy/wait", nil)
			resp, err := ca.Do(req)
			if err != nil {
				errs <- err
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(body) != "done" {
				errs <- fmt.Errorf("slow request: %d %s", resp.StatusCode, body)
			}
		})
	}
	for range inFlight {
		select {
		case <-arrivedCh:
		case <-time.After(20 * time.Second):
			t.Fatalf("only %d slow requests reached the provider", arrived.Load())
		}
	}
	if _, err := ca.LLM(context.Background(), "slow"); !errors.Is(err, broker.ErrRateLimited) {
		t.Errorf("A's LLM request over its in-flight limit: %v, want ErrRateLimited", err)
	}
	resp, _ := e.request(a.Socket, http.MethodGet, "/v1/llm/slow/proxy/wait", authed(e.token("conv-a", 1)), nil)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("A over its in-flight limit = %d Retry-After %q, want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	cb := e.client(b)
	for i := range 20 {
		if _, err := cb.Whoami(context.Background()); err != nil {
			t.Fatalf("B's request %d while A is saturated: %v", i, err)
		}
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if _, err := ca.Whoami(context.Background()); err != nil {
		t.Errorf("A after its slow requests finished: %v", err)
	}
}

// TestKeepAliveServesManyRequests checks a client connection is reused
// (peer credentials are read once per connection, not per request).
func TestKeepAliveServesManyRequests(t *testing.T) {
	e := newEnv(t)
	ep := e.open(broker.Conversation{ID: "conv-1", UID: os.Geteuid(), GID: os.Getegid(), Epoch: 1})
	conn, err := net.Dial("unix", ep.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	for i := range 5 {
		fmt.Fprintf(conn, "GET /v1/whoami HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nX-OHD-Request: 1\r\n\r\n", e.token("conv-1", 1))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d on one connection: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d = %d", i, resp.StatusCode)
		}
	}
	recs := e.be.AuditRecords()
	for _, r := range recs {
		if r.PeerPID != os.Getpid() || !r.Allowed {
			t.Errorf("audit record %+v, want this process, allowed", r)
		}
	}
}

// TestAuditUnavailableRefusesEverything: while the backend cannot make
// audit records durable, nothing is handed out (503 audit_unavailable,
// Retry-After), the refusal itself is audited, and service resumes by
// itself when the audit works again.
func TestAuditUnavailableRefusesEverything(t *testing.T) {
	e := newEnv(t)
	e.be.SetSecret("s", []byte("the-value-"+t.Name()))
	conv := broker.Conversation{ID: "conv-1", UID: os.Geteuid(), GID: os.Getegid(), Epoch: 1, Grants: broker.Grants{Secrets: []string{"s"}}}
	ep := e.open(conv)
	cl := e.client(ep)
	ctx := context.Background()
	if _, err := cl.Secret(ctx, "s"); err != nil {
		t.Fatalf("Secret with a working audit: %v", err)
	}
	e.be.SetAuditErr(errors.New("write /var/lib/ohd/ohd.db: no space left on device"))
	n := e.auditCount()
	resp, body := e.request(ep.Socket, http.MethodGet, "/v1/secrets/s", authed(e.token(conv.ID, 1)), nil)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), `"code":"audit_unavailable"`) || strings.Contains(string(body), "the-value") {
		t.Errorf("secret while the audit fails = %d Retry-After %q %s, want 503 audit_unavailable without the value", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if rec := e.audit(n + 1); rec.Allowed || rec.Code != broker.CodeAuditUnavailable || rec.Status != http.StatusServiceUnavailable {
		t.Errorf("audit of the refusal = %+v", rec)
	}
	if _, err := cl.Secret(ctx, "s"); !errors.Is(err, broker.ErrAuditUnavailable) {
		t.Errorf("Client.Secret while the audit fails: %v, want ErrAuditUnavailable", err)
	}
	e.be.SetAuditErr(nil)
	if v, err := cl.Secret(ctx, "s"); err != nil || !strings.HasPrefix(string(v), "the-value") {
		t.Errorf("Secret after the audit recovered: %v", err)
	}
}

// TestOneBudgetCannotStarveAnother fills the default LLM budget (32
// streams that stay open), the MCP budget (16 requests to a hung MCP
// server) and the OAuth one (8 token requests waiting on a hung token
// endpoint), and holds idle keep-alive connections besides, with the
// default limits: git credentials and secrets are still served at once
// (with one budget for every kind, git got 429 and "could not read
// Username"; with a connection cap below the budgets' sum, the next
// connection did), and each full budget refuses only its own kind.
func TestOneBudgetCannotStarveAnother(t *testing.T) {
	const streams, mcpStreams, oauthWaiters, idleConns = 32, 16, 8, 16
	release := make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	opened := make(chan struct{}, streams+mcpStreams+oauthWaiters)
	hang := func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/stream") {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: first\n\n")
			w.(http.Flusher).Flush()
		}
		opened <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}
	provider := httptest.NewServer(http.HandlerFunc(hang))
	t.Cleanup(provider.Close)
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })

	e := newEnv(t)
	e.be.SetLLMProfile(broker.LLMProfile{Name: "p", BaseURL: provider.URL, APIKey: []byte("sk-" + marker)})
	e.be.SetOAuthServer(broker.OAuthServer{Name: "hung", TokenURL: provider.URL + "/token", RefreshToken: []byte("rt-" + marker), Expiry: time.Now().Add(-time.Hour)})
	e.be.SetGitCredential("git.example.com", broker.GitCredential{Username: "bot", Password: []byte("pw-" + marker)})
	e.be.SetSecret("s", []byte("v-"+marker))
	e.be.SetMCPServer(broker.MCPServer{Name: "m", URL: provider.URL + "/mcp"})
	conv := broker.Conversation{ID: "conv-1", UID: os.Geteuid(), GID: os.Getegid(), Epoch: 1,
		Grants: broker.Grants{LLM: []string{"p"}, OAuth: []string{"hung"}, Git: []string{"git.example.com"}, Secrets: []string{"s"}, MCP: []string{"m"}, GitOptions: helperOpts("git.example.com")}}
	ep := e.open(conv)
	cl := e.client(ep)

	var wg sync.WaitGroup
	for range streams {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, "http://x/v1/llm/p/proxy/v1/chat/stream", strings.NewReader("{}"))
			resp, err := cl.Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			_, _ = io.Copy(io.Discard, resp.Body)
		})
	}
	for range mcpStreams {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, "http://x/v1/mcp/m/proxy", strings.NewReader("{}"))
			resp, err := cl.Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			_, _ = io.Copy(io.Discard, resp.Body)
		})
	}
	oauthCtx, cancelOAuth := context.WithCancel(context.Background())
	for range oauthWaiters {
		wg.Go(func() { _, _ = cl.OAuthToken(oauthCtx, "hung") })
	}
	defer func() {
		cancelOAuth()
		releaseOnce.Do(func() { close(release) })
		wg.Wait()
	}()
	// Every stream is open at the provider; the OAuth refresh is hung
	// (one refresh for all waiters), so wait until the waiters are in.
	for i := range streams + mcpStreams + 1 {
		select {
		case <-opened:
		case <-time.After(20 * time.Second):
			t.Fatalf("only %d of %d provider requests arrived", i, streams+mcpStreams+1)
		}
	}
	// The LLM and MCP budgets are full: one more of each is refused.
	for _, p := range []string{"/v1/llm/p/proxy/v1/chat/stream", "/v1/mcp/m/proxy"} {
		req, _ := http.NewRequest(http.MethodPost, "http://x"+p, strings.NewReader("{}"))
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("POST %s with its budget full = %d, want 429", p, resp.StatusCode)
		}
	}
	// Idle keep-alive connections count against the connection cap.
	for i := range idleConns {
		conn, err := net.Dial("unix", ep.Socket)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET /v1/whoami HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nX-OHD-Request: 1\r\n\r\n", e.token("conv-1", 1))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("idle connection %d: %v %v", i, resp, err)
		}
		resp.Body.Close()
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		// A probe that gets in waits too: bound it.
		probe, cancelProbe := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_, err := cl.OAuthToken(probe, "hung")
		cancelProbe()
		if errors.Is(err, broker.ErrRateLimited) {
			break // the OAuth budget is full: all 8 waiters are in
		}
		if time.Now().After(deadline) {
			t.Fatalf("the OAuth budget never filled: %v", err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := cl.GitCredential(ctx, "get", []byte("protocol=https\nhost=git.example.com\n\n"))
	if err != nil || !strings.Contains(string(out), "password=pw-"+marker) {
		t.Errorf("git credential with %d LLM streams, %d MCP requests, %d OAuth waiters and %d idle connections open: %q, %v; want it served", streams, mcpStreams, oauthWaiters, idleConns, out, err)
	}
	if _, err := cl.Secret(ctx, "s"); err != nil {
		t.Errorf("secret with the LLM and OAuth budgets busy: %v", err)
	}
	if _, err := cl.Whoami(ctx); err != nil {
		t.Errorf("whoami with the LLM and OAuth budgets busy: %v", err)
	}
}

// TestConnectionCap: a conversation may hold MaxConns connections to its
// socket; the next one is answered 429 and closed (and audited), and a
// slot is free again once a connection closes.
func TestConnectionCap(t *testing.T) {
	const max = 4
	e := newEnv(t, func(o *broker.Options) { o.Limits.MaxConns = max })
	ep := e.open(broker.Conversation{ID: "conv-1", UID: os.Geteuid(), GID: os.Getegid(), Epoch: 1})
	whoami := func(conn net.Conn) (*http.Response, error) {
		fmt.Fprintf(conn, "GET /v1/whoami HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nX-OHD-Request: 1\r\n\r\n", e.token("conv-1", 1))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	var conns []net.Conn
	for i := range max {
		conn, err := net.Dial("unix", ep.Socket)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if resp, err := whoami(conn); err != nil || resp.StatusCode != 200 {
			t.Fatalf("connection %d within the cap: %v %v", i, resp, err)
		}
		conns = append(conns, conn)
	}
	n := e.auditCount()
	over, err := net.Dial("unix", ep.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	resp, err := http.ReadResponse(bufio.NewReader(over), nil)
	if err != nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("connection over the cap: %v %v, want 429", resp, err)
	}
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), `"code":"rate_limited"`) || !strings.Contains(string(body), "connections") {
		t.Errorf("answer over the cap: %s", body)
	}
	if rec := e.audit(n + 1); rec.Reason != "connections" || rec.PeerPID != os.Getpid() || rec.Allowed {
		t.Errorf("audit of the refused connection: %+v", rec)
	}
	conns[0].Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.Dial("unix", ep.Socket)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := whoami(conn)
		conn.Close()
		if err == nil && resp.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after closing one connection: %v %v, want a free slot", resp, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
