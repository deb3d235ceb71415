package gitboundary

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// fillBare is what an agent runs to make the directory it is in an
// implicit bare repository whose `git log` runs $EVIL (log.showSignature
// and gpg.program on a commit that carries a signature).
const fillBare = `set -e
git -c init.defaultBranch=main init -q --bare .
git --git-dir=. config log.showSignature true
git --git-dir=. config gpg.program "$EVIL"
t=$(git --git-dir=. mktree </dev/null)
c=$(printf 'tree %s\nauthor a <a@x> 1 +0000\ncommitter a <a@x> 1 +0000\ngpgsig -----BEGIN PGP SIGNATURE-----\n \n AAAA\n -----END PGP SIGNATURE-----\n\nsigned\n' $t | git --git-dir=. hash-object -t commit -w --stdin)
git --git-dir=. update-ref refs/heads/main $c
`

// bareAttack shares a user's repository with the agent (lending its
// directories first when borrow is set), lets the agent fill the user's
// notes/ as an implicit bare repository, and reports whether the user's
// `git log` in notes/ ran the agent's program, with what git said.
func bareAttack(t *testing.T, borrow bool) (root string, ran bool, out string) {
	t.Helper()
	root = ownedTree(t, map[string]string{"README": "r\n", "notes/file.txt": "n\n", "nested/lib/f": "x\n"})
	mustRunAs(t, testOwner, root, "sh", "-c", "git init -q . && git add . && git -c user.name=u -c user.email=u@x commit -q -m one")
	// A repository of the user's inside (a work tree's root: its owner is
	// what the user's git checks there).
	mustRunAs(t, testOwner, filepath.Join(root, "nested"), "sh", "-c", "git init -q . && git add . && git -c user.name=u -c user.email=u@x commit -q -m one")
	if borrow {
		if _, err := Borrow(root, testIDs); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Apply(root, testIDs); err != nil {
		t.Fatal(err)
	}
	_, marker := markerBox(t)
	evil := filepath.Join(root, "evil.sh")
	mustRunAs(t, testAgent, root, "sh", "-c", "printf '#!/bin/sh\\necho ran >> "+marker+"\\n' > evil.sh && chmod 755 evil.sh")
	mustRunAs(t, testAgent, filepath.Join(root, "notes"), "sh", "-c", "export EVIL="+evil+" GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0='*'; "+fillBare)
	out, _ = runAs(t, testOwner, filepath.Join(root, "notes"), "git", "log", "-1")
	_, err := os.Stat(marker)
	return root, err == nil, out
}

// TestBareRepoInAUsersDirectoryFiresWithoutBorrow is the control: with
// the tree only shared, the user's git log in their own notes/ runs the
// program the agent configured there.
func TestBareRepoInAUsersDirectoryFiresWithoutBorrow(t *testing.T) {
	needRoot(t)
	_, ran, out := bareAttack(t, false)
	if !ran {
		t.Fatalf("control: the agent's bare repository in the user's notes/ did not run under the user's git log (%q): the attack this guards against is not being made", out)
	}
}

// TestBorrowedDirectoryRefusesTheAgentsBareRepo: with the user's
// directories lent to the agent's uid, the user's git log in notes/
// refuses the repository the agent filled in (dubious ownership), runs
// nothing, and the user's git keeps working at the root and in their
// nested repository; Release gives every directory back as it was (owner,
// mode, no ACL, no record) and moves the agent's parts out, the user's
// file staying.
func TestBorrowedDirectoryRefusesTheAgentsBareRepo(t *testing.T) {
	needRoot(t)
	root, ran, out := bareAttack(t, true)
	if ran || !strings.Contains(out, "dubious ownership") {
		t.Fatalf("the user's git log in a borrowed notes/ = %q (program ran: %v); want a refusal for dubious ownership and nothing run", out, ran)
	}
	if got := ownerOf(t, root); got != testOwner {
		t.Errorf("the work tree's root is owned by %d while borrowed, want the user's %d (their git checks it)", got, testOwner)
	}
	if got := ownerOf(t, filepath.Join(root, "nested")); got != testOwner {
		t.Errorf("the nested repository's root is owned by %d while borrowed, want the user's %d", got, testOwner)
	}
	if got := ownerOf(t, filepath.Join(root, "nested", "lib")); got != testAgent {
		t.Errorf("nested/lib is owned by %d while borrowed, want the agent's %d", got, testAgent)
	}
	for _, d := range []string{".", "nested", "nested/lib"} {
		if o, err := runAs(t, testOwner, filepath.Join(root, d), "git", "status", "--short"); err != nil {
			t.Errorf("the user's git status in %s while borrowed: %v\n%s", d, err, o)
		}
	}
	// The user can still make, edit and remove files in a borrowed
	// directory.
	mustRunAs(t, testOwner, filepath.Join(root, "notes"), "sh", "-c", "echo more >> file.txt && echo new > new.txt && rm new.txt && mkdir d && rmdir d")
	if uid, gid, err := OwnerOf(filepath.Join(root, "notes")); err != nil || uid != testOwner || gid != testOwner {
		t.Errorf("OwnerOf(notes) while borrowed = %d:%d, %v; want the user's", uid, gid, err)
	}
	if fd, err := unix.Open(filepath.Join(root, "notes"), unix.O_RDONLY|unix.O_DIRECTORY, 0); err == nil {
		uid, _, ok := LentBy(fd)
		unix.Close(fd)
		if !ok || uid != testOwner {
			t.Errorf("LentBy(notes) = %d, %v; want the user's, lent", uid, ok)
		}
	}
	// The agent's doctor report names the parts, not the user's directory.
	found, _, err := FindGitDirs(root, testIDs)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, f := range found {
		if f.Rel == "notes" {
			kinds = append(kinds, f.Kind)
		}
	}
	if len(kinds) != 1 || kinds[0] != KindBareParts {
		t.Errorf("FindGitDirs reports notes as %v, want [%s] (a directory of the user's the agent filled)", kinds, KindBareParts)
	}

	kept := filepath.Join(t.TempDir(), "kept")
	res, err := Release(root, ReleaseOptions{IDs: testIDs, KeptDir: kept})
	if err != nil {
		t.Fatal(err)
	}
	assertReleased(t, root)
	for _, d := range []string{"notes", "nested/lib"} {
		p := filepath.Join(root, d)
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o755 {
			t.Errorf("%s has mode %v after Release, want 0755 as before", d, fi.Mode().Perm())
		}
		for _, name := range []string{xattrBorrowed, xattrBorrowedACL, xattrBorrowedDefault, xattrAccess, xattrDefault} {
			if _, err := unix.Lgetxattr(p, name, make([]byte, 256)); err != unix.ENODATA {
				t.Errorf("%s keeps %s after Release (%v)", d, name, err)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(root, "notes", "file.txt")); err != nil {
		t.Errorf("the user's notes/file.txt is gone after Release: %v (moved: %v)", err, res.Moved)
	}
	for _, part := range []string{"HEAD", "objects", "refs", "config"} {
		if _, err := os.Lstat(filepath.Join(root, "notes", part)); err == nil {
			t.Errorf("the agent's notes/%s is still there after Release (moved: %v)", part, res.Moved)
		}
	}
	if o, err := runAs(t, testOwner, filepath.Join(root, "notes"), "git", "log", "-1"); err != nil {
		t.Errorf("the user's git log in notes/ after Release: %v\n%s", err, o)
	}
}

// TestBorrowKeepsAUsersACLAndSpecialBits: a directory with an ACL and
// the setgid bit of the user's own gets both back at Release, whatever
// the agent did to it while it owned it.
func TestBorrowKeepsAUsersACLAndSpecialBits(t *testing.T) {
	needRoot(t)
	root := ownedTree(t, map[string]string{"shared/f": "x\n"})
	dir := filepath.Join(root, "shared")
	if err := os.Chmod(dir, os.ModeSetgid|0o750); err != nil {
		t.Fatal(err)
	}
	// The user's own ACL: uid 2000 may read.
	mine := acl{{tag: tagUserObj, id: undefinedID, perm: 7}, {tag: tagUser, id: 2000, perm: 5}, {tag: tagGroupObj, id: undefinedID, perm: 5}, {tag: tagMask, id: undefinedID, perm: 5}, {tag: tagOther, id: undefinedID, perm: 0}}
	if err := unix.Lsetxattr(dir, xattrAccess, mine.encode(), 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, os.ModeSetgid|0o750); err != nil {
		t.Fatal(err)
	}
	if _, err := Borrow(root, testIDs); err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(root, testIDs); err != nil {
		t.Fatal(err)
	}
	// The agent owns it now, and opens it to everyone.
	mustRunAs(t, testAgent, root, "chmod", "0777", "shared")
	if _, err := Release(root, ReleaseOptions{IDs: testIDs, KeptDir: filepath.Join(t.TempDir(), "kept")}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode() & (os.ModePerm | os.ModeSetgid | os.ModeSticky); got != os.ModeSetgid|0o750 {
		t.Errorf("shared has mode %v after Release, want %v", got, os.ModeSetgid|0o750)
	}
	b := make([]byte, 512)
	n, err := unix.Lgetxattr(dir, xattrAccess, b)
	if err != nil {
		t.Fatalf("shared lost the user's own ACL: %v", err)
	}
	got, _ := decodeACL(b[:n])
	if e, ok := got.get(tagUser, 2000); !ok || e.perm != 5 {
		t.Errorf("shared's ACL after Release = %v, want the user's entry for uid 2000 r-x back", got)
	}
	if ownerOf(t, dir) != testOwner {
		t.Errorf("shared is owned by %d after Release", ownerOf(t, dir))
	}
}

// TestArchiveBringsTheAgentsGitDirsBackAsFiles: the git directories
// Release moved out come back as one tar owned by the user, holding each
// at its path (a symlink as a symlink), and nothing when nothing moved.
func TestArchiveBringsTheAgentsGitDirsBackAsFiles(t *testing.T) {
	needRoot(t)
	root := shareAndWork(t)
	kept := filepath.Join(t.TempDir(), "kept")
	if _, err := Release(root, ReleaseOptions{IDs: testIDs, KeptDir: kept}); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "restored.agent-git-dirs.tar")
	moved, err := Archive(kept, dst, testOwner, testOwner)
	if err != nil {
		t.Fatal(err)
	}
	if len(moved) == 0 {
		t.Fatal("Archive reports no git directory moved")
	}
	if got := ownerOf(t, dst); got != testOwner {
		t.Errorf("the archive is owned by %d, want the user's %d", got, testOwner)
	}
	list := mustRunAs(t, testOwner, filepath.Dir(dst), "tar", "-tvf", dst)
	for _, want := range []string{"docs/.git/config", "gitlink/.git -> ../docs/.git", "gitfile/.git", "userdir/HEAD", "userdir/objects/"} {
		if !strings.Contains(list, want) {
			t.Errorf("the archive does not hold %s:\n%s", want, list)
		}
	}
	if _, err := Archive(kept, dst, testOwner, testOwner); err == nil {
		t.Errorf("a second Archive over the same file succeeded; want it never to overwrite")
	}
	if moved, err := Archive(filepath.Join(t.TempDir(), "none"), filepath.Join(t.TempDir(), "x.tar"), testOwner, testOwner); err != nil || moved != nil {
		t.Errorf("Archive of nothing = %v, %v; want nothing", moved, err)
	}
}
