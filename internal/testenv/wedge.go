package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
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
)

// WedgeLabel marks the containers StartWedged makes, so that a later run
// can find and release what a killed test run left wedged (SweepWedged).
const WedgeLabel = "dev.ohd.test-wedged"

// Wedged is a container on which the Docker engine hangs: its
// containerd shim is stopped (SIGSTOP), so every engine call that reaches
// the container's task — exec, inspect, stop, kill, rm, pause — waits
// for ever, while calls that do not (ps, events, other containers) still
// answer. This is what a container whose `runc init` was frozen mid-exec
// does to the engine (issue 27), made on demand and undone at will.
//
// It is always released: Release (idempotent), t.Cleanup, and a watchdog
// process that outlives the test binary (a `go test -timeout` panic runs
// no cleanup) and sends SIGCONT to the shim when the test process is gone.
type Wedged struct {
	// ID is the container's full ID; Name its name ("" when Wedge was
	// given an ID).
	ID, Name string
	// Shim is the pid of the container's containerd shim.
	Shim int

	once     sync.Once
	watchdog *os.Process
	remove   bool
}

// RequireLocalEngine stops t unless the tests run as root next to the
// Docker engine (the shim's process must be ours to signal).
func RequireLocalEngine(t testing.TB) {
	t.Helper()
	RequireDocker(t)
	RequireRoot(t)
	if h := os.Getenv("DOCKER_HOST"); h != "" && !strings.HasPrefix(h, "unix://") {
		Missing(t, "DOCKER_HOST=%s is not a local engine: a wedged container needs the engine's processes on this host", h)
	}
}

// StartWedged starts a container of image (which must have /bin/sh) that
// idles, then wedges it (see Wedged); Release thaws and removes it. It
// first releases what an earlier, killed run left (SweepWedged).
func StartWedged(t testing.TB, image string) *Wedged {
	t.Helper()
	RequireLocalEngine(t)
	SweepWedged(t)
	w, err := NewWedged(image)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Release)
	return w
}

// NewWedged is StartWedged for a caller without a testing.TB (a TestMain
// that keeps one wedged container for a whole package): the caller must
// Release it. The engine must be local and the caller root.
func NewWedged(image string) (*Wedged, error) {
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	name := "ohd-test-wedged-" + hex.EncodeToString(rnd[:])
	out, err := dockerCLI(2*time.Minute, "run", "-d", "-i", "--label", WedgeLabel+"=1", "--label", WedgeOwnerLabel+"="+WedgeOwner(), "--name", name,
		"--network", "none", "--entrypoint", "/bin/sh", image, "-c", "read x")
	if err != nil {
		return nil, fmt.Errorf("start a container to wedge: %w", err)
	}
	w, err := wedge(strings.TrimSpace(out))
	if err != nil {
		_ = removeContainer(name)
		return nil, fmt.Errorf("wedge container %s: %w", name, err)
	}
	w.Name, w.remove = name, true
	return w, nil
}

// Wedge wedges the running container id (see Wedged) until Release or
// the end of t.
func Wedge(t testing.TB, id string) *Wedged {
	t.Helper()
	RequireLocalEngine(t)
	w, err := wedge(id)
	if err != nil {
		t.Fatalf("wedge container %s: %v", id, err)
	}
	t.Cleanup(w.Release)
	return w
}

func wedge(id string) (*Wedged, error) {
	out, err := dockerCLI(30*time.Second, "inspect", "-f", "{{.Id}} {{.State.Pid}}", id)
	if err != nil {
		return nil, err
	}
	f := strings.Fields(out)
	if len(f) != 2 {
		return nil, fmt.Errorf("docker inspect: unexpected %q", out)
	}
	pid, err := strconv.Atoi(f[1])
	if err != nil || pid <= 0 {
		st, _ := dockerCLI(30*time.Second, "inspect", "-f", "{{.State.Status}} exit {{.State.ExitCode}} {{.State.Error}}", id)
		logs, _ := dockerCLI(30*time.Second, "logs", "--tail", "5", id)
		return nil, fmt.Errorf("container %s does not run (pid %q, %s): %s", id, f[1], strings.TrimSpace(st), strings.TrimSpace(logs))
	}
	return wedgeProcess(f[0], pid)
}

// WedgeProcess wedges the container (or pod) whose process pid is, by
// stopping the containerd shim it runs under (the nearest ancestor that
// is one): on Kubernetes with containerd, the pod's shim, which serves
// all of its containers. id names it in errors and Wedged.ID.
func WedgeProcess(t testing.TB, id string, pid int) *Wedged {
	t.Helper()
	RequireRoot(t)
	w, err := wedgeProcess(id, pid)
	if err != nil {
		t.Fatalf("wedge %s: %v", id, err)
	}
	t.Cleanup(w.Release)
	return w
}

func wedgeProcess(id string, pid int) (*Wedged, error) {
	shim := pid
	for {
		ppid, err := parentPid(shim)
		if err != nil {
			return nil, err
		}
		if ppid <= 1 {
			return nil, fmt.Errorf("no containerd shim above process %d (%q)", pid, cmdline(pid))
		}
		shim = ppid
		if strings.Contains(cmdline(shim), "containerd-shim") {
			break
		}
	}
	w := &Wedged{ID: id, Shim: shim}
	// The watchdog runs in a session of its own and thaws the shim once
	// this process is gone, whatever ended it.
	script := fmt.Sprintf("while kill -0 %d 2>/dev/null; do sleep 1; done; kill -CONT %d", os.Getpid(), shim)
	wd := exec.Command("/bin/sh", "-c", script)
	wd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := wd.Start(); err != nil {
		return nil, fmt.Errorf("start the watchdog: %w", err)
	}
	w.watchdog = wd.Process
	go func() { _, _ = wd.Process.Wait() }()
	if err := syscall.Kill(shim, syscall.SIGSTOP); err != nil {
		_ = wd.Process.Kill()
		return nil, fmt.Errorf("stop the shim (pid %d): %w", shim, err)
	}
	return w, nil
}

// Release thaws the shim (the engine's calls on the container go on)
// and, for a container StartWedged made, removes it. It may be called
// more than once.
func (w *Wedged) Release() {
	w.once.Do(func() {
		_ = syscall.Kill(w.Shim, syscall.SIGCONT)
		if w.watchdog != nil {
			_ = w.watchdog.Kill()
		}
		if w.remove {
			removeContainer(w.ID)
		}
	})
}

// WedgeOwnerLabel names the test process that made a wedged container
// ("<pid> <start time in clock ticks>"), so that a sweep spares the
// containers of test processes still running: go test runs packages in
// parallel, and one package's sweep removed another's wedged container
// mid-test.
const WedgeOwnerLabel = WedgeLabel + ".owner"

// WedgeOwner is this process's WedgeOwnerLabel value.
func WedgeOwner() string {
	return strconv.Itoa(os.Getpid()) + " " + startTime(os.Getpid())
}

// startTime is the start time of process pid (field 22 of its stat), ""
// if there is no such process.
func startTime(pid int) string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return ""
	}
	// The command (field 2) may hold spaces; fields count from after it.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// ownerAlive says whether the owner label names a running process (the
// same pid with the same start time).
func ownerAlive(owner string) bool {
	f := strings.Fields(owner)
	if len(f) != 2 {
		return false
	}
	pid, err := strconv.Atoi(f[0])
	return err == nil && pid > 0 && startTime(pid) == f[1]
}

// SweepWedged thaws and removes the containers labelled WedgeLabel that
// an earlier test run left (killed before its cleanup ran); those of test
// processes still running are theirs and left alone. The engine lists a
// wedged container (ps does not reach its shim); its shim is found by its
// command line.
func SweepWedged(t testing.TB) {
	t.Helper()
	out, err := dockerCLI(30*time.Second, "ps", "-a", "--no-trunc", "--filter", "label="+WedgeLabel, "--format", `{{.ID}}|{{.Label "`+WedgeOwnerLabel+`"}}`)
	if err != nil {
		t.Logf("sweep wedged containers: %v", err)
		return
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		id, owner, _ := strings.Cut(line, "|")
		if id == "" || ownerAlive(owner) {
			continue
		}
		for _, shim := range shimsOf(id) {
			_ = syscall.Kill(shim, syscall.SIGCONT)
		}
		if err := removeContainer(id); err != nil {
			t.Logf("sweep wedged container %s: %v", id, err)
		}
	}
}

// removeContainer removes the container id and waits (up to a minute)
// until the engine no longer lists it: a removal a timed-out client
// started may still be under way ("removal already in progress").
func removeContainer(id string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := dockerCLI(30*time.Second, "rm", "-f", id)
		out, lerr := dockerCLI(30*time.Second, "ps", "-a", "-q", "--no-trunc", "--filter", "id="+id)
		if lerr == nil && strings.TrimSpace(out) == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.Join(err, lerr, fmt.Errorf("container %s is still there after a minute", id))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// shimsOf finds the containerd shims whose command line names id.
func shimsOf(id string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if c := cmdline(pid); strings.Contains(c, "containerd-shim") && strings.Contains(c, " "+id) {
			out = append(out, pid)
		}
	}
	return out
}

func parentPid(pid int) (int, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0, fmt.Errorf("/proc/%d/stat: short", pid)
	}
	return strconv.Atoi(f[1])
}

func cmdline(pid int) string {
	b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	return strings.TrimSpace(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
}

// dockerCLI runs the docker CLI with a deadline: on a loaded engine a
// test must never wait for ever either.
func dockerCLI(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		err = errors.Join(err, fmt.Errorf("docker %s: no answer within %v", args[0], timeout))
	}
	if err != nil {
		return "", fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// Docker runs the docker CLI with args and a deadline (timeout), and
// returns its standard output; tests use it instead of an unbounded
// exec.Command("docker", ...).
func Docker(timeout time.Duration, args ...string) (string, error) {
	return dockerCLI(timeout, args...)
}

// PodProcess finds a process of the Kubernetes pod whose UID is uid on
// this host: one whose cgroup names the UID (with underscores under
// systemd's cgroup driver).
func PodProcess(uid string) (int, error) {
	marks := []string{uid, strings.ReplaceAll(uid, "-", "_")}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cg, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err == nil && (bytes.Contains(cg, []byte(marks[0])) || bytes.Contains(cg, []byte(marks[1]))) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no process of pod %s on this host", uid)
}
