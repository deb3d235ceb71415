package conversation

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/broker"
	"github.com/ohd-dev/ohd/pkg/masterkey"
	"github.com/ohd-dev/ohd/pkg/runtime"
	"github.com/ohd-dev/ohd/pkg/store"
	"github.com/ohd-dev/ohd/pkg/worktree"
)

type env struct {
	m        *Manager
	st       *store.Store
	runDir   string
	wtRoot   string
	stateDir string
}

// newEnv builds a Manager with the local runtime on real git, a real
// broker and a bbolt file in temp dirs.
func newEnv(t *testing.T) *env {
	t.Helper()
	base := testenv.TempDir(t)
	e := &env{stateDir: filepath.Join(base, "state"), wtRoot: filepath.Join(base, "wt")}
	run, err := os.MkdirTemp("/tmp", "ohdconv-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(run) })
	e.runDir = run
	key, err := masterkey.New(bytes.Repeat([]byte{3}, masterkey.Size))
	if err != nil {
		t.Fatal(err)
	}
	e.st, err = store.Open(filepath.Join(e.stateDir, store.FileName), key, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.st.Close() })
	e.m = e.manager(t, key)
	return e
}

func (e *env) manager(t *testing.T, key *masterkey.Key) *Manager {
	t.Helper()
	wt, err := worktree.New(worktree.Options{Root: e.wtRoot, LockDir: filepath.Join(e.stateDir, "locks")})
	if err != nil {
		t.Fatal(err)
	}
	br, err := broker.New(broker.Options{RuntimeDir: e.runDir, Key: key.Derive("ohd-broker-key-v1"), Backend: Backend{Store: e.st}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = br.Shutdown(context.Background()) })
	m, err := New(Config{Store: e.st, Worktrees: wt, Broker: br, Runtime: runtime.NewLocal(), RuntimeDir: e.runDir})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func TestCreateAndRemoveLocal(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	c, err := e.m.Create(ctx, CreateRequest{Workspace: repo, Worktree: true, Grants: store.Grants{Secrets: []string{"s"}}})
	if err != nil {
		t.Fatal(err)
	}
	if c.State != store.StateRunning || c.Worktree == "" || c.BrokerDir != filepath.Join(e.runDir, "conversations", c.ID) {
		t.Fatalf("Create = %+v", c)
	}
	for _, p := range []string{filepath.Join(c.BrokerDir, "broker.sock"), filepath.Join(c.BrokerDir, "token"), c.Worktree} {
		if !exists(p) {
			t.Errorf("%s missing after create", p)
		}
	}
	if exists(filepath.Join(c.BrokerDir, InnerKeyFile)) {
		t.Error("the local runtime wrote an inner key file: nothing reads it")
	}

	// The broker answers with the conversation's token.
	cl := broker.NewClient(filepath.Join(c.BrokerDir, "broker.sock"), filepath.Join(c.BrokerDir, "token"))
	if _, err := cl.Whoami(ctx); err != nil {
		t.Errorf("Whoami = %v", err)
	}
	// Rotation: the old token file content stops working.
	old, _ := os.ReadFile(filepath.Join(c.BrokerDir, "token"))
	if _, err := e.m.RotateToken(c.ID); err != nil {
		t.Fatal(err)
	}
	if now, _ := os.ReadFile(filepath.Join(c.BrokerDir, "token")); bytes.Equal(old, now) {
		t.Error("RotateToken did not rewrite the token file")
	}
	if _, err := cl.Whoami(ctx); err != nil {
		t.Errorf("Whoami with the rotated token = %v", err)
	}

	r, err := e.m.Remove(ctx, c.ID, RemoveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r.State != store.StateDeleted || !r.Removal.Done || r.Removal.BranchKept || r.Removal.SnapshotRef != "" {
		t.Errorf("Remove of a clean conversation = %+v, want deleted, branch deleted, no snapshot", r.Removal)
	}
	if exists(c.BrokerDir) || exists(c.Worktree) {
		t.Error("broker dir or worktree left after Remove")
	}
	if _, err := e.m.Get(c.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after Remove = %v, want ErrNotFound", err)
	}
	if _, err := e.m.Remove(ctx, c.ID, RemoveOptions{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Remove = %v, want ErrNotFound", err)
	}
	if _, err := e.st.Conversation(c.ID); err != nil {
		t.Errorf("the deleted record is gone: %v", err)
	}
}

func TestCreateFailureUndoesEverything(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	boom := errors.New("inner server said 422")
	_, err := e.m.Create(ctx, CreateRequest{Workspace: repo, Worktree: true, Forward: func(context.Context, store.Conversation, Target) error {
		return boom
	}})
	var se *StepError
	if !errors.As(err, &se) || se.Step != "forward" || !errors.Is(err, boom) {
		t.Fatalf("Create error = %v, want a StepError at forward wrapping the cause", err)
	}
	if !strings.Contains(err.Error(), "step forward failed") {
		t.Errorf("error %q does not name the step", err)
	}
	convs := e.st.Conversations()
	if len(convs) != 1 || convs[0].State != store.StateFailed || convs[0].FailedStep != "forward" {
		t.Fatalf("records = %+v, want one failed at forward", convs)
	}
	if out := testenv.Git(t, repo, "worktree", "list", "--porcelain"); strings.Count(out, "worktree ") != 1 {
		t.Errorf("a worktree is still registered:\n%s", out)
	}
	if refs := testenv.Git(t, repo, "for-each-ref", "--format=%(refname)"); strings.Contains(refs, "openhands/") {
		t.Errorf("the branch is left:\n%s", refs)
	}
	entries, _ := os.ReadDir(filepath.Join(e.runDir, "conversations"))
	if len(entries) != 0 {
		t.Errorf("socket dirs left: %v", entries)
	}
	if entries, _ := os.ReadDir(e.wtRoot); len(entries) != 0 {
		t.Errorf("worktree folders left: %v", entries)
	}
}

func TestCreateRejectsBadInputBeforeAnyRecord(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	for _, tc := range []struct {
		name string
		req  CreateRequest
	}{
		{"relative", CreateRequest{Workspace: "rel/path", Worktree: true}},
		{"missing", CreateRequest{Workspace: filepath.Join(repo, "missing"), Worktree: true}},
		{"file", CreateRequest{Workspace: filepath.Join(repo, "README.md")}},
		{"bad id", CreateRequest{ID: "x", Workspace: repo}},
		{"start point without worktree", CreateRequest{Workspace: repo, StartPoint: "main"}},
		{"bad secret grant", CreateRequest{Workspace: repo, Grants: store.Grants{Secrets: []string{"../x"}}}},
		{"bad git grant", CreateRequest{Workspace: repo, Grants: store.Grants{Git: []string{"https://github.com"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := e.m.Create(ctx, tc.req); !errors.Is(err, ErrInvalid) {
				t.Errorf("Create(%+v) = %v, want ErrInvalid", tc.req, err)
			}
		})
	}
	if n := len(e.st.Conversations()); n != 0 {
		t.Errorf("bad input wrote %d records", n)
	}
}

func TestReconcileAfterCrashes(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	repo := testenv.NewRepo(t, testenv.RepoOptions{})

	// A create that crashed after the worktree step: record provisioning,
	// worktree and broker present.
	crashed, err := e.m.Create(ctx, CreateRequest{Workspace: repo, Worktree: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.UpdateConversation(crashed.ID, func(c *store.Conversation) error {
		c.State = store.StateProvisioning
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// A removal that crashed after it was recorded, with work to keep.
	removing, err := e.m.Create(ctx, CreateRequest{Workspace: repo, Worktree: true})
	if err != nil {
		t.Fatal(err)
	}
	testenv.WriteFile(t, filepath.Join(removing.Worktree, "work.txt"), "keep me\n")
	if _, err := e.st.UpdateConversation(removing.ID, func(c *store.Conversation) error {
		c.Removal = &store.Removal{RequestedAt: time.Now()}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// A live one that must come through untouched.
	live, err := e.m.Create(ctx, CreateRequest{Workspace: repo, Worktree: true})
	if err != nil {
		t.Fatal(err)
	}
	// An orphan socket directory.
	orphan := filepath.Join(e.runDir, "conversations", store.NewID())
	if err := os.MkdirAll(orphan, 0o700); err != nil {
		t.Fatal(err)
	}

	if err := e.m.Reconcile(ctx); err != nil {
		t.Fatalf("Reconcile = %v", err)
	}
	if c, _ := e.st.Conversation(crashed.ID); c.State != store.StateFailed || exists(crashed.Worktree) || exists(crashed.BrokerDir) {
		t.Errorf("interrupted create not undone: state %s, worktree %v, broker %v", c.State, exists(crashed.Worktree), exists(crashed.BrokerDir))
	}
	// Reconcile (before ohd listens) leaves the interrupted removal to the
	// background, which finishes it at once (RunUndoRetries).
	if c, _ := e.st.Conversation(removing.ID); c.State == store.StateDeleted || !exists(removing.Worktree) {
		t.Errorf("reconcile did the interrupted removal itself (%s): ohd would not listen until it is done", c.State)
	}
	e.m.retryRemovals(ctx)
	e.m.retries.Wait() // each retry runs in a goroutine of its own
	c, _ := e.st.Conversation(removing.ID)
	if c.State != store.StateDeleted || c.Removal.SnapshotRef == "" {
		t.Errorf("interrupted removal not finished with a snapshot: %+v", c.Removal)
	} else if got := testenv.Git(t, repo, "show", c.Removal.SnapshotRef+":work.txt"); got != "keep me" {
		t.Errorf("snapshot work.txt = %q", got)
	}
	if c, _ := e.st.Conversation(live.ID); c.State != store.StateRunning || !exists(filepath.Join(live.BrokerDir, "broker.sock")) {
		t.Errorf("live conversation disturbed: %s", c.State)
	}
	if exists(orphan) {
		t.Error("orphan socket directory not removed")
	}
	out := testenv.Git(t, repo, "worktree", "list", "--porcelain")
	if strings.Contains(out, "prunable") || strings.Count(out, "worktree ") != 2 {
		t.Errorf("host registrations after reconcile:\n%s", out)
	}
}

func TestGrantsReachTheBroker(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if err := e.st.SetSecret("api", []byte("v4lue")); err != nil {
		t.Fatal(err)
	}
	c, err := e.m.Create(ctx, CreateRequest{Workspace: testenv.TempDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	cl := broker.NewClient(filepath.Join(c.BrokerDir, "broker.sock"), filepath.Join(c.BrokerDir, "token"))
	if _, err := cl.Secret(ctx, "api"); err == nil {
		t.Fatal("an ungranted secret was answered")
	}
	if _, err := e.m.Grant(c.ID, store.KindSecret, "api"); err != nil {
		t.Fatal(err)
	}
	if v, err := cl.Secret(ctx, "api"); err != nil || string(v) != "v4lue" {
		t.Errorf("Secret after grant = %q, %v", v, err)
	}
	if _, err := e.m.Revoke(c.ID, store.KindSecret, "api"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Secret(ctx, "api"); err == nil {
		t.Error("a revoked secret was answered")
	}
	if _, err := e.m.Revoke(c.ID, store.KindSecret, "api"); !errors.Is(err, ErrNotFound) {
		t.Errorf("revoking twice = %v, want ErrNotFound", err)
	}
}

func TestValidGitGrant(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"github.com", true}, {"github.com/org", true}, {"github.com/org/repo.git", true}, {"git.example:8443/a", true},
		{"", false}, {"https://github.com", false}, {"github.com/", false}, {"github.com//x", false},
		{"github.com/../x", false}, {"-host", false}, {"host/a b", false}, {"host/a?b", false}, {"ho st", false},
	} {
		if got := validGitGrant(tc.in); got != tc.want {
			t.Errorf("validGitGrant(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestReconcileFindsAWorktreeTheRecordMissed(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	c, err := e.m.Create(ctx, CreateRequest{Workspace: repo, Worktree: true})
	if err != nil {
		t.Fatal(err)
	}
	// As if ohd died between git worktree add and recording its result.
	if _, err := e.st.UpdateConversation(c.ID, func(r *store.Conversation) error {
		r.State, r.AdminID = store.StateProvisioning, ""
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if out := testenv.Git(t, repo, "worktree", "list", "--porcelain"); strings.Count(out, "worktree ") != 1 {
		t.Errorf("the unrecorded worktree is still registered:\n%s", out)
	}
	if refs := testenv.Git(t, repo, "for-each-ref", "--format=%(refname)"); strings.Contains(refs, c.ID) {
		t.Errorf("its branch is left:\n%s", refs)
	}
	if exists(filepath.Dir(c.Worktree)) {
		t.Error("its folder is left")
	}
}

func TestWorkspaceSubdirectoryKeepsItsPlaceInTheWorktree(t *testing.T) {
	e := newEnv(t)
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	testenv.WriteFile(t, filepath.Join(repo, "sub", "dir", "f.txt"), "x\n")
	testenv.Git(t, repo, "add", ".")
	testenv.Git(t, repo, "commit", "-q", "-m", "sub")
	c, err := e.m.Create(context.Background(), CreateRequest{Workspace: filepath.Join(repo, "sub", "dir"), Worktree: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(c.Worktree, "sub", "dir"); c.WorkingDir != want {
		t.Errorf("WorkingDir = %s, want %s", c.WorkingDir, want)
	}
	if !exists(filepath.Join(c.WorkingDir, "f.txt")) {
		t.Error("the working dir does not hold the subdirectory's files")
	}
}

func TestOnStepReportsEveryStep(t *testing.T) {
	e := newEnv(t)
	var mu sync.Mutex
	var steps []string
	e.m.cfg.OnStep = func(_, step string, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if d < 0 {
			t.Errorf("step %s took %v", step, d)
		}
		steps = append(steps, step)
	}
	ctx := context.Background()
	c, err := e.m.Create(ctx, CreateRequest{Workspace: testenv.NewRepo(t, testenv.RepoOptions{}), Worktree: true,
		Forward: func(context.Context, store.Conversation, Target) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Remove(ctx, c.ID, RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []string{"worktree", "broker", "forward", "create_total", "remove_container", "remove_broker", "remove_worktree", "remove_total"}
	if diff := cmp.Diff(want, steps); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
}

func TestWorkspaceMayNotOverlapProtectedPaths(t *testing.T) {
	e := newEnv(t)
	e.m.protected = canonicalPaths(append(e.m.protected, e.stateDir, e.wtRoot))
	ctx := context.Background()
	link := filepath.Join(testenv.TempDir(t), "to-state")
	if err := os.Symlink(e.stateDir, link); err != nil {
		t.Fatal(err)
	}
	other, err := e.m.Create(ctx, CreateRequest{Workspace: testenv.NewRepo(t, testenv.RepoOptions{}), Worktree: true})
	if err != nil {
		t.Fatal(err)
	}
	before := len(e.st.Conversations())
	for _, ws := range []string{e.stateDir, link, filepath.Join(e.stateDir, "locks"), filepath.Dir(e.stateDir), "/", e.runDir, other.Worktree} {
		_, err := e.m.Create(ctx, CreateRequest{Workspace: ws})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "overlaps") {
			t.Errorf("Create(workspace %s) = %v, want it refused as overlapping a protected path", ws, err)
		}
	}
	if _, err := e.m.Create(ctx, CreateRequest{Workspace: "/" + strings.Repeat("a", 10<<20)}); !errors.Is(err, ErrInvalid) || len(err.Error()) > 200 {
		t.Errorf("a 10 MiB workspace path: %d-byte error %.80q", len(err.Error()), err)
	}
	if n := len(e.st.Conversations()); n != before {
		t.Errorf("refused creates wrote %d records", n-before)
	}
}

// FuzzValidateGrant: a grant name that passes validation is safe to put in
// a URL path segment, an audit record and a command line: no control
// characters, no traversal, no URL syntax in a git host.
func FuzzValidateGrant(f *testing.F) {
	f.Add("git", "github.com/org")
	f.Fuzz(func(t *testing.T, kind, name string) {
		if ValidateGrant(kind, name) != nil {
			return
		}
		for _, r := range name {
			if r < 0x21 || r == 0x7f || r == '?' || r == '#' || r == '%' || r == '\\' {
				t.Fatalf("ValidateGrant(%q, %q) accepted %q", kind, name, r)
			}
		}
		for _, seg := range strings.Split(name, "/") {
			if seg == "" || seg == "." || seg == ".." {
				t.Fatalf("ValidateGrant(%q, %q) accepted a %q segment", kind, name, seg)
			}
		}
		if kind != store.KindGit && strings.Contains(name, "/") {
			t.Fatalf("ValidateGrant(%q, %q) accepted a slash", kind, name)
		}
	})
}

// noNetns is the local runtime with namespaces that cannot be entered (a
// process without privileges, an engine in a VM).
type noNetns struct {
	runtime.Runtime
	opens atomic.Int64
}

func (r *noNetns) OpenNetns(context.Context, string) (*runtime.NetnsDialer, error) {
	r.opens.Add(1)
	return nil, fmt.Errorf("%w: test", runtime.ErrNetnsUnavailable)
}

// TestNetnsUnavailableFallsBackOnce checks that a runtime whose namespaces
// cannot be entered leaves targets on the published port, and is asked
// once, not on every request.
func TestNetnsUnavailableFallsBackOnce(t *testing.T) {
	e := newEnv(t)
	rt := &noNetns{Runtime: runtime.NewLocal()}
	e.m.rt = rt
	for range 3 {
		if nd := e.m.innerDial(context.Background(), store.NewID(), route{store.StateRunning, "c0ffee", 32768, false}); nd != nil {
			t.Fatalf("innerDial = %v, want nil (published port)", nd)
		}
	}
	if n := rt.opens.Load(); n != 1 {
		t.Errorf("OpenNetns called %d times, want once", n)
	}
	// A container id or port missing: nothing to open.
	e.m.netns.off = false
	if nd := e.m.innerDial(context.Background(), store.NewID(), route{store.StateRunning, "", 32768, false}); nd != nil || rt.opens.Load() != 1 {
		t.Errorf("innerDial without a container = %v (%d opens)", nd, rt.opens.Load())
	}
}

// TestFailedUndoIsRetriedUntilDone: when the undo of a failed create
// cannot finish (here a mount left inside the worktree makes its removal
// fail), the record says so, a create with the same id is refused rather
// than losing track of the leftovers, and the retry loop finishes the undo
// once it can.
func TestFailedUndoIsRetriedUntilDone(t *testing.T) {
	testenv.RequireRoot(t)
	e := newEnv(t)
	ctx := context.Background()
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	id := store.NewID()
	var mnt string
	_, err := e.m.Create(ctx, CreateRequest{ID: id, Workspace: repo, Worktree: true, Forward: func(_ context.Context, c store.Conversation, _ Target) error {
		mnt = filepath.Join(c.Worktree, "busy")
		if err := os.Mkdir(mnt, 0o755); err != nil {
			return err
		}
		if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
			testenv.Missing(t, "cannot mount a tmpfs here: %v", err)
		}
		return errors.New("inner server said 422")
	}})
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	if err == nil || !strings.Contains(err.Error(), "undo incomplete") {
		t.Fatalf("Create error = %v, want the failure and an incomplete undo", err)
	}
	c, _ := e.st.Conversation(id)
	if c.State != store.StateFailed || !c.UndoPending {
		t.Fatalf("record = %s undo pending %v, want failed with the undo pending", c.State, c.UndoPending)
	}
	if _, err := e.m.Create(ctx, CreateRequest{ID: id, Workspace: repo, Worktree: true}); !errors.Is(err, ErrConflict) {
		t.Errorf("a create with the id of an unfinished undo = %v, want ErrConflict", err)
	}
	if err := unix.Unmount(mnt, 0); err != nil {
		t.Fatal(err)
	}
	e.m.cfg.UndoRetryInterval = 10 * time.Millisecond
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { e.m.RunUndoRetries(rctx); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, _ = e.st.Conversation(id)
		if !c.UndoPending || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if c.UndoPending {
		t.Fatal("the undo was not retried to the end")
	}
	if out := testenv.Git(t, repo, "worktree", "list", "--porcelain"); strings.Count(out, "worktree ") != 1 {
		t.Errorf("a worktree is still registered:\n%s", out)
	}
	if exists(filepath.Join(e.wtRoot, id)) {
		t.Errorf("the conversation's folder is left")
	}
	if _, err := e.m.Create(ctx, CreateRequest{ID: id, Workspace: repo, Worktree: true}); err != nil {
		t.Errorf("a create with the same id after the undo finished: %v", err)
	}
}

// TestFailedPublishBacksOff: a failing publish waits 2 s, then 4 s, 8 s
// ... up to a minute before the next attempt, whatever the agent commits
// meanwhile; none at all before the first failure.
func TestFailedPublishBacksOff(t *testing.T) {
	now := time.Now()
	if (failedPublish{}).holds(now) {
		t.Fatal("no failure holds the publish")
	}
	var f failedPublish
	var waits []time.Duration
	for i := range 8 {
		f = f.again(fmt.Sprintf("tip%d", i), "not_a_commit", now)
		waits = append(waits, f.next.Sub(now))
		if !f.holds(now.Add(time.Second)) {
			t.Errorf("attempt %d: a new commit one second later is tried at once", i)
		}
	}
	want := []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, time.Minute, time.Minute, time.Minute}
	if diff := cmp.Diff(want, waits); diff != "" {
		t.Errorf("backoff (-want +got):\n%s", diff)
	}
	if f.holds(now.Add(time.Minute + time.Second)) {
		t.Error("the publish is held after its backoff")
	}
}

// TestCreatePanicFinishesTheRecord: a step that panics (a bug) still has
// the create undone and its record failed before the panic goes on.
func TestCreatePanicFinishesTheRecord(t *testing.T) {
	e := newEnv(t)
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	id := store.NewID()
	func() {
		defer func() {
			if r := recover(); r != "forward bug" {
				t.Errorf("Create's panic = %v, want the step's own", r)
			}
		}()
		_, _ = e.m.Create(context.Background(), CreateRequest{ID: id, Workspace: repo, Worktree: true, Forward: func(context.Context, store.Conversation, Target) error {
			panic("forward bug")
		}})
	}()
	c, err := e.st.Conversation(id)
	if err != nil || c.State != store.StateFailed || c.FailedStep != "internal" || c.UndoPending {
		t.Fatalf("record after a panicking create = %s step %q undo pending %v (%v); want failed at step internal, undone", c.State, c.FailedStep, c.UndoPending, err)
	}
	if out := testenv.Git(t, repo, "worktree", "list", "--porcelain"); strings.Count(out, "worktree ") != 1 {
		t.Errorf("a worktree is still registered:\n%s", out)
	}
	if exists(filepath.Join(e.runDir, "conversations", id)) || exists(filepath.Join(e.wtRoot, id)) {
		t.Error("the socket dir or worktree folder is left")
	}
}

// TestAbandonedProvisioningRecordIsFinished: a provisioning record that no
// create works on any more (its failure could not be written) is undone
// and failed by RunUndoRetries, without a restart; one whose create is
// still under way is left alone.
func TestAbandonedProvisioningRecordIsFinished(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.m.cfg.UndoRetryInterval = 10 * time.Millisecond
	rctx, cancel := context.WithCancel(ctx)
	retried := make(chan struct{})
	defer func() { cancel(); <-retried }()

	// A create in flight, held in its forward step.
	inFlight := store.NewID()
	forwarding, release := make(chan struct{}), make(chan struct{})
	created := make(chan error, 1)
	go func() {
		_, err := e.m.Create(ctx, CreateRequest{ID: inFlight, Workspace: testenv.NewRepo(t, testenv.RepoOptions{}), Worktree: true,
			Forward: func(context.Context, store.Conversation, Target) error {
				close(forwarding)
				<-release
				return nil
			}})
		created <- err
	}()
	<-forwarding

	// An abandoned record, newer than the one in flight (the retries visit
	// records oldest first), with the socket directory its create made.
	abandoned := store.NewID()
	ws := testenv.NewRepo(t, testenv.RepoOptions{})
	if err := e.st.CreateConversation(store.Conversation{ID: abandoned, State: store.StateProvisioning, Runtime: "local", Workspace: ws, WorkingDir: ws, BrokerEpoch: 1}); err != nil {
		t.Fatal(err)
	}
	sockDir := filepath.Join(e.runDir, "conversations", abandoned)
	if err := os.MkdirAll(sockDir, 0o700); err != nil {
		t.Fatal(err)
	}

	go func() { e.m.RunUndoRetries(rctx); close(retried) }()
	deadline := time.Now().Add(30 * time.Second)
	var c store.Conversation
	for {
		c, _ = e.st.Conversation(abandoned)
		if c.State != store.StateProvisioning || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if c.State != store.StateFailed || c.UndoPending {
		t.Fatalf("abandoned record = %s, undo pending %v; want failed, undone", c.State, c.UndoPending)
	}
	if exists(sockDir) {
		t.Error("the abandoned create's socket dir is left")
	}
	if c, _ := e.st.Conversation(inFlight); c.State != store.StateProvisioning {
		t.Errorf("the create in flight has its record %s, want it left provisioning", c.State)
	}
	close(release)
	if err := <-created; err != nil {
		t.Fatalf("the create in flight failed: %v", err)
	}
	if c, _ := e.st.Conversation(inFlight); c.State != store.StateRunning {
		t.Errorf("the create in flight ended %s, want running", c.State)
	}
}

// TestNoPublishOnceARemovalHoldsTheConversation: a publish that waited for
// the lock while a removal saved the view (its tip read before) must not
// run after it, or it moves the branch back to that older tip (seen in
// TestRemovalLosesNothingMadeBeforeItReturns: the removal saved c7, then
// a publisher that had read c4 published it). Nothing is attempted: not
// even the intent is recorded.
func TestNoPublishOnceARemovalHoldsTheConversation(t *testing.T) {
	e := newEnv(t)
	ws := testenv.NewRepo(t, testenv.RepoOptions{})
	stale := strings.Repeat("4", 40)
	for name, c := range map[string]store.Conversation{
		"removal requested": {State: store.StateRunning, Removal: &store.Removal{RequestedAt: time.Now()}},
		"removed":           {State: store.StateDeleted, Removal: &store.Removal{RequestedAt: time.Now(), Done: true}},
		"stopped":           {State: store.StateStopped},
	} {
		c.ID, c.Runtime, c.Workspace, c.WorkingDir, c.BrokerEpoch = store.NewID(), "docker", ws, ws, 1
		c.GitLayout, c.ContainerID, c.Published = store.GitLayoutView, "gone", strings.Repeat("7", 40)
		if err := e.st.CreateConversation(c); err != nil {
			t.Fatal(err)
		}
		got, err := e.m.publish(context.Background(), c.ID, stale)
		if err != nil || got.Publishing != "" || got.Published != c.Published {
			t.Errorf("%s: publish of a stale tip = %v, record publishing %q published %q; want nothing attempted", name, err, got.Publishing, got.Published)
		}
		if after, _ := e.st.Conversation(c.ID); after.Publishing != "" {
			t.Errorf("%s: the publish recorded its intent %q", name, after.Publishing)
		}
	}
}

// TestLoopbackNetGrantHint: issue 28. A net grant on the host's loopback
// (a local model server) is not reached the usual way from inside the
// container (NO_PROXY sends loopback to the container's own): the grant
// leaves a note saying how, once; another grant leaves none.
func TestLoopbackNetGrantHint(t *testing.T) {
	e := newEnv(t)
	c, err := e.m.Create(context.Background(), CreateRequest{Workspace: testenv.TempDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	before := len(c.Notes)
	if c, err = e.m.Grant(c.ID, store.KindNet, "example.com"); err != nil || len(c.Notes) != before {
		t.Fatalf("grant example.com: %v, notes %v", err, c.Notes)
	}
	for range 2 {
		if c, err = e.m.Grant(c.ID, store.KindNet, "127.0.0.1:11434"); err != nil {
			t.Fatal(err)
		}
	}
	if len(c.Notes) != before+1 || !strings.Contains(c.Notes[before], "NO_PROXY") || !strings.Contains(c.Notes[before], "127.0.0.1:11434") {
		t.Errorf("after a loopback net grant, notes = %q, want one hint naming NO_PROXY and the destination", c.Notes)
	}
}

// TestInPlaceCreatesOfDifferentFoldersDoNotWait (issue 27): an in-place
// create holds its folder's lock only until its record is written, and
// only its folder's: with another folder's lock held (a create there in
// progress), a create on a second folder completes. Under one lock for
// all folders, held through the whole create, it waited (219 s for a set
// that took a third of that in worktree mode).
func TestInPlaceCreatesOfDifferentFoldersDoNotWait(t *testing.T) {
	e := newEnv(t)
	busy := testenv.NewRepo(t, testenv.RepoOptions{})
	free := testenv.NewRepo(t, testenv.RepoOptions{})
	unlock := e.m.lockIn(e.m.inPlaceLocks, busy)
	defer unlock()
	done := make(chan error, 1)
	go func() {
		_, err := e.m.Create(context.Background(), CreateRequest{Workspace: free})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("in-place Create on another folder: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("an in-place create on one folder waited for another folder's")
	}
}
