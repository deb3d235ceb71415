package gitindex

import (
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// ErrUnsupported is returned for an index this package does not read
// (see the package documentation); ask git instead.
var ErrUnsupported = errors.New("gitindex: index not read here")

// MaxSize bounds the index file Gitlinks reads (git's own indexes of the
// largest repositories are a few hundred megabytes; past this, git).
const MaxSize = 256 << 20

const (
	hashLen      = sha1.Size
	entryFixed   = 40 + hashLen + 2 // stat data, object name, flags
	modeGitlink  = 0o160000
	modeSparse   = 0o040000
	flagExtended = 0x4000
	nameMask     = 0x0fff
)

// Gitlinks returns the paths of the gitlinks (mode 160000 entries, every
// stage, in index order: what `git ls-files --stage` prints with that
// mode) of the index file at path, which must be a regular file owned by
// uid. A missing file is an empty index. It is ErrUnsupported (wrapped)
// when the index is not one this package reads.
func Gitlinks(path string, uid int) ([]string, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: open %s: %v", ErrUnsupported, path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("%w: stat %s: %v", ErrUnsupported, path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != uid || st.Size > MaxSize {
		return nil, fmt.Errorf("%w: %s is not a regular file of uid %d under %d bytes", ErrUnsupported, path, uid, MaxSize)
	}
	b := make([]byte, st.Size)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, fmt.Errorf("%w: read %s: %v", ErrUnsupported, path, err)
	}
	links, err := ParseGitlinks(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return links, nil
}

// ParseGitlinks is Gitlinks on the index file's content b.
func ParseGitlinks(b []byte) ([]string, error) {
	unsupported := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrUnsupported, fmt.Sprintf(format, args...))
	}
	if len(b) < 12+hashLen || string(b[:4]) != "DIRC" {
		return nil, unsupported("no index header")
	}
	body, sum := b[:len(b)-hashLen], b[len(b)-hashLen:]
	// A zero checksum (index.skipHash) says nothing of the object format.
	if want := sha1.Sum(body); !bytes.Equal(want[:], sum) {
		return nil, unsupported("the checksum is not the SHA-1 of the content (a SHA-256 repository, index.skipHash, or a damaged file)")
	}
	version := binary.BigEndian.Uint32(body[4:8])
	if version < 2 || version > 4 {
		return nil, unsupported("version %d", version)
	}
	count := binary.BigEndian.Uint32(body[8:12])
	if uint64(count)*uint64(entryFixed) > uint64(len(body)) {
		return nil, unsupported("%d entries do not fit in %d bytes", count, len(body))
	}
	var links []string
	var prev []byte // v4: the previous entry's path
	off := 12
	for i := uint32(0); i < count; i++ {
		start := off
		if len(body)-off < entryFixed {
			return nil, unsupported("entry %d is cut short", i)
		}
		mode := binary.BigEndian.Uint32(body[off+24 : off+28])
		flags := binary.BigEndian.Uint16(body[off+40+hashLen : off+entryFixed])
		off += entryFixed
		if flags&flagExtended != 0 {
			if version < 3 {
				return nil, unsupported("entry %d has extended flags in a version %d index", i, version)
			}
			if len(body)-off < 2 {
				return nil, unsupported("entry %d is cut short", i)
			}
			off += 2
		}
		var path []byte
		if version == 4 {
			strip, n := varint(body[off:])
			if n <= 0 || strip > uint64(len(prev)) {
				return nil, unsupported("entry %d: bad path prefix", i)
			}
			off += n
			end := bytes.IndexByte(body[off:], 0)
			if end < 0 {
				return nil, unsupported("entry %d: unterminated path", i)
			}
			path = append(append([]byte(nil), prev[:len(prev)-int(strip)]...), body[off:off+end]...)
			off += end + 1
			prev = path
		} else {
			end := bytes.IndexByte(body[off:], 0)
			if end < 0 {
				return nil, unsupported("entry %d: unterminated path", i)
			}
			path = body[off : off+end]
			// 1 to 8 NULs pad the entry to a multiple of 8 bytes.
			off = start + (off+end-start+8)&^7
			if off > len(body) {
				return nil, unsupported("entry %d: padding past the end", i)
			}
		}
		if n := int(flags & nameMask); n != nameMask && n != len(path) {
			return nil, unsupported("entry %d: path length %d, flags say %d", i, len(path), n)
		}
		switch mode & 0o170000 {
		case modeGitlink:
			links = append(links, string(path))
		case modeSparse:
			// A sparse index: gitlinks may lie inside this directory
			// entry, which git expands and this package does not.
			return nil, unsupported("a sparse index (directory entry %q)", path)
		}
	}
	// Extensions: a 4-byte signature, a 32-bit size, the data. A split
	// index keeps entries in another file ("link").
	for off < len(body) {
		if len(body)-off < 8 {
			return nil, unsupported("an extension header is cut short")
		}
		sig := string(body[off : off+4])
		size := binary.BigEndian.Uint32(body[off+4 : off+8])
		off += 8
		if uint64(size) > uint64(len(body)-off) {
			return nil, unsupported("extension %q runs past the end", sig)
		}
		if sig == "link" || sig == "sdir" {
			return nil, unsupported("extension %q (split or sparse index)", sig)
		}
		off += int(size)
	}
	return links, nil
}

// varint decodes git's offset varint (varint.c: 7 bits per byte, high bit
// set on all but the last, each continuation adding one): the value and
// the bytes read, or n <= 0 when b does not hold one.
func varint(b []byte) (v uint64, n int) {
	for i, c := range b {
		if i == 9 {
			return 0, -1 // over 63 bits
		}
		if i > 0 {
			v++
		}
		v = v<<7 | uint64(c&0x7f)
		if c&0x80 == 0 {
			return v, i + 1
		}
	}
	return 0, 0
}
