package conversation

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/runtime"
	"github.com/ohd-dev/ohd/pkg/store"
	"github.com/ohd-dev/ohd/pkg/worktree"
)

// TestInPlaceDue: whether a conversation is moved in place is decided by
// its workspace, not by the record (a record of 716a702 has neither
// Worktree nor InPlace, like a plain folder's): only with views, only for
// a git work tree of the conversation's own user, never for one that is
// a worktree's or in place already, or deleted.
func TestInPlaceDue(t *testing.T) {
	git := worktree.Repo{IsGit: true, TopLevel: "/r", UID: 1000}
	legacy := store.Conversation{Workspace: "/r", UID: 1000, State: store.StateStopped}
	for _, tc := range []struct {
		name  string
		c     func(c *store.Conversation)
		repo  worktree.Repo
		views bool
		want  bool
	}{
		{"made by 716a702 on a repository", nil, git, true, true},
		{"running", func(c *store.Conversation) { c.State = store.StateRunning }, git, true, true},
		{"on a subdirectory", func(c *store.Conversation) { c.Workspace = "/r/sub" }, git, true, true},
		{"in place already", func(c *store.Conversation) { c.InPlace = true }, git, true, false},
		{"a worktree", func(c *store.Conversation) { c.Worktree = "/wt/x/r" }, git, true, false},
		{"a plain folder", nil, worktree.Repo{}, true, false},
		{"a repository of another user", nil, worktree.Repo{IsGit: true, TopLevel: "/r", UID: 1001}, true, false},
		{"the local runtime", nil, git, false, false},
		{"deleted", func(c *store.Conversation) { c.State = store.StateDeleted }, git, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := legacy
			if tc.c != nil {
				tc.c(&c)
			}
			if got := inPlaceDue(c, tc.repo, tc.views); got != tc.want {
				t.Errorf("inPlaceDue(%+v, %+v, %v) = %v, want %v", c, tc.repo, tc.views, got, tc.want)
			}
		})
	}
}

// containerRuntime is the local runtime passing for a container runtime
// (views on), recording the containers removed.
type containerRuntime struct {
	runtime.Runtime
	removed []string
}

func (r *containerRuntime) Kind() string { return "docker" }
func (r *containerRuntime) Remove(_ context.Context, id string) error {
	r.removed = append(r.removed, id)
	return nil
}

// TestLegacyInPlaceGetsItsView: a conversation as 716a702 recorded one
// made on a repository without a worktree (its container had the folder,
// .git and all, writable) is moved in place before its container is made
// again: the old container is removed, the record says InPlace with a git
// view, and the mount plan puts the view over .git, never the host's .git
// writable.
func TestLegacyInPlaceGetsItsView(t *testing.T) {
	e := newEnv(t)
	rt := &containerRuntime{Runtime: runtime.NewLocal()}
	e.m.rt = rt
	ctx := context.Background()
	dir := testenv.NewRepo(t, testenv.RepoOptions{})
	uid, gid, err := ownerOf(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := store.Conversation{ID: store.NewID(), State: store.StateStopped, Runtime: "docker", Workspace: dir, WorkingDir: dir,
		UID: uid, GID: gid, ContainerID: "old-container", BrokerEpoch: 1}
	if err := e.st.CreateConversationWithKey(c, newInnerKey()); err != nil {
		t.Fatal(err)
	}
	repo, due, err := e.m.legacyInPlace(ctx, c)
	if err != nil || !due {
		t.Fatalf("legacyInPlace = %v, %v; want due", due, err)
	}
	got, err := e.m.moveInPlace(ctx, c, repo)
	if err != nil {
		t.Fatalf("moveInPlace: %v", err)
	}
	if len(rt.removed) != 1 || rt.removed[0] != "old-container" {
		t.Errorf("containers removed = %v, want the old one", rt.removed)
	}
	if !got.InPlace || got.GitLayout != store.GitLayoutView || got.ContainerID != "" || got.Repo != dir {
		t.Errorf("record after the move = %+v, want in place with a view and no container", got)
	}
	if st, err := os.Stat(got.GitView); err != nil || !st.IsDir() {
		t.Errorf("the view %s was not made: %v", got.GitView, err)
	}
	mounts, err := e.m.wt.MountPlan(worktreeOf(got))
	if err != nil {
		t.Fatalf("MountPlan: %v", err)
	}
	dotGit := filepath.Join(dir, ".git")
	for _, mt := range mounts {
		if mt.Target == dotGit && mt.Source != got.GitView {
			t.Errorf("%s is mounted from %s, want the view %s", dotGit, mt.Source, got.GitView)
		}
	}
	if _, due, err := e.m.legacyInPlace(ctx, got); err != nil || due {
		t.Errorf("legacyInPlace after the move = %v, %v; want not due", due, err)
	}
}

// TestSameMounts: a container is made anew when its bind mounts differ
// from the plan's as a set (order does not matter; read-only does).
func TestSameMounts(t *testing.T) {
	a, b := runtime.Mount{Source: "/r", Target: "/r"}, runtime.Mount{Source: "/r/.git", Target: "/r/.git", ReadOnly: true}
	for _, tc := range []struct {
		name string
		x, y []runtime.Mount
		want bool
	}{
		{"equal", []runtime.Mount{a, b}, []runtime.Mount{a, b}, true},
		{"reordered", []runtime.Mount{b, a}, []runtime.Mount{a, b}, true},
		{"a pin more", []runtime.Mount{a}, []runtime.Mount{a, b}, false},
		{"writable now", []runtime.Mount{a, {Source: "/r/.git", Target: "/r/.git"}}, []runtime.Mount{a, b}, false},
		{"duplicate", []runtime.Mount{a, a}, []runtime.Mount{a, b}, false},
	} {
		if got := sameMounts(tc.x, tc.y); got != tc.want {
			t.Errorf("%s: sameMounts(%v, %v) = %v, want %v", tc.name, tc.x, tc.y, got, tc.want)
		}
	}
}
