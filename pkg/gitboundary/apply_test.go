package gitboundary

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestApplyLetsBothUsersWrite: after Apply, the agent (its own uid, umask
// 022) edits the user's files and makes new ones, and the user edits the
// agent's: the default ACL makes the umask irrelevant.
func TestApplyLetsBothUsersWrite(t *testing.T) {
	needRoot(t)
	root := ownedTree(t, map[string]string{"README": "hi\n", "docs/a.md": "a\n", "bin/run.sh": "#!/bin/sh\n"})
	if err := os.Chmod(filepath.Join(root, "bin/run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := runAs(t, testAgent, root, "sh", "-c", "echo x >> README"); err == nil {
		t.Fatal("the agent wrote the user's file before Apply: the test cannot tell anything")
	}
	st, err := Apply(root, testIDs)
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != 3 || st.Dirs != 3 {
		t.Errorf("Apply stats = %+v, want 3 files and 3 directories", st)
	}
	mustRunAs(t, testAgent, root, "sh", "-c", "umask 022; echo x >> README && echo new > docs/new.md && mkdir -p made/deep && echo n > made/deep/f")
	mustRunAs(t, testOwner, root, "sh", "-c", "echo y >> docs/new.md && echo z >> made/deep/f && rm made/deep/f && touch made/deep/g")
	// What the user makes after Apply is not the agent's to write (the
	// default ACLs carry no entry of the agent's) until ohd shares it: a
	// directory the user makes is never one the agent can fill.
	mustRunAs(t, testOwner, root, "sh", "-c", "umask 022; mkdir fresh")
	for _, cmd := range []string{"echo w >> made/deep/g", "touch fresh/HEAD"} {
		if out, err := runAs(t, testAgent, root, "sh", "-c", cmd); err == nil {
			t.Errorf("the agent could %q in what the user made after Apply: %s", cmd, out)
		}
	}
	if _, err := Apply(root, testIDs); err != nil {
		t.Fatal(err)
	}
	mustRunAs(t, testAgent, root, "sh", "-c", "echo w >> made/deep/g && ./bin/run.sh")
	if got := ownerOf(t, filepath.Join(root, "docs/new.md")); got != testAgent {
		t.Errorf("owner of the agent's file = %d, want %d", got, testAgent)
	}
	// The executable stays executable for its owner.
	if fi, _ := os.Stat(filepath.Join(root, "bin/run.sh")); fi.Mode()&0o100 == 0 {
		t.Errorf("run.sh lost its x bit: %v", fi.Mode())
	}
	// A second Apply changes nothing.
	st, err = Apply(root, testIDs)
	if err != nil {
		t.Fatal(err)
	}
	if st.Changed != 0 {
		t.Errorf("second Apply changed %d inodes, want 0", st.Changed)
	}
}

// TestApplyLeavesGitDirsAndSymlinksAlone: a .git directory of the user's
// stays theirs alone (the agent writing its config would be code for the
// user's git), and a symlink out of the tree is not followed.
func TestApplyLeavesGitDirsAndSymlinksAlone(t *testing.T) {
	needRoot(t)
	root := ownedTree(t, map[string]string{"f": "f\n", "vendor/x/.git/config": "[core]\n", "vendor/x/y": "y\n"})
	outside := ownedTree(t, map[string]string{"secret": "s\n"})
	if err := os.Symlink(outside, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "flink")); err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(root, testIDs); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(root, "vendor/x/.git"), filepath.Join(root, "vendor/x/.git/config"), outside, filepath.Join(outside, "secret")} {
		if _, err := unix.Lgetxattr(p, xattrAccess, make([]byte, 256)); err != unix.ENODATA {
			t.Errorf("%s has an ACL after Apply (err %v): Apply entered a .git or followed a symlink", p, err)
		}
	}
	if out, err := runAs(t, testAgent, root, "sh", "-c", "echo x >> vendor/x/.git/config"); err == nil {
		t.Errorf("the agent wrote the user's .git/config after Apply: %s", out)
	}
	if out, err := runAs(t, testAgent, root, "sh", "-c", "echo x >> link/secret"); err == nil {
		t.Errorf("the agent wrote through a symlink out of the tree: %s", out)
	}
	mustRunAs(t, testAgent, root, "sh", "-c", "echo x >> vendor/x/y")
}

// TestApplyKeepsGroupPermissions: sharing never widens what the file's
// group or others may do.
func TestApplyKeepsGroupPermissions(t *testing.T) {
	needRoot(t)
	root := ownedTree(t, map[string]string{"private": "p\n"})
	p := filepath.Join(root, "private")
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := Apply(root, testIDs); err != nil {
			t.Fatal(err)
		}
	}
	b := make([]byte, 256)
	n, err := unix.Lgetxattr(p, xattrAccess, b)
	if err != nil {
		t.Fatal(err)
	}
	a, err := decodeACL(b[:n])
	if err != nil {
		t.Fatal(err)
	}
	if g, _ := a.get(tagGroupObj, 0); g.perm != 0 {
		t.Errorf("group entry of a 0600 file = %o after Apply, want 0 (%v)", g.perm, a)
	}
	if o, _ := a.get(tagOther, 0); o.perm != 0 {
		t.Errorf("other entry of a 0600 file = %o after Apply, want 0 (%v)", o.perm, a)
	}
	if out, err := runAs(t, 4242, root, "cat", "private"); err == nil || out == "p\n" {
		t.Errorf("a third user read a 0600 file after Apply: %q", out)
	}
}

// TestApplyRefusesSameUID: an agent uid that is the owner's, or root,
// would make the agent's files the user's to git.
func TestApplyRefusesSameUID(t *testing.T) {
	dir := t.TempDir()
	for _, ids := range []IDs{{Owner: 1000, Agent: 1000}, {Owner: 1000, Agent: 0}} {
		if _, err := Apply(dir, ids); err == nil || !strings.Contains(err.Error(), "--agent-uid") {
			t.Errorf("Apply with %+v = %v, want an ErrAgentUID naming --agent-uid", ids, err)
		}
	}
}
