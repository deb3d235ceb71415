package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/store"
)

// The attacker's tests (issue 11, acceptance 2 and 3): an agent runs any
// command in its container, as the container's user, against a repository
// owned by uid 1000 that another live conversation shares. Each attack is
// its own test. Each asserts the host is untouched: the repository's refs
// byte-identical (except what ohd writes for the attacker: its branch, its
// snapshot and kept refs), `git fsck --strict` clean, no file under the real
// git dir changed except ohd's own writes (see allowedChange), the other
// conversation's worktree and registration unchanged, both conversations
// removable afterwards, and no marker or bait file outside the worktree and
// the view touched.

// attack is one attack's world: a daemon, a repository owned by uid 1000
// (packed and loose refs, reflogs, a tag, an origin remote), a victim
// conversation with a published commit and uncommitted work, the attacker,
// and a world-writable host directory no container mounts (markers land
// there if anything of the agent's runs on the host; baits there must
// not be touched).
type attack struct {
	t         *testing.T
	b         backend
	d         *daemon
	repo      string
	gitDir    string
	victim    store.Conversation
	attacker  store.Conversation
	markerDir string
	before    hostState
	// allowed are the conversations whose own refs and registration ohd
	// may change (the attacker's; the victim's too once it is removed).
	allowed []store.Conversation
	// extra are more path prefixes under the git dir a test lets ohd
	// write (a restore's new registration).
	extra []string
	// selfDestroyed says the attack broke the attacker's own view, so its
	// work may be impossible to save: a failed `ohctl rm` must then say to
	// use --discard, and --discard must work.
	selfDestroyed bool
}

const attackOwner = 1000

// newAttack builds the world on backend b; before runs after the victim
// exists and before the attacker is created (to add more the attacker may
// go after).
func newAttack(t *testing.T, b backend, before ...func(*attack)) *attack {
	t.Helper()
	testenv.RequireRoot(t)
	a := &attack{t: t, b: b, d: b.daemon(t)}
	a.repo = testenv.NewRepo(t, testenv.RepoOptions{})
	a.gitDir = filepath.Join(a.repo, ".git")
	g := func(args ...string) string { return testenv.Git(t, a.repo, args...) }
	testenv.WriteFile(t, filepath.Join(a.repo, "src.txt"), "second\n")
	g("add", "src.txt")
	g("commit", "-q", "-m", "second")
	g("tag", "-a", "-m", "v1", "v1")
	g("branch", "feature")
	main := g("rev-parse", "main")
	g("update-ref", "refs/remotes/origin/main", main)
	g("symbolic-ref", "refs/remotes/origin/HEAD", "refs/remotes/origin/main")
	g("pack-refs", "--all")
	g("branch", "loose") // one loose ref beside packed-refs
	testenv.ChownR(t, a.repo, attackOwner, attackOwner)

	a.markerDir = mustTempDir(t, "ohd-marker-")
	if err := os.Chmod(a.markerDir, 0o777); err != nil {
		t.Fatal(err)
	}
	// Baits: one the owner may write (a symlinked reflog must not append
	// to it), one root's (nothing may chown or chmod it through a link).
	writeOwnedFile(t, filepath.Join(a.markerDir, "bait-owner"), "owner's file\n", 0o644, attackOwner)
	writeOwnedFile(t, filepath.Join(a.markerDir, "bait-root"), "root's file\n", 0o600, 0)

	a.d.ohctlJSON(&a.victim, "create", "--repo", a.repo, "--worktree")
	a.d.inside(a.victim, "echo victim > victim.txt && git add victim.txt && git -c user.name=v -c user.email=v@x commit -q -m victim && echo wip > wip.txt")
	waitHostRef(t, a.repo, "refs/heads/openhands/"+a.victim.ID, a.d.inside(a.victim, "git rev-parse HEAD"), 5*time.Second)
	tip := a.d.inside(a.victim, "git rev-parse HEAD")
	waitFor(t, 5*time.Second, "the victim's publish recorded", func() bool {
		a.victim = a.d.record(a.victim.ID)
		return a.victim.Published == tip
	})
	for _, f := range before {
		f(a)
	}

	a.d.ohctlJSON(&a.attacker, "create", "--repo", a.repo, "--worktree")
	if a.attacker.UID != attackOwner {
		t.Fatalf("attacker runs as uid %d, want %d", a.attacker.UID, attackOwner)
	}
	a.installTools()
	a.allowed = []store.Conversation{a.attacker}
	a.before = a.capture()
	return a
}

func mustTempDir(t *testing.T, prefix string) string {
	t.Helper()
	d, err := os.MkdirTemp("/tmp", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func writeOwnedFile(t *testing.T, p, content string, mode os.FileMode, uid int) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(p, uid, uid); err != nil {
		t.Fatal(err)
	}
}

// toolNames are the utilities of integration/attacktool.
var toolNames = []string{"rm", "ln", "mkdir", "cp", "cat", "ls", "chmod", "trunc"}

// installTools puts integration/attacktool into the attacker's view (the
// test image has only sh and git), at <common dir>/tools inside: outside
// the worktree, so it is neither snapshotted nor published.
func (a *attack) installTools() {
	a.t.Helper()
	installAttackTool(a.t, filepath.Join(filepath.Dir(a.attacker.Worktree), ".ohd", "git", "tools"), attackOwner, attackOwner, toolNames...)
}

// installAttackTool builds integration/attacktool (static) into dir (made
// here, with its parents), with a symlink to it for each of names, all
// owned by uid:gid.
func installAttackTool(t *testing.T, dir string, uid, gid int, names ...string) {
	t.Helper()
	bin := testenv.GoBuild(t, "./integration/attacktool", "CGO_ENABLED=0")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "attacktool"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if err := os.Symlink("attacktool", filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	testenv.ChownR(t, dir, uid, gid)
}

// sh runs a script in the attacker's worktree, inside its container, and
// returns its output whatever its exit code: many attacks are expected to
// fail in part (the real object store is read-only).
func (a *attack) sh(script string) string {
	a.t.Helper()
	_, out := a.d.execIn(a.attacker.ID, "sh", "-c", a.prelude()+script)
	return out
}

func (a *attack) prelude() string {
	return "export PATH=" + filepath.Join(a.gitDir, "tools") + ":$PATH; cd " + a.attacker.Worktree + " && "
}

// must runs a script like sh and fails the test if it fails.
func (a *attack) must(script string) string {
	a.t.Helper()
	code, out := a.d.execIn(a.attacker.ID, "sh", "-c", a.prelude()+script)
	if code != 0 {
		a.t.Fatalf("inside %q: exit %d: %s", script, code, out)
	}
	return strings.TrimSpace(out)
}

// commitAndWait makes a commit on the attacker's branch inside and waits
// until ohd has published it: everything the publisher does after the
// attack has run.
func (a *attack) commitAndWait(config ...string) string {
	a.t.Helper()
	c := ""
	for _, kv := range config {
		c += " -c " + kv
	}
	tip := a.must("git -c core.hooksPath=/dev/null -c user.name=a -c user.email=a@x" + c + " commit -q --allow-empty -m 'after the attack' && git rev-parse HEAD")
	waitHostRef(a.t, a.repo, "refs/heads/openhands/"+a.attacker.ID, lastLine(tip), 5*time.Second)
	return lastLine(tip)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// hostState is what the host sees: every ref, every file of the real git
// dir and of the victim's worktree (content hash, mode, owner; a symlink's
// target), and the marker directory.
type hostState struct {
	refs    []string
	gitDir  map[string]string
	victim  map[string]string
	markers map[string]string
}

func (a *attack) capture() hostState {
	a.t.Helper()
	return hostState{
		refs:    hostRefs(a.t, a.repo),
		gitDir:  listTree(a.t, a.gitDir),
		victim:  listTree(a.t, a.victim.Worktree),
		markers: listTree(a.t, a.markerDir),
	}
}

// listTree lists every file and symlink under root (never following one)
// with its content hash, mode and owner.
func listTree(t testing.TB, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		// An entry may go while the walk runs (a publish's quarantine
		// directory, objects/incoming-ohd-*, or a ref's lock): it is not
		// there to compare.
		st, err := os.Lstat(p)
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil {
			return err
		}
		sys := st.Sys().(*syscall.Stat_t)
		rel, _ := filepath.Rel(root, p)
		desc := fmt.Sprintf("%v %d:%d", st.Mode(), sys.Uid, sys.Gid)
		switch {
		case st.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			desc += " -> " + l
		case st.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if os.IsNotExist(err) {
				return nil
			}
			if err != nil {
				return err
			}
			h := sha256.Sum256(b)
			desc += " " + hex.EncodeToString(h[:])
		case st.IsDir():
			return nil
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatalf("list %s: %v", root, err)
	}
	return out
}

// ohdWrites reports whether rel (a path under the real git dir) is one ohd
// itself writes for conversation c (pkg/worktree: Add, Publish, saveView,
// Remove): its registration worktrees/<admin>/, its branch
// refs/heads/openhands/<id> and that branch's reflog (core.logAllRefUpdates
// is on in a non-bare repository), its snapshot and kept refs under
// refs/ohd/ (and their reflogs, should the repository log all refs).
// Objects are handled apart: added, never changed or deleted.
func ohdWrites(rel string, c store.Conversation) bool {
	// The lock of a ref ohd is updating at the moment of the capture (a
	// publish in flight) is its own write too.
	rel = strings.TrimSuffix(rel, ".lock")
	for _, p := range []string{
		"refs/heads/openhands/" + c.ID,
		"logs/refs/heads/openhands/" + c.ID,
		"refs/ohd/snapshots/" + c.ID,
		"logs/refs/ohd/snapshots/" + c.ID,
	} {
		if rel == p {
			return true
		}
	}
	for _, p := range []string{"refs/ohd/kept/" + c.ID + "/", "logs/refs/ohd/kept/" + c.ID + "/", "worktrees/" + c.AdminID + "/",
		"refs/ohd/live/" + c.ID + "/", "logs/refs/ohd/live/" + c.ID + "/", "refs/ohd/held/" + c.ID + "/", "logs/refs/ohd/held/" + c.ID + "/"} {
		if strings.HasPrefix(rel, p) {
			return true
		}
	}
	return false
}

func (a *attack) allowedChange(rel string) bool {
	for _, p := range a.extra {
		if strings.HasPrefix(rel, p) {
			return true
		}
	}
	for _, c := range a.allowed {
		if ohdWrites(rel, c) {
			return true
		}
	}
	return false
}

// ownRef reports whether a for-each-ref line is a ref ohd writes for an
// allowed conversation.
func (a *attack) ownRef(line string) bool {
	_, name, _ := strings.Cut(line, " ")
	for _, c := range a.allowed {
		if name == "refs/heads/openhands/"+c.ID || name == "refs/ohd/snapshots/"+c.ID || strings.HasPrefix(name, "refs/ohd/kept/"+c.ID+"/") ||
			strings.HasPrefix(name, "refs/ohd/live/"+c.ID+"/") || strings.HasPrefix(name, "refs/ohd/held/"+c.ID+"/") {
			return true
		}
	}
	return false
}

// packedRefsLines drops the lines of ohd's own refs from packed-refs.
func (a *attack) packedRefsLines() string {
	b, err := os.ReadFile(filepath.Join(a.gitDir, "packed-refs"))
	if err != nil && !os.IsNotExist(err) {
		a.t.Fatal(err)
	}
	var keep []string
	for _, l := range strings.Split(string(b), "\n") {
		if !a.ownRef(l) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// checkHost compares the host with a.before and runs git fsck.
func (a *attack) checkHost(stage string) {
	a.t.Helper()
	t := a.t
	now := a.capture()
	filter := func(refs []string) []string {
		var out []string
		for _, r := range refs {
			if !a.ownRef(r) {
				out = append(out, r)
			}
		}
		return out
	}
	if b, n := strings.Join(filter(a.before.refs), "\n"), strings.Join(filter(now.refs), "\n"); b != n {
		t.Errorf("%s: the host's refs changed:\nbefore:\n%s\nafter:\n%s", stage, b, n)
	}
	for rel, was := range a.before.gitDir {
		got, ok := now.gitDir[rel]
		switch {
		case rel == "packed-refs" || a.allowedChange(rel):
		case !ok:
			t.Errorf("%s: %s was deleted from the real git dir", stage, rel)
		case got != was:
			t.Errorf("%s: %s in the real git dir changed: %s -> %s", stage, rel, was, got)
		}
	}
	for rel, got := range now.gitDir {
		if _, ok := a.before.gitDir[rel]; ok || a.allowedChange(rel) || strings.HasPrefix(rel, "objects/") {
			continue
		}
		if rel == "packed-refs" {
			continue
		}
		t.Errorf("%s: new file in the real git dir: %s (%s)", stage, rel, got)
	}
	if _, had := a.before.gitDir["packed-refs"]; had {
		if !strings.Contains(a.packedRefsLines(), "refs/heads/main") {
			t.Errorf("%s: packed-refs lost refs/heads/main", stage)
		}
	}
	for rel, was := range a.before.markers {
		if got := now.markers[rel]; got != was {
			t.Errorf("%s: %s in the marker dir changed: %s -> %q", stage, rel, was, got)
		}
	}
	for rel, got := range now.markers {
		if _, ok := a.before.markers[rel]; !ok {
			b, _ := os.ReadFile(filepath.Join(a.markerDir, rel))
			t.Errorf("%s: a marker appeared on the host: %s (%s): %q", stage, rel, got, b)
		}
	}
	if out, err := testenv.GitOutput(a.repo, "-c", "safe.directory=*", "fsck", "--strict", "--no-dangling"); err != nil {
		t.Errorf("%s: git fsck --strict on the host: %v\n%s", stage, err, out)
	}
	for _, rev := range []string{"main", "v1", "feature", "loose", "origin/HEAD"} {
		if out, err := testenv.GitOutput(a.repo, "-c", "safe.directory=*", "log", "--oneline", rev, "--"); err != nil {
			t.Errorf("%s: git log %s on the host: %v %s", stage, rev, err, out)
		}
	}
}

// checkVictim asserts the victim conversation is unaffected: its worktree
// files as they were, git works inside it, its host branch is what it
// published.
func (a *attack) checkVictim() {
	a.t.Helper()
	t := a.t
	now := listTree(t, a.victim.Worktree)
	if fmt.Sprint(sortedMap(now)) != fmt.Sprint(sortedMap(a.before.victim)) {
		t.Errorf("the victim's worktree changed:\nbefore %v\nafter  %v", sortedMap(a.before.victim), sortedMap(now))
	}
	if code, out := a.d.execIn(a.victim.ID, "sh", "-c", "cd "+a.victim.Worktree+" && git status --porcelain && git log --oneline -3 && git fsck --strict --no-dangling"); code != 0 || !strings.Contains(out, "?? wip.txt") {
		t.Errorf("git inside the victim after the attack: exit %d: %s", code, out)
	}
	host, _ := testenv.GitOutput(a.repo, "-c", "safe.directory=*", "rev-parse", "refs/heads/openhands/"+a.victim.ID)
	if strings.TrimSpace(host) != a.victim.Published {
		t.Errorf("the victim's host branch = %q, want %s (what ohd published)", strings.TrimSpace(host), a.victim.Published)
	}
}

func sortedMap(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+" "+v)
	}
	sort.Strings(out)
	return out
}

// finish checks the host and the victim, removes both conversations (the
// attacker first), and checks again: the victim's work saved, no
// registration left, fsck clean.
func (a *attack) finish() {
	a.t.Helper()
	a.checkHost("after the attack")
	a.checkVictim()
	a.removeAttacker()
	a.checkHost("after removing the attacker")
	a.removeVictim()
	a.checkHost("after removing both")
}

// removeAttacker removes the attacker with `ohctl rm` (its work kept).
func (a *attack) removeAttacker() store.Conversation {
	a.t.Helper()
	out, err := a.d.ohctlErr("--json", "rm", a.attacker.ID)
	if err != nil && a.selfDestroyed && strings.Contains(err.Error(), "--discard") {
		a.t.Logf("ohctl rm of the self-destroyed attacker: %v", err)
		out, err = a.d.ohctlErr("--json", "rm", "--discard", a.attacker.ID)
	}
	if err != nil {
		a.t.Fatalf("ohctl rm attacker: %v\n%s", err, out)
	}
	var rm store.Conversation
	if err := jsonUnmarshal(out, &rm); err != nil || rm.State != store.StateDeleted {
		a.t.Fatalf("ohctl rm attacker: %v %s", err, out)
	}
	return rm
}

// removeVictim removes the victim and checks its work was saved.
func (a *attack) removeVictim() {
	a.t.Helper()
	t := a.t
	out, err := a.d.ohctlErr("--json", "rm", a.victim.ID)
	if err != nil {
		t.Fatalf("ohctl rm victim: %v\n%s", err, out)
	}
	var rm store.Conversation
	if err := jsonUnmarshal(out, &rm); err != nil || rm.Removal == nil || !rm.Removal.BranchKept || rm.Removal.SnapshotRef == "" {
		t.Fatalf("ohctl rm victim: want its branch kept and a snapshot: %v %s", err, out)
	}
	a.allowed = append(a.allowed, a.victim)
	if got := testenv.Git(t, a.repo, "-c", "safe.directory=*", "show", rm.Removal.SnapshotCommit+":wip.txt"); got != "wip" {
		t.Errorf("the victim's snapshot has wip.txt = %q", got)
	}
	if got := porcelain(t, a.repo); len(got) != 1 {
		t.Errorf("registrations after both removals: %v", got)
	}
	if _, err := os.Lstat(filepath.Dir(a.attacker.Worktree)); !os.IsNotExist(err) {
		t.Errorf("the attacker's conversation dir is still there: %v", err)
	}
}

// hostRun runs a command on the host in dir and returns its output (a
// positive control: the planted attack does fire where host git is naive).
func hostRun(t testing.TB, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(testenv.GitEnv(), env...)
	out, _ := cmd.CombinedOutput()
	return string(out)
}
