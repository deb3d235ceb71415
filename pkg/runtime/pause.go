package runtime

import (
	"context"
	"fmt"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// Pause freezes the container's processes (the engine's cgroup freezer):
// a removal stops the agent this way before it saves the agent's work, so
// nothing the agent does after the save starts is lost, and a failed save
// gives the conversation back exactly as it was (Unpause). Force-removing
// a paused container needs no Unpause.
func (d *Docker) Pause(ctx context.Context, id string) error {
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
