package nofollow

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ReadFile reads a regular file, refusing a symlink (as the final
// component) and anything larger than max.
func ReadFile(path string, max int64) ([]byte, error) {
	b, _, err := ReadFileInfo(path, max)
	return b, err
}

// ReadFileInfo is ReadFile that also returns the file's info.
func ReadFileInfo(path string, max int64) ([]byte, fs.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	b, err := ReadRegular(f, path, max)
	return b, st, err
}

// ReadRegular reads the open file f (named name in errors) if it is a
// regular file of at most max bytes.
func ReadRegular(f *os.File, name string, max int64) ([]byte, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file: %w", name, fs.ErrNotExist)
	}
	if st.Size() > max {
		return nil, fmt.Errorf("%s is larger than %d bytes", name, max)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err == nil && int64(len(b)) > max {
		return nil, fmt.Errorf("%s is larger than %d bytes", name, max)
	}
	return b, err
}

// ReadBeneath reads the regular file rel below dir (see OpenBeneath),
// refusing one larger than max.
func ReadBeneath(dir, rel string, max int64) ([]byte, error) {
	f, err := OpenBeneath(dir, rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadRegular(f, rel, max)
}

// OpenBeneath opens rel below dir, opening every component with
// O_NOFOLLOW relative to the one before: a symlink anywhere on the way is
// refused (ELOOP or ENOTDIR), so the read never leaves dir.
func OpenBeneath(dir, rel string) (*os.File, error) {
	parts := strings.Split(rel, "/")
	for _, p := range parts {
		if p == "" || p == "." || p == ".." {
			return nil, fmt.Errorf("read %s in %s: bad path", rel, dir)
		}
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	for i, p := range parts {
		flags := unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_CLOEXEC
		if i < len(parts)-1 {
			flags |= unix.O_DIRECTORY
		} else {
			flags |= unix.O_NONBLOCK
		}
		next, err := unix.Openat(fd, p, flags, 0)
		unix.Close(fd)
		if err != nil {
			if err == unix.ENOTDIR || err == unix.ELOOP {
				err = fmt.Errorf("%s is not a plain path (a symlink or file on the way): %w", rel, fs.ErrNotExist)
			}
			return nil, &os.PathError{Op: "open", Path: filepath.Join(dir, rel), Err: err}
		}
		fd = next
	}
	return os.NewFile(uintptr(fd), filepath.Join(dir, rel)), nil
}
