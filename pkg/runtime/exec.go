package runtime

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/moby/moby/client"
)

// Exec runs cmd in the running container id and returns its exit code.
// The command runs with the container's user, capabilities (none) and
// no-new-privileges unless opts.User says otherwise. ctx ending closes the
// connection (the command may keep running in the container).
func (d *Docker) Exec(ctx context.Context, id string, cmd []string, opts ExecOptions) (int, error) {
	if len(cmd) == 0 {
		return -1, fmt.Errorf("exec in container %s: no command", shortID(id))
	}
	created, err := d.api.ExecCreate(ctx, id, client.ExecCreateOptions{
		User:         opts.User,
		WorkingDir:   opts.WorkingDir,
		Env:          opts.Env,
		Cmd:          cmd,
		AttachStdin:  opts.Stdin != nil,
		AttachStdout: true,
		AttachStderr: true,
	})
	if err != nil {
		return -1, d.wrap("exec in container", shortID(id), err)
	}
	att, err := d.api.ExecAttach(ctx, created.ID, client.ExecAttachOptions{})
	if err != nil {
		return -1, d.wrap("exec in container", shortID(id), err)
	}
	defer att.Close()
	// The hijacked connection does not watch ctx.
	stopClose := context.AfterFunc(ctx, att.Close)
	defer stopClose()

	if opts.Stdin != nil {
		// This goroutine ends when Stdin reaches EOF or fails, or when the
		// connection is closed under a write; Exec does not wait for a
		// Read that blocks (see ExecOptions.Stdin).
		go func() {
			_, _ = io.Copy(att.Conn, opts.Stdin)
			_ = att.CloseWrite()
		}()
	}
	if err := demux(opts.Stdout, opts.Stderr, att.Reader); err != nil && ctx.Err() == nil {
		return -1, fmt.Errorf("exec in container %s: reading output: %w", shortID(id), err)
	}
	if ctx.Err() != nil {
		return -1, fmt.Errorf("exec in container %s: %w", shortID(id), ctx.Err())
	}
	// The output ended; the engine records the exit code a moment later.
	for delay := time.Millisecond; ; delay = min(delay*2, 100*time.Millisecond) {
		ins, err := d.api.ExecInspect(ctx, created.ID, client.ExecInspectOptions{})
		if err != nil {
			return -1, d.wrap("exec in container", shortID(id), err)
		}
		if !ins.Running {
			return ins.ExitCode, nil
		}
		if !sleepCtx(ctx, delay) {
			return -1, fmt.Errorf("exec in container %s: %w", shortID(id), ctx.Err())
		}
	}
}
