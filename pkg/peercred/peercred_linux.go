package peercred

import (
	"fmt"

	"golang.org/x/sys/unix"
)

func getFD(fd int) (Cred, error) {
	u, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return Cred{}, fmt.Errorf("getsockopt SO_PEERCRED: %w", err)
	}
	return Cred{PID: int(u.Pid), UID: int(u.Uid), GID: int(u.Gid)}, nil
}
