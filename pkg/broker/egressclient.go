package broker

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"
)

// Egress opens a connection to dest ("host:port") through the broker's
// egress route: the broker checks the destination against the
// conversation's net grants, dials it on the host, and from then on the
// returned connection carries bytes to and from it unread. A refusal is
// an *APIError whose Message is the broker's one line (it names the grant
// command).
func (c *Client) Egress(ctx context.Context, dest string) (net.Conn, error) {
	tok, err := c.token()
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.socket)
	if err != nil {
		return nil, fmt.Errorf("broker %s: %w", c.socket, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	} else {
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	req := "GET /v1/egress/" + url.PathEscape(dest) + " HTTP/1.1\r\nHost: " + clientHost +
		"\r\nAuthorization: Bearer " + tok + "\r\nX-OHD-Request: 1\r\nConnection: Upgrade\r\nUpgrade: " + EgressUpgrade + "\r\n\r\n"
	br := bufio.NewReader(conn)
	var resp *http.Response
	if _, err = io.WriteString(conn, req); err == nil {
		resp, err = http.ReadResponse(br, nil)
	}
	if !stop() || err != nil {
		_ = conn.Close()
		if err == nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("broker %s: egress %s: %w", c.socket, dest, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer conn.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return nil, decodeError(resp.StatusCode, data)
	}
	_ = conn.SetDeadline(time.Time{})
	return &bufferedConn{Conn: conn, r: br}, nil
}

// bufferedConn is a connection whose first bytes may already sit in r.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// WriteTo copies the buffered bytes, then the connection itself, to w:
// io.Copy from a bufferedConn to a *net.TCPConn lets the kernel splice.
func (b *bufferedConn) WriteTo(w io.Writer) (int64, error) {
	var n int64
	if k := b.r.Buffered(); k > 0 {
		m, err := io.CopyN(w, b.r, int64(k))
		if n += m; err != nil {
			return n, err
		}
	}
	m, err := io.Copy(w, b.Conn)
	return n + m, err
}

// raw is the connection beneath b when b holds no buffered byte.
func (b *bufferedConn) raw() (net.Conn, bool) {
	return b.Conn, b.r.Buffered() == 0
}

// CloseWrite half-closes the connection to the broker, which passes it
// on to the destination.
func (b *bufferedConn) CloseWrite() error {
	if cw, ok := b.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return b.Conn.Close()
}
