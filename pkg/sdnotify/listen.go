package sdnotify

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ListenFDsStart is the first file descriptor systemd passes: the sockets
// are descriptors ListenFDsStart .. ListenFDsStart+$LISTEN_FDS-1.
const ListenFDsStart = 3

// The names ohd's socket units give their descriptors (FileDescriptorName=
// in packaging/systemd/ohd.socket and ohd-api.socket).
const (
	// NameControl is the Unix control socket ohctl talks to.
	NameControl = "control"
	// NameAPI is the TCP conversation API.
	NameAPI = "api"
)

// maxListenFDs bounds $LISTEN_FDS: far more than any unit passes, small
// enough that a wrong value cannot make Listeners walk the whole fd space.
const maxListenFDs = 1 << 16

// Listeners takes the sockets systemd passed to this process (socket
// activation) and returns them as listeners, grouped by name (the socket
// unit's FileDescriptorName=, or "unknown" when systemd gave no names).
//
// It returns an empty map and a nil error when nothing was passed, or when
// $LISTEN_PID names another process. It removes $LISTEN_PID, $LISTEN_FDS and
// $LISTEN_FDNAMES from the environment in every case, so call it once, early:
// a second call finds nothing. The passed descriptors are marked
// close-on-exec and replaced by the listeners' own (also close-on-exec)
// descriptors. If any descriptor is not a listening stream socket, every
// listener is closed and the error names the descriptor.
//
// The caller owns the listeners: it closes those it does not use.
func Listeners() (map[string][]net.Listener, error) {
	pid, fds, names := os.Getenv("LISTEN_PID"), os.Getenv("LISTEN_FDS"), os.Getenv("LISTEN_FDNAMES")
	// Like sd_listen_fds(1): whatever happens below, children must not
	// inherit the variables and believe they were activated.
	for _, v := range []string{"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"} {
		_ = os.Unsetenv(v)
	}
	fdNames, err := parseListenEnv(pid, fds, names, os.Getpid())
	if err != nil {
		return nil, err
	}
	out := make(map[string][]net.Listener, len(fdNames))
	if len(fdNames) == 0 {
		return out, nil
	}
	// Close-on-exec first, all of them: until each is replaced below, a
	// concurrent fork+exec elsewhere in the process must not leak them.
	for i := range fdNames {
		fd := ListenFDsStart + i
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
			return nil, fmt.Errorf("socket activation: fd %d (%q): %w: LISTEN_FDS=%s promises it", fd, fdNames[i], err, fds)
		}
	}
	var first error
	for i, name := range fdNames {
		fd := ListenFDsStart + i
		f := os.NewFile(uintptr(fd), "listen-fd-"+strconv.Itoa(fd)+"-"+name)
		// FileListener works on a duplicate; the original is closed either
		// way, so a bad descriptor is not left open either.
		ln, err := net.FileListener(f)
		f.Close()
		if err != nil {
			if first == nil {
				first = fmt.Errorf("socket activation: fd %d (%q) is not a listening stream socket (check the .socket unit: ListenStream=, Accept=no): %w", fd, name, err)
			}
			continue
		}
		out[name] = append(out[name], ln)
	}
	if first != nil {
		for _, lns := range out {
			for _, ln := range lns {
				ln.Close()
			}
		}
		return nil, first
	}
	return out, nil
}

// parseListenEnv checks the socket-activation variables against this
// process (self) and returns one name per passed descriptor; none when the
// variables are unset or meant for another process.
func parseListenEnv(pid, fds, names string, self int) ([]string, error) {
	if pid == "" || fds == "" {
		return nil, nil
	}
	p, err := strconv.Atoi(pid)
	if err != nil || p <= 0 {
		return nil, fmt.Errorf("LISTEN_PID=%q: %w", pid, ErrBadEnvironment)
	}
	if p != self {
		return nil, nil
	}
	n, err := strconv.Atoi(fds)
	if err != nil || n < 0 || n > maxListenFDs {
		return nil, fmt.Errorf("LISTEN_FDS=%q: %w", fds, ErrBadEnvironment)
	}
	if n == 0 {
		return nil, nil
	}
	out := make([]string, n)
	if names == "" {
		for i := range out {
			out[i] = "unknown"
		}
		return out, nil
	}
	parts := strings.Split(names, ":")
	if len(parts) != n {
		return nil, fmt.Errorf("LISTEN_FDNAMES=%q names %d descriptors, LISTEN_FDS=%d: %w", names, len(parts), n, ErrBadEnvironment)
	}
	copy(out, parts)
	return out, nil
}
