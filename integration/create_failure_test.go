package integration

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/store"
)

// createFailure is one way an API create fails.
type createFailure struct {
	name string
	// step is the failed step the record must name; "" accepts any (a
	// client that gives up at a time of its own).
	step string
	// status is the answer the client must get; 0 when it is gone.
	status int
	body   map[string]any
	// before runs before the create (with the conversation's id).
	before func(t *testing.T, d *daemon, id string)
	// abandon, when set, runs while the create is in flight and returns
	// when the client should give up.
	abandon func(t *testing.T, d *daemon, id string)
	// timeout, when set, is the client's own deadline for the create.
	timeout time.Duration
}

// TestAPICreateFailuresFinishTheRecord: however an API create fails (an
// inner server that refuses it with a 5xx, dies under it, or holds it
// while the client disconnects or times out; a client that gives up while
// the container gets ready; a broker that cannot open), the undo finishes
// the record: failed, naming the step, no undo pending, nothing left, and
// the API shows no such conversation, all without a restart of ohd.
func TestBackendAPICreateFailuresFinishTheRecord(t *testing.T) {
	eachBackend(t, testAPICreateFailuresFinishTheRecord)
}

func testAPICreateFailuresFinishTheRecord(t *testing.T, b backend) {
	groups := []struct {
		name  string
		args  []string
		env   []string
		retry bool // a retried create can succeed
		cases []createFailure
	}{
		{name: "ready", retry: true, cases: []createFailure{
			{name: "inner answers 5xx", step: "forward", status: 503, body: map[string]any{"standin_reject": 503}},
			{name: "inner dies on the create", step: "forward", status: 502, body: map[string]any{"standin_crash": true}},
			{name: "client disconnects during the forward", step: "forward", body: map[string]any{"standin_hold": "1h"}, abandon: waitHeldCreate},
			{name: "client gives up early", body: map[string]any{"standin_hold": "1h"}, timeout: 2 * time.Second},
			{name: "broker cannot open", step: "broker", status: 500, before: blockBrokerDir},
		}},
		{name: "never ready", env: []string{"STANDIN_HEALTH_DELAY=1h"},
			args: []string{"--forward-env", "STANDIN_HEALTH_DELAY", "--ready-timeout", "10m"},
			cases: []createFailure{
				{name: "client disconnects while the container gets ready", step: "container", abandon: waitContainerOf},
			}},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			d := b.start(t, daemonOptions{Args: g.args, Env: g.env})
			for _, tc := range g.cases {
				t.Run(tc.name, func(t *testing.T) { runCreateFailure(t, d, tc, g.retry) })
			}
		})
	}
}

func runCreateFailure(t *testing.T, d *daemon, tc createFailure, retry bool) {
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	id := store.NewID()
	if tc.before != nil {
		tc.before(t, d, id)
	}
	body := map[string]any{"workspace": map[string]any{"working_dir": repo}, "worktree": true, "conversation_id": id}
	for k, v := range tc.body {
		body[k] = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if tc.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, tc.timeout)
		defer cancel()
	}
	if tc.abandon != nil {
		go func() {
			tc.abandon(t, d, id)
			cancel()
		}()
	}
	r, err := newAPIClient(d, 1).do(ctx, "POST", "/api/conversations", mustJSON(body))
	switch {
	case tc.status == 0 && err == nil:
		t.Fatalf("create = %d %s, want the client to give up first", r.Status, r.Body)
	case tc.status != 0 && (err != nil || r.Status != tc.status):
		t.Fatalf("create = %d %s, %v; want %d", r.Status, r.Body, err, tc.status)
	}
	var c store.Conversation
	if tc.status != 0 {
		// The answer comes after the undo: the record is finished by then.
		d.ohctlJSON(&c, "show", id)
	} else {
		// ohd goes on after the client left; the undo finishes by itself.
		waitFor(t, 2*time.Minute, "the abandoned create's record to finish", func() bool {
			d.ohctlJSON(&c, "show", id)
			return c.State != store.StateProvisioning
		})
	}
	if c.State != store.StateFailed || c.UndoPending || (tc.step != "" && c.FailedStep != tc.step) {
		t.Errorf("record after the failed create: state %s, step %q, undo pending %v, error %q; want failed at step %q with the undo done",
			c.State, c.FailedStep, c.UndoPending, c.Error, tc.step)
	}
	assertNothingLeftOf(t, d, repo, id)
	if r := d.call("GET", "/api/conversations/"+id, nil); r.Status != 404 {
		t.Errorf("GET the failed conversation = %d %s, want 404", r.Status, r.Body)
	}
	// A retry with the same id gets a fresh attempt, which succeeds.
	delete(body, "standin_reject")
	delete(body, "standin_crash")
	delete(body, "standin_hold")
	if retry {
		if r := d.call("POST", "/api/conversations", body); r.Status != 201 {
			t.Errorf("retried create = %d %s, want 201", r.Status, r.Body)
		} else {
			d.call("DELETE", "/api/conversations/"+id, nil)
		}
	}
}

// assertNothingLeftOf checks conversation id left no container, socket
// directory, worktree, branch or worktree folder.
func assertNothingLeftOf(t *testing.T, d *daemon, repo, id string) {
	t.Helper()
	if left := backendOf(d).ofConversation(t, id); len(left) > 0 {
		t.Errorf("containers left: %v", left)
	}
	if _, err := os.Lstat(filepath.Join(d.dirs.Run, "conversations", id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket dir left: %v", err)
	}
	if got := porcelain(t, repo); len(got) != 1 {
		t.Errorf("worktrees left: %v", got)
	}
	if refs := testenv.Git(t, repo, "for-each-ref", "--format=%(refname)"); strings.Contains(refs, "openhands/") {
		t.Errorf("branches left:\n%s", refs)
	}
	if _, err := os.Lstat(filepath.Join(d.dirs.Worktrees, id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("worktree folder left: %v", err)
	}
}

// waitHeldCreate returns once the conversation's inner server holds the
// create (standin_hold), so the client gives up in the forward step.
func waitHeldCreate(t *testing.T, d *daemon, id string) {
	b := backendOf(d)
	waitForQuiet(2*time.Minute, func() bool {
		for _, c := range b.ofConversation(t, id) {
			// Only a running container has a log to read (a pod being
			// created has none yet, and reading it fails the test).
			if b.running(t, c) && strings.Contains(b.output(t, c), "holding the create") {
				return true
			}
		}
		return false
	})
}

// waitContainerOf returns once the conversation's container runs (and
// its inner server is not ready: the readiness wait is under way).
func waitContainerOf(t *testing.T, d *daemon, id string) {
	b := backendOf(d)
	waitForQuiet(2*time.Minute, func() bool {
		for _, c := range b.ofConversation(t, id) {
			if b.running(t, c) {
				return true
			}
		}
		return false
	})
}

// waitForQuiet is waitFor for goroutines: it gives up silently (the
// create's own checks then fail).
func waitForQuiet(timeout time.Duration, cond func() bool) {
	deadline := time.Now().Add(timeout)
	for !cond() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
}

// blockBrokerDir puts a file where the conversation's socket directory
// goes, so the broker step fails.
func blockBrokerDir(t *testing.T, d *daemon, id string) {
	dir := filepath.Join(d.dirs.Run, "conversations")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, id), []byte("in the way\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}
