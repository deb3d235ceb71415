package worktree

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/hardgit"
)

// evilRepo is a repository whose configuration, hooks and attributes make
// git run "marker" programs; each program appends its name to a file.
type evilRepo struct {
	dir     string // top level
	markers string // file the programs append to
	bin     string // directory of the programs
}

// program writes an executable shell script bin/<name> that records its
// name in the marker file; filter scripts pass their input through.
func (e *evilRepo) program(t *testing.T, name string, filter bool) string {
	t.Helper()
	body := "#!/bin/sh\necho " + name + " >> " + e.markers + "\n"
	if filter {
		body += "cat\n"
	} else {
		body += "cat >/dev/null 2>&1 </dev/null || true\n"
	}
	p := filepath.Join(e.bin, name)
	if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// fired returns the sorted distinct names of the programs that ran.
func (e *evilRepo) fired(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(e.markers)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, l := range strings.Fields(string(b)) {
		seen[l] = true
	}
	var out []string
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (e *evilRepo) reset(t *testing.T) {
	t.Helper()
	if err := os.Remove(e.markers); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
}

var hookNames = []string{"post-checkout", "reference-transaction", "post-index-change", "pre-commit", "post-commit", "pre-auto-gc"}

// newEvilRepo builds the repository. wtPath is where the conversation's
// worktree will be (its files are agent-writable, and the repository's
// config includes files from there).
func newEvilRepo(t *testing.T, wtPath string) *evilRepo {
	t.Helper()
	dir := testenv.NewRepo(t, testenv.RepoOptions{})
	tmp := testenv.TempDir(t)
	e := &evilRepo{dir: dir, markers: filepath.Join(tmp, "fired"), bin: filepath.Join(tmp, "bin")}
	if err := os.Mkdir(e.bin, 0o755); err != nil {
		t.Fatal(err)
	}
	// Content first, with plain attributes, before any program is set.
	testenv.WriteFile(t, filepath.Join(dir, ".gitattributes"),
		"*.txt filter=evil\n*.proc filter=proc\n*.inc filter=incfilter\n*.br filter=brfilter\n*.gd filter=gdfilter\n*.wc filter=wcfilter\n")
	for _, f := range []string{"a.txt", "b.proc", "c.inc", "d.br", "e.gd", "f.wc"} {
		testenv.WriteFile(t, filepath.Join(dir, f), "content of "+f+"\n")
	}
	gitIn(t, dir, "add", ".")
	gitIn(t, dir, "commit", "-q", "-m", "files with filter attributes")

	hooksPath := filepath.Join(tmp, "hookspath")
	for _, h := range hookNames {
		testenv.WriteFile(t, filepath.Join(hooksPath, h), "")
		if err := os.Rename(e.program(t, "hookspath-"+h, false), filepath.Join(hooksPath, h)); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(e.program(t, "githooks-"+h, false), filepath.Join(dir, ".git", "hooks", h)); err != nil {
			t.Fatal(err)
		}
	}
	config := [][2]string{
		{"core.repositoryformatversion", "1"},
		{"extensions.worktreeConfig", "true"},
		{"core.fsmonitor", e.program(t, "fsmonitor", false)},
		{"core.hooksPath", hooksPath},
		{"filter.evil.clean", e.program(t, "filter-clean", true)},
		{"filter.evil.smudge", e.program(t, "filter-smudge", true)},
		{"filter.evil.required", "true"},
		{"filter.proc.process", e.program(t, "filter-process", true)}, // echoes git's hello: a protocol error git survives
		{"diff.external", e.program(t, "diff-external", false)},
		{"core.sshCommand", e.program(t, "ssh-command", false)},
		{"core.askPass", e.program(t, "askpass", false)},
		{"credential.helper", "!" + e.program(t, "credential-helper", false)},
		{"core.editor", e.program(t, "editor", false)},
		{"core.pager", e.program(t, "pager", false)},
		{"gpg.program", e.program(t, "gpg", false)},
		{"commit.gpgSign", "true"},
		// Config the agent can write: files in its worktree, pulled in
		// by include and includeIf (onbranch, gitdir).
		{"include.path", filepath.Join(wtPath, ".agent-include")},
		{"includeIf.onbranch:openhands/**.path", filepath.Join(wtPath, ".agent-onbranch")},
		{"includeIf.gitdir:" + filepath.Join(dir, ".git", "worktrees") + "/**.path", filepath.Join(wtPath, ".agent-gitdir")},
	}
	for _, kv := range config {
		gitIn(t, dir, "config", kv[0], kv[1])
	}
	return e
}

// plantAgentConfig writes, as the agent could, config files in the
// worktree and its admin dir (config.worktree), each defining a filter
// driver used by the committed attributes, plus new files that use them.
func (e *evilRepo) plantAgentConfig(t *testing.T, wtPath, adminDir string) {
	t.Helper()
	filter := func(name, prog string) string {
		return fmt.Sprintf("[filter %q]\n\tclean = %s\n\tsmudge = %s\n", name, prog, prog)
	}
	testenv.WriteFile(t, filepath.Join(wtPath, ".agent-include"), filter("incfilter", e.program(t, "include-filter", true)))
	testenv.WriteFile(t, filepath.Join(wtPath, ".agent-onbranch"), filter("brfilter", e.program(t, "onbranch-filter", true)))
	testenv.WriteFile(t, filepath.Join(wtPath, ".agent-gitdir"), filter("gdfilter", e.program(t, "gitdir-filter", true)))
	testenv.WriteFile(t, filepath.Join(adminDir, "config.worktree"),
		filter("wcfilter", e.program(t, "worktree-config-filter", true))+
			"[core]\n\tfsmonitor = "+e.program(t, "worktree-config-fsmonitor", false)+"\n")
	for _, f := range []string{"a.txt", "b.proc", "c.inc", "d.br", "e.gd", "f.wc"} {
		testenv.WriteFile(t, filepath.Join(wtPath, f), "changed "+f+"\n")
		testenv.WriteFile(t, filepath.Join(wtPath, "new-"+f), "new "+f+"\n")
	}
}

// TestHardenedGitControl shows that the evil repository really makes
// plain git run the programs, so TestHardenedGit can fail.
func TestHardenedGitControl(t *testing.T) {
	wtPath := filepath.Join(testenv.TempDir(t), "wt", "repo")
	e := newEvilRepo(t, wtPath)
	gitIn(t, e.dir, "worktree", "add", "-q", "-b", "openhands/x", wtPath)
	admin := filepath.Join(e.dir, ".git", "worktrees", "repo")
	e.plantAgentConfig(t, wtPath, admin)
	gitIn(t, wtPath, "add", "-A")
	gitIn(t, wtPath, "status", "--porcelain")
	cmd := exec.Command("git", "-c", "core.hooksPath="+filepath.Join(e.dir, ".git", "hooks"), "checkout", "-q", "-b", "y")
	cmd.Dir, cmd.Env = wtPath, testenv.GitEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git checkout: %v: %s", err, out)
	}
	cmd = exec.Command("git", "diff", "--cached", "--ext-diff", "HEAD")
	cmd.Dir, cmd.Env = wtPath, testenv.GitEnv()
	_ = cmd.Run() // the external diff "fails" (prints nothing); it ran
	got := e.fired(t)
	for _, want := range []string{
		"filter-clean", "filter-smudge", "filter-process", "fsmonitor",
		"include-filter", "onbranch-filter", "gitdir-filter", "worktree-config-filter", "worktree-config-fsmonitor",
		"hookspath-post-checkout", "hookspath-reference-transaction", "hookspath-post-index-change",
		"githooks-post-checkout", "diff-external",
	} {
		if !contains(got, want) {
			t.Errorf("plain git did not run %s (ran %q): the hardening test would not notice it", want, got)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestHardenedGit: Add, Snapshot, MountPlan, Health and Remove on the evil
// repository run none of the programs, even filters defined in files the
// agent wrote after Add; the snapshot holds the unfiltered content.
func TestHardenedGit(t *testing.T) {
	m := newManager(t)
	id := newID(t)
	wtPath := filepath.Join(m.Root(), id, "repo")
	e := newEvilRepo(t, wtPath)
	ctx := testCtx(t)
	repo := mustInspect(t, m, e.dir)
	wt := mustAdd(t, m, repo, id, "")
	if got := e.fired(t); len(got) != 0 {
		t.Errorf("Add ran %q", got)
	}
	if got := readFile(t, filepath.Join(wt.Path, "a.txt")); got != "content of a.txt\n" {
		t.Errorf("a.txt = %q, want the blob as stored (no smudge)", got)
	}

	e.plantAgentConfig(t, wt.Path, wt.AdminDir)
	// The planted files are live: plain git in this context would see them.
	drivers := gitIn(t, wt.Path, "config", "--name-only", "--get-regexp", `^filter\.`)
	for _, d := range []string{"incfilter", "brfilter", "gdfilter", "wcfilter"} {
		if !strings.Contains(drivers, "filter."+d+".") {
			t.Fatalf("git config in the worktree does not see filter %s (%q); the test would prove nothing", d, drivers)
		}
	}
	if _, err := m.MountPlan(wt); err != nil {
		t.Fatalf("MountPlan: %v", err)
	}
	if _, err := m.Health(ctx, wt); err != nil {
		t.Fatalf("Health: %v", err)
	}
	ref, commit, err := m.Snapshot(ctx, wt)
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	if commit == "" {
		t.Fatalf("Snapshot found nothing to record")
	}
	res, err := m.Remove(ctx, wt, RemoveOptions{})
	if err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if got := e.fired(t); len(got) != 0 {
		t.Errorf("Snapshot/Remove ran %q", got)
	}
	if res.SnapshotRef != ref {
		t.Errorf("Remove snapshot = %q, want %q", res.SnapshotRef, ref)
	}
	for _, f := range []string{"a.txt", "c.inc", "f.wc"} {
		if got := gitIn(t, e.dir, "show", res.SnapshotRef+":new-"+f); got != "new "+f {
			t.Errorf("snapshot new-%s = %q, want the raw content", f, got)
		}
	}
	if got := gitIn(t, e.dir, "cat-file", "commit", res.SnapshotCommit); strings.Contains(got, "gpgsig") {
		t.Errorf("snapshot commit is signed: %q", got)
	}
	assertGone(t, m, wt)
}

// TestNoLazyFetch: in a partial clone whose promisor remote is an ext::
// URL (a command) explicitly allowed by protocol.ext.allow, a missing blob
// makes plain git run that command; ohd's git runs nothing, and Add fails
// cleanly instead.
func TestNoLazyFetch(t *testing.T) {
	src := testenv.NewRepo(t, testenv.RepoOptions{})
	commitFile(t, src, "big.txt", "only on the server\n", "second")
	gitIn(t, src, "config", "uploadpack.allowFilter", "true")
	dst := filepath.Join(testenv.TempDir(t), "clone")
	gitIn(t, filepath.Dir(dst), "clone", "-q", "--no-checkout", "--filter=blob:none", "file://"+src, dst)
	e := &evilRepo{dir: dst, markers: filepath.Join(testenv.TempDir(t), "fired"), bin: testenv.TempDir(t)}
	gitIn(t, dst, "config", "remote.origin.url", "ext::"+e.program(t, "ext-transport", false)+" %S")
	gitIn(t, dst, "config", "protocol.ext.allow", "always")

	// Control: plain git runs the ext:: command to fetch the blob.
	if _, err := testenv.GitOutput(dst, "cat-file", "-p", "HEAD:big.txt"); err == nil {
		t.Fatalf("plain git read a blob the partial clone should lack")
	}
	if got := e.fired(t); !contains(got, "ext-transport") {
		t.Fatalf("plain git ran %q, want the ext:: command (the test would prove nothing)", got)
	}
	e.reset(t)

	m := newManager(t)
	repo := mustInspect(t, m, dst)
	before := listing(t, m.Root(), repo.CommonDir)
	_, err := m.Add(testCtx(t), AddOptions{Repo: repo, ConversationID: newID(t)})
	if err == nil {
		t.Fatalf("Add in a partial clone without the blobs succeeded; want a checkout error")
	}
	if got := e.fired(t); len(got) != 0 {
		t.Errorf("Add ran %q", got)
	}
	if after := listing(t, m.Root(), repo.CommonDir); !equalStrings(before, after) {
		t.Errorf("failed Add changed the disk:\n%s", cmp.Diff(before, after))
	}

	// Each layer holds on its own: without GIT_NO_LAZY_FETCH (which git
	// before 2.39.4 and 2.40-2.43 ignore), the protocol allow-list alone
	// refuses the transport.
	// (git reads GIT_NO_LAZY_FETCH=0 as unset.)
	r := hardgit.Runner{Path: m.gitPath, Timeout: m.timeout, EUID: os.Geteuid()}
	_, err = r.Run(testCtx(t), gitTarget{Dir: dst, UID: os.Geteuid(), GID: os.Getegid()},
		runOpts{Env: []string{"GIT_NO_LAZY_FETCH=0"}}, "cat-file", "-p", "HEAD:big.txt")
	if err == nil || !strings.Contains(err.Error(), "transport 'ext' not allowed") {
		t.Errorf("hardened git without GIT_NO_LAZY_FETCH = %v; want the ext transport refused", err)
	}
	if got := e.fired(t); len(got) != 0 {
		t.Errorf("hardened git without GIT_NO_LAZY_FETCH ran %q", got)
	}
}
