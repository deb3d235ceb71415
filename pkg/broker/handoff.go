package broker

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"
)

// The forward proxy's hand-over (GET /v1/egress-proxy, Upgrade:
// ohd-egress-proxy). The relay in the container does not carry a proxy
// client's bytes itself: once it has seen that a connection's first
// request is a proxy request, it asks the broker for the hand-over and,
// on 101, passes the connection's file descriptor over the broker's Unix
// socket (SCM_RIGHTS) with the bytes it already read. The broker then
// serves the forward proxy on that connection (forwardproxy.go): it reads
// every request head itself, and each destination is checked, dialled and
// audited as an egress connection. Between the agent and a destination
// there is then one process, the broker, as with any forward proxy; the
// relay is out of the path.
//
// The message after the 101 is four bytes, the length of the bytes
// already read (at most maxProxyHead) in big-endian order, carrying the
// descriptor, then those bytes. The broker takes exactly one descriptor,
// and only a TCP socket: anything else is refused and closed. Nothing the
// container passes can reach the host beyond what it already reaches, as
// a descriptor only names what the sender holds.
const (
	// EgressProxyUpgrade is the Upgrade token of the hand-over.
	EgressProxyUpgrade = "ohd-egress-proxy"

	handoffTimeout = 10 * time.Second
)

var refEgressProxyUpgrade = &refusal{http.StatusBadRequest, CodeBadRequest, "the egress-proxy route needs Connection: Upgrade and Upgrade: " + EgressProxyUpgrade, "upgrade", 0}

// HandOff passes conn, a connection whose first request is a proxy
// request, to the broker, which serves the forward proxy on it from then
// on; held are the bytes already read from conn. conn must be a TCP
// connection. The caller still closes its conn: the broker holds its own
// copy. A refusal is an *APIError.
func (c *Client) HandOff(ctx context.Context, conn net.Conn, held []byte) error {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return fmt.Errorf("broker %s: hand-over of a %T: not a socket", c.socket, conn)
	}
	if len(held) > maxProxyHead {
		return fmt.Errorf("broker %s: hand-over with %d bytes read: over %d", c.socket, len(held), maxProxyHead)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return fmt.Errorf("broker %s: hand-over: %w", c.socket, err)
	}
	bc, _, err := c.upgrade(ctx, "/v1/egress-proxy", EgressProxyUpgrade)
	if err != nil {
		return err
	}
	defer bc.Close()
	uc, ok := bc.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("broker %s: hand-over needs a Unix socket", c.socket)
	}
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(held)))
	var werr error
	if err := raw.Control(func(fd uintptr) {
		_, _, werr = uc.WriteMsgUnix(hdr[:], syscall.UnixRights(int(fd)), nil)
	}); err != nil {
		return fmt.Errorf("broker %s: hand-over: %w", c.socket, err)
	}
	if werr == nil && len(held) > 0 {
		_, werr = uc.Write(held)
	}
	if werr != nil {
		return fmt.Errorf("broker %s: hand-over: %w", c.socket, werr)
	}
	return nil
}

// upgrade asks the broker for path with Upgrade: proto and returns the
// connection once the broker answered 101, with the reader that read the
// answer (it may hold bytes after it). A refusal is an *APIError.
func (c *Client) upgrade(ctx context.Context, path, proto string) (net.Conn, *bufio.Reader, error) {
	tok, err := c.token()
	if err != nil {
		return nil, nil, err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.socket)
	if err != nil {
		return nil, nil, fmt.Errorf("broker %s: %w", c.socket, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	} else {
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	req := "GET " + path + " HTTP/1.1\r\nHost: " + clientHost +
		"\r\nAuthorization: Bearer " + tok + "\r\nX-OHD-Request: 1\r\nConnection: Upgrade\r\nUpgrade: " + proto + "\r\n\r\n"
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
		return nil, nil, fmt.Errorf("broker %s: %s: %w", c.socket, path, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer conn.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return nil, nil, decodeError(resp.StatusCode, data)
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, br, nil
}

// egressProxy is the hand-over's route: it answers 101, takes the
// connection the relay passes, and serves the forward proxy on it until
// either side closes. A refused hand-over is audited; one taken is
// audited as its destinations, one record each (refusals included).
func (c *conversation) egressProxy(w http.ResponseWriter, r *http.Request, rec *AuditRecord, conv *Conversation) {
	if !headerHasToken(r.Header, "Connection", "upgrade") || !strings.EqualFold(r.Header.Get("Upgrade"), EgressProxyUpgrade) {
		c.refuse(w, rec, refEgressProxyUpgrade)
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		c.refuse(w, rec, refEgressHijack)
		return
	}
	var client net.Conn
	var held []byte
	if brw.Reader.Buffered() > 0 {
		err = errors.New("bytes sent before the 101")
	} else if _, err = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + EgressProxyUpgrade + "\r\n\r\n"); err == nil {
		if err = brw.Flush(); err == nil {
			client, held, err = receiveHandOff(conn)
		}
	}
	_ = conn.Close()
	if err != nil {
		rec.Status, rec.Code, rec.Reason = http.StatusBadRequest, CodeBadRequest, "handoff"
		rec.Detail = err.Error()
		c.b.opts.Backend.Audit(*rec)
		return
	}
	defer client.Close()
	ec := &egressConn{client: client}
	if !c.net.add(ec) {
		rec.Status, rec.Code, rec.Reason = http.StatusServiceUnavailable, CodeInternal, "closing"
		c.b.opts.Backend.Audit(*rec)
		return
	}
	defer c.net.remove(ec)
	s := &proxySession{c: c, epoch: conv.Epoch, pid: rec.PeerPID, uid: rec.PeerUID}
	s.serve(client, held)
}

// receiveHandOff reads the hand-over message from conn: the one TCP
// connection it carries and the bytes the relay had read from it.
func receiveHandOff(conn net.Conn) (net.Conn, []byte, error) {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return nil, nil, errors.New("not a Unix socket")
	}
	_ = uc.SetReadDeadline(time.Now().Add(handoffTimeout))
	var hdr [4]byte
	oob := make([]byte, syscall.CmsgSpace(4))
	n, oobn, flags, _, err := uc.ReadMsgUnix(hdr[:], oob)
	fds, perr := parseRights(oob[:oobn])
	if err == nil {
		err = perr
	}
	if err == nil && (flags&syscall.MSG_CTRUNC != 0 || len(fds) != 1) {
		err = errors.New("the message must carry exactly one descriptor")
	}
	if err != nil {
		closeFDs(fds)
		return nil, nil, fmt.Errorf("hand-over: %w", err)
	}
	f := os.NewFile(uintptr(fds[0]), "egress-proxy-client")
	defer f.Close()
	if err := checkTCPSocket(fds[0]); err != nil {
		return nil, nil, fmt.Errorf("hand-over: %w", err)
	}
	// Bytes after the first carry no descriptor that is kept: a read
	// without room for one discards what comes with it.
	if _, err := io.ReadFull(uc, hdr[n:]); err != nil {
		return nil, nil, fmt.Errorf("hand-over: %w", err)
	}
	size := binary.BigEndian.Uint32(hdr[:])
	if size > maxProxyHead {
		return nil, nil, fmt.Errorf("hand-over: %d bytes already read: over %d", size, maxProxyHead)
	}
	held := make([]byte, size)
	if _, err := io.ReadFull(uc, held); err != nil {
		return nil, nil, fmt.Errorf("hand-over: %w", err)
	}
	client, err := net.FileConn(f)
	if err != nil {
		return nil, nil, fmt.Errorf("hand-over: %w", err)
	}
	return client, held, nil
}

func parseRights(oob []byte) ([]int, error) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, m := range msgs {
		if m.Header.Level != syscall.SOL_SOCKET || m.Header.Type != syscall.SCM_RIGHTS {
			continue
		}
		got, err := syscall.ParseUnixRights(&m)
		if err != nil {
			return fds, err
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		_ = syscall.Close(fd)
	}
}

// checkTCPSocket refuses a descriptor that is not a stream socket of an
// IP family: a proxy client is a TCP connection.
func checkTCPSocket(fd int) error {
	typ, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_TYPE)
	if err != nil {
		return fmt.Errorf("the descriptor is not a socket: %w", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		return fmt.Errorf("the descriptor is not a socket: %w", err)
	}
	switch sa.(type) {
	case *syscall.SockaddrInet4, *syscall.SockaddrInet6:
		if typ == syscall.SOCK_STREAM {
			return nil
		}
	}
	return errors.New("the descriptor is not a TCP connection")
}
