package integration

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/store"
)

// Acceptance 2 of issue 11: what an agent does to the git dir it sees
// changes nothing the host sees. Inside the container the repository's
// common dir path is the conversation's own view; the real object store
// is mounted read-only beside it (its alternate).

// expand replaces $GITDIR (the common dir's path, the view inside),
// $ADMIN (the attacker's admin dir inside), $ALT (the real object store's
// read-only mount), $WT (the attacker's worktree), $VICTIM and $VADMIN
// (the victim's worktree and admin id), $MARKERS (the host's marker dir),
// $EVIL (a commit the agent makes) in script.
func (a *attack) expand(script string) string {
	r := strings.NewReplacer(
		"$GITDIR", a.gitDir,
		"$ADMIN", filepath.Join(a.gitDir, "worktrees", a.attacker.AdminID),
		"$ALT", filepath.Join(filepath.Dir(a.attacker.Worktree), ".ohd", "objects"),
		"$WT", a.attacker.Worktree,
		"$VICTIM", a.victim.Worktree,
		"$VADMIN", a.victim.AdminID,
		"$MARKERS", a.markerDir,
		"$EVIL", "$(git -c user.name=e -c user.email=e@x commit-tree -m EVIL HEAD^{tree})",
	)
	return r.Replace(script)
}

func (a *attack) run(script string) string {
	a.t.Helper()
	out := a.sh(a.expand(script))
	a.t.Logf("attack output: %s", tail(out, 2000))
	return out
}

func TestBackendGitViewAttackObjectsTruncated(t *testing.T) {
	eachBackend(t, gitViewAttackObjectsTruncated)
}

func gitViewAttackObjectsTruncated(t *testing.T, b backend) {
	a := newAttack(t, b)
	a.commitAndWait() // the view now holds objects of its own
	a.run(`trunc $GITDIR/objects $ALT/; chmod 0777 $ALT $ALT/pack; git count-objects -v; git fsck; true`)
	// It did truncate what it could: the view's own objects.
	empty := 0
	for rel, desc := range listTree(t, filepath.Join(filepath.Dir(a.attacker.Worktree), ".ohd", "git", "objects")) {
		if strings.HasSuffix(desc, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855") && !strings.HasPrefix(rel, "info") {
			empty++
		}
	}
	if empty == 0 {
		t.Fatal("the attack did not take: no object of the view was truncated")
	}
	// The agent broke its own view: saving its work may fail (with a
	// message that says what to do); --discard must then work.
	a.selfDestroyed = true
	a.finish()
}

func TestBackendGitViewAttackObjectsDeleted(t *testing.T) {
	eachBackend(t, gitViewAttackObjectsDeleted)
}

func gitViewAttackObjectsDeleted(t *testing.T, b backend) {
	a := newAttack(t, b)
	a.commitAndWait()
	// The agent's own object store goes too (with its alternates file);
	// the real one is read-only.
	a.run(`rm -r -f $ALT/pack $ALT/info $GITDIR/objects; for d in $ALT/*; do rm -r -f $d; done; ls $ALT; git log --oneline -1; true`)
	a.selfDestroyed = true
	a.finish()
}

func TestBackendGitViewAttackRepackAll(t *testing.T) { eachBackend(t, gitViewAttackRepackAll) }

func gitViewAttackRepackAll(t *testing.T, b backend) {
	a := newAttack(t, b)
	a.commitAndWait()
	a.run(`git repack -a -d -q && git prune --expire=now && git count-objects -v`)
	a.commitAndWait()
	a.finish()
}

func TestBackendGitViewAttackGCPruneNow(t *testing.T) { eachBackend(t, gitViewAttackGCPruneNow) }

func gitViewAttackGCPruneNow(t *testing.T, b backend) {
	a := newAttack(t, b)
	a.commitAndWait()
	a.run(`git gc --prune=now --quiet && git -c gc.worktreePruneExpire=now worktree prune && git reflog expire --expire=now --all && git gc --prune=now --aggressive --quiet`)
	a.commitAndWait()
	a.finish()
}

func TestBackendGitViewAttackMainRewritten(t *testing.T) { eachBackend(t, gitViewAttackMainRewritten) }

func gitViewAttackMainRewritten(t *testing.T, b backend) {
	a := newAttack(t, b)
	a.run(`evil=$EVIL; git update-ref refs/heads/main $evil; git update-ref refs/heads/feature $evil; git tag -f v1 $evil; git update-ref refs/heads/loose $evil;
		echo $evil > $GITDIR/refs/heads/main; { echo '# pack-refs with: peeled fully-peeled sorted '; echo "$evil refs/heads/main"; } > $GITDIR/packed-refs;
		git update-ref refs/remotes/origin/main $evil; git show -s --format=%s main`)
	if out := a.sh("git show -s --format=%s main"); !strings.Contains(out, "EVIL") {
		t.Fatalf("the attack did not take inside: main is %q", out)
	}
	a.commitAndWait()
	a.finish()
}

func TestBackendGitViewAttackOtherConversationsRefsDeleted(t *testing.T) {
	eachBackend(t, gitViewAttackOtherConversationsRefsDeleted)
}

func gitViewAttackOtherConversationsRefsDeleted(t *testing.T, b backend) {
	var ended store.Conversation
	a := newAttack(t, b, func(a *attack) {
		// A conversation that ended with uncommitted work: its snapshot
		// and branch are on the host.
		a.d.ohctlJSON(&ended, "create", "--repo", a.repo, "--worktree")
		a.d.inside(ended, "echo unsaved > unsaved.txt")
		var rm store.Conversation
		a.d.ohctlJSON(&rm, "rm", ended.ID)
		if rm.Removal == nil || rm.Removal.SnapshotRef == "" {
			t.Fatalf("the ended conversation has no snapshot: %+v", rm.Removal)
		}
	})
	script := `evil=$EVIL
		for r in refs/heads/openhands/%[1]s refs/ohd/snapshots/%[2]s refs/heads/openhands/%[2]s refs/ohd/snapshots/%[1]s; do
			git update-ref -d $r; rm -f $GITDIR/$r; git update-ref $r $evil; done
		git pack-refs --all; git reflog expire --expire=now --all; git gc --prune=now --quiet; git for-each-ref`
	out := a.run(fmt.Sprintf(script, a.victim.ID, ended.ID))
	if !strings.Contains(out, "refs/ohd/snapshots/"+ended.ID) {
		t.Fatalf("the attack did not take inside: %s", out)
	}
	a.commitAndWait()
	a.checkHost("after the attack")
	a.checkVictim()
	rm := a.removeAttacker()
	// What the agent made under other conversations' names is kept, if at
	// all, under the attacker's own prefix.
	for _, k := range rm.Removal.Kept {
		if !strings.HasPrefix(k, "refs/ohd/kept/"+a.attacker.ID+"/") {
			t.Errorf("kept outside the attacker's prefix: %s", k)
		}
	}
	a.checkHost("after removing the attacker")
	if got := testenv.Git(t, a.repo, "-c", "safe.directory=*", "show", "refs/ohd/snapshots/"+ended.ID+":unsaved.txt"); got != "unsaved" {
		t.Errorf("the ended conversation's snapshot has unsaved.txt = %q", got)
	}
	a.removeVictim()
	a.checkHost("after removing both")
}

func TestBackendGitViewAttackReplaceRefs(t *testing.T) { eachBackend(t, gitViewAttackReplaceRefs) }

func gitViewAttackReplaceRefs(t *testing.T, b backend) {
	a := newAttack(t, b)
	a.run(`evil=$EVIL; git replace -f $(git rev-parse main) $evil; git replace -f $(git rev-parse HEAD) $evil; git replace -f $(git rev-parse v1^{commit}) $evil; git show -s --format=%s main`)
	if out := a.sh("git show -s --format=%s main"); !strings.Contains(out, "EVIL") {
		t.Fatalf("the replace ref did not take inside: %q", out)
	}
	tip := a.commitAndWait()
	for _, rev := range []string{"main", "v1^{commit}", tip + "^"} {
		if got := testenv.Git(t, a.repo, "-c", "safe.directory=*", "show", "-s", "--format=%s", rev); got == "EVIL" {
			t.Errorf("host git show %s shows the agent's replacement", rev)
		}
	}
	a.finish()
	if out := testenv.Git(t, a.repo, "-c", "safe.directory=*", "for-each-ref", "refs/replace/"); out != "" {
		t.Errorf("refs/replace on the host: %s", out)
	}
}

func TestBackendGitViewAttackOriginHEAD(t *testing.T) { eachBackend(t, gitViewAttackOriginHEAD) }

func gitViewAttackOriginHEAD(t *testing.T, b backend) {
	a := newAttack(t, b)
	a.run(`evil=$EVIL; git update-ref refs/remotes/origin/evil $evil; git symbolic-ref refs/remotes/origin/HEAD refs/remotes/origin/evil; git update-ref refs/remotes/origin/main $evil; git rev-parse origin/HEAD`)
	a.commitAndWait()
	a.checkHost("after the attack")
	// The next conversation starts where the host's origin/HEAD says.
	want := testenv.Git(t, a.repo, "-c", "safe.directory=*", "rev-parse", "origin/HEAD")
	var next store.Conversation
	a.d.ohctlJSON(&next, "create", "--repo", a.repo, "--worktree")
	if next.StartCommit != want {
		t.Errorf("the next conversation starts at %s, want the host's origin/HEAD %s", next.StartCommit, want)
	}
	if out := a.d.inside(next, "git rev-parse HEAD origin/HEAD && git show -s --format=%s HEAD"); strings.Contains(out, "EVIL") {
		t.Errorf("the next conversation sees the agent's commit: %s", out)
	}
	a.allowed = append(a.allowed, next)
	a.d.ohctl("rm", "--discard", next.ID)
	a.finish()
}

func TestBackendGitViewAttackReflogsDeleted(t *testing.T) {
	eachBackend(t, gitViewAttackReflogsDeleted)
}

func gitViewAttackReflogsDeleted(t *testing.T, b backend) {
	a := newAttack(t, b)
	a.commitAndWait()
	a.run(`git reflog expire --expire=now --all; rm -rf $GITDIR/logs $ADMIN/logs; ls $GITDIR`)
	a.commitAndWait()
	a.finish()
}

func TestBackendGitViewAttackReflogSymlinks(t *testing.T) {
	eachBackend(t, gitViewAttackReflogSymlinks)
}

func gitViewAttackReflogSymlinks(t *testing.T, b backend) {
	a := newAttack(t, b)
	a.commitAndWait()
	bait := filepath.Join(a.markerDir, "bait-owner")
	script := `for l in logs/HEAD logs/refs/heads/main logs/refs/heads/openhands/%[1]s logs/refs/ohd/snapshots/%[1]s worktrees/%[2]s/logs/HEAD; do
			mkdir -p $GITDIR/$(dirname $l); rm -f $GITDIR/$l; ln -s %[3]s $GITDIR/$l; done; ls $GITDIR/logs $GITDIR/logs/refs/heads $ADMIN/logs`
	a.run(fmt.Sprintf(script, a.attacker.ID, a.attacker.AdminID, bait))
	// The agent's git cannot follow the links to the host file either (it
	// does not exist in the container); with reflogs off it still commits.
	a.commitAndWait("core.logAllRefUpdates=false")
	a.must("echo wip > wip.txt")
	a.finish()
}

func TestBackendGitViewAttackAdminGitdirToOtherWorktree(t *testing.T) {
	eachBackend(t, gitViewAttackAdminGitdirToOtherWorktree)
}

func gitViewAttackAdminGitdirToOtherWorktree(t *testing.T, b backend) {
	a := newAttack(t, b)
	a.run(`echo $VICTIM/.git > $ADMIN/gitdir; mkdir -p $GITDIR/worktrees/$VADMIN && echo $VICTIM/.git > $GITDIR/worktrees/$VADMIN/gitdir &&
		echo ../.. > $GITDIR/worktrees/$VADMIN/commondir && cp $ADMIN/HEAD $GITDIR/worktrees/$VADMIN/HEAD; git worktree list`)
	a.commitAndWait()
	a.must("echo wip > wip.txt")
	a.finish()
}

func TestBackendGitViewAttackDotGitRedirected(t *testing.T) {
	eachBackend(t, gitViewAttackDotGitRedirected)
}

func gitViewAttackDotGitRedirected(t *testing.T, b backend) {
	a := newAttack(t, b)
	a.commitAndWait()
	// The .git file is read-only inside (package mountplan): the write fails,
	// and what follows must hold either way.
	a.run(`mkdir -p $GITDIR/worktrees/$VADMIN && cp $ADMIN/HEAD $ADMIN/commondir $GITDIR/worktrees/$VADMIN/ && echo "gitdir: $GITDIR/worktrees/$VADMIN" > .git; echo wip > wip.txt; git status --short`)
	a.d.ohctlErr("doctor")
	a.checkHost("after doctor")
	a.d.ohctlErr("doctor", "--repair")
	a.finish()
}

func TestBackendGitViewAttackDotGitSymlink(t *testing.T) { eachBackend(t, gitViewAttackDotGitSymlink) }

func gitViewAttackDotGitSymlink(t *testing.T, b backend) {
	a := newAttack(t, b)
	a.commitAndWait()
	a.run(`rm .git && ln -s $VICTIM/.git .git; echo wip > wip.txt; ls -la .git`)
	a.d.ohctlErr("doctor")
	a.checkHost("after doctor")
	a.finish()
}

// TestBackendGitViewAttackDotGitRedirectedStopped is the redirected .git file
// with the attacker's container gone (it crashed, or was stopped): its
// removal then runs in a sandbox container, which must start whatever the
// agent left in its worktree's .git.
func TestBackendGitViewAttackDotGitRedirectedStopped(t *testing.T) {
	eachBackend(t, gitViewAttackDotGitRedirectedStopped)
}

func gitViewAttackDotGitRedirectedStopped(t *testing.T, b backend) {
	a := newAttack(t, b)
	a.commitAndWait()
	a.run(`echo "gitdir: $GITDIR/worktrees/$VADMIN" > .git; echo wip > wip.txt`)
	b.crash(t, a.attacker.ContainerID)
	a.checkHost("after the attack")
	a.checkVictim()
	rm := a.removeAttacker()
	if rm.Removal == nil || rm.Removal.SnapshotRef == "" {
		t.Errorf("the attacker's uncommitted work was not saved: %+v", rm.Removal)
	}
	a.checkHost("after removing the attacker")
	a.removeVictim()
	a.checkHost("after removing both")
}

// TestBackendGitViewAttackEmptyNestedRepo: a nested repository without a commit
// (`git init sub`, as project generators do) must not stop the removal
// from saving the rest of the work, and its files are saved too (as files:
// its .git, whose config the agent wrote, is never read as content).
func TestBackendGitViewAttackEmptyNestedRepo(t *testing.T) {
	eachBackend(t, gitViewAttackEmptyNestedRepo)
}

func gitViewAttackEmptyNestedRepo(t *testing.T, b backend) {
	a := newAttack(t, b)
	a.must("git init -q sub && echo inner > sub/inner.txt && echo wip > wip.txt")
	rm := a.removeAttacker()
	if rm.Removal == nil || rm.Removal.SnapshotRef == "" {
		t.Fatalf("no snapshot: %+v", rm.Removal)
	}
	for path, want := range map[string]string{"wip.txt": "wip", "sub/inner.txt": "inner"} {
		if got := testenv.Git(t, a.repo, "-c", "safe.directory=*", "show", rm.Removal.SnapshotCommit+":"+path); got != want {
			t.Errorf("the snapshot has %s = %q, want %q", path, got, want)
		}
	}
	if got := testenv.Git(t, a.repo, "-c", "safe.directory=*", "ls-tree", "-r", "--name-only", rm.Removal.SnapshotCommit, "sub"); strings.Contains(got, ".git/") {
		t.Errorf("the snapshot holds the nested .git: %s", got)
	}
	a.checkHost("after removing the attacker")
	a.removeVictim()
	a.checkHost("after removing both")
}
