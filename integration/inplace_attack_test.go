package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/store"
)

// Issue 18, acceptance 1: in place (a create without a worktree: what an
// SDK create and Agent Canvas's picked workspace send) is as safe as a
// worktree. The agent works in the user's folder itself, a repository
// owned by uid 1000, and attacks the git dir it sees there (its git view,
// mounted over the folder's .git). Each attack is its own test; each then
// runs the user's everyday git on the host in that folder (diff, status,
// log) and asserts that nothing of the agent's ran and that the real git
// dir is unchanged byte for byte, but for what ohd itself writes for the
// conversation (its branch openhands/<id>, kept refs, new objects).

// inPlace is one in-place attack's world: a daemon, a repository owned by
// uid 1000 with packed and loose refs, a tag, an origin remote and the
// sample hooks, a conversation in place in it, and a world-writable marker
// directory no container mounts.
type inPlace struct {
	t         *testing.T
	d         *daemon
	repo      string
	gitDir    string
	work      string // the folder the conversation was created for: repo, or a subdirectory
	conv      store.Conversation
	markerDir string
	before    map[string]string
	refs      []string
	index     string // the host index's entries (ls-files -s)
	// packedBefore is packed-refs without ohd's lines.
	packedBefore string
}

func newInPlace(t *testing.T, b backend) *inPlace { t.Helper(); return newInPlaceWith(t, b) }

// newInPlaceWith is newInPlace; before runs on the repository before it
// is given to uid 1000.
func newInPlaceWith(t *testing.T, b backend, before ...func(repo string)) *inPlace {
	t.Helper()
	return newInPlaceAt(t, b, "", before...)
}

// newInPlaceAt is newInPlaceWith for a conversation created for the
// subdirectory sub of the repository ("" is the repository itself).
func newInPlaceAt(t *testing.T, b backend, sub string, before ...func(repo string)) *inPlace {
	t.Helper()
	testenv.RequireRoot(t)
	a := &inPlace{t: t, d: b.daemon(t)}
	a.repo = testenv.NewRepo(t, testenv.RepoOptions{})
	a.gitDir = filepath.Join(a.repo, ".git")
	a.work = filepath.Join(a.repo, sub)
	g := func(args ...string) string { return testenv.Git(t, a.repo, args...) }
	testenv.WriteFile(t, filepath.Join(a.repo, "src.txt"), "second\n")
	g("add", "src.txt")
	g("commit", "-q", "-m", "second")
	g("tag", "-a", "-m", "v1", "v1")
	g("branch", "feature")
	g("update-ref", "refs/remotes/origin/main", g("rev-parse", "main"))
	g("pack-refs", "--all")
	g("branch", "loose")
	testenv.WriteFile(t, filepath.Join(a.gitDir, "hooks", "post-commit"), "#!/bin/sh\nexit 0\n")
	for _, f := range before {
		f(a.repo)
	}
	testenv.ChownR(t, a.repo, attackOwner, attackOwner)
	a.markerDir = mustTempDir(t, "ohd-marker-")
	if err := os.Chmod(a.markerDir, 0o777); err != nil {
		t.Fatal(err)
	}
	a.d.ohctlJSON(&a.conv, "create", "--repo", a.work)
	if !a.conv.InPlace || a.conv.Worktree != "" || a.conv.GitView == "" || a.conv.UID != attackOwner {
		t.Fatalf("create without --worktree: want in place with a view as uid %d, got %+v", attackOwner, a.conv)
	}
	a.installTools()
	a.before, a.refs = listTree(t, a.gitDir), hostRefs(t, a.repo)
	a.index = testenv.Git(t, a.repo, "-c", "safe.directory=*", "ls-files", "-s")
	a.packedBefore = a.packedLines()
	return a
}

// installTools puts integration/attacktool into the view (at $GITDIR/tools
// inside).
func (a *inPlace) installTools() {
	a.t.Helper()
	installAttackTool(a.t, filepath.Join(a.conv.GitView, "tools"), attackOwner, attackOwner, toolNames...)
}

func (a *inPlace) expand(script string) string {
	return strings.NewReplacer(
		"$GITDIR", a.gitDir,
		"$ALT", filepath.Join(filepath.Dir(a.conv.GitView), "objects"),
		"$WT", a.work,
		"$MARKERS", a.markerDir,
		"$EVIL", "$(git -c user.name=e -c user.email=e@x commit-tree -m EVIL HEAD^{tree})",
	).Replace(script)
}

// run runs an attack script in the folder, inside the container, whatever
// its exit code.
func (a *inPlace) run(script string) string {
	a.t.Helper()
	_, out := a.d.execIn(a.conv.ID, "sh", "-c", "export PATH="+filepath.Join(a.gitDir, "tools")+":$PATH; cd "+a.work+" && "+a.expand(script))
	a.t.Logf("attack output: %s", tail(out, 40))
	return out
}

// must runs a script inside and fails the test if it fails.
func (a *inPlace) must(script string) string {
	a.t.Helper()
	code, out := a.d.execIn(a.conv.ID, "sh", "-c", "export PATH="+filepath.Join(a.gitDir, "tools")+":$PATH; cd "+a.work+" && "+a.expand(script))
	if code != 0 {
		a.t.Fatalf("inside %q: exit %d: %s", script, code, out)
	}
	return strings.TrimSpace(out)
}

// plantMarker writes the marker program at $WT/.agent/evil.
func (a *inPlace) plantMarker() {
	a.t.Helper()
	a.must("mkdir -p .agent && cat > .agent/evil <<'EOF'\n" + a.expand(markerProgram) + "EOF\nchmod +x .agent/evil")
}

// ohdWrote reports whether rel (under the real git dir) is something ohd
// writes for the conversation: its branch and reflog, its kept refs.
func (a *inPlace) ohdWrote(rel string) bool {
	return ohdWrites(rel, store.Conversation{ID: a.conv.ID, AdminID: "\x00none"})
}

// check runs the user's everyday git on the host in the folder, then
// compares the real git dir with before: unchanged byte for byte but for
// ohd's own writes and new objects; no marker; fsck clean.
func (a *inPlace) check(stage string) {
	a.t.Helper()
	t := a.t
	for _, args := range [][]string{{"diff"}, {"diff", "HEAD"}, {"status"}, {"log", "-p", "-1"}, {"show", "HEAD"}, {"branch", "-a"}} {
		// As the user would: as the owner, git's own environment, no ohd
		// hardening.
		cmd := exec.Command("git", args...)
		cmd.Dir, cmd.Env = a.repo, append(testenv.GitEnv(), "GIT_PAGER=cat")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: attackOwner, Gid: attackOwner}}
		_, _ = cmd.CombinedOutput()
	}
	now := listTree(t, a.gitDir)
	for rel, was := range a.before {
		got, ok := now[rel]
		switch {
		case rel == "packed-refs" || rel == "index" || a.ohdWrote(rel) || (strings.HasPrefix(rel, "modules/") && strings.HasSuffix(rel, "/index")):
			// The indexes: the user's own git (above) may refresh their
			// stat data; the top one's entries are compared below.
		case !ok:
			t.Errorf("%s: %s was deleted from the real git dir", stage, rel)
		case got != was:
			t.Errorf("%s: %s in the real git dir changed: %s -> %s", stage, rel, was, got)
		}
	}
	for rel, got := range now {
		if _, ok := a.before[rel]; !ok && !a.ohdWrote(rel) && !strings.HasPrefix(rel, "objects/") {
			t.Errorf("%s: new file in the real git dir: %s (%s)", stage, rel, got)
		}
	}
	// packed-refs: the same lines but ohd's own; the index: the host's
	// own git (status above) may refresh its stat data, never its entries.
	if a.packedLines() != a.packedBefore {
		t.Errorf("%s: packed-refs changed:\n%s", stage, a.packedLines())
	}
	if got := testenv.Git(t, a.repo, "-c", "safe.directory=*", "ls-files", "-s"); got != a.index {
		t.Errorf("%s: the host's index entries changed:\n%s", stage, got)
	}
	var refs []string
	for _, r := range hostRefs(t, a.repo) {
		if !strings.HasSuffix(r, " refs/heads/openhands/"+a.conv.ID) && !strings.Contains(r, " refs/ohd/kept/"+a.conv.ID+"/") &&
			!strings.Contains(r, " refs/ohd/live/"+a.conv.ID+"/") {
			refs = append(refs, r)
		}
	}
	var want []string
	for _, r := range a.refs {
		if !strings.HasSuffix(r, " refs/heads/openhands/"+a.conv.ID) {
			want = append(want, r)
		}
	}
	if strings.Join(refs, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s: the host's refs changed:\nbefore:\n%s\nafter:\n%s", stage, strings.Join(want, "\n"), strings.Join(refs, "\n"))
	}
	if head := testenv.Git(t, a.repo, "-c", "safe.directory=*", "symbolic-ref", "HEAD"); head != "refs/heads/main" {
		t.Errorf("%s: the host's HEAD is %s", stage, head)
	}
	if ents, _ := os.ReadDir(a.markerDir); len(ents) > 0 {
		b, _ := os.ReadFile(filepath.Join(a.markerDir, ents[0].Name()))
		t.Errorf("%s: the agent's program ran on the host: %s: %q", stage, ents[0].Name(), b)
	}
	if out, err := testenv.GitOutput(a.repo, "-c", "safe.directory=*", "fsck", "--strict", "--no-dangling"); err != nil {
		t.Errorf("%s: git fsck --strict on the host: %v\n%s", stage, err, out)
	}
}

// packedLines is packed-refs without ohd's own lines.
func (a *inPlace) packedLines() string {
	b, _ := os.ReadFile(filepath.Join(a.gitDir, "packed-refs"))
	var keep []string
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasSuffix(l, " refs/heads/openhands/"+a.conv.ID) && !strings.Contains(l, " refs/ohd/kept/"+a.conv.ID+"/") &&
			!strings.Contains(l, " refs/ohd/live/"+a.conv.ID+"/") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// finish checks, removes the conversation (its work kept), checks again,
// and requires the folder's files to be as the agent left them.
func (a *inPlace) finish() {
	a.t.Helper()
	a.check("after the attack")
	files := listTree(a.t, a.repo)
	out, err := a.d.ohctlErr("--json", "rm", a.conv.ID)
	if err != nil && strings.Contains(err.Error(), "--discard") {
		out, err = a.d.ohctlErr("--json", "rm", "--discard", a.conv.ID)
	}
	if err != nil {
		a.t.Fatalf("ohctl rm: %v\n%s", err, out)
	}
	a.check("after removal")
	// The git directories the agent made are moved out of the folder
	// (issue 26), as the removal's answer says: their files go.
	var r struct {
		Removal struct {
			GitDirsMoved []string `json:"git_dirs_moved"`
		} `json:"removal"`
	}
	if err := jsonUnmarshal(out, &r); err != nil {
		a.t.Fatalf("ohctl --json rm: %v: %s", err, out)
	}
	movedOut := func(rel string) bool {
		for _, m := range r.Removal.GitDirsMoved {
			if rel == m || strings.HasPrefix(rel, m+"/") {
				return true
			}
		}
		return false
	}
	now := listTree(a.t, a.repo)
	for rel, was := range files {
		if strings.HasPrefix(rel, ".git/") {
			continue
		}
		if _, still := now[rel]; !still && movedOut(rel) {
			continue
		}
		if !releasedOnly(was, now[rel]) {
			a.t.Errorf("removal changed the folder: %s %s -> %q", rel, was, now[rel])
		}
	}
	if _, err := os.Lstat(filepath.Dir(a.conv.GitView)); !os.IsNotExist(err) {
		a.t.Errorf("the view is still there after removal: %v", err)
	}
}

// releasedOnly reports whether a listTree entry changed at most as the
// removal gives the folder back to its owner (issue 26, package
// gitboundary): the agent's inodes become uid 1000's, and the group class
// of the mode, which showed the ACL mask while shared, shows the group's
// own permission again. Content, type and the owner's and others' bits
// stay.
func releasedOnly(was, now string) bool {
	if was == now {
		return true
	}
	w, n := strings.SplitN(was, " ", 3), strings.SplitN(now, " ", 3)
	if len(w) < 2 || len(n) < 2 || n[1] != fmt.Sprintf("%d:%d", attackOwner, attackOwner) || len(w) != len(n) || len(w) == 3 && w[2] != n[2] {
		return false
	}
	if len(w[0]) != len(n[0]) || len(w[0]) < 10 {
		return false
	}
	// "-rwxrwxr-x": type, then owner, group and other triplets.
	ms, ns := w[0], n[0]
	return ms[:len(ms)-6] == ns[:len(ns)-6] && ms[len(ms)-3:] == ns[len(ns)-3:]
}

// TestBackendInPlaceAttackDiffExternal is the reproduction: the agent
// writes `[diff] external = prog` into the .git/config it sees; the user's
// next `git diff` on the host must not run prog.
func TestBackendInPlaceAttackDiffExternal(t *testing.T) { eachBackend(t, inPlaceAttackDiffExternal) }

func inPlaceAttackDiffExternal(t *testing.T, b backend) {
	plantFires(t, "git config diff.external $WT/.agent/evil && echo changed >> README.md", "diff")
	a := newInPlace(t, b)
	a.plantMarker()
	a.run(`printf '[diff]\n\texternal = $WT/.agent/evil\n' >> .git/config && git config diff.external $WT/.agent/evil && echo changed >> README.md && git config --get diff.external`)
	if !strings.Contains(a.must("cat .git/config"), "external") {
		t.Fatal("the attack did not take inside")
	}
	a.finish()
}

func TestBackendInPlaceAttackRefFileWritten(t *testing.T) {
	eachBackend(t, inPlaceAttackRefFileWritten)
}

func inPlaceAttackRefFileWritten(t *testing.T, b backend) {
	a := newInPlace(t, b)
	a.run(`evil=$EVIL; echo $evil > .git/refs/heads/planted; echo $evil > .git/refs/heads/main; mkdir -p .git/refs/replace && echo $evil > .git/refs/replace/$(git rev-parse v1);
		echo $evil > .git/refs/tags/v2; { echo '# pack-refs with: peeled fully-peeled sorted '; echo "$evil refs/heads/feature"; } > .git/packed-refs; git for-each-ref`)
	if !strings.Contains(a.must("git for-each-ref refs/heads/planted"), "planted") {
		t.Fatal("the attack did not take inside")
	}
	a.finish()
}

func TestBackendInPlaceAttackObjectsDeleted(t *testing.T) {
	eachBackend(t, inPlaceAttackObjectsDeleted)
}

func inPlaceAttackObjectsDeleted(t *testing.T, b backend) {
	a := newInPlace(t, b)
	a.run(`rm -r -f $ALT/pack $ALT/info .git/objects; for d in $ALT/*; do rm -r -f $d; done; trunc $ALT/; chmod 0777 $ALT; git gc --prune=now -q; ls $ALT; true`)
	a.finish()
}

func TestBackendInPlaceAttackHooks(t *testing.T) { eachBackend(t, inPlaceAttackHooks) }

func inPlaceAttackHooks(t *testing.T, b backend) {
	a := newInPlace(t, b)
	a.plantMarker()
	hooks := "for h in " + strings.Join(hookNames, " ") + "; do cp .agent/evil .git/hooks/$h; cp .agent/evil .agent/hooks/$h; done"
	a.run("mkdir -p .agent/hooks; " + hooks + "; git config core.hooksPath $WT/.agent/hooks; ls -l .git/hooks")
	a.finish()
}

func TestBackendInPlaceAttackConfig(t *testing.T) { eachBackend(t, inPlaceAttackConfig) }

func inPlaceAttackConfig(t *testing.T, b backend) {
	a := newInPlace(t, b)
	a.plantMarker()
	a.run(`for k in core.pager core.sshCommand core.askPass credential.helper diff.x.textconv filter.x.clean filter.x.smudge core.editor gpg.program; do git config $k $WT/.agent/evil; done;
		git config filter.x.required true; git config include.path $WT/.agent/inc; printf '[core]\n\tfsmonitor = $WT/.agent/evil\n' > .agent/inc;
		git config alias.status '!$WT/.agent/evil'; echo '* filter=x diff=x' > .git/info/attributes; printf '[core]\n\tworktree = /tmp\n' >> .git/config; git config --list --show-origin | tail -5`)
	a.finish()
}

func TestBackendInPlaceAttackFsmonitor(t *testing.T) { eachBackend(t, inPlaceAttackFsmonitor) }

func inPlaceAttackFsmonitor(t *testing.T, b backend) {
	plantFires(t, "git config core.fsmonitor $WT/.agent/evil", "status")
	a := newInPlace(t, b)
	a.plantMarker()
	a.run(`git config core.fsmonitor $WT/.agent/evil && git config core.untrackedCache true && echo x > new.txt`)
	a.finish()
}

func TestBackendInPlaceAttackHEADAndIndex(t *testing.T) { eachBackend(t, inPlaceAttackHEADAndIndex) }

func inPlaceAttackHEADAndIndex(t *testing.T, b backend) {
	a := newInPlace(t, b)
	a.run(`evil=$EVIL; git reset -q --hard $evil; git checkout -q -b other; echo "ref: refs/heads/feature" > .git/HEAD; git rm -q --cached README.md; git add -A; git symbolic-ref HEAD; true`)
	a.finish()
}

func TestBackendInPlaceAttackDotGitReplaced(t *testing.T) {
	eachBackend(t, inPlaceAttackDotGitReplaced)
}

func inPlaceAttackDotGitReplaced(t *testing.T, b backend) {
	a := newInPlace(t, b)
	a.plantMarker()
	a.run(`mv .git .git-old; rm -r -f .git; ln -s /tmp .git-link; mv .git-link .git; echo 'gitdir: /tmp' > .git; ls -la; true`)
	if code, out := a.d.execIn(a.conv.ID, "sh", "-c", "cd "+a.repo+" && [ -d .git ] && [ ! -L .git ]"); code != 0 {
		t.Fatalf("the folder's .git is no longer the view's mount: %s", out)
	}
	a.finish()
}

// withSubmodule adds a submodule "sub" to repo (committed) and returns
// nothing; the repository keeps its owner.
func withSubmodule(t *testing.T, repo string) {
	t.Helper()
	other := testenv.NewRepo(t, testenv.RepoOptions{})
	testenv.Git(t, repo, "-c", "safe.directory=*", "-c", "protocol.file.allow=always", "submodule", "add", "-q", other, "sub")
	testenv.Git(t, repo, "-c", "safe.directory=*", "commit", "-q", "-m", "submodule")
}

// submodulePlant points the submodule's .git file at a git dir the agent
// makes, whose config runs the marker program as its fsmonitor.
const submodulePlant = `git init -q .agent/evilrepo && git -C .agent/evilrepo config core.fsmonitor $WT/.agent/evil && git -C .agent/evilrepo config core.worktree $WT/sub &&
	echo "gitdir: $WT/.agent/evilrepo/.git" > sub/.git; echo changed >> sub/README.md`

// TestBackendInPlaceAttackSubmoduleGitFile: the user's next `git status` on the
// host recurses into the submodule through its .git file, which lies in
// the agent's folder: the agent must not be able to redirect it.
func TestBackendInPlaceAttackSubmoduleGitFile(t *testing.T) {
	eachBackend(t, inPlaceAttackSubmoduleGitFile)
}

func inPlaceAttackSubmoduleGitFile(t *testing.T, b backend) {
	submodulePlantControl(t, func(repo string) { withSubmodule(t, repo) })
	a := newInPlaceWith(t, b, func(repo string) { withSubmodule(t, repo) })
	a.plantMarker()
	a.run(submodulePlant + "; cat sub/.git")
	a.finish()
}

// TestBackendInPlaceAttackUnpopulatedSubmodule: a submodule the user has not
// checked out is an empty directory in the agent's folder. A .git the
// agent put there would make it populated, and the user's next `git
// status` would enter it with the agent's git dir (whose fsmonitor runs):
// the directory is read-only inside.
func TestBackendInPlaceAttackUnpopulatedSubmodule(t *testing.T) {
	eachBackend(t, inPlaceAttackUnpopulatedSubmodule)
}

func inPlaceAttackUnpopulatedSubmodule(t *testing.T, b backend) {
	unpopulated := func(repo string) {
		withSubmodule(t, repo)
		testenv.Git(t, repo, "-c", "safe.directory=*", "submodule", "deinit", "-q", "-f", "sub")
	}
	submodulePlantControl(t, unpopulated)
	a := newInPlaceWith(t, b, unpopulated)
	a.plantMarker()
	if out := a.run("{ " + submodulePlant + "; } 2>&1"); !strings.Contains(out, "Read-only file system") {
		t.Errorf("the plant in the unpopulated submodule did not meet a read-only directory:\n%s", out)
	}
	a.finish()
}

// submodulePlantControl checks, on a scratch repository prepared as the
// attack's, that submodulePlant fires under a naive host git status.
func submodulePlantControl(t *testing.T, prepare func(repo string)) {
	t.Helper()
	testenv.RequireRoot(t)
	scratch := testenv.NewRepo(t, testenv.RepoOptions{})
	prepare(scratch)
	markers := mustTempDir(t, "ohd-control-")
	r := strings.NewReplacer("$WT", scratch, "$MARKERS", markers)
	out := hostRun(t, scratch, nil, "sh", "-c", "mkdir -p .agent && cat > .agent/evil <<'EOF'\n"+r.Replace(markerProgram)+"EOF\nchmod +x .agent/evil\n"+r.Replace(submodulePlant))
	out += hostRun(t, scratch, nil, "git", "status")
	if _, err := os.Stat(filepath.Join(markers, "fired")); err != nil {
		t.Fatalf("control: the plant does not fire under host git status: %v\n%s", err, out)
	}
}

// TestBackendInPlaceSubmoduleReadOnly: the user's checked-out submodule works
// inside in place for reading (the repository's status sees its change,
// log and diff run in it), and the agent changes nothing of its git dir,
// mounted read-only: staging, a config (an fsmonitor for the user's next
// status) and a hook all fail, and the host's git dir is unchanged.
func TestBackendInPlaceSubmoduleReadOnly(t *testing.T) { eachBackend(t, inPlaceSubmoduleReadOnly) }

func inPlaceSubmoduleReadOnly(t *testing.T, b backend) {
	a := newInPlaceWith(t, b, func(repo string) { withSubmodule(t, repo) })
	a.plantMarker()
	if got := a.must("echo change >> sub/README.md && git status --porcelain"); !strings.Contains(got, "M sub") {
		t.Errorf("status inside = %q, want the submodule modified", got)
	}
	if got := a.must("cd sub && git log --oneline -1 && git diff --stat"); !strings.Contains(got, "initial") || !strings.Contains(got, "README.md") {
		t.Errorf("log and diff in the submodule = %q, want its commit and the change", got)
	}
	out := a.run(`cd sub; git add README.md 2>&1; echo add=$?; git config core.fsmonitor $WT/.agent/evil 2>&1; echo config=$?; cp $WT/.agent/evil $GITDIR/modules/sub/hooks/post-commit 2>&1; echo hook=$?`)
	for _, done := range []string{"add=0", "config=0", "hook=0"} {
		if strings.Contains(out, done) {
			t.Errorf("inside, %s: the submodule's git dir is writable:\n%s", done, out)
		}
	}
	if !strings.Contains(out, "Read-only file system") {
		t.Errorf("the writes failed for another reason than a read-only mount:\n%s", out)
	}
	a.finish()
}

// TestBackendInPlaceAttackFromSubdirectory: a conversation created for a
// subdirectory of a repository gets the same git view over the
// repository's git dir; the attacks on it from there (the diff.external
// reproduction, fsmonitor, hooks, ref files, the shared objects) change
// nothing the host sees.
func TestBackendInPlaceAttackFromSubdirectory(t *testing.T) {
	eachBackend(t, inPlaceAttackFromSubdirectory)
}

func inPlaceAttackFromSubdirectory(t *testing.T, b backend) {
	a := newInPlaceAt(t, b, "sub", func(repo string) {
		testenv.WriteFile(t, filepath.Join(repo, "sub", "f.txt"), "f\n")
		testenv.Git(t, repo, "add", "sub")
		testenv.Git(t, repo, "commit", "-q", "-m", "sub")
	})
	if a.conv.Repo != a.repo || a.conv.WorkingDir != a.work {
		t.Fatalf("create for %s = %+v, want in place in its repository %s", a.work, a.conv, a.repo)
	}
	a.plantMarker()
	a.run(`printf '[diff]\n\texternal = $WT/.agent/evil\n' >> $GITDIR/config; git config core.fsmonitor $WT/.agent/evil; git config core.hooksPath $WT/.agent;
		cp .agent/evil $GITDIR/hooks/post-checkout; cp .agent/evil .agent/post-checkout; evil=$EVIL; echo $evil > $GITDIR/refs/heads/main;
		echo $evil > $GITDIR/refs/heads/planted; rm -r -f $ALT/pack; echo changed >> f.txt; git status --short; true`)
	if !strings.Contains(a.must("git config --get core.fsmonitor"), ".agent/evil") || !strings.Contains(a.must("git for-each-ref refs/heads/planted"), "planted") {
		t.Fatal("the attack did not take inside")
	}
	a.finish()
}
