package broker

import (
	"bufio"
	"net"
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
