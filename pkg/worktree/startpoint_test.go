package worktree

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
)

// TestStartPointOrder checks each rule of the start point order: explicit;
// refs/remotes/origin/HEAD; main; master; HEAD.
func TestStartPointOrder(t *testing.T) {
	tests := []struct {
		name     string
		branch   string // initial branch of the repository
		explicit string
		// setup prepares the repository and returns the commit the
		// worktree must start at.
		setup     func(t *testing.T, dir string) string
		wantPoint string
	}{{
		name:     "explicit branch",
		explicit: "feature",
		setup: func(t *testing.T, dir string) string {
			gitIn(t, dir, "checkout", "-q", "-b", "feature")
			c := commitFile(t, dir, "f", "feature\n", "feature")
			gitIn(t, dir, "checkout", "-q", "main")
			return c
		},
		wantPoint: "feature",
	}, {
		name:     "explicit tag wins over origin/HEAD",
		explicit: "v1",
		setup: func(t *testing.T, dir string) string {
			first := gitIn(t, dir, "rev-parse", "HEAD")
			gitIn(t, dir, "tag", "-a", "-m", "v1", "v1") // annotated: peeled to the commit
			commitFile(t, dir, "later", "x\n", "later")
			gitIn(t, dir, "update-ref", "refs/remotes/origin/main", "HEAD")
			gitIn(t, dir, "symbolic-ref", "refs/remotes/origin/HEAD", "refs/remotes/origin/main")
			return first
		},
		wantPoint: "v1",
	}, {
		name: "origin/HEAD",
		setup: func(t *testing.T, dir string) string {
			gitIn(t, dir, "checkout", "-q", "-b", "upstream")
			c := commitFile(t, dir, "u", "upstream\n", "upstream")
			gitIn(t, dir, "checkout", "-q", "main")
			gitIn(t, dir, "update-ref", "refs/remotes/origin/trunk", c)
			gitIn(t, dir, "symbolic-ref", "refs/remotes/origin/HEAD", "refs/remotes/origin/trunk")
			gitIn(t, dir, "branch", "-q", "-D", "upstream")
			return c
		},
		wantPoint: "refs/remotes/origin/HEAD",
	}, {
		name: "dangling origin/HEAD falls through to main",
		setup: func(t *testing.T, dir string) string {
			gitIn(t, dir, "symbolic-ref", "refs/remotes/origin/HEAD", "refs/remotes/origin/gone")
			return gitIn(t, dir, "rev-parse", "main")
		},
		wantPoint: "main",
	}, {
		name: "main, though HEAD is elsewhere",
		setup: func(t *testing.T, dir string) string {
			c := gitIn(t, dir, "rev-parse", "main")
			gitIn(t, dir, "checkout", "-q", "-b", "dev")
			commitFile(t, dir, "d", "dev\n", "dev")
			return c
		},
		wantPoint: "main",
	}, {
		name:   "master without main",
		branch: "master",
		setup: func(t *testing.T, dir string) string {
			c := gitIn(t, dir, "rev-parse", "master")
			gitIn(t, dir, "checkout", "-q", "-b", "dev")
			commitFile(t, dir, "d", "dev\n", "dev")
			return c
		},
		wantPoint: "master",
	}, {
		name:   "HEAD on another branch name",
		branch: "trunk",
		setup: func(t *testing.T, dir string) string {
			return gitIn(t, dir, "rev-parse", "HEAD")
		},
		wantPoint: "HEAD",
	}, {
		name:   "HEAD detached; a tag called main is not the branch",
		branch: "trunk",
		setup: func(t *testing.T, dir string) string {
			gitIn(t, dir, "tag", "main")
			commitFile(t, dir, "n", "next\n", "next")
			gitIn(t, dir, "checkout", "-q", "--detach", "HEAD")
			c := commitFile(t, dir, "d", "detached\n", "detached")
			return c
		},
		wantPoint: "HEAD",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newManager(t)
			dir := testenv.NewRepo(t, testenv.RepoOptions{Branch: tc.branch})
			wantCommit := tc.setup(t, dir)
			wt := mustAdd(t, m, mustInspect(t, m, dir), newID(t), tc.explicit)
			if wt.StartPoint != tc.wantPoint || wt.StartCommit != wantCommit {
				t.Errorf("Add(start %q) started at %q (%s), want %q (%s)", tc.explicit, wt.StartPoint, wt.StartCommit, tc.wantPoint, wantCommit)
			}
			if got := gitIn(t, wt.Path, "rev-parse", "HEAD"); got != wantCommit {
				t.Errorf("worktree HEAD = %s, want %s", got, wantCommit)
			}
			if got := gitIn(t, wt.Path, "symbolic-ref", "HEAD"); got != "refs/heads/"+wt.Branch {
				t.Errorf("worktree HEAD -> %s, want refs/heads/%s", got, wt.Branch)
			}
			// --no-track: nothing was written to the shared config.
			if _, err := testenv.GitOutput(dir, "config", "--get-regexp", `^branch\.openhands/`); err == nil {
				t.Errorf("Add wrote branch.openhands/* settings into the repository config")
			}
		})
	}
}

// TestAddEmptyRepository: a repository without commits has no start point.
func TestAddEmptyRepository(t *testing.T) {
	m := newManager(t)
	dir := filepath.Join(testenv.TempDir(t), "empty")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	gitIn(t, dir, "init", "-q", "-b", "main")
	repo := mustInspect(t, m, dir)
	before := listing(t, m.Root(), filepath.Join(dir, ".git"))
	_, err := m.Add(testCtx(t), AddOptions{Repo: repo, ConversationID: newID(t)})
	if !errors.Is(err, ErrNoCommits) {
		t.Fatalf("Add(empty repository) = %v, want ErrNoCommits", err)
	}
	if after := listing(t, m.Root(), filepath.Join(dir, ".git")); !equalStrings(before, after) {
		t.Errorf("Add(empty repository) changed the disk:\nbefore %q\nafter  %q", before, after)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
