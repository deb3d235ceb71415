package gitboundary

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// midConversationAttack shares a user's tree as ohd does for a live
// conversation (old: the default ACLs carry the agent's entry, as before
// issue 26's last hole was closed; else Borrow then Apply), then the user
// makes fresh/ and the agent at once fills it as an implicit bare
// repository; it reports whether the user's git log in fresh/ ran the
// agent's program.
func midConversationAttack(t *testing.T, old bool) (ran bool, plant, out string) {
	t.Helper()
	root := ownedTree(t, map[string]string{"README": "r\n", "docs/a.md": "a\n"})
	if old {
		// The old arrangement: every directory's default ACL gives the
		// agent rwx (what Apply did before), the directories lent.
		for _, d := range []string{root, filepath.Join(root, "docs")} {
			if err := ShareDir(d, testIDs); err != nil {
				t.Fatal(err)
			}
		}
	} else {
		lendAndShare(t, root)
	}
	box, marker := markerBox(t)
	evil := filepath.Join(box, "evil.sh")
	if err := os.WriteFile(evil, []byte("#!/bin/sh\necho ran >> "+marker+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	mustRunAs(t, testOwner, root, "sh", "-c", "umask 022; mkdir docs/fresh")
	fresh := filepath.Join(root, "docs", "fresh")
	plant, _ = runAs(t, testAgent, fresh, "sh", "-c", "export EVIL="+evil+" GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0='*'; "+fillBare)
	out, _ = runAs(t, testOwner, fresh, "git", "log", "-1")
	_, err := os.Stat(marker)
	return err == nil, plant, out
}

// TestUsersNewDirectoryIsNotTheAgentsToFill: a directory the user makes
// in a shared tree mid-conversation (before any pass of ohd's has lent
// it) is not writable by the agent: its plant fails and the user's git
// log there runs nothing. The control, with the old default ACLs that
// carried the agent's entry, shows the attack itself works.
func TestUsersNewDirectoryIsNotTheAgentsToFill(t *testing.T) {
	needRoot(t)
	ran, plant, out := midConversationAttack(t, true)
	if !ran {
		t.Fatalf("control: with the agent in the default ACL, its bare repository in the user's new directory did not run under the user's git log (plant %q, log %q): the attack is not being made", plant, out)
	}
	ran, plant, out = midConversationAttack(t, false)
	if ran {
		t.Fatalf("the user's git log in their new directory ran the agent's program (plant %q, log %q)", plant, out)
	}
	if !strings.Contains(plant, "Permission denied") {
		t.Errorf("the agent's plant in the user's new directory = %q, want Permission denied", plant)
	}
}

// TestBorrowDropsTheCheckoutsAgentDefault: a worktree's checkout inherits
// the agent's default entry from its conversation directory (ShareDir);
// Borrow's pass at create drops it from every directory, so checked-out
// files stay the agent's to write (no per-file walk) while a directory
// the user makes later is not; Release gives the directories back.
func TestBorrowDropsTheCheckoutsAgentDefault(t *testing.T) {
	needRoot(t)
	conv := ownedTree(t, nil)
	if err := ShareDir(conv, testIDs); err != nil {
		t.Fatal(err)
	}
	// The checkout, as the user (ohd's git runs as the owner).
	mustRunAs(t, testOwner, conv, "sh", "-c", "umask 022; mkdir -p wt/src/pkg && echo a > wt/src/pkg/a.go && echo r > wt/README && echo gitdir: x > wt/.git")
	wt := filepath.Join(conv, "wt")
	st, err := Borrow(wt, testIDs)
	if err != nil {
		t.Fatal(err)
	}
	if st.Changed != 2 {
		t.Errorf("Borrow lent %d directories, want 2 (src, src/pkg; not the work tree's root)", st.Changed)
	}
	mustRunAs(t, testAgent, wt, "sh", "-c", "echo x >> src/pkg/a.go && echo x >> README && mkdir src/mine")
	mustRunAs(t, testOwner, wt, "sh", "-c", "umask 022; mkdir src/fresh && echo u > src/pkg/u.txt && echo u > top.txt")
	for _, cmd := range []string{"touch src/fresh/HEAD", "echo x >> src/pkg/u.txt", "echo x >> top.txt"} {
		if out, err := runAs(t, testAgent, wt, "sh", "-c", cmd); err == nil {
			t.Errorf("the agent could %q in what the user made after the create: %s", cmd, out)
		}
	}
	// What the agent makes stays writable by both.
	mustRunAs(t, testAgent, wt, "sh", "-c", "umask 077; echo a > src/mine/f")
	mustRunAs(t, testOwner, wt, "sh", "-c", "echo u >> src/mine/f")
	kept := filepath.Join(t.TempDir(), "kept")
	if _, err := Release(wt, ReleaseOptions{IDs: testIDs, KeptDir: kept}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"src", "src/pkg", "src/fresh", "src/mine"} {
		if got := ownerOf(t, filepath.Join(wt, d)); got != testOwner {
			t.Errorf("%s is owned by %d after Release, want the user's", d, got)
		}
	}
}

// lendAndShare lends root's directories to the agent and shares the tree
// with it, as a conversation's create does.
func lendAndShare(t *testing.T, root string) {
	t.Helper()
	if _, err := Borrow(root, testIDs); err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(root, testIDs); err != nil {
		t.Fatal(err)
	}
}

// openFds counts this process's open descriptors.
func openFds(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// eventually polls cond for up to 20s (no claim on speed: a bound on
// the wait).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestWatchSharesWhatTheUserMakes: with the watcher running, what the user
// makes mid-conversation (a directory with files in it, a file an editor
// saves by rename, a directory moved in) becomes the agent's to write
// without a periodic pass; a new directory is lent (the agent's bare
// repository in it is refused by the user's git); Close leaves no
// descriptor or goroutine; Release gives everything back.
func TestWatchSharesWhatTheUserMakes(t *testing.T) {
	needRoot(t)
	root := ownedTree(t, map[string]string{"README": "r\n", "docs/a.md": "a\n"})
	lendAndShare(t, root)
	fds, goroutines := openFds(t), runtime.NumGoroutine()
	w, err := Watch(root, testIDs, WatchOptions{OnError: func(err error) { t.Errorf("watcher: %v", err) }})
	if err != nil {
		t.Fatal(err)
	}
	if w.Watches() != 2 || w.Degraded() {
		t.Errorf("Watch placed %d watches (degraded %v), want 2", w.Watches(), w.Degraded())
	}
	outside := ownedTree(t, map[string]string{"moved/deep/f": "f\n"})
	mustRunAs(t, testOwner, root, "sh", "-c", "umask 022; mkdir -p fresh/deep && echo f > fresh/deep/f && echo new > docs/tmp.swp && mv docs/tmp.swp docs/a.md")
	if err := os.Rename(filepath.Join(outside, "moved"), filepath.Join(root, "docs", "moved")); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"echo x >> fresh/deep/f", "echo x >> docs/a.md", "touch fresh/deep/g", "echo x >> docs/moved/deep/f"} {
		eventually(t, "the agent may "+cmd, func() bool {
			_, err := runAs(t, testAgent, root, "sh", "-c", cmd)
			return err == nil
		})
	}
	for _, d := range []string{"fresh", "fresh/deep", "docs/moved/deep"} {
		if got := ownerOf(t, filepath.Join(root, d)); got != testAgent {
			t.Errorf("%s is owned by %d after the watcher's pass, want lent to the agent", d, got)
		}
	}
	// A directory made in a directory the watcher found is watched too.
	mustRunAs(t, testOwner, root, "sh", "-c", "umask 022; mkdir fresh/deep/deeper")
	eventually(t, "the agent may write in fresh/deep/deeper", func() bool {
		_, err := runAs(t, testAgent, root, "sh", "-c", "touch fresh/deep/deeper/x")
		return err == nil
	})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got := openFds(t); got != fds {
		t.Errorf("%d descriptors open after Close, %d before Watch", got, fds)
	}
	eventually(t, "the watcher's goroutines end", func() bool { return runtime.NumGoroutine() <= goroutines })
	// Nothing is shared after Close.
	mustRunAs(t, testOwner, root, "sh", "-c", "umask 022; mkdir late")
	time.Sleep(200 * time.Millisecond)
	if got := ownerOf(t, filepath.Join(root, "late")); got != testOwner {
		t.Errorf("a directory made after Close was lent (owner %d)", got)
	}
	kept := filepath.Join(t.TempDir(), "kept")
	if _, err := Release(root, ReleaseOptions{IDs: testIDs, KeptDir: kept}); err != nil {
		t.Fatal(err)
	}
	assertReleased(t, root)
	for _, d := range []string{"fresh", "fresh/deep", "docs/moved", "docs/moved/deep"} {
		p := filepath.Join(root, d)
		if got := ownerOf(t, p); got != testOwner {
			t.Errorf("%s is owned by %d after Release, want the user's", d, got)
		}
		if fi, _ := os.Lstat(p); fi.Mode().Perm() != 0o755 {
			t.Errorf("%s has mode %v after Release, want 0755", d, fi.Mode().Perm())
		}
		for _, name := range []string{xattrBorrowed, xattrBorrowedACL, xattrBorrowedDefault} {
			if _, err := unix.Lgetxattr(p, name, make([]byte, 256)); err != unix.ENODATA {
				t.Errorf("%s keeps %s after Release (%v)", d, name, err)
			}
		}
	}
}

// TestWatchDegradesPastItsWatches: past MaxWatches the watcher says so
// (the periodic pass must then share files too) and still shares what
// it is told of.
func TestWatchDegradesPastItsWatches(t *testing.T) {
	needRoot(t)
	root := ownedTree(t, map[string]string{"a/f": "f\n", "b/f": "f\n"})
	if _, err := Apply(root, testIDs); err != nil {
		t.Fatal(err)
	}
	w, err := Watch(root, testIDs, WatchOptions{MaxWatches: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if !w.Degraded() || w.Watches() != 2 {
		t.Errorf("3 directories, MaxWatches 2: Degraded %v, Watches %d; want true, 2", w.Degraded(), w.Watches())
	}
}

// TestWatchStaysInTheTree: a name the watcher is told of is resolved
// beneath the tree without following a symlink: an agent that swaps a
// directory for a link out of the tree lends nothing outside.
func TestWatchStaysInTheTree(t *testing.T) {
	needRoot(t)
	root := ownedTree(t, map[string]string{"README": "r\n"})
	outside := ownedTree(t, map[string]string{"x/f": "f\n"})
	if err := os.Symlink(outside, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	w, err := Watch(root, testIDs, WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, rel := range []string{"link/x", "link/x/f", "../repo/link/x", "link"} {
		if err := w.share(rel, false); err != nil {
			t.Errorf("share(%q): %v", rel, err)
		}
	}
	if got := ownerOf(t, filepath.Join(outside, "x")); got != testOwner {
		t.Errorf("a directory outside the tree was lent through a symlink (owner %d)", got)
	}
	for _, p := range []string{filepath.Join(outside, "x"), filepath.Join(outside, "x", "f")} {
		if _, err := unix.Lgetxattr(p, xattrAccess, make([]byte, 256)); err != unix.ENODATA {
			t.Errorf("%s got an ACL through a symlink (%v)", p, err)
		}
	}
}

// TestAgentsGroupGainsNothingOfTheUsers: the agent owns every directory it
// writes in (lent or its own), so it can give one its own group and the
// setgid bit; what the user then makes there (umask 002, group-writable
// directories) gets the agent's group, but the default ACL's group class
// has no write, so the agent still cannot fill it.
func TestAgentsGroupGainsNothingOfTheUsers(t *testing.T) {
	needRoot(t)
	root := ownedTree(t, map[string]string{"docs/a.md": "a\n"})
	for _, d := range []string{root, filepath.Join(root, "docs")} {
		if err := os.Chmod(d, 0o775); err != nil {
			t.Fatal(err)
		}
	}
	lendAndShare(t, root)
	mustRunAs(t, testAgent, root, "sh", "-c", "chgrp "+strconv.Itoa(testAgent)+" docs && chmod g+s docs")
	mustRunAs(t, testOwner, root, "sh", "-c", "umask 002; mkdir docs/fresh")
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(root, "docs", "fresh"), &st); err != nil || st.Gid != testAgent {
		t.Fatalf("docs/fresh: gid %d, %v; want the agent's group (the setgid parent): the test cannot tell anything", st.Gid, err)
	}
	if out, err := runAs(t, testAgent, root, "sh", "-c", "echo ref: refs/heads/main > docs/fresh/HEAD"); err == nil {
		t.Errorf("the agent wrote in the user's new directory through its group: %s", out)
	}
}

// TestWatchPastMaxPendingWalksAll: a burst of more names than MaxPending
// is shared by one walk of the whole tree, nothing left out.
func TestWatchPastMaxPendingWalksAll(t *testing.T) {
	needRoot(t)
	root := ownedTree(t, map[string]string{"README": "r\n"})
	lendAndShare(t, root)
	w, err := Watch(root, testIDs, WatchOptions{MaxPending: 2, Debounce: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	mustRunAs(t, testOwner, root, "sh", "-c", "umask 022; for i in 1 2 3 4 5 6; do echo $i > f$i; done; mkdir d && echo x > d/x")
	eventually(t, "the agent may write every file the user made", func() bool {
		_, err := runAs(t, testAgent, root, "sh", "-c", "for i in 1 2 3 4 5 6; do echo a >> f$i || exit 1; done; echo a >> d/x")
		return err == nil
	})
}

// TestWatchSettleSharesAtOnce: Settle returns once what the user made
// before it is shared, without waiting for the debounce (here far longer
// than the test); it leaves no marker behind, and fails on a closed
// watcher. Without Settle the file would be shared only after a minute.
func TestWatchSettleSharesAtOnce(t *testing.T) {
	needRoot(t)
	root := ownedTree(t, map[string]string{"README": "r\n", "docs/a.md": "a\n"})
	lendAndShare(t, root)
	settleDir := t.TempDir()
	fds := openFds(t)
	w, err := Watch(root, testIDs, WatchOptions{Debounce: 6 * time.Second, SettleDir: settleDir,
		OnError: func(err error) { t.Errorf("watcher: %v", err) }})
	if err != nil {
		t.Fatal(err)
	}
	agentMay := func(cmd string) bool {
		_, err := runAs(t, testAgent, root, "sh", "-c", cmd)
		return err == nil
	}
	for i, cmd := range []string{
		"umask 022; echo saved > docs/new.md",
		"umask 022; mkdir -p fresh/deep && echo f > fresh/deep/f && echo s > docs/a.swp && mv docs/a.swp docs/a.md",
	} {
		mustRunAs(t, testOwner, root, "sh", "-c", cmd)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		t0 := time.Now()
		err := w.Settle(ctx)
		cancel()
		if err != nil {
			t.Fatalf("Settle %d: %v", i, err)
		}
		if took := time.Since(t0); took > 5*time.Second {
			t.Errorf("Settle %d took %v: it waited for the debounce", i, took)
		}
	}
	for _, cmd := range []string{"cat docs/new.md", "echo x >> docs/new.md", "echo x >> docs/a.md", "echo x >> fresh/deep/f", "touch fresh/deep/g"} {
		if !agentMay(cmd) {
			t.Errorf("right after Settle the agent may not %s", cmd)
		}
	}
	if ents, err := os.ReadDir(settleDir); err != nil || len(ents) != 1 {
		t.Errorf("the settle directory holds %v (%v), want the watcher's own directory only", ents, err)
	} else if markers, _ := os.ReadDir(filepath.Join(settleDir, ents[0].Name())); len(markers) != 0 {
		t.Errorf("Settle left markers: %v", markers)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(settleDir); len(ents) != 0 {
		t.Errorf("Close left %v in the settle directory", ents)
	}
	if got := openFds(t); got != fds {
		t.Errorf("%d descriptors open after Close, %d before Watch", got, fds)
	}
	if err := w.Settle(context.Background()); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Settle after Close = %v, want an error saying it is closed", err)
	}
}
