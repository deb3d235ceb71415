package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ohd-dev/ohd/internal/testenv"
)

// TestCreateWaitsForTheRepositoryLock: parallel creates in one repository
// must all succeed (DESIGN §3: worktree metadata mutations are serialized
// by an in-process lock plus a file lock). The load test found that
// worktree's plan ran `git worktree list` outside the repository lock:
// while another create was inside `git worktree add`, its admin dir could
// have an empty commondir (git opens it O_TRUNC, then writes) and the list
// died with "fatal: failed to read .git/worktrees/<name>/commondir", the
// create failing at step worktree. Made deterministic here by holding ohd's
// own lock file (its name is ohd's: repo-<first 16 bytes of sha256(common
// dir)>.lock in <state-dir>/locks), as a concurrent add does, with an
// admin dir half written.
func TestCreateWaitsForTheRepositoryLock(t *testing.T) {
	d := startDaemon(t, daemonOptions{})
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	commonDir := filepath.Join(repo, ".git")
	sum := sha256.Sum256([]byte(commonDir))
	lockPath := filepath.Join(d.dirs.State, "locks", "repo-"+hex.EncodeToString(sum[:16])+".lock")
	if err := os.MkdirAll(filepath.Dir(lockPath), 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	// A worktree add in progress under the lock: admin dir created,
	// commondir opened but not yet written.
	admin := filepath.Join(commonDir, "worktrees", "inflight")
	testenv.WriteFile(t, filepath.Join(admin, "gitdir"), filepath.Join(testenv.TempDir(t), "inflight", ".git")+"\n")
	testenv.WriteFile(t, filepath.Join(admin, "commondir"), "")

	result := make(chan error, 1)
	go func() {
		_, err := d.ohctlErr("create", "--repo", repo, "--worktree")
		result <- err
	}()
	select {
	case err := <-result:
		t.Fatalf("create did not wait for the repository lock held by a worktree add in progress: %v", err)
	case <-time.After(2 * time.Second):
	}
	// The add in progress gives up and cleans up, then releases the lock.
	if err := os.RemoveAll(admin); err != nil {
		t.Fatal(err)
	}
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	if err := <-result; err != nil {
		t.Fatalf("create after the lock was released: %v", err)
	}
}
