package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

const (
	defaultExecTimeout = 30 * time.Second
	maxExecTimeout     = 10 * time.Minute
	// maxExecOutput bounds each of stdout and stderr in the answer.
	maxExecOutput = 4 << 20
	// shellPath is the shell {"shell": ...} runs with.
	shellPath = "/bin/sh"
)

// execRequest is the body of POST /api/conversations/{id}/exec.
type execRequest struct {
	Command        []string          `json:"command"`
	Shell          string            `json:"shell"`
	Cwd            string            `json:"cwd"`
	Env            map[string]string `json:"env"`
	Stdin          string            `json:"stdin"`
	TimeoutSeconds float64           `json:"timeout_seconds"`
}

// execResponse is its answer.
type execResponse struct {
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	ExitCode int    `json:"exit_code"`
	TimedOut bool   `json:"timed_out,omitempty"`
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	c, found := s.convs.get(id)
	if !found {
		writeDetail(w, http.StatusNotFound, "Not Found")
		return
	}
	var req execRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeValidation(w, validationError{Type: "json_invalid", Loc: []any{"body"}, Msg: err.Error()})
		return
	}
	argv, err := req.argv()
	if err != nil {
		writeValidation(w, validationError{Type: "value_error", Loc: []any{"body"}, Msg: err.Error()})
		return
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = c.Workspace.WorkingDir
	} else if !filepath.IsAbs(cwd) {
		writeValidation(w, validationError{Type: "value_error", Loc: []any{"body", "cwd"}, Msg: "cwd must be an absolute path", Input: cwd})
		return
	}
	timeout := defaultExecTimeout
	if req.TimeoutSeconds < 0 {
		writeValidation(w, validationError{Type: "value_error", Loc: []any{"body", "timeout_seconds"}, Msg: "timeout_seconds must be positive", Input: req.TimeoutSeconds})
		return
	}
	if req.TimeoutSeconds > 0 {
		timeout = min(time.Duration(req.TimeoutSeconds*float64(time.Second)), maxExecTimeout)
	}
	writeJSON(w, http.StatusOK, runCommand(r.Context(), argv, cwd, req.Env, req.Stdin, timeout))
}

// argv returns the program and arguments to run: Command as is, or Shell
// through /bin/sh -c.
func (req *execRequest) argv() ([]string, error) {
	switch {
	case len(req.Command) > 0 && req.Shell != "":
		return nil, errors.New("give either command or shell, not both")
	case len(req.Command) > 0:
		if req.Command[0] == "" {
			return nil, errors.New("command[0] is empty")
		}
		return req.Command, nil
	case req.Shell != "":
		if _, err := os.Stat(shellPath); err != nil {
			return nil, fmt.Errorf("shell needs %s, which this container lacks; use command", shellPath)
		}
		return []string{shellPath, "-c", req.Shell}, nil
	default:
		return nil, errors.New("give command (an argv array) or shell")
	}
}

// runCommand runs argv in cwd with the server's environment plus env, and
// reports its output and exit status in the shell's conventions: 127 not
// found, 126 not executable, 124 timed out, 128+N killed by signal N.
func runCommand(ctx context.Context, argv []string, cwd string, env map[string]string, stdin string, timeout time.Duration) execResponse {
	return runCommandEnv(ctx, argv, cwd, env, nil, stdin, timeout)
}

// runCommandEnv is runCommand with the variables named by drop taken out
// of the server's environment first.
func runCommandEnv(ctx context.Context, argv []string, cwd string, env map[string]string, drop []string, stdin string, timeout time.Duration) execResponse {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = cwd
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); !slices.Contains(drop, name) {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdin = strings.NewReader(stdin)
	stdout := &cappedBuffer{max: maxExecOutput}
	stderr := &cappedBuffer{max: maxExecOutput}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// Own process group, so a timeout kills the command's children too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second

	err := cmd.Run()
	res := execResponse{Stdout: stdout.String(), Stderr: stderr.String()}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		res.ExitCode, res.TimedOut = 124, true
		res.Stderr += fmt.Sprintf("standin: timed out after %s\n", timeout)
	case errors.As(err, &exitErr):
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.ExitCode = 128 + int(ws.Signal())
		} else {
			res.ExitCode = exitErr.ExitCode()
		}
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		res.ExitCode = 127
		res.Stderr += "standin: " + err.Error() + "\n"
	default:
		res.ExitCode = 126
		res.Stderr += "standin: " + err.Error() + "\n"
	}
	return res
}

// cappedBuffer keeps the first max bytes written to it and notes the rest
// was dropped.
type cappedBuffer struct {
	buf       bytes.Buffer
	max       int
	truncated bool
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.buf.Len(); room < len(p) {
		b.buf.Write(p[:max(room, 0)])
		b.truncated = true
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *cappedBuffer) String() string {
	if b.truncated {
		return b.buf.String() + "\n[standin: output truncated]\n"
	}
	return b.buf.String()
}
