//go:build linux

package runtime

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// openNetnsOf opens the network namespace of process pid, after checking
// that pid is a process of container id in this machine's process table
// (its cgroup names the container): an engine in a VM or on another
// machine reports pids that mean nothing here. Both files are read through
// one /proc/<pid> handle, so they belong to the same process even if pid
// is reused meanwhile.
func openNetnsOf(pid int, id string) (int, error) {
	dir, err := unix.Open("/proc/"+strconv.Itoa(pid), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, netnsErr("open /proc/"+strconv.Itoa(pid), err)
	}
	defer unix.Close(dir)
	cg, err := readAt(dir, "cgroup")
	if err != nil {
		return -1, netnsErr("read the cgroup of pid "+strconv.Itoa(pid), err)
	}
	if len(id) < 12 || !strings.Contains(cg, id) {
		return -1, fmt.Errorf("%w: process %d is not container %s's here (the engine's processes are not in this machine's process table)", ErrNetnsUnavailable, pid, shortID(id))
	}
	fd, err := unix.Openat(dir, "ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, netnsErr("open the network namespace of pid "+strconv.Itoa(pid), err)
	}
	// Entering needs privileges this process may not have: find out now,
	// not at the first request.
	if err := inNetns(fd, func() error { return nil }); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func readAt(dir int, name string) (string, error) {
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	b := make([]byte, 64<<10)
	n, err := f.Read(b)
	if err != nil {
		return "", err
	}
	return string(b[:n]), nil
}

// netnsErr wraps err, as ErrNetnsUnavailable when it is a lack of
// privilege.
func netnsErr(what string, err error) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.ENOSYS) {
		return fmt.Errorf("%w: %s: %w", ErrNetnsUnavailable, what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func closeNetns(fd int) error { return unix.Close(fd) }

// hostNetnsOnce opens this process's own network namespace, entered again
// after each dial. It runs before any thread enters another one.
var hostNetnsOnce = sync.OnceValues(func() (int, error) {
	return unix.Open("/proc/self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
})

// inNetns runs fn on a thread that has entered namespace fd, and returns
// that thread to this process's namespace afterwards. A thread that cannot
// return is never used again: it exits with its goroutine.
func inNetns(fd int, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		home, err := hostNetnsOnce()
		if err != nil {
			goruntime.UnlockOSThread()
			errc <- netnsErr("open this process's network namespace", err)
			return
		}
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			goruntime.UnlockOSThread()
			errc <- netnsErr("enter a container's network namespace", err)
			return
		}
		err = fn()
		if unix.Setns(home, unix.CLONE_NEWNET) == nil {
			goruntime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// dialInNetns connects to addr from inside namespace fd. The socket is
// created in that namespace and stays there; the thread leaves it.
func dialInNetns(ctx context.Context, fd int, addr string) (net.Conn, error) {
	var c net.Conn
	err := inNetns(fd, func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		return err
	})
	return c, err
}

// probeOwnNetns enters this process's own network namespace: it needs
// the same privilege (CAP_SYS_ADMIN) as entering a container's.
func probeOwnNetns() error {
	fd, err := hostNetnsOnce()
	if err != nil {
		return netnsErr("open this process's network namespace", err)
	}
	return inNetns(fd, func() error { return nil })
}
