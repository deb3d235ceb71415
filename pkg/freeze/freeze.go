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
func All(ctx context.Context) error {
	self := os.Getpid()
	for {
		if err := syscall.Kill(-1, syscall.SIGSTOP); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("freeze: %w", err)
		}
		running, err := runningOthers(self)
		if err != nil {
			return err
		}
		if len(running) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("freeze: processes %s still run: %w", strings.Join(running, ", "), ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
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
			out = append(out, e.Name())
		}
	}
	return out, nil
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
