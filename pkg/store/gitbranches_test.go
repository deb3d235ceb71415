package store

import (
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestGitBranches: creations are recorded per host and repository path,
// a later creator replaces an earlier one, they survive a reopen, and
// they go with their conversation's record.
func TestGitBranches(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	key := newKey(t, 1)
	s := openStore(t, path, key)
	a, b := NewID(), NewID()
	for _, id := range []string{a, b} {
		must(t, s.CreateConversation(Conversation{ID: id, State: StateRunning}))
	}
	const host = "github.com"
	must(t, s.RecordGitBranches(a, host, "acme/w.git", []string{"refs/heads/openhands/x", "refs/heads/openhands/y"}))
	must(t, s.RecordGitBranches(b, host, "acme/w.git", []string{"refs/heads/openhands/y"}))
	must(t, s.RecordGitBranches(b, host, "acme/w", []string{"refs/heads/openhands/x"}))
	must(t, s.RecordGitBranches(b, "gitlab.com", "acme/w.git", []string{"refs/heads/openhands/z"}))
	must(t, s.RecordGitBranches(a, host, "acme/w.git", nil))
	must(t, s.Close())

	s = openStore(t, path, key)
	defer s.Close()
	refs := []string{"refs/heads/openhands/x", "refs/heads/openhands/y", "refs/heads/openhands/z", "refs/heads/main"}
	got, err := s.GitBranchCreators(host, "acme/w.git", refs)
	must(t, err)
	// y's second creator replaced its first; x of "acme/w" and z of
	// gitlab.com are other repositories.
	if diff := cmp.Diff(map[string]string{"refs/heads/openhands/x": a, "refs/heads/openhands/y": b}, got); diff != "" {
		t.Errorf("GitBranchCreators (-want +got):\n%s", diff)
	}
	must(t, s.DeleteConversation(b))
	for _, c := range []struct{ host, repo, want string }{{host, "acme/w.git", a}, {host, "acme/w", ""}, {"gitlab.com", "acme/w.git", ""}} {
		got, err := s.GitBranchCreators(c.host, c.repo, refs)
		must(t, err)
		want := map[string]string{}
		if c.want != "" {
			want["refs/heads/openhands/x"] = c.want
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s/%s after b's record went (-want +got):\n%s", c.host, c.repo, diff)
		}
	}
}
