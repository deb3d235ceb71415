package integration

import (
	"bufio"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/internal/testimage"
	"github.com/ohd-dev/ohd/pkg/store"
)

// busyAgent runs, in c's container, an agent that every 200 ms writes
// last.txt (the iteration's number) and commits it, and reports each step
// on its standard output as it is done ("wrote N", "committed N"), read
// here as it arrives. Each report that arrived before a removal returned
// is work made before it: the removal must keep it.
type busyAgent struct {
	mu        sync.Mutex
	wrote     int // last number written
	committed int // last number committed
	cmd       *exec.Cmd
}

func startBusyAgent(t *testing.T, b backend, d *daemon, c store.Conversation) *busyAgent {
	t.Helper()
	script := `cd ` + c.Worktree + ` && n=0; while :; do n=$((n+1)); echo $n > last.txt; echo "wrote $n"; ` +
		`git add last.txt && git -c user.name=a -c user.email=a@x commit -q -m "c$n" && echo "committed $n"; sleep 0.2; done`
	a := &busyAgent{cmd: b.execCmd(d, c, "sh", "-c", script)}
	out, err := a.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.cmd.Process.Kill(); _ = a.cmd.Wait() })
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			what, num, _ := strings.Cut(sc.Text(), " ")
			n, _ := strconv.Atoi(num)
			a.mu.Lock()
			switch what {
			case "wrote":
				a.wrote = n
			case "committed":
				a.committed = n
			}
			a.mu.Unlock()
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for a.made() < 3 {
		if time.Now().After(deadline) {
			t.Fatal("the busy agent made no commit in 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return a
}

func (a *busyAgent) made() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.committed
}

func (a *busyAgent) snapshot() (wrote, committed int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.wrote, a.committed
}

// checkKept checks that what the removal of c kept (its branch, or the
// copy kept under refs/ohd/kept, and its snapshot) holds every commit the
// agent reported before the removal returned, one per number from 1, and
// a last.txt at least as new as the last one it reported writing.
func checkKept(t *testing.T, d *daemon, repo string, c store.Conversation, wrote, committed int) {
	t.Helper()
	var after store.Conversation
	d.ohctlJSON(&after, "show", c.ID)
	if after.State != store.StateDeleted || after.Removal == nil || !after.Removal.Done {
		t.Fatalf("the removal did not finish: %s %+v", after.State, after.Removal)
	}
	tip := "refs/heads/" + c.Branch
	for _, k := range after.Removal.Kept {
		if strings.HasSuffix(k, "/heads/"+c.Branch) {
			tip = k
		}
	}
	msgs := strings.Fields(testenv.Git(t, repo, "log", "--format=%s", c.StartCommit+".."+tip))
	if len(msgs) < committed {
		t.Errorf("the kept branch has %d commits; the agent had reported %d before the removal returned", len(msgs), committed)
	}
	for i, m := range msgs { // newest first: c<N> ... c1
		if want := "c" + strconv.Itoa(len(msgs)-i); m != want {
			t.Errorf("kept commit %d is %q, want %q: a commit is missing", len(msgs)-i, m, want)
			break
		}
	}
	where := tip
	if after.Removal.SnapshotRef != "" {
		where = after.Removal.SnapshotRef
	}
	got, err := testenv.GitOutput(repo, "show", where+":last.txt")
	if err == nil && strings.TrimSpace(got) == "" {
		// The freeze caught the shell between truncating last.txt and
		// writing the next number: the last complete write is the one
		// committed before it (the image has no mv for an atomic write).
		where = tip
		got, err = testenv.GitOutput(repo, "show", where+":last.txt")
	}
	n, _ := strconv.Atoi(strings.TrimSpace(got))
	if err != nil || n < wrote {
		t.Errorf("kept last.txt = %q (%v) in %s; the agent had written %d before the removal returned", got, err, where, wrote)
	}
	t.Logf("kept %d commits and last.txt %d; before the removal returned the agent had committed %d and written %d", len(msgs), n, committed, wrote)
}

// TestBackendRemovalLosesNothingMadeBeforeItReturns (issue 19, acceptance 5): an
// agent that commits and writes a file every 200 ms keeps doing so across
// `ohctl rm` and across the conversation API's DELETE; everything it made
// before the removal returned is in what was kept. A removal that saved
// while the agent ran, then stopped it, lost the agent's last seconds.
//
// On both backends (the seed's "no work lost"): the agent is stopped in
// its own container, which a pod allows as a container does.
func TestBackendRemovalLosesNothingMadeBeforeItReturns(t *testing.T) {
	eachBackend(t, removalLosesNothingMadeBeforeItReturns)
}

func removalLosesNothingMadeBeforeItReturns(t *testing.T, b backend) {
	d := b.daemon(t)
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	for _, via := range []string{"ohctl rm", "API DELETE"} {
		t.Run(strings.ReplaceAll(via, " ", "-"), func(t *testing.T) {
			var c store.Conversation
			d.ohctlJSON(&c, "create", "--repo", repo, "--worktree")
			a := startBusyAgent(t, b, d, c)
			if via == "ohctl rm" {
				d.ohctl("rm", c.ID)
			} else if r := d.call("DELETE", "/api/conversations/"+c.ID, nil); r.Status != 200 {
				t.Fatalf("DELETE = %d %s", r.Status, r.Body)
			}
			wrote, committed := a.snapshot()
			checkKept(t, d, repo, c, wrote, committed)
			// The agent was stopped in its own container (ohctl view
			// freeze), not by the engine's pause and a sandbox: the
			// fallback costs a container start.
			if strings.Contains(d.logs.String(), "saving the work in the conversation's container failed") {
				t.Errorf("the removal fell back to pausing the container:\n%s", tail(d.logs.String(), 20))
			}
		})
	}
}

// TestBackendRemovalThatCannotSaveChangesNothing (issue 19, acceptance 6): with
// the repository's file system full, and with a view the host's gc
// corrupted, `ohctl rm` fails before anything is torn down: the container
// runs and answers, the broker and the worktree stay, and ls and show say
// `removal failed: <why>` with how to get the work out.
func TestBackendRemovalThatCannotSaveChangesNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		d := b.daemon(t)
		check := func(t *testing.T, c store.Conversation, wantWhy string) {
			t.Helper()
			out, err := d.ohctlErr("rm", c.ID)
			if err == nil {
				t.Fatalf("rm succeeded: %s", out)
			}
			msg := out + err.Error()
			for _, want := range []string{"removal failed:", wantWhy, "nothing was removed", "--discard"} {
				if !strings.Contains(strings.ToLower(msg), strings.ToLower(want)) {
					t.Errorf("rm's error lacks %q:\n%s", want, msg)
				}
			}
			var after store.Conversation
			d.ohctlJSON(&after, "show", c.ID)
			sameContainer := after.ContainerID == c.ContainerID
			if b.name == "kubernetes" {
				// By design: Kubernetes cannot pause a pod, so the save's
				// second try (through a sandbox) stopped it, and the failed
				// removal started the conversation again in a new pod.
				sameContainer = after.ContainerID != "" && b.running(t, after.ContainerID)
			}
			if after.State != store.StateRunning || !sameContainer || after.Removal != nil {
				t.Errorf("after a failed removal: state %s, container %s (was %s), removal %+v", after.State, shortID(after.ContainerID), shortID(c.ContainerID), after.Removal)
			}
			for _, p := range []string{c.Worktree, filepath.Join(c.BrokerDir, "broker.sock")} {
				if _, err := os.Stat(p); err != nil {
					t.Errorf("after a failed removal %s is gone: %v", p, err)
				}
			}
			if got := d.inside(c, "echo alive"); got != "alive" {
				t.Errorf("the conversation's container does not answer after the failed removal: %q", got)
			}
			if r := d.call("GET", "/api/conversations/"+c.ID, nil); r.Status != 200 {
				t.Errorf("the conversation API after the failed removal: %d %s", r.Status, r.Body)
			}
			for _, cmd := range [][]string{{"ls"}, {"show", c.ID}} {
				if out := d.ohctl(cmd...); !strings.Contains(out, "removal failed: ") || !strings.Contains(strings.ToLower(out), strings.ToLower(wantWhy)) {
					t.Errorf("ohctl %s does not say why the removal failed:\n%s", cmd[0], out)
				}
			}
		}

		t.Run("repository-file-system-full", func(t *testing.T) {
			// The repository on a small file system of its own, then filled.
			mnt := testenv.TempDir(t)
			if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=4m", "ohd-test-full", mnt).CombinedOutput(); err != nil {
				t.Fatalf("mount a tmpfs (the test runs as root): %v %s", err, out)
			}
			t.Cleanup(func() { _ = exec.Command("umount", "-l", mnt).Run() })
			repo := filepath.Join(mnt, "repo")
			testenv.Git(t, mnt, "init", "-q", "-b", "main", repo)
			testenv.WriteFile(t, filepath.Join(repo, "README.md"), "hello\n")
			testenv.Git(t, repo, "add", "-A")
			testenv.Git(t, repo, "-c", "user.name=a", "-c", "user.email=a@x", "commit", "-q", "-m", "first")
			var c store.Conversation
			d.ohctlJSON(&c, "create", "--repo", repo, "--worktree")
			// Work the host lacks: an unpublished side branch and
			// uncommitted, incompressible files (the worktree lives under
			// ohd's state directory, not on the full file system).
			random := func(name string) {
				b := make([]byte, 300_000)
				if _, err := rand.Read(b); err != nil {
					t.Fatal(err)
				}
				p := filepath.Join(c.Worktree, name)
				if err := os.WriteFile(p, b, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Chown(p, c.UID, c.GID); err != nil {
					t.Fatal(err)
				}
			}
			random("big.bin")
			d.inside(c, "git switch -q -c side && git add big.bin && git -c user.name=a -c user.email=a@x commit -q -m big")
			random("more.bin")
			// What the user makes is the agent's to read once ohd's watcher
			// shared it, milliseconds later (the save reads as the agent); a
			// removal in that window fails on it and changes nothing.
			readable := func() bool {
				code, _ := d.execIn(c.ID, "sh", "-c", "cd "+c.Worktree+" && : < more.bin")
				return code == 0
			}
			for deadline := time.Now().Add(30 * time.Second); !readable(); time.Sleep(100 * time.Millisecond) {
				if time.Now().After(deadline) {
					var st syscall.Stat_t
					_ = syscall.Stat(filepath.Join(c.Worktree, "more.bin"), &st)
					acl := make([]byte, 256)
					n, err := syscall.Getxattr(filepath.Join(c.Worktree, "more.bin"), "system.posix_acl_access", acl)
					t.Fatalf("the agent cannot read the user's new file after 30 s: uid %d mode %o acl %x (%v)\n%s", st.Uid, st.Mode, acl[:max(n, 0)], err, grepLines(d.logs.String(), "watch", "shar"))
				}
			}
			fill, err := os.Create(filepath.Join(mnt, "fill"))
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 64<<10)
			for {
				if _, err := fill.Write(buf); err != nil {
					break
				}
			}
			fill.Close()
			check(t, c, "no space left on device") // git's or ohd's own write into the quarantine
			// Room again: the same removal now saves everything.
			if err := os.Remove(filepath.Join(mnt, "fill")); err != nil {
				t.Fatal(err)
			}
			var rm store.Conversation
			d.ohctlJSON(&rm, "rm", c.ID)
			if rm.State != store.StateDeleted || rm.Removal == nil || rm.Removal.SnapshotRef == "" || len(rm.Removal.Kept) == 0 {
				t.Errorf("the removal after room was made: %s %+v", rm.State, rm.Removal)
			}
		})

		t.Run("view-corrupted-by-the-host-gc", func(t *testing.T) {
			// An agent branch on a host commit the host then drops: the view
			// borrows the host's objects, so the host's gc leaves it unable
			// to read its own branch.
			repo := testenv.NewRepo(t, testenv.RepoOptions{})
			testenv.Git(t, repo, "switch", "-q", "-c", "doomed")
			testenv.WriteFile(t, filepath.Join(repo, "doomed.txt"), "soon gone\n")
			testenv.Git(t, repo, "add", "-A")
			testenv.Git(t, repo, "-c", "user.name=a", "-c", "user.email=a@x", "commit", "-q", "-m", "doomed")
			doomed := testenv.Git(t, repo, "rev-parse", "HEAD")
			testenv.Git(t, repo, "switch", "-q", "main")
			var c store.Conversation
			d.ohctlJSON(&c, "create", "--repo", repo, "--worktree")
			d.inside(c, "git switch -q -c agent "+doomed+" && echo mine > mine.txt && git add mine.txt && git -c user.name=a -c user.email=a@x commit -q -m mine")
			testenv.Git(t, repo, "branch", "-D", "doomed")
			testenv.Git(t, repo, "reflog", "expire", "--expire=now", "--all")
			testenv.Git(t, repo, "gc", "-q", "--prune=now")
			if _, err := testenv.GitOutput(repo, "cat-file", "-e", doomed); err == nil {
				// The host keeps what the view needs (acceptance 7's mirror of
				// the view's refs): the removal then succeeds and keeps it.
				var rm store.Conversation
				d.ohctlJSON(&rm, "rm", c.ID)
				if rm.State != store.StateDeleted || len(rm.Removal.Kept) == 0 {
					t.Errorf("the removal of a view whose commits the host kept: %s %+v", rm.State, rm.Removal)
				}
				return
			}
			check(t, c, "")
		})
	})
}

// TestBackendImageRefusingTheArgumentsNamesTheContract (issue 19, acceptance 9,
// its error half): an image made for an earlier ohd, whose inner server
// takes no arguments (the stand-in up to 8b00fe3 exited 2 on any), fails
// the create with a message naming what ohd asks of the image.
func TestBackendImageRefusingTheArgumentsNamesTheContract(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		testenv.RequireDocker(t)
		img := testimage.Ensure(t)
		dir := testenv.TempDir(t)
		testenv.WriteFile(t, filepath.Join(dir, "Dockerfile"), "FROM "+img+"\n"+
			`ENTRYPOINT ["/bin/sh", "-c", "if [ $# -gt 0 ]; then echo 'usage: standin (configured by environment)' >&2; exit 2; fi; exec /usr/local/bin/standin", "standin"]`+"\n")
		tag := "ohd-test-old-args:" + strings.ToLower(store.NewID()[:8])
		if out, err := dockerCmd("build", "-q", "-t", tag, dir).CombinedOutput(); err != nil {
			t.Fatalf("docker build: %v\n%s", err, out)
		}
		t.Cleanup(func() { _ = dockerCmd("rmi", "-f", tag).Run() })
		b.loadImage(t, tag)
		d := b.daemon(t, "--image", tag, "--ready-timeout", "30s")
		repo := testenv.NewRepo(t, testenv.RepoOptions{})
		out, err := d.ohctlErr("create", "--repo", repo, "--worktree")
		if err == nil {
			t.Fatalf("create with an image that refuses the arguments succeeded: %s", out)
		}
		msg := out + err.Error()
		for _, want := range []string{"--host 0.0.0.0 --port 8000", "must run the OpenHands agent server", tag, "usage: standin"} {
			if !strings.Contains(msg, want) {
				t.Errorf("the create's error lacks %q:\n%s", want, msg)
			}
		}
	})
}

// grepLines returns the lines of s holding any of pats.
func grepLines(s string, pats ...string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		for _, p := range pats {
			if strings.Contains(l, p) {
				keep = append(keep, l)
				break
			}
		}
	}
	return strings.Join(keep, "\n")
}

// TestBackendRemovalRightAfterTheUserSavedFiles: the user saves files in
// the conversation's worktree (private ones, 0600, as editors make their
// backups) and runs `ohctl rm` at once. The watcher shares what the user
// makes some milliseconds later, and passes nothing once a removal is
// marked, so a removal that came first failed on those files (its save
// reads the tree as the agent). The removal now asks the watcher to share
// what is queued before it marks the conversation (Watcher.Settle): it
// succeeds, and the snapshot holds every file.
func TestBackendRemovalRightAfterTheUserSavedFiles(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		d := b.daemon(t)
		repo := testenv.NewRepo(t, testenv.RepoOptions{Owner: &testenv.Owner{UID: 1000, GID: 1000}})
		var c store.Conversation
		d.ohctlJSON(&c, "create", "--repo", repo, "--worktree")
		// A burst, so that the watcher's pass is still to come when the
		// removal arrives.
		var names []string
		for i := range 200 {
			name := filepath.Join("saved", "d"+strconv.Itoa(i%10), "f"+strconv.Itoa(i)+".txt")
			p := filepath.Join(c.Worktree, name)
			if i < 10 {
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Chown(filepath.Dir(p), 1000, 1000); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(p, []byte("saved "+strconv.Itoa(i)+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(p, 1000, 1000); err != nil {
				t.Fatal(err)
			}
			names = append(names, name)
		}
		if err := os.Chown(filepath.Join(c.Worktree, "saved"), 1000, 1000); err != nil {
			t.Fatal(err)
		}
		out, err := d.ohctlErr("rm", c.ID)
		if err != nil {
			t.Fatalf("rm right after the user saved files: %v\n%s\n%s", err, out, grepLines(d.logs.String(), "watch", "shar", "settle"))
		}
		var rm store.Conversation
		d.ohctlJSON(&rm, "show", c.ID)
		if rm.State != store.StateDeleted || rm.Removal == nil || rm.Removal.SnapshotRef == "" {
			t.Fatalf("after rm: state %s, removal %+v", rm.State, rm.Removal)
		}
		for _, name := range []string{names[0], names[len(names)-1]} {
			got := testenv.Git(t, repo, "-c", "safe.directory=*", "show", rm.Removal.SnapshotRef+":"+filepath.ToSlash(name))
			if !strings.HasPrefix(got, "saved ") {
				t.Errorf("the snapshot's %s = %q", name, got)
			}
		}
	})
}
