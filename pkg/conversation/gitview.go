package conversation

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/ohd-dev/ohd/pkg/failpoint"
	"github.com/ohd-dev/ohd/pkg/runtime"
	"github.com/ohd-dev/ohd/pkg/store"
	"github.com/ohd-dev/ohd/pkg/worktree"
)

// publishTimeout bounds one publish, saveTimeout the saving of a
// conversation's work at its end (both through its container).
const (
	publishTimeout = 2 * time.Minute
	saveTimeout    = 10 * time.Minute
)

// DefaultPublishInterval is how often RunPublisher looks at each running
// conversation's view branch when Config.PublishInterval is 0.
const DefaultPublishInterval = 200 * time.Millisecond

// containerSandbox runs `ohctl view` in a running container of the
// conversation: its own, or a sandbox container (see withSandbox). The
// command runs as the container's user, with its (no) capabilities.
type containerSandbox struct {
	rt runtime.Runtime
	id string
}

func (s containerSandbox) View(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	var stderr bytes.Buffer
	code, err := s.rt.Exec(ctx, s.id, append([]string{ContainerHelper, "view"}, args...), runtime.ExecOptions{
		Stdin: stdin, Stdout: stdout, Stderr: &limitedBuffer{b: &stderr, n: 8 << 10},
	})
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("ohctl view %s in container %s exited %d: %s", args[0], shortID(s.id), code, bytes.TrimSpace(stderr.Bytes()))
	}
	return nil
}

// limitedBuffer keeps the first n bytes written.
type limitedBuffer struct {
	b *bytes.Buffer
	n int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.n - l.b.Len(); room > 0 {
		l.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// withSandbox runs fn with a sandbox container of conv: the conversation's
// image, user, worktree and git view mounts and limits, but no network and
// no broker directory, so what runs there (git over the agent's files and
// configuration) reaches nothing the agent could not reach anyway. The
// container is removed afterwards.
func (m *Manager) withSandbox(ctx context.Context, conv store.Conversation, fn func(context.Context, worktree.Sandbox) error) error {
	spec, err := m.spec(ctx, conv)
	if err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	var mounts []runtime.Mount
	for _, mt := range spec.Mounts {
		// Git needs neither the broker nor the inner server's state (which
		// a failed create may not have made yet).
		if mt.Target != ContainerBrokerDir && !m.isInnerMount(mt.Target) {
			mounts = append(mounts, mt)
		}
	}
	spec.Mounts = mounts
	spec.Env = []string{"HOME=/tmp"}
	spec.Entrypoint = []string{ContainerHelper, "view", "idle"}
	spec.Cmd = nil
	id, err := m.rt.StartSandbox(ctx, spec)
	if err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	m.retire(id)
	defer func() {
		if err := m.rt.Remove(context.WithoutCancel(ctx), id); err != nil {
			m.log.Warn("remove sandbox container", "id", conv.ID, "container", shortID(id), "err", err)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, saveTimeout)
	defer cancel()
	return fn(ctx, containerSandbox{rt: m.rt, id: id})
}

// publisher is RunPublisher's state: which conversations are being
// published now, and each conversation's last failure. A conversation
// whose publish failed is not tried again before its backoff ends,
// whatever its agent commits meanwhile (a refused commit under every new
// one would otherwise cost an import per commit); the failure is logged
// once while it stays the same.
type publisher struct {
	mu       sync.Mutex
	inflight map[string]bool
	failed   map[string]failedPublish
	// live is, per conversation, the live mirror last written (see
	// worktree.Mirror).
	live map[string]map[string]string
	// pins is, per conversation, when its live pins were last looked at
	// (livepins.go).
	pins map[string]pinState
	// lent is, per conversation, when its tree was last lent again
	// (relend); a zero time while one runs.
	lent map[string]time.Time
	wg   sync.WaitGroup
}

// liveKey suffixes a conversation's id in publisher.failed for its live
// mirror, which backs off on its own.
const liveKey = "/live"

// failedPublish is a conversation's failing publish.
type failedPublish struct {
	tip, reason string
	attempts    int
	next        time.Time // no attempt before
}

// publishBackoff is the wait after the first failure of a publish; it
// doubles with each further failure, up to publishBackoffMax.
const (
	publishBackoff    = 2 * time.Second
	publishBackoffMax = time.Minute
)

// again is f after one more failure at now: the wait doubles from
// publishBackoff with each failure, up to publishBackoffMax, whatever the
// tip (a new commit on top of a refused one does not skip the wait).
func (f failedPublish) again(tip, reason string, now time.Time) failedPublish {
	f.tip, f.reason = tip, reason
	f.attempts++
	wait := publishBackoff << min(f.attempts-1, 6)
	f.next = now.Add(min(wait, publishBackoffMax))
	return f
}

// holds reports whether f keeps the conversation from being published now.
func (f failedPublish) holds(now time.Time) bool { return now.Before(f.next) }

// RunPublisher keeps every running conversation's host branch
// (refs/heads/openhands/<id>) equal to its git view's, until ctx ends: it
// reads each view's branch every Config.PublishInterval (a file read on the
// host, never following a symlink out of the view) and, when it moved,
// publishes it through the conversation's container (worktree.Publish).
func (m *Manager) RunPublisher(ctx context.Context) {
	if m.rt.Kind() == "local" {
		return
	}
	interval := m.cfg.PublishInterval
	if interval <= 0 {
		interval = DefaultPublishInterval
	}
	defer m.pub.wg.Wait()
	defer m.unwatchAll()
	for _, c := range m.st.Conversations() {
		if c.Publishing != "" {
			m.settlePublishing(ctx, c)
		}
	}
	tick := 0
	every(ctx, interval, func() {
		tick++
		// The host's branches, for each view's remote "host", about once
		// a second (a git run per conversation).
		refreshHost := tick%max(1, int(time.Second/interval)) == 0
		convs := m.st.Conversations()
		if refreshHost {
			known := make(map[string]bool, len(convs))
			for _, c := range convs {
				known[c.ID] = true
			}
			m.sweepWatchers(known)
		}
		for _, c := range convs {
			if refreshHost && c.State == store.StateRunning && c.ContainerID != "" && c.Removal == nil {
				// Directories the user made since are lent to the agent
				// too (livepins.go), in every mode; as they come, by its
				// watcher (watchtree.go).
				m.watchTree(ctx, c)
				m.relend(ctx, c)
			} else if c.State != store.StateRunning && c.State != store.StateProvisioning || c.Removal != nil {
				m.unwatch(c.ID, false)
			}
			if c.State != store.StateRunning || c.GitLayout != store.GitLayoutView || c.ContainerID == "" || c.Removal != nil {
				if c.State == store.StateDeleted {
					m.pub.mu.Lock()
					delete(m.pub.live, c.ID)
					delete(m.pub.failed, c.ID)
					delete(m.pub.failed, c.ID+liveKey)
					delete(m.pub.pins, c.ID)
					delete(m.pub.lent, c.ID)
					m.pub.mu.Unlock()
				}
				continue
			}
			wt := worktreeOf(c)
			if refreshHost {
				if _, err := m.wt.RefreshHostView(ctx, wt); err != nil && ctx.Err() == nil {
					m.log.Debug("refresh the view's host remote", "id", c.ID, "err", err)
				}
				// A submodule the user checked out since the container
				// was made is fixed in it now (livepins.go).
				m.pinLive(ctx, c)
			}
			tip, err := m.wt.ViewBranch(wt)
			branch := err == nil && tip != "" && tip != c.Published
			var want map[string]string
			if refs, err := m.wt.ViewRefs(wt); err == nil {
				want = m.wt.Mirrored(wt, refs)
			}
			now := time.Now()
			m.pub.mu.Lock()
			live := want != nil && !maps.Equal(want, m.pub.live[c.ID]) && !m.pub.failed[c.ID+liveKey].holds(now)
			branch = branch && !m.pub.failed[c.ID].holds(now)
			busy := m.pub.inflight[c.ID] || (!branch && !live)
			if !busy {
				m.pub.inflight[c.ID] = true
			}
			m.pub.mu.Unlock()
			if busy {
				continue
			}
			m.pub.wg.Add(1)
			go func(id, tip string) {
				defer m.pub.wg.Done()
				defer func() {
					m.pub.mu.Lock()
					delete(m.pub.inflight, id)
					m.pub.mu.Unlock()
				}()
				if branch {
					if _, err := m.publish(ctx, id, tip); err != nil {
						return
					}
				}
				if live {
					m.mirror(ctx, id, want)
				}
			}(c.ID, tip)
		}
	})
}

// settlePublishing resolves a publish an earlier ohd was killed in: if the
// host branch is the commit it was about to write, that commit is what
// ohd published.
func (m *Manager) settlePublishing(ctx context.Context, c store.Conversation) store.Conversation {
	if c.Publishing == "" || c.Worktree == "" {
		return c
	}
	host, err := m.wt.HostBranch(ctx, worktreeOf(c))
	if err != nil {
		return c
	}
	nc, err := m.st.UpdateConversation(c.ID, func(r *store.Conversation) error {
		if host != "" && host == r.Publishing {
			r.Published = host
		}
		r.Publishing = ""
		return nil
	})
	if err != nil {
		return c
	}
	return nc
}

// publishReason is the metrics label of a failed publish.
func publishReason(err error) string {
	switch {
	case errors.Is(err, worktree.ErrLocked):
		return "locked"
	case errors.Is(err, worktree.ErrRefused):
		return worktree.RefusalReason(err)
	case errors.Is(err, worktree.ErrHeld):
		return "held"
	}
	return "error"
}

// publish publishes the view commit tip of conversation id through its
// running container and records the outcome: a failure in PublishError
// (shown by `ohctl show` and `doctor`), counted by reason, logged once
// while it stays the same, and retried after a backoff.
func (m *Manager) publish(ctx context.Context, id, tip string) (store.Conversation, error) {
	unlock := m.publishLock(id)
	defer unlock()
	c, err := m.st.Conversation(id)
	if err != nil || c.GitLayout != store.GitLayoutView || c.ContainerID == "" || tip == c.Published {
		return c, err
	}
	// tip was read before the lock was ours. A removal saves the view's
	// work itself, its last commit included, and may have done so while
	// this publish waited: publishing tip now would move the branch back
	// to an older commit. Only a running conversation that no removal
	// holds is published.
	if c.Removal != nil || c.State != store.StateRunning {
		return c, nil
	}
	// A sandbox command the agent made hang (it can replace programs in
	// its own container) must not hold the conversation's publishing, or a
	// stop waiting for it, for ever.
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	// The commit about to be written is recorded before the ref moves (a
	// kill between the move and the record must not make the next publish
	// see a foreign move); an earlier intent is settled first.
	c = m.settlePublishing(ctx, c)
	if c, err = m.st.UpdateConversation(id, func(r *store.Conversation) error {
		r.Publishing = tip
		return nil
	}); err != nil {
		return c, err
	}
	t0 := time.Now()
	res, err := m.wt.Publish(ctx, worktreeOf(c), containerSandbox{rt: m.rt, id: c.ContainerID}, tip, c.Published)
	m.cfg.OnStep(id, "publish", time.Since(t0))
	if res.ClearedLock != "" {
		m.cfg.Metrics.PublishFailed("stale_lock")
	}
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return c, err // ohd is stopping
		}
		m.publishFailed(id, tip, err)
		return c, err
	}
	// (The host ref has moved; a kill here leaves Publishing recorded.)
	failpoint.Hit("publish/after-ref")
	m.pub.mu.Lock()
	delete(m.pub.failed, id)
	m.pub.mu.Unlock()
	if res.Conflict != "" && res.Conflict != c.PublishConflict {
		m.cfg.Metrics.PublishFailed("conflict")
	}
	return m.st.UpdateConversation(id, func(r *store.Conversation) error {
		r.Published = res.Published
		r.Publishing = ""
		r.PublishError = ""
		r.PublishConflict = res.Conflict
		return nil
	})
}

// publishFailed records a failed publish: in the store (PublishError), in
// the metrics, in the log (at warning level only when it differs from the
// last failure), and in the backoff.
func (m *Manager) publishFailed(id, tip string, err error) {
	reason := publishReason(err)
	m.cfg.Metrics.PublishFailed(reason)
	now := time.Now()
	m.pub.mu.Lock()
	prev := m.pub.failed[id]
	f := prev.again(tip, reason, now)
	same := prev.reason == reason && prev.attempts > 0
	m.pub.failed[id] = f
	m.pub.mu.Unlock()
	if same {
		m.log.Debug("publish failed again", "id", id, "commit", tip, "reason", reason, "attempts", f.attempts, "err", err)
	} else {
		m.log.Warn("publish failed", "id", id, "commit", tip, "reason", reason, "retry", f.next.Sub(now).Round(time.Second), "err", err)
	}
	_, _ = m.st.UpdateConversation(strings.TrimSuffix(id, liveKey), func(r *store.Conversation) error {
		r.PublishError = fmt.Sprintf("%s (%s; retried with backoff, next in %s)", err.Error(), reason, f.next.Sub(now).Round(time.Second))
		return nil
	})
}

// mirror makes the host's live mirror of conversation id's view refs
// (refs/ohd/live/<id>/) equal to want, through its running container; a
// failure is recorded as a publish's is.
func (m *Manager) mirror(ctx context.Context, id string, want map[string]string) {
	unlock := m.publishLock(id)
	defer unlock()
	c, err := m.st.Conversation(id)
	if err != nil || c.GitLayout != store.GitLayoutView || c.ContainerID == "" || c.Removal != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	t0 := time.Now()
	res, err := m.wt.Mirror(ctx, worktreeOf(c), containerSandbox{rt: m.rt, id: c.ContainerID}, want)
	m.cfg.OnStep(id, "mirror", time.Since(t0))
	if err != nil {
		if ctx.Err() == nil || !errors.Is(err, context.Canceled) {
			m.publishFailed(id+liveKey, "", fmt.Errorf("live mirror: %w", err))
		}
		return
	}
	m.pub.mu.Lock()
	m.pub.live[id] = res.Live
	_, failed := m.pub.failed[id+liveKey]
	delete(m.pub.failed, id+liveKey)
	m.pub.mu.Unlock()
	if failed {
		_, _ = m.st.UpdateConversation(id, func(r *store.Conversation) error {
			// Only the mirror's own failure: the branch's (a commit held
			// back, say) stays until the branch publishes.
			if strings.HasPrefix(r.PublishError, "live mirror: ") {
				r.PublishError = ""
			}
			return nil
		})
	}
}

// publishNow publishes a running conversation's view once, before its
// container stops (best effort: a failure is logged; the final publish at
// removal catches up).
func (m *Manager) publishNow(ctx context.Context, c store.Conversation) {
	if c.GitLayout != store.GitLayoutView || c.ContainerID == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tip, err := m.wt.ViewBranch(worktreeOf(c))
	if err == nil && tip != "" && tip != c.Published {
		_, err = m.publish(ctx, c.ID, tip)
	}
	if err != nil {
		m.log.Warn("publish before stop failed", "id", c.ID, "err", err)
	}
}

// publishLock serializes publishing one conversation (the publisher, a
// stop, a removal).
func (m *Manager) publishLock(id string) func() { return m.lockIn(m.pubLocks, id) }

// moveToView gives a conversation made before git views its own view, with
// its container stopped (see worktree.SeedView); the host branch, where
// its agent wrote directly, becomes what ohd has published.
func (m *Manager) moveToView(ctx context.Context, c store.Conversation) (store.Conversation, error) {
	if c.GitLayout != store.GitLayoutShared || c.Worktree == "" || m.rt.Kind() == "local" {
		return c, nil
	}
	wt, err := m.wt.SeedView(ctx, worktreeOf(c))
	if err != nil {
		return c, fmt.Errorf("move conversation %s to its own git view: %w", c.ID, err)
	}
	published, err := m.wt.HostBranch(ctx, wt)
	if err != nil {
		return c, fmt.Errorf("move conversation %s to its own git view: %w", c.ID, err)
	}
	m.log.Info("conversation moved to its own git view", "id", c.ID, "view", wt.View)
	return m.st.UpdateConversation(c.ID, func(r *store.Conversation) error {
		r.GitLayout, r.GitView, r.Published = store.GitLayoutView, wt.View, published
		r.Notes = append(r.Notes, "moved to its own git view: the container no longer writes the repository")
		return nil
	})
}
