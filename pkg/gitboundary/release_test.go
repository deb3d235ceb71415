package gitboundary

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/ohd-dev/ohd/pkg/failpoint"
	"golang.org/x/sys/unix"
)

// agentWork is what an agent leaves in a shared tree: files of its own
// (one 0600, one executable), a .git planted in the user's docs/ (its
// config runs a program), a gitdir file and a symlink named .git, a
// repository it inits in a directory it makes, and an implicit bare
// repository filled into a directory of the user's.
const agentWork = `set -e; umask 022
echo agent > made.txt
mkdir -p newdir/sub && echo deep > newdir/sub/f
(umask 077; echo private > secret.txt)
printf '#!/bin/sh\n' > tool.sh && chmod 755 tool.sh
git init -q docs
git -C docs config core.fsmonitor 'touch /tmp/pwned-by-agent'
mkdir gitfile && echo "gitdir: ../docs/.git" > gitfile/.git
mkdir gitlink && ln -s ../docs/.git gitlink/.git
git init -q newrepo
git init -q --bare userdir
`

func shareAndWork(t *testing.T) string {
	t.Helper()
	root := ownedTree(t, map[string]string{"README": "r\n", "docs/guide.md": "g\n", "userdir/notes": "n\n"})
	if _, err := Apply(root, testIDs); err != nil {
		t.Fatal(err)
	}
	mustRunAs(t, testAgent, root, "sh", "-c", "export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0='*'; "+agentWork)
	return root
}

// TestUsersGitRefusesTheAgentsGitDir: during the conversation the user's
// git in docs/ (the user's directory, where the agent planted .git)
// refuses the repository: another user owns it.
func TestUsersGitRefusesTheAgentsGitDir(t *testing.T) {
	needRoot(t)
	root := shareAndWork(t)
	out, err := runAs(t, testOwner, filepath.Join(root, "docs"), "git", "status")
	if err == nil || !strings.Contains(out, "dubious ownership") {
		t.Fatalf("the user's git status in docs/ = %v, %q; want a refusal for dubious ownership", err, out)
	}
}

// TestReleaseGivesEverythingBack: after Release every inode is the
// owner's, no ACL entry of either user is left, the agent's git
// directories are in KeptDir, and the user's git in docs/ sees no
// repository of the agent's.
func TestReleaseGivesEverythingBack(t *testing.T) {
	needRoot(t)
	root := shareAndWork(t)
	kept := filepath.Join(t.TempDir(), "kept")
	res, err := Release(root, ReleaseOptions{IDs: testIDs, KeptDir: kept})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(res.Moved)
	want := []string{"docs/.git", "gitfile/.git", "gitlink/.git", "newrepo/.git", "userdir/HEAD", "userdir/branches", "userdir/config", "userdir/description", "userdir/hooks", "userdir/info", "userdir/objects", "userdir/refs"}
	want = slices.DeleteFunc(want, func(s string) bool { return s == "userdir/branches" }) // not a part git discovery needs: stays as the agent's dir, given back
	if diff := cmp.Diff(want, res.Moved); diff != "" {
		t.Errorf("Release moved (-want +got):\n%s", diff)
	}
	for _, m := range res.Moved {
		if _, err := os.Lstat(filepath.Join(kept, m)); err != nil {
			t.Errorf("moved %s is not in KeptDir: %v", m, err)
		}
	}
	assertReleased(t, root)
	// The user's git in docs/ now finds no repository there but the
	// tree's own (none: the test tree is no repository).
	if out, err := runAs(t, testOwner, filepath.Join(root, "docs"), "git", "status"); err == nil || !strings.Contains(out, "not a git repository") {
		t.Errorf("the user's git status in docs/ after Release = %v, %q; want no repository", err, out)
	}
	if _, err := os.Stat("/tmp/pwned-by-agent"); err == nil {
		t.Errorf("the agent's fsmonitor ran")
	}
	// The agent's files are the user's to edit and delete.
	mustRunAs(t, testOwner, root, "sh", "-c", "echo u >> made.txt && echo u >> secret.txt && rm -r newdir")
	// The user's own file has its plain mode back.
	if fi, _ := os.Stat(filepath.Join(root, "README")); fi.Mode().Perm() != 0o644 {
		t.Errorf("README mode after Release = %v, want 0644", fi.Mode().Perm())
	}
	// A second Release has nothing left to do, and reports the same
	// moves (from the journal).
	res2, err := Release(root, ReleaseOptions{IDs: testIDs, KeptDir: kept})
	if err != nil || res2.Owned != 0 || res2.Changed != 0 {
		t.Errorf("second Release = %+v, %v; want nothing done", res2, err)
	}
	slices.Sort(res2.Moved)
	if diff := cmp.Diff(res.Moved, res2.Moved); diff != "" {
		t.Errorf("second Release reports other moves (-first +second):\n%s", diff)
	}
}

// assertReleased checks that no inode under root is the agent's and none
// has an ACL entry of owner or agent.
func assertReleased(t *testing.T, root string) {
	t.Helper()
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if got := ownerOf(t, p); got != testOwner {
			t.Errorf("%s is owned by %d after Release, want %d", p, got, testOwner)
		}
		if d.Type()&os.ModeSymlink != 0 {
			return nil
		}
		for _, name := range []string{xattrAccess, xattrDefault} {
			b := make([]byte, 512)
			n, err := unix.Lgetxattr(p, name, b)
			if err == unix.ENODATA {
				continue
			}
			if err != nil {
				t.Errorf("read %s of %s: %v", name, p, err)
				continue
			}
			a, _ := decodeACL(b[:n])
			for _, id := range []uint32{testOwner, testAgent} {
				if _, ok := a.get(tagUser, id); ok {
					t.Errorf("%s keeps %s entry for uid %d after Release: %v", p, name, id, a)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestReleaseMoveOnly moves the agent's git directories and leaves owners
// alone (a worktree, deleted next).
func TestReleaseMoveOnly(t *testing.T) {
	needRoot(t)
	root := shareAndWork(t)
	kept := filepath.Join(t.TempDir(), "kept")
	res, err := Release(root, ReleaseOptions{IDs: testIDs, KeptDir: kept, MoveOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(res.Moved, "docs/.git") || res.Owned != 0 {
		t.Errorf("Release MoveOnly = %+v, want docs/.git moved and nothing chowned", res)
	}
	if got := ownerOf(t, filepath.Join(root, "made.txt")); got != testAgent {
		t.Errorf("MoveOnly chowned made.txt to %d", got)
	}
}

// TestReleaseFindsWhatFindGitDirsReports: doctor and Release agree.
func TestReleaseFindsWhatFindGitDirsReports(t *testing.T) {
	needRoot(t)
	root := shareAndWork(t)
	found, _, err := FindGitDirs(root, testIDs)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range found {
		if f.AgentMade {
			got = append(got, f.Rel+" "+f.Kind)
		}
	}
	slices.Sort(got)
	want := []string{"docs/.git " + KindGitDir, "gitfile/.git " + KindGitFile, "gitlink/.git " + KindGitSymlink, "newrepo/.git " + KindGitDir, "userdir " + KindBareParts}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("FindGitDirs agent-made (-want +got):\n%s", diff)
	}
}

var failpointBuild = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "gitboundary-failpoint-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "gitboundary.test")
	out, err := exec.Command("go", "test", "-c", "-tags", "ohd_failpoints", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", &exec.ExitError{Stderr: out}
	}
	return bin, nil
})

// TestReleaseCrashMidwayThenRerun: a Release killed (SIGKILL, failpoint
// release/mid-move) after its first move is finished by the next run:
// nothing of the agent's is left, nothing is lost.
func TestReleaseCrashMidwayThenRerun(t *testing.T) {
	needRoot(t)
	if os.Getenv("GITBOUNDARY_CHILD_ROOT") != "" {
		// The child: a Release that the failpoint kills.
		_, err := Release(os.Getenv("GITBOUNDARY_CHILD_ROOT"), ReleaseOptions{IDs: testIDs, KeptDir: os.Getenv("GITBOUNDARY_CHILD_KEPT")})
		t.Fatalf("Release was not killed by the failpoint: %v", err)
	}
	bin := os.Args[0]
	if !failpoint.Enabled {
		var err error
		if bin, err = failpointBuild(); err != nil {
			t.Fatalf("build the test with failpoints: %v", err)
		}
	}
	root := shareAndWork(t)
	kept := filepath.Join(t.TempDir(), "kept")
	cmd := exec.Command(bin, "-test.run=^TestReleaseCrashMidwayThenRerun$", "-test.count=1")
	cmd.Env = append(os.Environ(), "OHD_FAILPOINTS=release/mid-move", "GITBOUNDARY_CHILD_ROOT="+root, "GITBOUNDARY_CHILD_KEPT="+kept)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ProcessState.Sys().(interface{ Signaled() bool }).Signaled() == false {
		t.Fatalf("the child Release was not killed: %v\n%s", err, out)
	}
	entries, _ := os.ReadDir(kept)
	if len(entries) == 0 {
		t.Fatalf("the killed Release moved nothing: the crash was not midway")
	}
	if ownerOf(t, filepath.Join(root, "made.txt")) != testAgent {
		t.Fatalf("the killed Release got past its moves: the crash was not midway")
	}
	res, err := Release(root, ReleaseOptions{IDs: testIDs, KeptDir: kept})
	if err != nil {
		t.Fatal(err)
	}
	// The re-run reports the moves of both runs.
	if len(res.Moved) != 11 {
		t.Errorf("the re-run reports %d moves, want all 11 of both runs: %v", len(res.Moved), res.Moved)
	}
	assertReleased(t, root)
	for _, rel := range []string{"docs/.git", "gitfile/.git", "gitlink/.git", "newrepo/.git", "userdir/HEAD", "userdir/objects", "userdir/refs", "userdir/config"} {
		if _, err := os.Lstat(filepath.Join(kept, rel)); err != nil {
			t.Errorf("%s is not in KeptDir after the re-run: %v", rel, err)
		}
		if _, err := os.Lstat(filepath.Join(root, rel)); err == nil {
			t.Errorf("%s is still in the tree after the re-run", rel)
		}
	}
}
