package proxy

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ohd-dev/ohd/pkg/conversation"
	"github.com/ohd-dev/ohd/pkg/openhands"
	"github.com/ohd-dev/ohd/pkg/store"
)

// The front's tests hold the lean path (front.go, lean.go) to its rule:
// for every request, what the client receives and what the inner server
// receives are the same whether the front answers it or net/http's server
// does (the old path: an http.Server serving serveHTTP).

// Conversation ids of leanConvs.
const (
	leanConvID     = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d" // running, served by the raw inner server
	leanLocalID    = "1a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d" // the local runtime: no inner server
	leanConflictID = "2a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d" // Target fails with a conflict
	leanUnknownID  = "3a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d" // not a conversation
)

// leanInnerKey is the inner key of leanConvID.
var leanInnerKey = []byte("inner-key-of-the-lean-tests-0123")

// leanConvs is a Conversations of fixed conversations, for the front's
// tests.
type leanConvs struct {
	addr    string
	touches atomic.Int64
}

func (c *leanConvs) rec(id string) (store.Conversation, bool) {
	switch id {
	case leanConvID, leanConflictID:
		return store.Conversation{ID: id, State: store.StateRunning, Runtime: "docker", WorkingDir: "/", Workspace: "/"}, true
	case leanLocalID:
		return store.Conversation{ID: id, State: store.StateRunning, Runtime: "local", WorkingDir: "/", Workspace: "/"}, true
	}
	return store.Conversation{}, false
}

func (c *leanConvs) Create(context.Context, conversation.CreateRequest) (store.Conversation, error) {
	return store.Conversation{}, conversation.ErrInvalid
}

func (c *leanConvs) Get(id string) (store.Conversation, error) {
	if r, ok := c.rec(id); ok {
		return r, nil
	}
	return store.Conversation{}, conversation.ErrNotFound
}

func (c *leanConvs) List() []store.Conversation {
	var out []store.Conversation
	for _, id := range []string{leanConvID, leanLocalID, leanConflictID} {
		r, _ := c.rec(id)
		out = append(out, r)
	}
	return out
}

func (c *leanConvs) Target(_ context.Context, id string) (conversation.Target, error) {
	switch id {
	case leanConvID:
		return conversation.Target{Addr: c.addr, InnerKey: leanInnerKey}, nil
	case leanLocalID:
		return conversation.Target{}, nil
	case leanConflictID:
		return conversation.Target{}, errors.Join(conversation.ErrConflict, errors.New("conversation is being removed"))
	}
	return conversation.Target{}, conversation.ErrNotFound
}

func (c *leanConvs) Remove(context.Context, string, conversation.RemoveOptions) (store.Conversation, error) {
	return store.Conversation{}, conversation.ErrConflict
}

func (c *leanConvs) Touch(string) { c.touches.Add(1) }

func (c *leanConvs) InnerInfo(string) (json.RawMessage, error) { return nil, openhands.ErrNoState }

// innerSaw is a request as the raw inner server read it.
type innerSaw struct {
	Method, URI, Host string
	Header            http.Header
	Body              string
}

// rawInner is an inner server that writes its answers as raw bytes, so
// that a test can send what net/http's server never would (a cut body, a
// head over 4 KiB, a 1xx before the answer): the first segment of the
// tail after the conversation id names the answer (see answer). It
// records every request it reads.
type rawInner struct {
	addr string
	// slow is how long the "slow" answer waits.
	slow time.Duration

	done chan struct{} // closed when the test ends: "slow" stops waiting

	mu    sync.Mutex
	saw   []innerSaw
	conns map[net.Conn]struct{}
}

func startRawAnswers(t testing.TB) *rawInner {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	in := &rawInner{addr: ln.Addr().String(), slow: 300 * time.Millisecond, done: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			in.mu.Lock()
			in.conns[c] = struct{}{}
			in.mu.Unlock()
			wg.Go(func() { in.serveConn(c) })
		}
	})
	t.Cleanup(func() {
		close(in.done)
		ln.Close()
		in.mu.Lock()
		for c := range in.conns {
			c.Close()
		}
		in.mu.Unlock()
		wg.Wait()
	})
	return in
}

func (in *rawInner) serveConn(c net.Conn) {
	defer func() {
		c.Close()
		in.mu.Lock()
		delete(in.conns, c)
		in.mu.Unlock()
	}()
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return
		}
		in.mu.Lock()
		in.saw = append(in.saw, innerSaw{Method: req.Method, URI: req.RequestURI, Host: req.Host, Header: req.Header, Body: string(body)})
		in.mu.Unlock()
		raw, closeAfter := in.answer(req)
		if raw == "" {
			return
		}
		if _, err := io.WriteString(c, raw); err != nil || closeAfter {
			return
		}
	}
}

func (in *rawInner) setSlow(d time.Duration) {
	in.mu.Lock()
	in.slow = d
	in.mu.Unlock()
}

// take returns the requests read since the last take.
func (in *rawInner) take() []innerSaw {
	in.mu.Lock()
	defer in.mu.Unlock()
	s := in.saw
	in.saw = nil
	return s
}

// chunkedBody encodes parts as a chunked body, with the trailer lines given.
func chunkedBody(parts []string, trailer ...string) string {
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(strconv.FormatInt(int64(len(p)), 16) + "\r\n" + p + "\r\n")
	}
	b.WriteString("0\r\n")
	for _, l := range trailer {
		b.WriteString(l + "\r\n")
	}
	b.WriteString("\r\n")
	return b.String()
}

// innerBig is a body of n bytes that is not HTML (sniffed as text/plain).
func innerBig(n int) string {
	return strings.Repeat("0123456789abcdef", n/16+1)[:n]
}

// answer is the raw answer to req, by the first segment of its tail, and
// whether the connection ends after it ("" ends it without an answer).
func (in *rawInner) answer(req *http.Request) (string, bool) {
	_, port, _ := net.SplitHostPort(in.addr)
	addr, lo := in.addr, "localhost:"+port
	rest, _ := strings.CutPrefix(req.URL.Path, conversationsPrefix)
	_, tail, _ := strings.Cut(rest, "/")
	name, _, _ := strings.Cut(tail, "/")
	withLength := func(status, lines, body string) string {
		return "HTTP/1.1 " + status + "\r\n" + lines + "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	}
	echo := `{"method":"` + req.Method + `","uri":` + strconv.Quote(req.RequestURI) + "}\n"
	closeAfter := false
	var raw string
	switch name {
	case "created":
		raw = withLength("201 Created", "Content-Type: application/json\r\nDate: Mon, 07 Dec 2026 22:10:00 GMT\r\n", echo)
	case "odd":
		raw = withLength("299 Whatever", "content-type: text/plain\r\nx-lower-case: v\r\nX-Empty:\r\nX-Multi: a\r\nX-Multi: b\r\nX-High: caf\xc3\xa9\r\nX-Tab: a\tb\r\n", "hi")
	case "cookie":
		raw = withLength("200 OK", "Content-Type: application/json\r\nSet-Cookie: sid=1; Path=/\r\nset-cookie: other=2\r\nSet-Cookie2: x=1\r\nKeep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nProxy-Authenticate: Basic\r\nTe: trailers\r\nUpgrade: h2c\r\nX-Kept: yes\r\n", echo)
	case "addr":
		raw = withLength("200 OK", "Content-Type: application/json\r\nLocation: http://"+addr+"/api/x\r\nContent-Location: http://127.0.0.1:"+port+
			"\r\nLink: <http://"+lo+"/next>; rel=\"next\"\r\nX-Where: inner at "+addr+" and [::1]:"+port+"\r\nX-Other: ws://127.0.0.2:9999/x\r\nX-Plain: a:b\r\n", echo)
	case "redirect":
		raw = withLength("302 Found", "Location: http://"+addr+"/api/conversations/x\r\nContent-Type: text/html\r\n", `<a href="http://`+addr+`/api/conversations/x">moved from `+lo+`</a>`)
	case "error":
		raw = withLength("500 Internal Server Error", "Content-Type: application/json\r\n", `{"detail":"cannot reach http://127.0.0.1:`+port+`/y from `+addr+`"}`)
	case "chunked":
		raw = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" + chunkedBody([]string{"data: 1\n\n", "data: 2\n\n"})
	case "trailer":
		raw = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTrailer: X-Sum\r\nTransfer-Encoding: chunked\r\n\r\n" + chunkedBody([]string{"abc", "def"}, "X-Sum: 42")
	case "notype":
		raw = withLength("200 OK", "", "<html><body>hi</body></html>")
	case "notypebig":
		raw = withLength("200 OK", "", "<html><body>"+innerBig(3000)+"</body></html>")
	case "notypechunked":
		raw = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunkedBody([]string{"<html><body>", "hi</body></html>"})
	case "notypechunkedbig":
		raw = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunkedBody([]string{"<html><body>" + innerBig(5000)})
	case "gzipchunked":
		var zb bytes.Buffer
		zw := gzip.NewWriter(&zb)
		_, _ = zw.Write([]byte(echo))
		_ = zw.Close()
		raw = "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n" + chunkedBody([]string{zb.String()})
	case "empty":
		raw = withLength("200 OK", "", "")
	case "nocontent":
		raw = "HTTP/1.1 204 No Content\r\nX-Kept: yes\r\n\r\n"
	case "nocontentlength":
		raw = "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n"
	case "resetcontent":
		raw = withLength("205 Reset Content", "", "")
	case "notmodified":
		raw = "HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n"
	case "big5k":
		raw = withLength("200 OK", "Content-Type: application/octet-stream\r\n", innerBig(5000))
	case "big70k":
		raw = withLength("200 OK", "Content-Type: application/octet-stream\r\n", innerBig(70000))
	case "cut":
		raw = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 10000\r\n\r\n" + innerBig(3000)
		closeAfter = true
	case "cutbig":
		raw = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n" + innerBig(50000)
		closeAfter = true
	case "cutchunked":
		raw = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"
		closeAfter = true
	case "close":
		raw = withLength("200 OK", "Content-Type: application/json\r\nConnection: close\r\n", echo)
		closeAfter = true
	case "connhdr":
		raw = withLength("200 OK", "Content-Type: application/json\r\nConnection: X-Drop\r\nX-Drop: v\r\nX-Kept: yes\r\n", echo)
	case "bighead":
		raw = withLength("200 OK", "Content-Type: application/json\r\nX-Big: "+innerBig(5000)+"\r\nX-Addr: "+addr+"\r\n", echo)
	case "nolength":
		raw = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n" + echo
		closeAfter = true
	case "http10":
		raw = "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(echo)) + "\r\n\r\n" + echo
		closeAfter = true
	case "early":
		raw = "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n" + withLength("200 OK", "Content-Type: application/json\r\n", echo)
	case "dupcl":
		raw = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok"
	case "badcl":
		raw = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2x\r\n\r\nok"
		closeAfter = true
	case "longname":
		raw = withLength("200 OK", "Content-Type: application/json\r\nx-a-header-name-longer-than-sixty-four-bytes-which-is-not-canonicalized: v\r\n", echo)
	case "hangup":
		return "", true
	case "slow":
		in.mu.Lock()
		d := in.slow
		in.mu.Unlock()
		select {
		case <-time.After(d):
		case <-in.done:
			return "", true
		}
		raw = withLength("200 OK", "Content-Type: application/json\r\n", echo)
	default:
		raw = withLength("200 OK", "Content-Type: application/json\r\n", echo)
	}
	if req.Method == http.MethodHead {
		if i := strings.Index(raw, "\r\n\r\n"); i >= 0 {
			raw = raw[:i+4]
		}
	}
	return raw, closeAfter
}

// markListener tells the connections the front handed to net/http's
// server from those it served itself: net/http's server asks a
// connection's RemoteAddr as it starts serving it (conn.serve), the front
// never does.
type markListener struct {
	net.Listener
	mu    sync.Mutex
	conns map[string]*markConn // by the client's address
}

type markConn struct {
	net.Conn
	handed atomic.Bool
}

func (c *markConn) RemoteAddr() net.Addr {
	c.handed.Store(true)
	return c.Conn.RemoteAddr()
}

func (l *markListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	mc := &markConn{Conn: c}
	l.mu.Lock()
	l.conns[c.RemoteAddr().String()] = mc
	l.mu.Unlock()
	return mc, nil
}

// handedOff reports whether the server side of the client's connection c
// went to net/http's server.
func (l *markListener) handedOff(t testing.TB, c net.Conn) bool {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	mc, ok := l.conns[c.LocalAddr().String()]
	if !ok {
		t.Fatalf("connection from %s was not accepted", c.LocalAddr())
	}
	return mc.handed.Load()
}

// leanKeys are the outer keys of the front's tests.
func leanKeys() [][]byte {
	keys := make([][]byte, len(outerKeys))
	for i, k := range outerKeys {
		keys[i] = []byte(k)
	}
	return keys
}

// frontPair is the same conversations served by the front (Serve) and by
// the old path (net/http's server alone).
type frontPair struct {
	inner      *rawInner
	convs      *leanConvs
	front, old string
	marks      *markListener
}

// startFront serves a new Server over convs with Serve on a marked
// loopback listener until t ends; it returns the address and the
// listener.
func startFront(t testing.TB, convs Conversations, mutate func(*Options)) (*Server, string, *markListener, func() error) {
	t.Helper()
	opts := Options{Conversations: convs, Keys: leanKeys()}
	if mutate != nil {
		mutate(&opts)
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ml := &markListener{Listener: ln, conns: map[string]*markConn{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ml) }()
	var once sync.Once
	var serr error
	stop := func() error {
		once.Do(func() {
			cancel()
			serr = <-done
		})
		return serr
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, ln.Addr().String(), ml, stop
}

func startFrontPair(t testing.TB) *frontPair {
	t.Helper()
	in := startRawAnswers(t)
	convs := &leanConvs{addr: in.addr}
	// A head the front waits on costs the test ReadHeader, not 10s.
	short := func(o *Options) { o.Timeouts.ReadHeader = 3 * time.Second }
	_, front, marks, _ := startFront(t, convs, short)
	opts := Options{Conversations: convs, Keys: leanKeys()}
	short(&opts)
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// As Serve configured it before the front.
	hs := &http.Server{Handler: http.HandlerFunc(s.serveHTTP), ReadHeaderTimeout: s.t.ReadHeader, IdleTimeout: s.t.Idle, MaxHeaderBytes: 1 << 20}
	var wg sync.WaitGroup
	wg.Go(func() { _ = hs.Serve(ln) })
	t.Cleanup(func() {
		hs.Close()
		wg.Wait()
		s.inner.CloseIdleConnections()
	})
	return &frontPair{inner: in, convs: convs, front: front, old: ln.Addr().String(), marks: marks}
}

// exchanged is what one request on a fresh connection came to.
type exchanged struct {
	Status int
	Header http.Header // Date's value replaced by "(date)"
	Body   string
	// Failed says the answer was not whole (no answer, a cut body).
	Failed bool
	// Slow says the answer took more than a second (the front waited
	// for something).
	Slow bool
	// Then is what a plain request sent next on the same connection got:
	// "ok", or "closed" when the connection was not usable.
	Then  string
	Inner []innerSaw
}

// leanHost is the Host of the front's tests' requests.
const leanHost = "ohd.test:8000"

// leanGet is a plain lean request head for path.
func leanGet(path string, extra ...string) string {
	return "GET " + path + " HTTP/1.1\r\nHost: " + leanHost + "\r\nX-Session-API-Key: " + outerKeys[0] + "\r\n" + strings.Join(extra, "") + "\r\n"
}

// readAnswer reads one answer to a request of method from br.
func readAnswer(br *bufio.Reader, method string) (*http.Response, []byte, error) {
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		return nil, nil, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, b, err
}

// exchange sends raw on a new connection to addr, reads the answer and
// tries a plain request after it; handed reports whether the front (when
// marks is set) handed the connection to net/http.
func exchange(t *testing.T, addr, raw, method string, in *rawInner, marks *markListener) (ex exchanged, handed bool) {
	t.Helper()
	in.take()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	start := time.Now()
	resp, body, err := readAnswer(br, method)
	ex.Slow = time.Since(start) > time.Second
	if marks != nil {
		handed = marks.handedOff(t, c)
	}
	ex.Then = "closed"
	if resp != nil {
		ex.Status, ex.Header, ex.Body = resp.StatusCode, resp.Header, string(body)
		if _, ok := ex.Header["Date"]; ok {
			ex.Header["Date"] = []string{"(date)"}
		}
	}
	if err != nil {
		ex.Failed = true
		ex.Status, ex.Header, ex.Body = 0, nil, ""
	}
	ex.Inner = in.take()
	if !ex.Failed && !resp.Close {
		if _, err := io.WriteString(c, leanGet("/api/conversations/"+leanConvID+"/then")); err == nil {
			if r2, b2, err := readAnswer(br, "GET"); err == nil && r2.StatusCode == 200 && strings.Contains(string(b2), "/then") {
				ex.Then = "ok"
			}
		}
		in.take()
	}
	return ex, handed
}

// TestFrontSameAsNetHTTP sends the same raw requests to the front and to
// net/http's server alone: the client and the inner server must see the
// same, and the front must answer the hot path's requests itself.
func TestFrontSameAsNetHTTP(t *testing.T) {
	fp := startFrontPair(t)
	id := leanConvID
	conv := "/api/conversations/" + id
	k0 := outerKeys[0]
	type tc struct {
		name   string
		raw    string
		method string // the request's, for reading the answer; GET if ""
		lean   bool   // the front answers it itself
		either bool   // the front may answer it or hand it off
	}
	cases := []tc{
		{name: "plain", raw: leanGet(conv+"/events/search?limit=1", "Accept: application/json\r\nUser-Agent: t\r\n"), lean: true},
		{name: "credential query", raw: leanGet(conv + "/events?limit=1&session_api_key=" + k0 + "&Session_Api_Key=x&session%5Fapi%5Fkey=y&access_token=z&authorization=w&x-session-api-key=v&b=2&empty=&=&&"), lean: true},
		{name: "only credential query", raw: leanGet(conv + "/events?session_api_key=" + k0), lean: true},
		{name: "empty query", raw: leanGet(conv + "/events?"), lean: true},
		{name: "odd query", raw: leanGet(conv + "/events?q=a|b&x={}&y=%zz&z=a;b&w='\"`^"), lean: true},
		{name: "credential headers", raw: leanGet(conv+"/events",
			"Authorization: Bearer "+outerKeys[1]+"\r\nProxy-Authorization: Basic eA==\r\nCookie: oh_workspace_session_key="+outerKeys[2]+
				"\r\nX-Forwarded-For: 192.0.2.1\r\nX-Forwarded-Host: evil.example\r\nX-Forwarded-Proto: https\r\nForwarded: for=192.0.2.1\r\n"+
				"Keep-Alive: timeout=5\r\nTe: trailers\r\nTrailer: X-T\r\nProxy-Connection: keep-alive\r\nX-Custom: kept\r\nX-Custom: twice\r\n"), lean: true},
		{name: "odd header case", raw: "GET " + conv + "/events HTTP/1.1\r\nhOsT: " + leanHost + "\r\nx-session-api-key: " + k0 +
			"\r\naCCEPT: text/plain\r\nx-forwarded-for: 1.2.3.4\r\ncOOKIE: a=b\r\nauthORIZATION: x\r\nx_under_score: u\r\n" +
			"x-a-header-name-longer-than-sixty-four-bytes-which-is-not-canonicalized: long\r\n\r\n", lean: true},
		{name: "odd header values", raw: leanGet(conv+"/events", "X-Empty:\r\nX-Spaces:   a  b   \r\nX-Tab:\tt\t\r\nX-High: caf\xc3\xa9\r\nX-Colon: http://127.0.0.1:1/\r\n"), lean: true},
		{name: "key with spaces", raw: "GET " + conv + "/events HTTP/1.1\r\nHost: " + leanHost + "\r\nX-Session-API-Key:   " + k0 + "  \r\n\r\n", lean: true},
		{name: "second key", raw: "GET " + conv + "/events HTTP/1.1\r\nHost: " + leanHost + "\r\nX-Session-API-Key: " + outerKeys[2] + "\r\n\r\n", lean: true},
		{name: "ipv6 host", raw: "GET " + conv + "/events HTTP/1.1\r\nHost: [::1]:8000\r\nX-Session-API-Key: " + k0 + "\r\n\r\n", lean: true},
		{name: "empty host", raw: "GET " + conv + "/events HTTP/1.1\r\nHost:\r\nX-Session-API-Key: " + k0 + "\r\n\r\n"},
		{name: "no host", raw: "GET " + conv + "/events HTTP/1.1\r\nX-Session-API-Key: " + k0 + "\r\n\r\n"},
		{name: "two hosts", raw: "GET " + conv + "/events HTTP/1.1\r\nHost: a\r\nHost: b\r\nX-Session-API-Key: " + k0 + "\r\n\r\n"},
		{name: "duplicate key", raw: leanGet(conv+"/events", "X-Session-API-Key: "+k0+"\r\n")},
		{name: "duplicate key, second wrong", raw: leanGet(conv+"/events", "X-Session-API-Key: "+wrongKey+"\r\n")},
		{name: "duplicate key, first wrong", raw: "GET " + conv + "/events HTTP/1.1\r\nHost: h\r\nX-Session-API-Key: " + wrongKey + "\r\nx-session-api-key: " + k0 + "\r\n\r\n"},
		{name: "wrong key", raw: "GET " + conv + "/events HTTP/1.1\r\nHost: h\r\nX-Session-API-Key: " + wrongKey + "\r\n\r\n"},
		{name: "empty key", raw: "GET " + conv + "/events HTTP/1.1\r\nHost: h\r\nX-Session-API-Key:\r\n\r\n"},
		{name: "missing key", raw: "GET " + conv + "/events HTTP/1.1\r\nHost: h\r\n\r\n"},
		{name: "key in the query only", raw: "GET " + conv + "/events?session_api_key=" + k0 + " HTTP/1.1\r\nHost: h\r\n\r\n"},
		{name: "origin", raw: leanGet(conv+"/events", "Origin: http://localhost:3000\r\n")},
		{name: "foreign origin", raw: leanGet(conv+"/events", "Origin: http://evil.example\r\n")},
		{name: "expose secrets", raw: leanGet(conv+"/events", "X-Expose-Secrets: true\r\n")},
		{name: "connection close", raw: leanGet(conv+"/events", "Connection: close\r\n")},
		{name: "connection names a header", raw: leanGet(conv+"/events", "Connection: X-Hop\r\nX-Hop: v\r\nX-Custom: kept\r\n")},
		{name: "upgrade", raw: leanGet(conv+"/events", "Upgrade: websocket\r\n")},
		{name: "expect", raw: leanGet(conv+"/events", "Expect: 100-continue\r\n")},
		{name: "get with content-length 0", raw: leanGet(conv+"/events", "Content-Length: 0\r\n")},
		{name: "folded header", raw: leanGet(conv+"/events", "X-Fold: a\r\n b\r\n")},
		{name: "bare LF", raw: "GET " + conv + "/events HTTP/1.1\nHost: h\nX-Session-API-Key: " + k0 + "\n\n"},
		{name: "head", raw: "HEAD " + conv + "/events HTTP/1.1\r\nHost: h\r\nX-Session-API-Key: " + k0 + "\r\n\r\n", method: "HEAD"},
		{name: "post", raw: "POST " + conv + "/events HTTP/1.1\r\nHost: h\r\nX-Session-API-Key: " + k0 + "\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello", method: "POST"},
		{name: "delete", raw: "DELETE " + conv + "/events/x HTTP/1.1\r\nHost: h\r\nX-Session-API-Key: " + k0 + "\r\n\r\n", method: "DELETE"},
		{name: "lower-case method", raw: "get " + conv + "/events HTTP/1.1\r\nHost: h\r\nX-Session-API-Key: " + k0 + "\r\n\r\n"},
		{name: "escaped path", raw: leanGet(conv + "/files/a%2Fb%20c?x=1")},
		{name: "escaped id", raw: leanGet("/api/conversations/" + strings.Replace(id, "-", "%2D", 1) + "/events")},
		{name: "sub-delims in path", raw: leanGet(conv + "/files/(a)!*;=@:,$&+'~_.-b"), lean: true},
		{name: "brackets in path", raw: leanGet(conv + "/files/[a]")},
		{name: "dot segment", raw: leanGet(conv + "/./events")},
		{name: "dot-dot segment", raw: leanGet(conv + "/events/../x")},
		{name: "dot-dot out of the id", raw: leanGet(conv + "/../" + leanLocalID + "/events")},
		{name: "double slash", raw: leanGet(conv + "//events")},
		{name: "trailing slash", raw: leanGet(conv + "/events/"), lean: true},
		{name: "empty tail", raw: leanGet(conv + "/"), lean: true},
		{name: "no tail", raw: leanGet(conv)},
		{name: "upper-case id", raw: leanGet("/api/conversations/" + strings.ToUpper(id) + "/events"), lean: true},
		{name: "id without dashes", raw: leanGet("/api/conversations/" + strings.ReplaceAll(id, "-", "") + "/events"), lean: true},
		{name: "id in braces", raw: leanGet("/api/conversations/{" + id + "}/events")},
		{name: "urn id", raw: leanGet("/api/conversations/urn:uuid:" + id + "/events"), lean: true},
		{name: "not an id", raw: leanGet("/api/conversations/not-an-id/events")},
		{name: "fork", raw: leanGet(conv + "/fork")},
		{name: "fork, trailing slash", raw: leanGet(conv + "/fork/")},
		{name: "switch_llm", raw: leanGet(conv + "/switch_llm")},
		{name: "switch_profile", raw: leanGet(conv + "/switch_profile")},
		{name: "children", raw: leanGet(conv + "/children")},
		{name: "credential-bindings", raw: leanGet(conv + "/credential-bindings/x")},
		{name: "secrets", raw: leanGet(conv + "/secrets"), lean: true},
		{name: "port service", raw: leanGet(conv + "/vscode/")},
		{name: "count route", raw: leanGet("/api/conversations/count")},
		{name: "unknown conversation", raw: leanGet("/api/conversations/" + leanUnknownID + "/events"), lean: true},
		{name: "local conversation", raw: leanGet("/api/conversations/" + leanLocalID + "/events"), lean: true},
		{name: "conflict", raw: leanGet("/api/conversations/" + leanConflictID + "/events"), lean: true},
		{name: "http/1.0", raw: "GET " + conv + "/events HTTP/1.0\r\nHost: h\r\nX-Session-API-Key: " + k0 + "\r\n\r\n"},
		{name: "http/1.0 without host", raw: "GET " + conv + "/events HTTP/1.0\r\nX-Session-API-Key: " + k0 + "\r\n\r\n"},
		{name: "absolute form", raw: "GET http://" + leanHost + conv + "/events HTTP/1.1\r\nHost: " + leanHost + "\r\nX-Session-API-Key: " + k0 + "\r\n\r\n"},
		{name: "fragment", raw: leanGet(conv + "/events#frag")},
		{name: "big head", raw: leanGet(conv+"/events", "X-Pad: "+innerBig(5000)+"\r\n")},
		{name: "bad header name", raw: leanGet(conv+"/events", "X Bad: v\r\n")},
		{name: "control in value", raw: leanGet(conv+"/events", "X-Bad: a\x01b\r\n")},
	}
	// Every answer of the raw inner server, to a lean request.
	for _, a := range []string{
		"created", "odd", "cookie", "addr", "redirect", "error", "chunked", "trailer", "notype", "notypebig",
		"notypechunked", "notypechunkedbig", "gzipchunked", "empty", "nocontent", "nocontentlength", "resetcontent",
		"notmodified", "big5k", "big70k", "cut", "cutbig", "cutchunked", "close", "connhdr", "bighead", "nolength",
		"http10", "early", "dupcl", "badcl", "longname", "hangup",
	} {
		cases = append(cases, tc{name: "answer " + a, raw: leanGet(conv + "/" + a + "/x?q=1"), lean: true})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			method := c.method
			if method == "" {
				method = "GET"
			}
			old, _ := exchange(t, fp.old, c.raw, method, fp.inner, nil)
			got, handed := exchange(t, fp.front, c.raw, method, fp.inner, fp.marks)
			if diff := cmp.Diff(old, got); diff != "" {
				t.Errorf("the front's exchange differs from net/http's (-net/http +front):\n%s", diff)
			}
			if handed == c.lean && !c.either {
				t.Errorf("front handed the request to net/http = %v, want %v", handed, !c.lean)
			}
			// The security rules, on the front's side (the old path's
			// are asserted by the comparison).
			for _, s := range got.Inner {
				for _, k := range outerKeys {
					if strings.Contains(s.URI, k) || strings.Contains(strings.Join(s.Header.Values("X-Session-Api-Key"), ","), k) {
						t.Errorf("an outer key reached the inner server: %s %v", s.URI, s.Header)
					}
				}
				for _, h := range []string{"Authorization", "Proxy-Authorization", "Cookie", "X-Expose-Secrets", "Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Connection", "Keep-Alive", "Te", "Trailer", "Proxy-Connection"} {
					if v, ok := s.Header[h]; ok {
						t.Errorf("inner server got %s: %q", h, v)
					}
				}
				if v := s.Header.Values("X-Session-Api-Key"); len(v) != 1 || v[0] != string(leanInnerKey) {
					t.Errorf("inner server got X-Session-Api-Key %q, want the inner key alone", v)
				}
				if c.lean && (s.Host == "" || strings.Contains(s.Host, "127.0.0.1")) {
					t.Errorf("inner server got Host %q: want the client's, never empty or the inner address", s.Host)
				}
			}
			_, port, _ := net.SplitHostPort(fp.inner.addr)
			for k, vv := range got.Header {
				for _, v := range vv {
					if strings.Contains(v, ":"+port) || strings.Contains(v, "127.0.0.") {
						t.Errorf("answer header %s: %q names the inner address", k, v)
					}
				}
				if strings.EqualFold(k, "Set-Cookie") || strings.EqualFold(k, "Set-Cookie2") {
					t.Errorf("answer header %s: %q: the inner server's cookie passed", k, vv)
				}
			}
			if strings.Contains(got.Body, ":"+port) && (got.Status < 200 || got.Status >= 300) {
				t.Errorf("answer body %q names the inner address", got.Body)
			}
		})
	}
}

// roundTrip writes raw to c and reads as many answers as methods lists.
func roundTrips(t *testing.T, c net.Conn, br *bufio.Reader, raw string, methods ...string) []exchanged {
	t.Helper()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	var out []exchanged
	for _, m := range methods {
		resp, body, err := readAnswer(br, m)
		if err != nil {
			t.Fatalf("answer %d of %d: %v", len(out)+1, len(methods), err)
		}
		out = append(out, exchanged{Status: resp.StatusCode, Body: string(body)})
	}
	return out
}

// wantEcho checks that an answer is the raw inner server's echo of
// method and uri.
func wantEcho(t *testing.T, ex exchanged, method, uri string) {
	t.Helper()
	want := `{"method":"` + method + `","uri":` + strconv.Quote(uri) + "}\n"
	if method == "HEAD" {
		want = ""
	}
	if ex.Status != 200 || ex.Body != want {
		t.Errorf("answer = %d %q, want 200 %q", ex.Status, ex.Body, want)
	}
}

func dialFront(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	return c, bufio.NewReader(c)
}

// TestFrontKeepAliveAndHandoff serves lean requests, then one the front
// does not take, then lean ones, on one connection: every answer comes
// in order, the requests after the hand-off are net/http's.
func TestFrontKeepAliveAndHandoff(t *testing.T) {
	fp := startFrontPair(t)
	conv := "/api/conversations/" + leanConvID
	k0 := outerKeys[0]
	t.Run("sequence", func(t *testing.T) {
		c, br := dialFront(t, fp.front)
		for i := range 3 {
			uri := conv + "/events/" + strconv.Itoa(i)
			wantEcho(t, roundTrips(t, c, br, leanGet(uri), "GET")[0], "GET", uri)
			// A lean answer that passes through leanWriter, between.
			if ex := roundTrips(t, c, br, leanGet(conv+"/chunked/x"), "GET")[0]; ex.Body != "data: 1\n\ndata: 2\n\n" {
				t.Errorf("chunked answer = %q", ex.Body)
			}
		}
		if fp.marks.handedOff(t, c) {
			t.Fatalf("the front handed off a connection that sent only lean requests")
		}
		ex := roundTrips(t, c, br, "POST "+conv+"/events/post HTTP/1.1\r\nHost: h\r\nX-Session-API-Key: "+k0+"\r\nContent-Length: 3\r\n\r\nabc", "POST")[0]
		wantEcho(t, ex, "POST", conv+"/events/post")
		if !fp.marks.handedOff(t, c) {
			t.Errorf("the front did not hand off the connection at a POST")
		}
		for i := range 3 {
			uri := conv + "/events/after-" + strconv.Itoa(i)
			wantEcho(t, roundTrips(t, c, br, leanGet(uri), "GET")[0], "GET", uri)
		}
		got := fp.inner.take()
		if len(got) != 10 || got[6].Method != "POST" || got[6].Body != "abc" {
			t.Errorf("inner server got %d requests (the 7th %+v), want 10 with the POST 7th", len(got), got[min(6, len(got)-1)])
		}
	})
	t.Run("pipelined", func(t *testing.T) {
		c, br := dialFront(t, fp.front)
		raw := leanGet(conv+"/events/p1") + leanGet(conv+"/big5k/x") +
			"POST " + conv + "/events/p2 HTTP/1.1\r\nHost: h\r\nX-Session-API-Key: " + k0 + "\r\nContent-Length: 2\r\n\r\nhi" +
			leanGet(conv+"/events/p3") +
			"HEAD " + conv + "/events/p4 HTTP/1.1\r\nHost: h\r\nX-Session-API-Key: " + k0 + "\r\n\r\n" +
			leanGet(conv+"/events/p5")
		ex := roundTrips(t, c, br, raw, "GET", "GET", "POST", "GET", "HEAD", "GET")
		wantEcho(t, ex[0], "GET", conv+"/events/p1")
		if ex[1].Status != 200 || ex[1].Body != innerBig(5000) {
			t.Errorf("answer 2 = %d with %d bytes, want 200 with 5000", ex[1].Status, len(ex[1].Body))
		}
		wantEcho(t, ex[2], "POST", conv+"/events/p2")
		wantEcho(t, ex[3], "GET", conv+"/events/p3")
		wantEcho(t, ex[4], "HEAD", conv+"/events/p4")
		wantEcho(t, ex[5], "GET", conv+"/events/p5")
		if !fp.marks.handedOff(t, c) {
			t.Errorf("the front did not hand off the connection at a POST")
		}
		if got := fp.inner.take(); len(got) != 6 || got[2].Body != "hi" {
			t.Errorf("inner server got %d requests, want 6 (the POST's body %q)", len(got), "hi")
		}
	})
	t.Run("pipelined lean", func(t *testing.T) {
		c, br := dialFront(t, fp.front)
		var raw strings.Builder
		var methods []string
		for i := range 20 {
			raw.WriteString(leanGet(conv + "/events/q" + strconv.Itoa(i)))
			methods = append(methods, "GET")
		}
		for i, ex := range roundTrips(t, c, br, raw.String(), methods...) {
			wantEcho(t, ex, "GET", conv+"/events/q"+strconv.Itoa(i))
		}
		if fp.marks.handedOff(t, c) {
			t.Errorf("the front handed off a connection that sent only lean requests")
		}
		fp.inner.take()
	})
	t.Run("big head after lean ones", func(t *testing.T) {
		c, br := dialFront(t, fp.front)
		wantEcho(t, roundTrips(t, c, br, leanGet(conv+"/events/b1"), "GET")[0], "GET", conv+"/events/b1")
		pad := innerBig(5000)
		wantEcho(t, roundTrips(t, c, br, leanGet(conv+"/events/b2", "X-Pad: "+pad+"\r\n"), "GET")[0], "GET", conv+"/events/b2")
		if !fp.marks.handedOff(t, c) {
			t.Errorf("the front kept a head over its buffer")
		}
		wantEcho(t, roundTrips(t, c, br, leanGet(conv+"/events/b3"), "GET")[0], "GET", conv+"/events/b3")
		got := fp.inner.take()
		if len(got) != 3 || got[1].Header.Get("X-Pad") != pad {
			t.Errorf("inner server got %d requests, want 3, the 2nd with X-Pad whole", len(got))
		}
	})
	t.Run("head in parts", func(t *testing.T) {
		c, br := dialFront(t, fp.front)
		head := leanGet(conv+"/events/parts", "Accept: */*\r\n")
		for _, cuts := range [][]int{{2}, {4, 30}, {len(head) - 3}, {len(head) - 1}, {10, 20, 40, 60, len(head) - 2}} {
			prev := 0
			for _, cut := range cuts {
				if _, err := io.WriteString(c, head[prev:cut]); err != nil {
					t.Fatal(err)
				}
				prev = cut
				time.Sleep(30 * time.Millisecond)
			}
			ex := roundTrips(t, c, br, head[prev:], "GET")[0]
			wantEcho(t, ex, "GET", conv+"/events/parts")
		}
		if fp.marks.handedOff(t, c) {
			t.Errorf("the front handed off a lean head that came in parts")
		}
		fp.inner.take()
	})
}

// TestFrontShutdown ends Serve's context with lean connections idle and
// with a lean request waiting on a slow inner server.
func TestFrontShutdown(t *testing.T) {
	conv := "/api/conversations/" + leanConvID
	t.Run("idle", func(t *testing.T) {
		in := startRawAnswers(t)
		_, addr, _, stop := startFront(t, &leanConvs{addr: in.addr}, func(o *Options) { o.Timeouts.Shutdown = 5 * time.Second })
		c, br := dialFront(t, addr)
		wantEcho(t, roundTrips(t, c, br, leanGet(conv+"/events/idle"), "GET")[0], "GET", conv+"/events/idle")
		quiet, _ := dialFront(t, addr) // connected, never sent a request
		time.Sleep(50 * time.Millisecond)
		start := time.Now()
		if err := stop(); err != nil {
			t.Errorf("Serve = %v, want nil", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("Serve returned %v after its context ended with idle connections, want promptly", d)
		}
		for _, cc := range []net.Conn{c, quiet} {
			_ = cc.SetReadDeadline(time.Now().Add(2 * time.Second))
			if n, err := cc.Read(make([]byte, 1)); err == nil || errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
				t.Errorf("idle connection after shutdown: read %d, %v; want it closed", n, err)
			}
		}
	})
	t.Run("slow inner", func(t *testing.T) {
		in := startRawAnswers(t)
		in.setSlow(700 * time.Millisecond)
		_, addr, _, stop := startFront(t, &leanConvs{addr: in.addr}, func(o *Options) { o.Timeouts.Shutdown = 5 * time.Second })
		c, br := dialFront(t, addr)
		// An idle connection beside the busy one is closed at once.
		idle, ibr := dialFront(t, addr)
		wantEcho(t, roundTrips(t, idle, ibr, leanGet(conv+"/events/idle"), "GET")[0], "GET", conv+"/events/idle")
		if _, err := io.WriteString(c, leanGet(conv+"/slow/x")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // the request waits on the inner server
		stopped := make(chan time.Time, 1)
		go func() {
			if err := stop(); err != nil {
				t.Errorf("Serve = %v, want nil", err)
			}
			stopped <- time.Now()
		}()
		_ = idle.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err := ibr.ReadByte(); err == nil || isTimeout(err) {
			t.Errorf("idle connection during shutdown: %v, want it closed while the busy one finishes", err)
		}
		resp, body, err := readAnswer(br, "GET")
		answered := time.Now()
		if err != nil {
			t.Fatalf("answer during shutdown: %v", err)
		}
		wantEcho(t, exchanged{Status: resp.StatusCode, Body: string(body)}, "GET", conv+"/slow/x")
		select {
		case at := <-stopped:
			if at.Before(answered.Add(-50 * time.Millisecond)) {
				t.Errorf("Serve returned %v before the answer was written", answered.Sub(at))
			}
		case <-time.After(4 * time.Second):
			t.Fatalf("Serve did not return after the in-flight answer")
		}
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
			t.Errorf("connection after shutdown: %v, want it closed", err)
		}
	})
	t.Run("grace ends", func(t *testing.T) {
		in := startRawAnswers(t)
		in.setSlow(time.Minute)
		_, addr, _, stop := startFront(t, &leanConvs{addr: in.addr}, func(o *Options) { o.Timeouts.Shutdown = 300 * time.Millisecond })
		c, br := dialFront(t, addr)
		if _, err := io.WriteString(c, leanGet(conv+"/slow/x")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		start := time.Now()
		if err := stop(); err != nil {
			t.Errorf("Serve = %v, want nil", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("Serve returned %v after its context ended, want about the 300ms grace", d)
		}
		if resp, _, err := readAnswer(br, "GET"); err == nil && resp.StatusCode == 200 {
			t.Errorf("a request cut by the end of the grace period was answered 200")
		}
	})
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
