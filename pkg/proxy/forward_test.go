package proxy

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/ohd-dev/ohd/pkg/store"
)

// echoed is the stand-in's /echo/ answer.
type echoed struct {
	Method     string              `json:"method"`
	Path       string              `json:"path"`
	RawQuery   string              `json:"raw_query"`
	Host       string              `json:"host"`
	Headers    map[string][]string `json:"headers"`
	Body       string              `json:"body"`
	BodyBytes  int                 `json:"body_bytes"`
	RemoteAddr string              `json:"remote_addr"`
}

func TestForwardHeadersAndQuery(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, nil)
	id := p.create(t, nil)
	inner := fake.innerOf(id)
	touches := len(fake.called("touch"))

	path := "/api/conversations/" + id + "/echo/some%2Fpath/x?keep=1&session_api_key=" + outerKeys[0] +
		"&Session_Api_Key=a&session%5Fapi%5Fkey=b&access_token=c&authorization=d&b=2&empty="
	// POST goes through httputil.ReverseProxy, GET through the bodiless
	// fast path: the same rules hold on both.
	for _, method := range []string{"POST", "GET", "HEAD"} {
		var body io.Reader
		want := "hello"
		if method == "POST" {
			body = strings.NewReader(want)
		} else {
			want = ""
		}
		resp, b := p.do(t, method, path, outerKeys[0], body,
			"Authorization", "Bearer "+outerKeys[1],
			"Cookie", "oh_workspace_session_key="+outerKeys[2],
			"Connection", "X-Hop-Named",
			"X-Hop-Named", "v",
			"Keep-Alive", "timeout=5",
			"Proxy-Authorization", "Basic eA==",
			"Forwarded", "for=192.0.2.1",
			"X-Forwarded-For", "192.0.2.1",
			"X-Forwarded-Host", "evil.example",
			"Te", "trailers",
			"X-Custom", "kept",
			"Content-Type", "text/plain",
		)
		if resp.StatusCode != 200 {
			t.Fatalf("%s %s = %d %s", method, path, resp.StatusCode, b)
		}
		if method == "HEAD" {
			if len(b) != 0 || resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("HEAD = %q %v, want headers only", b, resp.Header)
			}
			continue
		}
		e := decode[echoed](t, b)
		if e.Method != method || e.Path != "/api/conversations/"+id+"/echo/some/path/x" || e.Body != want {
			t.Errorf("inner saw %s %s body %q", e.Method, e.Path, e.Body)
		}
		if e.RawQuery != "keep=1&b=2&empty=" {
			t.Errorf("inner saw query %q, want %q", e.RawQuery, "keep=1&b=2&empty=")
		}
		if e.Host != p.host {
			t.Errorf("inner saw Host %q, want the client's %q", e.Host, p.host)
		}
		for _, h := range []string{"Authorization", "Cookie", "X-Hop-Named", "Keep-Alive", "Proxy-Authorization", "Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "Connection", "Te"} {
			if v, ok := e.Headers[h]; ok {
				t.Errorf("inner saw header %s: %q, want it stripped", h, v)
			}
		}
		if got := e.Headers["X-Session-Api-Key"]; len(got) != 1 || got[0] != string(inner.key) {
			t.Errorf("inner saw X-Session-API-Key %q, want only the inner key", got)
		}
		if got := e.Headers["X-Custom"]; len(got) != 1 || got[0] != "kept" {
			t.Errorf("inner saw X-Custom %q, want kept", got)
		}
		for _, k := range outerKeys {
			if strings.Contains(string(b), k) {
				t.Errorf("an outer key reached the inner server: %s", b)
			}
		}
	}
	if n := len(fake.called("touch")) - touches; n < 1 {
		t.Errorf("forwarded request touched the conversation %d times, want at least once", n)
	}
}

func TestForwardStartsStopped(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, nil)
	id := p.create(t, nil)
	fake.stopConv(id)
	resp, b := p.do(t, "GET", "/api/conversations/"+id+"/echo/x", outerKeys[0], nil)
	if resp.StatusCode != 200 {
		t.Fatalf("GET after stop = %d %s, want 200 from a restarted inner server", resp.StatusCode, b)
	}
	if got := fake.called("start"); len(got) != 1 {
		t.Errorf("starts = %v, want one", got)
	}
	for _, tc := range []struct {
		path string
		code int
	}{
		{"/api/conversations/" + store.NewID() + "/echo/x", 404},
		{"/api/conversations/xyz/echo/x", 422},
	} {
		if resp, b := p.do(t, "GET", tc.path, outerKeys[0], nil); resp.StatusCode != tc.code {
			t.Errorf("GET %s = %d %s, want %d", tc.path, resp.StatusCode, b, tc.code)
		}
	}
}

func TestRedirectDoesNotRevealInner(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, nil)
	id := p.create(t, nil)
	inner := fake.innerOf(id)
	_, port, _ := net.SplitHostPort(inner.addr)
	for _, host := range []string{"", inner.addr, "localhost:" + port} {
		t.Run("host="+host, func(t *testing.T) {
			var hdr []string
			if host != "" {
				// A Host naming the inner address makes the stand-in
				// redirect to it: ohd must rewrite that.
				hdr = []string{"Host", host}
			}
			resp, b := p.do(t, "GET", "/api/conversations/"+id+"/redirect", outerKeys[0], nil, hdr...)
			if resp.StatusCode != http.StatusFound {
				t.Fatalf("GET redirect = %d %s, want 302", resp.StatusCode, b)
			}
			loc := resp.Header.Get("Location")
			if strings.Contains(loc, ":"+port) || strings.Contains(string(b), ":"+port) {
				t.Errorf("redirect reveals the inner port %s: Location %q, body %q", port, loc, b)
			}
			if host != "" && loc != "/api/conversations/"+id+"/echo/redirected" {
				t.Errorf("Location = %q, want the relative path", loc)
			}
		})
	}
}

func TestErrorBodyDoesNotRevealInner(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, nil)
	id := p.create(t, nil)
	_, port, _ := net.SplitHostPort(fake.innerOf(id).addr)
	resp, b := p.do(t, "GET", "/api/conversations/"+id+"/error", outerKeys[0], nil)
	if resp.StatusCode != 500 {
		t.Fatalf("GET error = %d %s, want the inner 500", resp.StatusCode, b)
	}
	if strings.Contains(string(b), ":"+port) || strings.Contains(string(b), "127.0.0.1:") {
		t.Errorf("error body reveals the inner address: %s", b)
	}
	if !strings.Contains(string(b), scrubbedAddr) {
		t.Errorf("error body %s: want the address replaced by %q", b, scrubbedAddr)
	}
}

func TestInnerDownIs502(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, nil)
	id := p.create(t, nil)
	inner := fake.innerOf(id)
	_, port, _ := net.SplitHostPort(inner.addr)
	inner.stop()
	resp, b := p.do(t, "GET", "/api/conversations/"+id+"/echo/x", outerKeys[0], nil)
	if resp.StatusCode != http.StatusBadGateway || !strings.HasPrefix(string(b), `{"detail":`) {
		t.Fatalf("GET with the inner server down = %d %s, want 502 JSON", resp.StatusCode, b)
	}
	if strings.Contains(string(b), port) || strings.Contains(string(b), "127.0.0.1") {
		t.Errorf("502 body reveals the inner address: %s", b)
	}
}

// chunked hides its length so the client sends a chunked body.
type chunked struct{ r io.Reader }

func (c chunked) Read(p []byte) (int, error) { return c.r.Read(p) }

func TestBodyLimit(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, func(o *Options) { o.MaxBody = 4096 })
	id := p.create(t, nil)
	big := "/api/conversations/" + id + "/big"
	for _, tc := range []struct {
		name string
		body io.Reader
		code int
	}{
		{"at the limit", bytes.NewReader(make([]byte, 4096)), 200},
		{"over, with length", bytes.NewReader(make([]byte, 4097)), 413},
		{"over, chunked", chunked{bytes.NewReader(make([]byte, 100000))}, 413},
		{"at the limit, chunked", chunked{bytes.NewReader(make([]byte, 4096))}, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := p.do(t, "POST", big, outerKeys[0], tc.body)
			if resp.StatusCode != tc.code {
				t.Errorf("POST big = %d %s, want %d", resp.StatusCode, b, tc.code)
			}
		})
	}
	body := `{"workspace":{"working_dir":"` + fake.root + `"},"pad":"` + strings.Repeat("x", 5000) + `"}`
	if resp, b := p.do(t, "POST", "/api/conversations", outerKeys[0], chunked{strings.NewReader(body)}); resp.StatusCode != 413 {
		t.Errorf("oversize create = %d %s, want 413", resp.StatusCode, b)
	}
}

func TestStreamingIsIncremental(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, nil)
	id := p.create(t, nil)
	// The second event comes a minute after the first: the first must
	// reach the client long before that.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", p.url+"/api/conversations/"+id+"/stream?n=2&interval_ms=60000", nil)
	req.Header.Set("X-Session-API-Key", outerKeys[0])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type = %q", ct)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "data: {\"i\":0}\n" {
		t.Fatalf("first streamed line = %q, %v; want the first event before the stream ends", line, err)
	}
}

func TestScrubString(t *testing.T) {
	const addr = "127.0.0.1:41234"
	tests := []struct{ in, want string }{
		{"http://127.0.0.1:41234/api/x?y=1", "/api/x?y=1"},
		{"HTTP://LOCALHOST:41234/a", "/a"},
		{"<http://127.0.0.1:41234/p>; rel=next", "</p>; rel=next"},
		{"0; url=http://[::1]:41234/z", "0; url=/z"},
		{"listening on 127.0.0.1:41234 and 0.0.0.0:8000", "listening on " + scrubbedAddr + " and " + scrubbedAddr},
		{"ws://127.0.0.1:41234/sockets", "/sockets"},
		{"https://example.com:8443/x", "https://example.com:8443/x"},
		{"Mon, 01 Jan 2024 10:00:00 GMT", "Mon, 01 Jan 2024 10:00:00 GMT"},
		{"127.0.0.2:9 localhost:5", scrubbedAddr + " " + scrubbedAddr},
	}
	for _, tc := range tests {
		if got := scrubString(tc.in, addr); got != tc.want {
			t.Errorf("scrubString(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestStripHopByHop(t *testing.T) {
	h := http.Header{}
	h.Set("Connection", "keep-alive, X-A,x-b")
	h.Set("X-A", "1")
	h.Set("X-B", "2")
	h.Set("X-C", "3")
	h.Set("Upgrade", "websocket")
	h.Set("Te", "trailers")
	h.Set("Transfer-Encoding", "chunked")
	stripHopByHop(h)
	if len(h) != 1 || h.Get("X-C") != "3" {
		t.Errorf("stripHopByHop left %v, want only X-C", h)
	}
}

// TestTargetDial checks that a target's own Dial (the manager's way into a
// container's network namespace) carries every kind of request — forwarded,
// metadata and WebSocket — and that its address is scrubbed like the
// published one.
func TestTargetDial(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, nil)
	id := p.create(t, nil)
	fake.viaDial = true

	resp, b := p.do(t, "GET", "/api/conversations/"+id+"/echo/x", outerKeys[0], nil)
	if resp.StatusCode != 200 {
		t.Fatalf("forward through Dial = %d %s", resp.StatusCode, b)
	}
	resp, b = p.do(t, "GET", "/api/conversations/"+id, outerKeys[0], nil)
	if resp.StatusCode != 200 || resp.Header.Get("X-Ohd-Source") != "inner" {
		t.Errorf("GET through Dial = %d (source %q) %s, want the inner answer", resp.StatusCode, resp.Header.Get("X-Ohd-Source"), b)
	}
	c := p.dialWS(t, id, "", keyHeader(outerKeys[0]))
	expectHello(t, c, id)
	c.Close(websocket.StatusNormalClosure, "")
	if n := fake.dials.Load(); n < 2 {
		t.Errorf("Dial called %d times, want at least 2 (HTTP, WebSocket)", n)
	}

	// The stand-in's /error names its listen address, which is DialAddr.
	fake.mu.Lock()
	inner := fake.convs[id].inner.addr
	fake.mu.Unlock()
	resp, b = p.do(t, "GET", "/api/conversations/"+id+"/error", outerKeys[0], nil)
	if resp.StatusCode != 500 || bytes.Contains(b, []byte(inner)) {
		t.Errorf("/error through Dial = %d %s, want it without %s", resp.StatusCode, b, inner)
	}
}

// TestCutAnswerIsNotPassedOffAsWhole checks that when the inner server's
// answer stops short (of its Content-Length, or of the chunked encoding's
// last chunk), the client's connection is cut too (it sees an error),
// instead of a clean, shorter body.
func TestCutAnswerIsNotPassedOffAsWhole(t *testing.T) {
	answers := map[string]string{
		"length":  "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\nonly ten b",
		"chunked": "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\na\r\nonly ten b\r\n",
	}
	for name, answer := range answers {
		t.Run(name, func(t *testing.T) {
			fake := newFake(t)
			p := startProxy(t, fake, nil)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					go func() {
						defer c.Close()
						if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
							return
						}
						_, _ = io.WriteString(c, answer)
					}()
				}
			}()
			id := fake.addCustom(ln.Addr().String(), []byte("k"))
			req, _ := http.NewRequest("GET", p.url+"/api/conversations/"+id+"/cut", nil)
			req.Header.Set("X-Session-API-Key", outerKeys[0])
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return // cut before the headers: also not a whole answer
			}
			defer resp.Body.Close()
			if b, err := io.ReadAll(resp.Body); err == nil {
				t.Errorf("a cut answer reached the client as a whole one: %d %q", resp.StatusCode, b)
			}
		})
	}
}
