package peercred

import (
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
