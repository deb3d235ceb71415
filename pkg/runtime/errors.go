package runtime

import (
	"fmt"
	"strings"
)

// The steps of a Start or Restart, as StartError.Step names them.
const (
	StepCreate = "create" // creating the container (image, name, mounts)
	StepStart  = "start"  // starting it and reading its published port
	StepReady  = "ready"  // waiting for the health check to answer 200
)

// StartError is the error of a failed Start or Restart: which step failed,
// the container's exit code if it exited, and the tail of its output. It
// wraps the cause, so errors.Is finds ErrExited, ErrNotReady, ErrNotFound,
// ErrConflict or ErrEngineUnavailable through it.
type StartError struct {
	// Step is StepCreate, StepStart or StepReady.
	Step string
	// Name is the container's name.
	Name string
	// ContainerID is "" when create failed.
	ContainerID string
	// Exited says the container exited; ExitCode and OOMKilled say how.
	Exited    bool
	ExitCode  int
	OOMKilled bool
	// LogTail is the last lines of the container's output ("" if none).
	LogTail string
	// Removed says the container was removed (Start always removes it;
	// Restart only stops it).
	Removed bool
	// Err is the cause.
	Err error
}

func (e *StartError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "start container %s: %s: %v", e.Name, e.Step, e.Err)
	if e.OOMKilled {
		b.WriteString(" (killed for exceeding its memory limit)")
	}
	if e.LogTail != "" {
		b.WriteString("\ncontainer output (last lines):\n")
		for _, line := range strings.Split(strings.TrimRight(e.LogTail, "\n"), "\n") {
			b.WriteString("  | ")
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

func (e *StartError) Unwrap() error { return e.Err }
