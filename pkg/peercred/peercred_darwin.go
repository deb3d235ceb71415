package peercred

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

func getFD(fd int) (Cred, error) {
	xu, err := unix.GetsockoptXucred(fd, unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	if err != nil {
		return Cred{}, fmt.Errorf("getsockopt LOCAL_PEERCRED: %w", err)
	}
	pid, err := unix.GetsockoptInt(fd, unix.SOL_LOCAL, unix.LOCAL_PEERPID)
	if err != nil {
		return Cred{}, fmt.Errorf("getsockopt LOCAL_PEERPID: %w", err)
	}
	gid := -1
	if xu.Ngroups > 0 {
		gid = int(xu.Groups[0])
	}
	return Cred{PID: pid, UID: int(xu.Uid), GID: gid}, nil
}

// osWatcher remembers the start time of the peer pid (macOS has no pidfd).
type osWatcher struct {
	pid   int
	start unix.Timeval
}

func newOSWatcher(_ int, cred Cred) (osWatcher, error) {
	start, err := startTime(cred.PID)
	if err != nil {
		return osWatcher{}, err
	}
	return osWatcher{pid: cred.PID, start: start}, nil
}

func (w osWatcher) isAlive() error {
	start, err := startTime(w.pid)
	if err != nil {
		return err
	}
	if start != w.start {
		return ErrProcessGone
	}
	return nil
}

func (w osWatcher) close() error { return nil }

func startTime(pid int) (unix.Timeval, error) {
	kp, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return unix.Timeval{}, ErrProcessGone
		}
		return unix.Timeval{}, fmt.Errorf("sysctl kern.proc.pid.%d: %w", pid, err)
	}
	if kp.Proc.P_pid != int32(pid) {
		return unix.Timeval{}, ErrProcessGone
	}
	return kp.Proc.P_starttime, nil
}
