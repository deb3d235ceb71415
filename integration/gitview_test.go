package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/internal/testimage"
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
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}

// TestBackendGitViewEverydayGit: everything an agent does with git works inside
// the container (issue 11, acceptance 1), each checked by its outcome,
// and none of it changes what the host sees but the published branch.
func TestBackendGitViewEverydayGit(t *testing.T) {
	eachBackend(t, gitViewEverydayGit)
}

func gitViewEverydayGit(t *testing.T, b backend) {
	testenv.RequireRoot(t)
	d := b.daemon(t)
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

// TestBackendGitViewPublishLatency: a commit made inside is on the host's branch
// within a second (issue 11, acceptance 4): 50 commits, p99 of the time
// from the commit's end to the host ref moving.
func TestBackendGitViewPublishLatency(t *testing.T) {
	eachBackend(t, gitViewPublishLatency)
}

func gitViewPublishLatency(t *testing.T, b backend) {
	d := b.daemon(t)
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", repo, "--worktree")
	var lat []time.Duration
	for i := range 50 {
		tip := d.inside(c, fmt.Sprintf("git -c user.name=a -c user.email=a@x commit -q --allow-empty -m 'commit %d' && git rev-parse HEAD", i))
		t0 := time.Now()
		waitHostRef(t, repo, "refs/heads/"+c.Branch, tip, 10*time.Second)
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	t.Logf("publish latency over %d commits: p50 %v, p99 %v, max %v", len(lat), p50, p99, lat[len(lat)-1])
	if p99 > time.Second {
		t.Errorf("publish p99 = %v, want <= 1s (p50 %v)", p99, p50)
	}
	testenv.Git(t, repo, "-c", "safe.directory=*", "fsck", "--strict", "--no-dangling")
}

// TestBackendGitViewPublishSurvivesRestart: commits made while ohd is down are
// published once it is back (it adopts the container), and the last
// commits before a removal are final on the host.
func TestBackendGitViewPublishSurvivesRestart(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		d := b.daemon(t)
		repo := testenv.NewRepo(t, testenv.RepoOptions{})
		var c store.Conversation
		d.ohctlJSON(&c, "create", "--repo", repo, "--worktree")
		tip := d.inside(c, "git -c user.name=a -c user.email=a@x commit -q --allow-empty -m before && git rev-parse HEAD")
		waitHostRef(t, repo, "refs/heads/"+c.Branch, tip, 5*time.Second)
		d.kill()
		// The agent goes on while ohd is down.
		out, err := b.rawExec(t, c.ContainerID, "sh", "-c",
			"cd "+c.Worktree+" && git -c user.name=a -c user.email=a@x commit -q --allow-empty -m during && git rev-parse HEAD")
		if err != nil {
			t.Fatalf("commit while ohd is down: %v %s", err, out)
		}
		during := strings.TrimSpace(out)
		d.restart()
		waitHostRef(t, repo, "refs/heads/"+c.Branch, during, 10*time.Second)
		// A commit right before rm is published by the removal itself.
		last := d.inside(c, "git -c user.name=a -c user.email=a@x commit -q --allow-empty -m last && git rev-parse HEAD")
		var rm store.Conversation
		d.ohctlJSON(&rm, "rm", c.ID)
		if got := strings.TrimSpace(testenv.Git(t, repo, "-c", "safe.directory=*", "rev-parse", "refs/heads/"+c.Branch)); got != last {
			t.Errorf("after rm the host branch is %s, want the last commit %s", got, last)
		}
		if rm.Published != last {
			t.Errorf("record published = %s, want %s", rm.Published, last)
		}
	})
}

// TestBackendGitViewPublishConflictKept: a host branch moved by someone else is
// never overwritten; the conversation's commit is kept under
// refs/ohd/kept/<id>/ and show and doctor report the conflict.
func TestBackendGitViewPublishConflictKept(t *testing.T) {
	eachBackend(t, gitViewPublishConflictKept)
}

func gitViewPublishConflictKept(t *testing.T, b backend) {
	d := b.daemon(t)
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", repo, "--worktree")
	testenv.Git(t, repo, "-c", "safe.directory=*", "commit", "-q", "--allow-empty", "-m", "the user's own")
	userTip := strings.TrimSpace(testenv.Git(t, repo, "-c", "safe.directory=*", "rev-parse", "HEAD"))
	testenv.Git(t, repo, "-c", "safe.directory=*", "update-ref", "refs/heads/"+c.Branch, userTip)
	tip := d.inside(c, "git -c user.name=a -c user.email=a@x commit -q --allow-empty -m agent && git rev-parse HEAD")
	kept := "refs/ohd/kept/" + c.ID + "/heads/" + c.Branch
	waitHostRef(t, repo, kept, tip, 5*time.Second)
	if got := strings.TrimSpace(testenv.Git(t, repo, "-c", "safe.directory=*", "rev-parse", "refs/heads/"+c.Branch)); got != userTip {
		t.Errorf("the user's move of %s was overwritten: %s", c.Branch, got)
	}
	// The record is updated right after the kept ref is written.
	var show string
	waitFor(t, 5*time.Second, "ohctl show to report the conflict", func() bool {
		show = d.ohctl("show", c.ID)
		return strings.Contains(show, "publish conflict") && strings.Contains(show, kept)
	})
	doctor, _ := d.ohctlErr("doctor", c.ID)
	if !strings.Contains(doctor, "publish") || !strings.Contains(doctor, kept) {
		t.Errorf("ohctl doctor does not report the conflict:\n%s", doctor)
	}
	var rm store.Conversation
	d.ohctlJSON(&rm, "rm", c.ID)
	if !slices.Contains(rm.Removal.Kept, kept) {
		t.Errorf("removal kept %v, want %s", rm.Removal.Kept, kept)
	}
	if got := strings.TrimSpace(testenv.Git(t, repo, "-c", "safe.directory=*", "rev-parse", "refs/heads/"+c.Branch)); got != userTip {
		t.Errorf("removal overwrote the user's branch: %s", got)
	}
}

// TestBackendGitViewCorruptObjectRefused: an object the agent corrupted in its
// view is refused by git's validation on import, never imported, and
// reported.
func TestBackendGitViewCorruptObjectRefused(t *testing.T) {
	eachBackend(t, gitViewCorruptObjectRefused)
}

func gitViewCorruptObjectRefused(t *testing.T, b backend) {
	d := b.daemon(t)
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", repo, "--worktree")
	// A blob whose loose file holds another object's content (the agent
	// can write its view's objects; the test does it from the host side of
	// the same directory), then a commit of it that never re-reads it.
	ids := strings.Fields(d.inside(c, "echo real > real.txt && echo other > other.txt && git hash-object -w real.txt && git hash-object -w other.txt"))
	if len(ids) != 2 {
		t.Fatalf("hash-object printed %v", ids)
	}
	blob, other := ids[0], ids[1]
	loose := func(oid string) string { return filepath.Join(c.GitView, "objects", oid[:2], oid[2:]) }
	content, err := os.ReadFile(loose(other))
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(loose(blob), 0o644)
	if err := os.WriteFile(loose(blob), content, 0o644); err != nil {
		t.Fatal(err)
	}
	tip := d.inside(c, "git update-index --add --cacheinfo 100644,"+blob+",real.txt && git -c user.name=a -c user.email=a@x commit -q -m corrupt && git rev-parse HEAD")
	deadline := time.Now().Add(5 * time.Second)
	var got store.Conversation
	for time.Now().Before(deadline) {
		d.ohctlJSON(&got, "show", c.ID)
		if got.PublishError != "" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got.PublishError == "" {
		t.Fatalf("no publish error recorded for a corrupt object")
	}
	if host := strings.TrimSpace(testenv.Git(t, repo, "-c", "safe.directory=*", "rev-parse", "refs/heads/"+c.Branch)); host == tip {
		t.Errorf("the commit with a corrupt object was published")
	}
	if _, err := testenv.GitOutput(repo, "-c", "safe.directory=*", "cat-file", "-e", blob); err == nil {
		t.Errorf("the corrupt object %s is in the host's store", blob)
	}
	testenv.Git(t, repo, "-c", "safe.directory=*", "fsck", "--strict", "--no-dangling")
	if show := d.ohctl("show", c.ID); !strings.Contains(show, "publish error") {
		t.Errorf("ohctl show does not report the refused publish:\n%s", show)
	}
}

// TestGitViewMigratesSharedLayout: conversations made before git views
// (their containers mount the repository's git dir) keep working across
// an upgrade, move to their own view when their container next starts,
// and lose nothing when removed in either layout (issue 11, acceptance 7).
func TestGitViewMigratesSharedLayout(t *testing.T) {
	// Docker only by design: the shared layout is that of ohd before git views (issue 11), which ran only on Docker.
	testenv.RequireDocker(t)
	img := testimage.Ensure(t)
	dirs := newDirs(t)
	d := startDaemon(t, daemonOptions{Runtime: "docker", Failpoints: true, Dirs: &dirs,
		Env:  []string{"OHD_FAILPOINTS=legacy/shared-git-layout"},
		Args: []string{"--image", img, "--memory", "268435456"}})
	t.Cleanup(func() { removeServerContainers(t, d) })
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	var old, other store.Conversation
	d.ohctlJSON(&old, "create", "--repo", repo, "--worktree")
	d.ohctlJSON(&other, "create", "--repo", repo, "--worktree")
	if old.GitLayout != store.GitLayoutShared || old.GitView != "" {
		t.Fatalf("the legacy switch made layout %q view %q", old.GitLayout, old.GitView)
	}
	// The old layout: the agent writes the host's refs itself.
	tip := d.inside(old, "git -c user.name=a -c user.email=a@x commit -q --allow-empty -m old-layout && git rev-parse HEAD")
	waitHostRef(t, repo, "refs/heads/"+old.Branch, tip, time.Second)

	// Upgrade: the new ohd adopts both running containers as they are.
	d.opts.Env = nil
	d.restart()
	tip = d.inside(old, "git -c user.name=a -c user.email=a@x commit -q --allow-empty -m after-upgrade && git rev-parse HEAD")
	waitHostRef(t, repo, "refs/heads/"+old.Branch, tip, time.Second)

	// Its container stops; the next request starts it in its own view.
	run(t, "docker", "stop", "-t", "1", old.ContainerID)
	waitFor(t, 30*time.Second, "ohd to notice the stop", func() bool {
		var now store.Conversation
		d.ohctlJSON(&now, "show", old.ID)
		return now.State == store.StateStopped
	})
	d.inside(old, "true")
	var moved store.Conversation
	d.ohctlJSON(&moved, "show", old.ID)
	if moved.GitLayout != store.GitLayoutView || moved.GitView == "" || moved.Published != tip {
		t.Fatalf("after the restart: layout %q view %q published %s (want view, %s)", moved.GitLayout, moved.GitView, moved.Published, tip)
	}
	mounts := fmt.Sprint(get(inspect(t, moved.ContainerID), "Mounts"))
	if !strings.Contains(mounts, moved.GitView) {
		t.Errorf("the new container does not mount the view: %s", mounts)
	}
	before := withoutConversation(hostRefs(t, repo), old.ID)
	d.inside(old, "git update-ref -d refs/heads/main && git -c user.name=a -c user.email=a@x commit -q --allow-empty -m in-view")
	tip = d.inside(old, "git rev-parse HEAD")
	waitHostRef(t, repo, "refs/heads/"+old.Branch, tip, 5*time.Second)
	if got := withoutConversation(hostRefs(t, repo), old.ID); !slices.Equal(got, before) {
		t.Errorf("a migrated conversation changed host refs:\nbefore %v\nafter  %v", before, got)
	}

	// The other one is removed while still in the old layout: its work is
	// saved all the same (through a view made for the removal).
	testenv.WriteFile(t, filepath.Join(other.Worktree, "wip.txt"), "unsaved\n")
	var rm store.Conversation
	d.ohctlJSON(&rm, "rm", other.ID)
	if rm.Removal.SnapshotRef == "" {
		t.Fatalf("removal in the old layout saved no snapshot: %+v", rm.Removal)
	}
	if got := testenv.Git(t, repo, "-c", "safe.directory=*", "show", rm.Removal.SnapshotRef+":wip.txt"); strings.TrimSpace(got) != "unsaved" {
		t.Errorf("snapshot wip.txt = %q", got)
	}
	d.ohctlJSON(&rm, "rm", old.ID)
	if !rm.Removal.BranchKept {
		t.Errorf("the migrated conversation's branch was not kept: %+v", rm.Removal)
	}
	checkInvariants(t, d, repo)
}

// TestBackendGitViewNothingLost: ending a conversation keeps its branch, its
// uncommitted work, and the view's branches, tags and stash the host
// lacked; says how many ignored files it left out; lists what it kept
// after prune; and `ohctl restore` brings the work back in one command
// (issue 11, acceptance 5).
func TestBackendGitViewNothingLost(t *testing.T) {
	eachBackend(t, gitViewNothingLost)
}

func gitViewNothingLost(t *testing.T, b backend) {
	d := b.daemon(t)
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	testenv.WriteFile(t, filepath.Join(repo, ".gitignore"), "*.log\n")
	testenv.Git(t, repo, "add", ".gitignore")
	testenv.Git(t, repo, "commit", "-q", "-m", "ignore logs")
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", repo, "--worktree")
	g := "git -c user.name=a -c user.email=a@x "
	d.inside(c, g+"commit -q --allow-empty -m on-branch")
	d.inside(c, g+"switch -q -c side && "+g+"commit -q --allow-empty -m on-side && "+g+"tag -a -m t agent-tag && git switch -q "+c.Branch)
	d.inside(c, "echo stash-me > stashed.txt && git add stashed.txt && "+g+"stash -q")
	d.inside(c, "echo uncommitted > wip.txt && echo 0123456789 > build.log")
	// (the image has no rm: the file goes from the host side of the same
	// directory)
	if err := os.Remove(filepath.Join(c.Worktree, "README.md")); err != nil {
		t.Fatal(err)
	}

	out := d.ohctl("rm", c.ID)
	for _, want := range []string{"refs/ohd/snapshots/" + c.ID, "refs/ohd/kept/" + c.ID + "/heads/side", "refs/ohd/kept/" + c.ID + "/tags/agent-tag",
		"refs/ohd/kept/" + c.ID + "/stash", "not kept: 1 ignored files (11 bytes)", "ohctl restore " + c.ID} {
		if !strings.Contains(out, want) {
			t.Errorf("ohctl rm output lacks %q:\n%s", want, out)
		}
	}
	d.ohctl("prune")
	var all []store.Conversation
	d.ohctlJSON(&all, "ls", "--all")
	var after *store.Conversation
	for i := range all {
		if all[i].ID == c.ID {
			after = &all[i]
		}
	}
	if after == nil || after.Removal == nil || len(after.Removal.Kept) != 3 || after.Removal.IgnoredFiles != 1 || after.Removal.IgnoredBytes != 11 {
		t.Fatalf("after prune ls --all has %+v, want the record with its 3 kept refs and 1 ignored file", after)
	}
	if ls := d.ohctl("ls", "--all"); !strings.Contains(ls, "branch+snapshot+3 view refs") {
		t.Errorf("ls --all does not say what is kept:\n%s", ls)
	}
	if show := d.ohctl("show", c.ID); !strings.Contains(show, "refs/ohd/kept/"+c.ID+"/tags/agent-tag") || !strings.Contains(show, "ohctl restore") {
		t.Errorf("show after prune:\n%s", show)
	}

	into := filepath.Join(testenv.TempDir(t), "restored")
	out = d.ohctl("restore", c.ID, "--into", into)
	if !strings.Contains(out, into) {
		t.Errorf("restore output:\n%s", out)
	}
	if got := strings.TrimSpace(testenv.Git(t, into, "-c", "safe.directory=*", "log", "-1", "--format=%s")); got != "on-branch" {
		t.Errorf("restored HEAD = %q, want the conversation's last commit", got)
	}
	status := testenv.Git(t, into, "-c", "safe.directory=*", "status", "--porcelain")
	for _, want := range []string{"D README.md", "?? wip.txt"} {
		if !strings.Contains(status, want) {
			t.Errorf("restored worktree status lacks %q:\n%s", want, status)
		}
	}
	if _, err := os.Stat(filepath.Join(into, "build.log")); err == nil {
		t.Error("the ignored file came back: it was not kept")
	}
	// A second restore into the same place (its answer lost, say) says it
	// is done and changes nothing; into another existing directory it is
	// refused.
	before := testenv.Git(t, into, "status", "--porcelain")
	if out, err := d.ohctlErr("restore", c.ID, "--into", into); err != nil || !strings.Contains(out, "already restored in "+into) {
		t.Errorf("restoring again into %s = %v %q, want it already restored there", into, err, out)
	}
	if after := testenv.Git(t, into, "status", "--porcelain"); after != before {
		t.Errorf("the repeated restore changed the worktree: %q, was %q", after, before)
	}
	if _, err := d.ohctlErr("restore", c.ID, "--into", testenv.TempDir(t)); err == nil {
		t.Error("restoring into another existing directory succeeded")
	}
}
