package proxy

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
)

// The lean path: the requests the front (front.go) answers itself. A
// request is taken only when net/http's server would have sent it, with
// the same meaning, to forwardBodiless:
//
//   - its request line is exactly "GET <target> HTTP/1.1";
//   - the target is /api/conversations/{id}/{tail} in clean form (what
//     dispatch sends to the forward route), without a percent escape in
//     the path (so the path is its own escaped form), with a canonical
//     conversation id, and a tail that is not fork, switch_*, children,
//     credential-bindings or a port service's;
//   - every header line is a token, a colon and a value without control
//     characters; there is exactly one Host (a valid one) and exactly one
//     X-Session-API-Key, which is one of the keys (compared as
//     keySet.valid does: in constant time, against every key);
//   - none of Origin (CORS), Connection, Upgrade, Content-Length,
//     Transfer-Encoding, Expect or X-Expose-Secrets is present.
//
// Anything else goes to net/http, which answers it as before (a wrong key
// 401, a malformed head 400, ...). The forwarded head is the one
// writeRequestHead writes (the same headers left out, the inner key
// added), and the answer passes through the same scrubbing; an answer
// that is not a plain 2xx with a length and a type (an error, a redirect,
// a stream) is answered through leanWriter by the code forwardBodiless
// uses. What the lean path does not do is watch the client while the
// inner server works on the request: a client that goes away is noticed
// when its answer is written (net/http's server notices at once and
// cancels the inner request); the wait is bounded by
// Timeouts.ResponseHeader either way.

// leanRequest is a request head the lean path takes, as slices of the
// connection's read buffer (valid until the next read).
type leanRequest struct {
	head  []byte // the whole head, blank line included
	path  string // escaped (= unescaped) path
	query string // raw query, credentials stripped
	host  []byte
	fp    forwardPath
	// lines are the header lines forwarded (name and value, in order),
	// as offsets into head.
	lines []lineSpan
}

type lineSpan struct{ name, value [2]int }

// parse reads the head of n bytes at the front of br; false when the
// lean path does not take the request (nothing is consumed then).
func (lr *leanRequest) parse(s *Server, br *bufio.Reader, n int) bool {
	head, _ := br.Peek(n)
	lr.head, lr.lines, lr.host = head, lr.lines[:0], nil
	eol := bytes.IndexByte(head, '\n')
	if eol < 1 || head[eol-1] != '\r' {
		return false
	}
	line := head[:eol-1]
	rest, ok := bytes.CutPrefix(line, []byte("GET "))
	if !ok {
		return false
	}
	target, ok := bytes.CutSuffix(rest, []byte(" HTTP/1.1"))
	if !ok || !bytes.HasPrefix(target, []byte(conversationsPrefix)) {
		return false
	}
	p, q, _ := bytes.Cut(target, []byte("?"))
	for _, c := range p {
		if !pathByte(c) {
			return false
		}
	}
	for _, c := range q {
		if c <= ' ' || c >= 0x7f || c == '#' {
			return false
		}
	}
	lr.path = string(p)
	if !isForwardPathString(lr.path, lr.path) {
		return false
	}
	fp, ok := parseForwardPath(lr.path)
	if !ok || fp.ID == "" || !fp.HasTail || isForkTail(fp.Tail) || switchTail(fp.Tail) != "" {
		return false
	}
	if _, bad := unsupportedTails[fp.First]; bad {
		return false
	}
	lr.fp = fp
	var key []byte
	keys := 0
	for off := eol + 1; off < n-2; {
		sp, next, ok := headerLine(head, off)
		if !ok {
			return false
		}
		name, value := head[sp.name[0]:sp.name[1]], head[sp.value[0]:sp.value[1]]
		switch {
		case asciiEqualFold(name, "Host"):
			if lr.host != nil || !httpguts.ValidHostHeader(string(value)) {
				return false
			}
			lr.host = value
		case asciiEqualFold(name, "X-Session-Api-Key"):
			keys++
			key = value
		case leanRefused(name):
			return false
		case !leanDropped(name):
			lr.lines = append(lr.lines, sp)
		}
		off = next
	}
	if len(lr.host) == 0 || keys != 1 || !s.keys.validBytes(key) {
		return false
	}
	lr.query = stripAuthQuery(string(q))
	return true
}

// headerLine reads the header line at head[off:] (of a request or an
// answer): its name and its value, trimmed of blanks, as offsets into
// head, and where the next line starts. ok is false for a line the lean
// path does not read: no CRLF ending, no colon, a name that is not a
// token (a continuation line too: it starts with white space), a control
// character in the value.
func headerLine(head []byte, off int) (sp lineSpan, next int, ok bool) {
	end := bytes.IndexByte(head[off:], '\n')
	if end < 1 || head[off+end-1] != '\r' {
		return sp, 0, false
	}
	l := head[off : off+end-1]
	colon := bytes.IndexByte(l, ':')
	if colon < 1 {
		return sp, 0, false
	}
	for _, c := range l[:colon] {
		if !httpguts.IsTokenRune(rune(c)) {
			return sp, 0, false
		}
	}
	vs, ve := colon+1, len(l)
	for vs < ve && (l[vs] == ' ' || l[vs] == '\t') {
		vs++
	}
	for ve > vs && (l[ve-1] == ' ' || l[ve-1] == '\t') {
		ve--
	}
	for _, c := range l[vs:ve] {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return sp, 0, false
		}
	}
	return lineSpan{[2]int{off, off + colon}, [2]int{off + vs, off + ve}}, off + end + 1, true
}

// pathByte reports whether c may appear in a lean path: RFC 3986's
// unreserved and sub-delims, ":", "@" and "/"; no "%" (an escaped path
// is net/http's).
func pathByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-._~!$&'()*+,;=:@/", c) >= 0
}

// leanRefused are the request headers that send a request to net/http
// (see the list above).
func leanRefused(name []byte) bool {
	for _, h := range [...]string{"Origin", "Connection", "Upgrade", "Content-Length", "Transfer-Encoding", "Expect", "X-Expose-Secrets"} {
		if asciiEqualFold(name, h) {
			return true
		}
	}
	return false
}

// leanDropped reports whether a request header is left out of the
// forwarded head (notForwarded, compared without canonicalizing).
func leanDropped(name []byte) bool {
	var canon [64]byte
	if len(name) > len(canon) {
		return false
	}
	return notForwarded[string(appendCanonical(canon[:0], name))]
}

// asciiEqualFold compares a header name with a canonical one.
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c, d := b[i], s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if 'A' <= d && d <= 'Z' {
			d += 'a' - 'A'
		}
		if c != d {
			return false
		}
	}
	return true
}

// appendCanonical appends name in canonical form
// (textproto.CanonicalMIMEHeaderKey's, for a token).
func appendCanonical(dst, name []byte) []byte {
	upper := true
	for _, c := range name {
		switch {
		case upper && 'a' <= c && c <= 'z':
			c -= 'a' - 'A'
		case !upper && 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		dst = append(dst, c)
		upper = c == '-'
	}
	return dst
}

// validBytes is valid for a key as bytes (no copy).
func (ks keySet) validBytes(v []byte) bool {
	if len(v) == 0 {
		return false
	}
	d := sha256.Sum256(v)
	ok := 0
	for i := range ks.digests {
		ok |= subtle.ConstantTimeCompare(d[:], ks.digests[i][:])
	}
	return ok == 1
}

// writeInnerHead writes the forwarded head of the current lean request:
// writeRequestHead's, from the client's bytes.
func (lc *leanConn) writeInnerHead(bw *bufio.Writer, _ *http.Request, ft *fwdTarget) error {
	lr := &lc.lr
	bw.WriteString("GET ")
	bw.WriteString(ft.path)
	if ft.query != "" {
		bw.WriteByte('?')
		bw.WriteString(ft.query)
	}
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.Write(lr.host)
	bw.WriteString("\r\n")
	var canon [64]byte
	for _, l := range lr.lines {
		name := lr.head[l.name[0]:l.name[1]]
		if len(name) <= len(canon) {
			name = appendCanonical(canon[:0], name)
		}
		bw.Write(name)
		bw.WriteString(": ")
		bw.Write(lr.head[l.value[0]:l.value[1]])
		bw.WriteString("\r\n")
	}
	bw.WriteString("X-Session-Api-Key: ")
	bw.Write(ft.key)
	bw.WriteString("\r\n\r\n")
	return nil
}

// answer forwards the parsed request of n head bytes and writes the
// answer; false when the connection must end.
func (lc *leanConn) answer(n int) (keep bool) {
	s, lr := lc.f.s, &lc.lr
	start := time.Now()
	w := &lc.w
	w.reset(lc.bw, lc.f.isClosing())
	defer func() {
		if p := recover(); p != nil {
			// The answer was cut (http.ErrAbortHandler), or a bug: end the
			// connection, as net/http's server does, and say so.
			if p != http.ErrAbortHandler {
				s.log.Error("conversation API: panic serving a request", "path", lr.path, "panic", p, "stack", string(debug.Stack()))
			}
			keep = false
		}
		if s.obs != nil {
			s.obs.ObserveRequest(routeForward, w.code(), time.Since(start))
		}
	}()
	id := lr.fp.ID
	lc.req.URL.Path = lr.path
	ft := &fwdTarget{id: id, path: lr.fp.innerPath(), query: lr.query}
	t, err := s.conv.Target(lc.req.Context(), id)
	switch {
	case err != nil:
		_, _ = lc.br.Discard(n)
		if _, ok := s.visible(id); !ok {
			writeDetail(w, http.StatusNotFound, "Not Found: no conversation "+id)
		} else {
			s.targetError(w, id, err)
		}
	case t.Addr == "":
		_, _ = lc.br.Discard(n)
		writeDetail(w, http.StatusNotImplemented, "conversation "+id+" runs in ohd's local runtime: it has no agent server to forward to")
	default:
		s.conv.Touch(id)
		ft.addr, ft.dialAddr, ft.key, ft.dial = t.Addr, t.DialAddr, t.InnerKey, t.Dial
		ft.tw = touchWriter{ResponseWriter: w, conv: s.conv, id: id}
		ft.plain, lc.ft = lc.plainFunc, ft
		// The head stays in the read buffer until the inner server has
		// it (writeInnerHead reads it there).
		resp, err := s.inner.do(lc.req, ft, lc.headFunc)
		lc.ft = nil
		_, _ = lc.br.Discard(n)
		if err != nil {
			s.proxyErrorFor(&ft.tw, lc.req, ft, err)
			break
		}
		if resp == nil {
			return w.keep // plainAnswer answered
		}
		s.answerBodiless(&ft.tw, resp, ft)
	}
	return w.finish()
}

// plainAnswer is fwdTarget.plain on the lean path: an inner answer whose
// head is plain is passed on as it is, but for the scrubbing of its
// header values (scrubString, as scrubHeaders does): a 2xx other than 204
// and 205 over HTTP/1.1 with one Content-Length, a Content-Type (or no
// body: net/http would sniff one), and no Connection, Transfer-Encoding
// or Trailer header. Set-Cookie and hop-by-hop headers are left out, the
// names canonical, Date added when missing: what net/http's server would
// have written for it. Any other answer (nothing read) goes to
// http.ReadResponse and answerBodiless.
func (lc *leanConn) plainAnswer(pc *innerConn) (answered, reuse bool, err error) {
	br := pc.br
	n, err := peekAnswerHead(br)
	if err != nil || n == 0 {
		return false, false, err
	}
	head, _ := br.Peek(n)
	a := &lc.ans
	if !a.parse(head) {
		return false, false, nil
	}
	if pc.t.responseHeader > 0 {
		_ = pc.c.SetReadDeadline(time.Time{}) // the body may take its time
	}
	ft, w, bw := lc.ft, &lc.w, lc.bw
	w.wroteHeader, w.committed, w.status = true, true, a.status
	bw.WriteString("HTTP/1.1 ")
	writeStatus(bw, a.status)
	var canon [64]byte
	for _, l := range a.lines {
		name, value := head[l.name[0]:l.name[1]], head[l.value[0]:l.value[1]]
		if len(name) <= len(canon) {
			name = appendCanonical(canon[:0], name)
		}
		bw.Write(name)
		bw.WriteString(": ")
		switch {
		case bytes.IndexByte(value, ':') >= 0:
			// Only a value with a colon can name an address.
			v := scrubString(string(value), ft.addr, ft.dialAddr)
			if v == "" && (string(name) == "Location" || string(name) == "Content-Location") {
				v = "/"
			}
			bw.WriteString(v)
		case len(value) == 0 && (string(name) == "Location" || string(name) == "Content-Location"):
			bw.WriteString("/") // as scrubHeaders
		default:
			bw.Write(value)
		}
		bw.WriteString("\r\n")
	}
	if !a.hasDate {
		bw.WriteString("Date: ")
		bw.Write(appendDate(w.date[:0]))
		bw.WriteString("\r\n")
	}
	if w.closing {
		bw.WriteString("Connection: close\r\n")
		w.keep = false
	}
	bw.WriteString("\r\n")
	_, _ = br.Discard(n)
	// The body: exactly its length, read and passed on.
	tw := &ft.tw
	for left := a.length; left > 0; {
		if bw.Available() == 0 {
			if bw.Flush() != nil {
				w.keep = false
				return true, false, nil
			}
		}
		buf := bw.AvailableBuffer()
		buf = buf[:min(int64(cap(buf)), left)]
		m, rerr := br.Read(buf)
		if m > 0 {
			left -= int64(m)
			_, _ = bw.Write(buf[:m]) // no copy: the writer's own buffer
			if now := time.Now(); now.Sub(tw.last) >= time.Second {
				if !tw.last.IsZero() {
					tw.conv.Touch(tw.id)
				}
				tw.last = now
			}
		}
		if rerr != nil && left > 0 {
			// The inner server cut its answer: so is the client's.
			_ = bw.Flush()
			w.keep = false
			return true, false, nil
		}
	}
	if bw.Flush() != nil {
		w.keep = false
	}
	return true, true, nil
}

// peekAnswerHead finds the end of an answer's head in br, reading more
// as needed; 0 when it does not fit in the buffer.
func peekAnswerHead(br *bufio.Reader) (int, error) {
	if _, err := br.Peek(1); err != nil {
		return 0, err
	}
	for {
		buf, _ := br.Peek(br.Buffered())
		i, bare := indexHeadEnd(buf)
		if bare {
			return 0, nil // http.ReadResponse's
		}
		if i >= 0 {
			return i, nil
		}
		if len(buf) >= br.Size() {
			return 0, nil
		}
		if _, err := br.Peek(len(buf) + 1); err != nil {
			return 0, err
		}
	}
}

// plainHead is an inner answer's head the lean path passes on.
type plainHead struct {
	status  int
	length  int64
	hasDate bool
	lines   []lineSpan // passed on, as offsets into the head
}

// parse reads head; false when the answer is not plain (see
// plainAnswer).
func (a *plainHead) parse(head []byte) bool {
	a.lines, a.hasDate, a.length = a.lines[:0], false, -1
	eol := bytes.IndexByte(head, '\n')
	if eol < 13 || head[eol-1] != '\r' || string(head[:9]) != "HTTP/1.1 " || (eol > 13 && head[12] != ' ') {
		return false
	}
	code := 0
	for _, c := range head[9:12] {
		if c < '0' || c > '9' {
			return false
		}
		code = code*10 + int(c-'0')
	}
	if code < 200 || code >= 300 || code == http.StatusNoContent || code == http.StatusResetContent {
		return false
	}
	a.status = code
	hasType := false
	for off := eol + 1; off < len(head)-2; {
		sp, next, ok := headerLine(head, off)
		if !ok {
			return false
		}
		name, value := head[sp.name[0]:sp.name[1]], head[sp.value[0]:sp.value[1]]
		pass := true
		switch {
		case asciiEqualFold(name, "Content-Length"):
			if a.length >= 0 || len(value) == 0 || len(value) > 18 {
				return false
			}
			var n int64
			for _, c := range value {
				if c < '0' || c > '9' {
					return false
				}
				n = n*10 + int64(c-'0')
			}
			a.length = n
		case asciiEqualFold(name, "Transfer-Encoding"), asciiEqualFold(name, "Trailer"), asciiEqualFold(name, "Connection"):
			return false
		case asciiEqualFold(name, "Content-Type"):
			hasType = true
		case asciiEqualFold(name, "Date"):
			a.hasDate = true
		case answerDropped(name):
			pass = false
		}
		if pass {
			a.lines = append(a.lines, sp)
		}
		off = next
	}
	return a.length >= 0 && (hasType || a.length == 0)
}

// answerDropped reports whether an inner answer's header is left out:
// hop-by-hop, or a cookie the inner server sets (ohd never sends one
// back).
func answerDropped(name []byte) bool {
	for _, h := range [...]string{"Set-Cookie", "Set-Cookie2", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Upgrade"} {
		if asciiEqualFold(name, h) {
			return true
		}
	}
	return false
}

// writeStatus writes "<code> <text>\r\n" as net/http's server does.
func writeStatus(bw *bufio.Writer, code int) {
	var b [3]byte
	bw.Write(strconv.AppendInt(b[:0], int64(code), 10))
	bw.WriteByte(' ')
	if t := http.StatusText(code); t != "" {
		bw.WriteString(t)
	} else {
		bw.WriteString("status code ")
		bw.Write(strconv.AppendInt(b[:0], int64(code), 10))
	}
	bw.WriteString("\r\n")
}

// appendDate appends the current time as an HTTP date.
func appendDate(b []byte) []byte {
	return time.Now().UTC().AppendFormat(b, http.TimeFormat)
}

// leanHold is how much of an answer leanWriter holds before it commits
// to a chunked answer (net/http's server holds 2048 bytes).
const leanHold = 2048

// leanWriter is the http.ResponseWriter of a request the lean path took
// whose answer is not plain (an error, a redirect, a stream): it writes
// HTTP/1.1 to the connection as net/http's server would (a length when
// the answer is whole within leanHold bytes or declares one, else
// chunked; Date added; the Content-Type sniffed when missing; trailers).
type leanWriter struct {
	bw          *bufio.Writer
	h           http.Header // the handler's
	sent        http.Header // h as WriteHeader found it: what the head says
	status      int
	wroteHeader bool // the status is fixed
	committed   bool // the head is written
	chunked     bool
	bodyless    bool
	clen        int64 // the declared length, or -1
	written     int64
	hold        []byte
	keep        bool
	closing     bool
	date        [len(http.TimeFormat) + 4]byte
}

func (w *leanWriter) reset(bw *bufio.Writer, closing bool) {
	h, hold := w.h, w.hold[:0]
	if h == nil {
		h = http.Header{}
	}
	clear(h)
	*w = leanWriter{bw: bw, h: h, hold: hold, keep: true, clen: -1, closing: closing}
}

func (w *leanWriter) Header() http.Header { return w.h }

func (w *leanWriter) WriteHeader(code int) {
	if w.wroteHeader || code < 200 {
		return // 1xx: forwarded answers never send one
	}
	w.wroteHeader, w.status = true, code
	w.sent = w.h.Clone()
	w.bodyless = code == http.StatusNoContent || code == http.StatusNotModified
	if w.bodyless {
		// What net/http's server leaves out of such an answer.
		delete(w.sent, "Content-Length")
		delete(w.sent, "Transfer-Encoding")
		if code == http.StatusNotModified {
			delete(w.sent, "Content-Type")
		}
		return
	}
	if v := w.sent.Get("Content-Length"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			w.clen = n
		} else {
			delete(w.sent, "Content-Length")
		}
	}
}

func (w *leanWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.bodyless {
		return 0, http.ErrBodyNotAllowed
	}
	if !w.committed {
		if w.clen < 0 && len(w.hold)+len(p) <= leanHold {
			w.hold = append(w.hold, p...)
			return len(p), nil
		}
		w.commit(w.clen < 0, p)
		if len(w.hold) > 0 {
			hold := w.hold
			w.hold = w.hold[:0]
			if _, err := w.writeBody(hold); err != nil {
				return 0, err
			}
		}
	}
	return w.writeBody(p)
}

func (w *leanWriter) writeBody(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if w.clen >= 0 && w.written+int64(len(p)) > w.clen {
		w.keep = false
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	if w.chunked {
		var b [16]byte
		w.bw.Write(strconv.AppendInt(b[:0], int64(len(p)), 16))
		w.bw.WriteString("\r\n")
	}
	n, err := w.bw.Write(p)
	if w.chunked && err == nil {
		_, err = w.bw.WriteString("\r\n")
	}
	if err != nil {
		w.keep = false
	}
	return n, err
}

// commit writes the status line and headers; p is the body's first
// bytes when none are held (the Content-Type is sniffed from the first
// bytes, as net/http's server does, unless the body is encoded).
func (w *leanWriter) commit(chunked bool, p []byte) {
	w.committed = true
	w.chunked = chunked && !w.bodyless && w.clen < 0
	h := w.sent
	bw := w.bw
	bw.WriteString("HTTP/1.1 ")
	writeStatus(bw, w.status)
	first := w.hold
	if len(first) == 0 {
		first = p
	}
	if _, ok := h["Content-Type"]; !ok && !w.bodyless && len(first) > 0 && h.Get("Content-Encoding") == "" {
		h.Set("Content-Type", http.DetectContentType(first))
	}
	for k, vv := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) || k == "Transfer-Encoding" || k == "Connection" {
			continue
		}
		for _, v := range vv {
			bw.WriteString(k)
			bw.WriteString(": ")
			bw.WriteString(headerNewlineToSpace.Replace(v))
			bw.WriteString("\r\n")
		}
	}
	if _, ok := h["Date"]; !ok {
		bw.WriteString("Date: ")
		bw.Write(appendDate(w.date[:0]))
		bw.WriteString("\r\n")
	}
	switch {
	case w.bodyless:
	case w.chunked:
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	case len(h["Content-Length"]) == 0:
		bw.WriteString("Content-Length: ")
		bw.WriteString(strconv.FormatInt(w.clen, 10))
		bw.WriteString("\r\n")
	}
	if w.closing || len(h["Connection"]) > 0 {
		bw.WriteString("Connection: close\r\n")
		w.keep = false
	}
	bw.WriteString("\r\n")
}

var headerNewlineToSpace = strings.NewReplacer("\n", " ", "\r", " ")

// Flush sends what was written so far (a stream's chunk).
func (w *leanWriter) Flush() { _ = w.FlushError() }

func (w *leanWriter) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(w.clen < 0, nil)
		if len(w.hold) > 0 {
			hold := w.hold
			w.hold = w.hold[:0]
			if _, err := w.writeBody(hold); err != nil {
				return err
			}
		}
	}
	if err := w.bw.Flush(); err != nil {
		w.keep = false
		return err
	}
	return nil
}

// finish ends the answer; it reports whether the connection may carry
// another request.
func (w *leanWriter) finish() bool {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		if w.clen < 0 && !w.bodyless && len(w.sent["Trailer"]) == 0 {
			w.clen = int64(len(w.hold))
		}
		w.commit(w.clen < 0, nil)
		if len(w.hold) > 0 {
			hold := w.hold
			w.hold = w.hold[:0]
			_, _ = w.writeBody(hold)
		}
	}
	if w.chunked {
		// The trailers: the values the handler set by the end, of the
		// names it declared, and those set with http.TrailerPrefix.
		w.bw.WriteString("0\r\n")
		for _, k := range w.sent["Trailer"] {
			for _, name := range strings.Split(k, ",") {
				name = http.CanonicalHeaderKey(strings.TrimSpace(name))
				for _, v := range w.h[name] {
					w.bw.WriteString(name + ": " + headerNewlineToSpace.Replace(v) + "\r\n")
				}
			}
		}
		for k, vv := range w.h {
			if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
				for _, v := range vv {
					w.bw.WriteString(name + ": " + headerNewlineToSpace.Replace(v) + "\r\n")
				}
			}
		}
		w.bw.WriteString("\r\n")
	}
	if w.clen >= 0 && w.written != w.clen && !w.bodyless {
		w.keep = false
	}
	if w.bw.Flush() != nil {
		w.keep = false
	}
	return w.keep
}

// code is the status answered, for the Observer.
func (w *leanWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}
