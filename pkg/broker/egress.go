package broker

import (
	"bufio"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ohd-dev/ohd/pkg/egress"
)

// Egress (GET /v1/egress/{dest}, Upgrade: ohd-egress) is a conversation's
// way out: when the destination is granted (a net grant, or the server's
// EgressAllow) and the address it resolves to passes egress.Policy, the
// broker dials that address, answers 101 Switching Protocols, and from
// then on copies bytes both ways unread until either side closes. The
// connection is audited when it ends: destination as asked, address
// dialled, bytes each way and duration. A refusal answers 403 not_granted
// with one line that names the command granting the destination.
const (
	// EgressUpgrade is the Upgrade token of the egress route.
	EgressUpgrade = "ohd-egress"
	// DefaultEgressConns is Limits.EgressConns's default.
	DefaultEgressConns = 64
	// DefaultEgressRate and DefaultEgressBurst are Limits.EgressRate's
	// and Limits.EgressBurst's defaults: new egress connections per
	// second, and how many may come at once.
	DefaultEgressRate  = 20
	DefaultEgressBurst = 64

	egressDialTimeout = 10 * time.Second
)

var (
	refEgressUpgrade = &refusal{http.StatusBadRequest, CodeBadRequest, "the egress route needs Connection: Upgrade and Upgrade: " + EgressUpgrade, "upgrade", 0}
	refEgressRate    = &refusal{http.StatusTooManyRequests, CodeRateLimited, "egress connection rate over the limit for this conversation", "egress_rate", 1}
	refEgressHijack  = &refusal{http.StatusInternalServerError, CodeInternal, "the broker cannot take over this connection", "hijack", 0}
)

// egressState is one conversation's egress: its connection bucket and
// the connections open (closed by Broker.Close and Shutdown, as the HTTP
// server no longer tracks a taken-over connection).
type egressState struct {
	rate, burst float64
	mu          sync.Mutex
	tokens      float64
	last        time.Time
	open        map[*egressConn]struct{}
	closed      bool
}

// egressConn is an open egress connection: the client's side and the
// destination's (nil for a forward-proxy connection, whose destinations
// come and go; closing its client ends them).
type egressConn struct{ client, upstream net.Conn }

func (e *egressState) init(l Limits) {
	e.rate, e.burst, e.tokens = l.EgressRate, float64(l.EgressBurst), float64(l.EgressBurst)
}

// allow takes a token of the connection bucket at now.
func (e *egressState) allow(now time.Time) bool {
	if e.rate < 0 {
		return true
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.last.IsZero() {
		if d := now.Sub(e.last); d > 0 {
			e.tokens = math.Min(e.burst, e.tokens+d.Seconds()*e.rate)
		}
	}
	e.last = now
	if e.tokens >= 1 {
		e.tokens--
		return true
	}
	return false
}

func (e *egressState) add(ec *egressConn) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	if e.open == nil {
		e.open = map[*egressConn]struct{}{}
	}
	e.open[ec] = struct{}{}
	return true
}

func (e *egressState) remove(ec *egressConn) {
	e.mu.Lock()
	delete(e.open, ec)
	e.mu.Unlock()
}

// closeAll cuts every open egress connection and refuses new ones.
func (e *egressState) closeAll() {
	e.mu.Lock()
	e.closed = true
	conns := e.open
	e.open = nil
	e.mu.Unlock()
	for ec := range conns {
		_ = ec.client.Close()
		if ec.upstream != nil {
			_ = ec.upstream.Close()
		}
	}
}

// netGrants returns the conversation's net grants and the server's.
func (c *conversation) netGrants(conv *Conversation) []egress.Dest {
	out := make([]egress.Dest, 0, len(conv.Grants.Net)+len(c.b.egressAllow))
	for _, s := range conv.Grants.Net {
		if d, err := egress.ParseDest(s); err == nil {
			out = append(out, d)
		}
	}
	return append(out, c.b.egressAllow...)
}

func (c *conversation) egress(w http.ResponseWriter, r *http.Request, rec *AuditRecord, conv *Conversation, dest string) {
	if !headerHasToken(r.Header, "Connection", "upgrade") || !strings.EqualFold(r.Header.Get("Upgrade"), EgressUpgrade) {
		c.refuse(w, rec, refEgressUpgrade)
		return
	}
	up, ref := c.dialEgress(r.Context(), rec, conv, dest)
	if ref != nil {
		c.refuse(w, rec, ref)
		return
	}
	rc := http.NewResponseController(w)
	conn, brw, err := rc.Hijack()
	if err != nil {
		_ = up.Close()
		c.refuse(w, rec, refEgressHijack)
		return
	}
	ec := &egressConn{client: conn, upstream: up}
	if !c.net.add(ec) {
		_ = conn.Close()
		_ = up.Close()
		rec.Status, rec.Code, rec.Reason = http.StatusServiceUnavailable, CodeInternal, "closing"
		c.b.opts.Backend.Audit(*rec)
		return
	}
	defer c.net.remove(ec)
	_ = conn.SetDeadline(time.Time{})
	rec.Allowed, rec.Status = true, http.StatusSwitchingProtocols
	if _, err := brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + EgressUpgrade + "\r\n\r\n"); err == nil {
		err = brw.Flush()
		if err == nil {
			rec.BytesOut, rec.BytesIn = splice(conn, brw.Reader, up)
		}
	}
	_ = conn.Close()
	_ = up.Close()
	rec.Duration = c.b.now().Sub(rec.Time)
	c.b.opts.Backend.Audit(*rec)
}

// dialEgress takes a token of the conversation's connection bucket,
// checks dest ("host:port") against conv's net grants and the policy, and
// dials the address it checked, which it records in rec.Addr. A refusal
// is for the caller to audit and answer.
func (c *conversation) dialEgress(ctx context.Context, rec *AuditRecord, conv *Conversation, dest string) (net.Conn, *refusal) {
	if !c.net.allow(rec.Time) {
		return nil, refEgressRate
	}
	t, err := egress.ParseTarget(dest)
	if err != nil {
		return nil, badRequest(err.Error() + "; the egress route is /v1/egress/HOST:PORT")
	}
	ctx, cancel := context.WithTimeout(ctx, egressDialTimeout)
	defer cancel()
	addr, err := c.b.policy.Check(ctx, c.netGrants(conv), t)
	if err != nil {
		var ref *egress.Refusal
		if !errors.As(err, &ref) {
			ref = &egress.Refusal{Reason: "policy", Msg: err.Error()}
		}
		return nil, &refusal{http.StatusForbidden, CodeNotGranted, ref.Msg, ref.Reason, 0}
	}
	rec.Addr = addr.String()
	var d net.Dialer
	up, err := d.DialContext(ctx, "tcp", addr.String())
	if err != nil {
		return nil, &refusal{http.StatusBadGateway, CodeBadGateway, "egress to " + t.String() + ": connecting to " + addr.String() + " failed", "dial_failed", 0}
	}
	return up, nil
}

// splice copies client (read through br, which may hold bytes already
// read) to up and up to client until both directions end, passing on a
// half-close. It returns the bytes sent to up and received from it.
func splice(client net.Conn, br *bufio.Reader, up net.Conn) (out, in int64) {
	var wg sync.WaitGroup
	var nOut atomic.Int64
	wg.Go(func() {
		// Nothing buffered (the client waits for the 101): copy from the
		// connection itself, which lets the kernel splice.
		var from io.Reader = client
		if br.Buffered() > 0 {
			from = io.MultiReader(io.LimitReader(br, int64(br.Buffered())), client)
		}
		n, err := io.Copy(up, from)
		nOut.Store(n)
		if err != nil {
			_ = up.Close() // the client is gone: nobody reads the answer
			return
		}
		closeWrite(up)
	})
	in, _ = io.Copy(client, up)
	closeWrite(client)
	wg.Wait()
	return nOut.Load(), in
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

// headerHasToken reports whether header name holds token (a
// comma-separated list, compared without regard to case).
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h[name] {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}
