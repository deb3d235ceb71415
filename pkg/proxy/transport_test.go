package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingServer is an HTTP server on loopback that counts the
// connections it accepts.
type countingServer struct {
	addr  string
	conns atomic.Int64
}

func startCounting(t *testing.T, h http.Handler) *countingServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cs := &countingServer{addr: ln.Addr().String()}
	srv := &http.Server{Handler: h, ConnState: func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			cs.conns.Add(1)
		}
	}}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return cs
}

// rawServer answers every connection with fn, for answers net/http would
// not write (a close mid-answer, a 1xx, nothing at all).
func rawServer(t *testing.T, fn func(c net.Conn, n int)) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int64
	var wg sync.WaitGroup
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := int(conns.Add(1))
			wg.Go(func() {
				defer c.Close()
				fn(c, n)
			})
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return ln.Addr().String(), &conns
}

func newTestTransport(responseHeader, idle time.Duration) (*innerTransport, *atomic.Int64) {
	var dials atomic.Int64
	d := &net.Dialer{Timeout: 5 * time.Second}
	t := &innerTransport{
		fallback: &http.Transport{Proxy: nil, DisableCompression: true},
		dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return d.DialContext(ctx, network, addr)
		},
		responseHeader: responseHeader, idleTimeout: idle, maxIdlePerHost: 4, maxIdle: 8,
	}
	return t, &dials
}

func get(t *testing.T, rt http.RoundTripper, method, url string) (*http.Response, string, error) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b), err
}

// readRequestHead reads one request's head from br (the requests here have
// no body).
func readRequestHead(br *bufio.Reader) error {
	_, err := http.ReadRequest(br)
	return err
}

func TestInnerTransportReusesOneConnection(t *testing.T) {
	cs := startCounting(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodHead {
			fmt.Fprintf(w, "answer to %s", r.URL.Path)
		}
	}))
	tr, dials := newTestTransport(time.Minute, time.Minute)
	for i := range 50 {
		method := http.MethodGet
		if i%5 == 4 {
			method = http.MethodHead
		}
		resp, body, err := get(t, tr, method, fmt.Sprintf("http://%s/p%d", cs.addr, i))
		want := fmt.Sprintf("answer to /p%d", i)
		if method == http.MethodHead {
			want = ""
		}
		if err != nil || resp.StatusCode != 200 || body != want {
			t.Fatalf("%s %d = %v %q %v, want 200 %q", method, i, resp, body, err, want)
		}
	}
	if n, d := cs.conns.Load(), dials.Load(); n != 1 || d != 1 {
		t.Errorf("50 sequential requests used %d connections (%d dials), want 1", n, d)
	}
	// A request with a body is not this transport's: the fallback's.
	req, _ := http.NewRequest(http.MethodPost, "http://"+cs.addr+"/post", strings.NewReader("x"))
	resp, err := tr.RoundTrip(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("POST through the fallback = %v, %v", resp, err)
	}
	resp.Body.Close()
	if d := dials.Load(); d != 1 {
		t.Errorf("a POST dialed through the synchronous path (%d dials)", d)
	}
}

func TestSyncable(t *testing.T) {
	for _, tc := range []struct {
		method, body, upgrade string
		want                  bool
	}{
		{"GET", "", "", true},
		{"HEAD", "", "", true},
		{"GET", "body", "", false},
		{"GET", "", "websocket", false},
		{"POST", "", "", false},
		{"DELETE", "", "", false},
	} {
		var body io.Reader
		if tc.body != "" {
			body = strings.NewReader(tc.body)
		}
		req, _ := http.NewRequest(tc.method, "http://x/", body)
		if tc.upgrade != "" {
			req.Header.Set("Upgrade", tc.upgrade)
		}
		if got := syncable(req); got != tc.want {
			t.Errorf("syncable(%s body=%q upgrade=%q) = %v, want %v", tc.method, tc.body, tc.upgrade, got, tc.want)
		}
	}
}

// A server that closes each connection after one answer (without saying
// so): the next request finds the pooled connection dead before any byte
// of an answer and is sent again on a new one.
func TestInnerTransportRetriesAConnectionClosedWhileIdle(t *testing.T) {
	var served atomic.Int64
	addr, conns := rawServer(t, func(c net.Conn, _ int) {
		if readRequestHead(bufio.NewReader(c)) != nil {
			return
		}
		served.Add(1)
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	tr, _ := newTestTransport(time.Minute, time.Minute)
	for i := range 5 {
		if resp, body, err := get(t, tr, "GET", "http://"+addr+"/"); err != nil || resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("request %d = %v %q %v", i, resp, body, err)
		}
		time.Sleep(10 * time.Millisecond) // let the close arrive
	}
	if s, c := served.Load(), conns.Load(); s != 5 || c != 5 {
		t.Errorf("served %d requests on %d connections, want 5 on 5", s, c)
	}
}

// An answer cut off after its first bytes is an error, not a retry: the
// server may have acted on the request.
func TestInnerTransportDoesNotRetryAfterAPartialAnswer(t *testing.T) {
	var served atomic.Int64
	addr, _ := rawServer(t, func(c net.Conn, _ int) {
		br := bufio.NewReader(c)
		for {
			if readRequestHead(br) != nil {
				return
			}
			if served.Add(1) == 1 {
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				continue
			}
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Le")
			return
		}
	})
	tr, _ := newTestTransport(time.Minute, time.Minute)
	if _, body, err := get(t, tr, "GET", "http://"+addr+"/"); err != nil || body != "ok" {
		t.Fatalf("first request = %q, %v", body, err)
	}
	if _, _, err := get(t, tr, "GET", "http://"+addr+"/"); err == nil {
		t.Fatal("a cut-off answer gave no error")
	}
	if s := served.Load(); s != 2 {
		t.Errorf("the server saw %d requests, want 2 (no retry after a partial answer)", s)
	}
}

func TestInnerTransportDropsInformationalAnswers(t *testing.T) {
	addr, _ := rawServer(t, func(c net.Conn, _ int) {
		if readRequestHead(bufio.NewReader(c)) != nil {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"+
			"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfinal")
	})
	tr, _ := newTestTransport(time.Minute, time.Minute)
	resp, body, err := get(t, tr, "GET", "http://"+addr+"/")
	if err != nil || resp.StatusCode != 200 || body != "final" {
		t.Errorf("after a 103: %v %q %v, want 200 \"final\"", resp, body, err)
	}
}

func TestInnerTransportResponseHeaderTimeout(t *testing.T) {
	addr, _ := rawServer(t, func(c net.Conn, _ int) {
		_ = readRequestHead(bufio.NewReader(c))
		_, _ = io.Copy(io.Discard, c) // never answers
	})
	tr, _ := newTestTransport(200*time.Millisecond, time.Minute)
	start := time.Now()
	_, _, err := get(t, tr, "GET", "http://"+addr+"/")
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("no answer = %v, want a timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the timeout took %v", d)
	}
}

// The client going away ends the wait for an answer at once, and the
// connection is not reused.
func TestInnerTransportCancel(t *testing.T) {
	release := make(chan struct{})
	cs := startCounting(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		_, _ = io.WriteString(w, "ok")
	}))
	defer close(release)
	tr, _ := newTestTransport(time.Minute, time.Minute)
	if _, body, err := get(t, tr, "GET", "http://"+cs.addr+"/"); err != nil || body != "ok" {
		t.Fatalf("warm-up = %q %v", body, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+cs.addr+"/slow", nil)
	start := time.Now()
	if _, err := tr.RoundTrip(req); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("cancelled request = %v, want its context's error", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cancel took %v", d)
	}
	if _, body, err := get(t, tr, "GET", "http://"+cs.addr+"/"); err != nil || body != "ok" {
		t.Fatalf("after a cancel = %q %v", body, err)
	}
	if n := cs.conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2: the cancelled one must not be reused", n)
	}
}

// Closing an answer before its end (a client that left a stream) closes
// the connection instead of draining it.
func TestInnerTransportEarlyCloseDoesNotDrain(t *testing.T) {
	cs := startCounting(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/stream" {
			_, _ = io.WriteString(w, "ok")
			return
		}
		for r.Context().Err() == nil {
			if _, err := io.WriteString(w, "data: tick\n\n"); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			time.Sleep(time.Millisecond)
		}
	}))
	tr, _ := newTestTransport(time.Minute, time.Minute)
	req, _ := http.NewRequest("GET", "http://"+cs.addr+"/stream", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if _, err := io.ReadAtLeast(resp.Body, buf, 12); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		resp.Body.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("closing an endless answer blocked (drained?)")
	}
	if _, body, err := get(t, tr, "GET", "http://"+cs.addr+"/"); err != nil || body != "ok" {
		t.Fatalf("after an early close = %q %v", body, err)
	}
	if n := cs.conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
}

func TestInnerTransportIdleTimeoutAndLimits(t *testing.T) {
	cs := startCounting(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	tr, dials := newTestTransport(time.Minute, 50*time.Millisecond)
	if _, _, err := get(t, tr, "GET", "http://"+cs.addr+"/"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(120 * time.Millisecond)
	if _, _, err := get(t, tr, "GET", "http://"+cs.addr+"/"); err != nil {
		t.Fatal(err)
	}
	if d := dials.Load(); d != 2 {
		t.Errorf("%d dials, want 2: a connection idle past the timeout is not reused", d)
	}

	// Many at once: at most maxIdlePerHost stay in the pool.
	tr.idleTimeout = time.Minute
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 16 {
		wg.Go(func() {
			<-start
			if _, body, err := get(t, tr, "GET", "http://"+cs.addr+"/"); err != nil || body != "ok" {
				t.Errorf("concurrent request = %q %v", body, err)
			}
		})
	}
	close(start)
	wg.Wait()
	tr.mu.Lock()
	n, per := tr.nIdle, len(tr.idle[cs.addr])
	tr.mu.Unlock()
	if per > tr.maxIdlePerHost || n != per {
		t.Errorf("pool holds %d (%d for the host), want at most %d", n, per, tr.maxIdlePerHost)
	}
	tr.CloseIdleConnections()
	tr.mu.Lock()
	n = tr.nIdle
	tr.mu.Unlock()
	if n != 0 {
		t.Errorf("%d idle after CloseIdleConnections", n)
	}
}

func TestInnerTransportConcurrent(t *testing.T) {
	cs := startCounting(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.URL.Path)
	}))
	tr, _ := newTestTransport(time.Minute, time.Minute)
	// The pool can keep every client's connection: each goroutine then
	// reuses one, and a ninth connection means one was lost or leaked. (With
	// a smaller pool, a put over the limit closes a connection and the next
	// get dials: more connections, legitimately.)
	tr.maxIdlePerHost, tr.maxIdle = 8, 8
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 40 {
				p := fmt.Sprintf("/g%d/%d", g, i)
				if _, body, err := get(t, tr, "GET", "http://"+cs.addr+p); err != nil || body != p {
					t.Errorf("GET %s = %q %v", p, body, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := cs.conns.Load(); n > 8 {
		t.Errorf("%d connections for 8 concurrent clients", n)
	}
}
