package broker

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// ServeWithForwardProxy serves the relay's listener ln: a connection
// whose first request is a proxy request (CONNECT host:port, or an
// absolute-form URL) is handed over to the broker (Client.HandOff), which
// serves the forward proxy on it; every other connection goes to srv (the
// Relay). It returns when ln fails or srv is closed; closing srv (Close or
// Shutdown) also closes ln.
func ServeWithForwardProxy(srv *http.Server, ln net.Listener, c *Client) error {
	fp := &relayProxy{c: c, inner: newChanListener(ln)}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(fp.inner) }()
	for {
		conn, err := ln.Accept()
		if err != nil {
			fp.inner.Close()
			fp.wg.Wait()
			if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
				return serr
			}
			return err
		}
		fp.wg.Add(1)
		go func() {
			defer fp.wg.Done()
			fp.route(conn)
		}()
	}
}

type relayProxy struct {
	c     *Client
	inner *chanListener
	wg    sync.WaitGroup
}

// route reads the first request line of conn and hands it over to the
// broker as a proxy client or to the Relay's server.
func (fp *relayProxy) route(conn net.Conn) {
	br := bufio.NewReaderSize(conn, maxProxyHead)
	_ = conn.SetReadDeadline(time.Now().Add(proxyHeadTimeout))
	line, err := peekLine(br)
	if err != nil && len(line) == 0 {
		_ = conn.Close()
		return
	}
	method, target, _ := strings.Cut(string(line), " ")
	if method != http.MethodConnect && (strings.HasPrefix(target, "/") || strings.HasPrefix(target, "* ") || err != nil) {
		_ = conn.SetReadDeadline(time.Time{})
		if !fp.inner.hand(&bufferedConn{Conn: conn, r: br}) {
			_ = conn.Close()
		}
		return
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Time{})
	held, _ := br.Peek(br.Buffered())
	ctx, cancel := context.WithTimeout(context.Background(), handoffTimeout)
	defer cancel()
	if err := fp.c.HandOff(ctx, conn, held); err != nil {
		egressError(conn, err)
	}
}

// chanListener is a net.Listener of connections handed to it: the Relay's
// server serves those the proxy does not.
type chanListener struct {
	ln     net.Listener
	ch     chan net.Conn
	once   sync.Once
	closed chan struct{}
}

func newChanListener(ln net.Listener) *chanListener {
	return &chanListener{ln: ln, ch: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *chanListener) hand(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.closed:
		return false
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Close stops the listener and the real one beneath it.
func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.closed); _ = l.ln.Close() })
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.ln.Addr() }
