package integration

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/store"
)

// porcelain returns `git worktree list --porcelain` of repo as entries.
func porcelain(t testing.TB, repo string) []map[string]string {
	t.Helper()
	out := testenv.Git(t, repo, "-c", "safe.directory=*", "worktree", "list", "--porcelain")
	var entries []map[string]string
	for _, block := range strings.Split(strings.TrimSpace(out), "\n\n") {
		e := map[string]string{}
		for _, line := range strings.Split(block, "\n") {
			k, v, _ := strings.Cut(line, " ")
			e[k] = v
		}
		entries = append(entries, e)
	}
	return entries
}

// entryFor returns the porcelain entry of path, or nil.
func entryFor(entries []map[string]string, path string) map[string]string {
	for _, e := range entries {
		if e["worktree"] == path {
			return e
		}
	}
	return nil
}

func TestLocalCreateShowListRemove(t *testing.T) {
	d := startDaemon(t, daemonOptions{})
	repo := testenv.NewRepo(t, testenv.RepoOptions{})

	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", repo, "--worktree")
	if c.State != store.StateRunning || c.Branch != "openhands/"+c.ID || c.Worktree == "" {
		t.Fatalf("create = %+v, want a running conversation on openhands/<id> with a worktree", c)
	}
	if want := filepath.Join(d.dirs.Worktrees, c.ID, filepath.Base(repo)); c.Worktree != want {
		t.Errorf("worktree path = %s, want %s", c.Worktree, want)
	}

	e := entryFor(porcelain(t, repo), c.Worktree)
	if e == nil {
		t.Fatalf("host git worktree list has no entry for %s", c.Worktree)
	}
	if _, ok := e["prunable"]; ok {
		t.Errorf("host reports the live worktree prunable: %v", e)
	}
	if e["locked"] != "ohd conversation "+c.ID {
		t.Errorf("lock reason = %q, want %q", e["locked"], "ohd conversation "+c.ID)
	}
	if e["branch"] != "refs/heads/openhands/"+c.ID {
		t.Errorf("branch = %q", e["branch"])
	}

	ls := d.ohctl("ls")
	if !strings.Contains(ls, c.ID) || !strings.Contains(ls, "running") || !strings.HasPrefix(ls, "ID ") {
		t.Errorf("ohctl ls does not show the conversation as a table:\n%s", ls)
	}
	show := d.ohctl("show", c.ID)
	for _, want := range []string{c.Worktree, "openhands/" + c.ID, "broker epoch"} {
		if !strings.Contains(show, want) {
			t.Errorf("ohctl show lacks %q:\n%s", want, show)
		}
	}
	if st, err := os.Stat(filepath.Join(d.dirs.Run, "conversations", c.ID, "broker.sock")); err != nil || st.Mode()&os.ModeSocket == 0 {
		t.Errorf("broker socket missing: %v", err)
	}

	// Leave work behind: it must survive the removal as a snapshot.
	testenv.WriteFile(t, filepath.Join(c.Worktree, "new.txt"), "agent work\n")
	var rm store.Conversation
	d.ohctlJSON(&rm, "rm", c.ID)
	if rm.State != store.StateDeleted || rm.Removal == nil || rm.Removal.SnapshotRef != "refs/ohd/snapshots/"+c.ID || !rm.Removal.BranchKept {
		t.Fatalf("rm = %+v, want deleted with a snapshot and the branch kept", rm.Removal)
	}
	if got := testenv.Git(t, repo, "show", rm.Removal.SnapshotRef+":new.txt"); got != "agent work" {
		t.Errorf("snapshot new.txt = %q", got)
	}
	if entryFor(porcelain(t, repo), c.Worktree) != nil {
		t.Error("the removed worktree is still registered on the host")
	}
	if _, err := os.Stat(filepath.Join(d.dirs.Run, "conversations", c.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("broker directory still exists after rm: %v", err)
	}
	if ls := d.ohctl("ls"); strings.Contains(ls, c.ID) {
		t.Errorf("ls still lists the removed conversation:\n%s", ls)
	}
	if ls := d.ohctl("ls", "--all"); !strings.Contains(ls, c.ID) || !strings.Contains(ls, "deleted") {
		t.Errorf("ls --all does not show the deleted record:\n%s", ls)
	}
}

func TestLocalDiscardDeletesEverything(t *testing.T) {
	d := startDaemon(t, daemonOptions{})
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", repo, "--worktree")
	testenv.WriteFile(t, filepath.Join(c.Worktree, "x.txt"), "x\n")
	testenv.Git(t, c.Worktree, "add", "x.txt")
	testenv.Git(t, c.Worktree, "commit", "-q", "-m", "agent commit")
	d.ohctl("rm", "--discard", c.ID)
	if refs := testenv.Git(t, repo, "for-each-ref", "--format=%(refname)"); strings.Contains(refs, c.ID) {
		t.Errorf("refs of the discarded conversation remain:\n%s", refs)
	}
	if _, err := os.Stat(filepath.Join(d.dirs.Worktrees, c.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("worktree folder remains: %v", err)
	}
}

func TestLocalNonGitWorkspace(t *testing.T) {
	d := startDaemon(t, daemonOptions{})
	dir := testenv.TempDir(t)
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", dir, "--worktree")
	if c.Worktree != "" || c.WorkingDir != dir || c.State != store.StateRunning {
		t.Fatalf("create on a non-git dir = %+v, want running without a worktree, working in %s", c, dir)
	}
	if len(c.Notes) == 0 || !strings.Contains(c.Notes[0], "not a git repository") {
		t.Errorf("notes = %q, want a note that it started without a worktree", c.Notes)
	}
	if show := d.ohctl("show", c.ID); !strings.Contains(show, "not a git repository") {
		t.Errorf("ohctl show does not say so:\n%s", show)
	}
	d.ohctl("rm", c.ID)
}

// snapshotState captures what bad input must not change: the store, the
// repository's refs and worktrees, and the daemon's directories.
func snapshotState(t testing.TB, d *daemon, repo string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(d.ohctl("--json", "ls", "--all"))
	b.WriteString(testenv.Git(t, repo, "for-each-ref"))
	b.WriteString(testenv.Git(t, repo, "worktree", "list", "--porcelain"))
	for _, dir := range []string{d.dirs.Worktrees, filepath.Join(d.dirs.Run, "conversations"), filepath.Join(repo, ".git", "worktrees")} {
		var names []string
		_ = filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
			if err == nil {
				names = append(names, p)
			}
			return nil
		})
		sort.Strings(names)
		b.WriteString(strings.Join(names, "\n"))
	}
	return b.String()
}

func TestLocalBadInputChangesNothing(t *testing.T) {
	d := startDaemon(t, daemonOptions{})
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	file := filepath.Join(repo, "README.md")
	before := snapshotState(t, d, repo)
	unknown := store.NewID()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"relative path", []string{"create", "--repo", "relative/path", "--worktree"}, "absolute"},
		{"missing path", []string{"create", "--repo", filepath.Join(repo, "nope"), "--worktree"}, "does not exist"},
		{"a file", []string{"create", "--repo", file, "--worktree"}, "not a directory"},
		{"bad start point", []string{"create", "--repo", repo, "--worktree", "--start-point", "no-such-branch"}, "no-such-branch"},
		{"option-like start point", []string{"create", "--repo", repo, "--worktree", "--start-point", "--upload-pack=x"}, "start point"},
		{"start point without worktree", []string{"create", "--repo", repo, "--start-point", "main"}, "without a worktree"},
		{"id not a UUID", []string{"create", "--repo", repo, "--worktree", "--id", "../../etc"}, "not a UUID"},
		{"bad grant", []string{"create", "--repo", repo, "--grant-secret", "a/b"}, "secret name"},
		{"show id not a UUID", []string{"show", "not-a-uuid"}, "not a UUID"},
		{"show unknown id", []string{"show", unknown}, "not found"},
		{"rm id not a UUID", []string{"rm", "x"}, "not a UUID"},
		{"rm unknown id", []string{"rm", unknown}, "not found"},
		{"grant unknown kind", []string{"grant", unknown, "password", "x"}, "grant kind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := d.ohctlErr(tc.args...)
			var oe *ohctlError
			if !errors.As(err, &oe) || oe.code == 0 {
				t.Fatalf("ohctl %v succeeded, want an error", tc.args)
			}
			if !strings.Contains(oe.stderr, tc.want) {
				t.Errorf("ohctl %v error = %q, want it to mention %q", tc.args, oe.stderr, tc.want)
			}
		})
	}
	if after := snapshotState(t, d, repo); after != before {
		t.Errorf("bad input changed state:\n--- before\n%s\n--- after\n%s", before, after)
	}
}

func TestLocalParallelCreatesAndRemoves(t *testing.T) {
	d := startDaemon(t, daemonOptions{})
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	const n = 16
	ids := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := d.ohctlErr("--json", "create", "--repo", repo, "--worktree")
			if err != nil {
				errs <- err
				return
			}
			var c store.Conversation
			if err := jsonUnmarshal(out, &c); err != nil {
				errs <- err
				return
			}
			ids[i] = c.ID
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("parallel create: %v", err)
	}
	if t.Failed() {
		return
	}
	if got := len(porcelain(t, repo)); got != n+1 {
		t.Errorf("host lists %d worktrees, want %d", got, n+1)
	}
	errs = make(chan error, n)
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := d.ohctlErr("rm", id); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("parallel rm: %v", err)
	}
	if got := porcelain(t, repo); len(got) != 1 {
		t.Errorf("after removing all, host lists %d worktrees: %v", len(got), got)
	}
}

func TestControlSocketRefusesOtherUID(t *testing.T) {
	testenv.RequireRoot(t)
	d := startDaemon(t, daemonOptions{})
	// Let uid 1000 reach the socket file, so only SO_PEERCRED can refuse.
	if err := os.Chmod(d.socket, 0o666); err != nil {
		t.Fatal(err)
	}
	cmd := testenv.AsUser(exec.Command(built.ohctl, "--socket", d.socket, "ls"), testenv.UnprivilegedUID, testenv.UnprivilegedGID)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("ohctl as uid %d succeeded:\n%s", testenv.UnprivilegedUID, out)
	}
	if !strings.Contains(string(out), "may not use the control socket") {
		t.Errorf("refusal = %q, want it to say the uid may not use the control socket", out)
	}
	// And root still can.
	d.ohctl("ls")
}

func TestSecondDaemonRefused(t *testing.T) {
	d := startDaemon(t, daemonOptions{})
	otherRun := d.dirs.Run + "-2"
	t.Cleanup(func() { os.RemoveAll(otherRun) })
	cmd := exec.Command(built.ohd, "serve", "--state-dir", d.dirs.State, "--runtime-dir", otherRun, "--runtime", "local", "--listen", "off")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("second ohd on the same state dir started:\n%s", out)
	}
	if !strings.Contains(string(out), "another ohd") || !strings.Contains(string(out), d.dirs.State) {
		t.Errorf("second daemon's error = %q, want it to name the running daemon and the state dir", out)
	}
	d.ohctl("ls") // the first one is unharmed
	if _, err := os.Stat(otherRun); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused daemon created its runtime dir %s", otherRun)
	}
}
