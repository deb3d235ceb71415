package broker

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// FuzzReadHead: the forward proxy's head parser, which reads what a
// container sends, never panics, and what it accepts names a host:port.
func FuzzReadHead(f *testing.F) {
	for _, s := range []string{
		"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
		"GET http://example.com/x HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"POST http://a:80/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"GET http://a/ HTTP/1.1\nHost: b\r\n\r\n",
		"CONNECT [::1]:22 HTTP/1.0\r\n\r\n",
		"GET https://x/ HTTP/1.1\r\n\r\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		br := bufio.NewReaderSize(strings.NewReader(s), 4096)
		h, pe := readHead(br)
		if pe != nil {
			return
		}
		if _, _, err := net.SplitHostPort(h.authority); err != nil {
			t.Fatalf("readHead(%q) accepted authority %q: %v", s, h.authority, err)
		}
	})
}

// FuzzReadHeadSame: readHead, which parses in place, says what the
// version that split the head into strings said, for any input.
func FuzzReadHeadSame(f *testing.F) {
	for _, s := range []string{
		"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
		"GET http://example.com/x HTTP/1.1\r\nHost: example.com\r\nUser-Agent: x\r\n\r\n",
		"POST http://a:80/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"POST http://a:80/ HTTP/1.1\r\ntransfer-encoding: gzip\r\n\r\n",
		"POST http://a:80/ HTTP/1.1\r\nContent-Length: 1\r\nCONTENT-LENGTH: 2\r\n\r\n",
		"CONNECT a:1 HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
		"CONNECT a:1 HTTP/1.1\r\nContent-Length: 3\r\n\r\n",
		"GET http://a/ HTTP/1.1\nHost: b\r\n\r\n",
		"GET http://a/ HTTP/1.1\r\r\nHost: b\r\n\r\n",
		"GET http://a/ HTTP/1.1\r\nHost: b\r\n\r\n",
		"GET http://a/  HTTP/1.1\r\n\r\n",
		" http://a/ HTTP/1.1\r\n\r\n",
		"GET http://a/ HTTP/1.1\r\n Host: a\r\n\r\n",
		"GET http://a/ HTTP/1.1\r\nHoſt: b\r\n\r\n",
		"GET http://a/ HTTP/1.1\r\n: b\r\n\r\n",
		"CONNECT [::1]:22 HTTP/1.0\r\n\r\n",
		"GET https://x/ HTTP/1.1\r\n\r\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h1, pe1 := readHead(bufio.NewReaderSize(strings.NewReader(s), 4096))
		h2, pe2 := readHeadBefore(bufio.NewReaderSize(strings.NewReader(s), 4096))
		// The version before read no framing for forwardLean.
		h1 = proxyHead{method: h1.method, target: h1.target, authority: h1.authority}
		if h1 != h2 || (pe1 == nil) != (pe2 == nil) || pe1 != nil && *pe1 != *pe2 {
			t.Fatalf("readHead(%q) = %+v, %v; before: %+v, %v", s, h1, pe1, h2, pe2)
		}
	})
}

// BenchmarkReadHead is the proxy's parse of a typical request head.
func BenchmarkReadHead(b *testing.B) {
	const head = "GET http://127.0.0.1:8080/small HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: Go-http-client/1.1\r\nAccept-Encoding: identity\r\n\r\n"
	for _, f := range []struct {
		name string
		read func(*bufio.Reader) (proxyHead, *proxyError)
	}{{"now", readHead}, {"before", readHeadBefore}} {
		b.Run(f.name, func(b *testing.B) {
			rd := strings.NewReader(head)
			br := bufio.NewReaderSize(rd, maxProxyHead)
			b.ReportAllocs()
			for range b.N {
				rd.Reset(head)
				br.Reset(rd)
				if _, pe := f.read(br); pe != nil {
					b.Fatal(pe)
				}
			}
		})
	}
}

// readHeadBefore is readHead as it was before it parsed in place
// (FuzzReadHeadSame).
func readHeadBefore(br *bufio.Reader) (proxyHead, *proxyError) {
	b, err := peekUntil(br, []byte("\r\n\r\n"))
	i := bytes.Index(b, []byte("\r\n\r\n"))
	switch {
	case i < 0 && errors.Is(err, bufio.ErrBufferFull):
		return proxyHead{}, perr(http.StatusRequestHeaderFieldsTooLarge, "request head over 64 KiB")
	case i < 0:
		return proxyHead{}, errClosed
	}
	raw := b[:i+2]
	if bytes.ContainsAny(bytes.ReplaceAll(raw, []byte("\r\n"), nil), "\r\n") {
		return proxyHead{}, perr(http.StatusBadRequest, "a line of the request head does not end in CRLF")
	}
	lines := strings.Split(strings.TrimSuffix(string(raw), "\r\n"), "\r\n")
	parts := strings.Split(lines[0], " ")
	if len(parts) != 3 || (parts[2] != "HTTP/1.1" && parts[2] != "HTTP/1.0") {
		return proxyHead{}, perr(http.StatusBadRequest, "malformed request line")
	}
	h := proxyHead{method: parts[0], target: parts[1]}
	var hosts, lengths, encodings []string
	for _, l := range lines[1:] {
		name, value, ok := strings.Cut(l, ":")
		if !ok || name == "" || strings.TrimSpace(name) != name {
			return proxyHead{}, perr(http.StatusBadRequest, "malformed header line")
		}
		value = strings.TrimSpace(value)
		switch strings.ToLower(name) {
		case "host":
			hosts = append(hosts, value)
		case "content-length":
			lengths = append(lengths, value)
		case "transfer-encoding":
			encodings = append(encodings, value)
		}
	}
	if len(hosts) > 1 || len(lengths) > 1 || len(encodings) > 1 {
		return proxyHead{}, perr(http.StatusBadRequest, "more than one Host, Content-Length or Transfer-Encoding header")
	}
	if len(encodings) == 1 && (!strings.EqualFold(encodings[0], "chunked") || len(lengths) == 1) {
		return proxyHead{}, perr(http.StatusBadRequest, "Transfer-Encoding must be exactly chunked, without a Content-Length")
	}
	if h.method == http.MethodConnect {
		if len(encodings) == 1 || len(lengths) == 1 && lengths[0] != "0" {
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
	}
	if len(hosts) == 1 && !strings.EqualFold(withPort(hosts[0], portOf(h.authority)), h.authority) {
		return proxyHead{}, perr(http.StatusBadRequest, "the Host header "+strconv.Quote(hosts[0])+" differs from the request's target "+h.authority)
	}
	return h, nil
}

// FuzzForwardLeanSame: a request forwardLean passes on as bytes reaches
// the destination as net/http's parse and write of it did (method, URI,
// Host, fields, body), and an answer it passes on reaches the client as
// net/http's did (status, fields, body); an answer it leaves alone is one
// net/http then reads.
func FuzzForwardLeanSame(f *testing.F) {
	for _, s := range [][2]string{
		{"GET http://a:8080/small HTTP/1.1\r\nHost: a:8080\r\nUser-Agent: x\r\nAccept-Encoding: identity\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"},
		{"POST http://a/p?q=1 HTTP/1.1\r\nContent-Length: 4\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic eA==\r\nUser-Agent: y\r\n\r\nbody", "HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n"},
		{"HEAD http://a/ HTTP/1.1\r\nHost: a\r\nUser-Agent: z\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n"},
		{"GET http://a/ HTTP/1.1\r\nConnection: close\r\nUser-Agent: z\r\n\r\n", "HTTP/1.1 304 Not Modified\r\nConnection: close\r\n\r\n"},
		{"GET http://a/ HTTP/1.1\r\nUser-Agent: z\r\n\r\n", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"},
		{"GET http://a/ HTTP/1.1\r\nUser-Agent: z\r\n\r\n", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx"},
		{"GET http://a/ HTTP/1.1\r\nUser-Agent: z\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, reqIn, respIn string) {
		br := bufio.NewReaderSize(strings.NewReader(reqIn), maxProxyHead)
		h, pe := readHead(br)
		if pe != nil || !h.lean {
			return
		}
		// net/http's way (the proxy's before forwardLean).
		oldReq, err := http.ReadRequest(bufio.NewReader(strings.NewReader(reqIn)))
		if err != nil {
			return // refused before, and by the destination's parser
		}
		oldBody, err := io.ReadAll(oldReq.Body)
		if err != nil {
			return
		}
		oldReq.Body = io.NopCloser(bytes.NewReader(oldBody))
		for _, k := range []string{"Proxy-Connection", "Proxy-Authorization", "Proxy-Authenticate"} {
			oldReq.Header.Del(k)
		}
		var oldDest bytes.Buffer
		if oldReq.Header.Get("User-Agent") == "" {
			oldReq.Header["User-Agent"] = []string{""} // Request.Write adds its own otherwise
		}
		if err := oldReq.Write(&oldDest); err != nil {
			return
		}

		var dest, client bytes.Buffer
		tbw, bw := bufio.NewWriter(&dest), bufio.NewWriter(&client)
		tbr := bufio.NewReaderSize(strings.NewReader(respIn), 32<<10)
		a, b := net.Pipe()
		b.Close()
		done, _, ferr := forwardLean(br, h, tbw, tbr, bw, a, &tunnel{Conn: a})
		a.Close()

		got, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(dest.Bytes())))
		if err != nil {
			t.Fatalf("the destination cannot read what forwardLean sent for %q: %v\n%q", reqIn, err, dest.Bytes())
		}
		want, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(oldDest.Bytes())))
		if err != nil {
			t.Fatalf("the destination cannot read net/http's write of %q: %v", reqIn, err)
		}
		gotBody, _ := io.ReadAll(got.Body)
		wantBody, _ := io.ReadAll(want.Body)
		got.Header.Del("User-Agent")
		want.Header.Del("User-Agent")
		if got.Method != want.Method || got.RequestURI != want.RequestURI || got.Host != want.Host ||
			!bytes.Equal(gotBody, wantBody) || !sameHeader(got.Header, want.Header) {
			t.Fatalf("for %q the destination read\n%q %q %q %v %q\nnet/http's way:\n%q %q %q %v %q",
				reqIn, got.Method, got.RequestURI, got.Host, got.Header, gotBody, want.Method, want.RequestURI, want.Host, want.Header, wantBody)
		}

		wantResp, werr := http.ReadResponse(bufio.NewReader(strings.NewReader(respIn)), oldReq)
		if !done {
			if ferr == nil {
				// Left for net/http: the serve loop reads it from tbr.
				if _, err := http.ReadResponse(tbr, oldReq); (err == nil) != (werr == nil) {
					t.Fatalf("for %q, what forwardLean left in tbr reads as %v, net/http's way as %v", respIn, err, werr)
				}
			}
			return
		}
		if werr != nil {
			t.Fatalf("forwardLean passed on %q, which net/http refuses: %v", respIn, werr)
		}
		wantRespBody, werr := io.ReadAll(wantResp.Body)
		gotResp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(client.Bytes())), oldReq)
		if ferr != nil || werr != nil {
			if (ferr == nil) != (werr == nil) {
				t.Fatalf("for %q forwardLean said %v, net/http's read of the body %v", respIn, ferr, werr)
			}
			return
		}
		if err != nil {
			t.Fatalf("the client cannot read what forwardLean passed on of %q: %v", respIn, err)
		}
		gotRespBody, _ := io.ReadAll(gotResp.Body)
		if gotResp.StatusCode != wantResp.StatusCode || !bytes.Equal(gotRespBody, wantRespBody) || !sameHeader(gotResp.Header, wantResp.Header) {
			t.Fatalf("for %q the client read %d %v %q, net/http's way %d %v %q", respIn, gotResp.StatusCode, gotResp.Header, gotRespBody, wantResp.StatusCode, wantResp.Header, wantRespBody)
		}
	})
}

func sameHeader(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if strings.Join(v, "\x00") != strings.Join(b[k], "\x00") {
			return false
		}
	}
	return true
}
