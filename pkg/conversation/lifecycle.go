package conversation

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ohd-dev/ohd/pkg/egress"
	"github.com/ohd-dev/ohd/pkg/openhands"
	"github.com/ohd-dev/ohd/pkg/runtime"
	"github.com/ohd-dev/ohd/pkg/store"
)

// Get returns the record of id; deleted conversations are ErrNotFound.
func (m *Manager) Get(id string) (store.Conversation, error) {
	c, err := m.st.Conversation(id)
	if err != nil || c.State == store.StateDeleted {
		return store.Conversation{}, fmt.Errorf("conversation %s: %w", id, ErrNotFound)
	}
	return c, nil
}

// List returns every record, oldest first (deleted ones too).
func (m *Manager) List() []store.Conversation { return m.st.Conversations() }

// retire marks a container ohd itself is about to stop or remove: the
// engine's events about it arrive later, asynchronously, and must not be
// taken for a crash. The mark stays until the container is started again
// (or for retireFor), however late the events come.
func (m *Manager) retire(containerID string) {
	m.dropNetns(containerID)
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	for id, t := range m.retired {
		if now.Sub(t) > retireFor {
			delete(m.retired, id)
		}
	}
	m.retired[containerID] = now
}

// unretire forgets the mark of a container started again.
func (m *Manager) unretire(containerID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.retired, containerID)
}

func (m *Manager) isRetired(containerID string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.retired[containerID]
	return ok
}

// retireFor bounds how long a retired container's events are ignored.
const retireFor = 10 * time.Minute

// Grant adds a grant to a live conversation.
func (m *Manager) Grant(id, kind, name string) (store.Conversation, error) {
	return m.changeGrant(id, kind, name, true)
}

// Revoke removes a grant from a live conversation.
func (m *Manager) Revoke(id, kind, name string) (store.Conversation, error) {
	return m.changeGrant(id, kind, name, false)
}

func (m *Manager) changeGrant(id, kind, name string, add bool) (store.Conversation, error) {
	if err := ValidateGrant(kind, name); err != nil {
		return store.Conversation{}, err
	}
	if _, err := m.liveConversation(id); err != nil {
		return store.Conversation{}, err
	}
	c, err := m.st.UpdateConversation(id, func(c *store.Conversation) error {
		if add {
			c.Grants.Add(kind, canonicalGrant(kind, name))
			if kind == store.KindNet {
				// A loopback grant needs the proxy named (issue 28): say so
				// where ohctl show and the API's notes show it.
				if d, err := egress.ParseDest(name); err == nil {
					if h := egress.LoopbackHint(d); h != "" && !slices.Contains(c.Notes, h) {
						c.Notes = append(c.Notes, h)
					}
				}
			}
		} else if !c.Grants.Remove(kind, canonicalGrant(kind, name)) && !c.Grants.Remove(kind, name) {
			return fmt.Errorf("%w: conversation %s has no %s grant %q", ErrNotFound, id, kind, name)
		}
		return nil
	})
	if err != nil || kind != store.KindGit {
		return c, err
	}
	return c, m.writeGitRelayConfig(c)
}

func (m *Manager) liveConversation(id string) (store.Conversation, error) {
	if !store.ValidID(id) {
		return store.Conversation{}, fmt.Errorf("%w: conversation id %q is not a UUID", ErrInvalid, id)
	}
	c, err := m.Get(id)
	if err != nil {
		return c, err
	}
	if !c.State.Live() {
		return c, fmt.Errorf("%w: conversation %s is %s", ErrConflict, id, c.State)
	}
	return c, nil
}

// RotateToken bumps the conversation's broker epoch (the old token stops
// working) and rewrites its token file.
func (m *Manager) RotateToken(id string) (store.Conversation, error) {
	if _, err := m.liveConversation(id); err != nil {
		return store.Conversation{}, err
	}
	unlock := m.lock(id)
	defer unlock()
	c, err := m.st.UpdateConversation(id, func(c *store.Conversation) error {
		c.BrokerEpoch++
		return nil
	})
	if err != nil {
		return c, err
	}
	uid, gid := agentOf(c)
	if err := m.br.WriteToken(id, c.BrokerEpoch, uid, gid); err != nil {
		return c, fmt.Errorf("rotate token of %s: %w", id, err)
	}
	return c, nil
}

// Touch records activity for the idle timer.
func (m *Manager) Touch(id string) {
	interval := time.Second
	if m.cfg.IdleTimeout > 0 && m.cfg.IdleTimeout/4 < interval {
		interval = m.cfg.IdleTimeout / 4
	}
	m.st.Touch(id, interval)
}

// Target returns where the conversation's inner server answers, starting
// its container again first if it is stopped. Concurrent callers for one
// conversation share one start.
func (m *Manager) Target(ctx context.Context, id string) (Target, error) {
	// The hot path (every proxied request): a running conversation, read
	// without copying its record.
	var r route
	if m.st.Peek(id, func(c *store.Conversation) {
		r = route{c.State, c.ContainerID, c.HostPort, c.Egress == store.EgressBroker || runtime.IsDialOnly(m.rt)}
	}) &&
		r.state == store.StateRunning && (r.hostPort != 0 || m.rt.Kind() == "local") {
		return m.target(ctx, id, r)
	}
	c, err := m.liveConversation(id)
	if err != nil {
		return Target{}, err
	}
	if c.State == store.StateProvisioning {
		return Target{}, fmt.Errorf("%w: conversation %s is still being created", ErrConflict, id)
	}
	if c.State != store.StateRunning || (m.rt.Kind() != "local" && c.HostPort == 0) {
		if c, err = m.start(ctx, id); err != nil {
			return Target{}, err
		}
	}
	return m.target(ctx, id, route{c.State, c.ContainerID, c.HostPort, c.Egress == store.EgressBroker || runtime.IsDialOnly(m.rt)})
}

// route is what Target needs of a record.
type route struct {
	state       store.State
	containerID string
	hostPort    int
	// noNetwork: the container has no network (egress broker), so its
	// inner server is reached only inside its namespace; or the runtime
	// reaches every container only through its dialer
	// (runtime.DialOnly: a pod at its IP).
	noNetwork bool
}

func (m *Manager) target(ctx context.Context, id string, r route) (Target, error) {
	key, err := m.st.InnerKey(id)
	if err != nil {
		return Target{}, err
	}
	t := Target{InnerKey: key}
	if r.hostPort != 0 {
		t.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(r.hostPort))
		nd := m.innerDial(ctx, id, r)
		if nd != nil {
			t.Dial, t.DialAddr, t.DialPort = nd.DialContext, nd.Addr, nd.DialPort
		}
		if r.noNetwork {
			// Every such container's inner server is 127.0.0.1:<inner
			// port> in its own namespace: the target needs a name of its
			// own, as connections are pooled by Addr.
			t.Addr = netnsTargetAddr(nd, r.containerID, r.hostPort)
			if nd == nil {
				// Never the host's own 127.0.0.1:<inner port>.
				t.Dial = func(context.Context) (net.Conn, error) {
					return nil, fmt.Errorf("conversation %s: its container has no network and ohd cannot enter its network namespace", id)
				}
			}
		}
	}
	return t, nil
}

// start brings a stopped conversation back, one attempt for all callers.
func (m *Manager) start(ctx context.Context, id string) (store.Conversation, error) {
	m.mu.Lock()
	if call, ok := m.starts[id]; ok {
		m.mu.Unlock()
		select {
		case <-call.done:
			return call.conv, call.err
		case <-ctx.Done():
			return store.Conversation{}, ctx.Err()
		}
	}
	call := &startCall{done: make(chan struct{})}
	m.starts[id] = call
	m.mu.Unlock()

	// The attempt must not die with the first caller's request.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
	call.conv, call.err = m.doStart(sctx, id)
	cancel()
	m.mu.Lock()
	delete(m.starts, id)
	m.mu.Unlock()
	close(call.done)
	return call.conv, call.err
}

func (m *Manager) doStart(ctx context.Context, id string) (store.Conversation, error) {
	unlock := m.lock(id)
	defer unlock()
	c, err := m.liveConversation(id)
	if err != nil {
		return c, err
	}
	if c.State == store.StateRunning && (m.rt.Kind() == "local" || c.HostPort != 0) {
		return c, nil
	}
	if m.rt.Kind() == "local" {
		return m.setState(id, store.StateRunning, "")
	}
	// A new container process gets a new inner key: one that reached
	// another process (say, whatever reused the old container's port
	// before ohd noticed it gone) opens nothing afterwards.
	if err := m.st.SetInnerKey(id, newInnerKey()); err != nil {
		return c, fmt.Errorf("start conversation %s: %w", id, err)
	}
	if _, err := m.openBroker(ctx, c); err != nil {
		return c, fmt.Errorf("start conversation %s: broker: %w", id, err)
	}
	if c.InnerInContainer {
		// Made by the previous release: its inner state is in its
		// container, which must not go before the state is out.
		if c, err = m.upgradeInner(ctx, c); err != nil {
			return c, fmt.Errorf("start conversation %s: %w", id, err)
		}
	}
	if c, err = m.separateAgent(ctx, c); err != nil {
		return c, fmt.Errorf("start conversation %s: %w", id, err)
	}
	if c.GitLayout == store.GitLayoutShared && c.Worktree != "" {
		// Its old container mounts the repository's git dir: it goes, and
		// the new one gets the conversation's own view.
		if c.ContainerID != "" {
			m.retire(c.ContainerID)
			if err := m.rt.Remove(ctx, c.ContainerID); err != nil {
				return c, fmt.Errorf("start conversation %s: remove its container of the shared layout: %w", id, err)
			}
			c.ContainerID = ""
		}
		if c, err = m.moveToView(ctx, c); err != nil {
			return c, fmt.Errorf("start conversation %s: %w", id, err)
		}
	}
	// Made before in place existed, with the repository writable in its
	// container: it gets its own git view first (inplace_upgrade.go), and
	// then its trees are shared with the agent's uid like any other's.
	if repo, due, err := m.legacyInPlace(ctx, c); err != nil {
		return c, fmt.Errorf("start conversation %s: %w", id, err)
	} else if due {
		if c, err = m.moveInPlace(ctx, c, repo); err != nil {
			return c, fmt.Errorf("start conversation %s: %w", id, err)
		}
	}
	if err := m.shareTrees(c, true); err != nil {
		return c, fmt.Errorf("start conversation %s: %w", id, err)
	}
	spec, err := m.spec(ctx, c)
	if err != nil {
		return c, fmt.Errorf("start conversation %s: %w", id, err)
	}
	if c.ContainerID != "" {
		// A container keeps the mounts it was made with: one whose mounts
		// are not today's (made by an earlier version, or before a
		// submodule was added) is made anew, so that every pointer the
		// user's git follows is fixed (worktree/mountplan).
		if ins, err := m.rt.Inspect(ctx, c.ContainerID); err == nil && ins.Mounts != nil && !sameMounts(ins.Mounts, spec.Mounts) {
			m.retire(c.ContainerID)
			if err := m.rt.Remove(ctx, c.ContainerID); err != nil && !errors.Is(err, runtime.ErrNotFound) {
				return c, fmt.Errorf("start conversation %s: remove its container, whose mounts are out of date: %w", id, err)
			}
			m.log.Info("container made anew: its mounts were out of date", "id", id, "container", shortID(c.ContainerID))
			c.ContainerID = ""
		}
	}
	var inst runtime.Instance
	if c.ContainerID != "" {
		m.dropNetns(c.ContainerID)
		inst, err = m.rt.Restart(ctx, c.ContainerID, spec)
		if errors.Is(err, runtime.ErrNotFound) {
			c.ContainerID = ""
		}
	}
	if c.ContainerID == "" {
		inst, err = m.rt.Start(ctx, spec)
	}
	m.cfg.Metrics.ContainerStart(err == nil, startFailedStep(err))
	if err != nil {
		return c, fmt.Errorf("start conversation %s: %w", id, contractHint(err, c.Image))
	}
	m.unretire(inst.ContainerID)
	c, err = m.st.UpdateConversation(id, func(c *store.Conversation) error {
		c.State = store.StateRunning
		c.ContainerID, c.ContainerName, c.HostPort = inst.ContainerID, inst.Name, inst.HostPort
		c.LastActiveAt = time.Now().UTC()
		c.InnerInContainer = false
		return nil
	})
	if err == nil {
		m.log.Info("conversation started again", "id", id, "container", shortID(inst.ContainerID))
	}
	return c, err
}

func (m *Manager) setState(id string, state store.State, note string) (store.Conversation, error) {
	return m.st.UpdateConversation(id, func(c *store.Conversation) error {
		c.State = state
		if note != "" {
			c.Notes = append(c.Notes, note)
		}
		return nil
	})
}

// Stop stops a running conversation's container; its worktree, identity
// and socket stay, and the next request starts it again.
func (m *Manager) Stop(ctx context.Context, id, why string) (store.Conversation, error) {
	unlock := m.lock(id)
	defer unlock()
	c, err := m.liveConversation(id)
	if err != nil || c.State != store.StateRunning {
		return c, err
	}
	if c.ContainerID != "" {
		m.publishNow(ctx, c)
		m.retire(c.ContainerID)
		err := m.rt.Stop(ctx, c.ContainerID, m.cfg.StopTimeout)
		if err != nil && !errors.Is(err, runtime.ErrNotFound) {
			return c, fmt.Errorf("stop conversation %s: %w", id, err)
		}
	}
	m.log.Info("conversation stopped", "id", id, "why", why)
	return m.st.UpdateConversation(id, func(c *store.Conversation) error {
		c.State = store.StateStopped
		c.HostPort = 0
		return nil
	})
}

// RunIdle stops conversations idle for longer than the idle timeout, until
// ctx ends. It returns at once when no idle timeout is configured.
func (m *Manager) RunIdle(ctx context.Context) {
	if m.cfg.IdleTimeout <= 0 || m.rt.Kind() == "local" {
		return
	}
	tick := min(m.cfg.IdleTimeout/4, 30*time.Second)
	every(ctx, max(tick, 50*time.Millisecond), func() {
		for _, c := range m.st.Conversations() {
			if c.State == store.StateRunning && time.Since(c.LastActiveAt) > m.cfg.IdleTimeout {
				if _, err := m.Stop(ctx, c.ID, "idle"); err != nil {
					m.log.Warn("idle stop failed", "id", c.ID, "err", err)
				}
			}
		}
	})
}

// Watch follows the engine's events until ctx ends and marks conversations
// whose container died or vanished behind ohd's back as stopped. Only die
// and destroy end a container: the engine's oom event says a process in
// it was killed for memory (a build, say) while the container may well
// run on, so it is logged, never taken for a death
// (TestOOMInsideIsNotADeath). A main process killed for memory is followed
// by die.
func (m *Manager) Watch(ctx context.Context) error {
	if m.rt.Kind() == "local" {
		<-ctx.Done()
		return nil
	}
	return m.rt.Events(ctx, m.st.ServerID(), func(ev runtime.Event) {
		switch ev.Action {
		case "die", "destroy":
			m.containerGone(ev)
		case "oom":
			m.log.Warn("a process in a conversation's container was killed for lack of memory; that alone does not end the conversation (ohd marks it stopped only when the container or pod itself ends)",
				"id", ev.ConversationID, "container", shortID(ev.ContainerID))
		case runtime.ActionResync:
			if err := m.syncContainers(ctx); err != nil {
				m.log.Warn("resync with the engine failed", "err", err)
			}
		}
	})
}

func (m *Manager) containerGone(ev runtime.Event) {
	if ev.ConversationID == "" || m.isRetired(ev.ContainerID) {
		return
	}
	c, err := m.st.Conversation(ev.ConversationID)
	if err != nil || c.State != store.StateRunning || c.ContainerID != ev.ContainerID || c.Removal != nil {
		return
	}
	m.dropNetns(ev.ContainerID)
	m.cfg.Metrics.ContainerGone(ev.Action)
	note := fmt.Sprintf("container %s %s behind ohd's back at %s (exit code %d)", shortID(ev.ContainerID), action(ev.Action), ev.Time.UTC().Format(time.RFC3339), ev.ExitCode)
	_, _ = m.st.UpdateConversation(c.ID, func(c *store.Conversation) error {
		if c.State != store.StateRunning || c.ContainerID != ev.ContainerID || c.Removal != nil {
			return nil
		}
		c.State = store.StateStopped
		c.HostPort = 0
		if ev.Action == "destroy" {
			c.ContainerID = ""
		}
		c.Notes = append(c.Notes, note)
		return nil
	})
	m.log.Warn("conversation container gone", "id", c.ID, "container", shortID(ev.ContainerID), "action", ev.Action)
}

func action(a string) string {
	switch a {
	case "destroy":
		return "was removed"
	}
	return "exited"
}

// syncContainers compares running records with the engine after the event
// stream was down.
func (m *Manager) syncContainers(ctx context.Context) error {
	list, err := m.rt.List(ctx, m.st.ServerID())
	if err != nil {
		return err
	}
	byID := map[string]runtime.Container{}
	for _, c := range list {
		byID[c.ID] = c
	}
	for _, c := range m.st.Conversations() {
		if c.State != store.StateRunning || c.ContainerID == "" {
			continue
		}
		ct, ok := byID[c.ContainerID]
		switch {
		case !ok:
			m.containerGone(runtime.Event{ContainerID: c.ContainerID, ConversationID: c.ID, Action: "destroy", Time: time.Now()})
		case !ct.Running:
			m.containerGone(runtime.Event{ContainerID: c.ContainerID, ConversationID: c.ID, Action: "die", ExitCode: ct.ExitCode, Time: time.Now()})
		}
	}
	return nil
}

// Reconcile makes the world match the records after a start or a crash;
// see the package comment. It logs what it did and returns the first
// error after trying everything.
func (m *Manager) Reconcile(ctx context.Context) error {
	var firstErr error
	note := func(err error) {
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	var containers []runtime.Container
	if m.rt.Kind() != "local" {
		var err error
		if containers, err = m.rt.List(ctx, m.st.ServerID()); err != nil {
			return fmt.Errorf("reconcile: list containers: %w", err)
		}
	}
	live := map[string]bool{}
	for _, c := range m.st.Conversations() {
		switch {
		case c.Removal != nil && !c.Removal.Done:
			// Finished in the background (RunUndoRetries), so that ohd
			// answers at once: a removal saves the work first, which takes
			// as long as the work is large. Until then what it owns stays.
			m.log.Info("reconcile: an interrupted removal finishes in the background", "id", c.ID)
			live[c.ID] = true
		case c.State == store.StateFailed && c.UndoPending:
			m.log.Info("reconcile: finishing the undo of a failed create", "id", c.ID)
			note(m.retryUndo(ctx, c))
		case c.State == store.StateProvisioning:
			m.log.Info("reconcile: undoing an interrupted create", "id", c.ID)
			_, err := m.fail(c, &StepError{ID: c.ID, Step: "interrupted", Err: errors.New("ohd stopped during the create")})
			var se *StepError
			if !errors.As(err, &se) {
				note(err)
			}
		case c.State == store.StateRunning || c.State == store.StateStopped:
			live[c.ID] = true
			note(m.adopt(ctx, c, containers))
		}
	}
	for _, ct := range containers {
		if !live[ct.ConversationID] {
			m.log.Info("reconcile: removing a container with no live conversation", "container", shortID(ct.ID), "conversation", ct.ConversationID)
			note(m.rt.Remove(ctx, ct.ID))
		} else if c, err := m.st.Conversation(ct.ConversationID); err == nil && c.ContainerID != ct.ID {
			m.log.Info("reconcile: removing an extra container of a conversation", "container", shortID(ct.ID), "conversation", ct.ConversationID)
			note(m.rt.Remove(ctx, ct.ID))
		}
	}
	entries, err := os.ReadDir(filepath.Join(m.cfg.RuntimeDir, "conversations"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		note(err)
	}
	for _, e := range entries {
		if !live[e.Name()] {
			m.log.Info("reconcile: removing a socket directory with no live conversation", "dir", e.Name())
			note(os.RemoveAll(filepath.Join(m.cfg.RuntimeDir, "conversations", e.Name())))
		}
	}
	return firstErr
}

// DefaultUndoRetry is how often RunUndoRetries retries unfinished undos
// when Config.UndoRetryInterval is 0.
const DefaultUndoRetry = 30 * time.Second

// RunUndoRetries finishes every interrupted removal (see retryRemovals)
// at once and then retries, until ctx ends, those and the undo of every failed create
// whose undo did not finish (UndoPending), so what such a create left
// (a container, a socket, a worktree) is removed as soon as it can be.
// It also finishes a provisioning record that no create is working on
// (its failure could not be recorded, or its create never returned):
// undone and failed as a restart's reconcile would, without the restart.
func (m *Manager) RunUndoRetries(ctx context.Context) {
	interval := m.cfg.UndoRetryInterval
	if interval <= 0 {
		interval = DefaultUndoRetry
	}
	// Interrupted removals are finished at once: reconcile, which ran
	// before ohd listened, left them to this loop.
	defer m.retries.Wait()
	m.retryRemovals(ctx)
	every(ctx, interval, func() {
		m.retryRemovals(ctx)
		for _, c := range m.st.Conversations() {
			switch {
			case c.State == store.StateFailed && c.UndoPending:
				if err := m.retryUndo(ctx, c); err != nil {
					m.log.Warn("undo of a failed create still incomplete", "id", c.ID, "err", err)
				}
			case c.State == store.StateProvisioning:
				m.finishAbandoned(c.ID)
			}
		}
		m.removeOrphanContainers(ctx)
	})
}

// removeOrphanContainers removes the containers of this server whose
// conversation is over (no record, deleted, or failed with its undo
// done). The Engine finishes a container create whose client died, so
// one asked for by an ohd killed mid-create can appear after the next
// ohd's reconcile has undone that create: nothing else would remove it.
func (m *Manager) removeOrphanContainers(ctx context.Context) {
	if m.rt.Kind() == "local" {
		return
	}
	list, err := m.rt.List(ctx, m.st.ServerID())
	if err != nil {
		return
	}
	for _, ct := range list {
		unlock, ok := m.tryLock(ct.ConversationID)
		if !ok {
			continue // an operation on it is under way
		}
		c, err := m.st.Conversation(ct.ConversationID)
		over := errors.Is(err, store.ErrNotFound) || (err == nil && c.State == store.StateDeleted) || (err == nil && c.State == store.StateFailed && !c.UndoPending)
		if over {
			m.retire(ct.ID)
			if err := m.rt.Remove(ctx, ct.ID); err != nil {
				m.log.Warn("remove a container whose conversation is over", "id", ct.ConversationID, "container", shortID(ct.ID), "err", err)
			} else {
				m.log.Info("removed a container whose conversation is over", "id", ct.ConversationID, "container", shortID(ct.ID))
			}
		}
		unlock()
	}
}

// finishAbandoned undoes the create of provisioning record id if no
// create (which holds the conversation's lock throughout) is working on
// it, and records it failed.
func (m *Manager) finishAbandoned(id string) {
	unlock, ok := m.tryLock(id)
	if !ok {
		return // a create (or another operation) is under way
	}
	defer unlock()
	c, err := m.st.Conversation(id)
	if err != nil || c.State != store.StateProvisioning {
		return
	}
	m.log.Warn("finishing a create that ended without its record", "id", id)
	_, _ = m.fail(c, &StepError{ID: id, Step: "interrupted", Err: errors.New("the create ended without recording its outcome")})
}

// retryUndo runs the undo of failed create c again and clears
// UndoPending when it is done.
func (m *Manager) retryUndo(ctx context.Context, c store.Conversation) error {
	unlock := m.lock(c.ID)
	defer unlock()
	cur, err := m.st.Conversation(c.ID)
	if err != nil || cur.State != store.StateFailed || !cur.UndoPending {
		return err
	}
	if _, err := m.teardown(ctx, cur, undoCreate); err != nil {
		return err
	}
	_, err = m.st.UpdateConversation(c.ID, func(r *store.Conversation) error {
		r.UndoPending = false
		r.ContainerID, r.HostPort = "", 0
		return nil
	})
	if err == nil {
		m.log.Info("undo of a failed create finished", "id", c.ID)
	}
	return err
}

// adopt re-opens a live conversation's broker and matches its record with
// its container.
func (m *Manager) adopt(ctx context.Context, c store.Conversation, containers []runtime.Container) error {
	if _, err := m.openBroker(ctx, c); err != nil {
		return fmt.Errorf("reconcile %s: broker: %w", c.ID, err)
	}
	if m.rt.Kind() == "local" {
		return nil
	}
	var found *runtime.Container
	for i := range containers {
		if containers[i].ID == c.ContainerID {
			ct := containers[i]
			found = &ct
		}
	}
	if found != nil && found.State == "paused" && c.Removal == nil {
		// Paused by a removal that did not finish and was called off
		// (or by hand): a conversation that lives runs. A container an
		// unfinished removal froze stays so: the removal goes on
		// (retryRemovals), or thaws it when called off (saveWork). The
		// agent's own SIGSTOP freeze is thawed the same ways.
		m.log.Info("reconcile: thawing a paused container of a live conversation", "id", c.ID, "container", shortID(found.ID))
		if err := m.rt.Unpause(ctx, found.ID); err != nil {
			m.log.Warn("reconcile: thaw a paused container", "id", c.ID, "err", err)
		} else if ins, err := m.rt.Inspect(ctx, found.ID); err == nil {
			found.Running, found.HostPort, found.State = ins.Running, ins.HostPort, ins.State
		}
	}
	stopped := ""
	if found != nil && found.Running {
		// A container of an earlier version with the repository's .git
		// writable is not adopted: stopped, it is made anew with a git
		// view on the next request (inplace_upgrade.go).
		if _, due, err := m.legacyInPlace(ctx, c); err != nil {
			return fmt.Errorf("reconcile %s: %w", c.ID, err)
		} else if due {
			m.retire(found.ID)
			if err := m.rt.Stop(ctx, found.ID, m.cfg.StopTimeout); err != nil && !errors.Is(err, runtime.ErrNotFound) {
				return fmt.Errorf("reconcile %s: stop its container of an earlier version, which has the repository's .git writable: %w", c.ID, err)
			}
			found.Running = false
			stopped = "its container, made by an earlier version of ohd with the repository's .git writable, was stopped; it starts again in place, with its own git view, on the next request"
			m.log.Warn("reconcile: stopped a container of an earlier version that has the repository's .git writable", "id", c.ID, "container", shortID(found.ID))
		}
	}
	_, err := m.st.UpdateConversation(c.ID, func(r *store.Conversation) error {
		switch {
		case found == nil:
			if r.State == store.StateRunning {
				r.Notes = append(r.Notes, "container gone while ohd was down; it starts again on the next request")
			}
			r.State, r.ContainerID, r.HostPort = store.StateStopped, "", 0
		case found.Running:
			r.State, r.HostPort = store.StateRunning, found.HostPort
			r.LastActiveAt = time.Now().UTC()
		default:
			r.State, r.HostPort = store.StateStopped, 0
		}
		if stopped != "" {
			r.Notes = append(r.Notes, stopped)
		}
		return nil
	})
	if found != nil && found.Running {
		m.log.Info("reconcile: adopted a running container", "id", c.ID, "container", shortID(found.ID))
	}
	return err
}

// contractHint adds to a start error of a container that exited before it
// was ready what ohd asks of the image: an image made for an ohd that
// started the inner server without arguments (the stand-in of releases up
// to 8b00fe3 refused any) exits at once when given them.
func contractHint(err error, image string) error {
	if !errors.Is(err, runtime.ErrExited) {
		return err
	}
	return fmt.Errorf("%w; the image %s must run the OpenHands agent server, which ohd starts with the arguments %q after the image's entrypoint and the environment OH_CONVERSATIONS_PATH and OH_PERSISTENCE_DIR (the agent server's contract: README, \"Running the real agent server\"): an image that refuses them (one made for an earlier ohd) must be rebuilt, or choose another with --image",
		err, image, strings.Join(openhands.Args(8000), " "))
}

// sameMounts reports whether a and b are the same set of bind mounts.
func sameMounts(a, b []runtime.Mount) bool {
	if len(a) != len(b) {
		return false
	}
	set := make(map[runtime.Mount]int, len(a))
	for _, m := range a {
		set[m]++
	}
	for _, m := range b {
		if set[m] == 0 {
			return false
		}
		set[m]--
	}
	return true
}
