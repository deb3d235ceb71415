package runtime

import (
	"context"
	"fmt"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// Pause freezes the container's processes (the engine's cgroup freezer):
// a removal stops the agent this way before it saves the agent's work, so
// nothing the agent does after the save starts is lost, and a failed save
// gives the conversation back exactly as it was (Unpause). Force-removing
// a paused container needs no Unpause.
func (d *Docker) Pause(ctx context.Context, id string) error {
	// The engine's freeze also stops a process the container runtime is
	// still starting (runc's init of an exec); the engine then waits on
	// that container for ever: exec, pause and unpause on it hang until
	// its freezer is thawed by hand (seen here, issue 27). So the pause
	// waits until none is starting, and when one appears as the freeze
	// lands, thaws and tries again, within ctx.
	dir, v2 := d.freezerOf(ctx, id)
	// thawedByHand: the freezer was thawed behind the engine's back, so
	// the engine still holds the container paused and answers the next
	// pause "already paused" without freezing anything.
	thawedByHand := false
	for {
		if err := waitNoneStarting(ctx, dir); err != nil {
			return fmt.Errorf("pause container %s: %w", shortID(id), err)
		}
		if err := d.pause(ctx, id); err != nil || dir == "" {
			return err
		}
		if thawedByHand {
			// Freeze it as the engine believes it is (its own unpause
			// later thaws it again).
			if err := freezeCgroup(ctx, dir, v2); err != nil {
				return fmt.Errorf("pause container %s: the engine holds it paused, but its freezer, thawed by ohd, did not freeze again: %w", shortID(id), err)
			}
		}
		starting, err := startingIn(dir)
		if err != nil || len(starting) == 0 {
			return nil
		}
		d.log.Warn("docker runtime: the pause caught a process the container runtime was starting; thawing and trying again", "container", shortID(id), "pids", starting)
		if err := d.Unpause(ctx, id); err != nil {
			if terr := thawCgroup(dir, v2); terr != nil {
				return fmt.Errorf("pause container %s: it froze a process being started and neither the engine (%v) nor its freezer (%v) thawed it", shortID(id), err, terr)
			}
			d.log.Warn("docker runtime: the engine's unpause failed; thawed the container's freezer directly", "container", shortID(id), "err", err)
			thawedByHand = true
		}
	}
}

// pause is the engine's pause, its answers made errors of this package.
func (d *Docker) pause(ctx context.Context, id string) error {
	_, err := d.api.ContainerPause(ctx, id, client.ContainerPauseOptions{})
	switch {
	case err == nil:
		return nil
	case cerrdefs.IsNotFound(err):
		return d.wrap("pause container", shortID(id), err)
	// The engine's words (Docker 20.10 answers these with a 409 or a 500).
	case strings.Contains(err.Error(), "already paused"):
		return nil
	case strings.Contains(err.Error(), "not running"):
		return fmt.Errorf("pause container %s: %w", shortID(id), ErrNotRunning)
	}
	return d.wrap("pause container", shortID(id), err)
}

// freezerOf is the cgroup the engine's pause freezes for container id,
// "" where ohd cannot see it (not on Linux, another PID namespace, a
// container not running): the pause is then the engine's alone.
func (d *Docker) freezerOf(ctx context.Context, id string) (dir string, v2 bool) {
	res, err := d.api.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil || res.Container.State == nil || res.Container.State.Pid <= 0 {
		return "", false
	}
	dir, v2, err = freezerOf(res.Container.State.Pid)
	if err != nil {
		d.log.Debug("docker runtime: the container's freezer is not visible; its pause cannot spare a starting process", "container", shortID(id), "err", err)
		return "", false
	}
	return dir, v2
}

// waitNoneStarting waits until no process of the cgroup dir is being
// started by the container runtime (at once when dir is "").
func waitNoneStarting(ctx context.Context, dir string) error {
	for dir != "" {
		starting, err := startingIn(dir)
		if err != nil || len(starting) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the container runtime was still starting processes %v in it: %w", starting, context.Cause(ctx))
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// Unpause thaws a paused container; one that is not paused is no error.
func (d *Docker) Unpause(ctx context.Context, id string) error {
	_, err := d.api.ContainerUnpause(ctx, id, client.ContainerUnpauseOptions{})
	if err == nil || (!cerrdefs.IsNotFound(err) && strings.Contains(err.Error(), "is not paused")) {
		return nil
	}
	return d.wrap("unpause container", shortID(id), err)
}

// Pause has no container to freeze.
func (Local) Pause(context.Context, string) error {
	return fmt.Errorf("pause: %w", ErrNoContainer)
}

// Unpause has no container to thaw.
func (Local) Unpause(context.Context, string) error {
	return fmt.Errorf("unpause: %w", ErrNoContainer)
}
