package broker

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// The forward proxy is the container's way out (DESIGN §5): the relay's
// address (RelayAddr) is the container's HTTP_PROXY and HTTPS_PROXY, and
// a connection whose first request is a proxy request — CONNECT
// host:port, or an absolute-form http:// URL — is handed over to the
// broker (handoff.go), which serves it here. Each destination is an
// egress connection: the broker checks the grant, dials on the host and
// audits it (one record each, written when it ends). A refusal is
// answered with the broker's status and its one line (naming the grant
// command) as text, and the connection is closed.
//
// The proxy reads every request head itself before net/http's parser
// sees it, and refuses what two parsers could read differently (request
// smuggling): a Host header other than the CONNECT target or the absolute
// URL's authority, more than one Host or Content-Length, a
// Transfer-Encoding other than exactly "chunked" or beside a
// Content-Length, a body on a CONNECT, a line ending in a bare LF, and
// bytes sent after a CONNECT before its answer (a pipelined request). A
// forwarded request's body is passed to the destination as data: a
// request inside a chunked body is never read as one here.
const (
	maxProxyHead     = 64 << 10
	proxyHeadTimeout = 30 * time.Second
)

// peekLine returns the first line of br (without consuming it).
func peekLine(br *bufio.Reader) ([]byte, error) {
	b, err := peekUntil(br, []byte("\n"))
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return b[:i], nil
	}
	return b, err
}

// peekUntil reads into br's buffer, without consuming, until it holds
// sep, the buffer is full or the connection fails, and returns what it
// holds.
func peekUntil(br *bufio.Reader, sep []byte) ([]byte, error) {
	for {
		b, err := br.Peek(br.Buffered())
		if bytes.Contains(b, sep) {
			return b, nil
		}
		if len(b) == br.Size() {
			return b, bufio.ErrBufferFull
		}
		if _, err = br.Peek(len(b) + 1); err != nil {
			b, _ = br.Peek(br.Buffered())
			return b, err
		}
	}
}

// proxyHead is a request head as the proxy reads it, checked.
type proxyHead struct {
	method, target string
	authority      string // host:port to dial
	// lean says the request can be forwarded as bytes (forwardLean): an
	// HTTP/1.1 request without Transfer-Encoding, Expect or Upgrade,
	// whose body is length bytes (0 without a Content-Length); uri is its
	// origin form and hasHost says it has a Host header.
	lean    bool
	uri     string
	length  int64
	host    string // the URL's host, for a Host field when the request has none
	hasHost bool
	close   bool // Connection: close
}

// readHead peeks at the next request head in br and checks it; the head
// stays in br for net/http to read.
func readHead(br *bufio.Reader) (proxyHead, *proxyError) {
	b, err := peekUntil(br, []byte("\r\n\r\n"))
	i := bytes.Index(b, []byte("\r\n\r\n"))
	switch {
	case i < 0 && errors.Is(err, bufio.ErrBufferFull):
		return proxyHead{}, perr(http.StatusRequestHeaderFieldsTooLarge, "request head over 64 KiB")
	case i < 0:
		return proxyHead{}, errClosed
	}
	raw := b[:i+2]
	// Every CR and LF is part of a CRLF.
	for j := 0; j < len(raw); j++ {
		switch raw[j] {
		case '\r':
			if j+1 == len(raw) || raw[j+1] != '\n' {
				return proxyHead{}, perr(http.StatusBadRequest, "a line of the request head does not end in CRLF")
			}
			j++
		case '\n':
			return proxyHead{}, perr(http.StatusBadRequest, "a line of the request head does not end in CRLF")
		}
	}
	// Parsed in place: a head is read per proxied request.
	line, rest, more := bytes.Cut(raw[:i], crlf)
	method, line, ok1 := bytes.Cut(line, sp)
	target, proto, ok2 := bytes.Cut(line, sp)
	if !ok1 || !ok2 || (string(proto) != "HTTP/1.1" && string(proto) != "HTTP/1.0") {
		return proxyHead{}, perr(http.StatusBadRequest, "malformed request line")
	}
	h := proxyHead{method: string(method), target: string(target)}
	var host, length, encoding []byte
	var hosts, lengths, encodings int
	unusual := string(proto) != "HTTP/1.1" // read by net/http, not forwarded as bytes
	for more {
		line, rest, more = bytes.Cut(rest, crlf)
		name, value, ok := bytes.Cut(line, colon)
		if !ok || len(name) == 0 || len(bytes.TrimSpace(name)) != len(name) {
			return proxyHead{}, perr(http.StatusBadRequest, "malformed header line")
		}
		value = bytes.TrimSpace(value)
		if !validFieldName(name) || !validFieldValue(value) {
			unusual = true
		}
		switch {
		case asciiFoldEq(name, "host"):
			host, hosts = value, hosts+1
		case asciiFoldEq(name, "content-length"):
			length, lengths = value, lengths+1
		case asciiFoldEq(name, "transfer-encoding"):
			encoding, encodings = value, encodings+1
		case asciiFoldEq(name, "connection") && asciiFoldEq(value, "close"):
			h.close = true
		case asciiFoldEq(name, "connection") && asciiFoldEq(value, "keep-alive"):
		case asciiFoldEq(name, "expect"), asciiFoldEq(name, "upgrade"), asciiFoldEq(name, "connection"):
			unusual = true
		}
	}
	if hosts > 1 || lengths > 1 || encodings > 1 {
		return proxyHead{}, perr(http.StatusBadRequest, "more than one Host, Content-Length or Transfer-Encoding header")
	}
	if encodings == 1 && (!bytes.EqualFold(encoding, []byte("chunked")) || lengths == 1) {
		return proxyHead{}, perr(http.StatusBadRequest, "Transfer-Encoding must be exactly chunked, without a Content-Length")
	}
	if h.method == http.MethodConnect {
		if encodings == 1 || lengths == 1 && string(length) != "0" {
			return proxyHead{}, perr(http.StatusBadRequest, "a CONNECT request has no body")
		}
		host, port, err := net.SplitHostPort(h.target)
		if err != nil || host == "" || port == "" {
			return proxyHead{}, perr(http.StatusBadRequest, "CONNECT needs host:port")
		}
		h.authority = h.target
	} else {
		u, err := url.ParseRequestURI(h.target)
		if err != nil || u.Host == "" || u.User != nil {
			return proxyHead{}, perr(http.StatusBadRequest, "a proxy request needs an absolute http:// URL without credentials")
		}
		if !strings.EqualFold(u.Scheme, "http") {
			return proxyHead{}, perr(http.StatusBadRequest, "only http:// URLs are forwarded; for https, use CONNECT (HTTPS_PROXY)")
		}
		h.authority = withPort(u.Host, "80")
		if !unusual && encodings == 0 && httpguts.ValidHostHeader(u.Host) {
			h.length = 0
			if lengths == 1 {
				n, err := strconv.ParseUint(string(length), 10, 63)
				if err != nil {
					return proxyHead{}, perr(http.StatusBadRequest, "malformed Content-Length")
				}
				h.length = int64(n)
			}
			h.lean, h.uri, h.host, h.hasHost = true, u.RequestURI(), u.Host, hosts == 1
		}
	}
	if hosts == 1 && !strings.EqualFold(withPort(string(host), portOf(h.authority)), h.authority) {
		return proxyHead{}, perr(http.StatusBadRequest, "the Host header "+strconv.Quote(string(host))+" differs from the request's target "+h.authority)
	}
	return h, nil
}

var crlf, sp, colon = []byte("\r\n"), []byte(" "), []byte(":")

// validFieldName says whether name is a token (RFC 9110 5.1), as net/http
// requires of a field's name.
func validFieldName(name []byte) bool {
	for _, c := range name {
		if !httpguts.IsTokenRune(rune(c)) {
			return false
		}
	}
	return len(name) > 0
}

// validFieldValue says whether value holds no control character but tab,
// as net/http requires of a field's value.
func validFieldValue(value []byte) bool {
	for _, c := range value {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// asciiFoldEq says whether name, lower-cased, is the lower-case ASCII
// lower (what strings.ToLower(name) == lower said, without allocating).
func asciiFoldEq(name []byte, lower string) bool {
	if len(name) != len(lower) {
		return false
	}
	for i := range len(name) {
		c := name[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

func withPort(hostport, def string) string {
	if _, _, err := net.SplitHostPort(hostport); err == nil {
		return hostport
	}
	return net.JoinHostPort(strings.Trim(hostport, "[]"), def)
}

func portOf(authority string) string {
	_, p, _ := net.SplitHostPort(authority)
	return p
}

type proxyError struct {
	status int
	msg    string
}

var errClosed = &proxyError{}

func perr(status int, msg string) *proxyError { return &proxyError{status, msg} }

// writeProxyError answers a refusal with one line of text and closes.
func writeProxyError(w io.Writer, status int, msg string) {
	body := "ohd egress proxy: " + msg + "\n"
	_, _ = io.WriteString(w, "HTTP/1.1 "+strconv.Itoa(status)+" "+http.StatusText(status)+
		"\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
}

// egressError answers the broker's refusal of an egress connection.
func egressError(w io.Writer, err error) {
	var ae *APIError
	if errors.As(err, &ae) {
		writeProxyError(w, ae.Status, ae.Message)
		return
	}
	writeProxyError(w, http.StatusBadGateway, "the conversation's broker is unreachable")
}

// proxySession is the forward proxy on one handed-over client
// connection: its conversation, the token epoch of the hand-over (a
// rotated token ends the session's right to open destinations) and the
// relay's peer credentials, for the audit.
type proxySession struct {
	c        *conversation
	epoch    uint64
	pid, uid int
}

// serve serves the proxy requests of conn, held being the bytes the relay
// already read from it, until either side closes or a request is refused.
func (s *proxySession) serve(conn net.Conn, held []byte) {
	hc := &heldConn{Conn: conn, held: held}
	br := bufio.NewReaderSize(hc, maxProxyHead)
	var t *tunnel
	var tbr *bufio.Reader
	var tbw *bufio.Writer // requests to the tunnel (Request.Write would make one each time)
	// Answers are written through bw and flushed once each: Response.Write
	// writes the status line and every header field apart, which unbuffered
	// is a system call (and a segment the client wakes for) each.
	var bw *bufio.Writer
	defer func() {
		if t != nil {
			t.finish()
		}
	}()
	for first := true; ; first = false {
		_ = conn.SetReadDeadline(time.Now().Add(proxyHeadTimeout))
		h, pe := readHead(br)
		if pe == errClosed {
			return
		}
		if pe != nil {
			s.refuseHead(conn, h.authority, pe)
			return
		}
		if h.method == http.MethodConnect {
			if !first {
				s.refuseHead(conn, h.authority, perr(http.StatusBadRequest, "CONNECT on a connection that already forwarded a request"))
				return
			}
			s.connect(conn, hc, br, h)
			return
		}
		var req *http.Request
		if !h.lean {
			var err error
			if req, err = http.ReadRequest(br); err != nil {
				s.refuseHead(conn, h.authority, perr(http.StatusBadRequest, "malformed request"))
				return
			}
		}
		_ = conn.SetReadDeadline(time.Time{})
		if t == nil || t.rec.Name != h.authority {
			if t != nil {
				t.finish()
			}
			if t, pe = s.open(h.authority); pe != nil {
				writeProxyError(conn, pe.status, pe.msg)
				return
			}
			tbr = bufio.NewReaderSize(t, 32<<10)
			if tbw == nil {
				tbw = bufio.NewWriterSize(t, 4<<10)
			} else {
				tbw.Reset(t)
			}
		}
		if bw == nil {
			bw = bufio.NewWriterSize(conn, 16<<10)
		}
		if h.lean {
			// The common request is passed on as it came, and its answer
			// too when its length is plain (forwardLean): no parse into
			// net/http's maps and out again.
			done, closeAfter, err := forwardLean(br, h, tbw, tbr, bw, conn, t)
			if err != nil {
				if !done {
					writeProxyError(conn, http.StatusBadGateway, err.Error())
				}
				return
			}
			if done {
				if closeAfter {
					return
				}
				continue
			}
			// An answer forwardLean does not pass on as bytes (1xx,
			// chunked, no length): net/http reads it below.
			req = &http.Request{Method: h.method, Header: http.Header{}, Close: h.close}
		} else {
			for _, k := range []string{"Proxy-Connection", "Proxy-Authorization", "Proxy-Authenticate"} {
				req.Header.Del(k)
			}
			werr := req.Write(tbw)
			if werr == nil {
				werr = tbw.Flush()
			}
			if werr != nil {
				writeProxyError(conn, http.StatusBadGateway, "sending the request to "+h.authority+" failed")
				return
			}
		}
		resp, err := http.ReadResponse(tbr, req)
		if err != nil {
			writeProxyError(conn, http.StatusBadGateway, "no answer from "+h.authority)
			return
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			// A WebSocket or other upgrade: from now on a stream.
			if resp.Write(bw) == nil && bw.Flush() == nil {
				pipe(conn, br, t, tbr)
			}
			return
		}
		if err := writeResponse(bw, conn, req, resp, t, tbr); err != nil || req.Close || resp.Close {
			return
		}
	}
}

// open checks and dials the destination authority ("host:port") for the
// session: the conversation's grants as they are now, the token epoch of
// the hand-over, the audit log writable. A refusal is audited here.
func (s *proxySession) open(authority string) (*tunnel, *proxyError) {
	c := s.c
	rec := AuditRecord{Time: c.b.now(), Conversation: c.id, Route: routePatterns[routeEgressProxy], Kind: KindNet,
		Name: authority, PeerPID: s.pid, PeerUID: s.uid}
	if c.b.opts.Backend.AuditErr() != nil {
		return nil, s.refuse(&rec, refAudit)
	}
	conv, err := c.b.opts.Backend.Conversation(context.Background(), c.id)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, s.refuse(&rec, refEnded)
	case err != nil:
		c.b.log.Error("broker backend: conversation", "conversation", c.id, "err", err)
		return nil, s.refuse(&rec, refInternal)
	case conv.Epoch != s.epoch:
		return nil, s.refuse(&rec, refStaleEpoch)
	}
	up, ref := c.dialEgress(context.Background(), &rec, &conv, authority)
	if ref != nil {
		return nil, s.refuse(&rec, ref)
	}
	rec.Allowed, rec.Status = true, http.StatusOK
	return &tunnel{Conn: up, c: c, rec: rec}, nil
}

// refuse audits a refused destination and returns its answer.
func (s *proxySession) refuse(rec *AuditRecord, f *refusal) *proxyError {
	rec.Allowed = false
	rec.Status, rec.Code, rec.Reason = f.status, f.code, f.reason
	s.c.b.opts.Backend.Audit(*rec)
	return perr(f.status, f.msg)
}

// refuseHead audits and answers a request the proxy refuses to read.
func (s *proxySession) refuseHead(conn net.Conn, authority string, pe *proxyError) {
	rec := AuditRecord{Time: s.c.b.now(), Conversation: s.c.id, Route: routePatterns[routeEgressProxy], Kind: KindNet,
		Name: authority, PeerPID: s.pid, PeerUID: s.uid, Status: pe.status, Code: CodeBadRequest, Reason: "bad_request", Detail: pe.msg}
	if pe.status == http.StatusRequestHeaderFieldsTooLarge {
		rec.Code = CodeTooLarge
	}
	s.c.b.opts.Backend.Audit(rec)
	writeProxyError(conn, pe.status, pe.msg)
}

// tunnel is a session's connection to one destination: it counts the
// bytes each way and is audited when it is finished.
type tunnel struct {
	net.Conn
	c       *conversation
	rec     AuditRecord
	out, in atomic.Int64
}

func (t *tunnel) Read(p []byte) (int, error) {
	n, err := t.Conn.Read(p)
	t.in.Add(int64(n))
	return n, err
}

func (t *tunnel) Write(p []byte) (int, error) {
	n, err := t.Conn.Write(p)
	t.out.Add(int64(n))
	return n, err
}

// ReadFrom and WriteTo copy with the connection itself, so a copy between
// two TCP connections is the kernel's where it can be.
func (t *tunnel) ReadFrom(r io.Reader) (int64, error) {
	n, err := io.Copy(t.Conn, r)
	t.out.Add(n)
	return n, err
}

func (t *tunnel) WriteTo(w io.Writer) (int64, error) {
	n, err := io.Copy(w, t.Conn)
	t.in.Add(n)
	return n, err
}

// CloseWrite passes a half-close on to the destination.
func (t *tunnel) CloseWrite() error {
	closeWrite(t.Conn)
	return nil
}

// finish closes the tunnel and audits it.
func (t *tunnel) finish() {
	_ = t.Conn.Close()
	t.rec.BytesOut, t.rec.BytesIn = t.out.Load(), t.in.Load()
	t.rec.Duration = t.c.b.now().Sub(t.rec.Time)
	t.c.b.opts.Backend.Audit(t.rec)
}

// heldConn is a connection whose first bytes were read by someone else
// (the relay) and are given here.
type heldConn struct {
	net.Conn
	held []byte
}

func (h *heldConn) Read(p []byte) (int, error) {
	if len(h.held) > 0 {
		n := copy(p, h.held)
		h.held = h.held[n:]
		return n, nil
	}
	return h.Conn.Read(p)
}

// forwardLean passes the request whose head h is at the start of br to
// the destination through tbw: as the client sent it, but in origin form
// and without the Proxy-* fields, then its body. It then peeks at the
// answer in tbr. One of plain length (HTTP/1.1, a final status but 101,
// a Content-Length and no Transfer-Encoding, or no body: HEAD, 204, 304)
// goes to the client through bw as it came, and done is true; any other
// stays in tbr for net/http to read (done false, err nil). closeAfter
// says the client or the destination asked to close. On an error, done
// says whether the client already has part of an answer.
//
// The bytes of a request are never read as more than one: readHead
// checked its framing (one Content-Length, no Transfer-Encoding here), so
// what follows the body is the next request, checked in turn.
func forwardLean(br *bufio.Reader, h proxyHead, tbw *bufio.Writer, tbr *bufio.Reader, bw *bufio.Writer, conn net.Conn, t *tunnel) (done, closeAfter bool, err error) {
	sendErr := errors.New("sending the request to " + h.authority + " failed")
	n := headLen(br)
	head, _ := br.Peek(n)
	_, _ = tbw.WriteString(h.method)
	_ = tbw.WriteByte(' ')
	_, _ = tbw.WriteString(h.uri)
	_, _ = tbw.WriteString(" HTTP/1.1\r\n")
	if !h.hasHost {
		_, _ = tbw.WriteString("Host: " + h.host + "\r\n")
	}
	_, fields, _ := bytes.Cut(head[:n-2], crlf)
	for len(fields) > 0 {
		var line []byte
		line, fields, _ = bytes.Cut(fields, crlf)
		name, _, _ := bytes.Cut(line, colon)
		if asciiFoldEq(name, "proxy-connection") || asciiFoldEq(name, "proxy-authorization") || asciiFoldEq(name, "proxy-authenticate") {
			continue
		}
		_, _ = tbw.Write(line)
		_, _ = tbw.Write(crlf)
	}
	_, _ = tbw.Write(crlf)
	if _, err := br.Discard(n); err != nil {
		return false, false, sendErr
	}
	if h.length > 0 {
		if _, err := io.CopyN(tbw, br, h.length); err != nil {
			return false, false, sendErr
		}
	}
	if err := tbw.Flush(); err != nil {
		return false, false, sendErr
	}

	b, perr := peekUntil(tbr, []byte("\r\n\r\n"))
	i := bytes.Index(b, []byte("\r\n\r\n"))
	switch {
	case i < 0 && errors.Is(perr, bufio.ErrBufferFull):
		return false, false, nil
	case i < 0:
		return false, false, errors.New("no answer from " + h.authority)
	}
	length, respClose, ok := plainLength(b[:i+2], h.method)
	if !ok {
		return false, false, nil
	}
	_, _ = bw.Write(b[:i+4])
	if _, err := tbr.Discard(i + 4); err != nil {
		return true, true, err
	}
	if length >= spliceBody {
		// What tbr holds, then the rest from the connection, which the
		// kernel splices.
		held := min(int64(tbr.Buffered()), length)
		if _, err := io.CopyN(bw, tbr, held); err != nil {
			return true, true, err
		}
		if err := bw.Flush(); err != nil {
			return true, true, err
		}
		rest := length - held
		m, err := io.Copy(conn, io.LimitReader(t.Conn, rest))
		t.in.Add(m)
		if err == nil && m < rest {
			err = io.ErrUnexpectedEOF
		}
		return true, h.close || respClose, err
	}
	if length > 0 {
		if _, err := io.CopyN(bw, tbr, length); err != nil {
			return true, true, err
		}
	}
	if err := bw.Flush(); err != nil {
		return true, true, err
	}
	return true, h.close || respClose, nil
}

// plainLength reads an answer's head (its lines, each ending in CRLF):
// whether its body's length is plain (ok; see forwardLean), that length,
// and whether it asks to close the connection.
func plainLength(head []byte, method string) (length int64, closeConn, ok bool) {
	for j := 0; j < len(head); j++ {
		switch head[j] {
		case '\r':
			if j+1 == len(head) || head[j+1] != '\n' {
				return 0, false, false
			}
			j++
		case '\n':
			return 0, false, false
		}
	}
	line, rest, _ := bytes.Cut(head, crlf)
	if len(line) < 12 || string(line[:9]) != "HTTP/1.1 " || (len(line) > 12 && line[12] != ' ') {
		return 0, false, false
	}
	code, err := strconv.Atoi(string(line[9:12]))
	if err != nil || code < 200 || code > 999 {
		return 0, false, false
	}
	lengths := 0
	for len(rest) > 0 {
		var f []byte
		f, rest, _ = bytes.Cut(rest, crlf)
		name, value, found := bytes.Cut(f, colon)
		value = bytes.TrimSpace(value)
		if !found || !validFieldName(name) || !validFieldValue(value) {
			return 0, false, false
		}
		switch {
		case asciiFoldEq(name, "transfer-encoding"), asciiFoldEq(name, "trailer"):
			return 0, false, false
		case asciiFoldEq(name, "content-length"):
			n, err := strconv.ParseUint(string(value), 10, 63)
			if err != nil {
				return 0, false, false
			}
			length, lengths = int64(n), lengths+1
		case asciiFoldEq(name, "connection"):
			switch {
			case asciiFoldEq(value, "close"):
				closeConn = true
			case asciiFoldEq(value, "keep-alive"):
			default:
				return 0, false, false
			}
		}
	}
	switch {
	case method == http.MethodHead || code == http.StatusNoContent || code == http.StatusNotModified:
		return 0, closeConn, lengths <= 1
	case lengths != 1:
		return 0, false, false
	}
	return length, closeConn, true
}

// spliceBody is the body length from which writeResponse copies a body
// from the broker's connection itself rather than through the buffers.
const spliceBody = 64 << 10

// writeResponse writes resp, the destination's answer to req read through
// tbr from tunnel, to the client conn through bw. A body of known length
// (HTTP/1.1, Content-Length, no trailer) of spliceBody or more goes from
// the broker's connection to conn by io.Copy once tbr's buffered part is
// out, which the kernel splices; anything else is written by
// Response.Write.
func writeResponse(bw *bufio.Writer, conn net.Conn, req *http.Request, resp *http.Response, t *tunnel, tbr *bufio.Reader) error {
	splice := req.Method != http.MethodHead && resp.ContentLength >= spliceBody &&
		len(resp.TransferEncoding) == 0 && len(resp.Trailer) == 0 && resp.ProtoMajor == 1 && resp.ProtoMinor == 1
	if !splice {
		err := resp.Write(bw)
		if err == nil {
			err = bw.Flush()
		}
		_ = resp.Body.Close()
		return err
	}
	// The head as Response.Write writes it.
	text := strings.TrimPrefix(resp.Status, strconv.Itoa(resp.StatusCode)+" ")
	if text == "" {
		text = http.StatusText(resp.StatusCode)
	}
	_, _ = bw.WriteString("HTTP/1.1 " + fmt.Sprintf("%03d", resp.StatusCode) + " " + text + "\r\n")
	if err := resp.Header.WriteSubset(bw, map[string]bool{"Content-Length": true, "Transfer-Encoding": true, "Trailer": true}); err != nil {
		return err
	}
	_, _ = bw.WriteString("Content-Length: " + strconv.FormatInt(resp.ContentLength, 10) + "\r\n")
	if resp.Close && !headerHasToken(resp.Header, "Connection", "close") {
		_, _ = bw.WriteString("Connection: close\r\n")
	}
	_, _ = bw.WriteString("\r\n")
	// The body: what tbr holds, then the rest from the connection. The
	// body is not closed: it would read on past what was copied here.
	held := min(int64(tbr.Buffered()), resp.ContentLength)
	if _, err := io.CopyN(bw, tbr, held); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	rest := resp.ContentLength - held
	n, err := io.Copy(conn, io.LimitReader(t.Conn, rest))
	t.in.Add(n)
	if err == nil && n < rest {
		err = io.ErrUnexpectedEOF
	}
	return err
}

func (s *proxySession) connect(conn net.Conn, hc *heldConn, br *bufio.Reader, h proxyHead) {
	if _, err := br.Discard(headLen(br)); err != nil {
		return
	}
	if br.Buffered() > 0 || len(hc.held) > 0 {
		s.refuseHead(conn, h.authority, perr(http.StatusBadRequest, "data sent after CONNECT before its answer (a pipelined request) is refused"))
		return
	}
	_ = conn.SetReadDeadline(time.Time{})
	t, pe := s.open(h.authority)
	if pe != nil {
		writeProxyError(conn, pe.status, pe.msg)
		return
	}
	defer t.finish()
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	pipe(conn, nil, t, nil)
}

// headLen is the length of the request head at the start of br (already
// checked by readHead).
func headLen(br *bufio.Reader) int {
	b, _ := br.Peek(br.Buffered())
	return bytes.Index(b, []byte("\r\n\r\n")) + 4
}

// pipe copies a to b and b to a (each read through its buffered reader
// when it has one) until both directions end.
func pipe(a net.Conn, abr *bufio.Reader, b net.Conn, bbr *bufio.Reader) {
	var ar, brd io.Reader = a, b
	if abr != nil {
		ar = abr
	}
	if bbr != nil {
		brd = bbr
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := io.Copy(b, ar); err != nil {
			_ = b.Close()
			return
		}
		closeWrite(b)
	})
	_, _ = io.Copy(a, brd)
	closeWrite(a)
	wg.Wait()
}
