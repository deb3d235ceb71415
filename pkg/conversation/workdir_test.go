package conversation

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/store"
)

// TestCreateMakesAMissingWorkspace: Canvas's default new conversation
// (a folder that does not exist yet, worktree asked) starts in the folder
// ohd makes, without a worktree, and a failed create leaves no folder.
func TestCreateMakesAMissingWorkspace(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	home := testenv.TempDir(t)
	dir := filepath.Join(home, "workspace", "project", "0a1b2c")
	c, err := e.m.Create(ctx, CreateRequest{Workspace: dir, Worktree: true, MakeWorkspace: true, WorkspaceRoots: []string{home}})
	if err != nil {
		t.Fatalf("Create = %v", err)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() || c.WorkingDir != dir || c.Worktree != "" {
		t.Errorf("Create = %+v (%v), want it in the new folder %s without a worktree", c, err, dir)
	}
	if !strings.Contains(strings.Join(c.Notes, "\n"), "not a git repository") {
		t.Errorf("notes %q do not say it started without a worktree", c.Notes)
	}

	failed := filepath.Join(home, "workspace", "project", "failed")
	boom := errors.New("inner server said 422")
	if _, err := e.m.Create(ctx, CreateRequest{Workspace: failed, MakeWorkspace: true, WorkspaceRoots: []string{home},
		Forward: func(context.Context, store.Conversation, Target) error { return boom }}); !errors.Is(err, boom) {
		t.Fatalf("failing Create = %v", err)
	}
	if exists(failed) {
		t.Errorf("a failed create left %s", failed)
	}
	if !exists(filepath.Join(home, "workspace", "project")) {
		t.Errorf("undoing the failed create removed a folder the first create made")
	}

	// Without roots, or outside them: refused, nothing made.
	for _, roots := range [][]string{nil, {filepath.Join(home, "elsewhere")}} {
		p := filepath.Join(home, "other", "x")
		if _, err := e.m.Create(ctx, CreateRequest{Workspace: p, MakeWorkspace: true, WorkspaceRoots: roots}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "--workspace-root") {
			t.Errorf("Create outside roots %v = %v, want ErrInvalid naming --workspace-root", roots, err)
		}
		if exists(filepath.Join(home, "other")) {
			t.Errorf("a refused create made %s", filepath.Join(home, "other"))
		}
	}
	// Not asked to make it (ohctl create): a missing workspace stays an error.
	if _, err := e.m.Create(ctx, CreateRequest{Workspace: filepath.Join(home, "plain")}); err == nil || exists(filepath.Join(home, "plain")) {
		t.Errorf("Create without MakeWorkspace = %v, made: %v", err, exists(filepath.Join(home, "plain")))
	}
}

// TestCreateNeverMakesInsideProtectedPaths: a root that holds ohd's own
// state does not let a create make a folder inside it.
func TestCreateNeverMakesInsideProtectedPaths(t *testing.T) {
	e := newEnv(t)
	e.m.protected = canonicalPaths(append(e.m.protected, e.stateDir, e.wtRoot))
	root := filepath.Dir(e.stateDir)
	p := filepath.Join(e.stateDir, "agent-folder")
	if _, err := e.m.Create(context.Background(), CreateRequest{Workspace: p, MakeWorkspace: true, WorkspaceRoots: []string{root}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Create inside the state dir = %v, want ErrInvalid", err)
	}
	if exists(p) {
		t.Errorf("%s was made", p)
	}
}

// TestCreateReusesADeletedID: as on the agent server, a deleted
// conversation's id can be created again.
func TestCreateReusesADeletedID(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	c, err := e.m.Create(ctx, CreateRequest{Workspace: repo})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Remove(ctx, c.ID, RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	again, err := e.m.Create(ctx, CreateRequest{ID: c.ID, Workspace: repo})
	if err != nil || again.ID != c.ID || again.State != store.StateRunning {
		t.Fatalf("re-create of deleted %s = %+v, %v", c.ID, again, err)
	}
	if _, err := e.m.Create(ctx, CreateRequest{ID: c.ID, Workspace: repo}); !errors.Is(err, ErrConflict) {
		t.Errorf("create of a live id = %v, want ErrConflict", err)
	}
}
