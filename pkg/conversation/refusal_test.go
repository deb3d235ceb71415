package conversation

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/broker"
	"github.com/ohd-dev/ohd/pkg/store"
)

// TestRemoveRefusedWhenTheRepositoryMovedChangesNothing: the repository
// of a conversation was moved away; a removal cannot save the work into
// it, so it is refused before anything is torn down (the broker still
// answers, the worktree and the record are as they were), with a message
// that says what to do; once the repository is back, the removal works.
func TestRemoveRefusedWhenTheRepositoryMovedChangesNothing(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	c, err := e.m.Create(ctx, CreateRequest{Workspace: repo, Worktree: true})
	if err != nil {
		t.Fatal(err)
	}
	moved := repo + ".moved"
	if err := os.Rename(repo, moved); err != nil {
		t.Fatal(err)
	}
	_, err = e.m.Remove(ctx, c.ID, RemoveOptions{})
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "move the repository back") || !strings.Contains(err.Error(), "nothing was removed") {
		t.Fatalf("Remove with the repository moved away = %v, want ErrConflict saying what to do", err)
	}
	got, err := e.st.Conversation(c.ID)
	if err != nil || got.State != store.StateRunning || got.Removal != nil || got.BrokerEpoch != c.BrokerEpoch {
		t.Errorf("record after the refused removal = %+v, %v; want it unchanged (running, no removal)", got, err)
	}
	cl := broker.NewClient(filepath.Join(c.BrokerDir, "broker.sock"), filepath.Join(c.BrokerDir, "token"))
	defer cl.Close()
	if _, err := cl.Whoami(ctx); err != nil {
		t.Errorf("the broker after the refused removal: %v, want it still serving", err)
	}
	if !exists(c.Worktree) {
		t.Error("the worktree is gone after the refused removal")
	}
	if err := os.Rename(moved, repo); err != nil {
		t.Fatal(err)
	}
	if r, err := e.m.Remove(ctx, c.ID, RemoveOptions{}); err != nil || r.State != store.StateDeleted {
		t.Errorf("Remove with the repository back = %+v, %v", r.State, err)
	}
}

// TestDoctorHintsMatchTheState: with the worktree folder gone, doctor
// does not offer to rewrite its .git file (there is none), and --repair
// changes nothing; the detail says what is gone and what to do.
func TestDoctorHintsMatchTheState(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c, err := e.m.Create(ctx, CreateRequest{Workspace: testenv.NewRepo(t, testenv.RepoOptions{}), Worktree: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(c.Worktree); err != nil {
		t.Fatal(err)
	}
	for _, repair := range []bool{false, true} {
		rep, err := e.m.Doctor(ctx, c.ID, repair)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, ck := range rep.Checks {
			if ck.Check != "worktree-host" {
				continue
			}
			found = true
			if ck.Status != "fail" || ck.Repair != "" || ck.Repaired || !strings.Contains(ck.Detail, "the worktree folder "+c.Worktree+" is gone") {
				t.Errorf("Doctor(repair=%v) with the folder gone: %+v; want a failure with no repair offered", repair, ck)
			}
		}
		if !found {
			t.Errorf("Doctor(repair=%v): no worktree-host check: %+v", repair, rep.Checks)
		}
	}
	if exists(c.Worktree) {
		t.Error("doctor --repair re-created the worktree folder")
	}
}
