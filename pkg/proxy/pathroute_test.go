package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// TestGlobalFileAndGitRoutesGoByPath: without ?cid= and without an
// upstream, the SDK's global file and git routes reach the conversation
// whose working directory holds their path (the deepest when nested),
// unchanged; a path in none, in two alike, relative or climbing out by
// "..", is not routed to any.
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
	p := startProxy(t, fake, nil)

	q := func(path string) string { return "path=" + url.QueryEscape(path) }
	for _, c := range []struct{ method, uri, want string }{
		{"GET", "/api/file/download?" + q("/w/a/README.md"), "a /api/file/download?" + q("/w/a/README.md") + " key-a"},
		{"GET", "/api/git/changes?" + q("/w/a"), "a /api/git/changes?" + q("/w/a") + " key-a"},
		{"GET", "/api/git/diff?" + q("/w/a/sub/x.go") + "&ref=HEAD", "nested /api/git/diff?" + q("/w/a/sub/x.go") + "&ref=HEAD key-nested"},
		{"POST", "/api/file/upload?" + q("/w/a/sub/new.txt"), "nested /api/file/upload?" + q("/w/a/sub/new.txt") + " key-nested"},
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
		"/api/git/changes?" + q("/w/twin"),               // two conversations alike
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
