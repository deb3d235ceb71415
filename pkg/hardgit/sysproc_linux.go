package hardgit

import "syscall"

// newSysProcAttr puts git in its own process group (a timeout kills the
// group) and has the kernel kill it when ohd dies: a git child of a killed
// ohd must not go on writing the repository while the next ohd reconciles
// it.
func newSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
