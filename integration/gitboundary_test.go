package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/store"
)

// Issue 26: the user's git never runs what the agent wrote. The agent's
// container runs as a uid of its own (10001 here, the default without a
// system user ohd-agent); the user's tree is shared with it through ACLs;
// git's ownership check refuses every git directory it makes; at the
// removal those move out of the tree and every file is the user's again.

const agentUID = 10001

// userGit runs git on the host as the repository owner with git's own
// default config (no safe.directory), as the user would.
func userGit(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := testenv.AsUser(exec.Command("git", args...), attackOwner, attackOwner)
	cmd.Dir, cmd.Env = dir, append(testenv.GitEnv(), "GIT_PAGER=cat")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// asOwner runs a shell command on the host as the repository owner.
func asOwner(t *testing.T, dir, script string) (string, error) {
	t.Helper()
	cmd := testenv.AsUser(exec.Command("sh", "-c", script), attackOwner, attackOwner)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestBackendAgentRunsAsItsOwnUIDInPlace: in place, in a repository of uid 1000,
// the container runs as the agent's uid; what the agent writes the user
// edits; the .git the agent plants in the user's docs/ (with an fsmonitor
// that would mark its run) is refused by the user's git there during the
// conversation; `ohctl rm` moves it out into ohd's kept state and says so,
// and every file in the folder is uid 1000's again.
func TestBackendAgentRunsAsItsOwnUIDInPlace(t *testing.T) {
	eachBackend(t, agentRunsAsItsOwnUIDInPlace)
}

func agentRunsAsItsOwnUIDInPlace(t *testing.T, b backend) {
	testenv.RequireRoot(t)
	d := b.daemon(t)
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	testenv.WriteFile(t, filepath.Join(repo, "docs", "guide.md"), "guide\n")
	testenv.Git(t, repo, "add", "docs")
	testenv.Git(t, repo, "commit", "-q", "-m", "docs")
	testenv.ChownR(t, repo, attackOwner, attackOwner)
	markers := mustTempDir(t, "ohd-marker-")
	if err := os.Chmod(markers, 0o777); err != nil {
		t.Fatal(err)
	}

	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", repo)
	if !c.InPlace || c.UID != attackOwner || c.AgentUID != agentUID {
		t.Fatalf("create: want in place, owner %d, agent %d; got %+v", attackOwner, agentUID, c)
	}
	if user := b.workload(t, c.ContainerID).User; user != "10001:10001" {
		t.Fatalf("the container runs as %q, want the agent's 10001:10001", user)
	}

	// The agent's everyday work: a new file, an edit of the user's, a
	// commit in its view.
	script := "cd " + repo + " && echo agent > agent.txt && echo more >> README.md && echo m > docs/made.md && " +
		"git add -A && git -c user.name=a -c user.email=a@x commit -q -m agent && git status --short"
	if code, out := d.execIn(c.ID, "sh", "-c", script); code != 0 {
		t.Fatalf("the agent's git in the user's tree: exit %d: %s", code, out)
	}
	if st, err := os.Lstat(filepath.Join(repo, "agent.txt")); err != nil || st.Sys().(*syscall.Stat_t).Uid != agentUID {
		t.Fatalf("the agent's file on the host: %v, want it owned by the agent's uid %d", err, agentUID)
	}
	// The user edits and deletes the agent's files, with their own git.
	if out, err := asOwner(t, repo, "echo user >> agent.txt && echo u >> docs/made.md && rm docs/made.md && echo n > docs/new.md"); err != nil {
		t.Fatalf("the user cannot edit the agent's files: %v\n%s", err, out)
	}
	if out, err := userGit(t, repo, "status", "--short"); err != nil {
		t.Fatalf("the user's git status at the root: %v\n%s", err, out)
	}
	// The user's everyday git on files the agent made, in directories
	// lent to the agent's uid (docs/): take them into a commit, stash and
	// pop an edit, check one out over an edit and over its deletion.
	for _, op := range [][]string{
		{"add", "agent.txt", "docs/new.md"}, {"commit", "-q", "-m", "the user takes the agent's files"},
		{"stash", "-q"}, {"stash", "pop", "-q"},
		{"checkout", "--", "agent.txt"}, {"rm", "-q", "--cached", "docs/new.md"}, {"add", "docs/new.md"},
	} {
		if op[0] == "stash" && op[1] == "-q" {
			if out, err := asOwner(t, repo, "echo stashed >> agent.txt && echo stashed >> docs/new.md"); err != nil {
				t.Fatalf("the user's edit before stash: %v\n%s", err, out)
			}
		}
		if op[0] == "checkout" {
			if out, err := asOwner(t, repo, "echo edit >> agent.txt"); err != nil {
				t.Fatalf("the user's edit before checkout: %v\n%s", err, out)
			}
		}
		if out, err := userGit(t, repo, op...); err != nil {
			t.Fatalf("the user's git %v on the agent's files: %v\n%s", op, err, out)
		}
	}
	if out, err := asOwner(t, repo, "rm docs/new.md"); err != nil {
		t.Fatalf("the user's rm of docs/new.md: %v\n%s", err, out)
	}
	if out, err := userGit(t, repo, "checkout", "--", "docs/new.md"); err != nil {
		t.Fatalf("the user's git checkout of the deleted docs/new.md: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(filepath.Join(repo, "agent.txt")); strings.Contains(string(b), "edit") || strings.Contains(string(b), "stashed") {
		t.Errorf("agent.txt after the user's checkout = %q, want it as committed", b)
	}
	if b, _ := os.ReadFile(filepath.Join(repo, "docs", "new.md")); !strings.Contains(string(b), "stashed") {
		t.Errorf("docs/new.md after the user's stash pop, add, rm and checkout = %q, want the popped edit", b)
	}

	// The plant: a repository in the user's docs/ whose fsmonitor marks.
	plant := "cd " + repo + "/docs && git init -q . && git config core.fsmonitor 'touch " + markers + "/fsmonitor-ran; false'"
	if code, out := d.execIn(c.ID, "sh", "-c", plant); code != 0 {
		t.Fatalf("plant: exit %d: %s", code, out)
	}
	// status and log refuse with git's words; diff, refused the same way,
	// falls back to comparing paths and says it is no repository.
	for _, args := range [][]string{{"status"}, {"diff"}, {"log", "-p", "-1"}} {
		out, err := userGit(t, filepath.Join(repo, "docs"), args...)
		if err == nil || !strings.Contains(out, "dubious ownership") && !strings.Contains(out, "Not a git repository") {
			t.Errorf("the user's git %v in docs/ during the conversation = %v %q; want a refusal (dubious ownership)", args, err, tail(out, 3))
		}
	}
	if out, err := userGit(t, repo, "status"); err != nil {
		t.Errorf("the user's git status at the root during the conversation: %v\n%s", err, out)
	}
	assertNoMarker(t, markers, "during the conversation")

	rm := d.ohctl("rm", c.ID)
	kept := filepath.Join(d.dirs.State, "kept", c.ID, "git-dirs")
	if !strings.Contains(rm, "docs/.git") || !strings.Contains(rm, kept) {
		t.Errorf("ohctl rm does not say it moved docs/.git to %s:\n%s", kept, rm)
	}
	if _, err := os.Lstat(filepath.Join(repo, "docs", ".git")); err == nil {
		t.Errorf("docs/.git is still in the user's tree after ohctl rm")
	}
	if st, err := os.Stat(filepath.Join(kept, "docs", ".git", "config")); err != nil || !st.Mode().IsRegular() {
		t.Errorf("the agent's docs/.git is not kept under %s: %v", kept, err)
	}
	var after store.Conversation
	d.ohctlJSON(&after, "show", c.ID)
	if after.Removal == nil || len(after.Removal.GitDirsMoved) != 1 || after.Removal.GitDirsMoved[0] != "docs/.git" || after.Removal.GitDirsKept != kept {
		t.Errorf("removal record = %+v, want docs/.git moved to %s", after.Removal, kept)
	}
	assertOwnedBy(t, repo, attackOwner)
	for _, dir := range []string{repo, filepath.Join(repo, "docs")} {
		for _, args := range [][]string{{"status"}, {"diff"}, {"log", "-p", "-1"}} {
			if out, err := userGit(t, dir, args...); err != nil {
				t.Errorf("the user's git %v in %s after ohctl rm: %v\n%s", args, dir, err, out)
			}
		}
	}
	assertNoMarker(t, markers, "after ohctl rm")

	// ohctl restore brings the agent's git directories back as files: a
	// tar of the user's next to the restored worktree, which no git
	// opens, never a live .git in a tree the user's git runs in.
	restored := repo + ".restore-" + c.ID[:8]
	archive := restored + ".agent-git-dirs.tar"
	if out := d.ohctl("restore", c.ID); !strings.Contains(out, archive) || !strings.Contains(out, "docs/.git") {
		t.Errorf("ohctl restore does not say the agent's docs/.git is in %s:\n%s", archive, out)
	}
	if st, err := os.Lstat(archive); err != nil || st.Sys().(*syscall.Stat_t).Uid != attackOwner || st.Mode().Perm() != 0o600 {
		t.Errorf("the archive %s: %v, want a 0600 file of the user's", archive, err)
	}
	if out, err := asOwner(t, filepath.Dir(restored), "tar -tf "+archive); err != nil || !strings.Contains(out, "docs/.git/config") {
		t.Errorf("the user's tar -tf of the archive: %v\n%s; want docs/.git/config in it", err, out)
	}
	if _, err := os.Lstat(filepath.Join(restored, "docs", ".git")); err == nil {
		t.Errorf("the restored worktree has a docs/.git: the agent's git directory came back live")
	}
	for _, dir := range []string{restored, filepath.Join(restored, "docs")} {
		for _, args := range [][]string{{"status"}, {"diff"}, {"log", "-p", "-1"}} {
			if out, err := userGit(t, dir, args...); err != nil {
				t.Errorf("the user's git %v in the restored %s: %v\n%s", args, dir, err, out)
			}
		}
	}
	assertNoMarker(t, markers, "after ohctl restore")
}

// assertOwnedBy fails for every inode under root that uid does not own.
func assertOwnedBy(t *testing.T, root string, uid int) {
	t.Helper()
	bad := 0
	_ = filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		if got := int(fi.Sys().(*syscall.Stat_t).Uid); got != uid && bad < 10 {
			bad++
			t.Errorf("%s is owned by uid %d after ohctl rm, want %d", p, got, uid)
		}
		return nil
	})
}

func assertNoMarker(t *testing.T, dir, stage string) {
	t.Helper()
	if ents, _ := os.ReadDir(dir); len(ents) > 0 {
		t.Errorf("%s: the agent's program ran on the host as the user: %s", stage, ents[0].Name())
	}
}

// TestBackendAgentRunsAsItsOwnUIDWorktreeAndPlain: the same boundary in a
// worktree (shared by inheritance from its conversation directory, no
// walk) and in a plain folder (the agent's .git at the folder's root and
// in a subfolder), through the conversation's removal.
func TestBackendAgentRunsAsItsOwnUIDWorktreeAndPlain(t *testing.T) {
	eachBackend(t, agentRunsAsItsOwnUIDWorktreeAndPlain)
}

func agentRunsAsItsOwnUIDWorktreeAndPlain(t *testing.T, b backend) {
	testenv.RequireRoot(t)
	d := b.daemon(t)
	for _, mode := range []string{"worktree", "plain"} {
		t.Run(mode, func(t *testing.T) {
			var tree string
			args := []string{"create"}
			switch mode {
			case "worktree":
				repo := testenv.NewRepo(t, testenv.RepoOptions{})
				testenv.WriteFile(t, filepath.Join(repo, "docs", "guide.md"), "guide\n")
				testenv.Git(t, repo, "add", "docs")
				testenv.Git(t, repo, "commit", "-q", "-m", "docs")
				testenv.ChownR(t, repo, attackOwner, attackOwner)
				args = append(args, "--repo", repo, "--worktree")
			case "plain":
				tree = filepath.Join(testenv.TempDir(t), "folder")
				testenv.WriteFile(t, filepath.Join(tree, "docs", "guide.md"), "guide\n")
				testenv.ChownR(t, tree, attackOwner, attackOwner)
				args = append(args, "--repo", tree)
			}
			var c store.Conversation
			d.ohctlJSON(&c, args...)
			if mode == "worktree" {
				tree = c.Worktree
			}
			if c.AgentUID != agentUID || tree == "" {
				t.Fatalf("create: want agent %d, got %+v", agentUID, c)
			}
			plant := "cd " + tree + " && echo agent > agent.txt && echo a >> docs/guide.md && git init -q docs && git -C docs config core.fsmonitor 'echo ran > " + tree + "/fsmonitor-ran; false'"
			if mode == "plain" {
				plant += " && git init -q . && git config core.fsmonitor 'echo ran > " + tree + "/fsmonitor-ran; false'"
			}
			if code, out := d.execIn(c.ID, "sh", "-c", plant); code != 0 {
				t.Fatalf("the agent's work: exit %d: %s", code, out)
			}
			if out, err := asOwner(t, tree, "echo user >> agent.txt && echo u >> docs/guide.md"); err != nil {
				t.Fatalf("the user cannot edit the agent's files: %v\n%s", err, out)
			}
			dirs := []string{filepath.Join(tree, "docs")}
			if mode == "plain" {
				dirs = append(dirs, tree)
			}
			for _, dir := range dirs {
				if out, err := userGit(t, dir, "status"); err == nil || !strings.Contains(out, "dubious ownership") {
					t.Errorf("the user's git status in %s during the conversation = %v %q; want dubious ownership", dir, err, tail(out, 3))
				}
			}
			if _, err := os.Lstat(filepath.Join(tree, "fsmonitor-ran")); err == nil {
				t.Fatalf("the agent's fsmonitor ran during the conversation")
			}
			if out, err := d.ohctlErr("doctor", c.ID); !strings.Contains(out, "docs/.git") {
				t.Errorf("ohctl doctor %s does not list the agent's docs/.git (%v):\n%s", c.ID, err, out)
			}
			rm := d.ohctl("rm", c.ID)
			if !strings.Contains(rm, "docs/.git") {
				t.Errorf("ohctl rm does not say it moved docs/.git:\n%s", rm)
			}
			kept := filepath.Join(d.dirs.State, "kept", c.ID, "git-dirs")
			if _, err := os.Stat(filepath.Join(kept, "docs", ".git", "config")); err != nil {
				t.Errorf("docs/.git is not kept: %v", err)
			}
			if mode == "plain" {
				if _, err := os.Stat(filepath.Join(kept, ".git", "config")); err != nil {
					t.Errorf("the folder's planted .git is not kept: %v", err)
				}
				assertOwnedBy(t, tree, attackOwner)
				for _, dir := range dirs {
					if out, err := userGit(t, dir, "status"); err == nil || !strings.Contains(out, "not a git repository") {
						t.Errorf("the user's git status in %s after rm = %v %q; want no repository", dir, err, tail(out, 3))
					}
				}
				if _, err := os.Lstat(filepath.Join(tree, "fsmonitor-ran")); err == nil {
					t.Errorf("the agent's fsmonitor ran after rm")
				}
			}
		})
	}
}

// TestBackendCreateRefusedWhereTheBoundaryCannotHold: a folder on a filesystem
// without ACLs (ramfs) cannot be shared with the agent's uid: the create
// is refused with the fix named, and nothing is made (never silently
// weaker: the container would otherwise have to run as the user).
func TestBackendCreateRefusedWhereTheBoundaryCannotHold(t *testing.T) {
	eachBackend(t, createRefusedWhereTheBoundaryCannotHold)
}

func createRefusedWhereTheBoundaryCannotHold(t *testing.T, b backend) {
	testenv.RequireRoot(t)
	d := b.daemon(t)
	dir := filepath.Join(testenv.TempDir(t), "ramfs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "ramfs", "none", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount ramfs: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	testenv.WriteFile(t, filepath.Join(dir, "notes.txt"), "n\n")
	testenv.ChownR(t, dir, attackOwner, attackOwner)
	out, err := d.ohctlErr("create", "--repo", dir)
	if err == nil || !strings.Contains(err.Error(), "POSIX ACLs") || !strings.Contains(err.Error(), "ext4") {
		t.Fatalf("create on ramfs = %v %q; want a refusal naming POSIX ACLs and the fix", err, out)
	}
	if ls := d.ohctl("ls", "--all"); strings.Contains(ls, dir) {
		t.Errorf("a refused create left a record:\n%s", ls)
	}
}

// TestServeRefusesRootAgent: --agent-uid 0 would make everything the agent
// writes root's, which git trusts.
func TestServeRefusesRootAgent(t *testing.T) {
	binaries(t)
	cmd := exec.Command(built.ohd, "serve", "--agent-uid", "0", "--runtime", "local")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--agent-uid 0") {
		t.Fatalf("ohd serve --agent-uid 0 = %v %q, want a refusal", err, out)
	}
}

// TestBackendCreateRefusedForAgentUIDOfTheOwner: an agent uid equal to the
// repository's owner would make the agent's .git the user's to git.
func TestBackendCreateRefusedForAgentUIDOfTheOwner(t *testing.T) {
	eachBackend(t, createRefusedForAgentUIDOfTheOwner)
}

func createRefusedForAgentUIDOfTheOwner(t *testing.T, b backend) {
	testenv.RequireRoot(t)
	d := b.daemon(t, "--agent-uid", "1000", "--agent-gid", "1000")
	repo := testenv.NewRepo(t, testenv.RepoOptions{Owner: &testenv.Owner{UID: attackOwner, GID: attackOwner}})
	out, err := d.ohctlErr("create", "--repo", repo)
	if err == nil || !strings.Contains(err.Error(), "repository owner's") || !strings.Contains(err.Error(), "--agent-uid") {
		t.Fatalf("create with the owner's uid as the agent's = %v %q; want a refusal naming --agent-uid", err, out)
	}
}

// TestDoctorRepoFindsGitDirsOfEarlierAgents: an earlier ohd's agent ran as
// the user, so what it planted is the user's to git's ownership check:
// doctor --repo reports a repository in a tracked directory that is no
// submodule, and an implicit bare repository in a directory of the user's,
// and recommends safe.bareRepository=explicit.
func TestDoctorRepoFindsGitDirsOfEarlierAgents(t *testing.T) {
	testenv.RequireRoot(t)
	d := startDaemon(t, daemonOptions{})
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	testenv.WriteFile(t, filepath.Join(repo, "docs", "guide.md"), "g\n")
	testenv.WriteFile(t, filepath.Join(repo, "notes", "n.md"), "n\n")
	testenv.Git(t, repo, "add", "-A")
	testenv.Git(t, repo, "commit", "-q", "-m", "docs")
	testenv.Git(t, filepath.Join(repo, "docs"), "init", "-q", ".")
	testenv.Git(t, repo, "init", "-q", "--bare", "notes")
	testenv.ChownR(t, repo, attackOwner, attackOwner)
	out, _ := d.ohctlErr("doctor", "--repo", repo)
	for _, want := range []string{"docs/.git", "no submodule", "notes", "implicit bare repository", "safe.bareRepository"} {
		if !strings.Contains(out, want) {
			t.Errorf("ohctl doctor --repo does not say %q:\n%s", want, out)
		}
	}
}

// TestBackendNewUserDirectoryIsLentMidConversation: a directory the user makes in
// the folder while an in-place conversation runs is lent to the agent's
// uid within seconds (the publisher walks the tree again), so an implicit
// bare repository the agent then fills into it is refused by the user's
// git log there, with git's default config; after ohctl rm the directory
// is the user's again and the agent's parts are out of it.
func TestBackendNewUserDirectoryIsLentMidConversation(t *testing.T) {
	eachBackend(t, newUserDirectoryIsLentMidConversation)
}

func newUserDirectoryIsLentMidConversation(t *testing.T, b backend) {
	testenv.RequireRoot(t)
	d := b.daemon(t)
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	testenv.ChownR(t, repo, attackOwner, attackOwner)
	markers := mustTempDir(t, "ohd-marker-")
	if err := os.Chmod(markers, 0o777); err != nil {
		t.Fatal(err)
	}
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", repo)
	fresh := filepath.Join(repo, "fresh")
	if out, err := asOwner(t, repo, "mkdir fresh && echo mine > fresh/notes.txt"); err != nil {
		t.Fatalf("the user's mkdir: %v\n%s", err, out)
	}
	waitFor(t, 30*time.Second, "the user's new directory lent to the agent", func() bool {
		st, err := os.Lstat(fresh)
		return err == nil && st.Sys().(*syscall.Stat_t).Uid == agentUID
	})
	// The program the agent's config names (the image has no chmod: it is
	// put on the host; what matters is whether the user's git runs it).
	evil := filepath.Join(mustTempDir(t, "ohd-evil-"), "evil.sh")
	testenv.WriteFile(t, evil, "#!/bin/sh\ntouch "+markers+"/gpg-ran\n")
	if err := os.Chmod(evil, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(evil), 0o755); err != nil {
		t.Fatal(err)
	}
	plant := "cd " + fresh + " && " +
		"git -c init.defaultBranch=main init -q --bare . && git --git-dir=. config log.showSignature true && git --git-dir=. config gpg.program " + evil + " && " +
		`t=$(git --git-dir=. mktree </dev/null) && c=$(printf 'tree %s\nauthor a <a@x> 1 +0000\ncommitter a <a@x> 1 +0000\ngpgsig -----BEGIN PGP SIGNATURE-----\n \n AAAA\n -----END PGP SIGNATURE-----\n\nsigned\n' $t | git --git-dir=. hash-object -t commit -w --stdin) && git --git-dir=. update-ref refs/heads/main $c`
	if code, out := d.execIn(c.ID, "sh", "-c", plant); code != 0 {
		t.Fatalf("the agent's plant: exit %d: %s", code, out)
	}
	if out, err := userGit(t, fresh, "log", "-1"); err == nil || !strings.Contains(out, "dubious ownership") {
		t.Errorf("the user's git log in their new directory the agent filled = %v %q; want dubious ownership", err, tail(out, 3))
	}
	assertNoMarker(t, markers, "during the conversation")
	d.ohctl("rm", c.ID)
	if st, err := os.Lstat(fresh); err != nil || st.Sys().(*syscall.Stat_t).Uid != attackOwner {
		t.Errorf("fresh after ohctl rm: %v, want the user's again", err)
	}
	if _, err := os.Lstat(filepath.Join(fresh, "HEAD")); err == nil {
		t.Errorf("the agent's fresh/HEAD is still there after ohctl rm")
	}
	if b, err := os.ReadFile(filepath.Join(fresh, "notes.txt")); err != nil || string(b) != "mine\n" {
		t.Errorf("the user's fresh/notes.txt after ohctl rm = %q, %v", b, err)
	}
	if out, err := userGit(t, fresh, "log", "-1"); err != nil {
		t.Errorf("the user's git log in fresh after ohctl rm: %v\n%s", err, out)
	}
	assertNoMarker(t, markers, "after ohctl rm")
}
