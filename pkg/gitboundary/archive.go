package gitboundary

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// MaxArchive bounds what Archive copies: the agent's git directories can
// be as large as it made them, and a copy is the user's disk.
const MaxArchive = 1 << 30

// ErrArchiveTooLarge: the kept git directories hold more than MaxArchive.
var ErrArchiveTooLarge = errors.New("the agent's git directories are too large to archive")

// Archive writes the git directories Release moved into keptDir to a new
// tar file dst (0600, owned by uid:gid; never over an existing file) and
// returns their paths relative to the tree, as Release reported them. A
// tar is inert: no git opens a repository inside one, so the user can
// look at what the agent's repositories held (`tar -tvf`, or extract it
// somewhere their git never runs) without their git running any of it.
// Symlinks are archived as symlinks, never followed; other special files
// are left out. No kept directory (nothing was moved) is no archive and
// no error.
func Archive(keptDir, dst string, uid, gid int) ([]string, error) {
	moved, err := readJournal(keptDir + ".journal")
	if err != nil {
		return nil, err
	}
	if _, err := os.Lstat(keptDir); errors.Is(err, fs.ErrNotExist) || len(moved) == 0 {
		return nil, nil
	}
	var size int64
	err = filepath.WalkDir(keptDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			size += info.Size()
		}
		if size > MaxArchive {
			return fmt.Errorf("%w: more than %d bytes in %s", ErrArchiveTooLarge, int64(MaxArchive), keptDir)
		}
		return nil
	})
	if err != nil {
		return moved, err
	}
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return moved, err
	}
	if err := writeArchive(f, keptDir, uid, gid); err != nil {
		f.Close()
		os.Remove(dst)
		return moved, fmt.Errorf("archive %s: %w", keptDir, err)
	}
	if err := f.Chown(uid, gid); err != nil && os.Geteuid() == 0 {
		f.Close()
		os.Remove(dst)
		return moved, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(dst)
		return moved, err
	}
	return moved, f.Close()
}

func writeArchive(w io.Writer, root string, uid, gid int) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		var link string
		switch {
		case d.IsDir(), d.Type().IsRegular():
		case d.Type()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		default:
			return nil // sockets, fifos, devices: nothing git keeps
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if d.IsDir() {
			h.Name += "/"
		}
		h.Uid, h.Gid, h.Uname, h.Gname = uid, gid, "", ""
		h.Mode &= 0o777
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		in, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW, 0)
		if err != nil {
			return err
		}
		defer in.Close()
		_, err = io.CopyN(tw, in, h.Size)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
