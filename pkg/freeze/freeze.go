package freeze

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// All sends SIGSTOP to every process the caller may signal, except itself
// and PID 1 of its namespace (kill(-1), see kill(2): in a conversation's
// container, every process of the agent, its inner server included; PID 1
// is the engine's init, which only reaps), and waits until each of them
// is stopped: a process in a system call finishes it first. It signals
// again while it waits, so a child forked meanwhile is stopped too. It
// fails if some process is still running when ctx ends.
//
// It never leaves stopped a process the container runtime is still
// starting (a `runc init` of an exec, see Starting): the engine waits
// for that process and would hang on the container for ever. While one
// is there, All stops nothing, and if one appeared as it signalled, it
// resumes everything (SIGCONT) and tries again once the start is over.
func All(ctx context.Context) error {
	self := os.Getpid()
	for {
		if starting := Starting(); len(starting) > 0 {
			if !wait(ctx) {
				return fmt.Errorf("freeze: the container runtime is still starting processes %s: %w", strings.Join(starting, ", "), ctx.Err())
			}
			continue
		}
		if err := syscall.Kill(-1, syscall.SIGSTOP); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("freeze: %w", err)
		}
		if len(Starting()) > 0 {
			// One started between the check and the signal: it may be
			// stopped. Resume all; try again after its start.
			if err := Thaw(); err != nil {
				return err
			}
			continue
		}
		running, err := runningOthers(self)
		if err != nil {
			return err
		}
		if len(running) == 0 {
			return nil
		}
		if !wait(ctx) {
			return fmt.Errorf("freeze: processes %s still run: %w", strings.Join(running, ", "), ctx.Err())
		}
	}
}

// wait waits a moment; false if ctx ended.
func wait(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(2 * time.Millisecond):
		return true
	}
}

// Starting lists the processes of the caller's PID namespace (any user)
// that the container runtime is still starting: runc's init stages name
// themselves runc:[0:PARENT], runc:[1:CHILD] and runc:[2:INIT] until they
// exec the command (runc's nsexec), crun's helpers crun. A process here
// still owes runc an answer (runc waits for its exec).
func Starting() []string {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil {
			continue
		}
		if IsRuntimeInit(strings.TrimSpace(string(b))) {
			out = append(out, e.Name())
		}
	}
	return out
}

// IsRuntimeInit says a process's comm is a container runtime's init (a
// process the runtime still owes an answer: freezing it wedges the engine).
func IsRuntimeInit(comm string) bool {
	return strings.HasPrefix(comm, "runc:[") || comm == "runc" || comm == "runc-init" || comm == "crun"
}

// Thaw sends SIGCONT to every process the caller may signal.
func Thaw() error {
	if err := syscall.Kill(-1, syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("thaw: %w", err)
	}
	return nil
}

// runningOthers lists the processes of the caller's user, other than self
// and PID 1, that are not stopped (or dead), from /proc.
func runningOthers(self int) ([]string, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("freeze: %w", err)
	}
	uid := os.Getuid()
	var out []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == 1 || pid == self {
			continue
		}
		st, err := os.Stat(filepath.Join("/proc", e.Name()))
		if err != nil {
			continue // gone
		}
		if s, ok := st.Sys().(*syscall.Stat_t); !ok || int(s.Uid) != uid {
			continue // not ours to signal
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		if state := procState(string(b)); state != "T" && state != "t" && state != "Z" && state != "X" && state != "" {
			// "19 (git, D)": what it is and why it runs, for the error.
			out = append(out, fmt.Sprintf("%s (%s, %s)", e.Name(), procComm(string(b)), state))
		}
	}
	return out, nil
}

// procComm is the command name of a /proc/<pid>/stat line.
func procComm(stat string) string {
	i, j := strings.IndexByte(stat, '('), strings.LastIndexByte(stat, ')')
	if i < 0 || j < i {
		return ""
	}
	return stat[i+1 : j]
}

// procState is the state field of a /proc/<pid>/stat line: the field
// after the command name, which is in parentheses and may hold any byte.
func procState(stat string) string {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 || i+3 > len(stat) {
		return ""
	}
	return stat[i+2 : i+3]
}
