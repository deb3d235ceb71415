package conversation

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/ohd-dev/ohd/pkg/failpoint"
	"github.com/ohd-dev/ohd/pkg/gitboundary"
	"github.com/ohd-dev/ohd/pkg/store"
)

// The tree watchers (gitboundary.Watch): what the user makes in a running
// conversation's tree (a directory, a file an editor saves by rename) is
// not its agent's to write until ohd shares it; a watcher per running
// conversation shares it as it comes, so the agent waits milliseconds.
// relend's periodic pass is the backstop (and shares files too when the
// watcher is missing or degraded). The publisher starts a watcher for
// every running conversation (so an ohd restart or reconcile gets them
// back), stops it when the conversation stops, and the removal stops it
// for good before it gives the tree back.

// treeWatchers are the running watchers, by conversation id; ended are the
// conversations whose removal stopped theirs for good.
type treeWatchers struct {
	mu       sync.Mutex
	watching map[string]*gitboundary.Watcher
	starting map[string]bool
	ended    map[string]bool
	wg       sync.WaitGroup
	// settleDir holds the watchers' marker directories (Settle), under
	// the runtime directory; what an ohd that crashed left there goes
	// before the first watcher of this one starts.
	settleOnce sync.Once
	settleDir  string
}

// watching reports whether c's watcher runs healthy (every directory
// watched): the periodic pass then lends directories only.
func (m *Manager) watchingAll(id string) bool {
	m.tw.mu.Lock()
	w := m.tw.watching[id]
	m.tw.mu.Unlock()
	return w != nil && !w.Degraded()
}

// watchTree starts c's watcher if it runs none, in a goroutine, with a
// pass over what the user made before it watched (the publisher's: after
// an ohd restart, or a start whose watcher the publisher stopped).
func (m *Manager) watchTree(ctx context.Context, c store.Conversation) {
	if !m.claimWatch(c) {
		return
	}
	m.tw.wg.Add(1)
	go func() {
		defer m.tw.wg.Done()
		m.startWatch(ctx, c, true)
	}()
}

// watchNow starts c's watcher before its container starts (shareTrees):
// everything the user makes from then on is evented, so no pass over the
// tree is needed (a worktree's create walks no file).
func (m *Manager) watchNow(c store.Conversation) {
	if m.claimWatch(c) {
		m.startWatch(context.Background(), c, false)
	}
}

// claimWatch marks c's watcher as starting; false when it runs, starts,
// or ended for good, or c's tree is not shared.
func (m *Manager) claimWatch(c store.Conversation) bool {
	if !separated(c) || releasedTree(c) == "" || m.rt.Kind() == "local" || failpoint.On("legacy/lend-late") {
		return false
	}
	m.tw.mu.Lock()
	defer m.tw.mu.Unlock()
	if m.tw.watching == nil {
		m.tw.watching, m.tw.starting, m.tw.ended = map[string]*gitboundary.Watcher{}, map[string]bool{}, map[string]bool{}
	}
	if m.tw.watching[c.ID] != nil || m.tw.starting[c.ID] || m.tw.ended[c.ID] {
		return false
	}
	m.tw.starting[c.ID] = true
	return true
}

// startWatch starts c's watcher (claimed) and registers it.
func (m *Manager) startWatch(ctx context.Context, c store.Conversation, meanwhile bool) {
	id, tree := c.ID, releasedTree(c)
	// What may be lent: a conversation not removed (the removal stops
	// the watcher for good before it gives the tree back).
	live := func() bool {
		cur, err := m.st.Conversation(id)
		return err == nil && cur.Removal == nil && cur.State != store.StateDeleted && ctx.Err() == nil
	}
	m.tw.settleOnce.Do(func() {
		dir := filepath.Join(m.cfg.RuntimeDir, "watch-settle")
		if err := os.RemoveAll(dir); err != nil {
			m.log.Warn("remove the tree watchers' old marker directories", "dir", dir, "err", err)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			m.log.Warn("make the tree watchers' marker directory (the system's temporary directory is used)", "dir", dir, "err", err)
			return
		}
		m.tw.settleDir = dir
	})
	var w *gitboundary.Watcher
	if live() {
		var err error
		w, err = gitboundary.Watch(tree, boundaryIDs(c), gitboundary.WatchOptions{
			Allow:     live,
			OnError:   func(err error) { m.log.Warn("could not share what the user made with the agent", "id", id, "err", err) },
			SettleDir: m.tw.settleDir,
		})
		switch {
		case err != nil:
			m.log.Warn("could not watch the tree for what the user makes (the periodic pass shares it)", "id", id, "tree", tree, "err", err)
		case meanwhile:
			m.shareMadeMeanwhile(c, live)
		}
	}
	m.tw.mu.Lock()
	delete(m.tw.starting, id)
	if w != nil && (m.tw.ended[id] || !live()) {
		// Removed while it started.
		m.tw.mu.Unlock()
		w.Close()
		return
	}
	if w != nil {
		m.tw.watching[id] = w
		m.log.Debug("watching the tree for what the user makes", "id", id, "tree", tree, "dirs", w.Watches(), "degraded", w.Degraded())
	}
	m.tw.mu.Unlock()
}

// shareMadeMeanwhile shares what the user made in c's tree before its
// watcher placed its watches (since the container started, or while ohd
// was down): one Borrow and Apply, under the publish lock (which the
// removal holds throughout) and only while the conversation runs.
func (m *Manager) shareMadeMeanwhile(c store.Conversation, live func() bool) {
	unlock := m.publishLock(c.ID)
	defer unlock()
	if !live() {
		return
	}
	tree, ids := releasedTree(c), boundaryIDs(c)
	lent, err := gitboundary.Borrow(tree, ids)
	if err == nil {
		var shared gitboundary.Stats
		shared, err = gitboundary.Apply(tree, ids)
		m.log.Debug("shared what the user made before the watcher started", "id", c.ID, "lent", lent.Changed, "shared", shared.Changed, "took", lent.Duration+shared.Duration)
	}
	if err != nil {
		m.log.Warn("could not share what the user made with the agent", "id", c.ID, "err", err)
	}
}

// settleWatch shares what the user made in id's tree until now, if its
// watcher runs (gitboundary.Watcher.Settle): a removal asks it before it
// marks the conversation, after which the watcher shares nothing, so that
// a file the user saved a moment before is the agent's to read when the
// save reads the tree as the agent. It waits at most settleTimeout; a
// watcher that does not answer in time leaves the removal as it was
// before (its save may fail on that file, changing nothing).
func (m *Manager) settleWatch(ctx context.Context, id string) {
	m.tw.mu.Lock()
	w := m.tw.watching[id]
	m.tw.mu.Unlock()
	if w == nil {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	if err := w.Settle(sctx); err != nil {
		m.log.Warn("the tree watcher did not share what the user made before the removal", "id", id, "err", err)
	}
}

// settleTimeout bounds settleWatch: a pass over what a burst of events
// named (an archive unpacked a moment before) takes milliseconds to
// seconds.
const settleTimeout = 10 * time.Second

// unwatch stops id's watcher, if any, and waits for its pass in progress;
// forGood (the removal) keeps one from starting again. A watcher still
// starting is stopped where it ends (watchTree).
func (m *Manager) unwatch(id string, forGood bool) {
	m.tw.mu.Lock()
	var w *gitboundary.Watcher
	if m.tw.watching != nil {
		w = m.tw.watching[id]
		delete(m.tw.watching, id)
		if forGood {
			m.tw.ended[id] = true
		}
	}
	m.tw.mu.Unlock()
	if w != nil {
		w.Close()
	}
}

// unwatchAll stops every watcher (the publisher's end) and waits for the
// ones starting.
func (m *Manager) unwatchAll() {
	m.tw.mu.Lock()
	ws := m.tw.watching
	m.tw.watching = map[string]*gitboundary.Watcher{}
	m.tw.mu.Unlock()
	for _, w := range ws {
		w.Close()
	}
	m.tw.wg.Wait()
	m.tw.mu.Lock()
	ws = m.tw.watching
	m.tw.watching = map[string]*gitboundary.Watcher{}
	m.tw.mu.Unlock()
	for _, w := range ws {
		w.Close()
	}
}

// sweepWatchers stops the watchers of conversations that are no more
// (a create undone before its record was kept).
func (m *Manager) sweepWatchers(known map[string]bool) {
	m.tw.mu.Lock()
	var gone []string
	for id := range m.tw.watching {
		if !known[id] {
			gone = append(gone, id)
		}
	}
	m.tw.mu.Unlock()
	for _, id := range gone {
		m.unwatch(id, false)
	}
}

// LimitedCmd is cmd as ohd execs it in c's container (ohctl exec's
// commands, its own git status): under the agent server's seccomp filter
// (ohctl limit, gitboundary.LimitAgent) when it runs as the container's
// own user (user "": the agent) and the container mounts today's helper,
// which has it. Otherwise a process of the agent's uid that the agent did
// not start would not be limited, and an agent that attached to it
// (ptrace, same uid) could have it set an attribute. A container made
// with an earlier helper runs cmd as before, until it is made anew.
func (m *Manager) LimitedCmd(ctx context.Context, c store.Conversation, cmd []string, user string) []string {
	if !separated(c) || user != "" || c.ContainerID == "" || len(cmd) == 0 {
		return cmd
	}
	helper := m.cfg.Helper
	if m.helpers != nil {
		p, _, err := m.helpers.current()
		if err != nil {
			return cmd
		}
		helper = p
	}
	ins, err := m.rt.Inspect(ctx, c.ContainerID)
	if err != nil {
		return cmd
	}
	for _, mt := range ins.Mounts {
		if mt.Target == ContainerHelper && mt.Source == helper && helper != "" {
			return append([]string{ContainerHelper, "limit", "--"}, cmd...)
		}
	}
	return cmd
}

// shareAfterCalledOff shares what the user made in c's tree while a
// removal that was then called off ran: the watcher passes nothing while
// a removal is marked (the tree is about to be given back), so a file the
// user made meanwhile would stay unreadable to the agent, and the next
// removal's save, which reads the tree as the agent, would fail on it.
func (m *Manager) shareAfterCalledOff(c store.Conversation) {
	if !separated(c) || releasedTree(c) == "" || m.rt.Kind() == "local" || failpoint.On("legacy/lend-late") {
		return
	}
	m.shareMadeMeanwhile(c, func() bool {
		cur, err := m.st.Conversation(c.ID)
		return err == nil && cur.Removal == nil && cur.State != store.StateDeleted
	})
}
