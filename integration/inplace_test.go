package integration

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/store"
)

// Issue 18, acceptance 1, the functional half: in place, everyday git
// works as in a worktree, the agent's commits reach the host's
// openhands/<id> and never the checked-out branch, ending the
// conversation keeps the work, many conversations on one folder, a
// subdirectory, and the SDK's create (no worktree field) through the
// conversation API.

// ownedRepo is a repository owned by uid 1000 with a remote-tracking ref.
func ownedRepo(t *testing.T) string {
	t.Helper()
	testenv.RequireRoot(t)
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	testenv.ChownR(t, repo, attackOwner, attackOwner)
	return repo
}

// insideAt runs a script in dir inside the conversation's container and
// fails the test if it fails.
func (d *daemon) insideAt(c store.Conversation, dir, script string) string {
	d.t.Helper()
	code, out := d.execIn(c.ID, "sh", "-c", "cd "+dir+" && "+script)
	if code != 0 {
		d.t.Fatalf("inside %s %q: exit %d: %s", dir, script, code, out)
	}
	return strings.TrimSpace(out)
}

// hostGit runs git on the host in a repository owned by another user.
func hostGit(t *testing.T, repo string, args ...string) string {
	t.Helper()
	return testenv.Git(t, repo, append([]string{"-c", "safe.directory=*"}, args...)...)
}

const gitID = "git -c user.name=a -c user.email=a@x "

func TestBackendInPlaceEverydayGitAndPublish(t *testing.T) {
	eachBackend(t, inPlaceEverydayGitAndPublish)
}

func inPlaceEverydayGitAndPublish(t *testing.T, b backend) {
	d := b.daemon(t)
	repo := ownedRepo(t)
	main := hostGit(t, repo, "rev-parse", "main")
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", repo)
	if !c.InPlace || c.Worktree != "" || c.WorkingDir != repo || c.ViewBranch != "main" || c.Branch != "openhands/"+c.ID {
		t.Fatalf("create without --worktree = %+v, want in place on main", c)
	}
	if got := d.insideAt(c, repo, "git rev-parse --abbrev-ref HEAD && git status --porcelain"); got != "main" {
		t.Fatalf("inside: HEAD and status = %q, want main and a clean tree", got)
	}
	d.insideAt(c, repo, "echo one > one.txt && git add one.txt && "+gitID+"commit -q -m one && git log --oneline -2 && git diff HEAD~ --stat && "+
		"git branch side && git stash list && echo wip >> README.md && git stash -q && git stash pop -q && git status --short")
	tip := d.insideAt(c, repo, "git rev-parse HEAD")
	waitHostRef(t, repo, "refs/heads/openhands/"+c.ID, tip, 5*time.Second)
	// How long a commit takes to reach the host (measured, not asserted
	// beyond the 5 s above).
	t0 := time.Now()
	tip = d.insideAt(c, repo, gitID+"commit -q --allow-empty -m timed && git rev-parse HEAD")
	waitHostRef(t, repo, "refs/heads/openhands/"+c.ID, tip, 5*time.Second)
	t.Logf("a commit inside reached the host's openhands/<id> %v after the exec started", time.Since(t0).Round(time.Millisecond))
	if got := hostGit(t, repo, "rev-parse", "main"); got != main {
		t.Errorf("the host's main moved to %s; want %s (the agent's commits go to openhands/<id> only)", got, main)
	}
	if got := hostGit(t, repo, "symbolic-ref", "HEAD"); got != "refs/heads/main" {
		t.Errorf("the host's HEAD is %s", got)
	}
	// The agent's files are in the user's folder at once; the host's
	// index has not moved, so they show as the user's changes.
	if b, err := os.ReadFile(filepath.Join(repo, "one.txt")); err != nil || string(b) != "one\n" {
		t.Errorf("one.txt on the host = %q, %v", b, err)
	}
	if got := hostGit(t, repo, "status", "--porcelain"); !strings.Contains(got, "?? one.txt") || !strings.Contains(got, "M README.md") {
		t.Errorf("host status = %q, want one.txt untracked and README.md modified", got)
	}
}

func TestBackendInPlaceRemovalKeepsTheWork(t *testing.T) {
	eachBackend(t, inPlaceRemovalKeepsTheWork)
}

func inPlaceRemovalKeepsTheWork(t *testing.T, b backend) {
	d := b.daemon(t)
	repo := ownedRepo(t)
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", repo)
	d.insideAt(c, repo, "echo one > one.txt && git add one.txt && "+gitID+"commit -q -m one && "+
		"git checkout -q -b side && echo s > side.txt && git add side.txt && "+gitID+"commit -q -m side && "+gitID+"tag -a -m t agent-tag && "+
		"git checkout -q main && echo uncommitted > wip.txt")
	tip := d.insideAt(c, repo, "git rev-parse main")
	side := d.insideAt(c, repo, "git rev-parse side")
	waitHostRef(t, repo, "refs/heads/openhands/"+c.ID, tip, 5*time.Second)
	var rm store.Conversation
	d.ohctlJSON(&rm, "rm", c.ID)
	if rm.State != store.StateDeleted || rm.Removal == nil || !rm.Removal.BranchKept {
		t.Fatalf("rm = %+v, want deleted with the branch kept", rm.Removal)
	}
	for _, f := range []string{"one.txt", "wip.txt", "README.md"} {
		if _, err := os.Stat(filepath.Join(repo, f)); err != nil {
			t.Errorf("the folder lost %s: %v", f, err)
		}
	}
	if got := hostGit(t, repo, "rev-parse", "refs/heads/openhands/"+c.ID); got != tip {
		t.Errorf("openhands/<id> = %s, want %s", got, tip)
	}
	if got := hostGit(t, repo, "rev-parse", "refs/ohd/kept/"+c.ID+"/heads/side"); got != side {
		t.Errorf("the side branch is kept at %q, want %s (%v)", got, side, rm.Removal.Kept)
	}
	if got := hostGit(t, repo, "for-each-ref", "refs/ohd/kept/"+c.ID+"/tags/"); !strings.Contains(got, "agent-tag") {
		t.Errorf("the agent's tag is not kept: %q", got)
	}
	if _, err := os.Lstat(filepath.Dir(c.GitView)); !os.IsNotExist(err) {
		t.Errorf("the view is still there: %v", err)
	}
	if out, err := testenv.GitOutput(repo, "-c", "safe.directory=*", "worktree", "list", "--porcelain"); err != nil || strings.Count(out, "worktree ") != 1 {
		t.Errorf("registrations after removal: %v\n%s", err, out)
	}
	// A conversation with no commit of its own leaves no branch.
	var c2 store.Conversation
	d.ohctlJSON(&c2, "create", "--repo", repo)
	d.ohctlJSON(&rm, "rm", c2.ID)
	if out, _ := testenv.GitOutput(repo, "-c", "safe.directory=*", "branch", "--list", "openhands/"+c2.ID); strings.TrimSpace(out) != "" {
		t.Errorf("an unused conversation's branch stays: %q", out)
	}
}

// TestBackendInPlaceManyConversationsOneFolder: issue 28 acceptance 2. Any
// number of conversations work in one folder, as on the agent server:
// Canvas's (worktree: false), the SDK's (no worktree field) and ohctl's,
// in the folder and in a subdirectory of it. Two agents commit in the
// folder at once, each in its own view, and each one's commits reach its
// own openhands/<id>; ending one keeps its work and leaves the folder and
// the other conversation as they were.
func TestBackendInPlaceManyConversationsOneFolder(t *testing.T) {
	eachBackend(t, inPlaceManyConversationsOneFolder)
}

func inPlaceManyConversationsOneFolder(t *testing.T, be backend) {
	d := be.daemon(t)
	repo := ownedRepo(t)
	testenv.WriteFile(t, filepath.Join(repo, "sub", "f.txt"), "f\n")
	testenv.ChownR(t, repo, attackOwner, attackOwner)
	main := hostGit(t, repo, "rev-parse", "main")
	var first store.Conversation
	d.ohctlJSON(&first, "create", "--repo", repo)
	canvas, _ := d.apiCreate(map[string]any{"workspace": map[string]any{"kind": "LocalWorkspace", "working_dir": repo}, "worktree": false})
	sdk, _ := d.apiCreate(map[string]any{"workspace": map[string]any{"kind": "LocalWorkspace", "working_dir": repo}})
	var inSub store.Conversation
	d.ohctlJSON(&inSub, "create", "--repo", filepath.Join(repo, "sub"))
	for _, id := range []string{first.ID, canvas, sdk, inSub.ID} {
		if c := d.record(id); !c.InPlace || c.State != store.StateRunning || c.Branch != "openhands/"+id {
			t.Fatalf("conversation %s on the shared folder = %+v, want in place and running on its own branch", id, c)
		}
	}
	a, b := d.record(canvas), d.record(sdk)

	// Two agents commit at once, each its own file, in its own view.
	type result struct {
		who string
		tip string
	}
	done := make(chan result, 2)
	for _, c := range []store.Conversation{a, b} {
		go func(c store.Conversation) {
			name := c.ID[:8] + ".txt"
			code, out := d.execIn(c.ID, "sh", "-c", "cd "+repo+" && for i in 1 2 3; do echo $i >> "+name+" && git add "+name+" && "+gitID+"commit -q -m \"$i\" || exit 1; done && git rev-parse HEAD")
			if code != 0 {
				out = "FAILED " + out
			}
			done <- result{c.ID, strings.TrimSpace(out)}
		}(c)
	}
	tips := map[string]string{}
	for range 2 {
		r := <-done
		if strings.HasPrefix(r.tip, "FAILED") {
			t.Fatalf("conversation %s committing in the shared folder: %s", r.who, r.tip)
		}
		tips[r.who] = r.tip
	}
	for _, c := range []store.Conversation{a, b} {
		waitHostRef(t, repo, "refs/heads/openhands/"+c.ID, tips[c.ID], 10*time.Second)
		// Each branch holds its own agent's commits, not the other's.
		files := hostGit(t, repo, "ls-tree", "--name-only", "refs/heads/openhands/"+c.ID)
		other := map[string]string{a.ID: b.ID, b.ID: a.ID}[c.ID]
		if !strings.Contains(files, c.ID[:8]+".txt") || strings.Contains(files, other[:8]+".txt") {
			t.Errorf("openhands/%s holds %q, want its own file and not the other's", c.ID, files)
		}
		if n := hostGit(t, repo, "rev-list", "--count", main+"..refs/heads/openhands/"+c.ID); n != "3" {
			t.Errorf("openhands/%s has %s commits of its own, want 3", c.ID, n)
		}
	}
	if got := hostGit(t, repo, "rev-parse", "main"); got != main {
		t.Errorf("the host's main moved to %s", got)
	}

	// Ending one keeps its work and leaves the folder and the others.
	if r := d.call("DELETE", "/api/conversations/"+canvas, nil); r.Status != http.StatusOK {
		t.Fatalf("delete %s = %d %s", canvas, r.Status, r.Body)
	}
	if got := hostGit(t, repo, "rev-parse", "refs/heads/openhands/"+canvas); got != tips[canvas] {
		t.Errorf("the ended conversation's branch = %s, want %s", got, tips[canvas])
	}
	for _, f := range []string{canvas[:8] + ".txt", sdk[:8] + ".txt", "README.md", "sub/f.txt"} {
		if _, err := os.Stat(filepath.Join(repo, f)); err != nil {
			t.Errorf("after one ended, the folder lost %s: %v", f, err)
		}
	}
	tip := d.insideAt(b, repo, "echo more >> "+sdk[:8]+".txt && git add -A "+sdk[:8]+".txt && "+gitID+"commit -q -m more && git rev-parse HEAD")
	waitHostRef(t, repo, "refs/heads/openhands/"+sdk, tip, 10*time.Second)
	for _, id := range []string{first.ID, sdk, inSub.ID} {
		if r := d.call("DELETE", "/api/conversations/"+id, nil); r.Status != http.StatusOK {
			t.Errorf("delete %s = %d %s", id, r.Status, r.Body)
		}
	}
	if got := hostGit(t, repo, "rev-parse", "refs/heads/openhands/"+sdk); got != tip {
		t.Errorf("the last conversation's branch = %s, want %s", got, tip)
	}
	// The folder was given back to its owner only when the last
	// conversation on it ended (the agent could still write it after the
	// first ended, above): every file the agents made is the owner's.
	assertOwnedBy(t, repo, attackOwner)
}

func TestBackendInPlaceSubdirectory(t *testing.T) {
	eachBackend(t, inPlaceSubdirectory)
}

func inPlaceSubdirectory(t *testing.T, b backend) {
	d := b.daemon(t)
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	testenv.WriteFile(t, filepath.Join(repo, "sub", "f.txt"), "f\n")
	testenv.Git(t, repo, "add", "sub")
	testenv.Git(t, repo, "commit", "-q", "-m", "sub")
	testenv.ChownR(t, repo, attackOwner, attackOwner)
	sub := filepath.Join(repo, "sub")
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", sub)
	if !c.InPlace || c.Repo != repo || c.WorkingDir != sub {
		t.Fatalf("create in a subdirectory = %+v", c)
	}
	// Git inside sees the whole work tree, unchanged.
	if got := d.insideAt(c, sub, "git status --porcelain && git ls-files --full-name :/"); got != "README.md\nsub/f.txt" {
		t.Errorf("inside: status and file count = %q, want a clean tree of 2 files", got)
	}
	d.insideAt(c, sub, "echo g > g.txt && git add g.txt && "+gitID+"commit -q -m g")
	waitHostRef(t, repo, "refs/heads/openhands/"+c.ID, d.insideAt(c, sub, "git rev-parse HEAD"), 5*time.Second)
	// Only the subdirectory is writable.
	if code, out := d.execIn(c.ID, "sh", "-c", "echo x >> "+filepath.Join(repo, "README.md")); code == 0 {
		t.Errorf("the agent wrote outside the subdirectory: %s", out)
	}
	if b, _ := os.ReadFile(filepath.Join(repo, "README.md")); string(b) != "hello\n" {
		t.Errorf("README.md = %q", b)
	}
	d.insideAt(c, sub, "echo evil >> "+filepath.Join(repo, ".git", "config"))
	if b, _ := os.ReadFile(filepath.Join(repo, ".git", "config")); strings.Contains(string(b), "evil") {
		t.Error("the agent wrote the host's .git/config")
	}
	var rm store.Conversation
	d.ohctlJSON(&rm, "rm", c.ID)
	if _, err := os.Stat(filepath.Join(sub, "g.txt")); err != nil {
		t.Errorf("the subdirectory lost the agent's file: %v", err)
	}
}

// TestBackendInPlaceSDKCreate: the SDK's create has no worktree field; Agent
// Canvas's picked workspace sends worktree: false. Both work in the folder
// with a view, through the conversation API.
func TestBackendInPlaceSDKCreate(t *testing.T) {
	eachBackend(t, inPlaceSDKCreate)
}

func inPlaceSDKCreate(t *testing.T, b backend) {
	d := b.daemon(t)
	for _, body := range []map[string]any{
		{"workspace": map[string]any{"working_dir": ""}},
		{"workspace": map[string]any{"working_dir": ""}, "worktree": false},
	} {
		repo := ownedRepo(t)
		body["workspace"].(map[string]any)["working_dir"] = repo
		id, info := d.apiCreate(body)
		c := d.record(id)
		if !c.InPlace || c.GitView == "" || c.Worktree != "" {
			t.Fatalf("create %v = %+v (answer %v), want in place with a view", body, c, info)
		}
		d.insideAt(c, repo, `printf '[diff]\n\texternal = /bin/false\n' >> .git/config && echo ok > ok.txt && git add ok.txt && `+gitID+`commit -q -m ok`)
		if b, _ := os.ReadFile(filepath.Join(repo, ".git", "config")); strings.Contains(string(b), "external") {
			t.Error("the agent wrote the host's .git/config")
		}
		waitHostRef(t, repo, "refs/heads/openhands/"+id, d.insideAt(c, repo, "git rev-parse HEAD"), 5*time.Second)
		// The SDK's RemoteWorkspace (v1.43.1) downloads files and reads git
		// changes on the global routes, without the conversation: the path
		// names it.
		if r := d.call("GET", "/api/file/download?path="+url.QueryEscape(filepath.Join(repo, "ok.txt")), nil); r.Status != http.StatusOK || strings.TrimSpace(string(r.Body)) != "ok" {
			t.Errorf("global file download of the conversation's file = %d %q", r.Status, r.Body)
		}
		d.insideAt(c, repo, "echo new > sdk-change.txt")
		if r := d.call("GET", "/api/git/changes?path="+url.QueryEscape(repo), nil); r.Status != http.StatusOK || !strings.Contains(string(r.Body), "sdk-change.txt") {
			t.Errorf("global git changes of the conversation's folder = %d %s, want sdk-change.txt", r.Status, r.Body)
		}
		if r := d.call("DELETE", "/api/conversations/"+id, nil); r.Status != http.StatusOK {
			t.Errorf("delete = %d %s", r.Status, r.Body)
		}
		if _, err := os.Stat(filepath.Join(repo, "ok.txt")); err != nil {
			t.Errorf("the folder lost the agent's file: %v", err)
		}
	}
}

// TestBackendInPlaceLinkedWorktreeFolder: a folder that is itself a linked
// worktree gets the view at the common dir's path, its .git file mounted
// read-only (the agent cannot point the user's git elsewhere), HEAD on
// the worktree's branch.
func TestBackendInPlaceLinkedWorktreeFolder(t *testing.T) {
	eachBackend(t, inPlaceLinkedWorktreeFolder)
}

func inPlaceLinkedWorktreeFolder(t *testing.T, b backend) {
	d := b.daemon(t)
	repo := ownedRepo(t)
	linked := filepath.Join(filepath.Dir(repo), "linked")
	hostGit(t, repo, "worktree", "add", "-q", "-b", "topic", linked)
	testenv.ChownR(t, filepath.Dir(repo), attackOwner, attackOwner)
	topic := hostGit(t, repo, "rev-parse", "topic")
	dotGit, _ := os.ReadFile(filepath.Join(linked, ".git"))
	config, _ := os.ReadFile(filepath.Join(repo, ".git", "config"))
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", linked)
	if !c.InPlace || c.ViewBranch != "topic" || c.AdminID == "" {
		t.Fatalf("create in a linked worktree = %+v", c)
	}
	if got := d.insideAt(c, linked, "git rev-parse --abbrev-ref HEAD && git status --porcelain"); got != "topic" {
		t.Fatalf("inside: %q, want topic and a clean tree", got)
	}
	d.insideAt(c, linked, "echo l > l.txt && git add l.txt && "+gitID+"commit -q -m l")
	waitHostRef(t, repo, "refs/heads/openhands/"+c.ID, d.insideAt(c, linked, "git rev-parse HEAD"), 5*time.Second)
	if got := hostGit(t, repo, "rev-parse", "topic"); got != topic {
		t.Errorf("the host's topic moved to %s", got)
	}
	// The attacks: the .git file redirected, the config written.
	d.execIn(c.ID, "sh", "-c", "cd "+linked+" && echo 'gitdir: /tmp' > .git; git config core.fsmonitor /bin/false; printf '[diff]\\n\\texternal = /bin/false\\n' >> "+filepath.Join(repo, ".git", "config"))
	if b, _ := os.ReadFile(filepath.Join(linked, ".git")); string(b) != string(dotGit) {
		t.Errorf("the agent rewrote the linked worktree's .git file: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(repo, ".git", "config")); string(b) != string(config) {
		t.Errorf("the agent wrote the host's config: %q", b)
	}
	var rm store.Conversation
	d.ohctlJSON(&rm, "rm", c.ID)
	if out := hostGit(t, repo, "worktree", "list", "--porcelain"); !strings.Contains(out, linked) {
		t.Errorf("the user's linked worktree is no longer registered:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(linked, "l.txt")); err != nil {
		t.Errorf("the folder lost the agent's file: %v", err)
	}
}

// TestBackendInPlaceCrash: an ohd killed at each step of an in-place create or
// removal is finished by reconcile: a crashed create leaves neither a view
// nor a branch nor a record that would refuse the next create (409); a
// crashed removal still keeps the agent's commit and the folder's files.
func TestBackendInPlaceCrash(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		dirs := newDirs(t)
		repo := testenv.NewRepo(t, testenv.RepoOptions{})
		d := b.start(t, daemonOptions{Failpoints: true, Dirs: &dirs})
		crashWith := func(point string, action func()) {
			t.Helper()
			d.stop()
			d.opts.Env = []string{"OHD_FAILPOINTS=" + point}
			d.start()
			action()
			if !d.waitExit(120e9) {
				t.Fatalf("%s: ohd did not die of SIGKILL: %v\n%s", point, d.err, tail(d.logs.String(), 20))
			}
			d.opts.Env = nil
			d.start() // reconcile
		}
		for _, point := range []string{"create/after-record", "create/after-worktree", "create/after-broker", "create/after-start"} {
			crashWith(point, func() {
				if _, err := d.ohctlErr("create", "--repo", repo); err == nil {
					t.Errorf("%s: create succeeded through a crash", point)
				}
			})
			checkInvariants(t, d, repo)
			if refs := hostGit(t, repo, "for-each-ref", "--format=%(refname)", "refs/heads/openhands/"); refs != "" {
				t.Errorf("%s: branches left: %s", point, refs)
			}
			if entries, _ := os.ReadDir(dirs.Worktrees); len(entries) != 0 {
				t.Errorf("%s: views left: %v", point, entries)
			}
		}
		for _, point := range []string{"delete/after-mark", "delete/after-container", "delete/after-broker", "delete/after-worktree", "release/mid-move"} {
			var c store.Conversation
			d.ohctlJSON(&c, "create", "--repo", repo)
			tip := d.insideAt(c, repo, "echo "+strings.ReplaceAll(point, "/", "-")+" > crash.txt && git add crash.txt && "+gitID+"commit -q -m crash && git rev-parse HEAD")
			waitHostRef(t, repo, "refs/heads/openhands/"+c.ID, tip, 5*time.Second)
			d.insideAt(c, repo, "echo unsaved > unsaved.txt")
			planted := []string{"planted-a/.git", "planted-b/.git"}
			if point == "release/mid-move" {
				// Two git directories of the agent's: the removal is killed
				// after moving the first out (issue 26).
				d.insideAt(c, repo, "git init -q planted-a && git init -q planted-b")
			}
			crashWith(point, func() {
				if _, err := d.ohctlErr("rm", c.ID); err == nil {
					t.Errorf("%s: rm succeeded through a crash", point)
				}
			})
			// ohd finishes an interrupted removal in the background once it
			// listens.
			waitForState(t, d, c.ID, store.StateDeleted, 2*time.Minute)
			checkInvariants(t, d, repo)
			after := d.record(c.ID)
			if after.State != store.StateDeleted || after.Removal == nil || !after.Removal.Done {
				t.Errorf("%s: removal not finished after restart: %s %+v", point, after.State, after.Removal)
			}
			if got := hostGit(t, repo, "rev-parse", "refs/heads/openhands/"+c.ID); got != tip {
				t.Errorf("%s: openhands/<id> = %s, want %s", point, got, tip)
			}
			if b, err := os.ReadFile(filepath.Join(repo, "unsaved.txt")); err != nil || string(b) != "unsaved\n" {
				t.Errorf("%s: the folder lost unsaved.txt: %q %v", point, b, err)
			}
			if point == "release/mid-move" {
				kept := filepath.Join(dirs.State, "kept", c.ID, "git-dirs")
				for _, p := range planted {
					if _, err := os.Lstat(filepath.Join(repo, p)); err == nil {
						t.Errorf("%s: the agent's %s is still in the folder after the finished removal", point, p)
					}
					if _, err := os.Stat(filepath.Join(kept, p, "HEAD")); err != nil {
						t.Errorf("%s: the agent's %s is not kept: %v", point, p, err)
					}
				}
				moved := slices.Sorted(slices.Values(after.Removal.GitDirsMoved))
				if got := strings.Join(moved, ","); got != strings.Join(planted, ",") {
					t.Errorf("%s: the removal reports %q moved, want both of %v (the journal keeps what the killed run moved)", point, got, planted)
				}
				for _, p := range []string{"planted-a", "planted-b"} {
					_ = os.RemoveAll(filepath.Join(repo, p))
				}
			}
		}
	})
}
