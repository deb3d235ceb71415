package testimage

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// kind is the type of a file system object in the image.
type kind int

const (
	kindDir kind = iota + 1
	kindFile
	kindSymlink
)

// entry is one file system object of the image's root filesystem, owned by
// root unless UID is set.
type entry struct {
	UID  int         // owner (and group), 0 for root
	Path string      // absolute and clean
	Kind kind        // what it is
	Mode fs.FileMode // permission bits, plus fs.ModeSticky for /tmp
	Link string      // symlink target, as written
	Src  string      // host file with the content (kindFile), or ""
	Data []byte      // literal content (kindFile) when Src is ""
}

// layout is the root filesystem being assembled: entries by path, and the
// PATH the image's environment sets.
type layout struct {
	entries map[string]*entry
	path    []string
}

// errConflict is returned when two sources want different objects at one
// path.
var errConflict = errors.New("conflicting entries")

func newLayout() *layout {
	return &layout{entries: map[string]*entry{}}
}

// add puts e into the layout, creating its parent directories (0755) when
// absent. Adding an identical object again is a no-op.
func (l *layout) add(e *entry) error {
	e.Path = filepath.Clean(e.Path)
	if !filepath.IsAbs(e.Path) {
		return fmt.Errorf("testimage: image path %q is not absolute", e.Path)
	}
	if parent := filepath.Dir(e.Path); parent != e.Path {
		if _, ok := l.entries[parent]; !ok {
			if err := l.add(&entry{Path: parent, Kind: kindDir, Mode: 0o755}); err != nil {
				return err
			}
		} else if l.entries[parent].Kind != kindDir {
			return fmt.Errorf("testimage: %s: parent %s is not a directory in the image: %w", e.Path, parent, errConflict)
		}
	}
	if old, ok := l.entries[e.Path]; ok {
		same := old.Kind == e.Kind && old.Link == e.Link && old.Src == e.Src && bytes.Equal(old.Data, e.Data)
		if !same {
			return fmt.Errorf("testimage: %s added twice, differently: %w", e.Path, errConflict)
		}
		if e.Kind == kindDir {
			old.Mode = e.Mode // a later explicit mode wins over an implied 0755
		}
		return nil
	}
	l.entries[e.Path] = e
	return nil
}

// sorted returns the entries in path order, so parents precede children.
func (l *layout) sorted() []*entry {
	out := make([]*entry, 0, len(l.entries))
	for _, e := range l.entries {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b *entry) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// clone returns a copy that can take more entries without changing l.
func (l *layout) clone() *layout {
	c := &layout{entries: make(map[string]*entry, len(l.entries)), path: slices.Clone(l.path)}
	for p, e := range l.entries {
		cp := *e
		c.entries[p] = &cp
	}
	return c
}

// maxSymlinks bounds symlink resolution, as the kernel's ELOOP does.
const maxSymlinks = 40

// host copies the host object at p into the image at the same path,
// mirroring every symlink met on the way (so /lib -> usr/lib or
// /bin/sh -> dash stay links) and the object it finally names.
func (l *layout) host(p string) error {
	return l.hostDepth(p, 0)
}

func (l *layout) hostDepth(p string, depth int) error {
	if depth > maxSymlinks {
		return fmt.Errorf("testimage: %s: too many levels of symbolic links", p)
	}
	p = filepath.Clean(p)
	if !filepath.IsAbs(p) {
		return fmt.Errorf("testimage: host path %q is not absolute", p)
	}
	if p == "/" {
		return nil
	}
	parts := strings.Split(p[1:], "/")
	cur := "/"
	for i, part := range parts {
		next := filepath.Join(cur, part)
		last := i == len(parts)-1
		fi, err := os.Lstat(next)
		if err != nil {
			return fmt.Errorf("testimage: copying %s from the host: %w", p, err)
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(next)
			if err != nil {
				return fmt.Errorf("testimage: %w", err)
			}
			if err := l.add(&entry{Path: next, Kind: kindSymlink, Mode: 0o777, Link: target}); err != nil {
				return err
			}
			resolved := target
			if !filepath.IsAbs(resolved) {
				resolved = filepath.Join(filepath.Dir(next), target)
			}
			return l.hostDepth(filepath.Join(append([]string{resolved}, parts[i+1:]...)...), depth+1)
		case fi.IsDir():
			if err := l.add(&entry{Path: next, Kind: kindDir, Mode: fi.Mode().Perm()}); err != nil {
				return err
			}
			cur = next
		case fi.Mode().IsRegular():
			if !last {
				return fmt.Errorf("testimage: copying %s from the host: %s is not a directory", p, next)
			}
			return l.add(&entry{Path: next, Kind: kindFile, Mode: fi.Mode().Perm(), Src: next})
		default:
			return fmt.Errorf("testimage: copying %s from the host: %s is a %s, not a file, directory or symlink", p, next, fi.Mode().Type())
		}
	}
	return nil
}

// hostTree copies the host directory root and everything below it.
func (l *layout) hostTree(root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return l.host(p)
	})
}

// Files the image gets verbatim. uid 1000 is the usual first user (and
// testenv.UnprivilegedUID); nobody is the generic unprivileged account.
const (
	etcPasswd = `root:x:0:0:root:/root:/bin/sh
user:x:1000:1000:ohd test user:/tmp:/bin/sh
openhands:x:10001:10001:openhands:/home/openhands:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
`
	etcGroup = `root:x:0:
user:x:1000:
openhands:x:10001:
nogroup:x:65534:
`
	etcNsswitch = `passwd: files
group: files
hosts: files dns
`
)

// templateDirs are where git looks for its templates on common
// distributions; the first that exists is copied.
var templateDirs = []string{"/usr/share/git-core/templates"}

// terminalTools are host programs copied into the image when the host has
// them (coreutils' stty and tty).
var terminalTools = []string{"stty", "tty"}

// clientTools are host programs copied into the image when the host has
// them: curl, the HTTP client the egress tests drive through the relay's
// forward proxy (.ci/run installs it).
var clientTools = []string{"curl"}

// hostLayout assembles the image's root filesystem apart from the Go
// binaries: a skeleton, passwd and group, the host's git (binary, helper
// programs that are git itself or shell scripts, templates), /bin/sh,
// stty, tty and curl, and every shared library those need, each at its host
// path.
func hostLayout(ctx context.Context) (*layout, error) {
	l := newLayout()
	for _, d := range []struct {
		path string
		mode fs.FileMode
	}{
		{"/", 0o755}, {"/etc", 0o755}, {"/dev", 0o755}, {"/proc", 0o555}, {"/sys", 0o555},
		{"/run", 0o755}, {"/run/ohd", 0o755}, {"/root", 0o700},
		{"/tmp", 0o777 | fs.ModeSticky}, {"/usr", 0o755}, {"/usr/local", 0o755}, {"/usr/local/bin", 0o755},
	} {
		if err := l.add(&entry{Path: d.path, Kind: kindDir, Mode: d.mode}); err != nil {
			return nil, err
		}
	}
	// The agent server's image: /workspace (and /workspace/project) belong
	// to its own user, uid 10001, and it starts in / (ref §6, Dockerfile
	// L150-151, L218-219): its relative default paths land there.
	for _, d := range []string{"/workspace", "/workspace/project", "/home/openhands"} {
		if err := l.add(&entry{Path: d, Kind: kindDir, Mode: 0o755, UID: ImageUID}); err != nil {
			return nil, err
		}
	}
	for p, data := range map[string]string{"/etc/passwd": etcPasswd, "/etc/group": etcGroup, "/etc/nsswitch.conf": etcNsswitch} {
		if err := l.add(&entry{Path: p, Kind: kindFile, Mode: 0o644, Data: []byte(data)}); err != nil {
			return nil, err
		}
	}
	l.path = []string{"/usr/local/bin", "/usr/bin", "/bin"}

	git, err := exec.LookPath("git")
	if err != nil {
		return nil, fmt.Errorf("testimage: the image copies the host's git, and there is none: %w", err)
	}
	if git, err = filepath.Abs(git); err != nil {
		return nil, fmt.Errorf("testimage: %w", err)
	}
	if err := l.host(git); err != nil {
		return nil, err
	}
	if dir := filepath.Dir(git); !slices.Contains(l.path, dir) {
		l.path = append(l.path, dir)
	}
	execDir, err := l.gitExecPath(ctx, git)
	if err != nil {
		return nil, err
	}
	for _, d := range templateDirs {
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			if err := l.hostTree(d); err != nil {
				return nil, err
			}
			break
		}
	}
	if err := l.host("/bin/sh"); err != nil {
		return nil, fmt.Errorf("testimage: the image needs a /bin/sh for git's helpers: %w", err)
	}
	progs := []string{git, "/bin/sh"}
	// git's smart-HTTP helper (and its libcurl), for the git relay's
	// tests: git inside clones over http from 127.0.0.1:8751.
	for _, name := range remoteHelpers {
		p := filepath.Join(execDir, name)
		if st, err := os.Lstat(p); err != nil || !st.Mode().IsRegular() {
			continue
		}
		if err := l.host(p); err != nil {
			return nil, err
		}
		progs = append(progs, p)
	}
	// stty and tty let tests see, from inside, the terminal ohctl exec -t
	// gives a command; curl is the egress tests' HTTP client. The image
	// does without them where the host has none.
	for _, name := range slices.Concat(terminalTools, clientTools) {
		p, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		if p, err = filepath.Abs(p); err != nil {
			return nil, fmt.Errorf("testimage: %w", err)
		}
		if err := l.host(p); err != nil {
			return nil, err
		}
		progs = append(progs, p)
	}
	for _, prog := range progs {
		libs, err := sharedLibraries(ctx, prog)
		if err != nil {
			return nil, err
		}
		for _, lib := range libs {
			if err := l.host(lib); err != nil {
				return nil, err
			}
		}
	}
	return l, nil
}

// remoteHelpers are the programs of git's exec-path the image keeps
// besides git itself: the smart-HTTP transport (with the libraries it
// needs), which the git relay's tests use inside a container.
var remoteHelpers = []string{"git-remote-http", "git-remote-https"}

// gitExecPath copies git's exec-path directory (git --exec-path), keeping
// only what works in the image: entries that are git itself (as symlinks
// to it), shell scripts and libraries, and symlinks to kept entries. Other
// programs (git-daemon, perl scripts) would drag in libraries or
// interpreters the tests do not need; the caller adds remoteHelpers. It
// returns the directory.
func (l *layout) gitExecPath(ctx context.Context, git string) (string, error) {
	cmd := exec.CommandContext(ctx, git, "--exec-path")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("testimage: %s --exec-path: %w", git, err)
	}
	dir := strings.TrimSpace(string(out))
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("testimage: %s --exec-path = %q, want an absolute path", git, dir)
	}
	if err := l.host(dir); err != nil {
		return "", err
	}
	dirents, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("testimage: %w", err)
	}
	gitSum, err := fileSum(git)
	if err != nil {
		return "", err
	}
	kept := map[string]bool{}
	var links []fs.DirEntry
	for _, d := range dirents {
		p := filepath.Join(dir, d.Name())
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			links = append(links, d)
		case d.Type().IsRegular():
			keep, asGit, err := classifyHelper(p, gitSum)
			if err != nil {
				return "", err
			}
			switch {
			case asGit:
				if p != git {
					if err := l.add(&entry{Path: p, Kind: kindSymlink, Mode: 0o777, Link: git}); err != nil {
						return "", err
					}
				}
				kept[d.Name()] = true
			case keep:
				if err := l.host(p); err != nil {
					return "", err
				}
				kept[d.Name()] = true
			}
		}
	}
	// Symlinks to kept entries, repeated for links to links.
	for changed := true; changed; {
		changed = false
		for _, d := range links {
			if kept[d.Name()] {
				continue
			}
			p := filepath.Join(dir, d.Name())
			target, err := os.Readlink(p)
			if err != nil {
				return "", fmt.Errorf("testimage: %w", err)
			}
			if !strings.Contains(target, "/") && kept[target] {
				if err := l.add(&entry{Path: p, Kind: kindSymlink, Mode: 0o777, Link: target}); err != nil {
					return "", err
				}
				kept[d.Name()] = true
				changed = true
			}
		}
	}
	return dir, nil
}

// classifyHelper says whether the exec-path file p is git itself (same
// content as the git binary, summed in gitSum) or a file to keep: a POSIX
// shell script or a text file without "#!" (a shell library).
func classifyHelper(p string, gitSum [sha256.Size]byte) (keep, asGit bool, err error) {
	f, err := os.Open(p)
	if err != nil {
		return false, false, fmt.Errorf("testimage: %w", err)
	}
	defer f.Close()
	head := make([]byte, 512)
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	if bytes.HasPrefix(head, []byte("\x7fELF")) {
		sum, err := fileSum(p)
		if err != nil {
			return false, false, err
		}
		return false, sum == gitSum, nil
	}
	if bytes.IndexByte(head, 0) >= 0 {
		return false, false, nil // some other binary
	}
	if !bytes.HasPrefix(head, []byte("#!")) {
		return true, false, nil
	}
	line, _, _ := bytes.Cut(head, []byte("\n"))
	fields := strings.Fields(strings.TrimPrefix(string(line), "#!"))
	return len(fields) > 0 && fields[0] == "/bin/sh", false, nil
}

// fileSum returns the SHA-256 of the file at p.
func fileSum(p string) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	f, err := os.Open(p)
	if err != nil {
		return sum, fmt.Errorf("testimage: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return sum, fmt.Errorf("testimage: reading %s: %w", p, err)
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

// sharedLibraries returns the host paths of the dynamic loader and every
// shared library prog loads (transitively), as ldd(1) reports them; none
// for a static program.
func sharedLibraries(ctx context.Context, prog string) ([]string, error) {
	f, err := elf.Open(prog)
	if err != nil {
		return nil, fmt.Errorf("testimage: %s is not an ELF program the image can run: %w", prog, err)
	}
	dynamic := false
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			dynamic = true
		}
	}
	f.Close()
	if !dynamic {
		return nil, nil
	}
	cmd := exec.CommandContext(ctx, "ldd", prog)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("testimage: ldd %s: %w: %s", prog, err, strings.TrimSpace(stderr.String()))
	}
	libs, err := parseLdd(string(out))
	if err != nil {
		return nil, fmt.Errorf("testimage: ldd %s: %w", prog, err)
	}
	return libs, nil
}

// errLibraryNotFound is returned by parseLdd for a "=> not found" line.
var errLibraryNotFound = errors.New("shared library not found")

// parseLdd returns the absolute paths in ldd's output: "name => /path
// (addr)" lines and the loader's "/path (addr)" line. Virtual objects
// (linux-vdso.so.1) have no path and are skipped; "=> not found" is an
// error.
func parseLdd(out string) ([]string, error) {
	var paths []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		name, rest, arrow := strings.Cut(line, "=>")
		if arrow {
			rest = strings.TrimSpace(rest)
			if strings.HasPrefix(rest, "not found") {
				return nil, fmt.Errorf("%s: %w", strings.TrimSpace(name), errLibraryNotFound)
			}
		} else {
			rest = line
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 || !strings.HasPrefix(fields[0], "/") {
			continue
		}
		p := filepath.Clean(fields[0])
		if !slices.Contains(paths, p) {
			paths = append(paths, p)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return paths, nil
}
