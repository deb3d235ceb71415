package nsmount

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// bindIn runs on its own OS thread, which it never unlocks: the thread
// takes a detached copy of each source in ohd's namespace (open_tree),
// then joins pid's mount namespace and attaches each at its target there
// (move_mount), and ends with the goroutine. Never the main thread.
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
	trees := make([]int, 0, len(mounts))
	defer func() {
		for _, fd := range trees {
			unix.Close(fd)
		}
	}()
	dirs := make([]bool, 0, len(mounts))
	for _, m := range mounts {
		fd, err := unix.OpenTree(unix.AT_FDCWD, m.Source, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_SYMLINK_NOFOLLOW)
		if errors.Is(err, unix.ENOSYS) {
			return ErrUnsupported
		}
		if err != nil {
			return fmt.Errorf("take a copy of %s: %w", m.Source, err)
		}
		trees = append(trees, fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return fmt.Errorf("stat %s: %w", m.Source, err)
		}
		dirs = append(dirs, st.Mode&unix.S_IFMT == unix.S_IFDIR)
		if m.ReadOnly {
			attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
			if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
				return fmt.Errorf("make the copy of %s read-only: %w", m.Source, err)
			}
		}
	}
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("unshare the thread's filesystem context: %w", err)
	}
	if err := unix.Setns(ns, unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("join the mount namespace of pid %d: %w", pid, err)
	}
	for i, m := range mounts {
		var st unix.Stat_t
		err := unix.Lstat(m.Target, &st)
		switch {
		case errors.Is(err, unix.ENOENT) && dirs[i]:
			err = unix.Mkdir(m.Target, 0o755)
		case errors.Is(err, unix.ENOENT):
			var fd int
			if fd, err = unix.Open(m.Target, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o444); err == nil {
				unix.Close(fd)
			}
		case err == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK:
			err = fmt.Errorf("a symlink")
		}
		if err != nil {
			return fmt.Errorf("%s in the container: %w", m.Target, err)
		}
		if err := unix.MoveMount(trees[i], "", unix.AT_FDCWD, m.Target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("mount %s at %s in the container: %w", m.Source, m.Target, err)
		}
	}
	return nil
}
