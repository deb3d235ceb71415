package worktree

import (
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
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
