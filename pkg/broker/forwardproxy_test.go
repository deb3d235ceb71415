package broker_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/pkg/broker"
)

// proxyEnv is a broker with conversation id granted net, and the relay
// with its forward proxy on a loopback port; it returns the proxy's
// address.
func proxyEnv(t *testing.T, e *env, id string, net_ ...string) string {
	t.Helper()
	ep := e.open(egressConv(id, net_...))
	c := e.client(ep)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: broker.NewRelay(c), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = broker.ServeWithForwardProxy(srv, ln, c) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return ln.Addr().String()
}

// rawExchange sends raw on a new connection to addr and returns the first
// answer's status line and the rest read within a second.
func rawExchange(t *testing.T, addr, raw string) (string, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	br := bufio.NewReader(c)
	status, _ := br.ReadString('\n')
	rest, _ := io.ReadAll(br)
	return strings.TrimSpace(status), string(rest)
}

func TestForwardProxyConnect(t *testing.T) {
	e := newEnv(t)
	echo := echoServer(t)
	addr := proxyEnv(t, e, "fp1", echo)
	status, rest := rawExchange(t, addr, "CONNECT "+echo+" HTTP/1.1\r\nHost: "+echo+"\r\n\r\n")
	if status != "HTTP/1.1 200 Connection established" {
		t.Fatalf("CONNECT granted = %q %q", status, rest)
	}
	status, rest = rawExchange(t, addr, "CONNECT 127.0.0.2:1 HTTP/1.1\r\n\r\n")
	if !strings.Contains(status, "403") || !strings.Contains(rest, "ohctl grant ID net 127.0.0.2:1") {
		t.Errorf("CONNECT ungranted = %q %q, want 403 naming the grant", status, rest)
	}
}

func TestForwardProxyTLSAndAbsoluteForm(t *testing.T) {
	e := newEnv(t)
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "tls ok") }))
	defer tlsSrv.Close()
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "plain %s %s %s", r.Method, r.URL.Path, b)
	}))
	defer plain.Close()
	tlsAddr, plainAddr := tlsSrv.Listener.Addr().String(), plain.Listener.Addr().String()
	addr := proxyEnv(t, e, "fp2", tlsAddr, plainAddr)
	pu, _ := url.Parse("http://" + addr)
	tr := tlsSrv.Client().Transport.(*http.Transport).Clone()
	tr.Proxy = http.ProxyURL(pu)
	hc := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()
	for _, tc := range []struct{ method, url, body, want string }{
		{"GET", tlsSrv.URL + "/x", "", "tls ok"},
		{"GET", plain.URL + "/a", "", "plain GET /a "},
		{"POST", plain.URL + "/b", "data", "plain POST /b data"},
		{"GET", plain.URL + "/c", "", "plain GET /c "}, // kept alive
	} {
		req, _ := http.NewRequest(tc.method, tc.url, strings.NewReader(tc.body))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s through the proxy: %v", tc.method, tc.url, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != tc.want {
			t.Errorf("%s %s = %q, want %q", tc.method, tc.url, b, tc.want)
		}
	}
}

func TestForwardProxyRefusesSmuggling(t *testing.T) {
	e := newEnv(t)
	echo := echoServer(t)
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, "ok")
	}))
	defer plain.Close()
	pa := plain.Listener.Addr().String()
	addr := proxyEnv(t, e, "fp3", echo, pa)
	for _, tc := range []struct{ name, raw, want string }{
		{"host differs from CONNECT target", "CONNECT " + echo + " HTTP/1.1\r\nHost: 127.0.0.3:1\r\n\r\n", "400"},
		{"host differs from absolute URL", "GET http://" + pa + "/ HTTP/1.1\r\nHost: 127.0.0.3:1\r\n\r\n", "400"},
		{"pipelined after CONNECT", "CONNECT " + echo + " HTTP/1.1\r\n\r\nCONNECT 127.0.0.3:1 HTTP/1.1\r\n\r\n", "400"},
		{"CONNECT with a body", "CONNECT " + echo + " HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", "400"},
		{"length and chunked", "POST http://" + pa + "/ HTTP/1.1\r\nHost: " + pa + "\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "400"},
		{"two lengths", "POST http://" + pa + "/ HTTP/1.1\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcd", "400"},
		{"bare LF", "GET http://" + pa + "/ HTTP/1.1\nHost: " + pa + "\r\n\r\n", "400"},
		{"https absolute form", "GET https://" + pa + "/ HTTP/1.1\r\n\r\n", "400"},
		{"CONNECT after a forwarded request", "GET http://" + pa + "/ HTTP/1.1\r\nHost: " + pa + "\r\n\r\nCONNECT 127.0.0.3:1 HTTP/1.1\r\n\r\n", "400"},
	} {
		status, rest := rawExchange(t, addr, tc.raw)
		// The refusal may follow a first answer (the last case).
		if !strings.Contains(status+rest, " "+tc.want+" ") {
			t.Errorf("%s: answer %q %q, want %s", tc.name, status, rest, tc.want)
		}
	}
	// A CONNECT inside a chunked body is data for the granted host, never
	// a request of the proxy's.
	smuggled := "CONNECT 127.0.0.3:1 HTTP/1.1\r\n\r\n"
	raw := "POST http://" + pa + "/ HTTP/1.1\r\nHost: " + pa + "\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" +
		fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(smuggled), smuggled)
	if status, rest := rawExchange(t, addr, raw); !strings.Contains(status, "200") || strings.Contains(rest, "Connection established") {
		t.Errorf("chunked body with a CONNECT: %q %q", status, rest)
	}
	// The broker reads every head itself: a smuggled target may be
	// audited as a refused request, never checked or dialled.
	for _, r := range e.be.AuditRecords() {
		if strings.Contains(r.Name, "127.0.0.3") && (r.Allowed || r.Addr != "" || r.Reason != "bad_request") {
			t.Errorf("the smuggled target got past the proxy's reading of the head: %+v", r)
		}
	}
}

func TestForwardProxyLeavesRelay(t *testing.T) {
	e := newEnv(t)
	addr := proxyEnv(t, e, "fp4")
	req, _ := http.NewRequest("GET", "http://"+addr+"/nothing", nil)
	req.Host = broker.RelayAddr
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("origin-form request to the relay = %d, want the relay's 404", resp.StatusCode)
	}
}

// TestForwardProxyLargeBodies: bodies large enough to be spliced (and a
// small one, a HEAD and a chunked one between them) arrive whole and in
// order on one kept-alive connection, absolute-form and through CONNECT.
func TestForwardProxyLargeBodies(t *testing.T) {
	e := newEnv(t)
	big := make([]byte, 3<<20+12345)
	for i := range big {
		big[i] = byte(i * 7 / 3)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Header().Set("Content-Length", fmt.Sprint(len(big)))
			_, _ = w.Write(big)
		case "/chunked":
			_, _ = w.Write(big[:100])
			w.(http.Flusher).Flush()
			_, _ = w.Write(big[100 : 200<<10])
		default:
			fmt.Fprint(w, "small")
		}
	})
	plain := httptest.NewUnstartedServer(h)
	var conns atomic.Int32
	plain.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	plain.Start()
	defer plain.Close()
	tlsSrv := httptest.NewTLSServer(h)
	defer tlsSrv.Close()
	addr := proxyEnv(t, e, "fp-big", plain.Listener.Addr().String(), tlsSrv.Listener.Addr().String())
	pu, _ := url.Parse("http://" + addr)
	tr := tlsSrv.Client().Transport.(*http.Transport).Clone()
	tr.Proxy = http.ProxyURL(pu)
	hc := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()
	for _, base := range []string{plain.URL, tlsSrv.URL} {
		for _, tc := range []struct {
			method, path string
			want         []byte
		}{
			{"GET", "/big", big}, {"GET", "/small", []byte("small")}, {"HEAD", "/big", nil},
			{"GET", "/chunked", big[:200<<10]}, {"GET", "/big", big}, {"GET", "/small", []byte("small")},
		} {
			req, _ := http.NewRequest(tc.method, base+tc.path, nil)
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatalf("%s %s through the proxy: %v", tc.method, base+tc.path, err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 || !bytes.Equal(b, tc.want) {
				t.Fatalf("%s %s = %d, %d bytes (%v), want %d bytes", tc.method, base+tc.path, resp.StatusCode, len(b), err, len(tc.want))
			}
			if tc.method == "HEAD" && resp.ContentLength != int64(len(big)) {
				t.Errorf("HEAD %s Content-Length = %d", base+tc.path, resp.ContentLength)
			}
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("the origin saw %d connections for the absolute-form requests, want 1 (kept alive)", n)
	}
}
