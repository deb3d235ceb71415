package integration

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/store"
)

// hostRefs returns every ref of the host repository with its value, one
// line each, as `git for-each-ref` prints them.
func hostRefs(t testing.TB, repo string) []string {
	t.Helper()
	out := testenv.Git(t, repo, "-c", "safe.directory=*", "for-each-ref", "--format=%(objectname) %(refname)")
	return strings.Split(strings.TrimSpace(out), "\n")
}

// withoutConversation drops the refs ohd itself writes for conversation id.
func withoutConversation(refs []string, id string) []string {
	var out []string
	for _, r := range refs {
		if !strings.HasSuffix(r, " refs/heads/openhands/"+id) && !strings.Contains(r, " refs/ohd/") {
			out = append(out, r)
		}
	}
	return out
}

// inside runs a shell command in the conversation's worktree, inside its
// container, and fails the test if it fails.
func (d *daemon) inside(c store.Conversation, script string) string {
	d.t.Helper()
	code, out := d.execIn(c.ID, "sh", "-c", "cd "+c.Worktree+" && "+script)
	if code != 0 {
		d.t.Errorf("inside %q: exit %d: %s", script, code, out)
	}
	return strings.TrimSpace(out)
}

// insideFails runs a command that must fail.
func (d *daemon) insideFails(c store.Conversation, script string) {
	d.t.Helper()
	if code, out := d.execIn(c.ID, "sh", "-c", "cd "+c.Worktree+" && "+script); code == 0 {
		d.t.Errorf("inside %q succeeded: %s", script, out)
	}
}

// oneLine joins lines with spaces.
func oneLine(s string) string { return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ") }

// TestGitViewEverydayGit: everything an agent does with git works inside
// the container (issue 11, acceptance 1), each checked by its outcome,
// and none of it changes what the host sees but the published branch.
func TestGitViewEverydayGit(t *testing.T) {
	testenv.RequireRoot(t)
	d := dockerDaemon(t)
	repo := testenv.NewRepo(t, testenv.RepoOptions{Owner: &testenv.Owner{UID: 1000, GID: 1000}})
	testenv.Git(t, repo, "-c", "safe.directory=*", "config", "user.name", "The Owner")
	testenv.Git(t, repo, "-c", "safe.directory=*", "config", "user.email", "owner@example.com")
	before := hostRefs(t, repo)
	configBefore, _ := os.ReadFile(filepath.Join(repo, ".git", "config"))
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", repo, "--worktree")
	if c.GitLayout != store.GitLayoutView || c.GitView == "" {
		t.Fatalf("conversation layout = %q view %q, want its own git view", c.GitLayout, c.GitView)
	}
	commit := func(msg string) { d.inside(c, "git commit -q --allow-empty -m '"+msg+"'") }
	d.inside(c, "git config user.name 'Agent Local' && git config user.email agent@example.com")

	t.Run("config", func(t *testing.T) {
		commit("by the agent")
		if got := d.inside(c, "git log -1 --format=%an"); got != "Agent Local" {
			t.Errorf("author = %q, want the agent's local identity", got)
		}
	})
	t.Run("branch-d-D", func(t *testing.T) {
		d.inside(c, "git branch merged-one && git branch -d merged-one")
		d.insideFails(c, "git rev-parse --verify --quiet refs/heads/merged-one")
		d.inside(c, "git switch -q -c unmerged && git commit -q --allow-empty -m u && git switch -q - && git branch -D unmerged")
		d.insideFails(c, "git rev-parse --verify --quiet refs/heads/unmerged")
	})
	t.Run("tag-d", func(t *testing.T) {
		d.inside(c, "git tag t1 && git tag -d t1")
		d.insideFails(c, "git rev-parse --verify --quiet refs/tags/t1")
	})
	t.Run("update-ref-d", func(t *testing.T) {
		d.inside(c, "git update-ref refs/heads/z HEAD && git pack-refs --all && git update-ref -d refs/heads/z")
		d.insideFails(c, "git rev-parse --verify --quiet refs/heads/z")
	})
	t.Run("stash", func(t *testing.T) {
		d.inside(c, "echo changed >> README.md && git stash push -q")
		if got := d.inside(c, "git status --porcelain"); got != "" {
			t.Errorf("status after stash push = %q, want clean", got)
		}
		d.inside(c, "git stash pop -q")
		if got := d.inside(c, "git status --porcelain"); got != "M README.md" {
			t.Errorf("status after stash pop = %q, want M README.md", got)
		}
		d.insideFails(c, "git rev-parse --verify --quiet refs/stash")
		d.inside(c, "git stash push -q && git stash drop -q")
		if got := d.inside(c, "git stash list"); got != "" {
			t.Errorf("stash list after drop = %q", got)
		}
	})
	t.Run("rebase-cherry-pick-revert", func(t *testing.T) {
		d.inside(c, "git switch -q -c feature && echo f > f.txt && git add f.txt && git commit -qm feature && git switch -q - && echo m > m.txt && git add m.txt && git commit -qm mainline")
		d.inside(c, "git switch -q feature && git rebase -q "+c.Branch)
		if got := oneLine(d.inside(c, "git log --format=%s -2")); got != "feature mainline" {
			t.Errorf("after rebase: %q", got)
		}
		d.inside(c, "git switch -q "+c.Branch+" && git merge -q --ff-only feature")
		d.inside(c, "git switch -q -c picks HEAD~1 && git cherry-pick feature >/dev/null && git revert --no-edit HEAD >/dev/null")
		if got := oneLine(d.inside(c, "git log --format=%s -2")); !strings.HasPrefix(got, `Revert "feature" feature`) {
			t.Errorf("after cherry-pick and revert: %q", got)
		}
		admin := filepath.Join(c.GitView, "worktrees", c.AdminID)
		for _, leftover := range []string{"CHERRY_PICK_HEAD", "REVERT_HEAD", "sequencer", "rebase-merge", "rebase-apply"} {
			if _, err := os.Lstat(filepath.Join(admin, leftover)); err == nil {
				t.Errorf("%s left in the view's admin dir", leftover)
			}
		}
		d.inside(c, "git switch -q "+c.Branch)
	})
	t.Run("remotes-upstream", func(t *testing.T) {
		d.inside(c, "git remote add other https://example.invalid/x.git && git update-ref refs/remotes/other/main HEAD && git branch --set-upstream-to=other/main")
		if got := d.inside(c, "git rev-parse --abbrev-ref @{upstream}"); got != "other/main" {
			t.Errorf("upstream = %q", got)
		}
		d.inside(c, "git branch --unset-upstream && git remote remove other")
		d.insideFails(c, "git config remote.other.url")
	})
	t.Run("gc-maintenance-pack-refs", func(t *testing.T) {
		d.inside(c, "git gc -q --prune=now && git maintenance run --task=gc --quiet && git pack-refs --all")
		d.inside(c, "git fsck --no-dangling")
		if got := d.inside(c, "git rev-parse --abbrev-ref HEAD"); got != c.Branch {
			t.Errorf("HEAD after gc = %q", got)
		}
	})
	t.Run("worktree-add-inside", func(t *testing.T) {
		d.inside(c, "git worktree add -q /tmp/inner -b inner && git -C /tmp/inner status --porcelain && git worktree remove /tmp/inner && git branch -D inner")
		for _, r := range porcelain(t, repo) {
			if r["worktree"] == "/tmp/inner" {
				t.Errorf("the host sees the worktree added inside: %v", r)
			}
		}
	})

	// The host saw nothing but the published branch.
	tip := d.inside(c, "git rev-parse "+c.Branch)
	waitHostRef(t, repo, "refs/heads/"+c.Branch, tip, 5*time.Second)
	if got := withoutConversation(hostRefs(t, repo), c.ID); !slices.Equal(got, withoutConversation(before, c.ID)) {
		t.Errorf("host refs changed:\nbefore %v\nafter  %v", before, got)
	}
	if b, _ := os.ReadFile(filepath.Join(repo, ".git", "config")); string(b) != string(configBefore) {
		t.Errorf("host config changed:\n%s", b)
	}
	testenv.Git(t, repo, "-c", "safe.directory=*", "fsck", "--strict", "--no-dangling")
	if got := testenv.Git(t, repo, "-c", "safe.directory=*", "log", "-1", "--format=%an", "refs/heads/"+c.Branch); got != "Agent Local" {
		t.Errorf("host branch author = %q", got)
	}
	var rm store.Conversation
	d.ohctlJSON(&rm, "rm", c.ID)
	if !rm.Removal.BranchKept || rm.Removal.Done != true {
		t.Errorf("rm = %+v", rm.Removal)
	}
}
