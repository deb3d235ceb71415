package integration

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/control"
	"github.com/ohd-dev/ohd/pkg/store"
)

// TestBackendPruneNeverDeletesWork: prune removes stopped conversations (after a
// snapshot), purges ended records and orphans, honours --dry-run and
// --older-than, and only reports worktree folders, branches and
// snapshots.
func TestBackendPruneNeverDeletesWork(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		d := b.daemon(t)
		repo := testenv.NewRepo(t, testenv.RepoOptions{})
		var live, stopped store.Conversation
		d.ohctlJSON(&live, "create", "--repo", repo, "--worktree")
		d.ohctlJSON(&stopped, "create", "--repo", repo, "--worktree")
		testenv.WriteFile(t, filepath.Join(stopped.Worktree, "work.txt"), "unsaved\n")
		b.kill(t, stopped.ContainerID)
		waitFor(t, 10*time.Second, "the conversation to stop", func() bool { return d.record(stopped.ID).State == store.StateStopped })
		// A failed record, and a folder in the worktree root nobody owns.
		if r := d.call("POST", "/api/conversations", map[string]any{"workspace": map[string]any{"working_dir": brokenRepo(t)}, "worktree": true}); r.Status < 500 {
			t.Fatalf("broken create = %d", r.Status)
		}
		stray := filepath.Join(d.dirs.Worktrees, store.NewID())
		testenv.WriteFile(t, filepath.Join(stray, "someones-work.txt"), "keep\n")

		var rep control.PruneReport
		d.ohctlJSON(&rep, "prune", "--dry-run")
		kinds := map[string]string{}
		for _, it := range rep.Items {
			if it.Done {
				t.Errorf("dry run did %+v", it)
			}
			kinds[it.Kind+" "+it.ID] = it.Action
		}
		if kinds["conversation "+stopped.ID] != "remove" || kinds["worktree-dir "+filepath.Base(stray)] != "keep" {
			t.Errorf("dry run items = %v", kinds)
		}
		if _, ok := kinds["conversation "+live.ID]; ok {
			t.Error("prune would remove a running conversation")
		}
		if d.record(stopped.ID).State != store.StateStopped {
			t.Fatal("the dry run changed the stopped conversation")
		}
		// Recently active: --older-than 1h leaves it.
		d.ohctlJSON(&rep, "prune", "--older-than", "1h")
		for _, it := range rep.Items {
			if it.ID == stopped.ID && it.Kind == "conversation" {
				t.Errorf("--older-than 1h pruned a conversation active seconds ago: %+v", it)
			}
		}
		out := d.ohctl("prune")
		for _, want := range []string{stopped.ID, "keep", "worktree-dir"} {
			if !strings.Contains(out, want) {
				t.Errorf("prune output lacks %q:\n%s", want, out)
			}
		}
		if got := testenv.Git(t, repo, "show", "refs/ohd/snapshots/"+stopped.ID+":work.txt"); got != "unsaved" {
			t.Errorf("the pruned conversation's work is not in its snapshot: %q", got)
		}
		if _, err := os.Stat(filepath.Join(stray, "someones-work.txt")); err != nil {
			t.Errorf("prune deleted a folder in the worktree root: %v", err)
		}
		if d.record(live.ID).State != store.StateRunning {
			t.Error("prune touched the running conversation")
		}
		var all []store.Conversation
		d.ohctlJSON(&all, "ls", "--all")
		for _, c := range all {
			if c.State == store.StateFailed {
				t.Errorf("the failed record %s was not purged", c.ID)
			}
		}
		d.ohctl("rm", live.ID)
	})
}

// TestBackendLogsAndExec: ohctl logs shows the container's output and -f follows
// it; ohctl exec passes the command's exit code through.
func TestBackendLogsAndExec(t *testing.T) {
	eachBackend(t, logsAndExec)
}

func logsAndExec(t *testing.T, b backend) {
	d := b.daemon(t)
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", testenv.NewRepo(t, testenv.RepoOptions{}), "--worktree")
	if out := d.ohctl("logs", c.ID); !strings.Contains(out, "standin") {
		t.Errorf("ohctl logs:\n%s", out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	follow := exec.CommandContext(ctx, built.ohctl, "--socket", d.socket, "logs", "-f", c.ID)
	stdout, _ := follow.StdoutPipe()
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	// A request the inner server logs, after -f started.
	marker := "/api/conversations/" + c.ID + "/echo/followed-" + store.NewID()[:8]
	time.Sleep(200 * time.Millisecond)
	d.call("GET", marker, nil)
	deadline := time.After(20 * time.Second)
	for found := false; !found; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("logs -f ended")
			}
			found = strings.Contains(l, "followed-")
		case <-deadline:
			t.Fatal("logs -f did not show the new request")
		}
	}
	cancel()
	_ = follow.Wait()

	if code, out := d.execIn(c.ID, "sh", "-c", "echo out; echo err >&2; exit 7"); code != 7 || !strings.Contains(out, "out") || !strings.Contains(out, "err") {
		t.Errorf("exec = %d %q, want exit 7 with both streams", code, out)
	}
	d.ohctl("rm", c.ID)
}
