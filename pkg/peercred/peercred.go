// Package peercred reads the credentials of the process at the other end of
// a Unix-domain socket connection (SO_PEERCRED on Linux, LOCAL_PEERCRED and
// LOCAL_PEERPID on macOS) and carries them on request contexts.
//
// The kernel records the peer's credentials when the connection is made, so
// the uid and gid cannot be forged by the peer and do not change if the peer
// later changes its own credentials. The pid is the pid at connect time: it
// is a fact for audit, not a handle on a process. Code that wants to inspect
// the peer process by pid (read /proc/<pid>/...) must use [Watch] and check
// [Watcher.IsAlive] after the inspection, as spire's peertracker does, so a
// pid reused by another process is detected.
//
// Serve HTTP on a Unix socket with [ConnContext] as the server's
// ConnContext, and read the peer in handlers with [FromContext]:
//
//	srv := &http.Server{Handler: h, ConnContext: peercred.ConnContext}
//	...
//	cred, ok := peercred.FromContext(r.Context())
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

// ErrUnsupported is returned by [Get] and [Watch] for a connection that is
// not a Unix-domain socket, or on an operating system without peer
// credentials.
var ErrUnsupported = errors.New("peer credentials unsupported")

// ErrProcessGone is returned by [Watcher.IsAlive] when the process that made
// the connection has exited (its pid may now name another process).
var ErrProcessGone = errors.New("peer process gone")

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

// Watcher holds on to the process that made a connection, so that code
// which inspected that process by pid can verify afterwards that the pid
// still names the same process (the guard spire's peertracker uses against
// pid reuse). On Linux it holds a pidfd: from SO_PEERPIDFD where the kernel
// has it (6.5+), which names exactly the connecting process, else from
// pidfd_open(pid) checked against the process start time and uid. On macOS
// it compares the process start time.
type Watcher struct {
	cred Cred
	os   osWatcher
}

// Watch returns a [Watcher] for the peer of c. The caller must Close it.
func Watch(c net.Conn) (*Watcher, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, fmt.Errorf("peercred watch %T: %w", c, ErrUnsupported)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("peercred watch: %w", err)
	}
	var w *Watcher
	var werr error
	if err := raw.Control(func(fd uintptr) {
		var cred Cred
		cred, werr = getFD(int(fd))
		if werr != nil {
			return
		}
		var ow osWatcher
		ow, werr = newOSWatcher(int(fd), cred)
		if werr == nil {
			w = &Watcher{cred: cred, os: ow}
		}
	}); err != nil {
		return nil, fmt.Errorf("peercred watch: %w", err)
	}
	if werr != nil {
		return nil, fmt.Errorf("peercred watch: %w", werr)
	}
	return w, nil
}

// Cred returns the credentials recorded when the connection was made.
func (w *Watcher) Cred() Cred { return w.cred }

// IsAlive returns nil if the process that made the connection is still
// running under the same pid, and an error wrapping [ErrProcessGone] if it
// has exited. Call it after inspecting the process by pid.
func (w *Watcher) IsAlive() error {
	if err := w.os.isAlive(); err != nil {
		return fmt.Errorf("peercred pid %d: %w", w.cred.PID, err)
	}
	return nil
}

// Close releases what the Watcher holds (a pidfd on Linux).
func (w *Watcher) Close() error { return w.os.close() }
