package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestAuth(t *testing.T) {
	ts := newTestServer(t, Config{})
	dir := t.TempDir()
	c := ts.create(t, dir, "")
	tests := []struct {
		method, path, key string
		want              int
	}{
		{"GET", "/alive", "", 200},
		{"GET", "/health", "", 200},
		{"GET", "/ready", "", 200},
		{"GET", "/server_info", "", 200},
		{"GET", "/alive", "wrong", 200},
		{"GET", "/api/conversations/count", testKey, 200},
		{"GET", "/api/conversations/count", "", 401},
		{"GET", "/api/conversations/count", "wrong", 401},
		{"GET", "/api/conversations/count", testKey + "x", 401},
		{"GET", "/api/conversations/count", testKey[:len(testKey)-1], 401},
		{"GET", "/api/conversations/count?session_api_key=" + testKey, "", 401},
		{"GET", "/api/conversations/" + c.ID, "", 401},
		{"GET", "/api/conversations/" + c.ID, testKey, 200},
		{"GET", "/echo/x", "", 401},
		{"GET", "/redirect", "", 401},
		{"GET", "/no/such/route", "", 401},
		{"GET", "/no/such/route", testKey, 404},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path+" key="+tt.key, func(t *testing.T) {
			code, body := ts.doKey(t, tt.method, tt.path, "", tt.key)
			if code != tt.want {
				t.Fatalf("%s %s with key %q = %d %s, want %d", tt.method, tt.path, tt.key, code, body, tt.want)
			}
			if code == 401 {
				if diff := cmp.Diff(map[string]string{"detail": "Unauthorized"}, mustJSON[map[string]string](t, body)); diff != "" {
					t.Errorf("401 body (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestAuthSeveralKeys(t *testing.T) {
	ts := newTestServer(t, Config{Keys: []string{"first", "second"}})
	for key, want := range map[string]int{"first": 200, "second": 200, "third": 401, "": 401} {
		if code, _ := ts.doKey(t, "GET", "/api/conversations/count", "", key); code != want {
			t.Errorf("GET /api/conversations/count with key %q = %d, want %d", key, code, want)
		}
	}
}

func TestNoKeyConfiguredIsOpen(t *testing.T) {
	ts := newTestServer(t, Config{Keys: []string{}})
	if code, body := ts.doKey(t, "GET", "/api/conversations/count", "", ""); code != 200 {
		t.Fatalf("GET /api/conversations/count without keys configured = %d %s, want 200 (agent server behaviour)", code, body)
	}
}

func TestRequestLogHasNoSecrets(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.doKey(t, "GET", "/api/conversations/count", "", testKey)
	ts.doKey(t, "GET", "/sockets/events/x?session_api_key="+testKey, "", "")
	ts.doKey(t, "GET", "/echo/x?token=query-secret", "", testKey)
	ts.Close() // flush: every handler has returned
	logs := ts.log.String()
	for _, secret := range []string{testKey, "query-secret"} {
		if strings.Contains(logs, secret) {
			t.Errorf("request log contains %q:\n%s", secret, logs)
		}
	}
	for _, want := range []string{"method=GET path=/api/conversations/count status=200", "path=/echo/x status=200"} {
		if !strings.Contains(logs, want) {
			t.Errorf("request log lacks %q:\n%s", want, logs)
		}
	}
}

func TestHealthDelay(t *testing.T) {
	tests := []struct {
		delay             time.Duration
		health, readiness int
	}{
		{0, 200, 200},
		{time.Hour, 503, 503},
	}
	for _, tt := range tests {
		ts := newTestServer(t, Config{HealthDelay: tt.delay})
		if code, body := ts.doKey(t, "GET", "/health", "", ""); code != tt.health {
			t.Errorf("HealthDelay %s: GET /health = %d %s, want %d", tt.delay, code, body, tt.health)
		}
		if code, body := ts.doKey(t, "GET", "/ready", "", ""); code != tt.readiness {
			t.Errorf("HealthDelay %s: GET /ready = %d %s, want %d", tt.delay, code, body, tt.readiness)
		}
		if code, body := ts.doKey(t, "GET", "/alive", "", ""); code != 200 || string(body) != "{\"status\":\"ok\"}\n" {
			t.Errorf("HealthDelay %s: GET /alive = %d %q, want 200 {\"status\":\"ok\"}", tt.delay, code, body)
		}
	}
}

func TestServerInfo(t *testing.T) {
	const id = "6f9619ff-8b86-d011-b42d-00c04fc964ff"
	ts := newTestServer(t, Config{ConversationID: id, Runtime: "local"})
	code, body := ts.doKey(t, "GET", "/server_info", "", "")
	if code != 200 {
		t.Fatalf("GET /server_info = %d %s", code, body)
	}
	got := mustJSON[serverInfoResponse](t, body)
	if got.ConversationID != id || got.Version != version || got.ConversationRuntime != "local" || got.Uptime < 0 {
		t.Errorf("GET /server_info = %+v, want conversation_id %s, version %s, runtime local", got, id, version)
	}
}

func TestEcho(t *testing.T) {
	ts := newTestServer(t, Config{})
	for _, prefix := range []string{"", "/api/conversations/not-even-a-uuid"} {
		t.Run("prefix="+prefix, func(t *testing.T) {
			req, _ := http.NewRequest("PUT", ts.URL+prefix+"/echo/a/b?x=1&y=%2F", strings.NewReader("hello body"))
			req.Header.Set("X-Session-API-Key", testKey)
			req.Header.Set("X-Custom", "v1")
			req.Header.Add("X-Custom", "v2")
			req.Header.Set("Cookie", "c=1")
			resp, err := ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			got := mustJSON[echoResponse](t, b)
			if got.Method != "PUT" || got.Path != prefix+"/echo/a/b" || got.RawQuery != "x=1&y=%2F" || got.Body != "hello body" || got.BodyBytes != 10 {
				t.Errorf("echo = %+v, want PUT %s/echo/a/b x=1&y=%%2F body \"hello body\"", got, prefix)
			}
			if diff := cmp.Diff([]string{"v1", "v2"}, got.Headers["X-Custom"]); diff != "" {
				t.Errorf("echoed X-Custom (-want +got):\n%s", diff)
			}
			if got.Headers["X-Session-Api-Key"][0] != testKey || got.Headers["Cookie"][0] != "c=1" {
				t.Errorf("echo does not show the received auth headers: %v", got.Headers)
			}
			if got.Host != strings.TrimPrefix(ts.URL, "http://") {
				t.Errorf("echoed host = %q, want %q", got.Host, strings.TrimPrefix(ts.URL, "http://"))
			}
		})
	}
}

func TestRedirectAndErrorRevealInnerAddress(t *testing.T) {
	ts := newTestServer(t, Config{Addr: "0.0.0.0:8000"})
	host := strings.TrimPrefix(ts.URL, "http://")
	client := *ts.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	tests := []struct{ path, want string }{
		{"/redirect", "http://" + host + "/echo/redirected"},
		{"/redirect?to=/alive", "http://" + host + "/alive"},
		{"/redirect?to=//evil.example/", "http://" + host + "/echo/redirected"},
		{"/api/conversations/abc/redirect", "http://" + host + "/api/conversations/abc/echo/redirected"},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest("GET", ts.URL+tt.path, nil)
		req.Header.Set("X-Session-API-Key", testKey)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 302 || resp.Header.Get("Location") != tt.want {
			t.Errorf("GET %s = %d Location %q, want 302 %q", tt.path, resp.StatusCode, resp.Header.Get("Location"), tt.want)
		}
	}
	for _, path := range []string{"/error", "/api/conversations/abc/error"} {
		code, body := ts.do(t, "GET", path, "")
		if code != 500 || !strings.Contains(string(body), "0.0.0.0:8000") || !strings.Contains(string(body), host) {
			t.Errorf("GET %s = %d %s, want 500 naming 0.0.0.0:8000 and %s", path, code, body, host)
		}
	}
}

func TestSlowStreamBig(t *testing.T) {
	ts := newTestServer(t, Config{})
	if code, body := ts.do(t, "GET", "/slow?ms=20", ""); code != 200 || string(body) != "{\"slept_ms\":20}\n" {
		t.Errorf("GET /slow?ms=20 = %d %s", code, body)
	}
	if code, _ := ts.do(t, "GET", "/slow?ms=-1", ""); code != 422 {
		t.Errorf("GET /slow?ms=-1 = %d, want 422", code)
	}

	req, _ := http.NewRequest("GET", ts.URL+"/api/conversations/x/stream?n=3&interval_ms=1", nil)
	req.Header.Set("X-Session-API-Key", testKey)
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("stream Content-Type = %q", ct)
	}
	var events []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); line != "" {
			events = append(events, line)
		}
	}
	if diff := cmp.Diff([]string{`data: {"i":0}`, `data: {"i":1}`, `data: {"i":2}`}, events); diff != "" {
		t.Errorf("stream events (-want +got):\n%s", diff)
	}

	payload := strings.Repeat("0123456789", 100000)
	sum := sha256.Sum256([]byte(payload))
	code, body := ts.do(t, "POST", "/big", payload)
	got := mustJSON[map[string]any](t, body)
	if code != 200 || got["bytes"] != float64(len(payload)) || got["sha256"] != hex.EncodeToString(sum[:]) {
		t.Errorf("POST /big = %d %v, want %d bytes", code, got, len(payload))
	}
}

func TestUnknownRouteAndMethod(t *testing.T) {
	ts := newTestServer(t, Config{})
	for _, tt := range []struct{ method, path string }{{"GET", "/nope"}, {"POST", "/api/conversations/count"}} {
		code, body := ts.do(t, tt.method, tt.path, "")
		if code != 404 || string(body) != "{\"detail\":\"Not Found\"}\n" {
			t.Errorf("%s %s = %d %s, want 404 {\"detail\":\"Not Found\"}", tt.method, tt.path, code, body)
		}
	}
}

func TestServeStopsPromptly(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(Config{Keys: []string{testKey}, AnyID: true, ConversationsPath: t.TempDir()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()

	// A request that would run for a minute and an open WebSocket must not
	// hold the shutdown.
	slowDone := make(chan struct{})
	go func() {
		defer close(slowDone)
		req, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+"/slow?ms=60000", nil)
		req.Header.Set("X-Session-API-Key", testKey)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	conn := dialWS(t, "ws://"+ln.Addr().String()+"/sockets/events/"+newUUID(), testKey)
	readHello(t, conn)
	waitFor(t, func() bool { srv.track.mu.Lock(); defer srv.track.mu.Unlock(); return srv.track.n == 2 })

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve = %v, want nil after cancel", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
	<-slowDone
	conn.CloseNow()
}

// waitFor polls cond until it holds, failing t after 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
