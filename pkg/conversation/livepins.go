package conversation

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ohd-dev/ohd/pkg/failpoint"
	"github.com/ohd-dev/ohd/pkg/gitboundary"
	"github.com/ohd-dev/ohd/pkg/nsmount"
	"github.com/ohd-dev/ohd/pkg/runtime"
	"github.com/ohd-dev/ohd/pkg/store"
)

// Live pins. A container keeps the mounts it was made with, so a
// submodule the user adds or checks out while the conversation runs (a
// `git submodule add`, a pull that brings one) would not be fixed in it
// (pkg/worktree/mountplan) until it is made anew: the agent could
// move its directory away and put a repository of its own there, which
// the user's git enters as that submodule without its ownership check.
// So while a conversation runs, the publisher notices when the user's
// index changes, works out the mount plan again, and binds what the
// running container lacks into its mount namespace at once
// (package nsmount). The agent's window is the time from the user's
// checkout to ohd's next look (about a second); a plan piece the agent
// already took (the directory or its .git is the agent's) is not pinned,
// and the conversation's publish error says so.

// errPinLater: the container could not be looked at now; the next look
// tries again.
var errPinLater = errors.New("the container cannot be looked at now")

// pinRecheck is how often the plan is worked out again without a change
// of the index ohd watches (a plain folder's repositories, a submodule's
// own index).
const pinRecheck = 10 * time.Second

// pinState is what the publisher knows of one conversation's pins.
type pinState struct {
	sig     string
	checked time.Time
	// busy: a look is running (in its own goroutine: the engine may be
	// slow to answer, and the publisher must not wait for it).
	busy bool
	// plan is the plan last worked out, whose lacking mounts were bound.
	plan string
	// container and bound: the targets ohd bound into that container, each
	// at most once (a target the namespace does not show as a mount point
	// after all is not stacked again every look).
	container string
	bound     map[string]bool
}

// indexSig is the stat of the index the user's submodule changes show in
// (in place: the repository's; a worktree: its registration's), or "".
func indexSig(c store.Conversation) string {
	var p string
	switch {
	case c.InPlace:
		p = filepath.Join(c.CommonDir, "index")
	case c.Worktree != "" && c.AdminID != "":
		p = filepath.Join(c.CommonDir, "worktrees", c.AdminID, "index")
	default:
		return ""
	}
	fi, err := os.Lstat(p)
	if err != nil {
		return "none"
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	if st == nil {
		return fi.ModTime().String()
	}
	return fmt.Sprintf("%d:%d:%d.%d", st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec)
}

// pinLive binds into c's running container the workspace mounts of
// today's plan it lacks, when the user's index changed since the last
// look (or pinRecheck passed), in a goroutine of the publisher's.
func (m *Manager) pinLive(ctx context.Context, c store.Conversation) {
	sig := indexSig(c)
	now := time.Now()
	m.pub.mu.Lock()
	if m.pub.pins == nil {
		m.pub.pins = map[string]pinState{}
	}
	st, seen := m.pub.pins[c.ID]
	due := !st.busy && (!seen || st.sig != sig || now.Sub(st.checked) >= pinRecheck)
	if !due {
		m.pub.mu.Unlock()
		return
	}
	if st.container != c.ContainerID || st.bound == nil {
		st.container, st.bound, st.plan = c.ContainerID, map[string]bool{}, ""
	}
	st.sig, st.checked, st.busy = sig, now, true
	m.pub.pins[c.ID] = st
	m.pub.mu.Unlock()
	m.pub.wg.Add(1)
	go func() {
		defer m.pub.wg.Done()
		plan := m.pinLook(ctx, c, st)
		m.pub.mu.Lock()
		if cur, ok := m.pub.pins[c.ID]; ok && cur.container == st.container {
			cur.busy, cur.plan = false, plan
			m.pub.pins[c.ID] = cur
		}
		m.pub.mu.Unlock()
	}()
}

// pinLook is one look of pinLive; it returns the plan it bound (its
// key), or "" when the next look must work on it again.
func (m *Manager) pinLook(ctx context.Context, c store.Conversation, st pinState) string {
	want, err := m.workspaceMounts(c)
	if err != nil {
		m.log.Warn("could not fix the new pointers in the running container", "id", c.ID, "err", err)
		return ""
	}
	key := fmt.Sprint(want)
	if key == st.plan {
		return key // bound already: no engine call for the same plan
	}
	ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pinned, err := m.pinMissing(ictx, c, want, st.bound)
	switch {
	case errors.Is(err, errPinLater):
		return ""
	case err != nil && ctx.Err() == nil:
		m.log.Warn("could not fix the new pointers in the running container", "id", c.ID, "err", err)
		m.recordPinError(c.ID, err)
	case len(pinned) > 0:
		m.log.Info("fixed new pointers in the running container", "id", c.ID, "mounts", pinned)
	}
	if err != nil {
		return ""
	}
	return key
}

// pinMissing binds the workspace mounts c's running container lacks and
// returns their targets.
func (m *Manager) pinMissing(ctx context.Context, c store.Conversation, want []runtime.Mount, bound map[string]bool) ([]string, error) {
	ins, err := m.rt.Inspect(ctx, c.ContainerID)
	if err != nil || !ins.Running {
		return nil, errPinLater // it stopped (its next start makes it anew with the plan), or the engine is slow
	}
	if ins.PID == 0 {
		return nil, errPinLater // the runtime cannot say (its processes are elsewhere): doctor reports the lack
	}
	have, err := mountPoints(ins.PID)
	if err != nil {
		// ohd cannot see the container's processes (a pid namespace of
		// its own): doctor reports what the engine says it lacks.
		m.log.Debug("cannot read the container's mounts", "id", c.ID, "err", err)
		return nil, errPinLater
	}
	missing := lackingMounts(want, have)
	if len(missing) == 0 {
		return nil, nil
	}
	sort.Slice(missing, func(i, j int) bool { return missing[i].Target < missing[j].Target }) // parents first
	uid, _ := agentOf(c)
	var binds []nsmount.Mount
	var taken []string
	for _, mt := range missing {
		if bound[mt.Target] {
			continue // bound before, and still not seen: not again
		}
		// The agent may have been quicker: what it owns is not pinned
		// (that would fix its repository in place of the user's).
		fi, err := os.Lstat(mt.Source)
		if err != nil {
			return nil, err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			taken = append(taken, mt.Source)
			continue
		}
		// A directory of the user's lent to the agent is the user's.
		if owner, _, err := gitboundary.OwnerOf(mt.Source); err != nil {
			return nil, err
		} else if owner == uid {
			taken = append(taken, mt.Source)
			continue
		}
		binds = append(binds, nsmount.Mount{Source: mt.Source, Target: mt.Target, ReadOnly: mt.ReadOnly})
	}
	var done []string
	if err := nsmount.Bind(ins.PID, binds); err != nil {
		return nil, err
	}
	for _, b := range binds {
		done = append(done, b.Target)
		bound[b.Target] = true
	}
	if len(taken) > 0 {
		return done, fmt.Errorf("the agent replaced what the user's git follows into a submodule before ohd could fix it: %s (owned by the agent's uid): do not run git in the repository until `ohctl rm %s` has moved the agent's git directories out (ohctl doctor %s lists them)",
			strings.Join(taken, ", "), c.ID, c.ID)
	}
	return done, nil
}

// lackingMounts are the mounts of want that are no mount point in have
// (target -> read-only), or read-write there where want is read-only.
func lackingMounts(want []runtime.Mount, have map[string]bool) []runtime.Mount {
	var out []runtime.Mount
	for _, mt := range want {
		ro, ok := have[mt.Target]
		if !ok || (mt.ReadOnly && !ro) {
			out = append(out, mt)
		}
	}
	return out
}

// recordPinError puts err where `ohctl show` shows it (the publish error):
// the user must know before they run git in the folder.
func (m *Manager) recordPinError(id string, err error) {
	_, _ = m.st.UpdateConversation(id, func(r *store.Conversation) error {
		r.PublishError = "fixed pointers: " + err.Error()
		return nil
	})
}

// mountPoints reads the mount points of pid's mount namespace: each
// target, and whether it is mounted read-only.
func mountPoints(pid int) (map[string]bool, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read the container's mounts: %w", err)
	}
	out := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 {
			continue
		}
		ro := false
		for _, o := range strings.Split(f[5], ",") {
			ro = ro || o == "ro"
		}
		out[unescapeMountinfo(f[4])] = ro
	}
	return out, nil
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// canReadMounts says whether ohd sees pid's mounts (not when ohd runs in
// a pid namespace of its own).
func canReadMounts(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid) + "/mountinfo")
	return err == nil
}

// relendEvery is how often a running conversation's tree is walked again
// to lend the user's new directories to its agent.
const relendEvery = 10 * time.Second

// relend lends to c's agent the directories of the user's made in its
// tree since its container started (gitboundary.Borrow, a walk of
// directories only), at most every relendEvery, in a goroutine of the
// publisher's: the backstop of the tree's watcher (watchtree.go), and,
// when no healthy watcher runs, shares the user's new files too
// (gitboundary.Apply). Until then the agent cannot write what the user
// made (the default ACLs give it nothing). Under the
// conversation's publish lock, which its removal holds throughout, and
// only while the record says it runs: a directory lent after the removal
// gave the tree back would stay the agent's.
func (m *Manager) relend(ctx context.Context, c store.Conversation) {
	if !separated(c) || releasedTree(c) == "" || failpoint.On("legacy/lend-late") {
		return
	}
	now := time.Now()
	m.pub.mu.Lock()
	if m.pub.lent == nil {
		m.pub.lent = map[string]time.Time{}
	}
	last, seen := m.pub.lent[c.ID]
	if seen && (last.IsZero() || now.Sub(last) < relendEvery) {
		m.pub.mu.Unlock()
		return
	}
	if !seen {
		// Its start lent the tree just now.
		m.pub.lent[c.ID] = now
		m.pub.mu.Unlock()
		return
	}
	m.pub.lent[c.ID] = time.Time{}
	m.pub.mu.Unlock()
	m.pub.wg.Add(1)
	go func() {
		defer m.pub.wg.Done()
		defer func() {
			m.pub.mu.Lock()
			if _, ok := m.pub.lent[c.ID]; ok {
				m.pub.lent[c.ID] = time.Now()
			}
			m.pub.mu.Unlock()
		}()
		unlock := m.publishLock(c.ID)
		defer unlock()
		cur, err := m.st.Conversation(c.ID)
		if err != nil || cur.State != store.StateRunning || cur.Removal != nil || ctx.Err() != nil {
			return
		}
		st, err := gitboundary.Borrow(releasedTree(cur), boundaryIDs(cur))
		switch {
		case err != nil && !errors.Is(err, os.ErrNotExist):
			m.log.Warn("could not lend the user's new directories to the agent", "id", c.ID, "err", err)
		case st.Changed > 0:
			m.log.Info("lent the user's new directories to the agent", "id", c.ID, "dirs", st.Changed)
		}
		if err == nil && !m.watchingAll(c.ID) {
			// No watcher sees every directory: the files the user made
			// since are shared here (the default ACLs give the agent
			// nothing of what the user makes).
			if st, err := gitboundary.Apply(releasedTree(cur), boundaryIDs(cur)); err != nil && !errors.Is(err, os.ErrNotExist) {
				m.log.Warn("could not share the user's new files with the agent", "id", c.ID, "err", err)
			} else if st.Changed > 0 {
				m.log.Info("shared the user's new files with the agent", "id", c.ID, "inodes", st.Changed)
			}
		}
	}()
}
