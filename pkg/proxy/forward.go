package proxy

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ohd-dev/ohd/pkg/conversation"
)

// unsupportedTails are the first path segments under a conversation that
// ohd refuses with 501: each needs several conversations to share one
// agent server, and ohd gives every conversation its own.
var unsupportedTails = map[string]string{
	"children":            "child conversations are not supported by ohd: each conversation has its own container and worktree",
	"credential-bindings": "credential bindings are not supported by ohd: grant credentials with `ohctl grant ID KIND NAME`; the conversation reaches them through its broker socket",
}

// forward serves /api/conversations/{id}[/{tail...}] by forwarding to the
// conversation's inner server (GET and DELETE of /{id} have their own
// handlers).
func (s *Server) forward(w http.ResponseWriter, r *http.Request) {
	fp, ok := parseForwardPath(r.URL.EscapedPath())
	if !ok {
		writeDetail(w, http.StatusNotFound, "Not Found")
		return
	}
	if fp.ID == "" {
		writeValidation(w, uuidError(fp.RawID, "path", "conversation_id"))
		return
	}
	if isForkTail(fp.Tail) {
		if r.Method != http.MethodPost {
			writeDetail(w, http.StatusMethodNotAllowed, "Method Not Allowed")
			return
		}
		s.fork(w, r, fp) // fork.go
		return
	}
	if msg, bad := unsupportedTails[fp.First]; bad && fp.HasTail {
		writeDetail(w, http.StatusNotImplemented, msg)
		return
	}
	if r.Method == http.MethodPost && isSecretsTail(fp.Tail) {
		s.postSecrets(w, r, fp)
		return
	}
	if route := switchTail(fp.Tail); route != "" {
		if r.Method != http.MethodPost {
			// The agent server routes only POST there (405); nothing to
			// mediate, and nothing may pass unmediated.
			writeDetail(w, http.StatusMethodNotAllowed, "Method Not Allowed")
			return
		}
		s.postSwitch(w, r, fp, route)
		return
	}
	s.forwardTo(w, r, fp.ID, fp.innerPath(), stripAuthQuery(r.URL.RawQuery))
}

// isSecretsTail reports whether an escaped tail names the conversation's
// secrets route as the inner server routes it (decoded: "secret%73", a
// trailing slash or dot segments must not get a body past mediation).
func isSecretsTail(escaped string) bool {
	u, err := url.PathUnescape(escaped)
	if err != nil {
		return false
	}
	return path.Clean("/"+u) == "/secrets"
}

// forwardTo forwards r to conversation id's inner server at the escaped
// path and raw query given.
func (s *Server) forwardTo(w http.ResponseWriter, r *http.Request, id, innerPath, query string) {
	if r.ContentLength > s.opts.MaxBody {
		if _, ok := s.visible(id); !ok {
			writeDetail(w, http.StatusNotFound, "Not Found: no conversation "+id)
			return
		}
		writeTooLarge(w, s.opts.MaxBody)
		return
	}
	// Target succeeds only for a live conversation that has started (the
	// states the API shows); the record is read again only to word a
	// failure.
	t, err := s.conv.Target(r.Context(), id)
	if err != nil {
		if _, ok := s.visible(id); !ok {
			writeDetail(w, http.StatusNotFound, "Not Found: no conversation "+id)
			return
		}
		s.targetError(w, id, err)
		return
	}
	if t.Addr == "" {
		writeDetail(w, http.StatusNotImplemented, "conversation "+id+" runs in ohd's local runtime: it has no agent server to forward to")
		return
	}
	s.conv.Touch(id)

	stripHopByHop(r.Header)
	// One allocation for the target and the writer (the hot path's
	// allocations are counted by BenchmarkForwardHandler).
	ft := &fwdTarget{
		id: id, addr: t.Addr, dialAddr: t.DialAddr, key: t.InnerKey, dial: t.Dial,
		path: innerPath, query: query,
	}
	ft.tw = touchWriter{ResponseWriter: w, conv: s.conv, id: id}
	if (r.Method == http.MethodGet || r.Method == http.MethodHead) && r.Body == http.NoBody {
		s.forwardBodiless(&ft.tw, r, ft)
		return
	}
	ft.body = &limitedBody{r: r.Body, n: s.opts.MaxBody}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = ft.body
	}
	ctx := context.WithValue(withTarget(r.Context(), t), fwdKey{}, ft)
	s.rp.ServeHTTP(&ft.tw, r.WithContext(ctx))
}

// forwardBodiless forwards a GET or HEAD without a body (the hot path)
// with the same rules as the ReverseProxy path (rewriteRequest,
// modifyResponse, proxyError) but without its per-request copies: the
// request head is written straight from the client's request to a pooled
// connection, and the answer streamed back.
//
// r keeps its own context: ft carries what the ReverseProxy path puts in
// the context (the target, its dial function), so no context or request
// is copied per request.
func (s *Server) forwardBodiless(w http.ResponseWriter, r *http.Request, ft *fwdTarget) {
	resp, err := s.inner.do(r, ft, writeRequestHead)
	if err != nil {
		s.proxyErrorFor(w, r, ft, err)
		return
	}
	s.answerBodiless(w, resp, ft)
}

// answerBodiless writes the inner server's answer to a forwarded GET or
// HEAD: hop-by-hop headers dropped, scrubbed (scrubResponse), the body
// streamed. A cut answer panics with http.ErrAbortHandler, so that the
// client's connection ends.
func (s *Server) answerBodiless(w http.ResponseWriter, resp *http.Response, ft *fwdTarget) {
	defer resp.Body.Close()
	stripHopByHop(resp.Header)
	scrubResponse(resp, ft)
	h := w.Header()
	for k, vv := range resp.Header {
		h[k] = vv
	}
	if len(resp.Trailer) > 0 {
		names := make([]string, 0, len(resp.Trailer))
		for k := range resp.Trailer {
			names = append(names, k)
		}
		h["Trailer"] = []string{strings.Join(names, ", ")}
	}
	w.WriteHeader(resp.StatusCode)
	if resp.Body != http.NoBody {
		if err := copyAnswer(w, resp); err != nil {
			// Part of the answer is gone: end the client's connection
			// rather than let it take a cut answer for a whole one (as
			// httputil.ReverseProxy does).
			panic(http.ErrAbortHandler)
		}
	}
	for k, vv := range resp.Trailer {
		h[http.TrailerPrefix+k] = vv
	}
}

// writeRequestHead writes the head of the forwarded request: the inner
// path and query, the client's Host, its headers minus credentials,
// hop-by-hop and X-Forwarded-* ones (already validated by the server's
// parser), and the inner key. No User-Agent is added.
func writeRequestHead(bw *bufio.Writer, r *http.Request, ft *fwdTarget) error {
	bw.WriteString(r.Method)
	bw.WriteByte(' ')
	bw.WriteString(ft.path)
	if ft.query != "" {
		bw.WriteByte('?')
		bw.WriteString(ft.query)
	}
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	if r.Host != "" {
		bw.WriteString(r.Host)
	} else {
		// A client without Host (HTTP/1.0): never the inner address.
		bw.WriteString("localhost")
	}
	bw.WriteString("\r\n")
	for k, vv := range r.Header {
		if notForwarded[k] {
			continue
		}
		for _, v := range vv {
			bw.WriteString(k)
			bw.WriteString(": ")
			bw.WriteString(v)
			bw.WriteString("\r\n")
		}
	}
	bw.WriteString("X-Session-Api-Key: ")
	bw.Write(ft.key)
	bw.WriteString("\r\n\r\n")
	return nil
}

// notForwarded are the request headers writeRequestHead leaves out
// (canonical names): the client's credentials, the hop-by-hop ones, the
// X-Forwarded-* ones httputil.ReverseProxy's Rewrite drops, and the body
// framing of a request that has no body.
var notForwarded = func() map[string]bool {
	m := map[string]bool{
		"Forwarded": true, "X-Forwarded-For": true, "X-Forwarded-Host": true, "X-Forwarded-Proto": true,
		"Content-Length": true, "Host": true,
	}
	for _, k := range clientCredentialHeaders {
		m[k] = true
	}
	for _, k := range hopByHop {
		m[k] = true
	}
	return m
}()

// copyAnswer copies an answer's body to w, flushing after each read when
// it is a stream (text/event-stream, or no length), as
// httputil.ReverseProxy does.
func copyAnswer(w http.ResponseWriter, resp *http.Response) error {
	stream := resp.ContentLength == -1
	if ct, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";"); strings.EqualFold(strings.TrimSpace(ct), "text/event-stream") {
		stream = true
	}
	bp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bp)
	buf := *bp
	rc := http.NewResponseController(w)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			if stream {
				_ = rc.Flush()
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// targetError answers a failed Target.
func (s *Server) targetError(w http.ResponseWriter, id string, err error) {
	switch {
	case errors.Is(err, conversation.ErrNotFound):
		writeDetail(w, http.StatusNotFound, "Not Found: no conversation "+id)
	case errors.Is(err, conversation.ErrConflict):
		writeDetail(w, http.StatusConflict, err.Error())
	case errors.Is(err, conversation.ErrInvalid):
		writeDetail(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, context.Canceled):
		writeDetail(w, http.StatusServiceUnavailable, "request cancelled while conversation "+id+" was starting")
	default:
		s.log.Warn("conversation API: conversation could not be started", "id", id, "err", err)
		writeDetail(w, http.StatusServiceUnavailable, "conversation "+id+" could not be started: "+err.Error()+"; retry, or see `ohctl show "+id+"` and `ohctl logs "+id+"`")
	}
}

func writeTooLarge(w http.ResponseWriter, limit int64) {
	writeDetail(w, http.StatusRequestEntityTooLarge, "request body too large: ohd accepts at most "+strconv.FormatInt(limit, 10)+" bytes")
}

// fwdKey is the context key of the forwarding target.
type fwdKey struct{}

// fwdTarget is where one forwarded request goes.
type fwdTarget struct {
	id, addr string
	key      []byte                                      // the inner key
	dial     func(ctx context.Context) (net.Conn, error) // the target's own dialer, or nil
	dialAddr string                                      // where dial reaches it inside its container, or ""
	path     string                                      // escaped
	query    string                                      // auth parameters stripped
	body     *limitedBody                                // nil for a bodiless GET or HEAD
	tw       touchWriter                                 // the client's writer
	// plain, on the lean path, answers the client itself when the inner
	// answer's head (at the front of pc's reader) is plain: answered
	// false (nothing read) sends it on to http.ReadResponse; reuse says
	// the inner connection may serve another request.
	plain func(pc *innerConn) (answered, reuse bool, err error)
}

func (s *Server) newReverseProxy() *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite:        rewriteRequest,
		Transport:      s.inner,
		ModifyResponse: modifyResponse,
		ErrorHandler:   s.proxyError,
		BufferPool:     bufferPool{},
		ErrorLog:       slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
}

// rewriteRequest points the outbound request at the inner server. The
// client's Host is kept, so URLs an inner server builds from it name ohd,
// not the inner address. Hop-by-hop and X-Forwarded-* headers are already
// gone (ReverseProxy and stripHopByHop).
func rewriteRequest(pr *httputil.ProxyRequest) {
	ft := pr.In.Context().Value(fwdKey{}).(*fwdTarget)
	u := pr.Out.URL
	u.Scheme, u.Host, u.User = "http", ft.addr, nil
	u.Path, _ = url.PathUnescape(ft.path)
	u.RawPath = ft.path
	u.RawQuery = ft.query
	u.Fragment, u.RawFragment = "", ""
	if pr.Out.Host == "" {
		// A client without Host (HTTP/1.0): never let Go fill in the inner
		// address, which the inner server could echo in a URL.
		pr.Out.Host = "localhost"
	}
	h := pr.Out.Header
	for _, name := range clientCredentialHeaders {
		delete(h, name) // canonical already: no Del's canonicalization
	}
	h["X-Session-Api-Key"] = []string{string(ft.key)}
}

// clientCredentialHeaders never reach an inner server (canonical forms:
// net/http canonicalizes what it reads).
var clientCredentialHeaders = []string{
	"Authorization", "Proxy-Authorization", "Cookie", "X-Session-Api-Key", "X-Expose-Secrets",
}

// hopByHop are the headers of one connection (RFC 9110 7.6.1, and the
// older Keep-Alive and Proxy-Connection).
var hopByHop = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// stripHopByHop removes the hop-by-hop headers of h, those the Connection
// header names included. Upgrade goes too: forwarded routes are plain
// HTTP (the WebSocket route has its own bridge).
func stripHopByHop(h http.Header) {
	for _, v := range h["Connection"] {
		for _, name := range strings.Split(v, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopByHop {
		delete(h, name) // canonical already
	}
}

// maxErrorBody bounds an inner redirect or error body ohd reads to scrub
// it; the rest is dropped (such bodies are short).
const maxErrorBody = 1 << 20

// modifyResponse keeps the inner address out of what the client sees:
// URL-bearing headers are rewritten to relative form, redirect and error
// bodies are scrubbed, and cookies set by the inner server are dropped (ohd never
// forwards a cookie back to it, so they would be useless).
func modifyResponse(resp *http.Response) error {
	scrubResponse(resp, resp.Request.Context().Value(fwdKey{}).(*fwdTarget))
	return nil
}

// scrubResponse is modifyResponse for target ft.
func scrubResponse(resp *http.Response, ft *fwdTarget) {
	resp.Header.Del("Set-Cookie")
	resp.Header.Del("Set-Cookie2")
	scrubHeaders(resp.Header, ft.addr, ft.dialAddr)
	if resp.StatusCode >= 300 && resp.StatusCode != http.StatusNotModified && resp.Request.Method != http.MethodHead {
		scrubErrorBody(resp, ft.addr, ft.dialAddr)
	}
}

// innerForms returns the spellings of the inner address, addr being
// "host:port" (as Target.Addr).
func innerForms(addr string) []string {
	forms := []string{addr}
	if _, port, err := net.SplitHostPort(addr); err == nil {
		forms = append(forms, "localhost:"+port, "[::1]:"+port, "127.0.0.1:"+port)
	}
	return forms
}

// scrubString makes URLs on the inner addresses ("host:port"; "" is
// skipped) relative (so a client resolves them against ohd) and replaces
// any other mention of them.
func scrubString(v string, addrs ...string) string {
	for _, addr := range addrs {
		// Every spelling of addr ends in ":<port>": most values (a
		// header's) do not mention it at all.
		i := strings.LastIndexByte(addr, ':')
		if addr == "" || i < 0 || !strings.Contains(v, addr[i:]) {
			continue
		}
		v = scrubAddr(v, addr)
	}
	return scrubLoopback(v)
}

// scrubAddr is scrubString for one address, without the loopback pass.
func scrubAddr(v, addr string) string {
	for _, f := range innerForms(addr) {
		if !strings.Contains(strings.ToLower(v), strings.ToLower(f)) {
			continue
		}
		for _, scheme := range []string{"http://", "https://", "ws://", "wss://"} {
			v = replaceFold(v, scheme+f, "")
		}
		v = replaceFold(v, f, scrubbedAddr)
	}
	return v
}

// replaceFold replaces every case-insensitive (ASCII) occurrence of old.
func replaceFold(s, old, new string) string {
	lo, lold := strings.ToLower(s), strings.ToLower(old)
	if len(lo) != len(s) || !strings.Contains(lo, lold) {
		return strings.ReplaceAll(s, old, new)
	}
	var b strings.Builder
	for {
		i := strings.Index(lo, lold)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		b.WriteString(new)
		s, lo = s[i+len(old):], lo[i+len(old):]
	}
}

func scrubHeaders(h http.Header, addrs ...string) {
	for name, vs := range h {
		for i, v := range vs {
			nv := scrubString(v, addrs...)
			if nv == "" && (name == "Location" || name == "Content-Location") {
				nv = "/"
			}
			vs[i] = nv
		}
	}
}

// scrubErrorBody replaces resp's body by a scrubbed copy of at most
// maxErrorBody bytes. A body in an encoding ohd cannot read is replaced
// by a short JSON detail.
func scrubErrorBody(resp *http.Response, addrs ...string) {
	var src io.Reader = resp.Body
	enc := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding")))
	readable := true
	switch enc {
	case "", "identity":
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			readable = false
		} else {
			src = zr
		}
	default:
		readable = false
	}
	var body []byte
	if readable {
		b, err := io.ReadAll(io.LimitReader(src, maxErrorBody))
		if err != nil && len(b) == 0 {
			readable = false
		}
		body = []byte(scrubString(string(b), addrs...))
	}
	if !readable {
		body = []byte(`{"detail":"` + http.StatusText(resp.StatusCode) + ` (the conversation server's error body was withheld: ohd could not read its encoding)"}` + "\n")
		resp.Header.Set("Content-Type", "application/json")
	}
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Del("Content-Encoding")
	resp.Header.Del("Content-MD5")
	resp.Header.Del("Digest")
	resp.Header.Del("Repr-Digest")
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	resp.TransferEncoding = nil
}

// proxyError answers a forwarding failure without the inner address.
func (s *Server) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	ft, _ := r.Context().Value(fwdKey{}).(*fwdTarget)
	s.proxyErrorFor(w, r, ft, err)
}

// proxyErrorFor is proxyError for target ft (nil: not known).
func (s *Server) proxyErrorFor(w http.ResponseWriter, r *http.Request, ft *fwdTarget, err error) {
	id := ""
	var body *limitedBody
	if ft != nil {
		id, body = ft.id, ft.body
	}
	if s.answeredForClient(w, r, body, err) {
		return
	}
	s.log.Warn("conversation API: forwarding failed", "id", id, "method", r.Method, "path", r.URL.Path, "err", err)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		writeDetail(w, http.StatusGatewayTimeout, "conversation "+id+": its agent server did not answer in time")
		return
	}
	writeDetail(w, http.StatusBadGateway, "conversation "+id+": its agent server is unreachable (it may be starting or may have stopped): retry, or see `ohctl show "+id+"`")
}

// answeredForClient answers a failed forward that was the client's doing:
// 413 for a body over the limit, and nothing useful (502) for a client
// that went away. It reports whether it answered.
func (s *Server) answeredForClient(w http.ResponseWriter, r *http.Request, body *limitedBody, err error) bool {
	var mbe *http.MaxBytesError
	switch {
	case body != nil && body.exceeded.Load(), errors.As(err, &mbe):
		writeTooLarge(w, s.opts.MaxBody)
	case r.Context().Err() != nil:
		// The client went away; nobody reads this answer.
		w.WriteHeader(http.StatusBadGateway)
	default:
		return false
	}
	return true
}

// limitedBody is a request body that fails once more than n bytes were
// read, and remembers it did (so the answer is 413, not 502).
type limitedBody struct {
	r        io.ReadCloser
	n        int64
	exceeded atomic.Bool
}

var errBodyTooLarge = errors.New("request body too large")

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.n < 0 {
		b.exceeded.Store(true)
		return 0, errBodyTooLarge
	}
	if int64(len(p)) > b.n+1 {
		p = p[:b.n+1]
	}
	n, err := b.r.Read(p)
	b.n -= int64(n)
	if b.n < 0 {
		b.exceeded.Store(true)
		return 0, errBodyTooLarge
	}
	return n, err
}

func (b *limitedBody) Close() error { return b.r.Close() }

// touchWriter records activity while a long response streams, at most
// once a second, so the idle timer never stops a conversation that is
// being watched.
type touchWriter struct {
	http.ResponseWriter
	conv Conversations
	id   string
	last time.Time
}

func (t *touchWriter) Write(p []byte) (int, error) {
	if now := time.Now(); now.Sub(t.last) >= time.Second {
		if !t.last.IsZero() {
			t.conv.Touch(t.id)
		}
		t.last = now
	}
	return t.ResponseWriter.Write(p)
}

func (t *touchWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }

// bufferPool lends ReverseProxy its copy buffers.
type bufferPool struct{}

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *(copyBuffers.Get().(*[]byte)) }
func (bufferPool) Put(b []byte) { copyBuffers.Put(&b) }
