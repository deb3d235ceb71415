package peercred

import (
	"context"
	"errors"
	"fmt"
	"net"
)

// Cred is the identity of a socket peer as the kernel recorded it when the
// connection was made.
type Cred struct {
	PID, UID, GID int
}

// ErrUnsupported is returned by [Get] for a connection that is not a
// Unix-domain socket, or on an operating system without peer credentials.
var ErrUnsupported = errors.New("peer credentials unsupported")

// Get returns the credentials of c's peer. c must be a *net.UnixConn.
func Get(c net.Conn) (Cred, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return Cred{}, fmt.Errorf("peercred get %T: %w", c, ErrUnsupported)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return Cred{}, fmt.Errorf("peercred get: %w", err)
	}
	var cred Cred
	var serr error
	if err := raw.Control(func(fd uintptr) { cred, serr = getFD(int(fd)) }); err != nil {
		return Cred{}, fmt.Errorf("peercred get: %w", err)
	}
	if serr != nil {
		return Cred{}, fmt.Errorf("peercred get: %w", serr)
	}
	return cred, nil
}

type ctxKey struct{}

// WithContext returns a copy of ctx carrying cred.
func WithContext(ctx context.Context, cred Cred) context.Context {
	return context.WithValue(ctx, ctxKey{}, cred)
}

// FromContext returns the credentials [WithContext] or [ConnContext] put on
// ctx, and whether there were any.
func FromContext(ctx context.Context) (Cred, bool) {
	cred, ok := ctx.Value(ctxKey{}).(Cred)
	return cred, ok
}

// ConnContext is an [net/http.Server] ConnContext hook: it reads the peer's
// credentials once per connection and puts them on the context of every
// request served on it. When they cannot be read (not a Unix socket) the
// context carries none, and [FromContext] reports false: handlers must then
// refuse the request.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	cred, err := Get(c)
	if err != nil {
		return ctx
	}
	return WithContext(ctx, cred)
}
