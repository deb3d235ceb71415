package nsmount

import (
	"fmt"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// bindIn runs on its own OS thread, which it never unlocks: the thread
// joins pid's mount namespace and ends with the goroutine. Never the main
// thread.
func bindIn(pid int, mounts []Mount) error {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		// The process's main thread: the runtime cannot end it, so it
		// would stay in the container's namespace (holding its mounts)
		// for good. Keep it locked, so the goroutine below runs on
		// another thread, and give it back unchanged.
		defer runtime.UnlockOSThread()
		errc := make(chan error, 1)
		go func() { errc <- bindIn(pid, mounts) }()
		return <-errc
	}
	ns, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the mount namespace of pid %d: %w", pid, err)
	}
	defer unix.Close(ns)
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("unshare the thread's filesystem context: %w", err)
	}
	if err := unix.Setns(ns, unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("join the mount namespace of pid %d: %w", pid, err)
	}
	for _, m := range mounts {
		// The path must be what it was on the host: no symlink in its
		// last component (the walk to it the caller checked on the host).
		var st unix.Stat_t
		if err := unix.Lstat(m.Path, &st); err != nil {
			return fmt.Errorf("%s in the container: %w", m.Path, err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return fmt.Errorf("%s in the container is a symlink", m.Path)
		}
		if err := unix.Mount(m.Path, m.Path, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s onto itself: %w", m.Path, err)
		}
		if !m.ReadOnly {
			continue
		}
		// A remount keeps the flags the kernel locks (nosuid, nodev,
		// noexec of the mount it came from) only if they are passed.
		var sfs unix.Statfs_t
		if err := unix.Statfs(m.Path, &sfs); err != nil {
			return fmt.Errorf("statfs %s: %w", m.Path, err)
		}
		flags := uintptr(unix.MS_REMOUNT | unix.MS_BIND | unix.MS_RDONLY)
		for st, ms := range map[int64]uintptr{unix.ST_NOSUID: unix.MS_NOSUID, unix.ST_NODEV: unix.MS_NODEV, unix.ST_NOEXEC: unix.MS_NOEXEC, unix.ST_NOATIME: unix.MS_NOATIME, unix.ST_NODIRATIME: unix.MS_NODIRATIME, unix.ST_RELATIME: unix.MS_RELATIME} {
			if int64(sfs.Flags)&st != 0 {
				flags |= ms
			}
		}
		if err := unix.Mount("", m.Path, "", flags, ""); err != nil {
			return fmt.Errorf("make %s read-only: %w", m.Path, err)
		}
	}
	return nil
}
