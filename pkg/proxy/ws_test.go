package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/ohd-dev/ohd/pkg/store"
)

// dialWS connects to the proxy's event socket of id.
func (p *testProxy) dialWS(t testing.TB, id, query string, hdr http.Header) *websocket.Conn {
	t.Helper()
	return p.dialSocket(t, "events", id, query, hdr)
}

// dialSocket dials /sockets/<kind>/<id>.
func (p *testProxy) dialSocket(t testing.TB, kind, id, query string, hdr http.Header) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	u := "ws://" + p.host + "/sockets/" + kind + "/" + id
	if query != "" {
		u += "?" + query
	}
	c, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		t.Fatalf("dial %s: %v (response %v)", u, err, resp)
	}
	c.SetReadLimit(32 << 20)
	t.Cleanup(func() { c.CloseNow() })
	return c
}

func keyHeader(k string) http.Header {
	h := http.Header{}
	h.Set("X-Session-API-Key", k)
	return h
}

// read reads one message within 20 seconds.
func read(t testing.TB, c *websocket.Conn) (websocket.MessageType, []byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return c.Read(ctx)
}

func write(t testing.TB, c *websocket.Conn, typ websocket.MessageType, b []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Write(ctx, typ, b); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// expectHello reads the stand-in's first message.
func expectHello(t testing.TB, c *websocket.Conn, id string) {
	t.Helper()
	_, b, err := read(t, c)
	if err != nil {
		t.Fatalf("read hello: %v", err)
	}
	var h struct {
		Type           string `json:"type"`
		ConversationID string `json:"conversation_id"`
		Auth           string `json:"auth"`
	}
	_ = json.Unmarshal(b, &h)
	if h.Type != "hello" || h.ConversationID != id || h.Auth != "header" {
		t.Fatalf("first message = %s, want the stand-in's hello for %s, authenticated by header", b, id)
	}
}

// expectClose reads until the connection closes and checks the code.
func expectClose(t testing.TB, c *websocket.Conn, want websocket.StatusCode) {
	t.Helper()
	for {
		_, b, err := read(t, c)
		if err == nil {
			continue // e.g. a hello before the close
		}
		if got := websocket.CloseStatus(err); got != want {
			t.Fatalf("connection ended with %v (%v), want close code %d (last message %s)", got, err, want, b)
		}
		return
	}
}

func TestWSEcho(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, nil)
	id := p.create(t, nil)
	c := p.dialWS(t, id, "", keyHeader(outerKeys[2]))
	expectHello(t, c, id)
	msgs := []struct {
		typ websocket.MessageType
		b   []byte
	}{
		{websocket.MessageText, []byte(`{"kind":"not a Message: echoed by the stand-in"}`)},
		{websocket.MessageBinary, []byte{0, 1, 2, 255}},
		{websocket.MessageText, bytes.Repeat([]byte("x"), 1<<20)},
	}
	for _, m := range msgs {
		write(t, c, m.typ, m.b)
		typ, b, err := read(t, c)
		if err != nil || typ != m.typ || !bytes.Equal(b, m.b) {
			t.Fatalf("echo of a %v message of %d bytes = %v, %d bytes, %v", m.typ, len(m.b), typ, len(b), err)
		}
	}
	c.Close(websocket.StatusNormalClosure, "")
	if len(fake.called("touch "+id)) == 0 {
		t.Errorf("a WebSocket session never touched the conversation")
	}
}

func TestWSFirstMessageAuth(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, nil)
	id := p.create(t, nil)
	c := p.dialWS(t, id, "", nil)
	write(t, c, websocket.MessageText, []byte(`{"type":"auth","session_api_key":"`+outerKeys[1]+`"}`))
	expectHello(t, c, id)
	write(t, c, websocket.MessageText, []byte("after auth"))
	if _, b, err := read(t, c); err != nil || string(b) != "after auth" {
		t.Fatalf("echo after first-message auth = %q, %v", b, err)
	}
}

func TestWSAuthFailures(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, func(o *Options) { o.Timeouts.WSAuth = 300 * time.Millisecond })
	id := p.create(t, nil)
	tests := []struct {
		name  string
		query string
		hdr   http.Header
		first string // first message, if any
	}{
		{name: "no auth until the timeout"},
		{name: "wrong first message key", first: `{"type":"auth","session_api_key":"` + wrongKey + `"}`},
		{name: "first message not auth", first: `{"type":"message","session_api_key":"` + outerKeys[0] + `"}`},
		{name: "first message not json", first: `hello`},
		{name: "key without type", first: `{"session_api_key":"` + outerKeys[0] + `"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := p.dialWS(t, id, tc.query, tc.hdr)
			if tc.first != "" {
				write(t, c, websocket.MessageText, []byte(tc.first))
			}
			expectClose(t, c, CloseAuthFailed)
		})
	}
	// A bad key by header or query is refused before the upgrade, with
	// the 403 the agent server's handshake gives (reference §7).
	for _, tc := range []struct {
		name, query string
		hdr         http.Header
	}{
		{"wrong header key", "", keyHeader(wrongKey)},
		{"wrong query key", "session_api_key=" + wrongKey, nil},
		{"wrong header key, good query key", "session_api_key=" + outerKeys[0], keyHeader(wrongKey)},
	} {
		for _, kind := range []string{"events", "session"} {
			u := "ws://" + p.host + "/sockets/" + kind + "/" + id
			if tc.query != "" {
				u += "?" + tc.query
			}
			c, resp, err := websocket.Dial(context.Background(), u, &websocket.DialOptions{HTTPHeader: tc.hdr})
			if err == nil {
				c.CloseNow()
				t.Errorf("%s on %s: upgraded, want 403 before the upgrade", tc.name, kind)
			} else if resp == nil || resp.StatusCode != http.StatusForbidden {
				t.Errorf("%s on %s: %v, want 403", tc.name, kind, err)
			}
		}
	}
	if got := fake.called("target"); len(got) != 0 {
		t.Errorf("unauthenticated WebSockets reached Target: %v", got)
	}
}

// TestWSRedundantAuthFramesDropped checks an auth frame after
// authentication never reaches the inner server: the agent server ignores
// such frames (reference §7), and forwarding one would hand the outer key
// to the container.
func TestWSRedundantAuthFramesDropped(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, nil)
	inner := newWSInner(t)
	id := fake.addCustom(inner.addr, inner.key)
	for name, hdr := range map[string]http.Header{"header": keyHeader(outerKeys[0]), "first message": nil} {
		c := p.dialWS(t, id, "", hdr)
		if hdr == nil {
			write(t, c, websocket.MessageText, []byte(`{"type":"auth","session_api_key":"`+outerKeys[0]+`"}`))
		}
		write(t, c, websocket.MessageText, []byte(`{"type":"auth","session_api_key":"`+outerKeys[1]+`"}`))
		write(t, c, websocket.MessageText, []byte(`{"type":"auth"}`))
		write(t, c, websocket.MessageText, []byte(`{"type":"auth","session_api_key":"x","extra":1}`)) // not a control frame
		_, b, err := read(t, c)
		if err != nil || string(b) != `{"type":"auth","session_api_key":"x","extra":1}` {
			t.Errorf("%s: first echo = %q, %v; want only the frame that is not an auth control message", name, b, err)
		}
		c.Close(websocket.StatusNormalClosure, "")
	}
}

// TestWSSessionSocketBridged checks the v2 socket reaches the inner
// server's /sockets/session/{id} with after_seq, and an unknown
// conversation closes 4004 there too.
func TestWSSessionSocketBridged(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, nil)
	id := p.create(t, nil)
	resp, b := p.do(t, "POST", "/api/conversations/"+id+"/events", outerKeys[0], strings.NewReader(`{"role":"user","content":[{"type":"text","text":"first"}]}`))
	if resp.StatusCode != 200 {
		t.Fatalf("POST events = %d %s", resp.StatusCode, b)
	}
	c := p.dialSocket(t, "session", id, "after_seq=-1&session_api_key="+outerKeys[0], nil)
	_, sync, err := read(t, c)
	if err != nil || !strings.Contains(string(sync), `"type":"sync"`) || !strings.Contains(string(sync), `"from_seq":-1`) {
		t.Fatalf("first frame = %s, %v; want the inner server's sync from -1", sync, err)
	}
	_, ev, err := read(t, c)
	if err != nil || !strings.Contains(string(ev), `"type":"durable"`) || !strings.Contains(string(ev), `"seq":0`) || !strings.Contains(string(ev), "first") {
		t.Fatalf("replay = %s, %v; want durable seq 0 with the message", ev, err)
	}
	u := p.dialSocket(t, "session", store.NewID(), "", keyHeader(outerKeys[0]))
	expectClose(t, u, CloseUnknownConversation)
}

func TestWSQueryAuthIsStripped(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, nil)
	inner := newWSInner(t)
	id := fake.addCustom(inner.addr, inner.key)
	c := p.dialWS(t, id, "session_api_key="+outerKeys[0]+"&resend_mode=all", nil)
	write(t, c, websocket.MessageText, []byte("ping"))
	if _, b, err := read(t, c); err != nil || string(b) != "ping" {
		t.Fatalf("echo = %q, %v", b, err)
	}
	q, h := inner.last()
	if q != "resend_mode=all" {
		t.Errorf("inner saw query %q, want resend_mode=all only", q)
	}
	if got := h.Get("X-Session-Api-Key"); got != string(inner.key) {
		t.Errorf("inner saw key %q, want the inner key", got)
	}
}

func TestWSUnknownConversation(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, nil)
	for _, id := range []string{store.NewID(), "not-a-uuid"} {
		c := p.dialWS(t, id, "", keyHeader(outerKeys[0]))
		expectClose(t, c, CloseUnknownConversation)
	}
}

func TestWSUpstreamFailure(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, nil)
	id := p.create(t, nil)
	fake.innerOf(id).stop() // the record still says running
	c := p.dialWS(t, id, "", keyHeader(outerKeys[0]))
	expectClose(t, c, CloseUpstreamFailed)

	// An upstream connection that breaks mid-session is 1011 too.
	inner := newWSInner(t)
	id2 := fake.addCustom(inner.addr, inner.key)
	c2 := p.dialWS(t, id2, "", keyHeader(outerKeys[0]))
	write(t, c2, websocket.MessageText, []byte("ping"))
	if _, _, err := read(t, c2); err != nil {
		t.Fatal(err)
	}
	inner.breakAll()
	expectClose(t, c2, CloseUpstreamFailed)
}

func TestWSClosePropagation(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, nil)
	id := p.create(t, nil)

	// Inner server closes: the client gets the same code and reason.
	c := p.dialWS(t, id, "", keyHeader(outerKeys[0]))
	expectHello(t, c, id)
	write(t, c, websocket.MessageText, []byte(`{"type":"close","code":4321,"reason":"bye"}`))
	_, _, err := read(t, c)
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != 4321 || ce.Reason != "bye" {
		t.Errorf("client saw %v, want close 4321 \"bye\"", err)
	}

	// Client closes: the inner server gets the same code.
	inner := newWSInner(t)
	id2 := fake.addCustom(inner.addr, inner.key)
	c2 := p.dialWS(t, id2, "", keyHeader(outerKeys[0]))
	write(t, c2, websocket.MessageText, []byte("x"))
	if _, _, err := read(t, c2); err != nil {
		t.Fatal(err)
	}
	c2.Close(4000, "client done")
	select {
	case got := <-inner.closes:
		if got != 4000 {
			t.Errorf("inner saw close %d, want 4000", got)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("inner server never saw the close")
	}
}

func TestWSSlowClientDoesNotStallOthers(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, func(o *Options) { o.Timeouts.WSWrite = time.Second })
	slowID, fastID := p.create(t, nil), p.create(t, nil)

	slow := p.dialWS(t, slowID, "", keyHeader(outerKeys[0]))
	expectHello(t, slow, slowID)
	// The slow client sends far more than the socket buffers hold and
	// never reads its echoes.
	slowDone := make(chan error, 1)
	go func() {
		msg := bytes.Repeat([]byte("s"), 256<<10)
		for i := 0; i < 256; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			err := slow.Write(ctx, websocket.MessageBinary, msg)
			cancel()
			if err != nil {
				slowDone <- err
				return
			}
		}
		slowDone <- nil
	}()

	fast := p.dialWS(t, fastID, "", keyHeader(outerKeys[0]))
	expectHello(t, fast, fastID)
	for i := range 200 {
		m := []byte("fast message " + string(rune('a'+i%26)))
		write(t, fast, websocket.MessageText, m)
		if _, b, err := read(t, fast); err != nil || !bytes.Equal(b, m) {
			t.Fatalf("fast echo %d = %q, %v", i, b, err)
		}
	}
	// The slow client is disconnected once a write to it times out.
	select {
	case err := <-slowDone:
		if err == nil {
			t.Errorf("the slow client wrote 64 MiB without reading and was never disconnected")
		}
	case <-time.After(60 * time.Second):
		t.Errorf("the slow client was not disconnected within 60s")
		slow.CloseNow()
		<-slowDone
	}
}

func TestWSShutdown(t *testing.T) {
	fake := newFake(t)
	s, err := New(Options{Conversations: fake, Keys: [][]byte{[]byte(outerKeys[0])}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	p := &testProxy{Server: s, url: "http://" + ln.Addr().String(), host: ln.Addr().String(), fake: fake}
	id := p.create(t, nil)
	c := p.dialWS(t, id, "", keyHeader(outerKeys[0]))
	expectHello(t, c, id)
	pending := p.dialWS(t, id, "", nil) // waiting for its first-message auth
	cancel()
	expectClose(t, c, websocket.StatusGoingAway)
	expectClose(t, pending, websocket.StatusGoingAway)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve = %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
}

// wsInner is a minimal inner event socket that records what it got: the
// stand-in cannot report the close code a client sent it.
type wsInner struct {
	addr   string
	key    []byte
	closes chan websocket.StatusCode
	mu     sync.Mutex
	query  string
	header http.Header
	conns  []net.Conn
}

func newWSInner(t testing.TB) *wsInner {
	w := &wsInner{key: randomKey(t), closes: make(chan websocket.StatusCode, 8)}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Session-API-Key") != string(w.key) {
			http.Error(rw, `{"detail":"Unauthorized"}`, http.StatusUnauthorized)
			return
		}
		w.mu.Lock()
		w.query, w.header = r.URL.RawQuery, r.Header.Clone()
		w.mu.Unlock()
		c, err := websocket.Accept(rw, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, b, err := c.Read(r.Context())
			if err != nil {
				w.closes <- websocket.CloseStatus(err)
				return
			}
			if err := c.Write(r.Context(), typ, b); err != nil {
				return
			}
		}
	}))
	srv.Config.ConnState = func(c net.Conn, st http.ConnState) {
		if st == http.StateHijacked {
			w.mu.Lock()
			w.conns = append(w.conns, c)
			w.mu.Unlock()
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	w.addr = srv.Listener.Addr().String()
	return w
}

func (w *wsInner) last() (string, http.Header) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.query, w.header
}

// breakAll drops every WebSocket connection without a close frame.
func (w *wsInner) breakAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.conns {
		c.Close()
	}
}

type countingObserver struct {
	mu       sync.Mutex
	requests map[string]int
	opened   atomic.Int64
	closed   atomic.Int64
	codes    []int
}

func (o *countingObserver) ObserveRequest(route string, status int, d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.requests[route+" "+http.StatusText(status)]++
}

func (o *countingObserver) WebSocketOpened() { o.opened.Add(1) }

func (o *countingObserver) WebSocketClosed(code int, d time.Duration) {
	o.closed.Add(1)
	o.mu.Lock()
	o.codes = append(o.codes, code)
	o.mu.Unlock()
}

func TestObserver(t *testing.T) {
	fake := newFake(t)
	obs := &countingObserver{requests: map[string]int{}}
	p := startProxy(t, fake, func(o *Options) { o.Observer = obs })
	id := p.create(t, nil)
	p.do(t, "GET", "/api/conversations/count", outerKeys[0], nil)
	p.do(t, "GET", "/api/conversations/count", "", nil)
	p.do(t, "GET", "/api/conversations/"+id+"/echo/x", outerKeys[0], nil)
	c := p.dialWS(t, id, "", keyHeader(outerKeys[0]))
	expectHello(t, c, id)
	c.Close(4000, "")
	// The handler finishes after the close handshake; wait for it.
	deadline := time.Now().Add(20 * time.Second)
	for obs.closed.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	for _, want := range []string{"create Created", "count OK", "count Unauthorized", "forward OK", "events Switching Protocols"} {
		if obs.requests[want] != 1 {
			t.Errorf("observed %v, want one %q", obs.requests, want)
		}
	}
	if obs.opened.Load() != 1 || obs.closed.Load() != 1 || len(obs.codes) != 1 || obs.codes[0] != 4000 {
		t.Errorf("WebSocket opened %d closed %d codes %v, want 1, 1, [4000]", obs.opened.Load(), obs.closed.Load(), obs.codes)
	}
}

func TestParseAuthMessage(t *testing.T) {
	for _, tc := range []struct {
		in   string
		key  string
		want bool
	}{
		{`{"type":"auth","session_api_key":"k"}`, "k", true},
		{`{"type":"auth","session_api_key":""}`, "", true},
		{`{"type":"auth"}`, "", false},
		{`{"type":"Auth","session_api_key":"k"}`, "", false},
		{`{"type":"auth","session_api_key":3}`, "", false},
		{`{"type":"auth","session_api_key":"k"} {}`, "", false},
		{`[]`, "", false},
	} {
		key, ok := parseAuthMessage(websocket.MessageText, []byte(tc.in))
		if ok != tc.want || key != tc.key {
			t.Errorf("parseAuthMessage(%q) = %q, %v; want %q, %v", tc.in, key, ok, tc.key, tc.want)
		}
	}
	if _, ok := parseAuthMessage(websocket.MessageBinary, []byte(`{"type":"auth","session_api_key":"k"}`)); ok {
		t.Errorf("a binary auth frame was accepted")
	}
}

func TestWSKeepalive(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, func(o *Options) {
		o.Timeouts.WSPing = 50 * time.Millisecond
		o.Timeouts.WSWrite = 500 * time.Millisecond
	})
	id := p.create(t, nil)
	dial := func(answer bool, pings *atomic.Int64) *websocket.Conn {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c, _, err := websocket.Dial(ctx, "ws://"+p.host+"/sockets/events/"+id, &websocket.DialOptions{
			HTTPHeader: keyHeader(outerKeys[0]),
			OnPingReceived: func(context.Context, []byte) bool {
				pings.Add(1)
				return answer
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.CloseNow() })
		return c
	}

	// A client that answers pings stays connected across many of them.
	var pings atomic.Int64
	c := dial(true, &pings)
	expectHello(t, c, id)
	readErr := make(chan error, 1)
	go func() {
		_, _, err := c.Read(context.Background())
		readErr <- err
	}()
	deadline := time.Now().Add(20 * time.Second)
	for pings.Load() < 5 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if pings.Load() < 5 {
		t.Fatalf("got %d pings in 20s at a 50ms interval", pings.Load())
	}
	select {
	case err := <-readErr:
		t.Fatalf("a client answering pings was disconnected: %v", err)
	default:
	}
	write(t, c, websocket.MessageText, []byte("still here"))
	if err := <-readErr; err != nil {
		t.Fatalf("echo after pings: %v", err)
	}

	// A client that never answers is disconnected.
	var silent atomic.Int64
	d := dial(false, &silent)
	expectHello(t, d, id)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, _, err := d.Read(ctx); err == nil || ctx.Err() != nil {
		t.Fatalf("a client that never answers pings: read = %v (ctx %v), want the connection dropped", err, ctx.Err())
	}
}
