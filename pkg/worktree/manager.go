package worktree

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ohd-dev/ohd/pkg/hardgit"
	"github.com/ohd-dev/ohd/pkg/packcheck"
	"github.com/ohd-dev/ohd/pkg/repolock"
)

// Options configures a Manager; the zero value of optional fields is safe.
type Options struct {
	// Root is the worktree root (required, absolute): worktrees go to
	// <Root>/<conversation-id>/<repo-basename>. It and any parents New
	// creates are made 0711, so repository owners can reach their
	// worktrees without being able to list other conversations. Keep it
	// on persistent storage (under the state directory), never /tmp.
	Root string
	// LockDir holds the per-repository lock files (one small file per
	// repository, named by a hash of its git common dir). It should be in
	// ohd's state directory; it is created 0700. Default: <Root>/.ohd-locks.
	LockDir string
	// Git is the absolute path of the git binary. Default: the first "git"
	// in /usr/local/bin, /usr/bin, /bin (never the caller's PATH).
	Git string
	// Timeout bounds each git invocation. Default: 60s.
	Timeout time.Duration
	// Logger receives debug records of git invocations and info records of
	// adds and removes. Default: discard.
	Logger *slog.Logger
	// MaxPackBytes bounds one import from a git view (the pack's bytes):
	// a conversation that commits more than this in one publish is
	// refused (ErrRefused) rather than allowed to fill the host's disk.
	// It overrides Import.MaxPackBytes when set.
	MaxPackBytes int64
	// Import bounds what one import from a git view may declare (objects,
	// each object's and delta result's size, the sum); the zero value
	// takes packcheck's defaults. See package gitimport.
	Import packcheck.Limits
	// MaxTreeDepth bounds how deeply an imported commit's trees nest.
	// Default: DefaultMaxTreeDepth.
	MaxTreeDepth int
	// TrashDir, if set, is where a removal moves a worktree's directory
	// (one rename, once its work is saved and its registration gone) to
	// delete it in the background: the removal does not wait for the
	// unlinking of every file (most of a large worktree's removal). It
	// must be on Root's filesystem (otherwise the directory is deleted in
	// place, as without it) and is ohd's alone: made 0700, and whatever
	// is in it when New runs (left by a killed ohd) is deleted then, in
	// the background. "" deletes in place.
	TrashDir string
	// OnStep, if set, is called at named points inside an operation:
	// "view" once Add has seeded the git view, "snapshot" once the
	// snapshot commit exists (and, with a view, its objects are imported)
	// and before its refs are written, "publish" once Publish imported the
	// objects and before it moves the branch, "trashed" once a removal
	// moved the worktree's directory to TrashDir. Crash tests stop the
	// daemon there.
	OnStep func(step string)
}

// Manager creates, inspects and removes conversation worktrees. It is safe
// for concurrent use; mutations of one repository are serialized (also
// across processes sharing LockDir).
type Manager struct {
	root    string
	lockDir string
	gitPath string
	timeout time.Duration
	log     *slog.Logger
	onStep  func(string)
	euid    int
	limits  packcheck.Limits
	// maxTreeDepth bounds imported trees' nesting.
	maxTreeDepth int
	// started is when the Manager was made: a ref lock or quarantine
	// older than it was left by an earlier (killed) ohd.
	started time.Time
	locks   repolock.Locks
	// packed caches, per view, what ViewBranch last read of its
	// packed-refs (a packedFile).
	packed sync.Map
	// packedAll caches, per view, ViewRefs' read of its packed-refs.
	packedAll sync.Map
	// trash is Options.TrashDir ("" deletes in place); emptying counts
	// the deletions running in the background (Wait).
	trash    string
	emptying background
}

// background counts goroutines as a sync.WaitGroup does, but may be
// waited for while others start (a removal still running as ohd shuts
// down): Wait returns once none runs.
type background struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0
}

// Go runs f in a goroutine counted until it returns.
func (b *background) Go(f func()) {
	b.mu.Lock()
	if b.n == 0 {
		b.idle = make(chan struct{})
	}
	b.n++
	b.mu.Unlock()
	go func() {
		defer func() {
			b.mu.Lock()
			if b.n--; b.n == 0 {
				close(b.idle)
			}
			b.mu.Unlock()
		}()
		f()
	}()
}

// Wait waits until no goroutine of b runs.
func (b *background) Wait() {
	for {
		b.mu.Lock()
		if b.n == 0 {
			b.mu.Unlock()
			return
		}
		idle := b.idle
		b.mu.Unlock()
		<-idle
	}
}

// DefaultTimeout is the per-invocation git timeout when Options.Timeout is 0.
const DefaultTimeout = 60 * time.Second

// New validates opts, creates Root (0711) and LockDir (0700) if missing,
// finds git and checks its version.
func New(opts Options) (*Manager, error) {
	m := &Manager{timeout: opts.Timeout, log: opts.Logger, onStep: opts.OnStep, euid: os.Geteuid(),
		limits: opts.Import, maxTreeDepth: opts.MaxTreeDepth, started: time.Now()}
	if opts.MaxPackBytes > 0 {
		m.limits.MaxPackBytes = opts.MaxPackBytes
	}
	m.limits = m.limits.WithDefaults()
	if m.maxTreeDepth <= 0 {
		m.maxTreeDepth = DefaultMaxTreeDepth
	}
	if m.onStep == nil {
		m.onStep = func(string) {}
	}
	if m.timeout <= 0 {
		m.timeout = DefaultTimeout
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	if opts.Root == "" || !filepath.IsAbs(opts.Root) {
		return nil, fmt.Errorf("worktree: root %q: %w: the worktree root must be an absolute path", opts.Root, ErrInvalidPath)
	}
	root, err := mkdirAllMode(filepath.Clean(opts.Root), 0o711)
	if err != nil {
		return nil, fmt.Errorf("worktree: create root %s: %w", opts.Root, err)
	}
	m.root = root

	lockDir := opts.LockDir
	if lockDir == "" {
		lockDir = filepath.Join(m.root, ".ohd-locks")
	}
	if !filepath.IsAbs(lockDir) {
		return nil, fmt.Errorf("worktree: lock dir %q: %w: must be an absolute path", lockDir, ErrInvalidPath)
	}
	if m.lockDir, err = mkdirAllMode(filepath.Clean(lockDir), 0o700); err != nil {
		return nil, fmt.Errorf("worktree: create lock dir %s: %w", lockDir, err)
	}
	m.locks.Dir = m.lockDir
	if opts.TrashDir != "" {
		if !filepath.IsAbs(opts.TrashDir) {
			return nil, fmt.Errorf("worktree: trash dir %q: %w: must be an absolute path", opts.TrashDir, ErrInvalidPath)
		}
		if m.trash, err = mkdirAllMode(filepath.Clean(opts.TrashDir), 0o700); err != nil {
			return nil, fmt.Errorf("worktree: create trash dir %s: %w", opts.TrashDir, err)
		}
		m.emptyTrash()
	}

	m.gitPath = opts.Git
	if m.gitPath == "" {
		if m.gitPath, err = hardgit.Look(); err != nil {
			return nil, fmt.Errorf("worktree: %w", err)
		}
	} else if !filepath.IsAbs(m.gitPath) {
		return nil, fmt.Errorf("worktree: git binary %q: %w: must be an absolute path", m.gitPath, ErrInvalidPath)
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.timeout)
	defer cancel()
	out, err := m.git(ctx, gitTarget{Dir: "/", UID: m.euid, GID: os.Getegid()}, runOpts{Raw: true}, "version")
	if err != nil {
		return nil, fmt.Errorf("worktree: run %s: %w", m.gitPath, err)
	}
	v, err := hardgit.ParseVersion(strings.TrimSpace(out))
	if err != nil {
		return nil, fmt.Errorf("worktree: %w", err)
	}
	if hardgit.VersionLess(v, hardgit.MinVersion) {
		return nil, fmt.Errorf("worktree: %s is git %d.%d.%d; ohd needs git %d.%d or newer", m.gitPath, v[0], v[1], v[2], hardgit.MinVersion[0], hardgit.MinVersion[1])
	}
	return m, nil
}

// lockRepo takes the lock of the repository whose common dir is commonDir
// (package repolock); the returned function releases it.
func (m *Manager) lockRepo(ctx context.Context, commonDir string) (func(), error) {
	return m.locks.Lock(ctx, commonDir)
}

// Root returns the canonical worktree root.
func (m *Manager) Root() string { return m.root }

// mkdirAllMode creates dir and missing parents with mode (set explicitly,
// whatever the umask), and returns dir's canonical path. Existing
// directories keep their mode.
func mkdirAllMode(dir string, mode os.FileMode) (string, error) {
	var missing []string
	for p := dir; ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err == nil {
			if !st.IsDir() {
				return "", fmt.Errorf("%s is not a directory", p)
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		missing = append(missing, p)
		if filepath.Dir(p) == p {
			break
		}
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := os.Mkdir(missing[i], mode); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", err
		}
		if err := os.Chmod(missing[i], mode); err != nil {
			return "", err
		}
	}
	return filepath.EvalSymlinks(dir)
}

// ValidateID reports whether id is a canonical UUID: 36 characters,
// lower-case hex digits with hyphens at positions 8, 13, 18 and 23. The id
// becomes a directory name and part of ref names, so nothing else is
// accepted.
func ValidateID(id string) error {
	if len(id) != 36 {
		return fmt.Errorf("%w %q: want a lower-case UUID like 123e4567-e89b-12d3-a456-426614174000", ErrInvalidID, truncate(id, 64))
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return fmt.Errorf("%w %q: want a lower-case UUID like 123e4567-e89b-12d3-a456-426614174000", ErrInvalidID, id)
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return fmt.Errorf("%w %q: want a lower-case UUID like 123e4567-e89b-12d3-a456-426614174000", ErrInvalidID, id)
			}
		}
	}
	return nil
}

// BranchName returns the branch of a conversation: "openhands/<id>".
func BranchName(id string) string { return "openhands/" + id }

// SnapshotRef returns the ref Snapshot writes: "refs/ohd/snapshots/<id>".
func SnapshotRef(id string) string { return "refs/ohd/snapshots/" + id }

// LockReason is the reason recorded with `git worktree add --lock`.
func LockReason(id string) string { return "ohd conversation " + id }

// owner returns the uid and gid owning path.
func owner(path string) (uid, gid int, err error) {
	st, err := os.Stat(path)
	if err != nil {
		return 0, 0, err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, fmt.Errorf("stat %s: no owner information", path)
	}
	return int(sys.Uid), int(sys.Gid), nil
}

// checkTraversable reports whether uid:gid (without supplementary groups,
// as git runs) can reach dir: every component needs the search bit that
// applies to that user.
func checkTraversable(dir string, uid, gid int) error {
	if uid == 0 {
		return nil
	}
	for p := dir; ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		sys, ok := st.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("stat %s: no owner information", p)
		}
		perm := st.Mode().Perm()
		var bit os.FileMode = 0o001
		switch {
		case int(sys.Uid) == uid:
			bit = 0o100
		case int(sys.Gid) == gid:
			bit = 0o010
		}
		if perm&bit == 0 {
			return fmt.Errorf("%w: uid %d cannot reach %s: %s has mode %04o (owner %d): make it traversable, e.g. chmod 0711 %s",
				ErrOwner, uid, dir, p, perm, sys.Uid, p)
		}
		if filepath.Dir(p) == p {
			return nil
		}
	}
}

// within reports whether path is dir or below it (both clean and absolute).
func within(path, dir string) bool {
	if dir == "/" {
		return true
	}
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// lexists reports whether path exists without following a final symlink.
func lexists(path string) (bool, error) {
	_, err := os.Lstat(path)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return false, err
}
