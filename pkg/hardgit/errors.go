package hardgit

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrOwner is returned when git cannot run as the repository's owner:
	// ohd is neither root nor that owner (see OwnerError).
	ErrOwner = errors.New("repository owner mismatch")

	// ErrGit is wrapped by every failure of a git command (see GitError).
	ErrGit = errors.New("git failed")
)

// GitError describes a failed git invocation. It wraps ErrGit.
type GitError struct {
	// Args are git's arguments after the fixed hardening options.
	Args []string
	// Dir is the directory git ran in.
	Dir string
	// ExitCode is git's exit status, or -1 if it did not exit normally
	// (killed by the timeout, could not start).
	ExitCode int
	// Stderr is git's standard error, trimmed and truncated.
	Stderr string
	// Err is the underlying error from os/exec or the context.
	Err error
}

func (e *GitError) Error() string {
	var b strings.Builder
	b.WriteString("git ")
	b.WriteString(strings.Join(e.Args, " "))
	if e.Dir != "" {
		fmt.Fprintf(&b, " (in %s)", e.Dir)
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	if e.Stderr != "" {
		b.WriteString(": ")
		b.WriteString(e.Stderr)
	}
	return b.String()
}

// Unwrap returns ErrGit and the underlying error, so both errors.Is(err,
// ErrGit) and errors.Is(err, context.DeadlineExceeded) work.
func (e *GitError) Unwrap() []error { return []error{ErrGit, e.Err} }
