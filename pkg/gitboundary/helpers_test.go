package gitboundary

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

const (
	testOwner = 1000
	testAgent = 10001
)

var testIDs = IDs{Owner: testOwner, OwnerGID: testOwner, Agent: testAgent, AgentGID: testAgent}

// needRoot skips a test that must act as two users.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the test acts as the owner (uid 1000) and the agent (uid 10001)")
	}
}

// ownedTree makes a directory tree owned by uid 1000, as a user's
// repository is, with 0755 directories and 0644 files (umask 022).
func ownedTree(t *testing.T, files map[string]string) string {
	t.Helper()
	base := t.TempDir()
	// t.TempDir's parent is 0700: the two users must reach the tree.
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	root := filepath.Join(base, "repo")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	chownTree(t, root, testOwner)
	return root
}

func chownTree(t *testing.T, root string, uid int) {
	t.Helper()
	if err := filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, uid)
	}); err != nil {
		t.Fatal(err)
	}
}

// runAs runs a command as uid (gid the same, no supplementary groups) with
// umask 022, and returns its combined output.
func runAs(t *testing.T, uid int, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", "GIT_CONFIG_NOSYSTEM=1", "LC_ALL=C"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func mustRunAs(t *testing.T, uid int, dir string, args ...string) string {
	t.Helper()
	out, err := runAs(t, uid, dir, args...)
	if err != nil {
		t.Fatalf("%v as uid %d: %v\n%s", args, uid, err, out)
	}
	return out
}

func ownerOf(t *testing.T, p string) int {
	t.Helper()
	st, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return int(st.Sys().(*syscall.Stat_t).Uid)
}

// markerBox returns a directory every user may write and the path of the
// marker file an attack's program appends to when it runs there.
func markerBox(t testing.TB) (box, marker string) {
	t.Helper()
	box = t.TempDir()
	if err := os.Chmod(box, 0o777); err != nil {
		t.Fatal(err)
	}
	return box, filepath.Join(box, "ran")
}
