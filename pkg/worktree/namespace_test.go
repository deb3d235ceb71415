package worktree

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/hardgit"
	"github.com/ohd-dev/ohd/pkg/worktree/mountplan"
)

// TestMountPlan checks the mounts' shape (the worktree's .git read-only:
// the user's git follows it) and that a missing logs/ is created for the
// owner.
func TestMountPlan(t *testing.T) {
	m, repo, wt := newRepoWorktree(t)
	logs := filepath.Join(repo.CommonDir, "logs")
	if err := os.RemoveAll(logs); err != nil {
		t.Fatal(err)
	}
	plan, err := m.MountPlan(wt)
	if err != nil {
		t.Fatalf("MountPlan: %v", err)
	}
	c := repo.CommonDir
	want := []mountplan.Mount{
		{Source: c, Target: c, ReadOnly: true},
		{Source: c + "/logs", Target: c + "/logs"},
		{Source: c + "/objects", Target: c + "/objects"},
		{Source: c + "/refs", Target: c + "/refs"},
		{Source: wt.AdminDir, Target: wt.AdminDir},
		{Source: wt.Path, Target: wt.Path},
		{Source: wt.Path + "/.git", Target: wt.Path + "/.git", ReadOnly: true}, // package mountplan
	}
	mountplan.Sort(want) // the worktree's depth depends on the temp dirs
	if diff := cmp.Diff(want, plan); diff != "" {
		t.Errorf("MountPlan mismatch (-want +got):\n%s", diff)
	}
	for i, mt := range plan {
		for _, parent := range plan[i+1:] {
			if within(mt.Target, parent.Target) && mt.Target != parent.Target {
				t.Errorf("mount %s comes before its parent %s", mt.Target, parent.Target)
			}
		}
	}
	if st, err := os.Stat(logs); err != nil || !st.IsDir() {
		t.Errorf("MountPlan did not create %s: %v", logs, err)
	}

	// A symlink planted where a writable mount goes is refused.
	refs := filepath.Join(c, "refs")
	if err := os.Rename(refs, refs+".real"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", refs); err != nil {
		t.Fatal(err)
	}
	if _, err := m.MountPlan(wt); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("MountPlan with refs -> /etc = %v, want a refusal", err)
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// commonAncestor returns the longest directory containing all paths.
func commonAncestor(paths ...string) string {
	anc := paths[0]
	for _, p := range paths[1:] {
		for !within(p, anc) {
			anc = filepath.Dir(anc)
		}
	}
	return anc
}

// TestWorktreeResolvesInPrivateNamespace: in a mount namespace where only
// the MountPlan's paths are visible (as in the container), git works in the
// worktree on openhands/<id>, the shared config is read-only, and a commit
// made there is on the host's branch.
func TestWorktreeResolvesInPrivateNamespace(t *testing.T) {
	testenv.RequireUnshare(t)
	if _, err := exec.LookPath("setpriv"); err != nil {
		testenv.Missing(t, "setpriv(1) not found (install util-linux)")
	}
	uid, gid := testenv.UnprivilegedUID, testenv.UnprivilegedGID
	m := newManager(t)
	repo := mustInspect(t, m, testenv.NewRepo(t, testenv.RepoOptions{Owner: &testenv.Owner{UID: uid, GID: gid}}))
	wt := mustAdd(t, m, repo, newID(t), "")
	plan, err := m.MountPlan(wt)
	if err != nil {
		t.Fatalf("MountPlan: %v", err)
	}
	configBefore := readFile(t, filepath.Join(repo.CommonDir, "config"))

	// Hide everything around the repository and the worktree root behind
	// a tmpfs, then bind the plan's sources back at their own paths.
	hide := commonAncestor(repo.TopLevel, m.Root())
	if strings.Count(hide, "/") < 2 {
		t.Fatalf("common ancestor %s of %s and %s is too close to /", hide, repo.TopLevel, m.Root())
	}
	stage, err := os.MkdirTemp("", "ohd-ns-stage-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(stage) })
	if within(stage, hide) {
		t.Fatalf("stage %s is inside %s", stage, hide)
	}
	var s strings.Builder
	s.WriteString("set -eu\n")
	for i, mt := range plan {
		st := filepath.Join(stage, strconv.Itoa(i))
		// A file (a .git pointer) is bound onto a file.
		s.WriteString("if [ -d " + shellQuote(mt.Source) + " ]; then mkdir -p " + shellQuote(st) + "; else : > " + shellQuote(st) + "; fi; mount --bind " + shellQuote(mt.Source) + " " + shellQuote(st) + "\n")
	}
	s.WriteString("mount -t tmpfs tmpfs " + shellQuote(hide) + "\n")
	for i, mt := range plan {
		st := filepath.Join(stage, strconv.Itoa(i))
		s.WriteString("[ -e " + shellQuote(mt.Target) + " ] || mkdir -p " + shellQuote(mt.Target) + "; mount --bind " + shellQuote(st) + " " + shellQuote(mt.Target) + "\n")
		if mt.ReadOnly {
			s.WriteString("mount -o remount,bind,ro " + shellQuote(mt.Target) + "\n")
		}
	}
	// The agent's side, as the repository owner.
	asUser := "setpriv --reuid " + strconv.Itoa(uid) + " --regid " + strconv.Itoa(gid) + " --clear-groups "
	wtq, cq := shellQuote(wt.Path), shellQuote(repo.CommonDir)
	s.WriteString("if [ -e " + shellQuote(filepath.Join(repo.TopLevel, "README.md")) + " ]; then echo MAIN-WORKTREE-VISIBLE; fi\n")
	s.WriteString("echo STATUS; " + asUser + "git -C " + wtq + " status --short --branch\n")
	s.WriteString("if " + asUser + "sh -c 'echo >> \"$1\"' _ " + cq + "/config 2>/dev/null; then echo CONFIG-WRITABLE; fi\n")
	s.WriteString("if { echo >> " + cq + "/config; } 2>/dev/null; then echo CONFIG-WRITABLE-BY-ROOT; fi\n")
	s.WriteString(asUser + "sh -c 'echo agent > \"$1\"/agent.txt' _ " + wtq + "\n")
	s.WriteString(asUser + "git -C " + wtq + " add agent.txt\n")
	s.WriteString(asUser + "git -C " + wtq + " commit -q -m 'agent commit'\n")
	s.WriteString("echo HEAD; " + asUser + "git -C " + wtq + " rev-parse HEAD\n")

	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", s.String())
	cmd.Env = append(testenv.GitEnv(), gitConfigEnv(ContainerGitConfig())...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("in the namespace: %v\n%s\nscript:\n%s", err, out, s.String())
	}
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(got) != 4 || got[0] != "STATUS" || got[1] != "## "+wt.Branch || got[2] != "HEAD" || !isHexID(got[3]) {
		t.Fatalf("in the namespace got %q, want STATUS, \"## %s\", HEAD, <commit> (and no *-VISIBLE or CONFIG-WRITABLE lines)", got, wt.Branch)
	}
	if host := gitIn(t, repo.TopLevel, "rev-parse", wt.Branch); host != got[3] {
		t.Errorf("host branch %s = %s, want the commit made in the namespace %s", wt.Branch, host, got[3])
	}
	if after := readFile(t, filepath.Join(repo.CommonDir, "config")); after != configBefore {
		t.Errorf("the repository config changed")
	}
	h, err := m.Health(testCtx(t), wt)
	if err != nil || !h.Registered || h.Prunable || !h.GitdirResolves {
		t.Errorf("Health after the namespace = %+v, %v; want registered, not prunable", h, err)
	}
	res, err := m.Remove(testCtx(t), wt, RemoveOptions{})
	if err != nil || !res.BranchKept || res.CommitsBeyondStart != 1 {
		t.Errorf("Remove = %+v, %v; want the branch kept with 1 commit", res, err)
	}
}

// gitConfigEnv encodes settings as GIT_CONFIG_* variables, as the runtime
// does for the container.
func gitConfigEnv(kvs [][2]string) []string { return hardgit.ConfigEnv(kvs) }
