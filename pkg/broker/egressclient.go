package broker

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/url"
)

// Egress opens a connection to dest ("host:port") through the broker's
// egress route: the broker checks the destination against the
// conversation's net grants, dials it on the host, and from then on the
// returned connection carries bytes to and from it unread. A refusal is
// an *APIError whose Message is the broker's one line (it names the grant
// command).
func (c *Client) Egress(ctx context.Context, dest string) (net.Conn, error) {
	conn, br, err := c.upgrade(ctx, "/v1/egress/"+url.PathEscape(dest), EgressUpgrade)
	if err != nil {
		return nil, err
	}
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

// CloseWrite half-closes the connection to the broker, which passes it
// on to the destination.
func (b *bufferedConn) CloseWrite() error {
	if cw, ok := b.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return b.Conn.Close()
}
