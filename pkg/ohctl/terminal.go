package ohctl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"

	"github.com/ohd-dev/ohd/pkg/control"
)

// errNotATerminal refuses exec -t without a terminal, in docker's words.
var errNotATerminal = errors.New("exec -t: the input device is not a TTY: run ohctl exec -t from a terminal, or leave out -t to pass standard input as it is")

// terminalFd is the descriptor of r if r is a terminal.
func terminalFd(r any) (int, bool) {
	f, ok := r.(interface{ Fd() uintptr })
	if !ok {
		return 0, false
	}
	fd := int(f.Fd())
	return fd, term.IsTerminal(fd)
}

// execTTY runs req on a pseudo-terminal in conversation id, with ohctl's
// terminal (its standard input) in raw mode while the command runs, so
// every key reaches the command (^C included) and the terminal inside does
// the echoing. The terminal's mode is restored on every way out: the
// command's exit, an error, a panic, and a signal (SIGHUP, SIGTERM,
// SIGINT, SIGQUIT sent to ohctl end the exec). Window sizes are sent at
// the start and on each SIGWINCH.
func (s *state) execTTY(ctx context.Context, id string, req control.ExecRequest) (int, error) {
	fd, ok := terminalFd(s.env.Stdin)
	if !ok {
		return -1, errNotATerminal
	}
	// Signals are caught before the mode changes, so none can end ohctl
	// between the change and the deferred restore.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGWINCH, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT)
	defer signal.Stop(sigs)

	if size, ok := termSize(fd); ok {
		req.Size = &size
	}
	saved, err := term.MakeRaw(fd)
	if err != nil {
		return -1, fmt.Errorf("exec -t: putting the terminal in raw mode: %w", err)
	}
	defer func() { _ = term.Restore(fd, saved) }()

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sizes := make(chan control.TermSize, 1)
	done := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-done:
				return
			case sig := <-sigs:
				if sig != syscall.SIGWINCH {
					cancel(fmt.Errorf("exec -t: ended by %v", sig))
					return
				}
				size, ok := termSize(fd)
				if !ok {
					continue
				}
				// Only the latest size matters: replace one not yet sent.
				select {
				case <-sizes:
				default:
				}
				sizes <- size
			}
		}
	}()
	defer func() { close(done); <-watched }()

	code, err := s.client().ExecTTY(ctx, id, req, s.env.Stdin, sizes, s.env.Stdout)
	if cause := context.Cause(ctx); err != nil && cause != nil && !errors.Is(cause, context.Canceled) {
		return -1, cause
	}
	return code, err
}

// termSize is the window size of the terminal fd.
func termSize(fd int) (control.TermSize, bool) {
	w, h, err := term.GetSize(fd)
	if err != nil || w <= 0 || h <= 0 || w > 0xffff || h > 0xffff {
		return control.TermSize{}, false
	}
	return control.TermSize{Rows: uint16(h), Cols: uint16(w)}, true
}
