package worktree

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/worktree/journal"
	"github.com/ohd-dev/ohd/pkg/worktree/snapshot"
)

// hostSandbox runs `ohctl view` in this process, on the host: the unit
// tests' stand-in for the conversation's container (the integration tests
// run the real one). On the host the view resolves exactly as in the
// container because every path in it is the same on both sides.
type hostSandbox struct {
	wt    Worktree
	calls int
}

func (s *hostSandbox) View(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	s.calls++
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	// In the container the view is mounted at the common dir's path; on
	// the host it is at its own.
	args = append([]string{}, args...)
	for i, a := range args {
		if a == s.wt.CommonDir || strings.HasPrefix(a, s.wt.CommonDir+"/") {
			args[i] = s.wt.View + strings.TrimPrefix(a, s.wt.CommonDir)
		}
	}
	return RunView(ctx, args, stdin, stdout)
}

// newView is a manager, a new repository (dir) and a view of it for a new
// conversation: the start of most tests of the git view.
func newView(t testing.TB) (*Manager, string, Repo, Worktree) {
	t.Helper()
	m := newManager(t)
	dir := testenv.NewRepo(t, testenv.RepoOptions{})
	repo := mustInspect(t, m, dir)
	return m, dir, repo, addView(t, m, repo, newID(t), "")
}

func addView(t testing.TB, m *Manager, repo Repo, id, start string) Worktree {
	t.Helper()
	wt, err := m.Add(testCtx(t), AddOptions{Repo: repo, ConversationID: id, StartPoint: start, View: true})
	if err != nil {
		t.Fatalf("Add(%s, view): %v", id, err)
	}
	return wt
}

// inView runs git as the agent does in the container: in the worktree,
// with the view as its git dir (the container sees the view at the common
// dir's path; on the host the view's own admin dir stands for that).
func inView(t testing.TB, wt Worktree, args ...string) string {
	t.Helper()
	gitDir := filepath.Join(wt.View, "worktrees", wt.AdminID)
	out, err := testenv.GitOutput(wt.Path, append([]string{"-c", "safe.directory=*", "--git-dir=" + gitDir, "--work-tree=" + wt.Path}, args...)...)
	if err != nil {
		t.Fatalf("git %v in the view: %v", args, err)
	}
	return strings.TrimSpace(out)
}

func hostGit(t testing.TB, repo string, args ...string) string {
	t.Helper()
	return strings.TrimSpace(testenv.Git(t, repo, append([]string{"-c", "safe.directory=*"}, args...)...))
}

func TestViewSeed(t *testing.T) {
	m := newManager(t)
	dir := testenv.NewRepo(t, testenv.RepoOptions{})
	hostGit(t, dir, "tag", "v1")
	hostGit(t, dir, "update-ref", "refs/ohd/snapshots/other", "HEAD")
	hostGit(t, dir, "branch", "openhands/someone-else")
	repo := mustInspect(t, m, dir)
	wt := addView(t, m, repo, newID(t), "")
	if want, _ := viewPaths(wt.Path); wt.View != want {
		t.Fatalf("View = %q, want %q", wt.View, want)
	}
	refs := inView(t, wt, "for-each-ref", "--format=%(refname)")
	for _, want := range []string{"refs/heads/main", "refs/tags/v1", "refs/heads/" + wt.Branch} {
		if !strings.Contains(refs, want) {
			t.Errorf("view refs %q lack %s", refs, want)
		}
	}
	for _, hidden := range []string{"refs/ohd/", "openhands/someone-else"} {
		if strings.Contains(refs, hidden) {
			t.Errorf("view refs %q show %s", refs, hidden)
		}
	}
	if got := inView(t, wt, "rev-parse", "--abbrev-ref", "HEAD"); got != wt.Branch {
		t.Errorf("view HEAD = %q, want %q", got, wt.Branch)
	}
	if got := inView(t, wt, "status", "--porcelain"); got != "" {
		t.Errorf("status in the view = %q, want clean", got)
	}
	// Nothing was copied: the objects come through the alternate.
	if got := inView(t, wt, "count-objects", "-v"); !strings.Contains(got, "count: 0") || !strings.Contains(got, "size-pack: 0") {
		t.Errorf("the view's own store is not empty:\n%s", got)
	}
	// The host's own registration is intact and not prunable.
	for _, r := range worktreeList(t, dir) {
		if r.Path == wt.Path && r.Prunable {
			t.Errorf("host registration of %s is prunable: %s", wt.Path, r.PrunableReason)
		}
	}
}

func TestViewUpstreamTracksStartPoint(t *testing.T) {
	m := newManager(t)
	dir := testenv.NewRepo(t, testenv.RepoOptions{})
	hostGit(t, dir, "remote", "add", "origin", "https://example.invalid/repo.git")
	hostGit(t, dir, "update-ref", "refs/remotes/origin/main", "HEAD")
	hostGit(t, dir, "symbolic-ref", "refs/remotes/origin/HEAD", "refs/remotes/origin/main")
	before, _ := os.ReadFile(filepath.Join(dir, ".git", "config"))
	repo := mustInspect(t, m, dir)
	wt := addView(t, m, repo, newID(t), "")
	if got, want := inView(t, wt, "status", "-sb"), "## "+wt.Branch+"...origin/main"; !strings.HasPrefix(got, want) {
		t.Errorf("status -sb in the view = %q, want %q", got, want)
	}
	after, _ := os.ReadFile(filepath.Join(dir, ".git", "config"))
	if string(before) != string(after) {
		t.Errorf("the host's config changed:\n%s\n->\n%s", before, after)
	}
}

func TestPublishMovesHostBranch(t *testing.T) {
	m, dir, _, wt := newView(t)
	testenv.WriteFile(t, filepath.Join(wt.Path, "new.txt"), "agent work\n")
	inView(t, wt, "add", "new.txt")
	inView(t, wt, "-c", "user.name=agent", "-c", "user.email=a@x", "commit", "-qm", "agent commit")
	tip, err := m.ViewBranch(wt)
	if err != nil || !isHexID(tip) {
		t.Fatalf("ViewBranch = %q, %v", tip, err)
	}
	if host := hostGit(t, dir, "rev-parse", "refs/heads/"+wt.Branch); host != wt.StartCommit {
		t.Fatalf("before publishing the host branch is %s, want the start %s", host, wt.StartCommit)
	}
	sb := &hostSandbox{wt: wt}
	res, err := m.Publish(testCtx(t), wt, sb, tip, wt.StartCommit)
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if res.Published != tip || res.Conflict != "" {
		t.Errorf("Publish = %+v, want published %s", res, tip)
	}
	if host := hostGit(t, dir, "rev-parse", "refs/heads/"+wt.Branch); host != tip {
		t.Errorf("host branch = %s, want %s", host, tip)
	}
	if got := hostGit(t, dir, "show", tip+":new.txt"); got != "agent work" {
		t.Errorf("host show new.txt = %q", got)
	}
	hostGit(t, dir, "fsck", "--strict", "--no-dangling")

	// Someone moves the host branch: the next commit is kept, not forced.
	hostGit(t, dir, "update-ref", "refs/heads/"+wt.Branch, wt.StartCommit)
	inView(t, wt, "-c", "user.name=agent", "-c", "user.email=a@x", "commit", "-q", "--allow-empty", "-m", "second")
	tip2, _ := m.ViewBranch(wt)
	res, err = m.Publish(testCtx(t), wt, sb, tip2, tip)
	if err != nil {
		t.Fatalf("Publish after a host move: %v", err)
	}
	if res.Conflict == "" || res.Kept != KeptRef(wt.ConversationID, "refs/heads/"+wt.Branch) || res.Published != tip {
		t.Errorf("Publish after a host move = %+v, want a conflict and the commit kept", res)
	}
	if host := hostGit(t, dir, "rev-parse", "refs/heads/"+wt.Branch); host != wt.StartCommit {
		t.Errorf("the moved host branch was overwritten: %s", host)
	}
	if kept := hostGit(t, dir, "rev-parse", res.Kept); kept != tip2 {
		t.Errorf("%s = %s, want %s", res.Kept, kept, tip2)
	}
}

func TestPublishRefusesCorruptObjects(t *testing.T) {
	m, dir, _, wt := newView(t)
	testenv.WriteFile(t, filepath.Join(wt.Path, "f.txt"), "content\n")
	inView(t, wt, "add", "f.txt")
	inView(t, wt, "-c", "user.name=agent", "-c", "user.email=a@x", "commit", "-qm", "c")
	tip, _ := m.ViewBranch(wt)
	blob := inView(t, wt, "rev-parse", tip+":f.txt")
	// The agent replaces the blob's loose object with other (valid zlib)
	// content: its hash no longer matches its name.
	obj := filepath.Join(wt.View, "objects", blob[:2], blob[2:])
	other := filepath.Join(t.TempDir(), "o")
	testenv.WriteFile(t, other, "something else\n")
	oid := strings.TrimSpace(testenv.Git(t, dir, "-c", "safe.directory=*", "--git-dir="+wt.View, "hash-object", "-w", other))
	if err := os.Chmod(obj, 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(wt.View, "objects", oid[:2], oid[2:]))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(obj, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = m.Publish(testCtx(t), wt, &hostSandbox{wt: wt}, tip, wt.StartCommit)
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("Publish of a corrupt object = %v, want ErrRefused", err)
	}
	if host := hostGit(t, dir, "rev-parse", "refs/heads/"+wt.Branch); host != wt.StartCommit {
		t.Errorf("the host branch moved to %s", host)
	}
	if _, err := testenv.GitOutput(dir, "-c", "safe.directory=*", "cat-file", "-e", blob); err == nil {
		t.Errorf("the corrupt object %s was imported", blob)
	}
	hostGit(t, dir, "fsck", "--strict", "--no-dangling")
}

func TestViewBranchNeverLeavesTheView(t *testing.T) {
	m := newManager(t)
	repo := mustInspect(t, m, testenv.NewRepo(t, testenv.RepoOptions{}))
	wt := addView(t, m, repo, newID(t), "")
	secret := filepath.Join(t.TempDir(), "token")
	testenv.WriteFile(t, secret, strings.Repeat("a", 40)+"\n")
	// packed-refs replaced by a symlink to a file outside the view.
	pr := filepath.Join(wt.View, "packed-refs")
	if err := os.Remove(pr); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, pr); err != nil {
		t.Fatal(err)
	}
	if got, err := m.ViewBranch(wt); got != "" || err != nil {
		t.Errorf("ViewBranch through a symlinked packed-refs = %q, %v, want nothing", got, err)
	}
	// refs/heads/openhands replaced by a symlink to a directory outside.
	outside := t.TempDir()
	testenv.WriteFile(t, filepath.Join(outside, wt.ConversationID), strings.Repeat("b", 40)+"\n")
	dirLink := filepath.Join(wt.View, "refs", "heads", "openhands")
	_ = os.RemoveAll(dirLink)
	if err := os.Symlink(outside, dirLink); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.ViewBranch(wt); got == strings.Repeat("b", 40) {
		t.Errorf("ViewBranch followed a symlinked directory out of the view")
	}
}

func TestRemoveWithViewKeepsEverything(t *testing.T) {
	m := newManager(t)
	dir := testenv.NewRepo(t, testenv.RepoOptions{})
	testenv.WriteFile(t, filepath.Join(dir, ".gitignore"), "*.log\n")
	hostGit(t, dir, "add", ".gitignore")
	hostGit(t, dir, "commit", "-qm", "ignore logs")
	repo := mustInspect(t, m, dir)
	wt := addView(t, m, repo, newID(t), "")
	commit := func(msg string) {
		inView(t, wt, "-c", "user.name=agent", "-c", "user.email=a@x", "commit", "-q", "--allow-empty", "-m", msg)
	}
	commit("on the branch")
	inView(t, wt, "switch", "-q", "-c", "side")
	commit("on a side branch")
	inView(t, wt, "tag", "agent-tag")
	inView(t, wt, "switch", "-q", wt.Branch)
	testenv.WriteFile(t, filepath.Join(wt.Path, "stashed.txt"), "stash me\n")
	inView(t, wt, "add", "stashed.txt")
	inView(t, wt, "-c", "user.name=agent", "-c", "user.email=a@x", "stash", "-q")
	inView(t, wt, "branch", "at-host-commit", wt.StartCommit) // the host has the commit, not the name: kept (issue 19)
	testenv.WriteFile(t, filepath.Join(wt.Path, "wip.txt"), "uncommitted\n")
	testenv.WriteFile(t, filepath.Join(wt.Path, "build.log"), "0123456789")

	res, err := m.Remove(testCtx(t), wt, RemoveOptions{Sandbox: &hostSandbox{wt: wt}, Published: wt.StartCommit})
	if err != nil {
		t.Fatalf("Remove: %v", err)
	}
	id := wt.ConversationID
	wantKept := []string{KeptRef(id, "refs/heads/at-host-commit"), KeptRef(id, "refs/heads/side"), KeptRef(id, "refs/stash"), KeptRef(id, "refs/tags/agent-tag")}
	if strings.Join(res.Kept, " ") != strings.Join(wantKept, " ") {
		t.Errorf("Kept = %v, want %v", res.Kept, wantKept)
	}
	if res.SnapshotRef != SnapshotRef(id) || !res.BranchKept {
		t.Errorf("Remove = %+v, want a snapshot and the branch kept", res)
	}
	if res.IgnoredFiles != 1 || res.IgnoredBytes != 10 {
		t.Errorf("ignored = %d files, %d bytes, want 1, 10", res.IgnoredFiles, res.IgnoredBytes)
	}
	if got := hostGit(t, dir, "log", "-1", "--format=%s", "refs/heads/"+wt.Branch); got != "on the branch" {
		t.Errorf("host branch tip = %q, want the agent's commit", got)
	}
	if got := hostGit(t, dir, "show", res.SnapshotRef+":wip.txt"); got != "uncommitted" {
		t.Errorf("snapshot wip.txt = %q", got)
	}
	if got := hostGit(t, dir, "show", KeptRef(id, "refs/stash")+":stashed.txt"); got != "stash me" {
		t.Errorf("kept stash = %q", got)
	}
	hostGit(t, dir, "fsck", "--strict", "--no-dangling")
	if ok, _ := lexists(filepath.Dir(wt.Path)); ok {
		t.Errorf("%s still exists", filepath.Dir(wt.Path))
	}
	for _, r := range worktreeList(t, dir) {
		if r.Path == wt.Path {
			t.Errorf("registration of %s left behind", wt.Path)
		}
	}
	// --discard on a second conversation deletes what it kept.
	wt2 := addView(t, m, repo, newID(t), "")
	inView(t, wt2, "-c", "user.name=agent", "-c", "user.email=a@x", "commit", "-q", "--allow-empty", "-m", "x")
	if _, err := m.Remove(testCtx(t), wt2, RemoveOptions{Discard: true}); err != nil {
		t.Fatalf("Remove --discard: %v", err)
	}
	if out := hostGit(t, dir, "for-each-ref", KeptPrefix(wt2.ConversationID), "refs/heads/"+wt2.Branch); out != "" {
		t.Errorf("--discard left %s", out)
	}
}

func TestRemoveUndoTakesNoSnapshot(t *testing.T) {
	m, dir, _, wt := newView(t)
	// A half-made checkout: files missing.
	entries, _ := os.ReadDir(wt.Path)
	for _, e := range entries {
		if e.Name() != ".git" {
			_ = os.RemoveAll(filepath.Join(wt.Path, e.Name()))
		}
	}
	res, err := m.Remove(testCtx(t), wt, RemoveOptions{Undo: true})
	if err != nil {
		t.Fatalf("Remove(Undo): %v", err)
	}
	if res.SnapshotRef != "" || !res.BranchDeleted {
		t.Errorf("Remove(Undo) = %+v, want no snapshot and the branch deleted", res)
	}
	if out := hostGit(t, dir, "for-each-ref", "refs/ohd/", "refs/heads/openhands/"); out != "" {
		t.Errorf("undo left refs: %s", out)
	}
}

func TestRestoreBringsTheWorkBack(t *testing.T) {
	m, _, repo, wt := newView(t)
	testenv.WriteFile(t, filepath.Join(wt.Path, "committed.txt"), "c\n")
	inView(t, wt, "add", "committed.txt")
	inView(t, wt, "-c", "user.name=agent", "-c", "user.email=a@x", "commit", "-qm", "agent commit")
	testenv.WriteFile(t, filepath.Join(wt.Path, "wip.txt"), "uncommitted\n")
	if err := os.Remove(filepath.Join(wt.Path, "README.md")); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Remove(testCtx(t), wt, RemoveOptions{Sandbox: &hostSandbox{wt: wt}, Published: wt.StartCommit}); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	into := filepath.Join(testenv.TempDir(t), "restored")
	res, err := m.Restore(testCtx(t), RestoreOptions{CommonDir: repo.CommonDir, Repo: repo.TopLevel, ConversationID: wt.ConversationID, StartCommit: wt.StartCommit, Into: into})
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if res.Path != into || res.Branch != wt.Branch || res.Snapshot == "" {
		t.Errorf("Restore = %+v", res)
	}
	if got := hostGit(t, into, "log", "-1", "--format=%s"); got != "agent commit" {
		t.Errorf("restored HEAD = %q", got)
	}
	status := hostGit(t, into, "status", "--porcelain")
	for _, want := range []string{"D README.md", "?? wip.txt"} {
		if !strings.Contains(status, want) {
			t.Errorf("restored status %q lacks %q", status, want)
		}
	}
	// Asked again for the same path (its answer lost), it is done.
	if again, err := m.Restore(testCtx(t), RestoreOptions{CommonDir: repo.CommonDir, Repo: repo.TopLevel, ConversationID: wt.ConversationID, Into: into}); err != nil || !again.Already {
		t.Errorf("Restore again into the same path = %+v, %v, want it already restored there", again, err)
	}
	// An existing path that is not the restore's is refused.
	taken := testenv.TempDir(t)
	if _, err := m.Restore(testCtx(t), RestoreOptions{CommonDir: repo.CommonDir, Repo: repo.TopLevel, ConversationID: wt.ConversationID, Into: taken}); !errors.Is(err, ErrExists) {
		t.Errorf("Restore into an existing path = %v, want ErrExists", err)
	}
}

func TestViewBranchPackedAndLoose(t *testing.T) {
	m := newManager(t)
	repo := mustInspect(t, m, testenv.NewRepo(t, testenv.RepoOptions{}))
	wt := addView(t, m, repo, newID(t), "")
	if got, err := m.ViewBranch(wt); got != wt.StartCommit || err != nil {
		t.Fatalf("ViewBranch of the seeded view = %q, %v, want the start commit", got, err)
	}
	for i := range 3 {
		inView(t, wt, "-c", "user.name=a", "-c", "user.email=a@x", "commit", "-q", "--allow-empty", "-m", "c")
		if i%2 == 0 {
			inView(t, wt, "pack-refs", "--all") // only in packed-refs now
		}
		want := inView(t, wt, "rev-parse", "HEAD")
		if got, err := m.ViewBranch(wt); got != want || err != nil {
			t.Errorf("round %d: ViewBranch = %q, %v, want %s", i, got, err, want)
		}
	}
}

// TestPublishLargePack: a publish of 100 objects or more goes through
// index-pack (kept while the ref moves, the .keep dropped after).
func TestPublishLargePack(t *testing.T) {
	m, dir, repo, wt := newView(t)
	for i := range 150 {
		testenv.WriteFile(t, filepath.Join(wt.Path, "many", fmt.Sprintf("f%03d.txt", i)), fmt.Sprintf("file %d\n", i))
	}
	inView(t, wt, "add", "many")
	inView(t, wt, "-c", "user.name=a", "-c", "user.email=a@x", "commit", "-qm", "many files")
	tip, _ := m.ViewBranch(wt)
	if _, err := m.Publish(testCtx(t), wt, &hostSandbox{wt: wt}, tip, wt.StartCommit); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if got := hostGit(t, dir, "rev-parse", "refs/heads/"+wt.Branch); got != tip {
		t.Errorf("host branch = %s, want %s", got, tip)
	}
	keeps, _ := filepath.Glob(filepath.Join(repo.CommonDir, "objects", "pack", "*.keep"))
	if len(keeps) != 0 {
		t.Errorf(".keep files left: %v", keeps)
	}
	packs, _ := filepath.Glob(filepath.Join(repo.CommonDir, "objects", "pack", "*.pack"))
	if len(packs) != 1 {
		t.Errorf("packs after a 150-object publish: %v, want one (index-pack)", packs)
	}
	hostGit(t, dir, "fsck", "--strict", "--no-dangling")
}

// TestPublishRefusesAnOversizedPack: a conversation cannot fill the host's
// disk through one publish: an import over Options.MaxPackBytes is refused
// and nothing moves.
func TestPublishRefusesAnOversizedPack(t *testing.T) {
	dir := testenv.TempDir(t)
	m, err := New(Options{Root: filepath.Join(dir, "worktrees"), LockDir: filepath.Join(dir, "locks"), MaxPackBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	host := testenv.NewRepo(t, testenv.RepoOptions{})
	repo := mustInspect(t, m, host)
	wt := addView(t, m, repo, newID(t), "")
	big := make([]byte, 64<<10)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wt.Path, "big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	inView(t, wt, "add", "big.bin")
	inView(t, wt, "-c", "user.name=a", "-c", "user.email=a@x", "commit", "-qm", "big")
	tip, _ := m.ViewBranch(wt)
	if _, err := m.Publish(testCtx(t), wt, &hostSandbox{wt: wt}, tip, wt.StartCommit); !errors.Is(err, ErrRefused) {
		t.Fatalf("Publish of a pack over the limit = %v, want ErrRefused", err)
	}
	if got := hostGit(t, host, "rev-parse", "refs/heads/"+wt.Branch); got != wt.StartCommit {
		t.Errorf("host branch moved to %s", got)
	}
	if _, err := testenv.GitOutput(host, "-c", "safe.directory=*", "cat-file", "-e", tip); err == nil {
		t.Errorf("the oversized commit %s was imported", tip)
	}
}

// TestRemoveWithViewSavesNestedRepos: a nested repository the agent made
// (a clone with local work, `git init` by a project generator, one inside
// another) is saved as its files, its own ignore rules applied and its .git
// left out; a submodule the agent staged stays a gitlink, as git has it.
func TestRemoveWithViewSavesNestedRepos(t *testing.T) {
	m, dir, _, wt := newView(t)
	at := func(rel string) string { return filepath.Join(wt.Path, rel) }
	git := func(d string, args ...string) {
		testenv.Git(t, d, append([]string{"-c", "user.name=a", "-c", "user.email=a@x"}, args...)...)
	}
	// A clone-like repository with a commit, then local work in it.
	git(wt.Path, "init", "-q", "lib")
	testenv.WriteFile(t, at("lib/a.txt"), "committed\n")
	testenv.WriteFile(t, at("lib/.gitignore"), "build/\n")
	git(at("lib"), "add", ".")
	git(at("lib"), "commit", "-qm", "lib")
	testenv.WriteFile(t, at("lib/a.txt"), "changed in lib\n")
	testenv.WriteFile(t, at("lib/new.txt"), "new in lib\n")
	testenv.WriteFile(t, at("lib/build/out.o"), "ignored by lib\n")
	// One inside it, without a commit.
	git(at("lib"), "init", "-q", "deep")
	testenv.WriteFile(t, at("lib/deep/d.txt"), "deep\n")
	// A generator's fresh repository.
	git(wt.Path, "init", "-q", "app")
	testenv.WriteFile(t, at("app/main.go"), "package main\n")
	// A submodule the agent staged: a gitlink in its index.
	git(wt.Path, "init", "-q", "sm")
	git(at("sm"), "commit", "-q", "--allow-empty", "-m", "sm")
	inView(t, wt, "add", "sm")
	smHead := strings.TrimSpace(testenv.Git(t, at("sm"), "rev-parse", "HEAD"))

	res, err := m.Remove(testCtx(t), wt, RemoveOptions{Sandbox: &hostSandbox{wt: wt}, Published: wt.StartCommit})
	if err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if res.SnapshotRef == "" {
		t.Fatalf("Remove = %+v, want a snapshot", res)
	}
	want := map[string]string{
		"lib/a.txt":      "changed in lib",
		"lib/new.txt":    "new in lib",
		"lib/.gitignore": "build/",
		"lib/deep/d.txt": "deep",
		"app/main.go":    "package main",
	}
	for path, content := range want {
		if got := hostGit(t, dir, "show", res.SnapshotRef+":"+path); got != content {
			t.Errorf("snapshot %s = %q, want %q", path, got, content)
		}
	}
	files := hostGit(t, dir, "ls-tree", "-r", "--name-only", res.SnapshotRef)
	for _, f := range strings.Split(files, "\n") {
		if strings.Contains("/"+f, "/.git/") || strings.HasPrefix(f, "lib/build/") {
			t.Errorf("snapshot holds %s", f)
		}
	}
	if got := hostGit(t, dir, "ls-tree", res.SnapshotRef, "sm"); !strings.HasPrefix(got, "160000 commit "+smHead) {
		t.Errorf("staged submodule in the snapshot = %q, want a gitlink to %s", got, smHead)
	}
	if got, want := strings.Join(res.NestedRepos, " "), "app lib lib/deep"; got != want {
		t.Errorf("NestedRepos = %q, want %q", got, want)
	}
	if !strings.Contains(removeMessage(wt, RemoveOptions{}, res, ""), "app, lib, lib/deep") {
		t.Errorf("the removal message does not name the nested repositories: %s", removeMessage(wt, RemoveOptions{}, res, ""))
	}
	hostGit(t, dir, "fsck", "--strict", "--no-dangling")
}

// TestRemoveWithViewManyHostTags: the view is seeded with every host ref,
// so a repository with tens of thousands of tags hands them all back at
// removal; the removal must still save the agent's work (it once sent
// them all as tips to the sandbox's pack, whose input limit truncated
// them, and on the rev-list command lines, past the argv limit).
func TestRemoveWithViewManyHostTags(t *testing.T) {
	m := newManager(t)
	dir := testenv.NewRepo(t, testenv.RepoOptions{})
	// 30000 tags on as many commits, made in one fast-import.
	var in strings.Builder
	for i := 1; i <= 30000; i++ {
		fmt.Fprintf(&in, "commit refs/heads/history\nmark :%d\ncommitter h <h@x> %d +0000\ndata 0\n", i, 1700000000+i)
		if i > 1 {
			fmt.Fprintf(&in, "from :%d\n", i-1)
		}
		fmt.Fprintf(&in, "\nreset refs/tags/release-%06d\nfrom :%d\n\n", i, i)
	}
	cmd := exec.Command("git", "-c", "safe.directory=*", "fast-import", "--quiet")
	cmd.Dir, cmd.Stdin = dir, strings.NewReader(in.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("create tags: %v: %s", err, out)
	}
	hostGit(t, dir, "pack-refs", "--all")
	repo := mustInspect(t, m, dir)
	wt := addView(t, m, repo, newID(t), "")
	inView(t, wt, "-c", "user.name=agent", "-c", "user.email=a@x", "commit", "-q", "--allow-empty", "-m", "agent work")
	inView(t, wt, "tag", "agent-tag")
	testenv.WriteFile(t, filepath.Join(wt.Path, "wip.txt"), "uncommitted\n")

	res, err := m.Remove(testCtx(t), wt, RemoveOptions{Sandbox: &hostSandbox{wt: wt}, Published: wt.StartCommit})
	if err != nil {
		t.Fatalf("Remove with 30000 host tags: %v", err)
	}
	if got := hostGit(t, dir, "log", "-1", "--format=%s", "refs/heads/"+wt.Branch); got != "agent work" {
		t.Errorf("host branch tip = %q, want the agent's commit", got)
	}
	if got := hostGit(t, dir, "show", res.SnapshotRef+":wip.txt"); got != "uncommitted" {
		t.Errorf("snapshot wip.txt = %q", got)
	}
	if want := []string{KeptRef(wt.ConversationID, "refs/tags/agent-tag")}; strings.Join(res.Kept, " ") != strings.Join(want, " ") {
		t.Errorf("Kept = %v, want %v", res.Kept, want)
	}
}

// TestReadRevsRefusesOversizedInput: more revisions than the limit is an
// error, not a silently shorter list.
func TestReadRevsRefusesOversizedInput(t *testing.T) {
	line := strings.Repeat("a", 40) + "\n"
	// Exactly 1 MiB of whole lines, then more: a cut at the limit falls on
	// a line boundary, so only a size check can tell.
	in := strings.Repeat(line, (1<<20)/len(line)) + strings.Repeat("\n", (1<<20)%len(line)) + line
	if _, err := readRevs(strings.NewReader(in)); err == nil {
		t.Fatal("readRevs(over 1 MiB) = nil error, want one")
	}
	got, err := readRevs(strings.NewReader(line + "^" + line))
	if err != nil || got != line+"^"+line {
		t.Fatalf("readRevs(two lines) = %q, %v", got, err)
	}
}

// TestRemoveSavedKeepsEverySaveViewField: Remove after SaveView (the path
// of a running conversation) reports what SaveView saved, the nested
// repositories included.
func TestRemoveSavedKeepsEverySaveViewField(t *testing.T) {
	m, _, _, wt := newView(t)
	testenv.Git(t, wt.Path, "init", "-q", "app")
	testenv.WriteFile(t, filepath.Join(wt.Path, "app", "main.go"), "package main\n")
	inView(t, wt, "tag", "agent-tag", "HEAD")
	inView(t, wt, "-c", "user.name=agent", "-c", "user.email=a@x", "commit", "-q", "--allow-empty", "-m", "agent work")
	inView(t, wt, "switch", "-q", "-c", "side")
	inView(t, wt, "-c", "user.name=agent", "-c", "user.email=a@x", "commit", "-q", "--allow-empty", "-m", "side work")
	inView(t, wt, "switch", "-q", wt.Branch)
	saved, err := m.SaveView(testCtx(t), wt, &hostSandbox{wt: wt}, wt.StartCommit)
	if err != nil {
		t.Fatalf("SaveView: %v", err)
	}
	if len(saved.NestedRepos) == 0 || saved.SnapshotRef == "" || len(saved.Kept) == 0 {
		t.Fatalf("SaveView = %+v, want nested repos, a snapshot and kept refs", saved)
	}
	res, err := m.Remove(testCtx(t), wt, RemoveOptions{Saved: &saved, Published: saved.Published})
	if err != nil {
		t.Fatalf("Remove(Saved): %v", err)
	}
	if strings.Join(res.NestedRepos, " ") != "app" {
		t.Errorf("Remove(Saved).NestedRepos = %v, want [app]", res.NestedRepos)
	}
	if res.SnapshotRef != saved.SnapshotRef || strings.Join(res.Kept, " ") != strings.Join(saved.Kept, " ") || res.Published != saved.Published {
		t.Errorf("Remove(Saved) = %+v, want SaveView's %+v", res, saved)
	}
	if !res.BranchKept || res.CommitsBeyondStart != 1 {
		t.Errorf("Remove(Saved) branch = kept %v, %d beyond start, want kept, 1", res.BranchKept, res.CommitsBeyondStart)
	}
	if !strings.Contains(res.Message, "nested repositories saved in the snapshot as files") {
		t.Errorf("message does not name the nested repositories: %s", res.Message)
	}
}

// plantSandbox is a hostSandbox whose collect answer the test rewrites,
// as a hostile agent controlling the container could.
type plantSandbox struct {
	hostSandbox
	plant func(*Collected)
}

func (s *plantSandbox) View(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) == 0 || args[0] != "collect" {
		return s.hostSandbox.View(ctx, args, stdin, stdout)
	}
	var out strings.Builder
	if err := s.hostSandbox.View(ctx, args, stdin, &out); err != nil {
		return err
	}
	var c Collected
	if err := json.Unmarshal([]byte(out.String()), &c); err != nil {
		return err
	}
	s.plant(&c)
	return json.NewEncoder(stdout).Encode(c)
}

// TestRemoveWithViewChecksPlantedNestedRepos: the nested repositories the
// sandbox reports are the agent's word: the host keeps only clean relative
// paths of directories of the snapshot, at most snapshot.MaxNested of them.
func TestRemoveWithViewChecksPlantedNestedRepos(t *testing.T) {
	m, _, _, wt := newView(t)
	var dirs []string
	for i := 0; i < snapshot.MaxNested+20; i++ {
		d := fmt.Sprintf("d%03d", i)
		testenv.WriteFile(t, filepath.Join(wt.Path, d, "f.txt"), "x\n")
		dirs = append(dirs, d)
	}
	bad := []string{"", ".", "..", "../etc", "/etc", "d000/../d001", "d000/", "./d000", "d000//x",
		"d000/f.txt", "missing", "red\x1b[31m", "line\nbreak", "rtl\u202eoverride", "bad\xffutf8"}
	sb := &plantSandbox{hostSandbox: hostSandbox{wt: wt}, plant: func(c *Collected) {
		c.NestedRepos = append(append([]string{}, bad...), dirs...)
	}}
	res, err := m.Remove(testCtx(t), wt, RemoveOptions{Sandbox: sb, Published: wt.StartCommit})
	if err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if res.SnapshotRef == "" {
		t.Fatalf("Remove = %+v, want a snapshot", res)
	}
	if len(res.NestedRepos) != snapshot.MaxNested {
		t.Errorf("NestedRepos has %d entries, want at most %d", len(res.NestedRepos), snapshot.MaxNested)
	}
	for _, n := range res.NestedRepos {
		if !slices.Contains(dirs, n) {
			t.Errorf("NestedRepos holds %q, not a directory of the snapshot", n)
		}
	}
	if strings.ContainsAny(res.Message, "\x1b\n\u202e") {
		t.Errorf("the removal message carries control characters: %q", res.Message)
	}
}

// TestRestoreInFull (issue 19, acceptance 8): the index (what was
// staged), the stash and the side branches of the view come back, and a
// second restore says where the work already is.
func TestRestoreInFull(t *testing.T) {
	m, dir, repo, wt := newView(t)
	ident := []string{"-c", "user.name=agent", "-c", "user.email=a@x"}
	// A side branch with a commit of its own, and one named like a host
	// branch (main) on another commit: the name is taken on the host.
	inView(t, wt, append(ident, "commit", "-q", "--allow-empty", "-m", "on feature")...)
	inView(t, wt, "branch", "feature")
	inView(t, wt, "update-ref", "refs/heads/main", "HEAD")
	inView(t, wt, "reset", "-q", "--hard", "HEAD~1")
	// Two stash entries.
	testenv.WriteFile(t, filepath.Join(wt.Path, "stashed.txt"), "older\n")
	inView(t, wt, "add", "stashed.txt")
	inView(t, wt, append(ident, "stash", "push", "-q", "-m", "older stash")...)
	testenv.WriteFile(t, filepath.Join(wt.Path, "stashed.txt"), "stashed\n")
	inView(t, wt, "add", "stashed.txt")
	inView(t, wt, append(ident, "stash", "push", "-q", "-m", "agent stash")...)
	// Staged, all of it (index == working tree), and one more file staged
	// beside an unstaged change.
	testenv.WriteFile(t, filepath.Join(wt.Path, "staged.txt"), "staged\n")
	inView(t, wt, "add", "staged.txt")
	testenv.WriteFile(t, filepath.Join(wt.Path, "README.md"), "unstaged change\n")
	testenv.WriteFile(t, filepath.Join(wt.Path, "new.txt"), "untracked\n")
	res0, err := m.Remove(testCtx(t), wt, RemoveOptions{Sandbox: &hostSandbox{wt: wt}, Published: wt.StartCommit})
	if err != nil {
		t.Fatalf("Remove: %v", err)
	}
	t.Logf("kept: %v", res0.Kept)
	into := filepath.Join(testenv.TempDir(t), "restored")
	opts := RestoreOptions{CommonDir: repo.CommonDir, Repo: repo.TopLevel, ConversationID: wt.ConversationID, StartCommit: wt.StartCommit, Into: into}
	res, err := m.Restore(testCtx(t), opts)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	status := hostGit(t, into, "status", "--porcelain")
	for _, want := range []string{"A  staged.txt", "M README.md", "?? new.txt"} {
		if !strings.Contains(status, want) {
			t.Errorf("restored status lacks %q:\n%s", want, status)
		}
	}
	if strings.Contains(status, "M  README.md") {
		t.Errorf("the unstaged README.md came back staged:\n%s", status)
	}
	if !res.Staged {
		t.Error("Restore does not say the staged state came back")
	}
	wantBranches := []string{"feature", "restored-" + wt.ConversationID[:8] + "/main"}
	if strings.Join(res.Branches, " ") != strings.Join(wantBranches, " ") {
		t.Errorf("restored branches = %v, want %v", res.Branches, wantBranches)
	}
	for _, b := range wantBranches {
		if got := hostGit(t, dir, "log", "-1", "--format=%s", b); got != "on feature" {
			t.Errorf("branch %s = %q, want the view's commit", b, got)
		}
	}
	if got := hostGit(t, into, "stash", "list", "--format=%s"); !regexp.MustCompile(`^On [^\n]*: agent stash\nOn [^\n]*: older stash$`).MatchString(got) || res.StashEntries != 2 {
		t.Errorf("stash list = %q (result %q, %d entries), want the agent's two stash entries, newest first", got, res.Stash, res.StashEntries)
	}
	if got := hostGit(t, into, "show", "stash@{1}:stashed.txt"); got != "older" {
		t.Errorf("the restored stash@{1}'s stashed.txt = %q", got)
	}
	if got := hostGit(t, into, "show", "stash@{0}:stashed.txt"); got != "stashed" {
		t.Errorf("the restored stash's stashed.txt = %q", got)
	}
	// Again into the same place: done already (the retry of a restore
	// whose answer was lost). Elsewhere: a clear message.
	if res, err := m.Restore(testCtx(t), opts); err != nil || !res.Already || res.Path != into {
		t.Errorf("a second Restore into %s = %+v, %v, want it already restored there", into, res, err)
	}
	opts.Into = filepath.Join(testenv.TempDir(t), "again")
	if _, err := m.Restore(testCtx(t), opts); !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), "already restored in "+into) {
		t.Errorf("a second Restore into %s = %v, want ErrExists saying it is already restored in %s", opts.Into, err, into)
	}
}

// viewGit runs git in a view as the agent does (inView or inPlaceView),
// its output trimmed.
type viewGit func(args ...string) string

// eachView runs f on a new view of the repository at dir: a worktree's,
// then an in-place one's, each as its own subtest.
func eachView(t *testing.T, m *Manager, dir string, f func(t *testing.T, wt Worktree, git viewGit)) {
	t.Helper()
	repo := mustInspect(t, m, dir)
	t.Run("worktree", func(t *testing.T) {
		wt := addView(t, m, repo, newID(t), "")
		f(t, wt, func(args ...string) string { return strings.TrimSpace(inView(t, wt, args...)) })
	})
	t.Run("in-place", func(t *testing.T) {
		wt := addInPlace(t, m, repo)
		f(t, wt, func(args ...string) string { return strings.TrimSpace(inPlaceView(t, wt, args...)) })
	})
}

// TestViewCarriesWorktreeConfig: a sparse checkout's per-work-tree
// settings (extensions.worktreeConfig: config.worktree) and patterns are
// the view's too, in a new worktree and in place. Without them git in the
// container took the sparse work tree for a full checkout.
func TestViewCarriesWorktreeConfig(t *testing.T) {
	m := newManager(t)
	dir := testenv.NewRepo(t, testenv.RepoOptions{})
	testenv.WriteFile(t, filepath.Join(dir, "a", "x"), "x\n")
	testenv.WriteFile(t, filepath.Join(dir, "b", "y"), "y\n")
	hostGit(t, dir, "add", "a", "b")
	hostGit(t, dir, "commit", "-qm", "a and b")
	hostGit(t, dir, "config", "extensions.worktreeConfig", "true")
	hostGit(t, dir, "sparse-checkout", "set", "--no-cone", "/a/")
	eachView(t, m, dir, func(t *testing.T, wt Worktree, git viewGit) {
		if _, err := os.Lstat(filepath.Join(wt.Path, "b")); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("b/ is in the sparse work tree (%v): the set-up is wrong", err)
		}
		if got := git("config", "--worktree", "--get", "core.sparseCheckout"); got != "true" {
			t.Errorf("core.sparseCheckout in the view = %q, want true", got)
		}
		if got := git("sparse-checkout", "list"); got != "/a/" {
			t.Errorf("sparse-checkout list in the view = %q, want /a/", got)
		}
		if got := git("--no-optional-locks", "status", "--porcelain"); got != "" {
			t.Errorf("status in the view = %q, want clean", got)
		}
	})
}

// TestViewCarriesSplitIndex: with core.splitIndex the index names a shared
// index file beside it (sharedindex.<id>), which the view gets too.
// Without it every git command that read the index failed inside ("index
// file open failed").
func TestViewCarriesSplitIndex(t *testing.T) {
	m := newManager(t)
	dir := testenv.NewRepo(t, testenv.RepoOptions{})
	hostGit(t, dir, "config", "core.splitIndex", "true")
	hostGit(t, dir, "update-index", "--split-index")
	if shared, _ := filepath.Glob(filepath.Join(dir, ".git", "sharedindex.*")); len(shared) == 0 {
		t.Fatal("no shared index on the host: the set-up is wrong")
	}
	testenv.WriteFile(t, filepath.Join(dir, "README.md"), "changed\n")
	eachView(t, m, dir, func(t *testing.T, wt Worktree, git viewGit) {
		want := ""
		if wt.InPlace {
			want = "M README.md" // the user's change, in the folder
		}
		if got := git("status", "--porcelain"); got != want {
			t.Errorf("status in the view = %q, want %q", got, want)
		}
		if got := git("ls-files"); !strings.Contains(got, "README.md") {
			t.Errorf("ls-files in the view = %q, want README.md", got)
		}
	})
}

// TestRestoreIsCrashSafe kills (cancels) a restore at each of its steps
// and restores again: the retry completes (it is not refused as
// "already restored"), the agent's stash lies below the user's own (the
// user's stash@{0} stays theirs), the agent's tags come back, and a third
// restore is refused as already done.
func TestRestoreIsCrashSafe(t *testing.T) {
	for _, step := range []string{"restore", "restore-checkout", "restore-stash-cleared"} {
		t.Run(step, func(t *testing.T) {
			m, dir, repo, wt := newView(t)
			ident := []string{"-c", "user.name=agent", "-c", "user.email=a@x"}
			inView(t, wt, append(ident, "commit", "-q", "--allow-empty", "-m", "agent commit")...)
			inView(t, wt, "tag", "agent-light")
			inView(t, wt, append(ident, "tag", "-a", "-m", "annotated", "agent-annotated")...)
			testenv.WriteFile(t, filepath.Join(wt.Path, "stashed.txt"), "agent\n")
			inView(t, wt, "add", "stashed.txt")
			inView(t, wt, append(ident, "stash", "push", "-q", "-m", "agent stash")...)
			testenv.WriteFile(t, filepath.Join(wt.Path, "work.txt"), "uncommitted\n")
			// The user's own stash, on the host.
			testenv.WriteFile(t, filepath.Join(dir, "README.md"), "user change\n")
			hostGit(t, dir, "stash", "push", "-q", "-m", "user stash")
			if _, err := m.Remove(testCtx(t), wt, RemoveOptions{Sandbox: &hostSandbox{wt: wt}, Published: wt.StartCommit}); err != nil {
				t.Fatalf("Remove: %v", err)
			}
			into := filepath.Join(testenv.TempDir(t), "restored")
			opts := RestoreOptions{CommonDir: repo.CommonDir, Repo: repo.TopLevel, ConversationID: wt.ConversationID, StartCommit: wt.StartCommit, Into: into}

			ctx, kill := context.WithCancel(testCtx(t))
			m.onStep = func(s string) {
				if s == step {
					kill() // every later git call of this restore fails at once
				}
			}
			if _, err := m.Restore(ctx, opts); err == nil {
				t.Fatalf("Restore killed at %s succeeded", step)
			}
			m.onStep = func(string) {}

			res, err := m.Restore(testCtx(t), opts)
			if err != nil {
				t.Fatalf("Restore after a kill at %s: %v", step, err)
			}
			if got := hostGit(t, into, "status", "--porcelain"); got != "?? work.txt" {
				t.Errorf("restored status = %q, want the uncommitted file only (no index.lock, no staged deletions)", got)
			}
			if got := hostGit(t, into, "log", "-1", "--format=%s"); got != "agent commit" {
				t.Errorf("restored HEAD = %q", got)
			}
			if got := hostGit(t, dir, "stash", "list", "--format=%gs"); !regexp.MustCompile(`^On main: user stash\nohd: stash of conversation `).MatchString(got) || res.StashEntries != 1 {
				t.Errorf("stash list = %q (%d entries restored), want the user's stash on top and the agent's below", got, res.StashEntries)
			}
			if got := hostGit(t, dir, "show", "stash@{1}:stashed.txt"); got != "agent" {
				t.Errorf("stash@{1}:stashed.txt = %q, want the agent's", got)
			}
			if got := hostGit(t, dir, "show", "stash@{0}:README.md"); got != "user change" {
				t.Errorf("stash@{0}:README.md = %q, want the user's", got)
			}
			if got := hostGit(t, dir, "tag", "--list"); got != "agent-annotated\nagent-light" || len(res.Tags) != 2 {
				t.Errorf("tags = %q (result %v), want the agent's two", got, res.Tags)
			}
			// A third Restore into the same path (the retry of a restore
			// whose answer was lost) answers that it is done and changes
			// nothing; into another path it is refused as already restored.
			if again, err := m.Restore(testCtx(t), opts); err != nil || !again.Already || again.Path != res.Path || again.Branch != res.Branch {
				t.Errorf("a third Restore into the same path = %+v, %v, want it already restored there", again, err)
			}
			other := opts
			other.Into = filepath.Join(testenv.TempDir(t), "elsewhere")
			if _, err := m.Restore(testCtx(t), other); !errors.Is(err, ErrExists) {
				t.Errorf("a Restore into another path = %v, want ErrExists (already restored)", err)
			}
			if got := hostGit(t, dir, "stash", "list", "--format=%gs"); strings.Count(got, "\n")+1 != 2 {
				t.Errorf("stash list after the repeated restores = %q, want the two entries once", got)
			}
		})
	}
}

// TestRestoreClearsTheRefLockOfAKilledGit: a restore killed while its git
// held refs/stash.lock (git dies with ohd, its lock stays) is retried by
// the next ohd: the lock of the gone process's restore is removed and the
// retry completes. Control: while the journal's process still runs the
// lock is respected, and the retry fails on it as git says.
func TestRestoreClearsTheRefLockOfAKilledGit(t *testing.T) {
	for _, holderGone := range []bool{false, true} {
		t.Run(fmt.Sprintf("holder gone %v", holderGone), func(t *testing.T) {
			m, dir, repo, wt := newView(t)
			ident := []string{"-c", "user.name=agent", "-c", "user.email=a@x"}
			inView(t, wt, append(ident, "commit", "-q", "--allow-empty", "-m", "agent commit")...)
			testenv.WriteFile(t, filepath.Join(wt.Path, "stashed.txt"), "agent\n")
			inView(t, wt, "add", "stashed.txt")
			inView(t, wt, append(ident, "stash", "push", "-q", "-m", "agent stash")...)
			if _, err := m.Remove(testCtx(t), wt, RemoveOptions{Sandbox: &hostSandbox{wt: wt}, Published: wt.StartCommit}); err != nil {
				t.Fatalf("Remove: %v", err)
			}
			into := filepath.Join(testenv.TempDir(t), "restored")
			opts := RestoreOptions{CommonDir: repo.CommonDir, Repo: repo.TopLevel, ConversationID: wt.ConversationID, StartCommit: wt.StartCommit, Into: into}
			ctx, kill := context.WithCancel(testCtx(t))
			m.onStep = func(s string) {
				if s == "restore-stash-cleared" {
					kill()
				}
			}
			if _, err := m.Restore(ctx, opts); err == nil {
				t.Fatal("the killed Restore succeeded")
			}
			m.onStep = func(string) {}
			// What the killed git left, and the journal of a process that
			// is gone (or, for the control, still runs).
			lock := filepath.Join(repo.CommonDir, "refs", "stash.lock")
			testenv.WriteFile(t, lock, "")
			j, err := journal.Read(m.lockDir, wt.ConversationID, m.log)
			if err != nil || j == nil {
				t.Fatalf("journal of the killed restore: %+v %v", j, err)
			}
			if holderGone {
				j.Holder = "999999999 1"
			} else if j.Holder != journal.ProcessIdentity(os.Getpid()) {
				t.Fatalf("journal holder %q, want this process %q", j.Holder, journal.ProcessIdentity(os.Getpid()))
			}
			if err := journal.Write(m.lockDir, j); err != nil {
				t.Fatal(err)
			}
			_, err = m.Restore(testCtx(t), opts)
			if !holderGone {
				if err == nil || !strings.Contains(err.Error(), "stash.lock") {
					t.Errorf("retry while the restore's process runs = %v, want git's refusal of the held lock", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("retry after the killed restore: %v", err)
			}
			if _, err := os.Lstat(lock); !os.IsNotExist(err) {
				t.Errorf("the killed git's lock is still there (%v)", err)
			}
			if got := hostGit(t, dir, "show", "stash@{0}:stashed.txt"); got != "agent" {
				t.Errorf("stash@{0}:stashed.txt = %q, want the agent's", got)
			}
		})
	}
}

// gitRunLog records the git commands a Manager runs (its debug log).
type gitRunLog struct {
	mu   sync.Mutex
	runs [][]string
}

func (l *gitRunLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *gitRunLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *gitRunLog) WithGroup(string) slog.Handler            { return l }
func (l *gitRunLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "git" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if args, ok := a.Value.Any().([]string); ok && a.Key == "args" {
			l.mu.Lock()
			l.runs = append(l.runs, args)
			l.mu.Unlock()
		}
		return true
	})
	return nil
}

func (l *gitRunLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.runs {
		out = append(out, r[0])
	}
	l.runs = nil
	return out
}

// TestSaveViewPublishedReadsTheHostOnce: the usual removal, nothing
// uncommitted and every commit of the agent's on the host already, runs
// one git on the host before its transaction (the read of the host's refs
// under the lock, which also shows every object present and every ref
// reached); a branch the agent made at a host commit is still kept, and an
// annotated host tag in the view changes nothing. A commit the host lacks
// takes the full way, and is published.
func TestSaveViewPublishedReadsTheHostOnce(t *testing.T) {
	dir := testenv.TempDir(t)
	runs := &gitRunLog{}
	m, err := New(Options{Root: filepath.Join(dir, "worktrees"), LockDir: filepath.Join(dir, "locks"), Logger: slog.New(runs)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	host := testenv.NewRepo(t, testenv.RepoOptions{})
	hostGit(t, host, "-c", "user.name=u", "-c", "user.email=u@x", "tag", "-a", "-m", "release", "v1")
	repo := mustInspect(t, m, host)
	wt := addView(t, m, repo, newID(t), "")
	inView(t, wt, "branch", "at-host-commit", wt.StartCommit)
	runs.take()
	saved, err := m.SaveView(testCtx(t), wt, &hostSandbox{wt: wt}, wt.StartCommit)
	if err != nil {
		t.Fatalf("SaveView: %v", err)
	}
	if got := runs.take(); !slices.Equal(got, []string{"for-each-ref", "update-ref"}) {
		t.Errorf("SaveView of a clean, published view ran git %v on the host, want one for-each-ref, then the transaction (update-ref)", got)
	}
	if want := []string{KeptRef(wt.ConversationID, "refs/heads/at-host-commit")}; !slices.Equal(saved.Kept, want) || saved.SnapshotRef != "" {
		t.Errorf("SaveView = %+v, want kept %v and no snapshot", saved, want)
	}
	if _, err := m.Remove(testCtx(t), wt, RemoveOptions{Saved: &saved, Published: wt.StartCommit}); err != nil {
		t.Fatalf("Remove: %v", err)
	}

	wt2 := addView(t, m, repo, newID(t), "")
	inView(t, wt2, "-c", "user.name=agent", "-c", "user.email=a@x", "commit", "-q", "--allow-empty", "-m", "unpublished")
	runs.take()
	saved2, err := m.SaveView(testCtx(t), wt2, &hostSandbox{wt: wt2}, wt2.StartCommit)
	if err != nil {
		t.Fatalf("SaveView: %v", err)
	}
	if got := runs.take(); !slices.Contains(got, "cat-file") {
		t.Errorf("SaveView of an unpublished commit ran git %v on the host, want the lookup (cat-file) and the import", got)
	}
	if got := hostGit(t, host, "log", "-1", "--format=%s", "refs/heads/"+wt2.Branch); got != "unpublished" || saved2.Published != inView(t, wt2, "rev-parse", "HEAD") {
		t.Errorf("host branch tip = %q, SaveView = %+v: want the agent's commit published", got, saved2)
	}
}
