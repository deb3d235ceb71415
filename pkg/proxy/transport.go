package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// innerTransport carries forwarded requests without a body (GET and HEAD,
// the conversation API's hot path) to inner servers: it writes the request
// and reads the answer on the handler's own goroutine, over a pool of idle
// keep-alive connections per inner address. http.Transport gives every
// connection a reader and a writer goroutine and reads ahead after each
// answer; on a busy 2-core host those hand-offs and the extra read cost
// more than the forwarding itself. Every other request (a body, an
// upgrade) goes to fallback.
type innerTransport struct {
	fallback *http.Transport
	// dial opens a connection to addr (the request's URL host); its
	// context carries the request's values (the target's own dialer).
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// responseHeader bounds the wait for the status line and headers.
	responseHeader time.Duration
	// dialTimeout bounds a target's own dialer (fwdTarget.dial).
	dialTimeout time.Duration
	// idleTimeout closes connections idle longer; maxIdlePerHost and
	// maxIdle bound the pool.
	idleTimeout             time.Duration
	maxIdlePerHost, maxIdle int

	mu        sync.Mutex
	idle      map[string][]*innerConn // by address, most recent last
	nIdle     int
	lastSweep time.Time
}

// innerConn is one keep-alive connection to an inner server.
type innerConn struct {
	t    *innerTransport
	addr string
	c    net.Conn
	br   *bufio.Reader
	bw   *bufio.Writer
	// read counts bytes read since the current request was written, to
	// tell a connection the server had already closed (nothing read) from
	// a failure mid-answer.
	read      int64
	idleSince time.Time
	// abort ends blocked I/O on c (the request's context ended).
	abort func()
}

func (pc *innerConn) Read(p []byte) (int, error) {
	n, err := pc.c.Read(p)
	pc.read += int64(n)
	return n, err
}

// syncable reports whether req takes the synchronous path.
func syncable(req *http.Request) bool {
	return (req.Method == http.MethodGet || req.Method == http.MethodHead) &&
		(req.Body == nil || req.Body == http.NoBody) && req.ContentLength == 0 &&
		req.URL.Scheme == "http" && req.Header.Get("Upgrade") == ""
}

// RoundTrip implements http.RoundTripper.
func (t *innerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !syncable(req) {
		return t.fallback.RoundTrip(req)
	}
	return t.do(req, nil, writeWholeRequest)
}

// headWriter writes the head of a request (request line and headers) to
// an inner connection: writeWholeRequest, or writeRequestHead for a
// forwarded request (ft).
type headWriter func(bw *bufio.Writer, req *http.Request, ft *fwdTarget) error

func writeWholeRequest(bw *bufio.Writer, req *http.Request, _ *fwdTarget) error {
	return req.Write(bw)
}

// do sends a request without a body: to ft's inner server through ft's
// dialer when ft is not nil, else to req's URL host through t.dial (with
// the context's dialer). writeHead writes its head; req gives the method
// (for ReadResponse) and the context (the request's end).
func (t *innerTransport) do(req *http.Request, ft *fwdTarget, writeHead headWriter) (*http.Response, error) {
	addr := req.URL.Host
	if ft != nil {
		addr = ft.addr
	}
	for attempt := 0; ; attempt++ {
		pc, reused := t.get(addr)
		if pc == nil {
			c, err := t.dialFor(req.Context(), addr, ft)
			if err != nil {
				return nil, err
			}
			pc = t.newConn(addr, c)
		}
		resp, err := pc.roundTrip(req, ft, writeHead)
		if err == nil {
			return resp, nil
		}
		// A reused connection the server closed while it idled fails
		// before any byte of an answer: try once more on a new one (GET
		// and HEAD are idempotent), as http.Transport does.
		if reused && attempt == 0 && pc.read == 0 && req.Context().Err() == nil {
			continue
		}
		return nil, err
	}
}

// dialFor opens a connection to addr: through ft's own dialer (bounded
// by dialTimeout) when it has one, else through t.dial.
func (t *innerTransport) dialFor(ctx context.Context, addr string, ft *fwdTarget) (net.Conn, error) {
	if ft != nil && ft.dial != nil {
		ctx, cancel := context.WithTimeout(ctx, t.dialTimeout)
		defer cancel()
		return ft.dial(ctx)
	}
	return t.dial(ctx, "tcp", addr)
}

func (t *innerTransport) newConn(addr string, c net.Conn) *innerConn {
	pc := &innerConn{t: t, addr: addr, c: c, bw: bufio.NewWriterSize(c, 4<<10)}
	pc.br = bufio.NewReaderSize(pc, 4<<10)
	pc.abort = func() { _ = c.SetDeadline(aLongTimeAgo) }
	return pc
}

// get takes the most recently used idle connection to addr, if any.
func (t *innerTransport) get(addr string) (*innerConn, bool) {
	now := time.Now()
	t.mu.Lock()
	var stale []*innerConn
	if now.Sub(t.lastSweep) > t.idleTimeout/2 {
		stale = t.sweepLocked(now)
	}
	var pc *innerConn
	for l := t.idle[addr]; len(l) > 0 && pc == nil; l = t.idle[addr] {
		c := l[len(l)-1]
		l[len(l)-1] = nil
		t.idle[addr] = l[:len(l)-1]
		t.nIdle--
		if now.Sub(c.idleSince) > t.idleTimeout {
			stale = append(stale, c)
			continue
		}
		pc = c
	}
	// An address's list stays when it empties (the next put reuses its
	// array); the sweep drops it once it has stayed empty.
	t.mu.Unlock()
	for _, c := range stale {
		c.c.Close()
	}
	return pc, pc != nil
}

// put returns pc to the pool, or closes it when the pool is full.
func (t *innerTransport) put(pc *innerConn) {
	pc.idleSince = time.Now()
	t.mu.Lock()
	if t.idle == nil {
		t.idle = map[string][]*innerConn{}
	}
	if len(t.idle[pc.addr]) >= t.maxIdlePerHost || t.nIdle >= t.maxIdle {
		t.mu.Unlock()
		pc.c.Close()
		return
	}
	t.idle[pc.addr] = append(t.idle[pc.addr], pc)
	t.nIdle++
	t.mu.Unlock()
}

// sweepLocked removes the connections idle longer than idleTimeout (those
// of a stopped conversation, say) and returns them to be closed.
func (t *innerTransport) sweepLocked(now time.Time) []*innerConn {
	t.lastSweep = now
	var stale []*innerConn
	for addr, l := range t.idle {
		keep := l[:0]
		for _, c := range l {
			if now.Sub(c.idleSince) > t.idleTimeout {
				stale = append(stale, c)
				t.nIdle--
			} else {
				keep = append(keep, c)
			}
		}
		if len(keep) == 0 {
			delete(t.idle, addr)
		} else {
			t.idle[addr] = keep
		}
	}
	return stale
}

// CloseIdleConnections closes every idle connection (both paths).
func (t *innerTransport) CloseIdleConnections() {
	t.mu.Lock()
	all := t.idle
	t.idle, t.nIdle = nil, 0
	t.mu.Unlock()
	for _, l := range all {
		for _, c := range l {
			c.c.Close()
		}
	}
	t.fallback.CloseIdleConnections()
}

// aLongTimeAgo is a deadline in the past: setting it ends blocked I/O.
var aLongTimeAgo = time.Unix(1, 0)

// roundTrip writes a request's head and reads the answer's; the body is read by
// the caller through the returned response, after which the connection
// goes back to the pool (or is closed). When ft.plain answered the
// request itself, the response is nil (and so is the error).
func (pc *innerConn) roundTrip(req *http.Request, ft *fwdTarget, writeHead headWriter) (*http.Response, error) {
	pc.read = 0
	// The request's end (the client went away) ends any I/O in progress.
	stop := context.AfterFunc(req.Context(), pc.abort)
	fail := func(err error) (*http.Response, error) {
		stop()
		pc.c.Close()
		if cerr := req.Context().Err(); cerr != nil {
			return nil, cerr
		}
		return nil, err
	}
	if err := writeHead(pc.bw, req, ft); err != nil {
		return fail(err)
	}
	if err := pc.bw.Flush(); err != nil {
		return fail(err)
	}
	if pc.t.responseHeader > 0 {
		_ = pc.c.SetReadDeadline(time.Now().Add(pc.t.responseHeader))
	}
	if ft != nil && ft.plain != nil {
		// The lean path answers a plain answer itself (lean.go).
		answered, reuse, err := ft.plain(pc)
		if err != nil {
			return fail(err)
		}
		if answered {
			pc.release(stop, reuse)
			return nil, nil
		}
	}
	var resp *http.Response
	for {
		var err error
		resp, err = http.ReadResponse(pc.br, req)
		if err != nil {
			return fail(err)
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		// 1xx informational answers (103 Early Hints) are dropped: the
		// final answer follows on the same connection.
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return fail(fmt.Errorf("inner server switched protocols on a %s without Upgrade", req.Method))
	}
	if pc.t.responseHeader > 0 {
		_ = pc.c.SetReadDeadline(time.Time{})
	}
	reuse := !resp.Close && !req.Close
	if resp.Body == http.NoBody || resp.Body == nil {
		pc.release(stop, reuse)
		return resp, nil
	}
	resp.Body = &innerBody{rc: resp.Body, pc: pc, stop: stop, reuse: reuse}
	return resp, nil
}

// release ends a request on pc: back to the pool when the answer was read
// whole and the request did not end meanwhile, else closed.
func (pc *innerConn) release(stop func() bool, reuse bool) {
	if !stop() { // the request's context ended: the deadline is set
		reuse = false
	}
	if reuse {
		pc.t.put(pc)
		return
	}
	pc.c.Close()
}

// innerBody is an answer's body on the synchronous path; reading it to
// the end frees the connection for the next request.
type innerBody struct {
	rc    io.ReadCloser
	pc    *innerConn
	stop  func() bool
	reuse bool
	done  bool
}

func (b *innerBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.rc.Read(p)
	if err != nil {
		b.done = true
		b.pc.release(b.stop, b.reuse && errors.Is(err, io.EOF))
	}
	return n, err
}

// Close before the end closes the connection: draining an answer nobody
// reads (a stream, say) could take forever.
func (b *innerBody) Close() error {
	if !b.done {
		b.done = true
		b.pc.release(b.stop, false)
	}
	return nil
}
