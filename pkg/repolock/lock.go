package repolock

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Locks serializes mutations of one repository's worktree metadata
// (worktree add and remove, branch and snapshot ref updates): inside this
// process one channel of capacity 1 per canonical common dir, so waiting
// can stop when the context ends, and across processes an flock(2) on a
// file in Dir. Its zero value with Dir set is ready to use; it must not be
// copied after first use.
type Locks struct {
	// Dir holds the lock files, one per repository; it must exist.
	Dir string

	mu sync.Mutex
	m  map[string]chan struct{}
}

func (l *Locks) sem(key string) chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]chan struct{}{}
	}
	ch, ok := l.m[key]
	if !ok {
		ch = make(chan struct{}, 1)
		l.m[key] = ch
	}
	return ch
}

// lockFile is the path of the flock(2) file for a common dir: a hash, so
// the name is fixed-length and reveals nothing about the path.
func (m *Locks) lockFile(commonDir string) string {
	sum := sha256.Sum256([]byte(commonDir))
	return filepath.Join(m.Dir, "repo-"+hex.EncodeToString(sum[:16])+".lock")
}

// Lock takes the in-process lock and then the file lock for commonDir
// (so two ohd processes, or two Locks sharing Dir, serialize too). The
// returned function releases both.
func (m *Locks) Lock(ctx context.Context, commonDir string) (func(), error) {
	sem := m.sem(commonDir)
	select {
	case sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("lock repository %s: %w", commonDir, ctx.Err())
	}
	f, err := m.flock(ctx, m.lockFile(commonDir))
	if err != nil {
		<-sem
		return nil, fmt.Errorf("lock repository %s: %w", commonDir, err)
	}
	return func() {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		_ = f.Close()
		<-sem
	}, nil
}

// flock opens path and takes an exclusive flock on it, polling so that
// the wait ends with ctx. The holder is another process (or another open
// file description in this one), so there is nothing to wait on but time.
func (m *Locks) flock(ctx context.Context, path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	delay := time.Millisecond
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			_ = f.Close()
			return nil, fmt.Errorf("flock %s: %w", path, err)
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			_ = f.Close()
			return nil, fmt.Errorf("wait for flock %s (held by another ohd process?): %w", path, ctx.Err())
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}
