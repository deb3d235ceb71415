package integration

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
)

// Acceptance 3 of issue 11: host-side git runs nothing of the agent's.
// Each test plants a marker program that appends to $MARKERS/fired, a
// world-writable host directory no container mounts: run on the host (as
// root or the owner) it leaves the marker; run in the conversation's
// container or a sandbox it cannot (the path does not exist there). Where
// cheap, a positive control runs the same plant through the host git
// command the old code ran, to show the plant does fire.

// markerProgram is a shell script that writes a marker and passes its
// input through (so it also works as a clean/smudge filter), with shell
// builtins only (the test image has no cat).
const markerProgram = `#!/bin/sh
echo "$0 $*" >> $MARKERS/fired
while IFS= read -r l || [ -n "$l" ]; do printf '%s\n' "$l"; done
`

// plantMarker writes the marker program at $WT/.agent/evil inside.
func (a *attack) plantMarker() string {
	a.t.Helper()
	a.must(a.expand("mkdir -p .agent && cat > .agent/evil <<'EOF'\n" + markerProgram + "EOF\nchmod +x .agent/evil"))
	return filepath.Join(a.attacker.Worktree, ".agent", "evil")
}

// plantFires runs plant (a script using $WT and $MARKERS) in a scratch
// repository on the host, then the host git command the old code ran,
// and requires the marker to fire: the plant is a real attack.
func plantFires(t *testing.T, plant string, trigger ...string) {
	t.Helper()
	scratch := testenv.NewRepo(t, testenv.RepoOptions{})
	markers := mustTempDir(t, "ohd-control-")
	r := strings.NewReplacer("$WT", scratch, "$MARKERS", markers)
	script := "mkdir -p .agent && cat > .agent/evil <<'EOF'\n" + r.Replace(markerProgram) + "EOF\nchmod +x .agent/evil\n" + r.Replace(plant)
	out := hostRun(t, scratch, nil, "sh", "-c", script)
	os.Remove(filepath.Join(markers, "fired"))
	// Touch the work tree's files (as an editor does), keeping their
	// sizes: git must then read and hash them, through their filters, to
	// know whether they changed. Without it whether the trigger hashes a
	// file depends on whether the plant's writes and its index fell in
	// the same second (git's racy-clean check), and the control failed
	// now and then.
	touchWorkTree(t, scratch, time.Now().Add(2*time.Second))
	out += hostRun(t, scratch, nil, "git", trigger...)
	if _, err := os.Stat(filepath.Join(markers, "fired")); err != nil {
		t.Fatalf("control: the plant does not fire under host `git %s`: %v\n%s", strings.Join(trigger, " "), err, out)
	}
}

// touchWorkTree sets the modification time of every file under dir,
// outside .git directories, to at.
func touchWorkTree(t *testing.T, dir string, at time.Time) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && d.Name() == ".git":
			return filepath.SkipDir
		case d.Type().IsRegular():
			return os.Chtimes(p, at, at)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// nestedRepo is the reproduction: a nested repository with its
// own config, a .gitattributes, added to the worktree as a gitlink, and
// modified after (so a recursive status must look inside).
const nestedRepo = `git init -q sub && cd sub && %s && echo '* filter=x diff=x' > .gitattributes && echo data > f &&
	git add . && git -c user.name=a -c user.email=a@x commit -q -m sub && echo more >> f && cd .. && git add sub && git status --short`

func TestBackendGitViewAttackNestedRepoFilter(t *testing.T) {
	eachBackend(t, gitViewAttackNestedRepoFilter)
}

func gitViewAttackNestedRepoFilter(t *testing.T, b backend) {
	plant := strings.Replace(nestedRepo, "%s", "git config filter.x.clean $WT/.agent/evil && git config filter.x.smudge $WT/.agent/evil && git config filter.x.required true", 1)
	plantFires(t, plant, "status", "--porcelain", "--ignore-submodules=none")
	a := newAttack(t, b)
	a.plantMarker()
	a.run(plant)
	a.finish()
}

func TestBackendGitViewAttackNestedRepoFsmonitor(t *testing.T) {
	eachBackend(t, gitViewAttackNestedRepoFsmonitor)
}

func gitViewAttackNestedRepoFsmonitor(t *testing.T, b backend) {
	plant := strings.Replace(nestedRepo, "%s", "git config core.fsmonitor $WT/.agent/evil", 1)
	plantFires(t, plant, "status", "--porcelain", "--ignore-submodules=none")
	a := newAttack(t, b)
	a.plantMarker()
	a.run(plant + " ; git config core.fsmonitor $WT/.agent/evil")
	a.finish()
}

// heldRef is where ohd holds back conversation id's commit that adds a
// gitlink over a repository of the agent's (pkg/worktree, held.go).
func heldRef(id string) string { return "refs/ohd/held/" + id + "/heads/openhands/" + id }

// hookNames are the hooks a host-side git could run.
var hookNames = []string{"pre-commit", "prepare-commit-msg", "commit-msg", "post-commit", "post-checkout", "post-merge",
	"pre-auto-gc", "post-rewrite", "reference-transaction", "post-index-change", "pre-push", "push-to-checkout", "fsmonitor-watchman"}

func TestBackendGitViewAttackNestedRepoHooks(t *testing.T) {
	eachBackend(t, gitViewAttackNestedRepoHooks)
}

func gitViewAttackNestedRepoHooks(t *testing.T, b backend) {
	a := newAttack(t, b)
	a.plantMarker()
	hooks := "for h in " + strings.Join(hookNames, " ") + "; do cp $WT/.agent/evil sub/.git/hooks/$h; cp $WT/.agent/evil $WT/.agent/hooks/$h; done"
	a.run("mkdir -p .agent/hooks && " + strings.Replace(nestedRepo, "%s", "true", 1) + " && " + hooks +
		" && git config core.hooksPath $WT/.agent/hooks && git -C sub config core.hooksPath $WT/.agent/hooks")
	// The agent's own commit runs its hooks, in its container.
	a.must("git -c user.name=a -c user.email=a@x commit -q -m 'with hooks' && echo more >> sub/f")
	// The commit's gitlink sub holds the agent's repository: held back,
	// not published, while the conversation runs (held.go).
	waitHostRef(t, a.repo, heldRef(a.attacker.ID), a.must("git rev-parse HEAD"), 5*time.Second)
	a.restoreAfter()
}

func TestBackendGitViewAttackNestedRepoDiffExternal(t *testing.T) {
	eachBackend(t, gitViewAttackNestedRepoDiffExternal)
}

func gitViewAttackNestedRepoDiffExternal(t *testing.T, b backend) {
	a := newAttack(t, b)
	a.plantMarker()
	a.run(strings.Replace(nestedRepo, "%s", "git config diff.external $WT/.agent/evil && git config diff.x.textconv $WT/.agent/evil && git config core.pager $WT/.agent/evil", 1) +
		" && git config diff.external $WT/.agent/evil && git config diff.x.textconv $WT/.agent/evil && echo '* diff=x' > .gitattributes && echo changed >> README.md")
	a.finish()
}

func TestBackendGitViewAttackSubmoduleURL(t *testing.T) { eachBackend(t, gitViewAttackSubmoduleURL) }

func gitViewAttackSubmoduleURL(t *testing.T, b backend) {
	a := newAttack(t, b)
	a.plantMarker()
	a.run(strings.Replace(nestedRepo, "%s", "true", 1) + ` && printf '[submodule "sub"]\n\tpath = sub\n\turl = ext::sh -c $WT/.agent/evil\n[submodule "other"]\n\tpath = other\n\turl = file://$MARKERS\n' > .gitmodules &&
		git add .gitmodules && git config submodule.sub.update '!$WT/.agent/evil' && git config submodule.sub.url 'ext::sh -c $WT/.agent/evil' && git config protocol.ext.allow always &&
		git -c user.name=a -c user.email=a@x commit -q -m 'submodules' && echo more >> sub/f`)
	waitHostRef(t, a.repo, heldRef(a.attacker.ID), a.must("git rev-parse HEAD"), 5*time.Second)
	a.restoreAfter()
}

func TestBackendGitViewAttackWorktreeAttributesFilter(t *testing.T) {
	eachBackend(t, gitViewAttackWorktreeAttributesFilter)
}

func gitViewAttackWorktreeAttributesFilter(t *testing.T, b backend) {
	a := newAttack(t, b)
	a.plantMarker()
	a.must(a.expand(`for k in filter.x.clean filter.x.smudge diff.x.textconv diff.x.command merge.x.driver; do git config $k $WT/.agent/evil; done &&
		git config filter.x.required true && echo '* filter=x diff=x merge=x' > .gitattributes && echo '* filter=x' > $GITDIR/info/attributes &&
		git add .gitattributes && git -c user.name=a -c user.email=a@x commit -q -m attributes && echo changed >> README.md && echo new > new.txt`))
	// A long-running filter process too (it would not speak the protocol:
	// set last, so the agent's own commit above still works).
	a.run("git config filter.y.process $WT/.agent/evil && echo '*.txt filter=y' >> .gitattributes")
	waitHostRef(t, a.repo, "refs/heads/openhands/"+a.attacker.ID, a.must("git rev-parse HEAD"), 5*time.Second)
	a.restoreAfter()
}

// restoreAfter is finish with `ohctl restore` of the attacker between the
// removals, then doctor and prune: restore runs host git over the agent's
// commits (checkout, the snapshot applied), and must run none of its
// programs nor write through its links.
func (a *attack) restoreAfter() string {
	a.t.Helper()
	t := a.t
	a.checkHost("after the attack")
	a.checkVictim()
	a.removeAttacker()
	a.checkHost("after removing the attacker")
	parent := mustTempDir(t, "ohd-restore-")
	testenv.ChownR(t, parent, attackOwner, attackOwner)
	into := filepath.Join(parent, "restored")
	out, err := a.d.ohctlErr("restore", a.attacker.ID, "--into", into)
	if err != nil {
		t.Fatalf("ohctl restore: %v %s", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(into, ".git")); err == nil {
		rel, _ := filepath.Rel(a.gitDir, strings.TrimSpace(strings.TrimPrefix(string(b), "gitdir:")))
		a.extra = append(a.extra, rel+"/")
	} else {
		t.Errorf("restored worktree %s: %v", into, err)
	}
	a.checkHost("after restore")
	a.d.ohctlErr("doctor")
	a.d.ohctlErr("prune")
	a.checkHost("after doctor and prune")
	// The user is done with the restored work.
	saved := t.TempDir()
	run(t, "cp", "-a", into+"/.", saved)
	testenv.Git(t, a.repo, "-c", "safe.directory=*", "worktree", "remove", "--force", into)
	a.removeVictim()
	a.checkHost("after removing both")
	return saved
}

func TestBackendGitViewAttackSymlinksOutOfWorktree(t *testing.T) {
	eachBackend(t, gitViewAttackSymlinksOutOfWorktree)
}

func gitViewAttackSymlinksOutOfWorktree(t *testing.T, b backend) {
	a := newAttack(t, b)
	// Committed links out of the worktree (a directory, the owner's and
	// root's files, /), then in the working tree the directory link
	// replaced by a directory with a file (the snapshot records it: a
	// naive restore would write it through the link).
	a.run(`ln -s $MARKERS outdir && ln -s $MARKERS/bait-owner bait && ln -s $MARKERS/bait-root rootbait && ln -s / root && ln -s $VICTIM victim &&
		git add outdir bait rootbait root victim && git -c user.name=a -c user.email=a@x commit -q -m links &&
		rm outdir && mkdir outdir && echo pwned > outdir/pwned && ln -s $MARKERS/bait-owner uncommitted-bait && ln -s $MARKERS/new-file dangling &&
		ln -s $MARKERS/bait-root $GITDIR/objects/pack/pack-evil.pack && ln -s $MARKERS $GITDIR/refs/heads/evil && ln -s $MARKERS/bait-owner $ADMIN/index.lock; true`)
	waitHostRef(t, a.repo, "refs/heads/openhands/"+a.attacker.ID, a.must("git rev-parse HEAD"), 5*time.Second)
	// The worktree's .git, which doctor --repair rewrites, and the
	// temporary file it writes first, become links out too.
	a.run(`rm .git; ln -s $MARKERS/bait-root .git; ln -s $MARKERS/bait-owner .git.ohd-tmp`)
	a.d.ohctlErr("doctor")
	a.d.ohctlErr("doctor", "--repair")
	a.checkHost("after doctor")
	into := a.restoreAfter()
	// The restore has the work as the agent left it: the links as links,
	// the directory as a directory.
	if l, err := os.Readlink(filepath.Join(into, "bait")); err != nil || l != filepath.Join(a.markerDir, "bait-owner") {
		t.Errorf("restored bait = %q %v, want the link", l, err)
	}
	if b, err := os.ReadFile(filepath.Join(into, "outdir", "pwned")); err != nil || string(b) != "pwned\n" {
		t.Errorf("restored outdir/pwned = %q %v", b, err)
	}
	if st, err := os.Lstat(filepath.Join(into, "outdir")); err != nil || !st.IsDir() {
		t.Errorf("restored outdir is not a directory: %v", err)
	}
}

// The broker directories of other conversations (token, socket, key file)
// are never reachable by what reads the agent's files: links to them in
// the view and the worktree lead nowhere, the sandbox mounts no runtime
// path, and no byte of another conversation's token reaches the host's
// objects.
func TestBackendGitViewAttackBrokerDirUnreachable(t *testing.T) {
	eachBackend(t, gitViewAttackBrokerDirUnreachable)
}

func gitViewAttackBrokerDirUnreachable(t *testing.T, b backend) {
	a := newAttack(t, b)
	runDir := a.d.dirs.Run
	vdir := filepath.Join(runDir, "conversations", a.victim.ID)
	token, err := os.ReadFile(filepath.Join(vdir, "token"))
	if err != nil || len(strings.TrimSpace(string(token))) < 16 {
		t.Fatalf("the victim's token file: %v (%d bytes)", err, len(token))
	}
	a.commitAndWait()
	script := `ln -s $VDIR/token stolen-token; ln -s $VDIR stolen-dir; ln -s $RUN rundir; cat stolen-token; ls $VDIR;
		ln -s $VDIR/token $GITDIR/refs/heads/stolen; ln -s $VDIR/token $GITDIR/refs/tags/stolen; mkdir -p $GITDIR/refs/ohd; ln -s $VDIR/token $GITDIR/refs/stash;
		echo $VDIR >> $GITDIR/objects/info/alternates; ln -s $VDIR $GITDIR/objects/stolen; ln -s $VDIR/token $GITDIR/info/attributes;
		git for-each-ref; true`
	a.run(strings.NewReplacer("$VDIR", vdir, "$RUN", runDir).Replace(script))
	// The attacker's own container mounts its broker dir only.
	for dst, m := range b.workload(t, a.attacker.ContainerID).Mounts {
		if strings.HasPrefix(m.Source, runDir) && !strings.HasPrefix(m.Source, filepath.Join(runDir, "conversations", a.attacker.ID)) {
			t.Errorf("the attacker's container mounts %s at %s", m.Source, dst)
		}
	}
	// The conversation's own branch ref becomes a link too (after a
	// commit): the publisher must not follow it.
	a.must("git -c user.name=a -c user.email=a@x commit -q --allow-empty -m last && ln -s -f " + filepath.Join(vdir, "token") + " $(git rev-parse --git-path refs/heads/openhands/" + a.attacker.ID + ")")
	published := a.d.record(a.attacker.ID).Published
	a.checkHost("after the attack")
	a.checkVictim()
	// The link is not followed: the view's branch is then what git in the
	// view sees too, its packed value (the start commit), or unchanged.
	if got := a.d.record(a.attacker.ID).Published; got != published && got != a.attacker.StartCommit {
		t.Errorf("ohd published %q through a symlinked branch ref (was %s)", got, published)
	}

	// Its container dies behind ohd's back: the removal saves its work
	// through a sandbox container, whose mounts are watched while it runs.
	b.crash(t, a.attacker.ContainerID)
	seen := make(chan workload, 1)
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				close(seen)
				return
			default:
			}
			if w, ok := b.sandbox(t, a.attacker.ID); ok {
				seen <- w
				<-stop
				close(seen)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	rm := a.removeAttacker()
	close(stop)
	sb, ok := <-seen
	if !ok {
		t.Fatal("the removal ran no sandbox container (or it was gone before it could be inspected)")
	}
	for dst, m := range sb.Mounts {
		if strings.HasPrefix(m.Source, runDir) || strings.Contains(m.Source, "/conversations/") || strings.HasPrefix(dst, runDir) || strings.Contains(dst, "/conversations/") {
			t.Errorf("the sandbox mounts %s at %s", m.Source, dst)
		}
	}
	// Docker's network mode none; a pod with no DNS and a deny-all
	// policy (whether the plugin enforces it: TestBackendEgressIsolationClaim).
	if !sb.NoNetwork {
		t.Error("the sandbox has a network")
	}
	t.Logf("sandbox mounts: %v; removal: %s", sb.Mounts, rm.Removal.Message)
	a.checkHost("after removing the attacker")
	all := testenv.Git(t, a.repo, "-c", "safe.directory=*", "cat-file", "--batch-all-objects", "--batch")
	if strings.Contains(all, strings.TrimSpace(string(token))) {
		t.Error("the victim's token is in the host's objects")
	}
	if refs := strings.Join(hostRefs(t, a.repo), "\n"); strings.Contains(refs, "stolen") {
		t.Errorf("a stolen ref reached the host:\n%s", refs)
	}
	a.removeVictim()
	a.checkHost("after removing both")
}

// TestBackendGitViewAttackTreeWithDotGit: the agent's branch carries a tree with
// a .git directory (a post-checkout hook in it, for whoever checks the
// branch out on the host, as restore does). Git's validation on import
// refuses it: it never reaches the host's objects, the host branch stays
// where it was, and the refusal is recorded.
func TestBackendGitViewAttackTreeWithDotGit(t *testing.T) {
	eachBackend(t, gitViewAttackTreeWithDotGit)
}

func gitViewAttackTreeWithDotGit(t *testing.T, b backend) {
	a := newAttack(t, b)
	a.plantMarker()
	published := a.commitAndWait()
	evil := lastLine(a.must(`blob=$(git hash-object -w .agent/evil) && hook=$(printf '100755 blob %s\tpost-checkout\n' $blob | git mktree) &&
		hooks=$(printf '040000 tree %s\thooks\n' $hook | git mktree) && top=$(printf '040000 tree %s\t.git\n100644 blob %s\tok.txt\n' $hooks $blob | git mktree) &&
		c=$(git -c user.name=a -c user.email=a@x commit-tree -p HEAD -m 'a .git inside' $top) && git update-ref HEAD $c && echo $c`))
	waitFor(t, 5*time.Second, "the refusal recorded", func() bool { return a.d.record(a.attacker.ID).PublishError != "" })
	rec := a.d.record(a.attacker.ID)
	if rec.Published != published || !strings.Contains(rec.PublishError, "hasDotgit") {
		t.Errorf("published %s (want %s), error %q (want git's hasDotgit)", rec.Published, published, rec.PublishError)
	}
	if _, err := testenv.GitOutput(a.repo, "-c", "safe.directory=*", "cat-file", "-e", evil); err == nil {
		t.Errorf("the commit with a .git tree reached the host's objects")
	}
	a.selfDestroyed = true // its branch cannot be saved: the removal says so
	a.finish()
}
