//go:build !linux

package hardgit

import "syscall"

// newSysProcAttr puts git in its own process group (a timeout kills the
// group). Only Linux has a parent-death signal.
func newSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
