package conversation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/ohd-dev/ohd/pkg/failpoint"
	"github.com/ohd-dev/ohd/pkg/freeze"
	"github.com/ohd-dev/ohd/pkg/openhands"
	"github.com/ohd-dev/ohd/pkg/runtime"
	"github.com/ohd-dev/ohd/pkg/store"
	"github.com/ohd-dev/ohd/pkg/worktree"
)

// RemoveOptions say how Remove ends a conversation.
type RemoveOptions struct {
	// Discard deletes the branch and any snapshot: the user's work in the
	// worktree is lost.
	Discard bool
}

// Remove ends a conversation: container, broker, worktree (after a
// snapshot of uncommitted work), identity. It returns the final record,
// whose Removal says what was kept.
//
// Nothing the agent made before Remove returns is lost: the agent is
// stopped first (its container frozen), then its work is saved, then
// everything is torn down. A removal that cannot save changes nothing:
// the container is thawed, the conversation runs on, and its record says
// why (RemovalFailed) and how to get the work out.
func (m *Manager) Remove(ctx context.Context, id string, opts RemoveOptions) (store.Conversation, error) {
	if !store.ValidID(id) {
		return store.Conversation{}, fmt.Errorf("%w: conversation id %q is not a UUID", ErrInvalid, id)
	}
	c, err := m.remove(ctx, id, opts)
	var off *calledOffError
	if errors.As(err, &off) && off.startAgain {
		// The save stopped the container to save through a sandbox (a
		// runtime that cannot pause it, Kubernetes) and failed: the
		// conversation runs on, in a container made anew.
		if sc, serr := m.start(ctx, id); serr != nil {
			m.log.Warn("start the conversation again after its failed removal stopped it; the next request starts it", "id", id, "err", serr)
		} else {
			c = sc
		}
	}
	return c, err
}

func (m *Manager) remove(ctx context.Context, id string, opts RemoveOptions) (store.Conversation, error) {
	unlock := m.lock(id)
	defer unlock()
	conv, err := m.Get(id)
	if err != nil {
		return conv, err
	}
	if err := removable(conv, opts); err != nil {
		return conv, err
	}
	// What the user made until now is shared before the mark, after which
	// the watcher passes nothing: the save reads the tree as the agent.
	if !opts.Discard {
		m.settleWatch(ctx, id)
	}
	conv, err = m.st.UpdateConversation(id, func(c *store.Conversation) error {
		if c.Removal == nil || !c.Removal.Done {
			c.Removal = &store.Removal{RequestedAt: time.Now().UTC(), Discard: opts.Discard}
		}
		c.RemovalFailed = ""
		return nil
	})
	if err != nil {
		return conv, err
	}
	failpoint.Hit("delete/after-mark")
	return m.finishRemoval(ctx, conv)
}

// removable checks, before anything is torn down, what the removal will
// need: a refused removal changes nothing (container, broker and worktree
// stay as they were). --discard needs no repository to save into.
func removable(conv store.Conversation, opts RemoveOptions) error {
	if (conv.Worktree == "" && !conv.InPlace) || conv.CommonDir == "" || opts.Discard {
		return nil
	}
	if _, err := os.Stat(conv.CommonDir); err != nil {
		return fmt.Errorf("%w: conversation %s: its repository's git directory %s is not there (%v): the work is saved into that repository, so move the repository back to %s and run the removal again (or copy what you need from %s and remove with --discard); nothing was removed",
			ErrConflict, conv.ID, conv.CommonDir, errors.Unwrap(err), conv.Workspace, conv.Worktree)
	}
	// The work is saved through the conversation's git view, or (without
	// one) through the host's registration of its worktree.
	if gone := viewGone(conv); gone != "" {
		return fmt.Errorf("%w: conversation %s: %s, so its work cannot be saved: %s; nothing was removed", ErrConflict, conv.ID, gone, discardAction(conv))
	}
	if conv.GitView == "" && registrationGone(conv) {
		return fmt.Errorf("%w: conversation %s: the host repository's registration %s of its worktree is gone, so its uncommitted work cannot be snapshotted: %s; nothing was removed",
			ErrConflict, conv.ID, filepath.Join(conv.CommonDir, "worktrees", conv.AdminID), discardAction(conv))
	}
	return nil
}

// finishRemoval tears conv down and marks it deleted. When the work
// could not be saved (nothing was torn down), the removal is called off:
// the record is live again, with RemovalFailed saying why.
func (m *Manager) finishRemoval(ctx context.Context, conv store.Conversation) (store.Conversation, error) {
	mode := keepWork
	if conv.Removal.Discard {
		mode = discardWork
	}
	// No exec may start once the agent is frozen: its command would run
	// on, unsaved. (A removal that gives up lets them start again.)
	defer m.holdExecs(ctx, conv.ID)()
	res, err := m.teardown(ctx, conv, mode)
	var se *saveError
	if errors.As(err, &se) && ctx.Err() == nil {
		return m.removalFailed(conv, se)
	}
	if err != nil && ctx.Err() != nil {
		// Interrupted (a shutdown, a client that went away): not a
		// failed save. The removal stays marked; the next start, or the
		// background retry, finishes it.
		return conv, fmt.Errorf("remove conversation %s: interrupted (%w): it is finished in the background", conv.ID, err)
	}
	if err != nil {
		return conv, fmt.Errorf("remove conversation %s: %w (run the removal again, or restart ohd, to finish it)", conv.ID, err)
	}
	conv, err = m.st.UpdateConversation(conv.ID, func(c *store.Conversation) error {
		c.State = store.StateDeleted
		c.BrokerEpoch++ // revoke: no token of this conversation verifies again
		c.ContainerID, c.HostPort = "", 0
		c.Removal.Done = true
		c.Removal.Saved = nil // its parts are recorded below
		c.Removal.SnapshotRef, c.Removal.SnapshotCommit = res.SnapshotRef, res.SnapshotCommit
		c.Removal.BranchKept, c.Removal.Message = res.BranchKept, res.Message
		c.Removal.Kept, c.Removal.IgnoredFiles, c.Removal.IgnoredBytes = res.Kept, res.IgnoredFiles, res.IgnoredBytes
		c.Removal.NestedRepos = res.NestedRepos
		c.Removal.GitDirsMoved = append(c.Removal.GitDirsMoved, res.GitDirsMoved...)
		if res.GitDirsKept != "" {
			c.Removal.GitDirsKept = res.GitDirsKept
		}
		if res.Published != "" {
			c.Published = res.Published
		}
		if res.Conflict != "" {
			c.PublishConflict = res.Conflict
		}
		return nil
	})
	if err != nil {
		return conv, err
	}
	m.log.Info("conversation removed", "id", conv.ID, "snapshot", res.SnapshotRef, "branch_kept", res.BranchKept)
	return conv, nil
}

// removed is what a teardown did: the worktree's removal, and the git
// directories of the agent's moved out of the user's tree.
type removed struct {
	worktree.RemoveResult
	GitDirsMoved []string
	GitDirsKept  string
}

// release runs releaseTree for a teardown and adds what it moved to res.
func (m *Manager) release(conv store.Conversation, moveOnly bool, res *removed) error {
	// Its watcher first, for good: nothing is lent after the tree is
	// given back.
	m.unwatch(conv.ID, true)
	r, err := m.releaseTree(conv, moveOnly)
	if len(r.Moved) > 0 {
		res.GitDirsMoved = append(res.GitDirsMoved, r.Moved...)
		res.GitDirsKept = m.keptGitDirs(conv.ID)
	}
	if err != nil {
		return fmt.Errorf("give the tree back to its owner: %w", err)
	}
	return nil
}

// recordSaved writes what the save found into conv id's removal, before
// anything is torn down (see store.Removal.Saved).
func (m *Manager) recordSaved(id string, r *worktree.RemoveResult) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("record the saved work: %w", err)
	}
	_, err = m.st.UpdateConversation(id, func(c *store.Conversation) error {
		if c.Removal == nil {
			return fmt.Errorf("record the saved work of %s: its removal was called off", id)
		}
		c.Removal.Saved = b
		return nil
	})
	return err
}

// savedEarlier returns the save an interrupted run of conv's removal
// recorded, when that run went on to delete the worktree's registration
// (it does so only after the save and after the container is gone): the
// worktree can no longer be saved from, and need not be. While the
// registration is there, nothing was torn down that the save reads, and
// the save runs again (the agent may have written since).
func savedEarlier(conv store.Conversation) (*worktree.RemoveResult, bool) {
	if conv.Removal == nil || len(conv.Removal.Saved) == 0 || conv.InPlace || conv.Worktree == "" || conv.AdminID == "" {
		return nil, false
	}
	if _, err := os.Lstat(filepath.Join(conv.CommonDir, "worktrees", conv.AdminID)); !errors.Is(err, fs.ErrNotExist) {
		return nil, false
	}
	var r worktree.RemoveResult
	if err := json.Unmarshal(conv.Removal.Saved, &r); err != nil {
		return nil, false
	}
	return &r, true
}

// saveError is a teardown that stopped at saving the work: nothing was
// torn down. stopped says the save stopped the container (a runtime that
// cannot pause one): it must be started again to run on.
type saveError struct {
	err     error
	stopped bool
}

func (e *saveError) Error() string { return e.err.Error() }
func (e *saveError) Unwrap() error { return e.err }

// removalFailed calls off conv's removal, whose save failed (nothing was
// torn down): the record is live again and says why and how to get the
// work out. The returned error (ErrConflict) says the same.
func (m *Manager) removalFailed(conv store.Conversation, se *saveError) (store.Conversation, error) {
	goesOn := "the conversation runs on"
	if se.stopped {
		goesOn = "the conversation starts again in a new container (the runtime stopped it to save, as it cannot pause one)"
	}
	why := fmt.Sprintf("removal failed: %v; nothing was removed and %s: fix the cause and run `ohctl rm %s` again", se.err, goesOn, conv.ID)
	switch {
	case conv.Worktree != "":
		why += fmt.Sprintf(", or get the work out first (copy the files of %s; its published commits are on branch %s of %s) and then remove it with `ohctl rm --discard %s`",
			conv.Worktree, conv.Branch, conv.Repo, conv.ID)
	case conv.InPlace:
		why += fmt.Sprintf(", or keep its published commits (`git -C %s branch <name> %s`) and then remove it with `ohctl rm --discard %s`: the files of %s stay as they are",
			conv.Repo, conv.Branch, conv.ID, conv.Workspace)
	}
	c, err := m.st.UpdateConversation(conv.ID, func(c *store.Conversation) error {
		c.Removal = nil
		c.RemovalFailed = why
		if se.stopped {
			// Remove starts it again once the conversation's lock is free.
			c.State = store.StateStopped
		}
		return nil
	})
	if err != nil {
		return conv, err
	}
	m.log.Warn("removal failed; nothing was removed", "id", conv.ID, "err", se.err)
	m.shareAfterCalledOff(c)
	return c, &calledOffError{err: fmt.Errorf("%w: conversation %s: %s", ErrConflict, conv.ID, why), startAgain: se.stopped}
}

// calledOffError is a removal called off (removalFailed); startAgain says
// its save stopped the container, which Remove starts again.
type calledOffError struct {
	err        error
	startAgain bool
}

func (e *calledOffError) Error() string { return e.err.Error() }
func (e *calledOffError) Unwrap() error { return e.err }

// teardownMode says what a teardown does with the conversation's work.
type teardownMode int

const (
	// keepWork saves everything (a removal).
	keepWork teardownMode = iota
	// discardWork drops it (a removal with --discard).
	discardWork
	// undoCreate undoes a create that never reached running: no agent
	// work exists, so nothing is snapshotted (a half-made checkout is not
	// work) and the branch goes if it is still at its start.
	undoCreate
)

// teardown removes conv's container(s), broker directory and worktree. It
// is idempotent: each step tolerates what an earlier run already removed.
// With keepWork the work is saved first (see saveWork); a failed save is
// a *saveError and nothing is torn down.
func (m *Manager) teardown(ctx context.Context, conv store.Conversation, mode teardownMode) (removed, error) {
	var res removed
	t0, step := time.Now(), time.Now()
	done := func(name string) {
		m.cfg.OnStep(conv.ID, name, time.Since(step))
		step = time.Now()
	}
	// No publish runs during the teardown, and the teardown starts from
	// what the last one recorded (one in flight may have just finished).
	unlockPub := m.publishLock(conv.ID)
	defer unlockPub()
	if cur, err := m.st.Conversation(conv.ID); err == nil {
		conv.Published = cur.Published
	}
	var saved *worktree.RemoveResult
	frozen := false
	// recorded is the store's answer to the record of the save, written
	// while the engine removes the container: only the worktree's removal
	// (its registration deleted, after which the save cannot be made
	// again) needs it, and waits for it. A removal killed before it is
	// written saves again, through a sandbox once the container is gone.
	var recorded chan error
	if mode == keepWork {
		if r, ok := savedEarlier(conv); ok {
			// The container is gone by now; the save is what the
			// interrupted run recorded.
			saved, frozen = r, true
		} else {
			r, f, stopped, err := m.saveWork(ctx, conv)
			if err != nil {
				return res, &saveError{err: err, stopped: stopped}
			}
			saved, frozen = r, f
			if saved != nil {
				done("save_view")
				recorded = make(chan error, 1)
				go func() { recorded <- m.recordSaved(conv.ID, saved) }()
			}
		}
		failpoint.Hit("delete/after-save")
	}
	// Every return below waits for the record first: no write of this
	// removal's outlives it.
	waitRecorded := sync.OnceValue(func() error {
		if recorded == nil {
			return nil
		}
		return <-recorded
	})
	defer waitRecorded()
	closeBroker := func() error {
		if err := m.br.Close(conv.ID); err != nil {
			return fmt.Errorf("close broker: %w", err)
		}
		if err := os.RemoveAll(m.brokerDir(conv.ID)); err != nil {
			return fmt.Errorf("remove broker directory: %w", err)
		}
		// The credentials mediated from the conversation's create (its own
		// LLM profiles and secrets, "<id>.<name>") end with it.
		if _, err := m.st.DeleteScoped(conv.ID); err != nil {
			return fmt.Errorf("remove the conversation's secrets: %w", err)
		}
		return nil
	}
	// A frozen agent (its work saved) needs its broker no more: the broker
	// goes while the engine removes the container. A container stopped
	// gracefully keeps it until it has ended.
	bc := make(chan error, 1)
	if frozen {
		go func() { bc <- closeBroker() }()
	}
	if err := m.removeContainers(ctx, conv, !frozen); err != nil {
		if frozen {
			<-bc
		}
		return res, fmt.Errorf("remove container: %w", err)
	}
	done("remove_container")
	failpoint.Hit("delete/after-container")
	if !frozen {
		bc <- closeBroker()
	}
	if err := <-bc; err != nil {
		return res, err
	}
	if err := waitRecorded(); err != nil {
		// The container is gone: the next run saves through a sandbox.
		return res, err
	}
	done("remove_broker")
	failpoint.Hit("delete/after-broker")
	// The agent is stopped: the git directories it made go out of the
	// user's tree (into the kept state), its files back to the user. A
	// worktree is deleted next, so only the move matters there; it is
	// done before the worktree's snapshot (when that is not saved yet),
	// which then holds a nested repository's files as files.
	if conv.Worktree != "" {
		if err := m.release(conv, true, &res); err != nil {
			return res, err
		}
	}
	if conv.Worktree != "" || conv.InPlace {
		wt, found, err := m.worktreeToRemove(ctx, conv)
		if err != nil {
			return res, fmt.Errorf("remove worktree: %w", err)
		}
		if found {
			if res.RemoveResult, err = m.removeWorktree(ctx, conv, wt, mode, saved); err != nil {
				return res, fmt.Errorf("remove worktree: %w", err)
			}
		}
		done("remove_worktree")
		failpoint.Hit("delete/after-worktree")
	}
	if conv.Worktree == "" {
		// In place and a plain folder: the user's own tree, after the
		// view is saved and gone.
		if err := m.release(conv, false, &res); err != nil {
			return res, err
		}
		if separated(conv) {
			done("release")
		}
	}
	if m.cfg.InnerRoot != "" {
		// The inner server's state (events, its settings) ends with the
		// conversation, as the agent server's own DELETE removes its
		// conversation directory (ref §5, route disposition); last, since
		// the worktree's removal may run a sandbox with the conversation's
		// mounts. RemoveAll unlinks symlinks the agent planted; it never
		// follows them.
		if err := os.RemoveAll(openhands.DirsOf(m.cfg.InnerRoot, conv.ID).Root); err != nil {
			return res, fmt.Errorf("remove inner state: %w", err)
		}
	}
	m.cfg.OnStep(conv.ID, "remove_total", time.Since(t0))
	return res, nil
}

// saveWork saves the work of conv, whose git view is in place, before
// anything is torn down, with the agent stopped first:
//
//   - a running container: the save's first command there, `ohctl view
//     collect --freeze`, stops every process of the agent (SIGSTOP to
//     all but itself, pkg/freeze) before it reads anything, and the work
//     is saved there as before (worktree.SaveView over exec);
//   - if that fails, the agent is resumed (`ohctl view thaw`), the
//     container is frozen by the engine (Pause; no exec runs in a paused
//     container) and a sandbox container of the conversation (same image,
//     user, worktree and view mounts, no network, see withSandbox) saves
//     the work; a runtime that cannot pause (Kubernetes) stops the
//     container instead;
//   - a stopped container: the sandbox saves it.
//
// frozen says the container is left stopped for the teardown to remove at
// once. If the save fails, the container is thawed: the conversation is as
// it was; one the runtime stopped instead (stopped) is started again by
// Remove. A conversation without a view to save through (the local
// runtime; a record made before views, saved after its container stopped,
// see removeWorktree) returns nil.
func (m *Manager) saveWork(ctx context.Context, conv store.Conversation) (saved *worktree.RemoveResult, frozen, stopped bool, err error) {
	if m.rt.Kind() == "local" || conv.GitLayout != store.GitLayoutView {
		return nil, false, false, nil
	}
	if conv.InPlace {
		// In place: the folder stays whatever happens; its view is saved
		// (refs) as a worktree's is, while there is one.
		if conv.GitView == "" || !dirExists(conv.GitView) || !dirExists(conv.Workspace) {
			return nil, false, false, nil
		}
	} else if conv.Worktree == "" || conv.AdminID == "" || !dirExists(conv.Worktree) {
		return nil, false, false, nil
	}
	wt := worktreeOf(conv)
	if conv.ContainerID != "" && conv.State == store.StateRunning {
		in := containerSandbox{rt: m.rt, id: conv.ContainerID}
		sctx, cancel := context.WithTimeout(ctx, saveTimeout)
		r, err := m.wt.SaveView(sctx, wt, freezingSandbox{in}, conv.Published)
		cancel()
		if err == nil {
			return &r, true, false, nil
		}
		// The agent may be stopped: it runs on, and the engine's pause and
		// a sandbox try again (a save that fails for good fails there too).
		if terr := in.View(context.WithoutCancel(ctx), []string{"thaw"}, nil, io.Discard); terr != nil {
			m.log.Warn("thaw the conversation's processes after a failed save", "id", conv.ID, "err", terr)
		}
		if ctx.Err() != nil {
			return nil, false, false, err
		}
		m.log.Warn("saving the work in the conversation's container failed; the engine pauses the container and a sandbox tries again", "id", conv.ID, "err", err)
	}
	paused := false
	if conv.ContainerID != "" {
		switch err := m.rt.Pause(ctx, conv.ContainerID); {
		case err == nil:
			paused = true
		case errors.Is(err, runtime.ErrStoppedNotPaused):
			stopped = conv.State == store.StateRunning
		case errors.Is(err, runtime.ErrNotRunning), errors.Is(err, runtime.ErrNotFound):
			// Nothing of the agent runs.
		default:
			return nil, false, false, fmt.Errorf("stop the agent before saving its work: %w", err)
		}
	}
	var r worktree.RemoveResult
	err = m.withSandbox(ctx, conv, func(ctx context.Context, sb worktree.Sandbox) error {
		var err error
		r, err = m.wt.SaveView(ctx, wt, sb, conv.Published)
		return err
	})
	if err != nil {
		if paused {
			if uerr := m.rt.Unpause(context.WithoutCancel(ctx), conv.ContainerID); uerr != nil {
				m.log.Warn("thaw the conversation's container after a failed save", "id", conv.ID, "err", uerr)
			}
		}
		return nil, false, stopped, err
	}
	return &r, paused || stopped, false, nil
}

// removeWorktree removes conv's worktree. A worktree with a git view has
// its work saved through a sandbox container (the agent's files are read
// only there); one made before views (GitLayoutShared) is given a view
// first, so that no host git reads what its agent wrote either.
func (m *Manager) removeWorktree(ctx context.Context, conv store.Conversation, wt worktree.Worktree, mode teardownMode, saved *worktree.RemoveResult) (worktree.RemoveResult, error) {
	opts := worktree.RemoveOptions{Discard: mode == discardWork, Undo: mode == undoCreate, Published: conv.Published, Saved: saved}
	if mode != keepWork || m.rt.Kind() == "local" || saved != nil {
		return m.wt.Remove(ctx, wt, opts)
	}
	if wt.View == "" && conv.AdminID != "" {
		c, err := m.moveToView(ctx, conv)
		if err != nil {
			return worktree.RemoveResult{}, err
		}
		conv, wt, opts.Published = c, worktreeOf(c), c.Published
	}
	if wt.View == "" || !dirExists(wt.Path) || (wt.InPlace && !dirExists(wt.View)) {
		// Nothing to save through a sandbox (in place, the folder stays
		// whatever happens; a view already removed was saved before).
		return m.wt.Remove(ctx, wt, opts)
	}
	var res worktree.RemoveResult
	err := m.withSandbox(ctx, conv, func(ctx context.Context, sb worktree.Sandbox) error {
		opts.Sandbox = sb
		var err error
		res, err = m.wt.Remove(ctx, wt, opts)
		return err
	})
	return res, err
}

func dirExists(p string) bool {
	st, err := os.Lstat(p)
	return err == nil && st.IsDir()
}

// worktreeToRemove returns conv's worktree as Remove needs it. A record
// without an admin id was written before git worktree add finished (a
// crash in between): what git made is found on disk instead.
func (m *Manager) worktreeToRemove(ctx context.Context, conv store.Conversation) (worktree.Worktree, bool, error) {
	if conv.AdminID != "" || conv.InPlace {
		return worktreeOf(conv), true, nil
	}
	repo, err := m.wt.Inspect(ctx, conv.Workspace)
	if err != nil || !repo.IsGit {
		return worktree.Worktree{}, false, err
	}
	wt, err := m.wt.Find(ctx, repo, conv.ID)
	if errors.Is(err, fs.ErrNotExist) {
		return worktree.Worktree{}, false, nil
	}
	if err != nil {
		return worktree.Worktree{}, false, err
	}
	if wt.StartCommit == "" {
		wt.StartCommit = conv.StartCommit
	}
	return wt, true, nil
}

// removeContainers removes every container of conv: the recorded one and
// any other the engine has with its label (a crash between create and
// record leaves one unrecorded).
//
// graceful stops each first (the inner server ends its way); a removal
// whose agent is frozen and its work saved removes them at once.
func (m *Manager) removeContainers(ctx context.Context, conv store.Conversation, graceful bool) error {
	if m.rt.Kind() == "local" {
		return nil
	}
	remove := func(id string) error {
		m.retire(id)
		if graceful {
			err := m.rt.Stop(ctx, id, m.cfg.StopTimeout)
			if err != nil && !errors.Is(err, runtime.ErrNotFound) {
				m.log.Warn("container stop failed; removing it by force", "id", conv.ID, "container", shortID(id), "err", err)
			}
		}
		return m.rt.Remove(ctx, id)
	}
	// The engine's list is asked while the recorded container goes: one
	// round trip fewer on the way of every removal (the list only finds
	// what a crash left unrecorded).
	type listed struct {
		list []runtime.Container
		err  error
	}
	lc := make(chan listed, 1)
	go func() {
		l, err := m.rt.List(ctx, m.st.ServerID())
		lc <- listed{l, err}
	}()
	var rerr error
	if conv.ContainerID != "" {
		rerr = remove(conv.ContainerID)
	}
	l := <-lc
	if rerr != nil {
		return rerr
	}
	if l.err != nil {
		return l.err
	}
	for _, c := range l.list {
		if c.ConversationID == conv.ID && c.ID != conv.ContainerID {
			if err := remove(c.ID); err != nil {
				return err
			}
		}
	}
	return nil
}

// freezingSandbox is the conversation's own container, whose collect
// (the first command of a save) stops every other process in it first:
// `ohctl view collect --freeze`, one exec for both. Its standard input
// is held open while ohd waits for it (freeze.HeldFlag): if ohd goes
// away first, the collect is called off and the agent resumed, so no
// freeze outlives the ohd that started it.
type freezingSandbox struct{ containerSandbox }

func (s freezingSandbox) View(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) > 0 && args[0] == "collect" && stdin == nil {
		args = append([]string{"collect", "--freeze", freeze.HeldFlag}, args[1:]...)
		pr, pw := io.Pipe()
		defer pw.Close() // ends the exec's copy of stdin
		stdin = pr
	}
	return s.containerSandbox.View(ctx, args, stdin, stdout)
}

// retryRemovals finishes every interrupted removal (its record marked, not
// done: ohd stopped or failed mid-way), each in a goroutine of its own,
// so that no removal waits for another (one stuck on a wedged container
// holds up only itself, until its deadlines give up); a removal already
// being retried is left to that retry. A retry whose save fails calls
// the removal off (see removalFailed), and the conversation is adopted
// again as reconcile would have: its broker reopened, its record matched
// with its container. RunUndoRetries waits for the retries it started.
func (m *Manager) retryRemovals(ctx context.Context) {
	for _, c := range m.st.Conversations() {
		if c.Removal == nil || c.Removal.Done || ctx.Err() != nil {
			continue
		}
		m.mu.Lock()
		busy := m.retrying[c.ID]
		m.retrying[c.ID] = true
		m.mu.Unlock()
		if busy {
			continue
		}
		m.retries.Add(1)
		go func(id string) {
			defer m.retries.Done()
			defer func() {
				m.mu.Lock()
				delete(m.retrying, id)
				m.mu.Unlock()
			}()
			m.retryRemoval(ctx, id)
		}(c.ID)
	}
}

func (m *Manager) retryRemoval(ctx context.Context, id string) {
	unlock := m.lock(id)
	defer unlock()
	c, err := m.st.Conversation(id)
	if err != nil || c.Removal == nil || c.Removal.Done {
		return
	}
	m.log.Info("finishing an interrupted removal", "id", id)
	if _, err = m.finishRemoval(ctx, c); err == nil {
		return
	}
	m.log.Warn("an interrupted removal did not finish", "id", id, "err", err)
	c, rerr := m.st.Conversation(id)
	if rerr != nil || c.Removal != nil || !c.State.Live() {
		return // still pending: retried later
	}
	var containers []runtime.Container
	if m.rt.Kind() != "local" {
		if containers, rerr = m.rt.List(ctx, m.st.ServerID()); rerr != nil {
			m.log.Warn("adopt a conversation whose removal failed", "id", id, "err", rerr)
			return
		}
	}
	if rerr := m.adopt(ctx, c, containers); rerr != nil {
		m.log.Warn("adopt a conversation whose removal failed", "id", id, "err", rerr)
	}
}
