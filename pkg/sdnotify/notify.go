package sdnotify

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
)

// ErrUnsupportedSocket is returned by Notify when $NOTIFY_SOCKET is neither
// an absolute path nor an abstract socket ("@name"), e.g. the "vsock:"
// addresses of virtual machines, which ohd does not speak.
var ErrUnsupportedSocket = errors.New("unsupported NOTIFY_SOCKET address")

// ErrBadEnvironment is returned when a variable systemd sets ($LISTEN_PID,
// $LISTEN_FDS, $LISTEN_FDNAMES) does not parse.
var ErrBadEnvironment = errors.New("malformed systemd environment variable")

// Notify sends state (newline-separated VAR=value assignments, e.g.
// "READY=1") to the service manager at $NOTIFY_SOCKET. It reports false with
// a nil error when $NOTIFY_SOCKET is unset: the process does not run under a
// manager that wants notifications.
func Notify(state string) (bool, error) {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return false, nil
	}
	if err := send(addr, state); err != nil {
		return false, err
	}
	return true, nil
}

func send(addr, state string) error {
	if !strings.HasPrefix(addr, "/") && !strings.HasPrefix(addr, "@") {
		return fmt.Errorf("notify %q: %w: want an absolute path or @abstract-name", addr, ErrUnsupportedSocket)
	}
	// A name starting with '@' is an abstract socket: the net package
	// turns the '@' into the leading NUL byte on Linux.
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("notify %s: %w", addr, err)
	}
	defer conn.Close()
	// A datagram is sent whole or not at all; a short write cannot happen.
	if _, err := conn.Write([]byte(state)); err != nil {
		return fmt.Errorf("notify %s: %w", addr, err)
	}
	return nil
}

// Ready tells the service manager that the daemon serves (READY=1): with
// Type=notify, systemd holds back units ordered after ohd until then.
func Ready() (bool, error) { return Notify("READY=1") }

// Stopping tells the service manager that the daemon is shutting down
// (STOPPING=1), so a stop it did not ask for is not mistaken for a crash.
func Stopping() (bool, error) { return Notify("STOPPING=1") }

// Status sets the one-line status systemctl status shows (STATUS=msg).
// Newlines in msg become spaces: they would start new assignments.
func Status(msg string) (bool, error) {
	return Notify("STATUS=" + oneLine(msg))
}

func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == 0 {
			return ' '
		}
		return r
	}, s)
}
