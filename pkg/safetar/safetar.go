package safetar

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// Defaults of Options' limits.
const (
	DefaultMaxBytes   = 4 << 30
	DefaultMaxEntries = 200_000
)

// ErrRefused marks an archive Extract refuses (a name outside the
// destination, a limit exceeded, a malformed archive).
var ErrRefused = errors.New("archive refused")

// Options shape an extraction.
type Options struct {
	// Prefix is the one top-level name every entry must lie under (the
	// archive endpoint names its entries after the base name of the path
	// asked for); it is stripped. "" keeps names as they are.
	Prefix string
	// MaxBytes bounds the sum of the regular files' sizes; 0 is
	// DefaultMaxBytes.
	MaxBytes int64
	// MaxEntries bounds the number of entries, skipped ones included; 0
	// is DefaultMaxEntries.
	MaxEntries int
	// UID and GID own what is written; -1 leaves the extracting process's.
	UID, GID int
}

// Result says what Extract wrote and skipped.
type Result struct {
	Files, Dirs int
	Bytes       int64
	// Skipped are the names of the entries that were neither a regular
	// file nor a directory (links, devices, FIFOs), at most 20 of them;
	// SkippedCount counts all.
	Skipped      []string
	SkippedCount int
}

// Extract writes the archive r into the existing directory dest (see the
// package comment).
func Extract(r io.Reader, dest string, o Options) (Result, error) {
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = DefaultMaxEntries
	}
	root, err := os.OpenRoot(dest)
	if err != nil {
		return Result{}, err
	}
	defer root.Close()
	var res Result
	tr := tar.NewReader(r)
	for n := 0; ; n++ {
		h, err := tr.Next()
		if err == io.EOF {
			return res, nil
		}
		if err != nil {
			return res, fmt.Errorf("%w: %v", ErrRefused, err)
		}
		if n >= o.MaxEntries {
			return res, fmt.Errorf("%w: more than %d entries", ErrRefused, o.MaxEntries)
		}
		name, err := entryName(h.Name, o.Prefix)
		if err != nil {
			return res, err
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if name == "." {
				continue
			}
			if err := mkdirAll(root, name, o); err != nil {
				return res, err
			}
			res.Dirs++
		case tar.TypeReg, tar.TypeRegA:
			if name == "." {
				return res, fmt.Errorf("%w: a file in place of the top directory", ErrRefused)
			}
			if h.Size < 0 || h.Size > o.MaxBytes-res.Bytes {
				return res, fmt.Errorf("%w: more than %d bytes of files", ErrRefused, o.MaxBytes)
			}
			if dir := path.Dir(name); dir != "." {
				if err := mkdirAll(root, dir, o); err != nil {
					return res, err
				}
			}
			if err := writeFile(root, name, tr, h, o); err != nil {
				return res, err
			}
			res.Files++
			res.Bytes += h.Size
		case tar.TypeXHeader, tar.TypeXGlobalHeader, tar.TypeGNULongName, tar.TypeGNULongLink:
			// Consumed by archive/tar; never returned.
		default:
			res.SkippedCount++
			if len(res.Skipped) < 20 {
				res.Skipped = append(res.Skipped, name)
			}
		}
	}
}

// entryName checks an entry's name and returns it relative to the
// destination ("." for the top directory).
func entryName(name, prefix string) (string, error) {
	if name == "" || strings.HasPrefix(name, "/") || strings.ContainsRune(name, 0) || strings.ContainsRune(name, '\\') {
		return "", fmt.Errorf("%w: entry name %q is empty, absolute or holds a NUL or backslash", ErrRefused, name)
	}
	for _, el := range strings.Split(strings.TrimSuffix(name, "/"), "/") {
		if el == ".." {
			return "", fmt.Errorf("%w: entry name %q climbs out with ..", ErrRefused, name)
		}
	}
	clean := path.Clean(name)
	if prefix != "" {
		switch {
		case clean == prefix:
			clean = "."
		case strings.HasPrefix(clean, prefix+"/"):
			clean = strings.TrimPrefix(clean, prefix+"/")
		default:
			return "", fmt.Errorf("%w: entry name %q is not under %s/", ErrRefused, name, prefix)
		}
	}
	return clean, nil
}

// mkdirAll makes dir and its parents below root, each 0700 and owned as
// asked; an existing directory is kept, anything else in the way refused.
func mkdirAll(root *os.Root, dir string, o Options) error {
	cur := ""
	for _, el := range strings.Split(dir, "/") {
		cur = path.Join(cur, el)
		err := root.Mkdir(cur, 0o700)
		switch {
		case err == nil:
			if err := chown(root, cur, o); err != nil {
				return err
			}
		case errors.Is(err, os.ErrExist):
			fi, err := root.Lstat(cur)
			if err != nil {
				return err
			}
			if !fi.IsDir() {
				return fmt.Errorf("%w: %s is both a file and a directory", ErrRefused, cur)
			}
		default:
			return err
		}
	}
	return nil
}

func writeFile(root *os.Root, name string, r io.Reader, h *tar.Header, o Options) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%w: %s appears twice", ErrRefused, name)
	}
	if err != nil {
		return err
	}
	n, err := io.Copy(f, io.LimitReader(r, h.Size))
	if err == nil && n != h.Size {
		err = fmt.Errorf("%w: %s is cut short", ErrRefused, name)
	}
	if err == nil && (o.UID >= 0 || o.GID >= 0) {
		err = f.Chown(o.UID, o.GID)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if !h.ModTime.IsZero() {
		_ = root.Chtimes(name, h.ModTime, h.ModTime)
	}
	return nil
}

func chown(root *os.Root, name string, o Options) error {
	if o.UID < 0 && o.GID < 0 {
		return nil
	}
	return root.Lchown(name, o.UID, o.GID)
}
