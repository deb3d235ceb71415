package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestGlobalFileAndGitRoutesGoByPath: without ?cid= and without an
// upstream, the SDK's global file and git routes reach the conversation
// whose working directory holds their path (the deepest when nested),
// unchanged (the newer of two in one folder); a path in none, relative
// or climbing out by "..", is not routed to any.
func TestGlobalFileAndGitRoutesGoByPath(t *testing.T) {
	inner := func(name string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, name+" "+r.URL.RequestURI()+" "+r.Header.Get("X-Session-API-Key"))
		}))
		t.Cleanup(srv.Close)
		return srv.Listener.Addr().String()
	}
	fake := newFake(t)
	setDir := func(id, dir string) {
		fake.mu.Lock()
		fake.convs[id].rec.WorkingDir = dir
		fake.mu.Unlock()
	}
	a := fake.addCustom(inner("a"), []byte("key-a"))
	setDir(a, "/w/a")
	nested := fake.addCustom(inner("nested"), []byte("key-nested"))
	setDir(nested, "/w/a/sub")
	twin1 := fake.addCustom(inner("twin1"), []byte("key-t1"))
	setDir(twin1, "/w/twin")
	twin2 := fake.addCustom(inner("twin2"), []byte("key-t2"))
	setDir(twin2, "/w/twin")
	fake.mu.Lock()
	fake.convs[twin2].rec.CreatedAt = fake.convs[twin1].rec.CreatedAt.Add(time.Second)
	fake.mu.Unlock()
	p := startProxy(t, fake, nil)

	q := func(path string) string { return "path=" + url.QueryEscape(path) }
	for _, c := range []struct{ method, uri, want string }{
		{"GET", "/api/file/download?" + q("/w/a/README.md"), "a /api/file/download?" + q("/w/a/README.md") + " key-a"},
		{"GET", "/api/git/changes?" + q("/w/a"), "a /api/git/changes?" + q("/w/a") + " key-a"},
		{"GET", "/api/git/diff?" + q("/w/a/sub/x.go") + "&ref=HEAD", "nested /api/git/diff?" + q("/w/a/sub/x.go") + "&ref=HEAD key-nested"},
		{"POST", "/api/file/upload?" + q("/w/a/sub/new.txt"), "nested /api/file/upload?" + q("/w/a/sub/new.txt") + " key-nested"},
		// Two conversations in one folder: the newer (issue 28).
		{"GET", "/api/git/changes?" + q("/w/twin"), "twin2 /api/git/changes?" + q("/w/twin") + " key-t2"},
	} {
		resp, b := p.do(t, c.method, c.uri, outerKeys[0], strings.NewReader(""))
		if resp.StatusCode != http.StatusOK || string(b) != c.want {
			t.Errorf("%s %s = %d %q, want %q", c.method, c.uri, resp.StatusCode, b, c.want)
		}
	}
	for _, uri := range []string{
		"/api/file/download?" + q("/w/b/README.md"),      // no conversation's
		"/api/file/download?" + q("/w/a/../b/README.md"), // climbs out of a
		"/api/file/download?" + q("/w/ab/README.md"),     // a prefix, not a directory
		"/api/file/download?" + q("w/a/README.md"),       // relative
		"/api/file/download",                             // no path
		"/api/tools/list?" + q("/w/a"),                   // not a file or git route
	} {
		resp, b := p.do(t, "GET", uri, outerKeys[0], nil)
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s = %d %q, want 404", uri, resp.StatusCode, b)
		}
	}
	// The key is checked first.
	if resp, _ := p.do(t, "GET", "/api/file/download?"+q("/w/a/README.md"), "wrong", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a wrong key = %d, want 401", resp.StatusCode)
	}
}

// TestGlobalRoutesByPathWithUpstreamAndBash: issue 28 acceptance 5. With
// an upstream, file and git calls without cid whose path lies in a
// conversation still reach that conversation (the upstream cannot read
// its working directory); the SDK's RemoteWorkspace.execute_command
// (start_bash_command with a cwd, then polls naming only the command id)
// reaches the conversation whose working directory holds the cwd; calls
// naming no conversation go to the upstream, and without one are
// answered saying how to name one.
func TestGlobalRoutesByPathWithUpstreamAndBash(t *testing.T) {
	innerSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/bash/start_bash_command" {
			b, _ := io.ReadAll(r.Body)
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"cmd-1","command":"pwd","echo":`+string(b)+`}`)
			return
		}
		io.WriteString(w, "inner "+r.URL.RequestURI())
	}))
	t.Cleanup(innerSrv.Close)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "upstream "+r.URL.RequestURI())
	}))
	t.Cleanup(up.Close)
	fake := newFake(t)
	a := fake.addCustom(innerSrv.Listener.Addr().String(), []byte("key-a"))
	fake.mu.Lock()
	fake.convs[a].rec.WorkingDir = "/w/a"
	fake.mu.Unlock()
	q := func(path string) string { return "path=" + url.QueryEscape(path) }

	p := startProxy(t, fake, withUpstream(up.URL, newMemSecrets()))
	for _, c := range []struct{ method, uri, body, want string }{
		{"GET", "/api/git/changes?" + q("/w/a"), "", "inner /api/git/changes?" + q("/w/a")},
		{"GET", "/api/file/download?" + q("/w/a/x"), "", "inner /api/file/download?" + q("/w/a/x")},
		{"POST", "/api/bash/start_bash_command", `{"command":"pwd","cwd":"/w/a/sub"}`, `{"id":"cmd-1","command":"pwd","echo":{"command":"pwd","cwd":"/w/a/sub"}}`},
		{"GET", "/api/bash/bash_events/search?command_id__eq=cmd-1&kind__eq=BashOutput", "", "inner /api/bash/bash_events/search?command_id__eq=cmd-1&kind__eq=BashOutput"},
		// Naming no conversation: the upstream's.
		{"GET", "/api/git/changes?" + q("/elsewhere"), "", "upstream /api/git/changes?" + q("/elsewhere")},
		{"POST", "/api/bash/start_bash_command", `{"command":"pwd","cwd":null}`, "upstream /api/bash/start_bash_command"},
		{"GET", "/api/bash/bash_events/search?command_id__eq=other", "", "upstream /api/bash/bash_events/search?command_id__eq=other"},
	} {
		resp, b := p.do(t, c.method, c.uri, outerKeys[0], strings.NewReader(c.body))
		if resp.StatusCode != http.StatusOK || string(b) != c.want {
			t.Errorf("with an upstream: %s %s %s = %d %q, want %q", c.method, c.uri, c.body, resp.StatusCode, b, c.want)
		}
	}

	p = startProxy(t, fake, nil)
	resp, b := p.do(t, "POST", "/api/bash/start_bash_command", outerKeys[0], strings.NewReader(`{"command":"pwd","cwd":"/w/a"}`))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"id":"cmd-1"`) {
		t.Errorf("without an upstream: start_bash_command in /w/a = %d %q, want the conversation's answer", resp.StatusCode, b)
	}
	for _, c := range []struct{ method, uri, body string }{
		{"POST", "/api/bash/execute_bash_command", `{"command":"pwd"}`},
		{"GET", "/api/git/changes", ""},
		{"GET", "/api/file/download?" + q("/nowhere/x"), ""},
	} {
		resp, b := p.do(t, c.method, c.uri, outerKeys[0], strings.NewReader(c.body))
		var e struct{ Detail string }
		_ = json.Unmarshal(b, &e)
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(e.Detail, "?cid=") || !strings.Contains(e.Detail, "/api/conversations/<conversation id>/") {
			t.Errorf("without an upstream: %s %s %s = %d %q, want 404 saying how to name the conversation (cid or the scoped route)", c.method, c.uri, c.body, resp.StatusCode, b)
		}
	}
}
