// Package testenv holds the helpers ohd's tests share: what the machine must
// provide (root, Docker, unshare) and how a missing piece is reported, and
// small builders for real git repositories.
//
// The rule for every requirement: outside CI a missing piece skips the test
// with the reason; with CI=true it fails the test, because CI must run every
// test and a silent skip there would hide a broken promise.
package testenv

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// CI reports whether the tests run in CI (CI=true), where nothing may skip.
func CI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v == "true" || v == "1" || v == "yes"
}

// Missing stops t because the machine lacks what it needs: a skip that names
// the reason outside CI, a failure in CI.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if CI() {
		t.Fatalf("CI=true and this test cannot run: "+format, args...)
	}
	t.Skipf("skipped: "+format, args...)
}

// RequireRoot stops t unless the test runs as root (uid 0).
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "needs root (uid 0) to change credentials or mount namespaces; run as root or in CI")
	}
}

// RequireUnshare stops t unless unshare(1) can create a private mount
// namespace here.
func RequireUnshare(t testing.TB) {
	t.Helper()
	RequireRoot(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		Missing(t, "unshare(1) not found (install util-linux)")
	}
	out, err := exec.Command("unshare", "--mount", "--propagation", "private", "true").CombinedOutput()
	if err != nil {
		Missing(t, "unshare --mount failed here: %v: %s", err, out)
	}
}

// RequireDocker stops t unless a Docker engine answers at DOCKER_HOST (or
// the default socket).
func RequireDocker(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("docker"); err != nil {
		Missing(t, "the docker CLI is not installed; the tests need a running Docker Engine")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", "version", "--format", "{{.Server.APIVersion}}").CombinedOutput()
	if err != nil {
		Missing(t, "Docker Engine not reachable (docker version: %v: %s); start Docker", err, bytes.TrimSpace(out))
	}
}

// UnprivilegedUID and UnprivilegedGID are the ids tests use for "another
// user": a repository owned by someone else, a client of another uid.
const (
	UnprivilegedUID = 1000
	UnprivilegedGID = 1000
)

// Git runs git with args in dir with a fixed, isolated environment and
// returns its trimmed standard output; a failure fails t.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	out, err := GitOutput(dir, args...)
	if err != nil {
		t.Fatalf("git %s (in %s): %v", strings.Join(args, " "), dir, err)
	}
	return out
}

// GitOutput is Git without a testing.TB: it returns the error, with git's
// standard error in it.
func GitOutput(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = GitEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", &gitError{err: err, stderr: strings.TrimSpace(stderr.String())}
	}
	return strings.TrimSpace(stdout.String()), nil
}

type gitError struct {
	err    error
	stderr string
}

func (e *gitError) Error() string { return e.err.Error() + ": " + e.stderr }
func (e *gitError) Unwrap() error { return e.err }

// GitEnv is the environment tests run git with: no user or system config,
// a fixed identity, so results do not depend on the machine.
func GitEnv() []string {
	return []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=/nonexistent",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=Test Author",
		"GIT_AUTHOR_EMAIL=author@example.com",
		"GIT_COMMITTER_NAME=Test Author",
		"GIT_COMMITTER_EMAIL=author@example.com",
		"GIT_TERMINAL_PROMPT=0",
		"LC_ALL=C",
	}
}

// RepoOptions says how NewRepo builds a repository.
type RepoOptions struct {
	// Branch is the initial branch name; "" means "main".
	Branch string
	// Owner, when non-nil, is the uid:gid the whole repository is chowned
	// to (tests that need this must RequireRoot first).
	Owner *Owner
}

// Owner is a uid:gid pair.
type Owner struct{ UID, GID int }

// NewRepo creates a git repository in a fresh temporary directory with one
// commit (README.md) and returns its canonical path (symlinks resolved).
func NewRepo(t testing.TB, opts RepoOptions) string {
	t.Helper()
	branch := opts.Branch
	if branch == "" {
		branch = "main"
	}
	dir := filepath.Join(TempDir(t), "repo")
	InitRepo(t, dir, branch)
	if opts.Owner != nil {
		ChownR(t, dir, opts.Owner.UID, opts.Owner.GID)
	}
	return dir
}

// InitRepo makes dir (and its parents) a git repository on branch with
// one commit (README.md).
func InitRepo(t testing.TB, dir, branch string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	Git(t, dir, "init", "-q", "-b", branch)
	WriteFile(t, filepath.Join(dir, "README.md"), "hello\n")
	Git(t, dir, "add", "README.md")
	Git(t, dir, "commit", "-q", "-m", "initial")
}

// TempDir returns a canonical temporary directory (symlinks resolved),
// traversable by other users so a repository inside it can belong to an
// unprivileged uid; it is removed when t ends.
func TempDir(t testing.TB) string {
	t.Helper()
	d := t.TempDir()
	d, err := filepath.EvalSymlinks(d)
	if err != nil {
		t.Fatal(err)
	}
	// t.TempDir's parents are 0700 under some Go versions; open the path
	// for traversal so a child running as another uid can reach it.
	for p := d; p != "/" && p != "."; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			break
		}
		if st.Mode().Perm()&0o011 != 0o011 && isOwnedByMe(st) {
			_ = os.Chmod(p, st.Mode().Perm()|0o711)
		}
		if p == os.TempDir() {
			break
		}
	}
	return d
}

func isOwnedByMe(st os.FileInfo) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	return ok && int(sys.Uid) == os.Geteuid()
}

// WriteFile writes content to path, creating parent directories.
func WriteFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// ChownR changes the owner of root and everything below it.
func ChownR(t testing.TB, root string, uid, gid int) {
	t.Helper()
	err := filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
	if err != nil {
		t.Fatalf("chown -R %d:%d %s: %v", uid, gid, root, err)
	}
}

// AsUser makes cmd run with the given uid and gid (and no supplementary
// groups). The caller must be root (RequireRoot).
func AsUser(cmd *exec.Cmd, uid, gid int) *exec.Cmd {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	return cmd
}

// GoBuild builds the Go package pkg (an import path of this module, e.g.
// "./cmd/ohctl" relative to the module root) into a fresh directory that
// other users can traverse, and returns the binary's path. env is added to
// the build's environment (e.g. "CGO_ENABLED=0").
func GoBuild(t testing.TB, pkg string, env ...string) string {
	t.Helper()
	root := ModuleRoot(t)
	dir := TempDir(t)
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return out
}

// ModuleRoot returns the directory holding this module's go.mod.
func ModuleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			t.Fatalf("no go.mod above %s", dir)
		}
	}
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers (a child
// process's output, a logger) and a reader in the test.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
