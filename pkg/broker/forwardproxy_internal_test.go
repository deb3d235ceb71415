package broker

import (
	"bufio"
	"bytes"
	"errors"
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
