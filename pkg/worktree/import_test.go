package worktree

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/packgen"
	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/gitimport"
)

// hostileSandbox is a conversation whose container answers `view pack`
// with a pack of the attacker's making (an agent can make its view's
// pack-objects send one: it writes the view's object store, and
// pack-objects reuses the packs it finds there as they are). Other
// subcommands run as in hostSandbox.
type hostileSandbox struct {
	hostSandbox
	pack func(w io.Writer) error
}

func (s *hostileSandbox) View(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) > 0 && args[0] == "pack" {
		_, _ = io.Copy(io.Discard, stdin)
		return s.pack(stdout)
	}
	return s.hostSandbox.View(ctx, args, stdin, stdout)
}

// storeState lists the host's object store (loose objects and packs) and
// any quarantine: a refused import must leave it as it was.
func storeState(t *testing.T, commonDir string) []string {
	t.Helper()
	var names []string
	root := filepath.Join(commonDir, "objects")
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			names = append(names, rel)
		}
		if err == nil && d.IsDir() && strings.HasPrefix(d.Name(), gitimport.QuarantinePrefix) {
			names = append(names, d.Name()+"/")
		}
		return nil
	})
	return names
}

// peakRSS is the largest resident set of this process and of any child it
// waited for (every git the imports ran), in bytes.
func peakRSS(t *testing.T) (self, children int64) {
	t.Helper()
	var s, c syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &s); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &c); err != nil {
		t.Fatal(err)
	}
	return s.Maxrss << 10, c.Maxrss << 10 // Linux reports KiB
}

// TestImportRefusesBombs: what the agent sends is bounded whatever it
// declares: delta bombs (1 GiB and 16 GiB results from a tiny pack), a
// pack of a million tiny objects and a tree 10,000 directories deep are
// each refused within seconds, with this process and every git it ran
// staying under 256 MiB, nothing entering the host's store, and the host's
// fsck clean.
func TestImportRefusesBombs(t *testing.T) {
	m := newManager(t)
	dir := testenv.NewRepo(t, testenv.RepoOptions{})
	repo := mustInspect(t, m, dir)
	deep := packgen.DeepTree(10_000, "")
	// Another conversation of the same repository publishes beside each
	// attack, unaffected.
	bystander := addView(t, m, repo, newID(t), "")
	published := bystander.StartCommit
	for _, tc := range []struct {
		name, reason, tip string
		pack              func(io.Writer) error
	}{
		{"delta bomb 1 GiB", "object_too_large", "", func(w io.Writer) error { return packgen.DeltaBomb(w, 1<<30) }},
		{"delta bomb 16 GiB", "object_too_large", "", func(w io.Writer) error { return packgen.DeltaBomb(w, 16<<30) }},
		{"a million objects", "too_many_objects", "", func(w io.Writer) error { return packgen.Many(w, 1_000_000) }},
		{"tree 10,000 deep", gitimport.ReasonTreeTooDeep, deep[len(deep)-1].ID(), func(w io.Writer) error { return packgen.Write(w, deep) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wt := addView(t, m, repo, newID(t), "")
			tip := tc.tip
			if tip == "" {
				tip = strings.Repeat("ab", 20)
			}
			next := commitInView(t, m, bystander, "by-"+strings.ReplaceAll(tc.name, " ", "-")+".txt")
			done := make(chan error, 1)
			go func() {
				_, err := m.Publish(testCtx(t), bystander, &hostSandbox{wt: bystander}, next, published)
				done <- err
			}()
			t0 := time.Now()
			_, err := m.Publish(testCtx(t), wt, &hostileSandbox{hostSandbox: hostSandbox{wt: wt}, pack: tc.pack}, tip, wt.StartCommit)
			took := time.Since(t0)
			if berr := <-done; berr != nil {
				t.Errorf("the other conversation's publish beside the attack: %v", berr)
			}
			published = next
			if got := hostGit(t, dir, "rev-parse", "refs/heads/"+bystander.Branch); got != next {
				t.Errorf("the other conversation's branch = %s, want %s", got, next)
			}
			if !errors.Is(err, ErrRefused) || RefusalReason(err) != tc.reason {
				t.Fatalf("Publish(%s) = %v (reason %q), want refused: %s", tc.name, err, RefusalReason(err), tc.reason)
			}
			if took > 20*time.Second {
				t.Errorf("Publish(%s) took %v, want seconds", tc.name, took)
			}
			for _, s := range storeState(t, repo.CommonDir) {
				if strings.HasPrefix(s, gitimport.QuarantinePrefix) {
					t.Errorf("quarantine left: %s", s)
				}
			}
			for _, oid := range []string{tip, packgen.ID(packgen.Blob, make([]byte, 64<<10)), packgen.ID(packgen.Blob, []byte("0\n")), deep[0].ID()} {
				if _, err := testenv.GitOutput(dir, "-c", "safe.directory=*", "cat-file", "-e", oid); err == nil {
					t.Errorf("%s of the refused pack is in the host's store", oid)
				}
			}
			if got := hostGit(t, dir, "rev-parse", "refs/heads/"+wt.Branch); got != wt.StartCommit {
				t.Errorf("host branch moved to %s", got)
			}
			hostGit(t, dir, "fsck", "--strict", "--no-dangling")
			self, children := peakRSS(t)
			t.Logf("%s: refused in %v (%v); peak RSS: test process %d MiB, git children %d MiB", tc.name, took.Round(time.Millisecond), err, self>>20, children>>20)
			if self > 256<<20 || children > 256<<20 {
				t.Errorf("peak RSS %d MiB (self) / %d MiB (git), want <= 256 MiB", self>>20, children>>20)
			}
		})
	}
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestImportIsQuarantined: a commit whose .gitmodules asks for a command
// at `submodule update` (git's fsck: gitmodulesUpdate) is refused, and so
// is the next commit on top of it, because the first one's objects never
// reached the host's store; the host's fsck stays clean.
func TestImportIsQuarantined(t *testing.T) {
	m, dir, repo, wt := newView(t)
	sb := &hostSandbox{wt: wt}
	testenv.WriteFile(t, filepath.Join(wt.Path, ".gitmodules"), "[submodule \"x\"]\n\tpath = x\n\turl = ./x\n\tupdate = !sh -c evil\n")
	inView(t, wt, "add", ".gitmodules")
	inView(t, wt, "-c", "user.name=agent", "-c", "user.email=a@x", "commit", "-qm", "evil")
	evil, _ := m.ViewBranch(wt)
	before := storeState(t, repo.CommonDir)
	_, err := m.Publish(testCtx(t), wt, sb, evil, wt.StartCommit)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "gitmodulesUpdate") {
		t.Fatalf("Publish(.gitmodules update = !cmd) = %v, want refused (gitmodulesUpdate)", err)
	}
	if after := storeState(t, repo.CommonDir); !slicesEqual(before, after) {
		t.Errorf("the refused import changed the host's store: %v -> %v", before, after)
	}
	hostGit(t, dir, "fsck", "--strict", "--no-dangling")

	testenv.WriteFile(t, filepath.Join(wt.Path, "more.txt"), "more\n")
	inView(t, wt, "add", "more.txt")
	inView(t, wt, "-c", "user.name=agent", "-c", "user.email=a@x", "commit", "-qm", "on top")
	top, _ := m.ViewBranch(wt)
	if _, err := m.Publish(testCtx(t), wt, sb, top, wt.StartCommit); !errors.Is(err, ErrRefused) {
		t.Fatalf("Publish(a commit on top of a refused one) = %v, want refused", err)
	}
	if after := storeState(t, repo.CommonDir); !slicesEqual(before, after) {
		t.Errorf("the refused import changed the host's store: %v -> %v", before, after)
	}
	if got := hostGit(t, dir, "rev-parse", "refs/heads/"+wt.Branch); got != wt.StartCommit {
		t.Errorf("host branch moved to %s", got)
	}
	hostGit(t, dir, "fsck", "--strict", "--no-dangling")
}

// TestImportRefusesABranchOnABlob: the view's branch names a blob: the
// publish is refused (not_a_commit) and the blob does not enter the
// host's store.
func TestImportRefusesABranchOnABlob(t *testing.T) {
	m, dir, _, wt := newView(t)
	f := filepath.Join(t.TempDir(), "blob")
	testenv.WriteFile(t, f, "not a commit\n")
	blob := strings.TrimSpace(testenv.Git(t, dir, "-c", "safe.directory=*", "--git-dir="+wt.View, "hash-object", "-w", f))
	_, err := m.Publish(testCtx(t), wt, &hostSandbox{wt: wt}, blob, wt.StartCommit)
	if !errors.Is(err, ErrRefused) || RefusalReason(err) != gitimport.ReasonNotACommit {
		t.Fatalf("Publish(a blob) = %v (reason %q), want refused: %s", err, RefusalReason(err), gitimport.ReasonNotACommit)
	}
	if _, err := testenv.GitOutput(dir, "-c", "safe.directory=*", "cat-file", "-e", blob); err == nil {
		t.Errorf("the blob %s entered the host's store", blob)
	}
	hostGit(t, dir, "fsck", "--strict", "--no-dangling")
}

// TestImportMigratesLooseAndPacked: accepted imports, small (loose
// objects) and large (a pack), reach the real store and leave no
// quarantine.
func TestImportMigratesLooseAndPacked(t *testing.T) {
	m, dir, repo, wt := newView(t)
	sb := &hostSandbox{wt: wt}
	published := wt.StartCommit
	for _, n := range []int{1, 150} {
		for i := range n {
			testenv.WriteFile(t, filepath.Join(wt.Path, "d", string(rune('a'+i%26))+strings.Repeat("x", i/26)+".txt"), strings.Repeat("y", n+i))
		}
		inView(t, wt, "add", "d")
		inView(t, wt, "-c", "user.name=agent", "-c", "user.email=a@x", "commit", "-qm", "c")
		tip, _ := m.ViewBranch(wt)
		res, err := m.Publish(testCtx(t), wt, sb, tip, published)
		if err != nil || res.Published != tip {
			t.Fatalf("Publish(%d files) = %+v, %v", n, res, err)
		}
		published = tip
	}
	for _, s := range storeState(t, repo.CommonDir) {
		if strings.HasPrefix(s, gitimport.QuarantinePrefix) || strings.HasSuffix(s, ".keep") {
			t.Errorf("left in the store: %s", s)
		}
	}
	var out bytes.Buffer
	out.WriteString(hostGit(t, dir, "fsck", "--strict", "--no-dangling"))
}

// commitInView makes a commit in the view and returns it.
func commitInView(t *testing.T, m *Manager, wt Worktree, name string) string {
	t.Helper()
	testenv.WriteFile(t, filepath.Join(wt.Path, name), name+"\n")
	inView(t, wt, "add", name)
	inView(t, wt, "-c", "user.name=agent", "-c", "user.email=a@x", "commit", "-qm", name)
	tip, err := m.ViewBranch(wt)
	if err != nil {
		t.Fatal(err)
	}
	return tip
}

// TestPublishClearsAStaleLock: a kill during a publish can leave
// refs/heads/openhands/<id>.lock; one older than this ohd is its own and
// is removed, one younger is someone else's (ErrLocked, nothing moves).
func TestPublishClearsAStaleLock(t *testing.T) {
	m, dir, repo, wt := newView(t)
	sb := &hostSandbox{wt: wt}
	lock := filepath.Join(repo.CommonDir, "refs", "heads", wt.Branch+".lock")
	testenv.WriteFile(t, lock, wt.StartCommit+"\n")
	tip := commitInView(t, m, wt, "a.txt")
	if _, err := m.Publish(testCtx(t), wt, sb, tip, wt.StartCommit); !errors.Is(err, ErrLocked) {
		t.Fatalf("Publish with a fresh lock = %v, want ErrLocked", err)
	}
	if got := m.StaleLocks(wt); len(got) != 0 {
		t.Errorf("StaleLocks of a fresh lock = %v, want none yet", got)
	}
	old := m.started.Add(-time.Minute)
	if err := os.Chtimes(lock, old, old); err != nil {
		t.Fatal(err)
	}
	if got := m.StaleLocks(wt); len(got) != 1 {
		t.Errorf("StaleLocks = %v, want the lock", got)
	}
	res, err := m.Publish(testCtx(t), wt, sb, tip, wt.StartCommit)
	if err != nil || res.Published != tip || res.ClearedLock != lock {
		t.Fatalf("Publish with a lock an earlier ohd left = %+v, %v; want published, lock cleared", res, err)
	}
	if got := hostGit(t, dir, "rev-parse", "refs/heads/"+wt.Branch); got != tip {
		t.Errorf("host branch = %s, want %s", got, tip)
	}
}

// TestPublishAfterAKillIsNotAConflict: ohd moved the host branch to tip1
// and was killed before recording it; the next publish, told tip1 was
// what it was about to write, publishes on top with no conflict and
// nothing kept. A real foreign move still is a conflict.
func TestPublishAfterAKillIsNotAConflict(t *testing.T) {
	m, dir, _, wt := newView(t)
	sb := &hostSandbox{wt: wt}
	tip1 := commitInView(t, m, wt, "a.txt")
	if _, err := m.Publish(testCtx(t), wt, sb, tip1, wt.StartCommit); err != nil {
		t.Fatal(err)
	}
	tip2 := commitInView(t, m, wt, "b.txt")
	res, err := m.Publish(testCtx(t), wt, sb, tip2, wt.StartCommit, tip1) // the record still says the start commit
	if err != nil || res.Conflict != "" || res.Published != tip2 {
		t.Fatalf("Publish after a kill = %+v, %v; want published, no conflict", res, err)
	}
	if out := hostGit(t, dir, "for-each-ref", KeptPrefix(wt.ConversationID)); out != "" {
		t.Errorf("kept refs after a kill: %s", out)
	}
	hostGit(t, dir, "update-ref", "refs/heads/"+wt.Branch, wt.StartCommit)
	tip3 := commitInView(t, m, wt, "c.txt")
	res, err = m.Publish(testCtx(t), wt, sb, tip3, tip2, tip1)
	if err != nil || res.Conflict == "" || res.Kept == "" {
		t.Fatalf("Publish after a foreign move = %+v, %v; want a conflict", res, err)
	}
}

// TestRestoreAKeptTip: the host branch was moved by someone else, so the
// agent's commits were kept under refs/ohd/kept; restore checks out that
// kept history on a branch of its own (not the moved branch with the
// agent's commits as uncommitted changes).
func TestRestoreAKeptTip(t *testing.T) {
	m, dir, repo, wt := newView(t)
	sb := &hostSandbox{wt: wt}
	tip1 := commitInView(t, m, wt, "a.txt")
	if _, err := m.Publish(testCtx(t), wt, sb, tip1, wt.StartCommit); err != nil {
		t.Fatal(err)
	}
	user := hostGit(t, dir, "commit-tree", "-p", wt.StartCommit, "-m", "the user's", wt.StartCommit+"^{tree}")
	hostGit(t, dir, "update-ref", "refs/heads/"+wt.Branch, user) // the user moves it
	commitInView(t, m, wt, "b.txt")
	tip3 := commitInView(t, m, wt, "c.txt")
	rres, err := m.Remove(testCtx(t), wt, RemoveOptions{Sandbox: sb, Published: tip1})
	if err != nil || rres.Conflict == "" {
		t.Fatalf("Remove = %+v, %v; want a conflict", rres, err)
	}
	into := filepath.Join(testenv.TempDir(t), "restored")
	res, err := m.Restore(testCtx(t), RestoreOptions{CommonDir: repo.CommonDir, Repo: repo.TopLevel, ConversationID: wt.ConversationID, StartCommit: wt.StartCommit, Into: into})
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if res.Branch != wt.Branch+"-kept" {
		t.Errorf("Restore branch = %s, want %s-kept", res.Branch, wt.Branch)
	}
	if got := hostGit(t, into, "rev-parse", "HEAD"); got != tip3 {
		t.Errorf("restored HEAD = %s, want the kept tip %s", got, tip3)
	}
	if st := hostGit(t, into, "status", "--porcelain"); st != "" {
		t.Errorf("restored worktree has uncommitted changes: %q", st)
	}
}

// TestSaveViewClearsAStaleSnapshotLock: ohd was killed inside the removal's
// ref transaction, leaving refs/ohd/snapshots/<id>.lock; the next save (a
// later ohd) clears that lock, as a publish clears its branch's, instead
// of failing for good.
func TestSaveViewClearsAStaleSnapshotLock(t *testing.T) {
	m, dir, repo, wt := newView(t)
	testenv.WriteFile(t, filepath.Join(wt.Path, "unsaved.txt"), "work\n")
	lock := filepath.Join(repo.CommonDir, filepath.FromSlash(SnapshotRef(wt.ConversationID))+".lock")
	testenv.WriteFile(t, lock, "")
	old := m.started.Add(-time.Minute)
	if err := os.Chtimes(lock, old, old); err != nil {
		t.Fatal(err)
	}
	saved, err := m.SaveView(testCtx(t), wt, &hostSandbox{wt: wt}, wt.StartCommit)
	if err != nil || saved.SnapshotRef != SnapshotRef(wt.ConversationID) {
		t.Fatalf("SaveView with a snapshot lock an earlier ohd left = %+v, %v; want the snapshot saved", saved, err)
	}
	if _, err := os.Lstat(lock); !os.IsNotExist(err) {
		t.Errorf("the stale lock is still there: %v", err)
	}
	if got := hostGit(t, dir, "rev-parse", SnapshotRef(wt.ConversationID)); got != saved.SnapshotCommit {
		t.Errorf("snapshot ref = %s, want %s", got, saved.SnapshotCommit)
	}
}
