package integration

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/store"
)

// Issue 26, acceptance 1: the user's git never runs what the agent wrote.
// Each case below is an attack a hostile agent makes from inside its
// container on the directories it can write; then the user's own git, on
// the host, as the repository's owner, with git's default configuration
// (hostUser), runs `git status`, `git diff` and `git log -p` in the
// repository's root and in the planted directory, and an editor-style
// scan (every directory to depth 3 that `git rev-parse --git-dir` opens)
// does the same: during the conversation, after an ohd restart, after
// `ohctl rm`, and after another restart. Every program the agent plants
// writes to a root-owned directory no container mounts (markerBox):
// nothing may be written there. Each case also runs once on the host
// without ohd (the control: the same plant made by the repository's own
// uid, which is what an agent was before the boundary) and must fire
// there, and each planted program is run once by hand on the host after
// the first stage, so "nothing ran" is never vacuous.
//
// Modes: I in place (the agent works in the user's folder), W a linked
// worktree, P a plain folder holding the user's repository proj. A case's
// steps use $T (the tree the agent works in: the folder, the worktree,
// the plain folder), $R (the repository's work tree in it: $T, or
// $T/proj in a plain folder), $A ($T/.agent, the agent's own directory)
// and $EVIL (the case's program, $A/prog-<case>). A step may fail inside
// the container (EBUSY: a pinned directory; EROFS: a read-only one): the
// attack was held there, and the report says which step.

// hostGitCase is one attack.
type hostGitCase struct {
	name string
	// modes is the set of modes (I, W, P) the case applies to.
	modes string
	// group names a conversation of its own in the mode, for a plant
	// that conflicts with another's (there is one .git at a plain
	// folder's root) or would hide it (a rewritten worktree .git sends
	// the user's git at the root elsewhere).
	group string
	// base is "R" or "T": what dir is relative to.
	base string
	// dir is the planted directory, where the user runs git too.
	dir   string
	steps []string
	// merge: the user merges the agent's branch before running git (the
	// agent's commit carries the attack).
	merge bool
}

// gitfileSteps plants a .git gitfile in dir pointing at a repository the
// agent made in $A.
func gitfileSteps(name, dir string) []string {
	return []string{"mkrepo $A/g-" + name, "mkdir -p " + dir + " && printf 'gitdir: %s\\n' $A/g-" + name + "/.git > " + dir + "/.git"}
}

// gitlinkSteps plants a .git symlink in dir to a git dir the agent made.
func gitlinkSteps(name, dir string) []string {
	return []string{"mkrepo $A/g-" + name, "mkdir -p " + dir + " && ln -s $A/g-" + name + "/.git " + dir + "/.git"}
}

// bareSteps fill dir (which exists) as an implicit bare repository whose
// config makes `git log` run $EVIL: log.showSignature and gpg.program,
// and a commit whose gpgsig header gives git a signature to check.
func bareSteps(dir string) []string {
	return []string{
		"G init -q --bare " + dir,
		"G --git-dir=" + dir + " config log.showSignature true && G --git-dir=" + dir + " config gpg.program $EVIL",
		`t=$(G --git-dir=` + dir + ` mktree </dev/null) && c=$(printf 'tree %s\nauthor a <a@x> 1 +0000\ncommitter a <a@x> 1 +0000\ngpgsig -----BEGIN PGP SIGNATURE-----\n \n AAAA\n -----END PGP SIGNATURE-----\n\nsigned\n' $t | G --git-dir=` + dir + ` hash-object -t commit -w --stdin) && G --git-dir=` + dir + ` update-ref refs/heads/main $c`,
	}
}

var hostGitCases = []hostGitCase{
	// A checked-out submodule's directory moved away and replaced (in a
	// worktree submodules are not checked out: there it is the empty
	// gitlink directory).
	{name: "submodule-replaced", modes: "IWP", base: "R", dir: "sub", steps: []string{"mv $R/sub $R/sub-moved", "mkrepo $R/sub"}},
	// The directory above a not-checked-out submodule moved away.
	{name: "vendor-moved", modes: "IWP", base: "R", dir: "vendor/lib", steps: []string{"mv $R/vendor $R/vendor-moved", "mkrepo $R/vendor/lib"}},
	// git init in a not-checked-out submodule's directory.
	{name: "submodule-init", modes: "IWP", base: "R", dir: "ext/mod", steps: []string{"mkrepo $R/ext/mod"}},
	// .git in one of the user's tracked directories.
	{name: "dotgit-dir-tracked", modes: "IWP", base: "R", dir: "docs", steps: []string{"mkrepo $R/docs"}},
	{name: "dotgit-file-tracked", modes: "IWP", base: "R", dir: "src", steps: gitfileSteps("dotgit-file-tracked", "$R/src")},
	{name: "dotgit-link-tracked", modes: "IWP", base: "R", dir: "lib", steps: gitlinkSteps("dotgit-link-tracked", "$R/lib")},
	// .git in a directory the agent made.
	{name: "dotgit-dir-agentdir", modes: "IWP", base: "R", dir: "made-dir", steps: []string{"mkrepo $R/made-dir"}},
	{name: "dotgit-file-agentdir", modes: "IWP", base: "R", dir: "made-file", steps: gitfileSteps("dotgit-file-agentdir", "$R/made-file")},
	{name: "dotgit-link-agentdir", modes: "IWP", base: "R", dir: "made-link", steps: gitlinkSteps("dotgit-link-agentdir", "$R/made-link")},
	// .git at a plain folder's root (one at a time: each its own
	// conversation) and in its subfolders.
	{name: "dotgit-dir-plainroot", modes: "P", base: "T", dir: ".", steps: []string{"mkrepo $T"}},
	{name: "dotgit-file-plainroot", modes: "P", group: "root-file", base: "T", dir: ".", steps: gitfileSteps("dotgit-file-plainroot", "$T")},
	{name: "dotgit-link-plainroot", modes: "P", group: "root-link", base: "T", dir: ".", steps: gitlinkSteps("dotgit-link-plainroot", "$T")},
	{name: "dotgit-dir-plainsub", modes: "P", base: "T", dir: "folder-dir", steps: []string{"mkrepo $T/folder-dir"}},
	{name: "dotgit-file-plainsub", modes: "P", base: "T", dir: "folder-file", steps: gitfileSteps("dotgit-file-plainsub", "$T/folder-file")},
	{name: "dotgit-link-plainsub", modes: "P", base: "T", dir: "folder-link", steps: gitlinkSteps("dotgit-link-plainsub", "$T/folder-link")},
	// The worktree's own .git rewritten to a git dir of the agent's.
	{name: "worktree-dotgit-rewritten", modes: "W", group: "rewrite", base: "T", dir: ".", steps: []string{"mkrepo $A/g-worktree-dotgit-rewritten", "printf 'gitdir: %s\\n' $A/g-worktree-dotgit-rewritten/.git > $T/.git"}},
	// An implicit bare repository in a directory the user owns (lent to
	// the agent's uid while the conversation lives, gitboundary.Borrow:
	// the user's git, with git's default config, refuses it).
	{name: "implicit-bare", modes: "IWP", base: "R", dir: "notes", steps: bareSteps("$R/notes")},
	// The same at a plain folder's root, which the user owns: the user's
	// git anywhere in the folder outside a repository finds it.
	{name: "implicit-bare-plainroot", modes: "P", group: "root-bare", base: "T", dir: ".", steps: bareSteps("$T")},
	// An implicit bare repository in a directory the agent made: git's
	// ownership check covers it.
	{name: "implicit-bare-agentdir", modes: "IWP", base: "R", dir: "made-bare", steps: append([]string{"mkdir -p $R/made-bare"}, bareSteps("$R/made-bare")...)},
	// A nested submodule (sub/inner, a submodule of the submodule)
	// moved away and replaced.
	{name: "nested-submodule-replaced", modes: "IP", base: "R", dir: "sub/inner", steps: []string{"mv $R/sub/inner $R/sub/inner-moved", "mkrepo $R/sub/inner"}},
	// A gitlink the agent commits whose directory holds its own
	// repository; the user merges the agent's branch in the folder. (In a
	// worktree the gitlink's directory is in the worktree, not in the
	// user's checkout, where the merge leaves it empty; in a plain folder
	// the agent cannot commit to the user's repository.)
	{name: "gitlink-merged", modes: "I", base: "R", dir: "gl", merge: true, steps: []string{"mkrepo $R/gl", "cd $R && G add gl && G commit -q -m 'the agent adds gl'"}},
}

// hostGitWorld is one tree the agent attacks: for the suite, one
// conversation; for a control, a copy on the host with no ohd.
type hostGitWorld struct {
	mode  byte
	group string
	tree  string // $T
	repo  string // $R
	main  string // the user's repository (in W: the one the worktree was cut from)
	roots []string
	cases []hostGitCase
	conv  store.Conversation
	// mergeRef is the agent's branch as the user's git names it.
	mergeRef string
	plant    map[string]string // case -> the plant's output
}

// tag names the case's program and marker: unique among worlds.
func (w *hostGitWorld) tag(c hostGitCase) string { return string(w.mode) + "-" + c.name }

func (w *hostGitWorld) agentDir() string { return filepath.Join(w.tree, ".agent") }

func (w *hostGitWorld) evil(c hostGitCase) string {
	return filepath.Join(w.agentDir(), "prog-"+c.name)
}

func (w *hostGitWorld) expand(s string, c hostGitCase) string {
	return strings.NewReplacer("$EVIL", w.evil(c), "$A", w.agentDir(), "$T", w.tree, "$R", w.repo).Replace(s)
}

// planted is the case's directory on the host.
func (w *hostGitWorld) planted(c hostGitCase) string {
	base := w.repo
	if c.base == "T" {
		base = w.tree
	}
	return filepath.Clean(filepath.Join(base, c.dir))
}

// buildUserRepo makes the user's repository at dir (owned by root until
// the caller chowns it): tracked directories docs/, src/, lib/, notes/; a
// checked-out submodule sub, with its own submodule inner checked out
// too; submodules vendor/lib and ext/mod that are
// not checked out (an empty directory for each gitlink, as a clone
// without --recurse-submodules leaves them).
func buildUserRepo(t *testing.T, dir string) {
	t.Helper()
	srcs := testenv.TempDir(t)
	src, inner := filepath.Join(srcs, "subsrc"), filepath.Join(srcs, "innersrc")
	testenv.InitRepo(t, inner, "main")
	testenv.InitRepo(t, src, "main")
	testenv.Git(t, src, "-c", "protocol.file.allow=always", "submodule", "add", "-q", inner, "inner")
	testenv.Git(t, src, "commit", "-q", "-m", "a nested submodule")
	defer testenv.ChownR(t, srcs, attackOwner, attackOwner)
	testenv.InitRepo(t, dir, "main")
	g := func(args ...string) string { return testenv.Git(t, dir, args...) }
	for _, d := range []string{"docs", "src", "lib", "notes"} {
		testenv.WriteFile(t, filepath.Join(dir, d, "file.txt"), d+"\n")
	}
	g("add", ".")
	g("commit", "-q", "-m", "tracked directories")
	for _, s := range []string{"sub", "vendor/lib", "ext/mod"} {
		g("-c", "protocol.file.allow=always", "submodule", "add", "-q", src, s)
	}
	g("commit", "-q", "-m", "submodules")
	g("-c", "protocol.file.allow=always", "submodule", "update", "-q", "--init", "--recursive", "sub")
	for _, s := range []string{"vendor/lib", "ext/mod"} {
		g("submodule", "deinit", "-q", "-f", s)
		if err := os.RemoveAll(filepath.Join(dir, ".git", "modules", s)); err != nil {
			t.Fatal(err)
		}
	}
}

// casesOf returns the cases of mode, by group.
func casesOf(mode byte) map[string][]hostGitCase {
	out := map[string][]hostGitCase{}
	for _, c := range hostGitCases {
		if strings.IndexByte(c.modes, mode) >= 0 {
			out[c.group] = append(out[c.group], c)
		}
	}
	return out
}

// newHostGitTree builds a mode's tree on the host, owned by uid 1000, and
// returns the directory a conversation is created for (the repository or
// the plain folder) with the world's repo paths filled in but for W's
// worktree, which its maker sets.
func newHostGitTree(t *testing.T, mode byte) *hostGitWorld {
	t.Helper()
	base := testenv.TempDir(t)
	w := &hostGitWorld{mode: mode, plant: map[string]string{}}
	switch mode {
	case 'I', 'W':
		w.main = filepath.Join(base, "repo")
		buildUserRepo(t, w.main)
		w.tree, w.repo = w.main, w.main
	case 'P':
		w.tree = filepath.Join(base, "ws")
		w.repo = filepath.Join(w.tree, "proj")
		w.main = w.repo
		buildUserRepo(t, w.repo)
		for _, d := range []string{"folder-dir", "folder-file", "folder-link"} {
			testenv.WriteFile(t, filepath.Join(w.tree, d, "file.txt"), d+"\n")
		}
	}
	testenv.ChownR(t, base, attackOwner, attackOwner)
	return w
}

// repoRoots are the user's repositories in the world, where their git
// must work.
func (w *hostGitWorld) repoRoots() []string {
	if w.mode == 'W' {
		return []string{w.tree, w.main}
	}
	return []string{w.repo}
}

// setRoots fills in where the user runs git "at the root".
func (w *hostGitWorld) setRoots() {
	switch w.mode {
	case 'I':
		w.roots = []string{w.repo}
	case 'W':
		w.roots = []string{w.tree, w.main}
	case 'P':
		w.roots = []string{w.tree, w.repo}
	}
}

// finding is one run of the agent's program under the user's git.
type finding struct {
	stage, cmd, dir, tag, wrote, output string
}

func (f finding) String() string {
	return fmt.Sprintf("%s: `%s` in %s ran %s's program (%s); git said:\n%s", f.stage, f.cmd, f.dir, f.tag, clipN(f.wrote, 200), clipN(f.output, 600))
}

// prober runs the user's git in a world's directories and records which
// programs ran, attributing each to the command after which its marker
// appeared or grew.
type prober struct {
	u     *hostUser
	box   *markerBox
	seen  map[string]string
	found []finding
	// notes are the user's git's refusals in planted directories
	// ("dubious ownership") and the user's merges, per case.
	notes map[string][]string
	// live: the conversation is still there at this stage.
	live bool
	// firstOnly stops a probe at the first run of a program (a
	// control, which has only to show that its plant fires).
	firstOnly bool
	// broken lists where the user's git did not work in their own
	// repository.
	broken []string
}

func newProber(u *hostUser, box *markerBox) *prober {
	return &prober{u: u, box: box, seen: map[string]string{}, notes: map[string][]string{}}
}

// check records what ran since the last check.
func (p *prober) check(stage, cmd, dir, output string) {
	for tag, wrote := range p.box.fired() {
		if p.seen[tag] == wrote {
			continue
		}
		p.found = append(p.found, finding{stage: stage, cmd: cmd, dir: dir, tag: tag, wrote: strings.TrimPrefix(wrote, p.seen[tag]), output: output})
		p.seen[tag] = wrote
	}
}

// git runs the user's git in dir and checks.
func (p *prober) git(stage, dir string, args ...string) string {
	out, err := p.u.git(dir, nil, args...)
	if err != nil {
		out += fmt.Sprintf("\n(exit: %v)", err)
	}
	p.check(stage, "git "+strings.Join(args, " "), dir, out)
	return out
}

// probe runs the user's triggers in the world's roots and planted
// directories, the merge first where a case asks for it, then the IDE
// scan over the roots.
func (p *prober) probe(stage string, w *hostGitWorld) {
	for _, c := range w.cases {
		if !c.merge || w.mergeRef == "" {
			continue
		}
		refs := []string{w.mergeRef}
		if !p.live && w.conv.ID != "" {
			// After the conversation, a commit ohd held back is the
			// user's to take, as ohd's message tells them: its
			// directory's repository has been moved out by then.
			held, _ := testenv.GitOutput(w.main, "-c", "safe.directory=*", "for-each-ref", "--format=%(refname)", "refs/ohd/held/"+w.conv.ID+"/")
			refs = append(refs, strings.Fields(held)...)
		}
		for _, r := range refs {
			out := p.git(stage, w.main, "merge", "--no-edit", r)
			p.notes[w.tag(c)] = append(p.notes[w.tag(c)], fmt.Sprintf("%s: the user merged %s: %s", stage, r, clipN(out, 300)))
		}
	}
	// The user's git must work in their repositories (acceptance 2):
	// were it refused there, its silence would prove nothing.
	for _, r := range w.repoRoots() {
		if _, err := os.Stat(r); err != nil {
			continue
		}
		if out, err := p.u.git(r, nil, "status"); err != nil || strings.Contains(out, "fatal:") {
			p.broken = append(p.broken, fmt.Sprintf("%s: the user's `git status` in %s does not work: %v\n%s", stage, r, err, clipN(out, 600)))
		}
	}
	seen := map[string]bool{}
	var dirs []string
	add := func(d string) {
		if !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	for _, r := range w.roots {
		add(r)
	}
	byDir := map[string]string{}
	for _, c := range w.cases {
		add(w.planted(c))
		byDir[w.planted(c)] = w.tag(c)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); err != nil {
			continue // gone with the conversation (a worktree)
		}
		if p.firstOnly && len(p.found) > 0 {
			return
		}
		for _, tr := range userTriggers {
			out := p.git(stage, d, tr...)
			if name := byDir[d]; name != "" && strings.Contains(out, "dubious ownership") {
				p.notes[name] = append(p.notes[name], fmt.Sprintf("%s: `git %s` refused (dubious ownership)", stage, strings.Join(tr, " ")))
			}
		}
	}
	for _, r := range w.roots {
		if _, err := os.Stat(r); err != nil {
			continue
		}
		if p.firstOnly && len(p.found) > 0 {
			return
		}
		for _, d := range ideScan(p.u, r) {
			for _, tr := range userTriggers {
				p.git(stage+" (ide scan)", d, tr...)
			}
		}
	}
}

// byTag groups findings by case.
func (p *prober) byTag() map[string][]finding {
	out := map[string][]finding{}
	for _, f := range p.found {
		out[f.tag] = append(out[f.tag], f)
	}
	return out
}

// runControl makes the case's plant on the host, without ohd, as the
// repository's owner (what the agent was before the boundary), and
// requires the user's git to run the program: the attack is real.
func runControl(t *testing.T, mode byte, c hostGitCase) {
	u := newHostUser(t)
	box := newMarkerBox(t)
	w := newHostGitTree(t, mode)
	w.cases = []hostGitCase{c}
	if mode == 'W' {
		w.tree = filepath.Join(testenv.TempDir(t), "wt", "repo")
		if err := os.MkdirAll(filepath.Dir(w.tree), 0o755); err != nil {
			t.Fatal(err)
		}
		testenv.ChownR(t, filepath.Dir(w.tree), attackOwner, attackOwner)
		if out, err := u.git(w.main, nil, "worktree", "add", "-q", "-b", "openhands/control", w.tree); err != nil {
			t.Fatalf("control: git worktree add: %v\n%s", err, out)
		}
		w.repo = w.tree
	}
	w.setRoots()
	if c.merge {
		if out, err := u.git(w.main, nil, "checkout", "-q", "-b", "agent"); err != nil {
			t.Fatalf("control: %v\n%s", err, out)
		}
	}
	var steps []string
	for _, s := range c.steps {
		steps = append(steps, w.expand(s, c))
	}
	out, err := u.sh(w.tree, plantScript("", w.evil(c), box.program(w.tag(c)), steps))
	if err != nil || len(failedSteps(out)) > 0 {
		t.Fatalf("control: the plant failed on the host: %v\n%s", err, out)
	}
	if c.merge {
		if o, err := u.git(w.main, nil, "checkout", "-q", "main"); err != nil {
			t.Fatalf("control: %v\n%s", err, o)
		}
		w.mergeRef = "agent"
	}
	p := newProber(u, box)
	p.firstOnly = true
	p.probe("control", w)
	if len(p.byTag()[w.tag(c)]) == 0 {
		t.Fatalf("control: the plant did not fire under the user's git without ohd; plant:\n%s", out)
	}
	t.Logf("control fires: %s", p.byTag()[w.tag(c)][0])
}

// TestBackendHostGitInPlace runs the attack table against in-place
// conversations, on each backend (the controls once: they run no ohd).
func TestBackendHostGitInPlace(t *testing.T) { runHostGit(t, 'I') }

// TestBackendHostGitWorktree runs the attack table against worktree
// conversations.
func TestBackendHostGitWorktree(t *testing.T) { runHostGit(t, 'W') }

// TestBackendHostGitPlain runs the attack table against plain-folder
// conversations (a folder holding the user's repository proj).
func TestBackendHostGitPlain(t *testing.T) { runHostGit(t, 'P') }

func runHostGit(t *testing.T, mode byte) {
	testenv.RequireRoot(t)
	testenv.RequireDocker(t)
	start := time.Now()
	groups := casesOf(mode)
	t.Run("control", func(t *testing.T) {
		for _, cs := range groups {
			for _, c := range cs {
				c := c
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					runControl(t, mode, c)
				})
			}
		}
	})
	t.Logf("controls took %v", time.Since(start).Round(time.Second))
	eachBackend(t, func(t *testing.T, b backend) { runHostGitOn(t, b, mode, groups) })
}

// runHostGitOn runs the attack table of mode against conversations of
// an ohd on b.
func runHostGitOn(t *testing.T, b backend, mode byte, groups map[string][]hostGitCase) {
	start := time.Now()
	d := b.daemon(t)
	u := newHostUser(t)
	box := newMarkerBox(t)
	var names []string
	for g := range groups {
		names = append(names, g)
	}
	sort.Strings(names)
	var worlds []*hostGitWorld
	for _, g := range names {
		w := newHostGitTree(t, mode)
		w.group, w.cases = g, groups[g]
		args := []string{"create", "--repo", w.tree}
		if mode == 'W' {
			args = append(args, "--worktree")
		}
		d.ohctlJSON(&w.conv, args...)
		if mode == 'W' && w.conv.Worktree == "" {
			t.Fatalf("create --worktree = %+v, want a worktree", w.conv)
		}
		w.adopt(w.conv)
		worlds = append(worlds, w)
	}
	attackWorlds(t, d, u, box, worlds)
	t.Logf("TestHostGit %c took %v", mode, time.Since(start).Round(time.Second))
}

// adopt makes c the world's conversation (in W, its worktree the tree).
func (w *hostGitWorld) adopt(c store.Conversation) {
	w.conv = c
	if w.mode == 'W' {
		w.tree, w.repo = c.Worktree, c.Worktree
	}
	w.mergeRef = "openhands/" + c.ID
	w.setRoots()
}

// attackWorlds plants every world's cases from inside its conversation,
// runs the user's git at the four stages (during, after an ohd restart,
// after ohctl rm, after another restart), and reports per case: a
// subtest that fails when the case's program ran, and a summary line.
func attackWorlds(t *testing.T, d *daemon, u *hostUser, box *markerBox, worlds []*hostGitWorld) {
	start := time.Now()
	plantAll(t, d, box, worlds)
	t.Logf("plants took %v", time.Since(start).Round(time.Second))

	p := newProber(u, box)
	var foreign, unreported, undoctored []string
	stages := []struct {
		name   string
		live   bool
		before func()
	}{
		{"during the conversation", true, nil},
		{"after an ohd restart", true, func() { d.restart() }},
		{"after ohctl rm", false, func() {
			for _, w := range worlds {
				out, err := d.ohctlErr("--json", "rm", w.conv.ID)
				if err != nil && strings.Contains(err.Error(), "--discard") {
					t.Errorf("ohctl rm %s refused without --discard: %v", w.conv.ID, err)
					out, err = d.ohctlErr("--json", "rm", "--discard", w.conv.ID)
				}
				if err != nil {
					t.Errorf("ohctl rm %s: %v\n%s", w.conv.ID, err, out)
				}
				t.Logf("ohctl rm (%c %s): %s", w.mode, w.group, rmSays(out))
				if w.mode != 'W' {
					foreign = append(foreign, notOwnedBy(w.tree, attackOwner)...)
					unreported = append(unreported, unmoved(w, out)...)
				}
			}
		}},
		{"after ohctl rm and an ohd restart", false, func() { d.restart() }},
	}
	for i, st := range stages {
		if st.before != nil {
			st.before()
		}
		p.live = st.live
		for _, w := range worlds {
			p.probe(st.name, w)
		}
		if i == 0 {
			selfTest(t, u, box, p, worlds)
			for _, w := range worlds {
				undoctored = append(undoctored, undoctoredDirs(d, w)...)
			}
		}
	}

	t.Run("files-are-the-users-after-rm", func(t *testing.T) {
		// Acceptance 2: at the end every file the agent made belongs to
		// the user again (a worktree is gone by then).
		for _, f := range foreign {
			t.Error(f)
		}
	})
	t.Run("doctor-lists-agent-git-dirs", func(t *testing.T) {
		// Acceptance 3: `ohctl doctor ID` lists the git directories the
		// agent made, during the conversation.
		for _, f := range undoctored {
			t.Error(f)
		}
	})
	t.Run("rm-moves-agent-git-dirs-out", func(t *testing.T) {
		// Acceptance 3: ohctl rm moves every git directory the agent
		// made out of the user's tree, and says so.
		for _, f := range unreported {
			t.Error(f)
		}
	})
	t.Run("user-git-works", func(t *testing.T) {
		for _, b := range p.broken {
			t.Error(b)
		}
	})
	found := p.byTag()
	for _, w := range worlds {
		for _, c := range w.cases {
			c, w := c, w
			t.Run(w.tag(c), func(t *testing.T) {
				if f := failedSteps(w.plant[c.name]); len(f) > 0 {
					t.Logf("held inside the container at: %s", strings.Join(f, "\n"))
				}
				for _, n := range p.notes[w.tag(c)] {
					t.Logf("the user's git: %s", n)
				}
				// One line per stage: how often, and the first run in full.
				var order []string
				byStage := map[string][]finding{}
				for _, f := range found[w.tag(c)] {
					if byStage[f.stage] == nil {
						order = append(order, f.stage)
					}
					byStage[f.stage] = append(byStage[f.stage], f)
				}
				for _, st := range order {
					fs := byStage[st]
					var where []string
					for _, f := range fs[1:] {
						where = append(where, "`"+f.cmd+"` in "+f.dir)
					}
					t.Errorf("the agent's program ran under the user's git %d time(s). First: %s\nAlso: %s", len(fs), fs[0], clipN(strings.Join(where, "; "), 600))
				}
			})
		}
	}
	t.Logf("the attacks took %v; summary:\n%s", time.Since(start).Round(time.Second), summarize(worlds, p))
}

// plantAll installs the attack tools in each world (the image has only
// sh and git) and makes every case's plant from inside its conversation's
// container, as the container's user.
func plantAll(t *testing.T, d *daemon, box *markerBox, worlds []*hostGitWorld) {
	t.Helper()
	for _, w := range worlds {
		tools := filepath.Join(w.tree, ".agent-tools")
		installAttackTool(t, tools, attackOwner, attackOwner, "mv", "mkdir", "cat", "chmod", "ln", "rm", "cp")
		// Whether the publish of an earlier commit has happened yet must
		// not decide a later case: plant the committing cases last.
		cases := append([]hostGitCase(nil), w.cases...)
		sort.SliceStable(cases, func(i, j int) bool { return !cases[i].merge && cases[j].merge })
		for _, c := range cases {
			var steps []string
			for _, s := range c.steps {
				steps = append(steps, w.expand(s, c))
			}
			_, out := d.execIn(w.conv.ID, "sh", "-c", plantScript(tools, w.evil(c), box.program(w.tag(c)), steps))
			w.plant[c.name] = out
			t.Logf("plant %s (%c%s): %s", c.name, w.mode, w.group, clipN(out, 2000))
			if c.merge {
				waitPublished(t, d, w)
			}
		}
	}
}

// waitPublished waits until ohd has published the agent's last commit to
// openhands/<id>, or held it back (refs/ohd/held/<id>/...); the user then
// merges whatever the branch has.
func waitPublished(t *testing.T, d *daemon, w *hostGitWorld) {
	t.Helper()
	_, head := d.execIn(w.conv.ID, "git", "-C", w.repo, "rev-parse", "HEAD")
	head = strings.TrimSpace(head)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		got, _ := testenv.GitOutput(w.main, "-c", "safe.directory=*", "rev-parse", "-q", "--verify", "refs/heads/openhands/"+w.conv.ID)
		held, _ := testenv.GitOutput(w.main, "-c", "safe.directory=*", "for-each-ref", "refs/ohd/held/"+w.conv.ID)
		if got == head || held != "" {
			t.Logf("the agent's commit %s: openhands/%s = %s, held: %q", head, w.conv.ID, got, held)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the agent's commit %s was neither published nor held within 30s; the user merges what the branch has", head)
}

// selfTest runs each planted program by hand on the host as the user,
// once: it must write its marker (so its silence under git means git did
// not run it). Then the marker is cleared for the later stages, unless
// git had run it already.
func selfTest(t *testing.T, u *hostUser, box *markerBox, p *prober, worlds []*hostGitWorld) {
	t.Helper()
	already := p.byTag()
	for _, w := range worlds {
		for _, c := range w.cases {
			prog := w.evil(c)
			if _, err := os.Stat(prog); err != nil {
				t.Errorf("%s: the planted program %s is not there to run: %v (plant: %s)", c.name, prog, err, clipN(w.plant[c.name], 500))
				continue
			}
			out, err := u.run(w.tree, prog, "self-test")
			if !strings.Contains(box.fired()[w.tag(c)], "self-test") {
				t.Errorf("%s: the planted program does not run on the host by hand (%v: %s): a silent git would prove nothing", c.name, err, out)
			}
			if len(already[w.tag(c)]) == 0 {
				box.clear(w.tag(c))
				delete(p.seen, w.tag(c))
			} else {
				p.seen[w.tag(c)] = box.fired()[w.tag(c)]
			}
		}
	}
}

// summarize is one line per case: where the container held the plant,
// how often the user's git refused it for its ownership, and at which
// stages the program ran.
func summarize(worlds []*hostGitWorld, p *prober) string {
	found := p.byTag()
	var b strings.Builder
	for _, w := range worlds {
		for _, c := range w.cases {
			fmt.Fprintf(&b, "SUMMARY %c %-26s", w.mode, c.name)
			if f := failedSteps(w.plant[c.name]); len(f) > 0 {
				fmt.Fprintf(&b, " held-in-container=%q", clipN(f[0], 160))
			}
			n := 0
			for _, note := range p.notes[w.tag(c)] {
				if strings.Contains(note, "dubious ownership") {
					n++
				}
			}
			if n > 0 {
				fmt.Fprintf(&b, " refused-by-ownership=%d", n)
			}
			counts := map[string]int{}
			var order []string
			for _, f := range found[w.tag(c)] {
				st := strings.TrimSuffix(f.stage, " (ide scan)")
				if counts[st] == 0 {
					order = append(order, st)
				}
				counts[st]++
			}
			if len(order) == 0 {
				b.WriteString(" HOLDS")
			}
			for _, st := range order {
				fmt.Fprintf(&b, " FIRES[%s x%d]", st, counts[st])
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

// rmSays is what `ohctl --json rm` said that matters here: its notes, a
// publish error, and anything about moving git directories out.
func rmSays(out string) string {
	var m map[string]any
	if err := jsonUnmarshal(out, &m); err != nil {
		return clipN(out, 1500)
	}
	var keep []string
	for k, v := range m {
		if k == "notes" || k == "removal" || k == "publish_error" || strings.Contains(k, "moved") || strings.Contains(k, "kept") || strings.Contains(k, "held") || strings.Contains(k, "agent") {
			keep = append(keep, fmt.Sprintf("%s=%v", k, v))
		}
	}
	sort.Strings(keep)
	return clipN(strings.Join(keep, "; "), 3000)
}

// notOwnedBy lists what under root (not following links) uid does not
// own, at most 10 entries.
func notOwnedBy(root string, uid int) []string {
	var out []string
	_ = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil || len(out) >= 10 {
			return nil
		}
		st, err := os.Lstat(p)
		if err != nil {
			return nil
		}
		if sys := st.Sys().(*syscall.Stat_t); int(sys.Uid) != uid {
			out = append(out, fmt.Sprintf("%s is owned by uid %d after ohctl rm, want the user's %d", p, sys.Uid, uid))
		}
		return nil
	})
	return out
}

// unmoved lists the git directories the world's plants made in the
// user's tree (those whose every step worked) that ohctl rm's answer out
// does not say it moved out, or that are still there.
func unmoved(w *hostGitWorld, out string) []string {
	var r struct {
		Removal struct {
			GitDirsMoved []string `json:"git_dirs_moved"`
		} `json:"removal"`
	}
	if err := jsonUnmarshal(out, &r); err != nil {
		return []string{fmt.Sprintf("ohctl --json rm: %v: %s", err, clipN(out, 300))}
	}
	moved := map[string]bool{}
	for _, m := range r.Removal.GitDirsMoved {
		moved[m] = true
	}
	var bad []string
	for _, c := range w.cases {
		if len(failedSteps(w.plant[c.name])) > 0 {
			continue
		}
		// Moved: its .git, or the files of a bare repository in a
		// directory of the user's, or a directory of the agent's whole.
		rel, _ := filepath.Rel(w.tree, w.planted(c))
		if !moved[filepath.Join(rel, ".git")] && !moved[filepath.Join(rel, "HEAD")] && !moved[rel] {
			bad = append(bad, fmt.Sprintf("%s: ohctl rm does not say it moved %s's repository out (moved: %v)", c.name, rel, r.Removal.GitDirsMoved))
		}
		for _, left := range []string{".git", "HEAD", "objects"} {
			if _, err := os.Lstat(filepath.Join(w.planted(c), left)); err == nil {
				bad = append(bad, fmt.Sprintf("%s: %s is still in the user's tree after ohctl rm", c.name, filepath.Join(rel, left)))
			}
		}
	}
	return bad
}

// undoctoredDirs lists the git directories the world's plants made (those
// whose every step worked) that `ohctl doctor ID` does not name.
func undoctoredDirs(d *daemon, w *hostGitWorld) []string {
	out, err := d.ohctlErr("doctor", w.conv.ID)
	var oe *ohctlError
	if errors.As(err, &oe) {
		out += oe.stderr
	}
	var bad []string
	for _, c := range w.cases {
		if len(failedSteps(w.plant[c.name])) > 0 {
			continue
		}
		rel, _ := filepath.Rel(w.tree, w.planted(c))
		if !strings.Contains(out, filepath.Join(rel, ".git")+" (") && !strings.Contains(out, rel+" (") {
			bad = append(bad, fmt.Sprintf("%c %s: ohctl doctor %s does not name %s:\n%s", w.mode, c.name, w.conv.ID, rel, clipN(out, 1500)))
		}
	}
	return bad
}
