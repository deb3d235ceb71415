package worktree

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/worktree/admindir"
)

// killedAt stands for ohd dying at a step: OnStep panics with it.
type killedAt string

// TestRemoveKilledMidAdminLeavesNoHalfRegistration: a removal killed
// while it deletes the admin dir leaves nothing under worktrees/ (a half
// deleted admin dir, without gitdir and locked, is one no git command
// lists and no retry can tell is ours), and the retry deletes what the
// killed one moved aside. Found by TestBackendCrashRandomKills: a killed
// os.RemoveAll of the admin dir left one for good.
func TestRemoveKilledMidAdminLeavesNoHalfRegistration(t *testing.T) {
	dir := testenv.TempDir(t)
	kill := true
	var sawMoved bool
	var m *Manager
	var wt Worktree
	m, err := New(Options{Root: filepath.Join(dir, "worktrees"), LockDir: filepath.Join(dir, "locks"), OnStep: func(step string) {
		if step != "admin-moved" || !kill {
			return
		}
		sawMoved = true
		// What a reader sees at the moment of the kill: the
		// registration is gone as a whole, nothing of it in worktrees/.
		ents, _ := os.ReadDir(filepath.Join(wt.CommonDir, "worktrees"))
		for _, e := range ents {
			t.Errorf("at the kill, worktrees/ holds %s", e.Name())
		}
		panic(killedAt(step))
	}})
	if err != nil {
		t.Fatal(err)
	}
	repo := mustInspect(t, m, testenv.NewRepo(t, testenv.RepoOptions{}))
	wt = mustAdd(t, m, repo, newID(t), "")
	testenv.WriteFile(t, filepath.Join(wt.Path, "work.txt"), "unsaved\n")

	func() {
		defer func() {
			if r := recover(); r != killedAt("admin-moved") {
				panic(r)
			}
		}()
		_, err := m.Remove(testCtx(t), wt, RemoveOptions{})
		t.Fatalf("Remove returned (%v) instead of being killed at admin-moved", err)
	}()
	if !sawMoved {
		t.Fatal("the admin dir's removal never reported admin-moved: it is not moved out before it is deleted")
	}
	left, _ := filepath.Glob(filepath.Join(repo.CommonDir, admindir.TrashPrefix+"*"))
	if len(left) != 1 {
		t.Fatalf("after the kill, %s* = %v, want the moved admin dir", admindir.TrashPrefix, left)
	}
	if out := testenv.Git(t, repo.TopLevel, "worktree", "list", "--porcelain"); strings.Contains(out, wt.Path) {
		t.Errorf("git still lists the half-removed worktree:\n%s", out)
	}

	kill = false
	res, err := m.Remove(testCtx(t), wt, RemoveOptions{})
	if err != nil {
		t.Fatalf("Remove retry: %v", err)
	}
	if res.SnapshotRef == "" {
		t.Errorf("the retry kept no snapshot of the unsaved work: %+v", res)
	}
	assertGone(t, m, wt)
	if left, _ := filepath.Glob(filepath.Join(repo.CommonDir, admindir.TrashPrefix+"*")); len(left) != 0 {
		t.Errorf("the retry left %v", left)
	}
	if ents, _ := os.ReadDir(filepath.Join(repo.CommonDir, "worktrees")); len(ents) != 0 {
		t.Errorf("worktrees/ still holds %d entries", len(ents))
	}
}

// TestRestoreRetrySweepsTheAdminDirsAKilledAddLeft: a restore's git
// worktree add (no --lock: git writes "initializing" into locked first)
// killed before it wrote gitdir leaves an admin dir no git lists and
// findAdminDir cannot find: empty, or holding only that lock. The retry
// sweeps them (TestFaultInjection found an empty worktrees/restored3
// left for good), and leaves an admin dir that is anything more.
func TestRestoreRetrySweepsTheAdminDirsAKilledAddLeft(t *testing.T) {
	m, _, repo, wt := newView(t)
	inView(t, wt, "-c", "user.name=agent", "-c", "user.email=a@x", "commit", "-q", "--allow-empty", "-m", "agent commit")
	testenv.WriteFile(t, filepath.Join(wt.Path, "unsaved.txt"), "agent\n")
	if _, err := m.Remove(testCtx(t), wt, RemoveOptions{Sandbox: &hostSandbox{wt: wt}, Published: wt.StartCommit}); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	into := filepath.Join(testenv.TempDir(t), "restored")
	opts := RestoreOptions{CommonDir: repo.CommonDir, Repo: repo.TopLevel, ConversationID: wt.ConversationID, StartCommit: wt.StartCommit, Into: into}
	ctx, kill := context.WithCancel(testCtx(t))
	m.onStep = func(s string) {
		if s == "restore" {
			kill()
		}
	}
	if _, err := m.Restore(ctx, opts); err == nil {
		t.Fatal("the killed Restore succeeded")
	}
	m.onStep = func(string) {}
	worktrees := filepath.Join(repo.CommonDir, "worktrees")
	mk := func(name string, files map[string]string) string { return mkAdmin(t, worktrees, name, files) }
	gone := []string{mk("restored7", nil), mk("restored8", map[string]string{"locked": "initializing\n"}), mk("restored9", map[string]string{"locked": ""})}
	kept := []string{
		mk("restored10", map[string]string{"locked": "someone's reason"}),
		mk("restored11", map[string]string{"locked": "initializing", "gitdir": "/elsewhere/.git\n"}),
		mk("restoredx", nil),
	}
	if _, err := m.Restore(testCtx(t), opts); err != nil {
		t.Fatalf("retry after the killed restore: %v", err)
	}
	for _, d := range gone {
		if ok, _ := lexists(d); ok {
			t.Errorf("%s (what a killed add leaves) is still there", d)
		}
	}
	for _, d := range kept {
		if ok, _ := lexists(d); !ok {
			t.Errorf("%s was removed: it is not what a killed add leaves", d)
		}
	}
}
