package proxy

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/http/httpguts"
)

// leanSeeds are request heads for FuzzLeanRequest: ones the lean path
// takes and ones it must not.
func leanSeeds() []string {
	id := leanConvID
	k := outerKeys[0]
	return []string{
		"GET /api/conversations/" + id + "/events/search?limit=1 HTTP/1.1\r\nHost: h\r\nX-Session-API-Key: " + k + "\r\nAccept: */*\r\n\r\n",
		"GET /api/conversations/" + id + "/events?session_api_key=" + k + "&a=1&access_token=x HTTP/1.1\r\nhost: h:1\r\nx-session-api-key: " + k + "\r\nCookie: c=1\r\nX-Forwarded-For: 1.2.3.4\r\n\r\n",
		"GET /api/conversations/" + strings.ToUpper(id) + "/x HTTP/1.1\r\nHost: [::1]:80\r\nX-Session-API-Key:  " + k + " \r\nX-A:\r\nX-B:\tv\t\r\n\r\n",
		"GET /api/conversations/" + strings.ReplaceAll(id, "-", "") + "/files/(a)!*;=@:,$&+'~ HTTP/1.1\r\nHost: h\r\nX-Session-API-Key: " + k + "\r\n\r\n",
		"GET /api/conversations/urn:uuid:" + id + "/x HTTP/1.1\r\nHost: h\r\nX-Session-API-Key: " + k + "\r\n\r\n",
		"GET /api/conversations/" + id + "/ HTTP/1.1\r\nHost: h\r\nX-Session-API-Key: " + k + "\r\n\r\n",
		"GET /api/conversations/" + id + "/x HTTP/1.1\r\nHost:\r\nX-Session-API-Key: " + k + "\r\n\r\n",
		"GET /api/conversations/" + id + "/x?q=%zz#f HTTP/1.1\r\nHost: h\r\nX-Session-API-Key: " + k + "\r\n\r\n",
		"GET /api/conversations/" + id + "/./x HTTP/1.1\r\nHost: h\r\nX-Session-API-Key: " + k + "\r\n\r\n",
		"GET /api/conversations/" + id + "/fork/ HTTP/1.1\r\nHost: h\r\nX-Session-API-Key: " + k + "\r\n\r\n",
		"GET /api/conversations/" + id + "/switch_llm HTTP/1.1\r\nHost: h\r\nX-Session-API-Key: " + k + "\r\n\r\n",
		"GET /api/conversations/" + id + "/vscode/x HTTP/1.1\r\nHost: h\r\nX-Session-API-Key: " + k + "\r\n\r\n",
		"GET /api/conversations/" + id + "/children HTTP/1.1\r\nHost: h\r\nX-Session-API-Key: " + k + "\r\n\r\n",
		"GET /api/conversations/" + id + "/x HTTP/1.1\r\nHost: h\r\nX-Session-API-Key: " + k + "\r\nX-Session-API-Key: " + k + "\r\n\r\n",
		"GET /api/conversations/" + id + "/x HTTP/1.1\r\nHost: h\r\nX-Session-API-Key: " + k + "\r\nX-Fold: a\r\n b\r\n\r\n",
		"GET /api/conversations/" + id + "/x HTTP/1.1\r\nHost: h\r\nX-Session-API-Key: " + k + "\r\nConnection: X-H\r\nX-H: 1\r\n\r\n",
		"GET /api/conversations/" + id + "/x HTTP/1.1\r\nHost: h\r\nX-Session-API-Key: " + k + "\r\nOrigin: null\r\n\r\n",
		"GET /api/conversations/" + id + "/x HTTP/1.1\r\nHost: h\r\nX-Session-API-Key: " + k + "\r\nKeep-Alive: 1\r\nTe: trailers\r\nProxy-Connection: x\r\n\r\n",
		"GET /api/conversations/" + id + "/x HTTP/1.1\r\nHost: h\r\nX-Session-API-Key: " + k + "\r\nx-a-header-name-longer-than-sixty-four-bytes-which-is-not-canonicalized: v\r\n\r\n",
	}
}

// FuzzLeanRequest checks that a head the lean path takes is one net/http's
// server would have parsed to the same GET and sent to the forward route,
// and that the head forwarded to the inner server is the one the old path
// writes for it.
func FuzzLeanRequest(f *testing.F) {
	for _, s := range leanSeeds() {
		f.Add([]byte(s))
	}
	s, err := New(Options{Conversations: &leanConvs{addr: "127.0.0.1:1"}, Keys: leanKeys()})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, head []byte) {
		// The head's end by the blank line alone (peekHead also hands a
		// head with a bare LF to net/http; parse must refuse one too).
		n := bytes.Index(head, []byte("\r\n\r\n"))
		if n < 0 || n+4 > leanBufSize {
			return
		}
		n += 4
		br := bufio.NewReaderSize(bytes.NewReader(head), leanBufSize)
		if _, err := br.Peek(n); err != nil {
			t.Fatal(err)
		}
		lc := &leanConn{}
		if !lc.lr.parse(s, br, n) {
			return
		}
		lr := &lc.lr
		if br.Buffered() < n {
			t.Fatalf("parse consumed the head")
		}
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head[:n])))
		if err != nil {
			t.Fatalf("parse took %q; http.ReadRequest: %v", head[:n], err)
		}
		// What net/http's server checks besides ReadRequest (which
		// drops Host from the header).
		tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(head[:n])))
		_, _ = tp.ReadLine()
		mh, err := tp.ReadMIMEHeader()
		if err != nil {
			t.Fatalf("parse took %q; textproto: %v", head[:n], err)
		}
		hosts := mh["Host"]
		if len(hosts) != 1 || !httpguts.ValidHostHeader(hosts[0]) {
			t.Fatalf("parse took %q with Host %q: net/http's server answers 400", head[:n], hosts)
		}
		for k, vv := range req.Header {
			if !httpguts.ValidHeaderFieldName(k) {
				t.Fatalf("parse took %q with header name %q", head[:n], k)
			}
			for _, v := range vv {
				if !httpguts.ValidHeaderFieldValue(v) {
					t.Fatalf("parse took %q with %s: %q", head[:n], k, v)
				}
			}
		}
		delete(req.Header, "Host")
		if req.Method != http.MethodGet || req.ProtoMajor != 1 || req.ProtoMinor != 1 || req.Close ||
			req.ContentLength != 0 || len(req.TransferEncoding) != 0 {
			t.Fatalf("parse took %q: net/http reads %s HTTP/%d.%d close=%v length %d %v", head[:n], req.Method, req.ProtoMajor, req.ProtoMinor, req.Close, req.ContentLength, req.TransferEncoding)
		}
		if req.URL.Path != lr.path || req.URL.EscapedPath() != lr.path {
			t.Fatalf("parse path %q; net/http's %q (escaped %q)", lr.path, req.URL.Path, req.URL.EscapedPath())
		}
		if q := stripAuthQuery(req.URL.RawQuery); q != lr.query {
			t.Fatalf("parse query %q; net/http's stripped %q", lr.query, q)
		}
		if req.Host != string(lr.host) {
			t.Fatalf("parse Host %q; net/http's %q", lr.host, req.Host)
		}
		if keys := req.Header["X-Session-Api-Key"]; len(keys) != 1 || !s.keys.valid(keys[0]) {
			t.Fatalf("parse took %q; net/http reads the keys %q", head[:n], keys)
		}
		for _, h := range []string{"Origin", "X-Expose-Secrets", "Connection", "Upgrade", "Expect"} {
			if v, ok := req.Header[h]; ok {
				t.Fatalf("parse took %q with %s: %q", head[:n], h, v)
			}
		}
		// The forward route, as dispatch and forward route it.
		if !isForwardPath(req.URL) {
			t.Fatalf("parse took %q; dispatch does not send %q to the forward route", head[:n], req.URL.Path)
		}
		fp, ok := parseForwardPath(req.URL.EscapedPath())
		if !ok || fp.ID == "" || fp.ID != lr.fp.ID || fp.Tail != lr.fp.Tail || !fp.HasTail {
			t.Fatalf("parse forward path %+v; net/http's %+v (%v)", lr.fp, fp, ok)
		}
		if _, bad := unsupportedTails[fp.First]; bad || isForkTail(fp.Tail) || switchTail(fp.Tail) != "" {
			t.Fatalf("parse took %q: the tail %q is not forwarded", head[:n], fp.Tail)
		}
		// The forwarded heads.
		key := []byte("inner-key")
		var lean, old bytes.Buffer
		bw := bufio.NewWriter(&lean)
		_ = lc.writeInnerHead(bw, nil, &fwdTarget{path: lr.fp.innerPath(), query: lr.query, key: key})
		bw.Flush()
		stripHopByHop(req.Header)
		bw = bufio.NewWriter(&old)
		_ = writeRequestHead(bw, req, &fwdTarget{path: fp.innerPath(), query: stripAuthQuery(req.URL.RawQuery), key: key})
		bw.Flush()
		lreq, lerr := http.ReadRequest(bufio.NewReader(&lean))
		oreq, oerr := http.ReadRequest(bufio.NewReader(&old))
		if lerr != nil || oerr != nil {
			t.Fatalf("forwarded heads do not parse: lean %v %q, old %v %q", lerr, lean.String(), oerr, old.String())
		}
		type fwd struct {
			Method, URI, Host string
			Header            http.Header
		}
		if diff := cmp.Diff(fwd{oreq.Method, oreq.RequestURI, oreq.Host, oreq.Header}, fwd{lreq.Method, lreq.RequestURI, lreq.Host, lreq.Header}); diff != "" {
			t.Fatalf("for %q the lean path forwards another head (-old +lean):\n%s", head[:n], diff)
		}
	})
}

// TestPlainHeadParse: which inner answers the lean path passes on from
// bytes, and what it keeps of them.
func TestPlainHeadParse(t *testing.T) {
	type want struct {
		OK      bool
		Status  int
		Length  int64
		HasDate bool
		Lines   []string // "name: value" as passed on
	}
	ok := func(status int, length int64, hasDate bool, lines ...string) want {
		return want{true, status, length, hasDate, lines}
	}
	no := want{}
	json5 := "Content-Type: application/json\r\nContent-Length: 5\r\n"
	for _, tc := range []struct {
		name, head string
		want       want
	}{
		{"plain", "HTTP/1.1 200 OK\r\n" + json5 + "\r\n", ok(200, 5, false, "Content-Type: application/json", "Content-Length: 5")},
		{"date", "HTTP/1.1 201 Created\r\nDate: x\r\n" + json5 + "\r\n", ok(201, 5, true, "Date: x", "Content-Type: application/json", "Content-Length: 5")},
		{"no reason", "HTTP/1.1 200 \r\n" + json5 + "\r\n", ok(200, 5, false, "Content-Type: application/json", "Content-Length: 5")},
		{"no reason, no space", "HTTP/1.1 200\r\n" + json5 + "\r\n", ok(200, 5, false, "Content-Type: application/json", "Content-Length: 5")},
		{"short status line", "HTTP/1.1 20\r\n" + json5 + "\r\n", no},
		{"2xx unknown", "HTTP/1.1 299 X\r\n" + json5 + "\r\n", ok(299, 5, false, "Content-Type: application/json", "Content-Length: 5")},
		{"206", "HTTP/1.1 206 Partial Content\r\n" + json5 + "\r\n", ok(206, 5, false, "Content-Type: application/json", "Content-Length: 5")},
		{"four digits", "HTTP/1.1 2000 OK\r\n" + json5 + "\r\n", no},
		{"not digits", "HTTP/1.1 2x0 OK\r\n" + json5 + "\r\n", no},
		{"http/1.0", "HTTP/1.0 200 OK\r\n" + json5 + "\r\n", no},
		{"lower-case version", "http/1.1 200 OK\r\n" + json5 + "\r\n", no},
		{"199", "HTTP/1.1 199 X\r\n" + json5 + "\r\n", no},
		{"204", "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n", no},
		{"205", "HTTP/1.1 205 Reset Content\r\nContent-Length: 0\r\n\r\n", no},
		{"300", "HTTP/1.1 300 Multiple Choices\r\n" + json5 + "\r\n", no},
		{"404", "HTTP/1.1 404 Not Found\r\n" + json5 + "\r\n", no},
		{"no length", "HTTP/1.1 200 OK\r\nContent-Type: a\r\n\r\n", no},
		{"two lengths", "HTTP/1.1 200 OK\r\n" + json5 + "Content-Length: 5\r\n\r\n", no},
		{"empty length", "HTTP/1.1 200 OK\r\nContent-Type: a\r\nContent-Length:\r\n\r\n", no},
		{"signed length", "HTTP/1.1 200 OK\r\nContent-Type: a\r\nContent-Length: +5\r\n\r\n", no},
		{"negative length", "HTTP/1.1 200 OK\r\nContent-Type: a\r\nContent-Length: -5\r\n\r\n", no},
		{"two numbers", "HTTP/1.1 200 OK\r\nContent-Type: a\r\nContent-Length: 5 5\r\n\r\n", no},
		{"list length", "HTTP/1.1 200 OK\r\nContent-Type: a\r\nContent-Length: 5,5\r\n\r\n", no},
		{"19 digits", "HTTP/1.1 200 OK\r\nContent-Type: a\r\nContent-Length: 1234567890123456789\r\n\r\n", no},
		{"18 digits", "HTTP/1.1 200 OK\r\nContent-Type: a\r\nContent-Length: 123456789012345678\r\n\r\n", ok(200, 123456789012345678, false, "Content-Type: a", "Content-Length: 123456789012345678")},
		{"spaced length", "HTTP/1.1 200 OK\r\nContent-Type: a\r\ncontent-length: \t 7 \t\r\n\r\n", ok(200, 7, false, "Content-Type: a", "content-length: 7")},
		{"empty without type", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", ok(200, 0, false, "Content-Length: 0")},
		{"body without type", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n", no},
		{"empty type", "HTTP/1.1 200 OK\r\nContent-Type:\r\nContent-Length: 1\r\n\r\n", ok(200, 1, false, "Content-Type: ", "Content-Length: 1")},
		{"chunked", "HTTP/1.1 200 OK\r\n" + json5 + "Transfer-Encoding: chunked\r\n\r\n", no},
		{"trailer", "HTTP/1.1 200 OK\r\n" + json5 + "trailer: X\r\n\r\n", no},
		{"connection", "HTTP/1.1 200 OK\r\n" + json5 + "CONNECTION: close\r\n\r\n", no},
		{"dropped", "HTTP/1.1 200 OK\r\n" + json5 + "Set-Cookie: a=1\r\nset-cookie2: b\r\nKeep-Alive: 1\r\nProxy-Connection: x\r\nProxy-Authenticate: y\r\nProxy-Authorization: z\r\nTE: t\r\nUpgrade: u\r\nX-Kept: k\r\n\r\n",
			ok(200, 5, false, "Content-Type: application/json", "Content-Length: 5", "X-Kept: k")},
		{"trimmed values", "HTTP/1.1 200 OK\r\n" + json5 + "X-A: \t a b \t\r\nX-B:\r\n\r\n", ok(200, 5, false, "Content-Type: application/json", "Content-Length: 5", "X-A: a b", "X-B: ")},
		{"high bytes", "HTTP/1.1 200 OK\r\n" + json5 + "X-A: caf\xc3\xa9\r\n\r\n", ok(200, 5, false, "Content-Type: application/json", "Content-Length: 5", "X-A: caf\xc3\xa9")},
		{"control byte", "HTTP/1.1 200 OK\r\n" + json5 + "X-A: a\x01\r\n\r\n", no},
		{"DEL", "HTTP/1.1 200 OK\r\n" + json5 + "X-A: a\x7f\r\n\r\n", no},
		{"space in name", "HTTP/1.1 200 OK\r\n" + json5 + "X A: a\r\n\r\n", no},
		{"space before colon", "HTTP/1.1 200 OK\r\n" + json5 + "X-A : a\r\n\r\n", no},
		{"no colon", "HTTP/1.1 200 OK\r\n" + json5 + "X-A\r\n\r\n", no},
		{"empty name", "HTTP/1.1 200 OK\r\n" + json5 + ": a\r\n\r\n", no},
		{"continuation", "HTTP/1.1 200 OK\r\n" + json5 + "X-A: a\r\n b\r\n\r\n", no},
		{"bare LF", "HTTP/1.1 200 OK\r\n" + json5 + "X-A: a\n\r\n", no},
		{"bare LF status", "HTTP/1.1 200 OK\n" + json5 + "\r\n", no},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a plainHead
			a.lines = append(a.lines, lineSpan{}) // reused state is cleared
			got := want{OK: a.parse([]byte(tc.head))}
			if got.OK {
				got.Status, got.Length, got.HasDate = a.status, a.length, a.hasDate
				for _, l := range a.lines {
					got.Lines = append(got.Lines, tc.head[l.name[0]:l.name[1]]+": "+tc.head[l.value[0]:l.value[1]])
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("plainHead.parse(%q) (-want +got):\n%s", tc.head, diff)
			}
			// A head parse takes is one http.ReadResponse reads the same.
			if got.OK {
				resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(tc.head)), nil)
				if err != nil || resp.StatusCode != got.Status || resp.ContentLength != got.Length {
					t.Errorf("http.ReadResponse(%q) = %v, %v; parse took it as %d with length %d", tc.head, resp, err, got.Status, got.Length)
				}
			}
		})
	}
}

// leanWriterCase is a handler run on leanWriter and on net/http's server;
// what it returns (the errors its writes got) is compared too.
type leanWriterCase struct {
	name string
	h    func(w http.ResponseWriter) string
	keep bool // leanWriter.finish's answer
}

func leanWriterCases() []leanWriterCase {
	html := func(n int) string { return "<html><body>" + strings.Repeat("x", n) + "</body></html>" }
	errs := func(errs ...error) string {
		var b []string
		for _, e := range errs {
			b = append(b, errString(e))
		}
		return strings.Join(b, ",")
	}
	return []leanWriterCase{
		{"nothing", func(w http.ResponseWriter) string { return "" }, true},
		{"status only", func(w http.ResponseWriter) string { w.WriteHeader(http.StatusAccepted); return "" }, true},
		{"small body sniffed", func(w http.ResponseWriter) string {
			_, err := io.WriteString(w, html(10))
			return errs(err)
		}, true},
		{"small body typed", func(w http.ResponseWriter) string {
			w.Header().Set("Content-Type", "application/json")
			_, err := io.WriteString(w, `{"a":1}`)
			return errs(err)
		}, true},
		{"body at the hold", func(w http.ResponseWriter) string {
			_, err := io.WriteString(w, html(2048-len(html(0))))
			return errs(err)
		}, true},
		{"body over the hold in two writes", func(w http.ResponseWriter) string {
			_, err1 := io.WriteString(w, html(1000))
			_, err2 := io.WriteString(w, strings.Repeat("y", 3000))
			return errs(err1, err2)
		}, true},
		{"big first write sniffed", func(w http.ResponseWriter) string {
			_, err := io.WriteString(w, html(3000))
			return errs(err)
		}, true},
		{"declared length sniffed", func(w http.ResponseWriter) string {
			w.Header().Set("Content-Length", strconv.Itoa(len(html(3))))
			_, err := io.WriteString(w, html(3))
			return errs(err)
		}, true},
		{"declared length typed, big", func(w http.ResponseWriter) string {
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("Content-Length", "5000")
			_, err := io.WriteString(w, strings.Repeat("z", 5000))
			return errs(err)
		}, true},
		{"declared length exceeded", func(w http.ResponseWriter) string {
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("Content-Length", "2")
			_, err := io.WriteString(w, "abc")
			return errs(err)
		}, false},
		{"declared length short", func(w http.ResponseWriter) string {
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("Content-Length", "5")
			_, err := io.WriteString(w, "abc")
			return errs(err)
		}, false},
		{"flushed stream", func(w http.ResponseWriter) string {
			w.Header().Set("Content-Type", "text/event-stream")
			_, err1 := io.WriteString(w, "data: 1\n\n")
			err2 := http.NewResponseController(w).Flush()
			_, err3 := io.WriteString(w, "data: 2\n\n")
			return errs(err1, err2, err3)
		}, true},
		{"flushed untyped", func(w http.ResponseWriter) string {
			_, err1 := io.WriteString(w, "a")
			err2 := http.NewResponseController(w).Flush()
			_, err3 := io.WriteString(w, "<html>")
			return errs(err1, err2, err3)
		}, true},
		{"flush before anything", func(w http.ResponseWriter) string {
			err := http.NewResponseController(w).Flush()
			return errs(err)
		}, true},
		{"declared trailer", func(w http.ResponseWriter) string {
			// The body is over the hold: the head is out when the
			// trailer's value is set (as answerBodiless does it, through
			// TrailerPrefix, the value may come at any time).
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("Trailer", "X-Sum, X-Other")
			_, err := io.WriteString(w, strings.Repeat("t", 3000))
			w.Header().Set("X-Sum", "42")
			return errs(err)
		}, true},
		{"declared trailer, no body", func(w http.ResponseWriter) string {
			w.Header().Set("Trailer", "X-Sum")
			w.Header().Set("X-Sum", "1")
			return ""
		}, true},
		{"prefixed trailer", func(w http.ResponseWriter) string {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusOK)
			_, err := io.WriteString(w, "abc")
			w.Header().Set(http.TrailerPrefix+"X-Late", "late")
			return errs(err)
		}, true},
		{"204 with a write", func(w http.ResponseWriter) string {
			w.Header().Set("X-Kept", "yes")
			w.WriteHeader(http.StatusNoContent)
			_, err := io.WriteString(w, "x")
			return errs(err)
		}, true},
		{"204 with length and type", func(w http.ResponseWriter) string {
			w.Header().Set("Content-Length", "0")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNoContent)
			return ""
		}, true},
		{"304 with length and type", func(w http.ResponseWriter) string {
			w.Header().Set("ETag", `"x"`)
			w.Header().Set("Content-Length", "11")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotModified)
			return ""
		}, true},
		{"302 with a body", func(w http.ResponseWriter) string {
			w.Header().Set("Location", "/x")
			w.Header().Set("Content-Type", "text/html")
			w.Header().Set("Content-Length", "9")
			w.WriteHeader(http.StatusFound)
			_, err := io.WriteString(w, "<a>x</a>\n")
			return errs(err)
		}, true},
		{"encoded, untyped", func(w http.ResponseWriter) string {
			var zb bytes.Buffer
			zw := gzip.NewWriter(&zb)
			_, _ = zw.Write([]byte("hello"))
			_ = zw.Close()
			w.Header().Set("Content-Encoding", "gzip")
			_, err := w.Write(zb.Bytes())
			return errs(err)
		}, true},
		{"status after a write", func(w http.ResponseWriter) string {
			_, err := io.WriteString(w, "a")
			w.WriteHeader(http.StatusTeapot)
			return errs(err)
		}, true},
		{"newline in a value", func(w http.ResponseWriter) string {
			w.Header().Set("X-A", "a\r\nX-Injected: b")
			_, err := io.WriteString(w, "a")
			return errs(err)
		}, true},
		{"unknown status", func(w http.ResponseWriter) string {
			w.WriteHeader(299)
			return ""
		}, true},
		{"connection close", func(w http.ResponseWriter) string {
			w.Header().Set("Connection", "close")
			_, err := io.WriteString(w, "a")
			return errs(err)
		}, false},
	}
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

// answerSeen is an answer as a client reads it.
type answerSeen struct {
	Status           int
	Header           http.Header
	TransferEncoding []string
	ContentLength    int64
	Body             string
	BodyErr          string
	Trailer          http.Header
	Notes            string // what the handler's writes returned
}

func readSeen(t *testing.T, r io.Reader) answerSeen {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(r), &http.Request{Method: "GET"})
	if err != nil {
		t.Fatalf("answer does not parse: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	a := answerSeen{Status: resp.StatusCode, Header: resp.Header, TransferEncoding: resp.TransferEncoding,
		ContentLength: resp.ContentLength, Body: string(b), Trailer: resp.Trailer}
	if err != nil {
		a.BodyErr = "cut"
	}
	if _, ok := a.Header["Date"]; ok {
		a.Header["Date"] = []string{"(date)"}
	}
	return a
}

// TestLeanWriterSameAsNetHTTP runs handlers on leanWriter and on
// net/http's server: the client must read the same answer.
func TestLeanWriterSameAsNetHTTP(t *testing.T) {
	cases := leanWriterCases()
	notes := make(chan string, 1)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, c := range cases {
			if r.URL.Path == "/"+c.name {
				notes <- c.h(w)
				return
			}
		}
	}))
	t.Cleanup(hs.Close)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// net/http's server.
			conn, err := net.Dial("tcp", hs.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			req := "GET /" + strings.ReplaceAll(c.name, " ", "%20") + " HTTP/1.1\r\nHost: h\r\n\r\n"
			if _, err := io.WriteString(conn, req); err != nil {
				t.Fatal(err)
			}
			want := readSeen(t, conn)
			want.Notes = <-notes
			// leanWriter.
			var out bytes.Buffer
			var w leanWriter
			w.reset(bufio.NewWriterSize(&out, leanBufSize), false)
			n := c.h(&w)
			keep := w.finish()
			got := readSeen(t, &out)
			got.Notes = n
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("leanWriter's answer differs from net/http's (-net/http +leanWriter):\n%s\nraw: %q", diff, out.String())
			}
			if keep != c.keep {
				t.Errorf("finish() = %v, want %v", keep, c.keep)
			}
		})
	}
}

// TestLeanWriterClosing: an answer written while the front shuts down
// says the connection ends.
func TestLeanWriterClosing(t *testing.T) {
	var out bytes.Buffer
	var w leanWriter
	w.reset(bufio.NewWriter(&out), true)
	_, _ = io.WriteString(&w, "a")
	if w.finish() {
		t.Errorf("finish() = true while closing, want false")
	}
	resp, err := http.ReadResponse(bufio.NewReader(&out), nil)
	if err != nil || !resp.Close {
		t.Errorf("answer while closing: %v, close=%v, want Connection: close", err, resp != nil && resp.Close)
	}
	// reset clears what the last answer left.
	w.h.Set("X-Old", "1")
	w.reset(bufio.NewWriter(&out), false)
	if len(w.h) != 0 || w.status != 0 || w.committed || !w.keep || w.clen != -1 {
		t.Errorf("reset left %+v", w)
	}
}

// TestLeanWriterWriteError: a client that went away ends the connection.
func TestLeanWriterWriteError(t *testing.T) {
	var w leanWriter
	w.reset(bufio.NewWriterSize(failWriter{}, 16), false)
	w.Header().Set("Content-Type", "text/plain")
	_, err := w.Write(bytes.Repeat([]byte("x"), 4096))
	if err == nil {
		t.Errorf("Write to a broken connection = nil, want an error")
	}
	if w.finish() {
		t.Errorf("finish() after a failed write = true, want false")
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

// TestAppendCanonical: the lean path's header names are net/http's.
func TestAppendCanonical(t *testing.T) {
	for _, name := range []string{"x-session-api-key", "X-SESSION-API-KEY", "content-type", "a", "-a-", "x_y-z", "WWW-Authenticate", "x--y", "1a-b2"} {
		if got, want := string(appendCanonical(nil, []byte(name))), textproto.CanonicalMIMEHeaderKey(name); got != want {
			t.Errorf("appendCanonical(%q) = %q, want %q", name, got, want)
		}
		if !asciiEqualFold([]byte(name), textproto.CanonicalMIMEHeaderKey(name)) {
			t.Errorf("asciiEqualFold(%q, canonical) = false", name)
		}
	}
	if asciiEqualFold([]byte("Hosts"), "Host") || asciiEqualFold([]byte("Host"), "Hosu") {
		t.Errorf("asciiEqualFold matched different names")
	}
}
