package nsmount

import (
	"errors"
	"fmt"
)

// Mount is one bind inside the container: the host's Source (resolved in
// ohd's own namespace) at Target (resolved in the container's), read-only
// or not. A pin has Source == Target: a host path the container sees at
// the same path, bound onto itself.
type Mount struct {
	Source, Target string
	ReadOnly       bool
}

// ErrUnsupported: this system cannot mount into a container's namespace
// (not Linux, or a kernel without open_tree and move_mount, before 5.2).
var ErrUnsupported = errors.New("mounting into a running container is not supported here")

// Bind mounts each of mounts, in order, in the mount namespace of process
// pid (a process of the container). A target that does not exist there is
// made (a directory, or an empty file for a file), as the engine makes a
// mount point; a target that is a symlink there is refused. It stops at
// the first failure; the mounts made before it stay (each is a pin or a
// read-only view, never a loss of access).
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
