package gitboundary

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The watcher. What the user makes in a shared tree mid-conversation is
// not the agent's to write (defaultACL) until ohd shares it: a directory
// lent (Borrow) and given the access ACL (Apply), a file given the agent's
// access entry. Watch does that as the user makes them, from inotify
// events on every directory of the tree, so the agent waits milliseconds;
// the periodic pass (Borrow, and Apply when the watcher is Degraded) is
// the backstop. The boundary does not depend on the watcher: until it has
// shared a new inode, the agent cannot write it at all.

// WatchOptions tune a Watcher; the zero value is usable.
type WatchOptions struct {
	// MaxWatches bounds the inotify watches (one per directory); past it
	// (or when the kernel's per-user limit is reached) the watcher is
	// Degraded and the periodic pass must share files too. Default 16384.
	MaxWatches int
	// Debounce is how long the watcher waits for the events of a burst
	// (an unpacked archive, a checkout) before it shares what they name;
	// a burst is shared at the latest 10×Debounce after its first event.
	// Default 20ms.
	Debounce time.Duration
	// MaxPending bounds the names kept between passes; past it the next
	// pass walks the whole tree instead. Default 4096.
	MaxPending int
	// Allow is asked before each pass: false (the conversation is
	// ending) skips it. Nil allows every pass.
	Allow func() bool
	// OnError is told what a pass could not do (nil: nothing).
	OnError func(error)
	// SettleDir is where the watcher makes the private directory of
	// Settle's markers (removed by Close). Default os.TempDir().
	SettleDir string
}

// Watcher shares what the user makes in a tree while it runs (Watch).
type Watcher struct {
	root string
	ids  IDs
	opts WatchOptions

	rootFd int
	in     *os.File // the inotify descriptor
	inFd   int
	dev    uint64

	mu       sync.Mutex
	watches  map[int32]string // wd -> directory relative to root
	degraded bool
	missed   bool // a watch could not be placed since the last full walk
	passes   int

	// Settle's markers: a private directory, watched by the same inotify
	// instance, where each Settle makes a file; its event comes after
	// every event queued before it (one queue per instance, in order).
	settleDir string
	settleWd  int32
	settleSeq uint64
	settles   map[string]chan struct{} // marker name -> its Settle

	stop, loopDone, readerDone chan struct{}
	once                       sync.Once
}

// settleMark prefixes a Settle marker's name among the names the reader
// passes to the loop (no name under the tree starts with a NUL).
const settleMark = "\x00settle:"

// watchMask: a name made or moved into a directory, and the directory's
// own end.
const watchMask = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_MOVE_SELF | unix.IN_DELETE_SELF | unix.IN_EXCL_UNLINK

// Watch starts watching the tree at root (a directory, not followed if a
// symlink) for what the user makes in it, and shares it with the agent as
// it comes (see above). It walks the tree once, directories only, to
// place its watches. Close stops it; every descriptor and goroutine it
// made ends with Close.
func Watch(root string, ids IDs, opts WatchOptions) (*Watcher, error) {
	if err := ids.Check(); err != nil {
		return nil, err
	}
	if opts.MaxWatches <= 0 {
		opts.MaxWatches = 16384
	}
	if opts.Debounce <= 0 {
		opts.Debounce = 20 * time.Millisecond
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = 4096
	}
	rfd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", root, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(rfd, &st); err != nil {
		unix.Close(rfd)
		return nil, fmt.Errorf("watch %s: %w", root, err)
	}
	ifd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		unix.Close(rfd)
		return nil, fmt.Errorf("watch %s: inotify: %w", root, err)
	}
	w := &Watcher{
		root: root, ids: ids, opts: opts,
		rootFd: rfd, inFd: ifd, dev: st.Dev,
		// Non-blocking: the runtime's poller waits on it, and Close
		// wakes the reader.
		in:         os.NewFile(uintptr(ifd), "inotify"),
		watches:    map[int32]string{},
		stop:       make(chan struct{}),
		loopDone:   make(chan struct{}),
		readerDone: make(chan struct{}),
	}
	fail := func(err error) (*Watcher, error) {
		w.in.Close()
		unix.Close(rfd)
		if w.settleDir != "" {
			os.RemoveAll(w.settleDir)
		}
		return nil, fmt.Errorf("watch %s: %w", root, err)
	}
	if w.settleDir, err = os.MkdirTemp(opts.SettleDir, "ohd-watch-settle-"); err != nil {
		return fail(err)
	}
	wd, err := unix.InotifyAddWatch(ifd, w.settleDir, unix.IN_CREATE|unix.IN_ONLYDIR|unix.IN_DONT_FOLLOW)
	if err != nil {
		return fail(fmt.Errorf("inotify: %w", err))
	}
	w.settleWd, w.settles = int32(wd), map[string]chan struct{}{}
	if err := walk(root, &watchPlacer{w: w}); err != nil {
		return fail(err)
	}
	go w.run()
	return w, nil
}

// Settle returns once what the user made in the tree before it was called
// is shared: the watcher reads every event the kernel queued until then
// and runs their pass at once, not after the debounce. A removal calls it
// before it marks the conversation (from then on no pass runs), so that a
// file the user saved a moment before `ohctl rm` is the agent's to read
// when the save reads the tree as the agent. It fails when ctx ends or the
// watcher is closed first; a pass that Allow refuses shares nothing.
func (w *Watcher) Settle(ctx context.Context) error {
	w.mu.Lock()
	if w.settles == nil {
		w.mu.Unlock()
		return errors.New("settle the tree watcher: it is closed")
	}
	w.settleSeq++
	name := strconv.FormatUint(w.settleSeq, 10)
	done := make(chan struct{})
	w.settles[name] = done
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		if w.settles != nil {
			delete(w.settles, name)
		}
		w.mu.Unlock()
	}()
	marker := filepath.Join(w.settleDir, name)
	f, err := os.OpenFile(marker, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("settle the tree watcher of %s: %w", w.root, err)
	}
	f.Close()
	defer os.Remove(marker)
	select {
	case <-done:
		return nil
	case <-w.stop:
		return fmt.Errorf("settle the tree watcher of %s: it is closed", w.root)
	case <-ctx.Done():
		return fmt.Errorf("settle the tree watcher of %s: %w", w.root, ctx.Err())
	}
}

// settled tells the Settles whose markers names holds (all waiting ones,
// when all) that their pass has run.
func (w *Watcher) settled(names []string, all bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for name, done := range w.settles {
		if all || slices.Contains(names, name) {
			close(done)
			delete(w.settles, name)
		}
	}
}

// Degraded reports whether some directory of the tree has no watch (the
// limit was reached, or the kernel dropped events): the periodic pass must
// then share files too (Apply), not only lend directories.
func (w *Watcher) Degraded() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.degraded
}

// Watches returns how many directories are watched.
func (w *Watcher) Watches() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.watches)
}

// Passes returns how many passes have shared something (for tests).
func (w *Watcher) Passes() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.passes
}

// Close stops the watcher and waits for its pass in progress, if any, to
// end: nothing is shared after Close returns.
func (w *Watcher) Close() error {
	var err error
	w.once.Do(func() {
		close(w.stop)
		<-w.loopDone       // no pass runs, no watch is added from here on
		err = w.in.Close() // wakes the reader; the kernel drops every watch
		<-w.readerDone
		unix.Close(w.rootFd)
		w.mu.Lock()
		w.settles = nil // a Settle from now on fails; those waiting see stop
		w.mu.Unlock()
		if rerr := os.RemoveAll(w.settleDir); err == nil {
			err = rerr
		}
	})
	return err
}

// add places a watch on the directory open as fd (rel under root); false
// when the watcher is out of watches.
func (w *Watcher) add(fd int, rel string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.watches) >= w.opts.MaxWatches {
		w.degraded, w.missed = true, true
		return false
	}
	// Through the descriptor (the directory the walk opened without
	// following a symlink, whatever was renamed since); no
	// IN_DONT_FOLLOW: the /proc link is the way to it.
	wd, err := unix.InotifyAddWatch(w.inFd, "/proc/self/fd/"+strconv.Itoa(fd), watchMask)
	if err != nil {
		// ENOSPC: the per-user limit (fs.inotify.max_user_watches).
		w.degraded, w.missed = true, true
		return false
	}
	w.watches[int32(wd)] = rel
	return true
}

// watchPlacer is Watch's first walk: a watch on every directory but .git
// ones.
type watchPlacer struct{ w *Watcher }

func (p *watchPlacer) wants(string) bool { return false }
func (p *watchPlacer) file(entry) error  { return nil }
func (p *watchPlacer) dir(e entry, fd int) (bool, error) {
	if e.name == ".git" && e.rel != "." {
		return false, nil
	}
	p.w.add(fd, e.rel)
	return true, nil
}

// run reads events until Close, and shares what they name after each
// burst.
func (w *Watcher) run() {
	defer close(w.loopDone)
	events := make(chan []string, 1)
	go func() {
		defer close(w.readerDone)
		buf := make([]byte, 64*1024)
		for {
			n, err := w.in.Read(buf)
			if err != nil {
				return // closed (or broken: the periodic pass remains)
			}
			names := w.parse(buf[:n])
			if len(names) == 0 {
				continue
			}
			select {
			case events <- names:
			case <-w.stop:
				return
			}
		}
	}()
	pending := map[string]bool{}
	full := false
	var first time.Time
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-w.stop:
			return
		case names := <-events:
			if len(pending) == 0 && !full {
				first = time.Now()
			}
			var settles []string
			overflow := false
			for _, n := range names {
				switch {
				case strings.HasPrefix(n, settleMark):
					settles = append(settles, strings.TrimPrefix(n, settleMark))
				case n == "":
					full, overflow = true, true // the queue overflowed: walk everything
				case len(pending) >= w.opts.MaxPending:
					full = true
				default:
					pending[n] = true
				}
			}
			if len(settles) > 0 || overflow && w.settling() {
				// A Settle waits: everything queued before its marker
				// has been read; share it now. After an overflow (a
				// marker may be lost) the whole tree is walked, which
				// covers every Settle waiting.
				timer.Stop()
				if len(pending) > 0 || full {
					w.pass(pending, full)
					pending, full = map[string]bool{}, false
				}
				w.settled(settles, overflow)
				continue
			}
			wait := w.opts.Debounce
			if late := 10*w.opts.Debounce - time.Since(first); late < wait {
				wait = max(late, 0)
			}
			timer.Reset(wait)
		case <-timer.C:
			w.pass(pending, full)
			pending, full = map[string]bool{}, false
		}
	}
}

// settling reports whether a Settle waits.
func (w *Watcher) settling() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.settles) > 0
}

// parse returns the paths (relative to root) the events in b name; ""
// stands for a queue overflow, settleMark and a name for a Settle's
// marker.
func (w *Watcher) parse(b []byte) []string {
	var out []string
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(b) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		size := unix.SizeofInotifyEvent + int(ev.Len)
		if size > len(b) {
			break
		}
		name := strings.TrimRight(string(b[unix.SizeofInotifyEvent:size]), "\x00")
		b = b[size:]
		switch {
		case ev.Mask&unix.IN_Q_OVERFLOW != 0:
			w.degraded = true
			out = append(out, "")
		case ev.Wd == w.settleWd:
			if ev.Mask&unix.IN_CREATE != 0 && name != "" {
				out = append(out, settleMark+name)
			}
		case ev.Mask&unix.IN_IGNORED != 0:
			delete(w.watches, ev.Wd)
		case ev.Mask&(unix.IN_MOVE_SELF|unix.IN_DELETE_SELF) != 0:
			// Gone, or moved: a move within the tree is a new directory
			// where it lands, watched again there (the same watch, its
			// path renewed); its events are ignored until then.
			delete(w.watches, ev.Wd)
		case ev.Mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
			dir, ok := w.watches[ev.Wd]
			if ok && name != "" && !strings.Contains(name, "/") {
				out = append(out, filepath.Join(dir, name))
			}
		}
	}
	return out
}

// pass shares what pending names (or, full, the whole tree).
func (w *Watcher) pass(pending map[string]bool, full bool) {
	if w.opts.Allow != nil && !w.opts.Allow() {
		return
	}
	var errs []error
	if full {
		w.mu.Lock()
		w.missed = false
		w.mu.Unlock()
		err := w.share(".", true)
		errs = append(errs, err)
		w.mu.Lock()
		if err == nil && !w.missed {
			// Every directory is watched again (after an overflow).
			w.degraded = false
		}
		w.mu.Unlock()
	} else {
		for rel := range pending {
			errs = append(errs, w.share(rel, false))
		}
	}
	w.mu.Lock()
	w.passes++
	w.mu.Unlock()
	if err := errors.Join(errs...); err != nil && w.opts.OnError != nil {
		w.opts.OnError(err)
	}
}

// share shares the entry rel (a path under root, resolved without
// following a symlink or leaving the tree's filesystem): a directory is
// lent and shared with all below it, and watched; a file of the user's
// gets the agent's access entry. full walks the whole tree again.
func (w *Watcher) share(rel string, full bool) error {
	parent, name, err := w.openParent(rel)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
			return nil // gone or replaced meanwhile
		}
		return fmt.Errorf("share %s: %w", filepath.Join(w.root, rel), err)
	}
	defer unix.Close(parent)
	e := entry{dirfd: parent, rel: rel, name: name}
	if err := unix.Fstatat(parent, name, &e.st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("share %s: %w", filepath.Join(w.root, rel), err)
	}
	v := &newShare{w: w, apply: applier{ids: w.ids, root: w.root}, lend: borrower{ids: w.ids, root: w.root}}
	if !e.isDir() {
		if e.name == ".git" || e.st.Uid == uint32(w.ids.Agent) {
			return nil
		}
		return v.file(e)
	}
	if e.st.Dev != w.dev {
		return nil
	}
	fd, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return nil
		}
		return fmt.Errorf("share %s: %w", filepath.Join(w.root, rel), err)
	}
	if full {
		e.rel = "."
	}
	return walkDir(w.root, e, fd, w.dev, v)
}

// openParent opens the directory holding rel beneath the tree's root,
// never following a symlink nor leaving its mount (openat2
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_XDEV), and returns it
// with rel's last name. For ".", the root's parent and the root's name.
func (w *Watcher) openParent(rel string) (int, string, error) {
	if rel == "." {
		fd, err := unix.Open(filepath.Dir(w.root), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		return fd, filepath.Base(w.root), err
	}
	if !filepath.IsLocal(rel) {
		return -1, "", unix.EXDEV
	}
	dir, name := filepath.Split(rel)
	dir = filepath.Clean(dir)
	fd, err := unix.Openat2(w.rootFd, dir, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_XDEV | unix.RESOLVE_NO_MAGICLINKS,
	})
	return fd, name, err
}

// newShare is the watcher's walk over what the user made: each directory
// of the user's lent (Borrow's) and shared (Apply's access and default
// ACLs), each directory watched, each file of the user's shared; what the
// agent made is only watched.
type newShare struct {
	w     *Watcher
	apply applier
	lend  borrower
}

func (s *newShare) wants(string) bool { return true }

func (s *newShare) file(e entry) error {
	if e.st.Uid == uint32(s.w.ids.Agent) {
		return nil // the agent's own: its owner entry lets it write
	}
	return s.apply.file(e)
}

func (s *newShare) dir(e entry, fd int) (bool, error) {
	if e.name == ".git" && e.rel != "." {
		return false, nil
	}
	if e.st.Uid != uint32(s.w.ids.Agent) {
		// Lent first (Borrow records the directory as the user made it,
		// which Release gives back), then Apply's access and default
		// ACLs.
		if _, err := s.lend.dir(e, fd); err != nil {
			return false, err
		}
		if _, err := s.apply.dir(e, fd); err != nil {
			return false, err
		}
	}
	s.w.add(fd, e.rel)
	return true, nil
}
