package worktree

import (
	"path/filepath"
	"strconv"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/worktree/mountplan"
)

// BenchmarkAddRemove measures one conversation's worktree life (Add, then
// Remove of a clean worktree) in a small repository.
func BenchmarkAddRemove(b *testing.B) {
	m := newManager(b)
	repo := mustInspect(b, m, testenv.NewRepo(b, testenv.RepoOptions{}))
	ctx := testCtx(b)
	for b.Loop() {
		wt, err := m.Add(ctx, AddOptions{Repo: repo, ConversationID: newID(b)})
		if err != nil {
			b.Fatalf("Add: %v", err)
		}
		if _, err := m.Remove(ctx, wt, RemoveOptions{}); err != nil {
			b.Fatalf("Remove: %v", err)
		}
	}
}

// BenchmarkMountPlanPointers measures MountPlan of a worktree in a
// repository of 10,000 files and three submodules, and the part of it
// that fixes the pointers (package mountplan: one `git ls-files --stage`
// of the host's index per repository entered, a few lstat per
// submodule), which every container start pays.
func BenchmarkMountPlanPointers(b *testing.B) {
	m := newManager(b)
	dir := testenv.NewRepo(b, testenv.RepoOptions{})
	for i := range 10000 {
		testenv.WriteFile(b, filepath.Join(dir, "d"+strconv.Itoa(i%100), "f"+strconv.Itoa(i)), "x\n")
	}
	other := testenv.NewRepo(b, testenv.RepoOptions{})
	hostGit(b, dir, "add", ".")
	for _, p := range []string{"sub", "a/b/lib", "vendor/x"} {
		hostGit(b, dir, "-c", "protocol.file.allow=always", "submodule", "add", "-q", other, p)
	}
	hostGit(b, dir, "commit", "-qm", "files")
	wt, err := m.Add(testCtx(b), AddOptions{Repo: mustInspect(b, m, dir), ConversationID: newID(b), View: true})
	if err != nil {
		b.Fatalf("Add: %v", err)
	}
	b.Run("plan", func(b *testing.B) {
		for b.Loop() {
			if _, err := m.MountPlan(wt); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("pointers", func(b *testing.B) {
		for b.Loop() {
			ptrs, err := mountplan.WorkTreePointers(mountHost{m}, wt.Path, wt.AdminDir, wt.UID, wt.GID)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := mountplan.Pin([]mountplan.Mount{{Source: wt.Path, Target: wt.Path}}, ptrs); err != nil {
				b.Fatal(err)
			}
		}
	})
}
