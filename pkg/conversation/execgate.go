package conversation

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// execStartGrace is how long an exec (ohctl exec) counts as starting:
// its process is made by the container runtime after the engine has
// answered, and a removal's freeze (SIGSTOP to every process of the
// container) cannot stop a process that does not exist yet. A removal
// waits for the execs still starting (up to this long) before it
// freezes, and refuses new ones.
const execStartGrace = 5 * time.Second

// execGate counts, per conversation, the execs still starting, and says
// which conversations a removal holds (no exec may start in them).
type execGate struct {
	mu       sync.Mutex
	changed  chan struct{} // closed and renewed on every change
	starting map[string]int
	held     map[string]bool
}

func (g *execGate) init() {
	if g.starting == nil {
		g.starting, g.held, g.changed = map[string]int{}, map[string]bool{}, make(chan struct{})
	}
}

// notify wakes the waiters; under g.mu.
func (g *execGate) notify() {
	close(g.changed)
	g.changed = make(chan struct{})
}

// BeginExec says an exec is about to start in conversation id, so that a
// removal waits for its process to exist before it freezes the
// container (see execStartGrace). started must be called once the
// exec's command runs or has ended; it is called by itself after
// execStartGrace. A conversation whose removal is under way refuses
// (ErrConflict): what its agent did after the freeze would not be saved.
func (m *Manager) BeginExec(id string) (started func(), err error) {
	g := &m.execs
	g.mu.Lock()
	defer g.mu.Unlock()
	g.init()
	if g.held[id] {
		return nil, fmt.Errorf("%w: conversation %s is being removed: no command starts in it now", ErrConflict, id)
	}
	g.starting[id]++
	var once sync.Once
	done := func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.starting[id]--; g.starting[id] <= 0 {
				delete(g.starting, id)
			}
			g.notify()
		})
	}
	t := time.AfterFunc(execStartGrace, done)
	return func() { t.Stop(); done() }, nil
}

// holdExecs refuses new execs in conversation id and waits (within ctx,
// and at most execStartGrace) until those starting have started; the
// returned release lets execs start again (a removal that gave up).
func (m *Manager) holdExecs(ctx context.Context, id string) (release func()) {
	g := &m.execs
	g.mu.Lock()
	g.init()
	g.held[id] = true
	g.mu.Unlock()
	deadline := time.NewTimer(execStartGrace)
	defer deadline.Stop()
	for {
		g.mu.Lock()
		n, changed := g.starting[id], g.changed
		g.mu.Unlock()
		if n == 0 {
			break
		}
		select {
		case <-changed:
			continue
		case <-ctx.Done():
		case <-deadline.C:
		}
		break
	}
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		delete(g.held, id)
		g.notify()
	}
}
