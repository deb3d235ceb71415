package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
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
	ctx = withExecContainer(ctx, id)
	var size client.ConsoleSize
	if opts.TTY && opts.Size.Rows > 0 && opts.Size.Cols > 0 {
		size = client.ConsoleSize{Height: uint(opts.Size.Rows), Width: uint(opts.Size.Cols)}
	}
	created, err := d.api.ExecCreate(ctx, id, client.ExecCreateOptions{
		User:         opts.User,
		WorkingDir:   opts.WorkingDir,
		Env:          opts.Env,
		Cmd:          cmd,
		TTY:          opts.TTY,
		ConsoleSize:  size,
		AttachStdin:  opts.Stdin != nil,
		AttachStdout: true,
		AttachStderr: true,
	})
	if err != nil {
		return -1, d.wrap("exec in container", shortID(id), err)
	}
	d.step("exec-created")
	att, err := d.api.ExecAttach(ctx, created.ID, client.ExecAttachOptions{TTY: opts.TTY, ConsoleSize: size})
	if err != nil {
		return -1, d.wrap("exec in container", shortID(id), err)
	}
	defer att.Close()
	d.step("exec-started")
	// The hijacked connection does not watch ctx.
	stopClose := context.AfterFunc(ctx, att.Close)
	defer stopClose()
	// The watchdog: a command the engine has not started within the
	// engine timeout (a `runc init` stopped mid-exec, a wedged shim) is
	// given up, and the connection closed, instead of waited on for ever.
	var stuck atomic.Bool
	if d.engineTimeout > 0 {
		wd := time.AfterFunc(d.engineTimeout, func() {
			if d.execStuck(ctx, id, created.ID) {
				stuck.Store(true)
				att.Close()
			}
		})
		defer wd.Stop()
	}
	stuckErr := func() error {
		return fmt.Errorf("exec in container %s: %w: the engine did not start the command within %v (it may be wedged on this container)",
			shortID(id), ErrEngineTimeout, d.engineTimeout)
	}

	if size != (client.ConsoleSize{}) {
		// Engines before API 1.42 ignore ConsoleSize: set the size now, as
		// docker exec does with them. The engine answers once the command
		// has started and its terminal has the size, so the command sees
		// it by the time it reads its first input (what it prints before
		// that may have been laid out for 0x0 on such an engine).
		d.resize(ctx, created.ID, opts.Size)
	}
	if opts.Stdin != nil {
		// This goroutine ends when Stdin reaches EOF or fails, or when the
		// connection is closed under a write; Exec does not wait for a
		// Read that blocks (see ExecOptions.Stdin).
		go func() {
			_, _ = io.Copy(att.Conn, opts.Stdin)
			_ = att.CloseWrite()
		}()
	}
	if opts.TTY && opts.Resize != nil {
		resizeDone := make(chan struct{})
		resizeCtx, stopResize := context.WithCancel(ctx)
		go func() {
			defer close(resizeDone)
			d.forwardResizes(resizeCtx, created.ID, opts.Resize)
		}()
		defer func() { stopResize(); <-resizeDone }()
	}
	var copyOut func() error
	if opts.TTY {
		// A terminal has one output stream, not multiplexed.
		copyOut = func() error {
			w := opts.Stdout
			if w == nil {
				w = io.Discard
			}
			_, err := io.Copy(w, att.Reader)
			return err
		}
	} else {
		copyOut = func() error { return demux(opts.Stdout, opts.Stderr, att.Reader) }
	}
	err = copyOut()
	if stuck.Load() {
		return -1, stuckErr()
	}
	if err != nil && ctx.Err() == nil {
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

// execStuck reports whether the exec execID in container id has not
// started (no process yet) or the engine does not say: the watchdog's
// check. It records the stall.
func (d *Docker) execStuck(ctx context.Context, id, execID string) bool {
	// A short look: an engine wedged on the container may not answer
	// this either, and the exec has already had its full deadline.
	ictx, cancel := context.WithTimeout(ctx, min(5*time.Second, d.engineTimeout))
	defer cancel()
	ins, err := d.api.ExecInspect(ictx, execID, client.ExecInspectOptions{})
	switch {
	case ctx.Err() != nil:
		return false // the caller gave up itself
	case err == nil && ins.PID > 0:
		// Started. (The engine marks an exec Running before its runtime
		// has started the process: only a pid says it has.)
		return false
	case err != nil && !errors.Is(err, ErrEngineTimeout):
		return false // gone, or the engine answered: the read will end
	}
	d.stalls.Record(d.log, "docker runtime", Stall{Op: "exec start", Container: id, Timeout: d.engineTimeout})
	return true
}

// forwardResizes passes each size from sizes to the exec's terminal until
// ctx ends.
func (d *Docker) forwardResizes(ctx context.Context, execID string, sizes <-chan TermSize) {
	for {
		select {
		case <-ctx.Done():
			return
		case s, ok := <-sizes:
			if !ok {
				return
			}
			d.resize(ctx, execID, s)
		}
	}
}

// resize sets the window size of an exec's terminal. A resize that fails
// (the command has just exited) is dropped: the size is advice to the
// command, not part of its result.
func (d *Docker) resize(ctx context.Context, execID string, s TermSize) {
	if s.Rows == 0 || s.Cols == 0 {
		return
	}
	if _, err := d.api.ExecResize(ctx, execID, client.ExecResizeOptions{Height: uint(s.Rows), Width: uint(s.Cols)}); err != nil && ctx.Err() == nil {
		d.log.Debug("docker runtime: exec resize failed", "exec", shortID(execID), "err", err)
	}
}
