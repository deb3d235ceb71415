package runtime

import (
	"context"
	"fmt"
	"io"
	"time"
)

// Local is the Runtime without containers, for agents that run on the
// host: the conversation gets its worktree and broker socket, and nothing
// else. Start and Restart succeed with an empty Instance (no address: the
// caller reaches the agent however it runs it), List is always empty,
// Events waits for ctx, and Logs and Exec return ErrNoContainer (a
// command runs on the host directly, not through ohd).
type Local struct{}

var _ Runtime = Local{}

// NewLocal returns the local runtime.
func NewLocal() Runtime { return Local{} }

// Kind returns "local".
func (Local) Kind() string { return "local" }

// ResolveImage returns ref unresolved: the local runtime runs no image.
func (Local) ResolveImage(_ context.Context, ref string) (Image, error) {
	return Image{Ref: ref}, nil
}

// Pulls returns nothing: the local runtime pulls no image.
func (Local) Pulls() []Pull { return nil }

// Start checks s and returns an empty Instance.
func (Local) Start(_ context.Context, s Spec) (Instance, error) {
	if s.ConversationID == "" {
		return Instance{}, fmt.Errorf("start: %w: conversation id is empty", ErrInvalidSpec)
	}
	return Instance{}, nil
}

// Restart returns an empty Instance.
func (Local) Restart(context.Context, string, Spec) (Instance, error) { return Instance{}, nil }

// Stop does nothing.
func (Local) Stop(context.Context, string, time.Duration) error { return nil }

// Remove does nothing.
func (Local) Remove(context.Context, string) error { return nil }

// Inspect returns ErrNotFound: there are no containers.
func (Local) Inspect(_ context.Context, id string) (Container, error) {
	return Container{}, fmt.Errorf("inspect container %s: %w (local runtime)", id, ErrNotFound)
}

// List returns nothing.
func (Local) List(context.Context, string) ([]Container, error) { return nil, nil }

// Events waits until ctx ends: nothing ever happens.
func (Local) Events(ctx context.Context, _ string, _ func(Event)) error {
	<-ctx.Done()
	return nil
}

// Logs returns ErrNoContainer.
func (Local) Logs(context.Context, string, bool, io.Writer, io.Writer) error {
	return fmt.Errorf("logs: %w: the agent runs on the host; read its output there", ErrNoContainer)
}

// Exec returns ErrNoContainer.
func (Local) Exec(context.Context, string, []string, ExecOptions) (int, error) {
	return -1, fmt.Errorf("exec: %w: run the command on the host instead", ErrNoContainer)
}

// Ping succeeds.
func (Local) Ping(context.Context) error { return nil }

// Close does nothing.
func (Local) Close() error { return nil }
