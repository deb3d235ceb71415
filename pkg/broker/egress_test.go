package broker_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/pkg/broker"
)

// echoServer listens on host loopback and echoes each connection; it
// returns its address.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

func egressConv(id string, net ...string) broker.Conversation {
	return broker.Conversation{ID: id, UID: os.Geteuid(), GID: os.Getegid(), Epoch: 1, Grants: broker.Grants{Net: net}}
}

func TestEgressGrantedExactAddress(t *testing.T) {
	e := newEnv(t)
	echo := echoServer(t)
	ep := e.open(egressConv("eg1", echo))
	c := e.client(ep)
	conn, err := c.Egress(context.Background(), echo)
	if err != nil {
		t.Fatalf("Egress(%s) = %v", echo, err)
	}
	if _, err := io.WriteString(conn, "hello"); err != nil {
		t.Fatal(err)
	}
	conn.(interface{ CloseWrite() error }).CloseWrite()
	got, err := io.ReadAll(conn)
	if err != nil || string(got) != "hello" {
		t.Fatalf("echo through egress = %q, %v; want hello", got, err)
	}
	conn.Close()
	rec := e.audit(1)
	if !rec.Allowed || rec.Kind != broker.KindNet || rec.Name != echo || rec.Addr != echo || rec.BytesOut != 5 || rec.BytesIn != 5 || rec.Duration <= 0 {
		t.Errorf("audit = %+v; want allowed net %s, 5 bytes each way, a duration", rec, echo)
	}
}

func TestEgressRefusals(t *testing.T) {
	echo := echoServer(t)
	_, port, _ := net.SplitHostPort(echo)
	e := newEnv(t, func(o *broker.Options) { o.EgressAllow = []string{"localhost:" + port} })
	ep := e.open(egressConv("eg2", "*.example.invalid"))
	c := e.client(ep)
	for _, tc := range []struct{ dest, reason, inMsg string }{
		{"localhost:" + port, "loopback", "ohctl grant ID net " + echo},
		{echo, "not_granted", "ohctl grant ID net " + echo},
		{"169.254.169.254:80", "not_granted", "ohctl grant ID net 169.254.169.254:80"},
		{"a.example.invalid:443", "resolve_failed", "cannot resolve"},
		{"example.com", "bad_request", "host:port"},
	} {
		n := e.auditCount()
		_, err := c.Egress(context.Background(), tc.dest)
		var ae *broker.APIError
		if !errors.As(err, &ae) {
			t.Errorf("Egress(%s) = %v, want a refusal", tc.dest, err)
			continue
		}
		if !strings.Contains(ae.Message, tc.inMsg) || strings.Contains(ae.Message, "\n") {
			t.Errorf("Egress(%s) refusal %q: want one line with %q", tc.dest, ae.Message, tc.inMsg)
		}
		if rec := e.audit(n + 1); rec.Allowed || rec.Reason != tc.reason || rec.Name != tc.dest {
			t.Errorf("Egress(%s) audit = %+v, want refused for %s", tc.dest, rec, tc.reason)
		}
		e.watch(ae.Message)
	}
}

func TestEgressRevokeAtNextConnection(t *testing.T) {
	e := newEnv(t)
	echo := echoServer(t)
	ep := e.open(egressConv("eg3", echo))
	c := e.client(ep)
	conn, err := c.Egress(context.Background(), echo)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	e.be.SetConversation(egressConv("eg3"))
	if _, err := c.Egress(context.Background(), echo); !errors.Is(err, broker.ErrNotGranted) {
		t.Errorf("Egress after revoke = %v, want not granted", err)
	}
}

func TestEgressCaps(t *testing.T) {
	e := newEnv(t, func(o *broker.Options) {
		o.Limits.EgressConns = 2
		o.Limits.EgressRate = 0.001
		o.Limits.EgressBurst = 3
	})
	echo := echoServer(t)
	ep := e.open(egressConv("eg4", echo))
	other := e.client(e.open(egressConv("eg5", echo)))
	c := e.client(ep)
	var open []net.Conn
	for range 2 {
		conn, err := c.Egress(context.Background(), echo)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, conn)
	}
	if _, err := c.Egress(context.Background(), echo); !errors.Is(err, broker.ErrRateLimited) {
		t.Errorf("third open egress connection = %v, want rate limited (cap 2)", err)
	}
	for _, conn := range open {
		conn.Close()
	}
	time.Sleep(100 * time.Millisecond)
	// The bucket (burst 3) is spent by the three tries above but one.
	if conn, err := c.Egress(context.Background(), echo); err != nil {
		t.Errorf("egress after closing = %v", err)
	} else {
		conn.Close()
	}
	if _, err := c.Egress(context.Background(), echo); !errors.Is(err, broker.ErrRateLimited) {
		t.Errorf("egress over the rate = %v, want rate limited", err)
	}
	// Another conversation has its own budget.
	conn, err := other.Egress(context.Background(), echo)
	if err != nil {
		t.Fatalf("other conversation's egress = %v", err)
	}
	conn.Close()
}

func TestEgressNeedsUpgrade(t *testing.T) {
	e := newEnv(t)
	ep := e.open(egressConv("eg6", "example.com"))
	resp, _ := e.request(ep.Socket, http.MethodGet, "/v1/egress/example.com:443", authed(e.token("eg6", 1)), nil)
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("egress without Upgrade = %d, want 400", resp.StatusCode)
	}
}

func TestEgressCutOnClose(t *testing.T) {
	e := newEnv(t)
	echo := echoServer(t)
	ep := e.open(egressConv("eg7", echo))
	conn, err := e.client(ep).Egress(context.Background(), echo)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := e.b.Close("eg7"); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil || errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "timeout") {
		t.Errorf("read after Close = %v, want the connection cut", err)
	}
}

func TestEgressFailsClosedWithoutAudit(t *testing.T) {
	e := newEnv(t)
	echo := echoServer(t)
	ep := e.open(egressConv("eg8", echo))
	e.be.SetAuditErr(errors.New("disk full"))
	_, err := e.client(ep).Egress(context.Background(), echo)
	var ae *broker.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable {
		t.Errorf("Egress while audit is unavailable = %v, want 503", err)
	}
	e.be.SetAuditErr(nil)
}
