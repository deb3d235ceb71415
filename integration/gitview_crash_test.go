package integration

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/store"
)

// TestBackendGitViewCrashDuringPublishing kills ohd (SIGKILL) at random moments,
// at least 30 times, while the agents of three conversations commit
// every 150 ms, and a few times leaves the lock file a kill inside `git
// update-ref` leaves (refs/heads/openhands/<id>.lock, older than the next
// ohd). After each restart the host branches catch up; at the end every
// host branch reaches its view's tip within seconds, nothing was kept
// under refs/ohd/kept (no real foreign move happened), no publish
// conflict is recorded, and the host's fsck is clean (issue 19,
// acceptance 4).
func TestBackendGitViewCrashDuringPublishing(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		d := b.daemon(t)
		repo := testenv.NewRepo(t, testenv.RepoOptions{})
		kills := 32
		if n, err := strconv.Atoi(os.Getenv("OHD_CRASH_KILLS")); err == nil && n > 0 {
			kills = n
		}
		var convs []store.Conversation
		for range 3 {
			var c store.Conversation
			d.ohctlJSON(&c, "create", "--repo", repo, "--worktree")
			convs = append(convs, c)
		}
		// The agents commit on their own, through the engine (not ohd,
		// which dies): a file changed and committed every 150 ms (the test image
		// has no sleep, so the loop runs here).
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for _, c := range convs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					case <-time.After(150 * time.Millisecond):
					}
					script := fmt.Sprintf("cd %s && echo %d > n.txt && git add n.txt && git -c user.name=a -c user.email=a@x commit -q -m c%d", c.Worktree, i, i)
					if out, err := b.rawExec(t, c.ContainerID, "sh", "-c", script); err != nil {
						t.Errorf("the agent's commit %d: %v %s", i, err, out)
						return
					}
				}
			}()
		}
		seed := rand.Uint64()
		rng := rand.New(rand.NewPCG(seed, 19))
		t.Logf("seed %d", seed)
		planted := 0
		for k := range kills {
			time.Sleep(time.Duration(100+rng.IntN(900)) * time.Millisecond)
			d.kill()
			if k%8 == 3 {
				// What a kill inside git update-ref leaves: the branch's lock.
				c := convs[rng.IntN(len(convs))]
				lock := filepath.Join(repo, ".git", "refs", "heads", c.Branch+".lock")
				testenv.WriteFile(t, lock, "0000000000000000000000000000000000000000\n")
				old := time.Now().Add(-time.Minute)
				if err := os.Chtimes(lock, old, old); err != nil {
					t.Fatal(err)
				}
				planted++
			}
			d.start()
		}
		close(stop)
		wg.Wait()
		for _, c := range convs {
			tip := d.inside(c, "git rev-parse HEAD")
			t0 := time.Now()
			waitHostRef(t, repo, "refs/heads/"+c.Branch, tip, 10*time.Second)
			t.Logf("%s: host branch reached the view's tip %s %v after the last restart's wait", c.ID, tip[:12], time.Since(t0).Round(time.Millisecond))
			n := d.inside(c, "git rev-list --count "+c.StartCommit+"..HEAD")
			t.Logf("%s: %s commits published through %d kills", c.ID, n, kills)
			if kept := strings.TrimSpace(testenv.Git(t, repo, "-c", "safe.directory=*", "for-each-ref", "refs/ohd/kept/"+c.ID+"/")); kept != "" {
				t.Errorf("%s: kept without a foreign move:\n%s", c.ID, kept)
			}
			var got store.Conversation
			d.ohctlJSON(&got, "show", c.ID)
			if got.PublishConflict != "" || got.PublishError != "" {
				t.Errorf("%s: publish conflict %q, error %q after the kills", c.ID, got.PublishConflict, got.PublishError)
			}
			if _, err := os.Stat(filepath.Join(repo, ".git", "refs", "heads", c.Branch+".lock")); err == nil {
				t.Errorf("%s: the branch's lock file is still there", c.ID)
			}
		}
		testenv.Git(t, repo, "-c", "safe.directory=*", "fsck", "--strict", "--no-dangling")
		t.Logf("%d kills, %d planted locks", kills, planted)
	})
}

// TestBackendGitViewCrashAfterRefMove: ohd is killed right after it moved the
// host branch and before it recorded the move (failpoint
// publish/after-ref). The next ohd takes the host branch for its own
// publish (the commit was recorded as about to be published): the next
// commit is published on top, nothing is kept, no conflict is reported.
func TestBackendGitViewCrashAfterRefMove(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		dirs := newDirs(t)
		repo := testenv.NewRepo(t, testenv.RepoOptions{})
		d := b.start(t, daemonOptions{Failpoints: true, Dirs: &dirs})
		var c store.Conversation
		d.ohctlJSON(&c, "create", "--repo", repo, "--worktree")
		for round := range 3 {
			d.stop()
			d.opts.Env = []string{"OHD_FAILPOINTS=publish/after-ref"}
			d.start()
			tip := d.inside(c, fmt.Sprintf("git -c user.name=a -c user.email=a@x commit -q --allow-empty -m 'round %d' && git rev-parse HEAD", round))
			if !d.waitExit(60e9) {
				t.Fatalf("round %d: ohd did not die at publish/after-ref", round)
			}
			if got := strings.TrimSpace(testenv.Git(t, repo, "-c", "safe.directory=*", "rev-parse", "refs/heads/"+c.Branch)); got != tip {
				t.Fatalf("round %d: host branch %s, want %s (the failpoint is after the ref move)", round, got, tip)
			}
			d.opts.Env = nil
			d.start()
			next := d.inside(c, fmt.Sprintf("git -c user.name=a -c user.email=a@x commit -q --allow-empty -m 'after %d' && git rev-parse HEAD", round))
			waitHostRef(t, repo, "refs/heads/"+c.Branch, next, 10*time.Second)
		}
		if kept := strings.TrimSpace(testenv.Git(t, repo, "-c", "safe.directory=*", "for-each-ref", "refs/ohd/kept/")); kept != "" {
			t.Errorf("kept without a foreign move:\n%s", kept)
		}
		var got store.Conversation
		d.ohctlJSON(&got, "show", c.ID)
		if got.PublishConflict != "" || got.PublishError != "" {
			t.Errorf("publish conflict %q, error %q", got.PublishConflict, got.PublishError)
		}
	})
}
