package freeze

import (
	"context"
	"errors"
	"io"
)

// HeldFlag, among the arguments of a command that freezes (ohd's `ohctl
// view collect --freeze`), says that its caller holds the command's
// standard input open for as long as it waits for it: the input's end
// means the caller is gone (killed, stopped, or it gave up). The command
// then runs under Held.
const HeldFlag = "--ohd-holds-stdin"

// ErrHolderGone is Held's error when the holder went away first.
var ErrHolderGone = errors.New("the caller went away before the command was done: called off, every process resumed")

// Held runs fn while holder stays open (a read that has not ended). If
// holder ends first, fn's context is cancelled, Held waits for fn, resumes
// every process (Thaw) and returns ErrHolderGone: a freeze must not
// outlive the caller that started it, which alone would resume the agent
// (or finish the save), and a freeze still under way would stop the next
// caller's own freeze too, which then waited for ever (found by the
// fault-injection test of issue 27). If fn returns first, what it froze
// stays frozen for the caller's next step.
func Held(ctx context.Context, holder io.Reader, fn func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	gone := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, holder)
		close(gone)
		cancel()
	}()
	err := fn(ctx)
	select {
	case <-gone:
		if terr := Thaw(); terr != nil {
			return errors.Join(ErrHolderGone, terr)
		}
		return ErrHolderGone
	default:
		return err
	}
}
