package proxy

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// front is what Serve listens with: it reads each connection's requests
// itself and answers the hot path's (lean.go: a forwarded GET with
// nothing unusual about it) without net/http's server, whose per-request
// work (a header map, a URL, a background read that watches for the
// client going away, a response writer) cost as much CPU as the
// forwarding. At the first request it does not take, it hands the
// connection, with every byte it has read and not used, to net/http's
// server (through handoff, that server's listener), which serves it to
// its end.
type front struct {
	s       *Server
	ln      net.Listener
	base    context.Context // the lean requests' context: ends after shutdown
	handoff *handoffListener

	mu      sync.Mutex
	conns   map[*leanConn]struct{} // served here (not handed off)
	closing bool
	wg      sync.WaitGroup // serve goroutines
}

func newFront(s *Server, ln net.Listener, base context.Context) *front {
	return &front{
		s: s, ln: ln, base: base, conns: map[*leanConn]struct{}{},
		handoff: &handoffListener{addr: ln.Addr(), ch: make(chan net.Conn), done: make(chan struct{})},
	}
}

// acceptLoop accepts connections until the listener fails or is closed,
// backing off on temporary errors as net/http's server does.
func (f *front) acceptLoop() error {
	var delay time.Duration
	for {
		c, err := f.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		lc := f.track(c)
		if lc == nil {
			c.Close()
			continue
		}
		go lc.serve()
	}
}

// track registers a new connection; nil once the front is closing.
func (f *front) track(c net.Conn) *leanConn {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closing {
		return nil
	}
	lc := newLeanConn(f, c)
	f.conns[lc] = struct{}{}
	f.wg.Add(1)
	return lc
}

func (f *front) untrack(lc *leanConn) {
	f.mu.Lock()
	delete(f.conns, lc)
	f.mu.Unlock()
}

func (f *front) isClosing() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closing
}

// shutdown stops the front taking requests: the listener is closed,
// connections waiting for a request are closed, and those answering one
// get until ctx ends to finish (then they are closed too), as
// http.Server.Shutdown treats its own.
func (f *front) shutdown(ctx context.Context) {
	f.mu.Lock()
	f.closing = true
	f.mu.Unlock()
	_ = f.ln.Close()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		f.mu.Lock()
		n := 0
		for lc := range f.conns {
			if lc.busy.Load() {
				n++
				continue
			}
			_ = lc.c.Close()
		}
		f.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-ctx.Done():
			f.close()
			return
		case <-t.C:
		}
	}
}

// close closes every connection still served here.
func (f *front) close() {
	f.mu.Lock()
	f.closing = true
	for lc := range f.conns {
		_ = lc.c.Close()
	}
	f.mu.Unlock()
}

// handoffListener is net/http's server's listener: it yields the
// connections the front hands over.
type handoffListener struct {
	addr net.Addr
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *handoffListener) Addr() net.Addr { return l.addr }

// give hands c to net/http's server; false once that no longer accepts.
func (l *handoffListener) give(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

// handedConn is a connection handed to net/http: the bytes the front
// read ahead come first.
type handedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *handedConn) Read(p []byte) (int, error) {
	if c.r != nil {
		if c.r.Buffered() > 0 {
			return c.r.Read(p)
		}
		c.r = nil
	}
	return c.Conn.Read(p)
}

// leanConn is one client connection served by the front.
type leanConn struct {
	f  *front
	c  net.Conn
	br *bufio.Reader
	bw *bufio.Writer
	// busy is set while a request is being answered (shutdown waits for
	// it), clear while the connection waits for one (shutdown closes it).
	busy atomic.Bool
	// req is the request handed to the shared forwarding code (its
	// method, context and, in logs, its path), rebuilt per request from
	// req0, which is made once per connection.
	req       *http.Request
	cancel    context.CancelFunc // ends req's context: the connection ended
	idleSet   time.Time          // when the idle deadline was last set
	lr        leanRequest
	w         leanWriter
	ans       plainHead
	ft        *fwdTarget // the request's target while plainAnswer may run
	headFunc  headWriter
	plainFunc func(pc *innerConn) (answered, reuse bool, err error)
}

func newLeanConn(f *front, c net.Conn) *leanConn {
	lc := &leanConn{f: f, c: c, br: bufio.NewReaderSize(c, leanBufSize), bw: bufio.NewWriterSize(c, leanBufSize)}
	// The requests' context is the connection's own (a request's abort
	// hook is registered there, not with every other connection's on
	// the server's context).
	ctx, cancel := context.WithCancel(f.base)
	lc.cancel = cancel
	lc.req = (&http.Request{Method: http.MethodGet, URL: &url.URL{}, Header: http.Header{}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}).WithContext(ctx)
	lc.headFunc, lc.plainFunc = lc.writeInnerHead, lc.plainAnswer
	return lc
}

// leanBufSize is the size of a connection's read and write buffers: a
// request head that does not fit goes to net/http (which takes up to 1
// MiB).
const leanBufSize = 4 << 10

// serve reads requests until the connection ends or is handed off.
func (lc *leanConn) serve() {
	handed := false
	defer lc.f.wg.Done()
	defer func() {
		// A bug must cost one connection, not the daemon (as net/http's
		// server recovers its handlers' panics).
		if p := recover(); p != nil {
			lc.f.s.log.Error("conversation API: panic reading a request", "panic", p, "stack", string(debug.Stack()))
		}
		lc.cancel()
		lc.f.untrack(lc)
		if !handed {
			_ = lc.c.Close()
		}
	}()
	t := lc.f.s.t
	for {
		if lc.f.isClosing() {
			return
		}
		// A keep-alive connection waits for its next request at most
		// Timeouts.Idle, and the rest of a head that came in parts at
		// most Timeouts.ReadHeader.
		// The deadline moves at most once a second (each move costs a
		// timer update): the wait may end up to a second early.
		if now := time.Now(); now.Sub(lc.idleSet) >= time.Second {
			_ = lc.c.SetReadDeadline(now.Add(t.Idle))
			lc.idleSet = now
		}
		if _, err := lc.br.Peek(1); err != nil {
			return
		}
		lc.busy.Store(true)
		n, ok := lc.peekHead(t.ReadHeader)
		if !ok || !lc.lr.parse(lc.f.s, lc.br, n) {
			// Not the hot path (or not a head the front reads): net/http
			// answers this request and every later one.
			_ = lc.c.SetReadDeadline(time.Time{})
			lc.f.untrack(lc)
			if lc.f.handoff.give(&handedConn{Conn: lc.c, r: lc.br}) {
				handed = true
			}
			return
		}
		keep := lc.answer(n)
		lc.busy.Store(false)
		if !keep {
			return
		}
	}
}

// peekHead finds the end of the request head in the read buffer, reading
// more as needed; it returns the head's length (blank line included), or
// false when the head does not fit in the buffer, the client stopped, or
// its first line is not a GET (then net/http reads it).
func (lc *leanConn) peekHead(readHeader time.Duration) (int, bool) {
	deadlineSet := false
	for {
		buf, _ := lc.br.Peek(lc.br.Buffered())
		if len(buf) >= 4 && string(buf[:4]) != "GET " {
			return 0, false
		}
		i, bare := indexHeadEnd(buf)
		if bare {
			return 0, false // a line ending in a bare LF: net/http's
		}
		if i >= 0 {
			return i, true
		}
		if len(buf) >= leanBufSize {
			return 0, false
		}
		if !deadlineSet {
			_ = lc.c.SetReadDeadline(time.Now().Add(readHeader))
			deadlineSet, lc.idleSet = true, time.Time{}
		}
		if _, err := lc.br.Peek(len(buf) + 1); err != nil {
			// A client that went quiet mid-head: net/http answers it as
			// it would have (408, or nothing on a closed connection).
			return 0, false
		}
	}
}

// indexHeadEnd returns the length of the head in buf, up to and
// including the blank line that ends it, or -1; bare reports a line that
// ends in a LF without a CR before the head's end (a head the lean path
// does not read, and whose end it would not find).
func indexHeadEnd(buf []byte) (n int, bare bool) {
	for i := 0; i < len(buf); i++ {
		if buf[i] != '\n' {
			continue
		}
		if i == 0 || buf[i-1] != '\r' {
			return -1, true
		}
		if i >= 3 && buf[i-3] == '\r' && buf[i-2] == '\n' {
			return i + 1, false
		}
	}
	return -1, false
}
