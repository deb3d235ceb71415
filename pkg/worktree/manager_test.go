package worktree

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ohd-dev/ohd/internal/testenv"
)

func TestValidateID(t *testing.T) {
	tests := []struct {
		id string
		ok bool
	}{
		{"123e4567-e89b-12d3-a456-426614174000", true},
		{"00000000-0000-0000-0000-000000000000", true},
		{"123E4567-E89B-12D3-A456-426614174000", false},
		{"123e4567e89b12d3a456426614174000", false},
		{"{123e4567-e89b-12d3-a456-426614174000}", false},
		{"123e4567-e89b-12d3-a456-42661417400g", false},
		{"123e4567-e89b-12d3-a456_426614174000", false},
		{"../../../../../../../../../../../../", false},
		{"", false},
	}
	for _, tc := range tests {
		err := ValidateID(tc.id)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalidID)) {
			t.Errorf("ValidateID(%q) = %v, want ok %v", tc.id, err, tc.ok)
		}
	}
}

func TestContainerGitConfig(t *testing.T) {
	want := [][2]string{{"safe.directory", "*"}, {"gc.auto", "0"}, {"gc.worktreePruneExpire", "never"}, {"maintenance.auto", "false"}}
	got := ContainerGitConfig()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ContainerGitConfig mismatch (-want +got):\n%s", diff)
	}
	got[0][1] = "changed"
	if ContainerGitConfig()[0][1] != "*" {
		t.Errorf("ContainerGitConfig returns shared state")
	}
}

func TestNew(t *testing.T) {
	dir := testenv.TempDir(t)
	if _, err := New(Options{}); !errors.Is(err, ErrInvalidPath) {
		t.Errorf("New(no root) = %v, want ErrInvalidPath", err)
	}
	if _, err := New(Options{Root: "relative"}); !errors.Is(err, ErrInvalidPath) {
		t.Errorf("New(relative root) = %v, want ErrInvalidPath", err)
	}
	if _, err := New(Options{Root: filepath.Join(dir, "r1"), Git: "git"}); !errors.Is(err, ErrInvalidPath) {
		t.Errorf("New(Git: relative) = %v, want ErrInvalidPath", err)
	}
	if _, err := New(Options{Root: filepath.Join(dir, "r2"), Git: "/nonexistent/git"}); err == nil || !strings.Contains(err.Error(), "/nonexistent/git") {
		t.Errorf("New(Git: missing) = %v, want an error naming it", err)
	}
	old := syscall.Umask(0o077) // even a strict umask must not make the root untraversable
	m, err := New(Options{Root: filepath.Join(dir, "a", "b", "root")})
	syscall.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{
		filepath.Join(dir, "a"):               0o711,
		filepath.Join(dir, "a", "b"):          0o711,
		m.Root():                              0o711,
		filepath.Join(m.Root(), ".ohd-locks"): 0o700,
	} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != want {
			t.Errorf("%s mode = %v, %v; want %04o", p, st.Mode().Perm(), err, want)
		}
	}
	// A symlinked root is resolved.
	link := filepath.Join(dir, "link")
	if err := os.Symlink(m.Root(), link); err != nil {
		t.Fatal(err)
	}
	m2, err := New(Options{Root: link})
	if err != nil || m2.Root() != m.Root() {
		t.Errorf("New(symlinked root).Root() = %q, %v; want %q", m2.Root(), err, m.Root())
	}
}

// TestHealthAfterDirectoryLoss: doctor's view of a worktree whose directory
// vanished: registered but prunable, gitdir does not resolve.
func TestHealthAfterDirectoryLoss(t *testing.T) {
	m, _, wt := newRepoWorktree(t)
	if err := os.RemoveAll(wt.Path); err != nil {
		t.Fatal(err)
	}
	h, err := m.Health(testCtx(t), wt)
	if err != nil {
		t.Fatal(err)
	}
	want := Health{Registered: true, Locked: true, LockReason: LockReason(wt.ConversationID), Branch: wt.Branch, AdminExists: true}
	// A locked worktree is never prunable, even with its directory gone.
	if diff := cmp.Diff(want, h); diff != "" {
		t.Errorf("Health mismatch (-want +got):\n%s", diff)
	}
	if _, err := m.Health(testCtx(t), Worktree{ConversationID: wt.ConversationID}); !errors.Is(err, ErrInvalidWorktree) {
		t.Errorf("Health(incomplete record) = %v, want ErrInvalidWorktree", err)
	}
}

// TestInconsistentRecordRefused: a Worktree whose fields do not fit
// together is refused before anything is touched.
func TestInconsistentRecordRefused(t *testing.T) {
	m, _, wt := newRepoWorktree(t)
	elsewhere := testenv.TempDir(t)
	tests := map[string]func(w *Worktree){
		"path outside root":       func(w *Worktree) { w.Path = elsewhere },
		"admin dir elsewhere":     func(w *Worktree) { w.AdminDir = elsewhere },
		"admin id with slash":     func(w *Worktree) { w.AdminID = "../x"; w.AdminDir = filepath.Join(w.CommonDir, "worktrees", "../x") },
		"other branch":            func(w *Worktree) { w.Branch = "main" },
		"relative common dir":     func(w *Worktree) { w.CommonDir = "repo/.git" },
		"bad id":                  func(w *Worktree) { w.ConversationID = "x" },
		"short start commit":      func(w *Worktree) { w.StartCommit = "abc" },
		"path of another conv id": func(w *Worktree) { w.ConversationID = newID(t); w.Branch = BranchName(w.ConversationID) },
	}
	for name, mutate := range tests {
		bad := wt
		mutate(&bad)
		if _, err := m.Remove(testCtx(t), bad, RemoveOptions{Discard: true}); err == nil {
			t.Errorf("Remove(%s) = nil error, want a refusal", name)
		}
		if _, err := m.MountPlan(bad); err == nil {
			t.Errorf("MountPlan(%s) = nil error, want a refusal", name)
		}
		if _, _, err := m.Snapshot(testCtx(t), bad); err == nil {
			t.Errorf("Snapshot(%s) = nil error, want a refusal", name)
		}
	}
	if h, err := m.Health(testCtx(t), wt); err != nil || !h.Registered || !h.GitdirResolves {
		t.Errorf("Health after refused calls = %+v, %v; want the worktree intact", h, err)
	}
}
