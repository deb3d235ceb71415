package broker_test

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/pkg/broker"
)

// rawHandOff asks ep's broker for the hand-over and, on 101, sends hdr
// with fds attached, then body; it returns the broker's status code and
// what it sent after (nothing but the close, when it refuses).
func rawHandOff(t *testing.T, e *env, ep broker.Endpoint, id string, fds []int, hdr, body []byte) int {
	t.Helper()
	conn, err := net.Dial("unix", ep.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	uc := conn.(*net.UnixConn)
	_ = uc.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(uc, "GET /v1/egress-proxy HTTP/1.1\r\nHost: b\r\nAuthorization: Bearer %s\r\nX-OHD-Request: 1\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n",
		e.token(id, 1), broker.EgressProxyUpgrade)
	br := bufio.NewReader(uc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return resp.StatusCode
	}
	var oob []byte
	if len(fds) > 0 {
		oob = syscall.UnixRights(fds...)
	}
	if _, _, err := uc.WriteMsgUnix(hdr, oob, nil); err != nil {
		t.Fatal(err)
	}
	_, _ = uc.Write(body)
	// The broker closes its end once it has read the message.
	_, _ = io.Copy(io.Discard, br)
	return resp.StatusCode
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}

func lenHeader(n int) []byte {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(n))
	return b[:]
}

// A hand-over of anything but exactly one TCP socket, or with more bytes
// than a request head, is refused, audited, and leaves no descriptor
// behind in the broker.
func TestHandOffRefusesWhatIsNotOneTCPConnection(t *testing.T) {
	e := newEnv(t)
	ep := e.open(egressConv("ho1"))
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	pair, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(pair[0])
	defer syscall.Close(pair[1])
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tcp, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	tf, err := tcp.(*net.TCPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	defer tf.Close()
	tfd := int(tf.Fd())
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	uf, err := udp.(*net.UDPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	defer uf.Close()

	for _, tc := range []struct {
		name string
		fds  []int
		hdr  []byte
		body []byte
	}{
		{"no descriptor", nil, lenHeader(0), nil},
		{"a pipe", []int{int(pr.Fd())}, lenHeader(0), nil},
		{"a Unix socket", []int{pair[0]}, lenHeader(0), nil},
		{"a UDP socket", []int{int(uf.Fd())}, lenHeader(0), nil},
		{"two TCP sockets", []int{tfd, tfd}, lenHeader(0), nil},
		{"more than a head's bytes", []int{tfd}, lenHeader(64<<10 + 1), make([]byte, 64<<10+1)},
		{"fewer bytes than announced", []int{tfd}, lenHeader(10), []byte("GET")},
	} {
		before := openFDs(t)
		n := e.auditCount()
		if code := rawHandOff(t, e, ep, "ho1", tc.fds, tc.hdr, tc.body); code != http.StatusSwitchingProtocols {
			t.Fatalf("%s: hand-over answered %d, want 101 then a refusal", tc.name, code)
		}
		r := e.audit(n + 1)
		if r.Allowed || r.Reason != "handoff" || r.Route != "GET /v1/egress-proxy" {
			t.Errorf("%s: audited %+v, want refused for handoff", tc.name, r)
		}
		// The broker runs in this process: what it received it closed.
		deadline := time.Now().Add(5 * time.Second)
		for openFDs(t) > before && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if after := openFDs(t); after > before {
			t.Errorf("%s: %d descriptors open after the refused hand-over, %d before", tc.name, after, before)
		}
	}
	// The TCP connection passed in the refused hand-overs was never
	// written to.
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	_ = peer.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if b, _ := io.ReadAll(peer); len(b) > 0 {
		t.Errorf("a refused hand-over wrote %q to the connection", b)
	}
}

// A handed-over connection is checked again for every new destination:
// a revoked grant and a rotated token both stop it at the next one.
func TestHandOffChecksEachDestinationAnew(t *testing.T) {
	e := newEnv(t)
	srv := func(body string) string {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, body) }))
		t.Cleanup(s.Close)
		return s.Listener.Addr().String()
	}
	a, b, c := srv("a"), srv("b"), srv("c")
	addr := proxyEnv(t, e, "ho2", a, b, c)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	get := func(dest string) (int, string) {
		t.Helper()
		fmt.Fprintf(conn, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", dest, dest)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("GET %s: %v", dest, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, strings.TrimSpace(string(body))
	}
	if code, body := get(a); code != 200 || body != "a" {
		t.Fatalf("GET a = %d %q", code, body)
	}
	e.be.SetConversation(egressConv("ho2", a, c)) // b revoked
	if code, body := get(b); code != http.StatusForbidden || !strings.Contains(body, "ohctl grant") {
		t.Errorf("GET of a revoked destination on the same connection = %d %q, want 403 naming the grant command", code, body)
	}
	conn2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	conn, br = conn2, bufio.NewReader(conn2)
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if code, body := get(a); code != 200 || body != "a" {
		t.Fatalf("GET a = %d %q", code, body)
	}
	rotated := egressConv("ho2", a, c)
	rotated.Epoch = 2
	e.be.SetConversation(rotated)
	if code, body := get(c); code != http.StatusUnauthorized {
		t.Errorf("GET of a new destination after the token was rotated = %d %q, want 401", code, body)
	}
	var stale, revoked bool
	for _, r := range e.be.AuditRecords() {
		stale = stale || r.Name == c && r.Reason == "stale_epoch"
		revoked = revoked || r.Name == b && r.Reason == "not_granted"
	}
	if !stale || !revoked {
		t.Errorf("audit: stale epoch recorded %v, revoked grant recorded %v; want both", stale, revoked)
	}
}
