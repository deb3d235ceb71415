package integration

import (
	"encoding/json"
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

// Issue 26, fixed pointers (pkg/worktree/mountplan). When the user's
// git recurses into a submodule it sets GIT_DIR for the child and skips
// its ownership check, so what it follows there must stay the user's:
// each submodule's .git, each submodule's directory and every directory
// above it, an unpopulated submodule's directory, a linked worktree's
// .git. The agent (uid 1000, the repository's owner: these hold without
// the ownership check) tries, from inside its container, to move each
// away and put a repository of its own with an fsmonitor in its place,
// or to `git init` where the user's git would enter; the user's git
// status and diff on the host, as uid 1000 with git's default config,
// must run nothing. The control runs the same attacks on the host without
// ohd, and each fires.

// pointerScript is the attacks as one script, each introduced by a line
// "== <name>".
func pointerScript(attacks []testenv.PointerAttack, markers string) string {
	var b strings.Builder
	for _, a := range attacks {
		b.WriteString("echo '== " + a.Name + "'; ( " + strings.ReplaceAll(a.Script, "$MARKERS", markers) + " ) 2>&1\n")
	}
	return b.String()
}

// userGitAt runs the user's everyday git in dir on the host, as the
// owner, with git's default config.
func userGitAt(dir string) string {
	var out []byte
	for _, args := range [][]string{{"status"}, {"diff"}, {"log", "-p", "-1"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir, cmd.Env = dir, append(testenv.GitEnv(), "GIT_PAGER=cat")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: attackOwner, Gid: attackOwner}}
		b, _ := cmd.CombinedOutput()
		out = append(out, b...)
	}
	return string(out)
}

func firedMarkers(dir string) []string {
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func markerDir(t *testing.T) string {
	t.Helper()
	d := mustTempDir(t, "ohd-marker-")
	if err := os.Chmod(d, 0o777); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestPointerAttacksControl: without ohd, each attack, run as the owner in
// the work tree, makes the user's next git status run the agent's
// fsmonitor: in the repository (submodules checked out) and in a linked
// worktree (none populated, .git a file).
func TestPointerAttacksControl(t *testing.T) {
	testenv.RequireRoot(t)
	for _, worktree := range []bool{false, true} {
		t.Run(map[bool]string{false: "repository", true: "worktree"}[worktree], func(t *testing.T) {
			base := testenv.TempDir(t)
			top := filepath.Join(base, "repo")
			testenv.PointerRepo(t, top)
			if worktree {
				testenv.Git(t, top, "worktree", "add", "-q", filepath.Join(base, "wt"))
				top = filepath.Join(base, "wt")
			}
			testenv.ChownR(t, base, attackOwner, attackOwner)
			for _, a := range testenv.PointerAttacks(!worktree, ".agent/evil") {
				markers := markerDir(t)
				cmd := exec.Command("sh", "-c", pointerScript([]testenv.PointerAttack{a}, markers))
				cmd.Dir, cmd.Env = top, testenv.GitEnv()
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: attackOwner, Gid: attackOwner}}
				out, _ := cmd.CombinedOutput()
				user := userGitAt(top)
				if fired := firedMarkers(markers); len(fired) != 1 || fired[0] != a.Name {
					t.Errorf("control %s: markers %v, want %s to fire under the user's git status:\n%s\n%s", a.Name, fired, a.Name, out, user)
				}
			}
		})
	}
}

// TestBackendPointerAttacksFailInContainer: the same attacks from inside the
// conversation's container, in place, in a worktree and in a plain folder
// holding the repository: each fails on a mount (EBUSY: a mount point
// cannot be moved or removed; EROFS: a read-only .git or unpopulated
// submodule), and the user's git on the host runs nothing, during the
// conversation and after `ohctl rm`.
//
// On both backends: a pod's hostPath volumes are the same bind mounts.
func TestBackendPointerAttacksFailInContainer(t *testing.T) {
	testenv.RequireRoot(t)
	eachBackend(t, pointerAttacksFailInContainer)
}

func pointerAttacksFailInContainer(t *testing.T, b backend) {
	d := b.daemon(t)
	for _, mode := range []string{"in place", "worktree", "plain folder"} {
		t.Run(mode, func(t *testing.T) {
			base := testenv.TempDir(t)
			repo := filepath.Join(base, "repo")
			testenv.PointerRepo(t, repo)
			testenv.ChownR(t, base, attackOwner, attackOwner)
			var c store.Conversation
			top, tools := repo, ""
			switch mode {
			case "in place":
				d.ohctlJSON(&c, "create", "--repo", repo)
				if !c.InPlace {
					t.Fatalf("create = %+v, want in place", c)
				}
				// In the view: at <repo>/.git/tools inside.
				installAttackTool(t, filepath.Join(c.GitView, "tools"), attackOwner, attackOwner, "rm", "mv", "mkdir")
				tools = filepath.Join(c.CommonDir, "tools")
			case "worktree":
				d.ohctlJSON(&c, "create", "--repo", repo, "--worktree")
				top = c.Worktree
				installAttackTool(t, filepath.Join(c.GitView, "tools"), attackOwner, attackOwner, "rm", "mv", "mkdir")
				tools = filepath.Join(c.CommonDir, "tools")
			case "plain folder":
				d.ohctlJSON(&c, "create", "--repo", base)
				if c.InPlace || c.Worktree != "" {
					t.Fatalf("create = %+v, want a plain folder", c)
				}
				tools = filepath.Join(base, ".tools")
				installAttackTool(t, tools, attackOwner, attackOwner, "rm", "mv", "mkdir")
			}
			markers := markerDir(t)
			attacks := testenv.PointerAttacks(mode != "worktree", ".agent/evil")
			_, out := d.execIn(c.ID, "sh", "-c", "export PATH="+tools+":$PATH; cd "+top+" && "+pointerScript(attacks, markers))
			t.Logf("attacks inside:\n%s", out)
			for _, part := range strings.Split(out, "== ")[1:] {
				name, said, _ := strings.Cut(part, "\n")
				said = strings.ToLower(said) // the attack tool says Go's words
				if !strings.Contains(said, "device or resource busy") && !strings.Contains(said, "read-only file system") {
					t.Errorf("attack %s inside did not meet a mount (EBUSY or EROFS): %q", name, said)
				}
			}
			if user := userGitAt(top); len(firedMarkers(markers)) > 0 {
				t.Errorf("during the conversation, the user's git ran the agent's fsmonitor: %v\n%s", firedMarkers(markers), user)
			}
			if mode == "worktree" {
				d.ohctl("rm", "--discard", c.ID) // the worktree goes with it
				return
			}
			d.ohctl("rm", c.ID)
			if user := userGitAt(top); len(firedMarkers(markers)) > 0 {
				t.Errorf("after ohctl rm, the user's git ran the agent's fsmonitor: %v\n%s", firedMarkers(markers), user)
			}
			for _, p := range []string{"sub.moved", "vendor.moved", "a.moved"} {
				if _, err := os.Lstat(filepath.Join(top, p)); err == nil {
					t.Errorf("%s exists: a pinned directory was moved", p)
				}
			}
		})
	}
}

// TestBackendHeldGitlinkNeverReachesTheUsersMerge: in place, the agent makes a
// repository x of its own in the folder (its fsmonitor planted) and
// commits it as a gitlink. ohd holds that commit back (ohctl show says
// so, naming x) under refs/ohd/held/<id>/: the user's merge of
// openhands/<id> on the host and their git status run nothing, while the
// conversation runs and after `ohctl rm` (the agent's x is still there,
// so the commit stays held, and the removal says so). The control merges
// the held commit itself: the fsmonitor fires.
func TestBackendHeldGitlinkNeverReachesTheUsersMerge(t *testing.T) {
	testenv.RequireRoot(t)
	eachBackend(t, heldGitlinkNeverReachesTheUsersMerge)
}

func heldGitlinkNeverReachesTheUsersMerge(t *testing.T, b backend) {
	d := b.daemon(t)
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	testenv.ChownR(t, repo, attackOwner, attackOwner)
	markers := markerDir(t)
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", repo)
	if !c.InPlace {
		t.Fatalf("create = %+v, want in place", c)
	}
	g := "git -c user.name=a -c user.email=a@x "
	if code, out := d.execIn(c.ID, "sh", "-c", "cd "+repo+" && git init -q x && "+g+"-C x commit -q --allow-empty -m agent && "+
		"git -C x config core.fsmonitor \"touch "+markers+"/fired; false\" && git add x && "+g+"commit -q -m 'add x'"); code != 0 {
		t.Fatalf("the agent's commit inside: %s", out)
	}
	held := "refs/ohd/held/" + c.ID + "/heads/openhands/" + c.ID
	waitFor(t, 30*time.Second, "the commit held back", func() bool {
		var now store.Conversation
		d.ohctlJSON(&now, "show", c.ID)
		return strings.Contains(now.PublishError, "held back") && strings.Contains(now.PublishError, "submodule entry x")
	})
	if out := d.ohctl("show", c.ID); !strings.Contains(out, held) {
		t.Errorf("ohctl show does not name the held ref %s:\n%s\n--- ohd log ---\n%s", held, out, tail(d.logs.String(), 30))
	}
	userMerge := func(dir, ref string) string {
		var out []byte
		for _, args := range [][]string{{"-c", "user.name=u", "-c", "user.email=u@x", "merge", "-q", "--no-edit", ref}, {"status"}, {"diff"}} {
			cmd := exec.Command("git", args...)
			cmd.Dir, cmd.Env = dir, testenv.GitEnv()
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: attackOwner, Gid: attackOwner}}
			b, _ := cmd.CombinedOutput()
			out = append(out, b...)
		}
		return string(out)
	}
	if out := userMerge(repo, "openhands/"+c.ID); len(firedMarkers(markers)) > 0 {
		t.Errorf("the user's merge of openhands/%s and git status ran the agent's fsmonitor:\n%s", c.ID, out)
	}
	// Control, while the agent's repository is still in the folder: the
	// held commit itself, merged, fires. The user's main is then put back
	// and the marker cleared.
	if out := userMerge(repo, held); len(firedMarkers(markers)) == 0 {
		t.Errorf("control: merging the held commit did not run the fsmonitor: the attack is broken\n%s", out)
	}
	reset := exec.Command("git", "reset", "-q", "--hard", "ORIG_HEAD")
	reset.Dir, reset.Env = repo, testenv.GitEnv()
	reset.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: attackOwner, Gid: attackOwner}}
	if b, err := reset.CombinedOutput(); err != nil {
		t.Fatalf("the user's git reset after the control: %v\n%s", err, b)
	}
	for _, m := range firedMarkers(markers) {
		_ = os.Remove(filepath.Join(markers, m))
	}
	heldCommit, err := testenv.GitOutput(repo, "-c", "safe.directory=*", "rev-parse", "--verify", held)
	if err != nil {
		t.Fatalf("the held ref %s: %v", held, err)
	}
	// stillHeld: the held commit never reaches the user's branch
	// openhands/<id> once the removal has moved the agent's repository
	// out of x (nothing is left there that would hold it back, so a
	// publish after the release would let it through).
	stillHeld := func(stage string) {
		t.Helper()
		if got, _ := testenv.GitOutput(repo, "-c", "safe.directory=*", "rev-parse", "-q", "--verify", held); got != heldCommit {
			t.Errorf("%s: %s = %q, want the held commit %s still there", stage, held, got, heldCommit)
		}
		branch, _ := testenv.GitOutput(repo, "-c", "safe.directory=*", "rev-parse", "-q", "--verify", "refs/heads/openhands/"+c.ID)
		if branch == "" {
			return
		}
		anc := exec.Command("git", "-c", "safe.directory=*", "merge-base", "--is-ancestor", heldCommit, branch)
		anc.Dir, anc.Env = repo, testenv.GitEnv()
		if anc.Run() == nil {
			t.Errorf("%s: the held commit %s was published to openhands/%s (%s)", stage, heldCommit, c.ID, branch)
		}
	}
	var rm struct {
		Message string `json:"message"`
	}
	out := d.ohctl("--json", "rm", c.ID)
	_ = json.Unmarshal([]byte(out), &rm)
	if !strings.Contains(out, "held back") {
		t.Errorf("ohctl rm does not say the last commit is held back:\n%s", out)
	}
	if out := userMerge(repo, "openhands/"+c.ID); len(firedMarkers(markers)) > 0 {
		t.Errorf("after ohctl rm, the user's merge and git status ran the agent's fsmonitor:\n%s", out)
	}
	// The removal moved the agent's repository out of the folder (issue
	// 26): now even the held commit, merged, runs nothing.
	stillHeld("after ohctl rm")
	d.restart()
	stillHeld("after ohctl rm and an ohd restart")
	// A restore has no commit of the conversation's to restore; it does
	// not publish the held one either.
	d.ohctlErr("restore", c.ID)
	stillHeld("after ohctl restore")
	if _, err := os.Lstat(filepath.Join(repo, "x", ".git")); err == nil {
		t.Errorf("after ohctl rm the agent's x/.git is still in the folder")
	}
	if out := userMerge(repo, held); len(firedMarkers(markers)) > 0 {
		t.Errorf("after ohctl rm, merging the held commit ran the agent's fsmonitor:\n%s", out)
	}
}

// TestBackendStaleMountsMakeTheContainerAnew: a container keeps the mounts it
// was made with. The user checks out a new submodule in the folder while
// an in-place conversation runs. On Docker ohd notices the change of the
// user's index and fixes the new submodule's pointers in the running
// container at once (livepins.go: lib pinned, lib/.git read-only),
// without making it anew, and doctor says all is fixed. When the
// container next starts, ohd sees its engine mounts are not the plan's
// and makes it anew, and lib is pinned there too.
//
// On Kubernetes ohd cannot reach a running pod's mount namespace (it
// has no process id of it), so by design the pod keeps its mounts until
// the next start: doctor names lib as not fixed meanwhile. Every start
// makes a pod anew (there is no stopped pod), and the new pod has the
// plan's mounts.
func TestBackendStaleMountsMakeTheContainerAnew(t *testing.T) {
	testenv.RequireRoot(t)
	eachBackend(t, staleMountsMakeTheContainerAnew)
}

func staleMountsMakeTheContainerAnew(t *testing.T, b backend) {
	d := b.daemon(t)
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	testenv.ChownR(t, repo, attackOwner, attackOwner)
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", repo)
	installAttackTool(t, filepath.Join(c.GitView, "tools"), attackOwner, attackOwner, "mv")
	mv := "export PATH=" + filepath.Join(c.CommonDir, "tools") + ":$PATH; cd " + repo + " && mv lib lib.moved 2>&1 && mv lib.moved lib"

	other := testenv.NewRepo(t, testenv.RepoOptions{})
	hostGit(t, repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", other, "lib")
	hostGit(t, repo, "commit", "-q", "-m", "lib")
	testenv.ChownR(t, repo, attackOwner, attackOwner)
	doctor := func() string {
		out, _ := d.ohctlErr("--json", "doctor", c.ID)
		for _, l := range strings.Split(out, "{") {
			if strings.Contains(l, `"fixed-pointers"`) {
				return l
			}
		}
		return ""
	}
	if b.name == "kubernetes" {
		waitFor(t, 15*time.Second, "doctor to name the new submodule as not fixed", func() bool {
			got := doctor()
			return strings.Contains(got, `"fail"`) && strings.Contains(got, filepath.Join(repo, "lib"))
		})
	} else {
		livePins(t, d, c, repo, mv, doctor)
	}
	b.stop(t, c.ContainerID)
	waitFor(t, 30*time.Second, "ohd to notice the stop", func() bool {
		var now store.Conversation
		d.ohctlJSON(&now, "show", c.ID)
		return now.State == store.StateStopped
	})
	code, out := d.execIn(c.ID, "sh", "-c", mv)
	if code == 0 || !strings.Contains(strings.ToLower(out), "device or resource busy") {
		t.Errorf("after the restart, moving the new submodule lib = exit %d %q, want EBUSY (a mount point)", code, out)
	}
	var now store.Conversation
	d.ohctlJSON(&now, "show", c.ID)
	if now.ContainerID == c.ContainerID {
		t.Errorf("the container %s was restarted with its old mounts, not made anew", c.ContainerID)
	}
	if got := doctor(); !strings.Contains(got, `"ok"`) {
		t.Errorf("doctor's fixed-pointers check after the restart = %q, want ok", got)
	}
}

// livePins checks that, within seconds of the user's checkout of a new
// submodule lib, the running container has lib pinned and its .git
// read-only (the agent can neither move lib away nor point its .git
// elsewhere), without being made anew, and doctor says all is fixed.
func livePins(t *testing.T, d *daemon, c store.Conversation, repo, mv string, doctor func() string) {
	t.Helper()
	// Within a few seconds of the user's checkout the running container
	// has lib pinned and its .git read-only: the agent can neither move
	// lib away nor point its .git elsewhere.
	var out string
	pinned := false
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		var code int
		code, out = d.execIn(c.ID, "sh", "-c", mv)
		if code != 0 && strings.Contains(strings.ToLower(out), "device or resource busy") {
			pinned = true
			break
		}
	}
	if !pinned {
		t.Fatalf("15 s after the user added submodule lib, the agent can still move it in the running container (last try: %q)\n--- ohd log ---\n%s", out, tail(d.logs.String(), 30))
	}
	if code, out := d.execIn(c.ID, "sh", "-c", "echo 'gitdir: /tmp/x' > "+filepath.Join(repo, "lib", ".git")); code == 0 || !strings.Contains(strings.ToLower(out), "read-only") {
		t.Errorf("the agent's write of lib/.git in the running container = exit %d %q, want EROFS", code, out)
	}
	var live store.Conversation
	d.ohctlJSON(&live, "show", c.ID)
	if live.ContainerID != c.ContainerID {
		t.Errorf("the container was made anew (%s, was %s): the pins were to be added to the running one", live.ContainerID, c.ContainerID)
	}
	if !strings.Contains(d.logs.String(), "fixed new pointers in the running container") {
		t.Errorf("ohd's log does not say it fixed the new pointers")
	}

	if got := doctor(); !strings.Contains(got, `"ok"`) {
		t.Errorf("doctor's fixed-pointers check after the live pins = %q, want ok", got)
	}
}
