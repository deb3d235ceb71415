package conversation

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// helperCopies keeps the ohctl that containers mount as copies ohd owns,
// named by content hash, in one directory: a container's bind mount then
// never depends on the operator's path (make install, make clean, an
// upgrade replace or delete it), and each start mounts the copy of what
// the configured path holds now.
type helperCopies struct {
	src, dir string

	mu   sync.Mutex
	seen map[helperStat]string // stat of src -> its copy
}

type helperStat struct {
	size  int64
	mtime time.Time
	ino   uint64
}

// current returns the copy of the configured binary, making it if needed.
// If the binary is gone, the newest copy is used (a conversation made
// before can still start) and warn says so; with neither, an error says
// what to do.
func (h *helperCopies) current() (path string, warn string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st, serr := os.Stat(h.src)
	if serr != nil {
		newest, ok := h.newest()
		if !ok {
			return "", "", fmt.Errorf("ohctl for containers: %w: build it (make build) or point --ohctl-binary at a static ohctl", serr)
		}
		return newest, fmt.Sprintf("ohctl for containers: %v; mounting ohd's newest copy %s", serr, filepath.Base(newest)), nil
	}
	if !st.Mode().IsRegular() {
		return "", "", fmt.Errorf("ohctl for containers: %s is not a regular file: point --ohctl-binary at a static ohctl", h.src)
	}
	key := helperStat{size: st.Size(), mtime: st.ModTime(), ino: inode(st)}
	if p, ok := h.seen[key]; ok {
		if _, err := os.Stat(p); err == nil {
			return p, "", nil
		}
	}
	p, err := h.copy()
	if err != nil {
		return "", "", err
	}
	if h.seen == nil {
		h.seen = map[helperStat]string{}
	}
	h.seen[key] = p
	return p, "", nil
}

// copy hashes src and writes it to <dir>/ohctl-<sha256> (0555) unless that
// exists, through a temporary file and a rename.
func (h *helperCopies) copy() (string, error) {
	f, err := os.Open(h.src)
	if err != nil {
		return "", fmt.Errorf("ohctl for containers: %w", err)
	}
	defer f.Close()
	if err := os.MkdirAll(h.dir, 0o711); err != nil {
		return "", fmt.Errorf("ohctl for containers: %w", err)
	}
	tmp, err := os.CreateTemp(h.dir, ".ohctl-*")
	if err != nil {
		return "", fmt.Errorf("ohctl for containers: %w", err)
	}
	defer os.Remove(tmp.Name())
	sum := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, sum), f); err != nil {
		tmp.Close()
		return "", fmt.Errorf("ohctl for containers: copy %s: %w", h.src, err)
	}
	if err := tmp.Chmod(0o555); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	dst := filepath.Join(h.dir, "ohctl-"+hex.EncodeToString(sum.Sum(nil)))
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", fmt.Errorf("ohctl for containers: %w", err)
	}
	return dst, nil
}

// newest returns the most recently made copy.
func (h *helperCopies) newest() (string, bool) {
	ents, err := os.ReadDir(h.dir)
	if err != nil {
		return "", false
	}
	type c struct {
		p string
		t time.Time
	}
	var cs []c
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "ohctl-") {
			continue
		}
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
			cs = append(cs, c{filepath.Join(h.dir, e.Name()), info.ModTime()})
		}
	}
	if len(cs) == 0 {
		return "", false
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].t.After(cs[j].t) })
	return cs[0].p, true
}

func inode(st os.FileInfo) uint64 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return s.Ino
	}
	return 0
}
