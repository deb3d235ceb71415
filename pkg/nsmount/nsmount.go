package nsmount

import (
	"errors"
	"fmt"
)

// Mount is one bind inside the container: Path onto itself, read-only or
// not.
type Mount struct {
	Path     string
	ReadOnly bool
}

// ErrUnsupported: this system cannot join a container's mount namespace
// (not Linux).
var ErrUnsupported = errors.New("mounting into a running container is not supported here")

// Bind binds each of mounts onto itself, in order, in the mount namespace
// of process pid (a process of the container). It stops at the first
// failure; the mounts made before it stay (each is a pin or a read-only
// view, never a loss of access).
func Bind(pid int, mounts []Mount) error {
	if pid <= 0 {
		return fmt.Errorf("nsmount: no process to join (pid %d)", pid)
	}
	if len(mounts) == 0 {
		return nil
	}
	errc := make(chan error, 1)
	go func() { errc <- bindIn(pid, mounts) }()
	if err := <-errc; err != nil {
		return fmt.Errorf("nsmount: %w", err)
	}
	return nil
}
