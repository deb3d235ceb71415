package integration

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/store"
)

// TestBackendExecForwardsStdinUserAndWorkdir: `ohctl exec` gives the command
// ohctl's standard input (to EOF), and --user and --workdir choose who
// runs it and where; on Kubernetes, whose exec has no user, --user is
// refused saying so.
func TestBackendExecForwardsStdinUserAndWorkdir(t *testing.T) {
	eachBackend(t, execForwardsStdinUserAndWorkdir)
}

func execForwardsStdinUserAndWorkdir(t *testing.T, b backend) {
	d := b.daemon(t)
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", testenv.NewRepo(t, testenv.RepoOptions{}), "--worktree")
	t.Cleanup(func() { _, _ = d.ohctlErr("rm", "--discard", c.ID) })

	input := "line one\nline two\n" + strings.Repeat("x", 200000) + "\n"
	out, err := d.ohctlIn(input, "exec", c.ID, "--", "sh", "-c", `n=0; while IFS= read -r l; do n=$((n+1)); last=${#l}; done; echo "lines=$n last=$last"`)
	if err != nil || strings.TrimSpace(out) != "lines=3 last=200000" {
		t.Errorf("exec with stdin = %q, %v; want the command to read all 3 lines", out, err)
	}
	ids := `echo "pwd=$PWD"; while read k v rest; do case $k in Uid:|Gid:) echo "$k$v";; esac; done < /proc/self/status`
	if b.name == "kubernetes" {
		// The API server's exec has no user: a command runs as the pod's
		// own (by design), so --user is refused saying so, and --workdir
		// alone is honoured.
		out, err = d.ohctlIn("", "exec", "--user", "4242:4343", c.ID, "--", "true")
		if err == nil || !strings.Contains(err.Error(), "Kubernetes runs commands only as the pod's user") {
			t.Errorf("exec --user 4242:4343 on Kubernetes = %q, %v; want a refusal saying why", out, err)
		}
		out, err = d.ohctlIn("", "exec", "--workdir", "/tmp", c.ID, "--", "sh", "-c", ids)
		want := fmt.Sprintf("Uid:%d", agentUID)
		if err != nil || !strings.Contains(out, "pwd=/tmp") || !strings.Contains(out, want) {
			t.Errorf("exec --workdir /tmp = %q, %v; want pwd=/tmp and %s", out, err, want)
		}
	} else {
		out, err = d.ohctlIn("", "exec", "--workdir", "/tmp", "--user", "4242:4343", c.ID, "--", "sh", "-c", ids)
		if err != nil || !strings.Contains(out, "pwd=/tmp") || !strings.Contains(out, "Uid:4242") || !strings.Contains(out, "Gid:4343") {
			t.Errorf("exec --workdir /tmp --user 4242:4343 = %q, %v", out, err)
		}
	}
	if out, err := d.ohctlErr("exec", "--workdir", "relative", c.ID, "--", "true"); err == nil || !strings.Contains(err.Error(), "absolute path") {
		t.Errorf("exec --workdir relative = %q, %v; want a refusal", out, err)
	}
}

// ptyOhctl is ohctl running with a pseudo-terminal as its controlling
// terminal and standard streams; the test holds the master side.
type ptyOhctl struct {
	t    *testing.T
	ptmx *os.File
	tty  *os.File
	cmd  *exec.Cmd
	// before is the terminal's mode before ohctl started.
	before unix.Termios
	mu     sync.Mutex
	out    bytes.Buffer
	read   chan struct{}
}

// startPtyOhctl runs ohctl args on a new pty of rows×cols.
func startPtyOhctl(t *testing.T, d *daemon, rows, cols uint16, args ...string) *ptyOhctl {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		testenv.Missing(t, "no pseudo-terminal: %v", err)
	}
	p := &ptyOhctl{t: t, ptmx: ptmx, tty: tty, read: make(chan struct{})}
	t.Cleanup(func() { _ = ptmx.Close(); _ = tty.Close(); <-p.read })
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: rows, Cols: cols}); err != nil {
		t.Fatal(err)
	}
	p.before = p.mode()
	p.cmd = exec.Command(built.ohctl, append([]string{"--socket", d.socket}, args...)...)
	p.cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", "TERM=xterm"}
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = tty, tty, tty
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.cmd.Process.Kill(); _ = p.cmd.Wait() })
	go func() {
		defer close(p.read)
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			p.mu.Lock()
			p.out.Write(buf[:n])
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return p
}

func (p *ptyOhctl) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// waitOutput waits until the terminal has shown want (count times).
func (p *ptyOhctl) waitOutput(want string, count int) {
	p.t.Helper()
	waitFor(p.t, 60*time.Second, fmt.Sprintf("%q on the terminal (so far %q)", want, p.output()), func() bool {
		return strings.Count(p.output(), want) >= count
	})
}

// mode is the terminal's current termios.
func (p *ptyOhctl) mode() unix.Termios {
	p.t.Helper()
	m, err := unix.IoctlGetTermios(int(p.tty.Fd()), unix.TCGETS)
	if err != nil {
		p.t.Fatal(err)
	}
	return *m
}

// wait waits for ohctl to exit and returns its exit code.
func (p *ptyOhctl) wait() int {
	p.t.Helper()
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			p.t.Fatalf("ohctl: %v", err)
		}
		return 0
	case <-time.After(60 * time.Second):
		p.t.Fatalf("ohctl did not exit within 60 s; terminal: %q", p.output())
		return -1
	}
}

func isRaw(m unix.Termios) bool { return m.Lflag&(unix.ECHO|unix.ICANON|unix.ISIG) == 0 }

// TestBackendExecTTY: `ohctl exec -t` under a real terminal gives the command a
// terminal of the same size, follows a resize of the local window, passes
// keystrokes, keeps the local terminal raw while the command runs, returns
// the command's exit status, and puts the terminal's mode back after.
func TestBackendExecTTY(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		d := b.daemon(t)
		var c store.Conversation
		d.ohctlJSON(&c, "create", "--repo", testenv.NewRepo(t, testenv.RepoOptions{}), "--worktree")
		t.Cleanup(func() { _, _ = d.ohctlErr("rm", "--discard", c.ID) })

		// The first line read waits for the start: an engine before API 1.42
		// sets the initial size just after the command started, before it
		// gets any input (as docker exec -t does there).
		script := `echo started; IFS= read -r line; echo "size=$(stty size)"; echo "tty=$(tty)"; echo ready
while IFS= read -r line; do s=$(stty size); echo "line=$line size=$s"; [ "$s" = "44 122" ] && break; done
exit 3`
		p := startPtyOhctl(t, d, 33, 111, "exec", "-t", c.ID, "--", "sh", "-c", script)
		before := p.before
		if isRaw(before) {
			t.Fatalf("the test's terminal starts raw (lflag %#o); the check below could not fail", before.Lflag)
		}
		p.waitOutput("started", 1)
		if _, err := fmt.Fprintf(p.ptmx, "go\r"); err != nil {
			t.Fatal(err)
		}
		p.waitOutput("ready", 1)
		out := p.output()
		if !strings.Contains(out, "size=33 111") || !strings.Contains(out, "tty=/dev/pts/") {
			t.Errorf("the command saw %q; want a terminal (tty=/dev/pts/N) of 33 rows and 111 columns", out)
		}
		if m := p.mode(); !isRaw(m) {
			t.Errorf("while the command runs the local terminal has lflag %#o, want raw (no ECHO, ICANON, ISIG)", m.Lflag)
		}

		if err := pty.Setsize(p.ptmx, &pty.Winsize{Rows: 44, Cols: 122}); err != nil {
			t.Fatal(err)
		}
		// The resize reaches the command asynchronously: type lines until it
		// reports the new size, each answered before the next is typed.
		for i := 1; !strings.Contains(p.output(), "size=44 122"); i++ {
			if i > 200 {
				t.Fatalf("the command never saw the window resized to 44x122: %q", p.output())
			}
			if _, err := fmt.Fprintf(p.ptmx, "typed%d\r", i); err != nil {
				t.Fatal(err)
			}
			p.waitOutput("line=typed"+strconv.Itoa(i)+" size=", 1)
		}
		if code := p.wait(); code != 3 {
			t.Errorf("ohctl exec -t exit status = %d, want the command's 3; terminal: %q", code, p.output())
		}
		if after := p.mode(); !cmp.Equal(before, after) {
			t.Errorf("the local terminal's mode after exec -t:\n%s", cmp.Diff(before, after))
		}
	})
}

// TestBackendExecTTYRestoresTheTerminalOnASignal: a signal that ends ohctl exec
// -t (the window closed, a kill) leaves the terminal as it found it.
func TestBackendExecTTYRestoresTheTerminalOnASignal(t *testing.T) {
	eachBackend(t, execTTYRestoresTheTerminalOnASignal)
}

func execTTYRestoresTheTerminalOnASignal(t *testing.T, b backend) {
	d := b.daemon(t)
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", testenv.NewRepo(t, testenv.RepoOptions{}), "--worktree")
	t.Cleanup(func() { _, _ = d.ohctlErr("rm", "--discard", c.ID) })
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			p := startPtyOhctl(t, d, 24, 80, "exec", "-t", c.ID, "--", "sh", "-c", "echo ready; read line")
			before := p.before
			p.waitOutput("ready", 1)
			if m := p.mode(); !isRaw(m) {
				t.Fatalf("while the command runs the local terminal has lflag %#o, want raw", m.Lflag)
			}
			if err := p.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if code := p.wait(); code == 0 {
				t.Errorf("ohctl exec -t ended by %v exited 0", sig)
			}
			if after := p.mode(); !cmp.Equal(before, after) {
				t.Errorf("the local terminal's mode after %v:\n%s", sig, cmp.Diff(before, after))
			}
		})
	}
}

// TestBackendExecTTYRefusedWithoutATerminal: -t with standard input that is not
// a terminal is refused before anything runs, in docker's words.
func TestBackendExecTTYRefusedWithoutATerminal(t *testing.T) {
	eachBackend(t, execTTYRefusedWithoutATerminal)
}

func execTTYRefusedWithoutATerminal(t *testing.T, b backend) {
	d := b.daemon(t)
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", testenv.NewRepo(t, testenv.RepoOptions{}), "--worktree")
	t.Cleanup(func() { _, _ = d.ohctlErr("rm", "--discard", c.ID) })
	marker := filepath.Join(c.Worktree, "ran")
	out, err := d.ohctlIn("some input\n", "exec", "-t", c.ID, "--", "sh", "-c", "touch "+marker)
	var oe *ohctlError
	if !errors.As(err, &oe) || oe.code != 1 || !strings.Contains(oe.stderr, "the input device is not a TTY") {
		t.Errorf("ohctl exec -t with a pipe as stdin = %q, %v; want exit 1 saying the input device is not a TTY", out, err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("the refused command ran anyway (%s exists)", marker)
	}
}
