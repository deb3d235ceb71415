package daemon

import "golang.org/x/sys/unix"

// notDumpable clears PR_SET_DUMPABLE: no core dumps of a process holding
// secrets, and no ptrace or /proc/<pid>/environ reads by other processes of
// the same uid.
func notDumpable() { _ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0) }
