package integration

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/store"
)

// plainPlant is the agent's attack on a repository in a plain folder: a
// hook and an fsmonitor written into its git dir, then the repository
// moved away and one of the agent's, with its fsmonitor, put in its place.
const plainPlant = `cp $WS/.agent/evil $WS/proj/.git/hooks/post-commit 2>&1; echo hook=$?;
git -C $WS/proj config core.fsmonitor $WS/.agent/evil 2>&1; echo config=$?;
mv $WS/proj $WS/proj-old 2>&1; echo mv=$?;
rm -r -f $WS/proj/.git 2>&1; echo rm=$?;
mkdir -p $WS/proj; git init -q $WS/fake && git -C $WS/fake config core.fsmonitor $WS/.agent/evil && mv $WS/fake/.git $WS/proj/.git 2>&1; echo replace=$?`

// TestBackendPlainFolderAttackNestedRepo: a workspace that is not a git
// repository (a folder of projects, which Canvas lets a user pick) holds
// the user's repositories. From inside, the agent writes a hook and an
// fsmonitor into one's git dir, tries to move it away, to delete its git
// dir and to put one of its own in its place: every step fails, and the
// user's everyday git in it on the host afterwards runs nothing of the
// agent's. Control: the same plant fires in an unprotected folder.
func TestBackendPlainFolderAttackNestedRepo(t *testing.T) {
	eachBackend(t, plainFolderAttackNestedRepo)
}

func plainFolderAttackNestedRepo(t *testing.T, b backend) {
	testenv.RequireRoot(t)
	setup := func() (ws, markers string) {
		ws, markers = testenv.TempDir(t), mustTempDir(t, "ohd-marker-")
		if err := os.Chmod(markers, 0o777); err != nil {
			t.Fatal(err)
		}
		testenv.InitRepo(t, filepath.Join(ws, "proj"), "main")
		testenv.WriteFile(t, filepath.Join(ws, ".agent", "evil"), strings.ReplaceAll(markerProgram, "$MARKERS", markers))
		if err := os.Chmod(filepath.Join(ws, ".agent", "evil"), 0o755); err != nil {
			t.Fatal(err)
		}
		installAttackTool(t, filepath.Join(ws, ".agent", "tools"), attackOwner, attackOwner, "cp", "mv", "rm", "mkdir")
		testenv.ChownR(t, ws, attackOwner, attackOwner)
		return ws, markers
	}
	// The user's everyday git in the repository, as its owner.
	userGit := func(ws string) string {
		var out []byte
		for _, args := range [][]string{{"status"}, {"diff"}, {"-c", "user.name=u", "-c", "user.email=u@x", "commit", "-q", "--allow-empty", "-m", "user"}} {
			cmd := exec.Command("git", args...)
			cmd.Dir, cmd.Env = filepath.Join(ws, "proj"), testenv.GitEnv()
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: attackOwner, Gid: attackOwner}}
			b, _ := cmd.CombinedOutput()
			out = append(out, b...)
		}
		return string(out)
	}
	fired := func(markers string) string {
		b, _ := os.ReadFile(filepath.Join(markers, "fired"))
		return string(b)
	}

	// Control: on the host, without ohd, the plant fires.
	ws, markers := setup()
	cmd := exec.Command("sh", "-c", "export PATH="+filepath.Join(ws, ".agent", "tools")+":$PATH; "+strings.ReplaceAll(plainPlant, "$WS", ws))
	cmd.Env = testenv.GitEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: attackOwner, Gid: attackOwner}}
	out, err := cmd.CombinedOutput()
	if userOut := userGit(ws); fired(markers) == "" {
		t.Fatalf("control: the plant does not fire under the user's git (%v):\n%s\n%s", err, out, userOut)
	}

	d := b.daemon(t)
	ws, markers = setup()
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", ws)
	if c.InPlace || c.Worktree != "" || c.UID != attackOwner {
		t.Fatalf("create on a plain folder = %+v, want it mounted as it is, as uid %d", c, attackOwner)
	}
	_, got := d.execIn(c.ID, "sh", "-c", "export PATH="+filepath.Join(ws, ".agent", "tools")+":$PATH; "+strings.ReplaceAll(plainPlant, "$WS", ws))
	t.Logf("attack output: %s", got)
	for _, step := range []string{"hook=0", "config=0", "mv=0", "rm=0", "replace=0"} {
		if strings.Contains(got, step) {
			t.Errorf("inside, %s: the repository's git dir is not the user's alone:\n%s", step, got)
		}
	}
	// The folder is still the agent's to write.
	if code, out := d.execIn(c.ID, "sh", "-c", "echo agent > "+filepath.Join(ws, "proj", "new.txt")+" && echo ok > "+filepath.Join(ws, "top.txt")); code != 0 {
		t.Errorf("writing in the folder and the repository's work tree failed: %s", out)
	}
	if out := userGit(ws); fired(markers) != "" {
		t.Errorf("the agent's program ran on the host under the user's git: %s\n%s", fired(markers), out)
	}
	d.ohctl("rm", c.ID)
	if out := userGit(ws); fired(markers) != "" {
		t.Errorf("after removal, the agent's program ran on the host: %s\n%s", fired(markers), out)
	}
	if _, err := os.Lstat(filepath.Join(ws, "proj-old")); err == nil {
		t.Error("the repository was moved away")
	}
}

// TestBackendPlainFolderRefusedWhenUnprotectable: a plain folder holding a
// repository whose .git is a symlink (which the agent could point at a
// git dir of its own) is refused before anything is made, saying what to
// pick instead.
func TestBackendPlainFolderRefusedWhenUnprotectable(t *testing.T) {
	eachBackend(t, plainFolderRefusedWhenUnprotectable)
}

func plainFolderRefusedWhenUnprotectable(t *testing.T, b backend) {
	d := b.daemon(t)
	ws := testenv.TempDir(t)
	real := filepath.Join(testenv.TempDir(t), "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.Git(t, real, "init", "-q")
	if err := os.Mkdir(filepath.Join(ws, "linked"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(real, ".git"), filepath.Join(ws, "linked", ".git")); err != nil {
		t.Fatal(err)
	}
	before := d.ohctl("ls")
	_, err := d.ohctlErr("create", "--repo", ws)
	var oe *ohctlError
	if !errors.As(err, &oe) || !strings.Contains(oe.stderr, "symlink") || !strings.Contains(oe.stderr, "choose the repository itself") {
		t.Fatalf("create on a folder with a symlinked .git = %v, want a refusal naming the symlink and what to pick", err)
	}
	if after := d.ohctl("ls"); after != before {
		t.Errorf("the refused create left a conversation:\n%s", after)
	}
}
