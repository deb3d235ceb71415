package conversation

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

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
// published now, and the last view commit that failed per conversation:
// one git's validation refused is not tried again until the view moves
// on; one that failed otherwise (the container's exec, a timeout) is
// retried after publishRetry, not at every tick.
type publisher struct {
	mu       sync.Mutex
	inflight map[string]bool
	failed   map[string]failedPublish
	wg       sync.WaitGroup
}

// failedPublish is a view commit whose publish failed.
type failedPublish struct {
	tip   string
	until time.Time // zero: refused, never retried for this tip
}

// publishRetry is how long a publish that failed for a reason other
// than validation waits before the same commit is tried again.
const publishRetry = 5 * time.Second

// holds reports whether f keeps tip from being published now.
func (f failedPublish) holds(tip string, now time.Time) bool {
	return f.tip == tip && (f.until.IsZero() || now.Before(f.until))
}

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
	every(ctx, interval, func() {
		for _, c := range m.st.Conversations() {
			if c.State != store.StateRunning || c.GitLayout != store.GitLayoutView || c.ContainerID == "" || c.Removal != nil {
				continue
			}
			tip, err := m.wt.ViewBranch(worktreeOf(c))
			if err != nil || tip == "" || tip == c.Published {
				continue
			}
			m.pub.mu.Lock()
			busy := m.pub.inflight[c.ID] || m.pub.failed[c.ID].holds(tip, time.Now())
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
				if _, err := m.publish(ctx, id, tip); err != nil && ctx.Err() == nil {
					m.log.Warn("publish failed", "id", id, "commit", tip, "err", err)
				}
			}(c.ID, tip)
		}
	})
}

// publish publishes the view commit tip of conversation id through its
// running container and records the outcome. A refused publish is recorded
// (PublishError) and not tried again for the same commit.
func (m *Manager) publish(ctx context.Context, id, tip string) (store.Conversation, error) {
	unlock := m.publishLock(id)
	defer unlock()
	c, err := m.st.Conversation(id)
	if err != nil || c.GitLayout != store.GitLayoutView || c.ContainerID == "" || tip == c.Published {
		return c, err
	}
	// A sandbox command the agent made hang (it can replace programs in
	// its own container) must not hold the conversation's publishing, or a
	// stop waiting for it, for ever.
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	t0 := time.Now()
	res, err := m.wt.Publish(ctx, worktreeOf(c), containerSandbox{rt: m.rt, id: c.ContainerID}, tip, c.Published)
	m.cfg.OnStep(id, "publish", time.Since(t0))
	if err != nil {
		f := failedPublish{tip: tip}
		if !errors.Is(err, worktree.ErrRefused) {
			f.until = time.Now().Add(publishRetry)
		}
		m.pub.mu.Lock()
		m.pub.failed[id] = f
		m.pub.mu.Unlock()
		if errors.Is(err, worktree.ErrRefused) {
			_, _ = m.st.UpdateConversation(id, func(r *store.Conversation) error {
				r.PublishError = err.Error()
				return nil
			})
		}
		return c, err
	}
	return m.st.UpdateConversation(id, func(r *store.Conversation) error {
		r.Published = res.Published
		r.PublishError = ""
		r.PublishConflict = res.Conflict
		return nil
	})
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
