package proxy

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"

	"github.com/ohd-dev/ohd/pkg/openhands"
	"github.com/ohd-dev/ohd/pkg/store"
	"github.com/ohd-dev/ohd/pkg/version"
)

// TestCORSPreflight checks the answers of LocalhostCORSMiddleware
// (middleware.py L34-60 over Starlette's CORSMiddleware): preflights are
// answered before any key check, loopback origins of any port allowed,
// others only when configured.
func TestCORSPreflight(t *testing.T) {
	p := startProxy(t, newFake(t), func(o *Options) { o.CORSOrigins = []string{"https://Canvas.Example.com"} })
	tests := []struct {
		origin, method string
		wantCode       int
		wantOrigin     string
		wantBody       string
	}{
		{"http://localhost:3001", "POST", 200, "http://localhost:3001", "OK"},
		{"http://127.0.0.1:45678", "DELETE", 200, "http://127.0.0.1:45678", "OK"},
		{"http://[::1]:8080", "GET", 200, "http://[::1]:8080", "OK"},
		{"https://canvas.example.com", "GET", 200, "https://canvas.example.com", "OK"},
		{"https://evil.example.com", "POST", 400, "", "Disallowed CORS origin"},
		{"http://localhost.evil.com", "POST", 400, "", "Disallowed CORS origin"},
		{"null", "POST", 400, "", "Disallowed CORS origin"},
		{"http://localhost:3001", "TRACE", 400, "http://localhost:3001", "Disallowed CORS method"},
	}
	pna, b := p.do(t, "OPTIONS", "/api/conversations", "", nil, "Origin", "https://canvas.example.com", "Access-Control-Request-Method", "GET", "Access-Control-Request-Private-Network", "true")
	if pna.StatusCode != 400 || string(b) != "Disallowed CORS private-network" {
		t.Errorf("private network preflight = %d %q, want 400 \"Disallowed CORS private-network\"", pna.StatusCode, b)
	}
	for _, tc := range tests {
		for _, path := range []string{"/api/conversations", "/api/conversations/" + store.NewID() + "/events", "/server_info", "/no/such"} {
			resp, b := p.do(t, "OPTIONS", path, "", nil, "Origin", tc.origin, "Access-Control-Request-Method", tc.method,
				"Access-Control-Request-Headers", "x-session-api-key,content-type")
			h := resp.Header
			if resp.StatusCode != tc.wantCode || string(b) != tc.wantBody {
				t.Errorf("preflight %s from %s for %s = %d %q, want %d %q", path, tc.origin, tc.method, resp.StatusCode, b, tc.wantCode, tc.wantBody)
			}
			want := map[string]string{
				"Access-Control-Allow-Origin":      tc.wantOrigin,
				"Access-Control-Allow-Credentials": "true",
				"Access-Control-Allow-Methods":     "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT",
				"Access-Control-Allow-Headers":     "x-session-api-key,content-type",
				"Access-Control-Max-Age":           "600",
				"Vary":                             "Origin",
			}
			got := map[string]string{}
			for k := range want {
				got[k] = h.Get(k)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("preflight %s from %s: headers (-want +got):\n%s", path, tc.origin, d)
			}
		}
	}
}

// TestCORSSimpleResponses checks the headers added to real answers: the
// origin echoed only when allowed, credentials always, no expose list.
func TestCORSSimpleResponses(t *testing.T) {
	p := startProxy(t, newFake(t), nil)
	for _, tc := range []struct{ origin, want string }{
		{"http://localhost:5173", "http://localhost:5173"},
		{"http://127.0.0.1:1", "http://127.0.0.1:1"},
		{"https://evil.example.com", ""},
	} {
		resp, _ := p.do(t, "GET", "/api/conversations/count", outerKeys[0], nil, "Origin", tc.origin)
		if resp.StatusCode != 200 {
			t.Errorf("count from %s = %d", tc.origin, resp.StatusCode)
		}
		if got := resp.Header.Get("Access-Control-Allow-Origin"); got != tc.want {
			t.Errorf("count from %s: Access-Control-Allow-Origin = %q, want %q", tc.origin, got, tc.want)
		}
		if got := resp.Header.Get("Access-Control-Allow-Credentials"); got != "true" {
			t.Errorf("count from %s: Access-Control-Allow-Credentials = %q, want true", tc.origin, got)
		}
		if got := resp.Header.Get("Access-Control-Expose-Headers"); got != "" {
			t.Errorf("count from %s: Access-Control-Expose-Headers = %q, want none", tc.origin, got)
		}
		// A key is still needed: CORS is no authentication.
		resp, _ = p.do(t, "GET", "/api/conversations/count", "", nil, "Origin", tc.origin)
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("count from %s without a key = %d, want 401", tc.origin, resp.StatusCode)
		}
	}
	// No Origin: no CORS headers at all.
	resp, _ := p.do(t, "GET", "/api/conversations/count", outerKeys[0], nil)
	if v := resp.Header.Get("Access-Control-Allow-Credentials"); v != "" {
		t.Errorf("count without Origin: Access-Control-Allow-Credentials = %q", v)
	}
}

// TestCORSWebSocketOrigin: a browser page of a foreign origin cannot open
// a conversation's socket, even with a valid key; loopback pages and
// clients that send no Origin can.
func TestCORSWebSocketOrigin(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, func(o *Options) { o.CORSOrigins = []string{"https://canvas.example.com"} })
	id := p.create(t, nil)
	url := "ws://" + p.host + "/sockets/events/" + id
	for _, tc := range []struct {
		origin string
		ok     bool
	}{
		{"", true},
		{"http://localhost:3001", true},
		{"https://canvas.example.com", true},
		{"https://evil.example.com", false},
	} {
		h := http.Header{"X-Session-API-Key": {outerKeys[0]}}
		if tc.origin != "" {
			h.Set("Origin", tc.origin)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: h})
		cancel()
		if tc.ok != (err == nil) {
			t.Errorf("socket from origin %q: err = %v, want ok=%v", tc.origin, err, tc.ok)
		}
		if !tc.ok && (resp == nil || resp.StatusCode != http.StatusForbidden) {
			t.Errorf("socket from origin %q: response %v, want 403", tc.origin, resp)
		}
		if c != nil {
			c.Close(websocket.StatusNormalClosure, "")
		}
	}
}

func TestParseCORSOrigin(t *testing.T) {
	for in, want := range map[string]string{
		"https://Canvas.example.com": "https://canvas.example.com",
		"http://192.168.1.5:3001/":   "http://192.168.1.5:3001",
		"https://x.example.com/path": "",
		"ftp://x.example.com":        "",
		"canvas.example.com":         "",
		"https://u:p@x.example.com":  "",
		"https://x.example.com/?a=b": "",
		"":                           "",
	} {
		got, err := ParseCORSOrigin(in)
		if got != want || (want == "") != (err != nil) {
			t.Errorf("ParseCORSOrigin(%q) = %q, %v, want %q", in, got, err, want)
		}
	}
}

// TestServerInfoWithoutKey: /server_info answers without a key, from ohd
// itself without an upstream, in the shape of the agent server's
// ServerInfo (server_details_router.py L34-80).
func TestServerInfoWithoutKey(t *testing.T) {
	p := startProxy(t, newFake(t), nil)
	resp, b := p.do(t, "GET", "/server_info", "", nil)
	if resp.StatusCode != 200 {
		t.Fatalf("GET /server_info = %d %s", resp.StatusCode, b)
	}
	var info map[string]json.RawMessage
	if err := json.Unmarshal(b, &info); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"uptime", "idle_time", "title", "version", "sdk_version", "tools_version", "workspace_version",
		"build_git_sha", "build_git_ref", "python_version", "usable_tools", "runtime_idle_timeout_seconds", "capabilities",
		"max_foreground_terminal_timeout_seconds", "docs", "redoc", "ohd_version"} {
		if _, ok := info[k]; !ok {
			t.Errorf("/server_info lacks %q: %s", k, b)
		}
	}
	// Issue 28: ohd's build id ("3a21a0b") as version made the newest
	// Canvas refuse ohd; version is the agent server API ohd implements.
	var v, ohdV string
	_ = json.Unmarshal(info["version"], &v)
	_ = json.Unmarshal(info["ohd_version"], &ohdV)
	if v != openhands.ContractVersion || !openhands.AcceptedVersion(v) || ohdV != version.Version {
		t.Errorf("/server_info version %q ohd_version %q, want %q (accepted by Canvas) and %q", v, ohdV, openhands.ContractVersion, version.Version)
	}
}

// TestServerInfoUpstreamVersionCanvasRefuses: an upstream whose version
// Canvas would refuse is answered with the contract version instead.
func TestServerInfoUpstreamVersionCanvasRefuses(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"title":"OpenHands Agent Server","version":"unknown","capabilities":[]}`))
	}))
	t.Cleanup(up.Close)
	p := startProxy(t, newFake(t), withUpstream(up.URL, newMemSecrets()))
	_, b := p.do(t, "GET", "/server_info", "", nil)
	var info struct {
		Version    string `json:"version"`
		OhdVersion string `json:"ohd_version"`
	}
	if err := json.Unmarshal(b, &info); err != nil {
		t.Fatal(err)
	}
	if info.Version != openhands.ContractVersion || info.OhdVersion != version.Version {
		t.Errorf("/server_info = %s, want version %q and ohd_version %q", b, openhands.ContractVersion, version.Version)
	}
}

// TestServerInfoFromUpstreamFiltersCapabilities: with an upstream, its
// answer passes with the capabilities ohd does not serve taken out.
func TestServerInfoFromUpstreamFiltersCapabilities(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/server_info" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"title":"OpenHands Agent Server","version":"1.47.0","uptime":3,"capabilities":["credential_binding_v1","conversation_runtime_routes_v1","profile_secret_scope_v1"]}`))
	}))
	t.Cleanup(up.Close)
	p := startProxy(t, newFake(t), withUpstream(up.URL, newMemSecrets()))
	resp, b := p.do(t, "GET", "/server_info", "", nil)
	if resp.StatusCode != 200 {
		t.Fatalf("GET /server_info = %d %s", resp.StatusCode, b)
	}
	var info struct {
		Version      string   `json:"version"`
		Capabilities []string `json:"capabilities"`
	}
	if err := json.Unmarshal(b, &info); err != nil {
		t.Fatal(err)
	}
	if info.Version != "1.47.0" || len(info.Capabilities) != 0 {
		t.Errorf("/server_info = %s, want the upstream's version and no capability (no conversation image known)", b)
	}
}

// TestPrepareForSandboxPause: the agent server's drain route is not
// taken for a conversation id.
func TestPrepareForSandboxPause(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, nil)
	resp, b := p.do(t, "POST", "/api/conversations/prepare-for-sandbox-pause", outerKeys[0], nil)
	if resp.StatusCode != http.StatusNoContent {
		t.Errorf("POST prepare-for-sandbox-pause = %d %s, want 204", resp.StatusCode, b)
	}
	if n := len(fake.called("target")); n != 0 {
		t.Errorf("prepare-for-sandbox-pause reached a conversation %d times", n)
	}
}

// TestStoppedConversationNeverLive: a conversation whose container is
// not running is never reported "running" (the agent server turns a
// stale RUNNING into ERROR when it loads it, event_service.py L1140-1146),
// and its answer from the host files has the live answer's fields.
func TestStoppedConversationNeverLive(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, nil)
	id := p.create(t, nil)
	fake.stopConv(id)
	fake.mu.Lock()
	if fake.innerInfo == nil {
		fake.innerInfo = map[string]json.RawMessage{}
	}
	fake.innerInfo[id] = json.RawMessage(`{"id":"` + id + `","execution_status":"running","workspace":{"kind":"LocalWorkspace","working_dir":"/w"}}`)
	fake.mu.Unlock()
	resp, b := p.do(t, "GET", "/api/conversations/"+id, outerKeys[0], nil)
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"execution_status":"error"`) {
		t.Errorf("GET stopped conversation = %d %s, want execution_status error", resp.StatusCode, b)
	}
	resp, b = p.do(t, "GET", "/api/conversations/count?status=running", outerKeys[0], nil)
	if strings.TrimSpace(string(b)) != "0" {
		t.Errorf("count?status=running = %s, want 0", b)
	}
}

// TestServerInfoLearnsTheImagesCapabilities: once a conversation's inner
// server has said (its /server_info) that it serves the scoped runtime
// routes, ohd advertises them, so clients call
// /api/conversations/{id}/bash|git|file rather than ?cid=.
func TestServerInfoLearnsTheImagesCapabilities(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, nil)
	var info struct{ Capabilities []string }
	_, b := p.do(t, "GET", "/server_info", "", nil)
	if err := json.Unmarshal(b, &info); err != nil || len(info.Capabilities) != 0 {
		t.Fatalf("/server_info before any conversation = %s, want no capability", b)
	}
	p.create(t, nil)
	_, b = p.do(t, "GET", "/server_info", "", nil)
	if err := json.Unmarshal(b, &info); err != nil || !slices.Equal(info.Capabilities, []string{CapabilityRuntimeRoutes}) {
		t.Errorf("/server_info after a conversation of the stand-in image = %s, want [%s]", b, CapabilityRuntimeRoutes)
	}
}

// TestCORSHeadersOnceWhenTheUpstreamAnswersCORSToo: the real agent server
// behind ohd (the upstream, or an inner server) adds its own CORS headers;
// the browser must see one Access-Control-Allow-Origin, ohd's.
func TestCORSHeadersOnceWhenTheUpstreamAnswersCORSToo(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Access-Control-Allow-Origin", r.Header.Get("Origin"))
		w.Header().Set("Access-Control-Allow-Credentials", "true")
		w.Header().Set("Access-Control-Expose-Headers", "X-Upstream")
		w.Header().Set("Vary", "Origin, Accept-Encoding")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	t.Cleanup(up.Close)
	p := startProxy(t, newFake(t), withUpstream(up.URL, newMemSecrets()))
	for _, tc := range []struct{ origin, want string }{{"http://localhost:3001", "http://localhost:3001"}, {"https://evil.example.com", ""}} {
		resp, _ := p.do(t, "GET", "/api/settings", outerKeys[0], nil, "Origin", tc.origin)
		if got := resp.Header.Values("Access-Control-Allow-Origin"); strings.Join(got, "|") != tc.want {
			t.Errorf("from %s: Access-Control-Allow-Origin = %q, want just %q", tc.origin, got, tc.want)
		}
		if got := resp.Header.Values("Access-Control-Allow-Credentials"); len(got) != 1 {
			t.Errorf("from %s: Access-Control-Allow-Credentials = %q, want one", tc.origin, got)
		}
		if got := resp.Header.Get("Access-Control-Expose-Headers"); got != "" {
			t.Errorf("from %s: Access-Control-Expose-Headers = %q, want none", tc.origin, got)
		}
	}
	resp, _ := p.do(t, "GET", "/api/settings", outerKeys[0], nil, "Origin", "http://localhost:3001")
	if got := resp.Header.Values("Vary"); strings.Join(got, "|") != "Origin, Accept-Encoding" {
		t.Errorf("Vary = %q, want one Origin and the upstream's others", got)
	}
}
