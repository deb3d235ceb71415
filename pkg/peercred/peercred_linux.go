package peercred

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// usePeerPIDFD is false only in tests of the fallback for kernels before 6.5.
var usePeerPIDFD = true

func getFD(fd int) (Cred, error) {
	u, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return Cred{}, fmt.Errorf("getsockopt SO_PEERCRED: %w", err)
	}
	return Cred{PID: int(u.Pid), UID: int(u.Uid), GID: int(u.Gid)}, nil
}

// osWatcher holds a pidfd (or -1) and, when the pidfd did not come from the
// socket itself, the start time the pid had when we looked.
type osWatcher struct {
	pidfd int
	start uint64 // 0: pidfd came from SO_PEERPIDFD, exact
	pid   int
}

func newOSWatcher(sock int, cred Cred) (osWatcher, error) {
	// SO_PEERPIDFD (Linux 6.5): a pidfd for the very process that
	// connected; no reuse window at all.
	if usePeerPIDFD {
		if pfd, err := unix.GetsockoptInt(sock, unix.SOL_SOCKET, unix.SO_PEERPIDFD); err == nil {
			return osWatcher{pidfd: pfd, pid: cred.PID}, nil
		}
	}
	if cred.PID <= 0 {
		return osWatcher{}, fmt.Errorf("peer pid %d: %w", cred.PID, ErrProcessGone)
	}
	// Older kernels: take a pidfd (Linux 5.3) first, so the pid cannot be
	// recycled while we look, then check that the process it names runs as the
	// peer's uid and remember its start time. A process that died
	// before pidfd_open and whose pid was reused by the same uid in between
	// cannot be told apart: that window is the remaining caveat, as in
	// spire.
	w := osWatcher{pidfd: -1, pid: cred.PID}
	if pfd, err := unix.PidfdOpen(cred.PID, 0); err == nil {
		w.pidfd = pfd
	} else if errors.Is(err, unix.ESRCH) {
		return osWatcher{}, ErrProcessGone
	}
	start, err := procStart(cred.PID)
	if err != nil {
		w.close()
		return osWatcher{}, err
	}
	uid, err := procEUID(cred.PID)
	if err != nil {
		w.close()
		return osWatcher{}, err
	}
	if uid != cred.UID {
		w.close()
		return osWatcher{}, fmt.Errorf("pid %d now runs as uid %d, not %d: %w", cred.PID, uid, cred.UID, ErrProcessGone)
	}
	w.start = start
	return w, nil
}

func (w osWatcher) isAlive() error {
	if w.pidfd >= 0 {
		if err := unix.PidfdSendSignal(w.pidfd, 0, nil, 0); err != nil {
			if errors.Is(err, unix.ESRCH) {
				return ErrProcessGone
			}
			return fmt.Errorf("pidfd_send_signal: %w", err)
		}
		if w.start == 0 {
			return nil
		}
	}
	start, err := procStart(w.pid)
	if err != nil {
		return err
	}
	if start != w.start {
		return ErrProcessGone
	}
	return nil
}

func (w osWatcher) close() error {
	if w.pidfd >= 0 {
		return unix.Close(w.pidfd)
	}
	return nil
}

// procStart returns the start time of pid: field 22 of /proc/<pid>/stat,
// in clock ticks since boot.
func procStart(pid int) (uint64, error) {
	path := "/proc/" + strconv.Itoa(pid) + "/stat"
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) {
			return 0, ErrProcessGone
		}
		return 0, err
	}
	// The command name (field 2) is in parentheses and may contain spaces
	// and parentheses: fields resume after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse %s: no command name", path)
	}
	fields := bytes.Fields(b[i+1:])
	// fields[0] is field 3 (state); the start time is field 22.
	if len(fields) < 20 {
		return 0, fmt.Errorf("parse %s: %d fields", path, len(fields)+2)
	}
	start, err := strconv.ParseUint(string(fields[19]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s start time: %w", path, err)
	}
	return start, nil
}

// procEUID returns the effective uid of pid (the uid SO_PEERCRED reports),
// from the Uid line of /proc/<pid>/status.
func procEUID(pid int) (int, error) {
	path := "/proc/" + strconv.Itoa(pid) + "/status"
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) {
			return 0, ErrProcessGone
		}
		return 0, err
	}
	for line := range bytes.Lines(b) {
		rest, ok := bytes.CutPrefix(line, []byte("Uid:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest) // real, effective, saved, filesystem
		if len(f) < 2 {
			break
		}
		return strconv.Atoi(string(f[1]))
	}
	return 0, fmt.Errorf("parse %s: no Uid line", path)
}
