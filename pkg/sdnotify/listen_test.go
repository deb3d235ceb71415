package sdnotify

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// TestMain doubles as the socket-activated process of
// TestListenersActivated: started with $SDNOTIFY_TEST_CHILD set, the test
// binary runs activatedChild instead of the tests.
func TestMain(m *testing.M) {
	if os.Getenv("SDNOTIFY_TEST_CHILD") != "" {
		os.Exit(activatedChild())
	}
	os.Exit(m.Run())
}

// childReport is what the activated child saw, written as JSON to
// $SDNOTIFY_TEST_REPORT.
type childReport struct {
	Err        string              // Listeners' error
	Addrs      map[string][]string // name -> listener addresses
	Env        []string            // LISTEN_* variables still set after Listeners
	NoCloexec  []int               // passed or new descriptors missing FD_CLOEXEC
	FDCheckErr string
}

func activatedChild() int {
	var r childReport
	// Descriptors inherited from whoever ran the test (not the passed
	// ones) may lack FD_CLOEXEC; they are not Listeners' business.
	before, _ := fdsWithoutCloexec()
	passed, _ := strconv.Atoi(os.Getenv("LISTEN_FDS"))
	lns, err := Listeners()
	if err != nil {
		r.Err = err.Error()
	}
	for _, v := range []string{"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"} {
		if _, ok := os.LookupEnv(v); ok {
			r.Env = append(r.Env, v)
		}
	}
	after, checkErr := fdsWithoutCloexec()
	r.FDCheckErr = checkErr
	for _, fd := range after {
		if fd < ListenFDsStart+passed || !slices.Contains(before, fd) {
			r.NoCloexec = append(r.NoCloexec, fd)
		}
	}
	r.Addrs = map[string][]string{}
	// Serve one connection on each listener, all at once: the parent dials
	// them in its own (map) order, so serving them one after the other
	// would deadlock whenever the two orders differ. Each answers with the
	// name the listener came under, so the parent sees which socket
	// reached which name.
	var wg sync.WaitGroup
	for name, group := range lns {
		for _, ln := range group {
			r.Addrs[name] = append(r.Addrs[name], ln.Addr().String())
			wg.Go(func() {
				if c, err := ln.Accept(); err == nil {
					fmt.Fprintln(c, name)
					c.Close()
				}
				ln.Close()
			})
		}
	}
	wg.Wait()
	b, _ := json.Marshal(r)
	if err := os.WriteFile(os.Getenv("SDNOTIFY_TEST_REPORT"), b, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// fdsWithoutCloexec lists this process's open descriptors from 3 up that a
// child process would inherit.
func fdsWithoutCloexec() ([]int, string) {
	dir := "/proc/self/fd"
	if runtime.GOOS != "linux" {
		dir = "/dev/fd"
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err.Error()
	}
	var bad []int
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil {
			continue // the directory's own descriptor, closed by now
		}
		if flags&unix.FD_CLOEXEC == 0 {
			bad = append(bad, fd)
		}
	}
	return bad, ""
}

// activate runs the test binary as a socket-activated child with files as
// descriptors 3, 4, ... and LISTEN_FDNAMES=names. LISTEN_PID is set by a
// shell that then execs the binary, so it is the child's real pid, as with
// systemd.
func activate(t *testing.T, names string, files ...*os.File) (*exec.Cmd, string) {
	t.Helper()
	report := filepath.Join(t.TempDir(), "report.json")
	cmd := exec.Command("/bin/sh", "-c", `LISTEN_PID=$$ exec "$0" "$@"`, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		"SDNOTIFY_TEST_CHILD=1", "SDNOTIFY_TEST_REPORT="+report,
		"LISTEN_FDS="+strconv.Itoa(len(files)), "LISTEN_FDNAMES="+names)
	cmd.ExtraFiles = files
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start activated child: %v", err)
	}
	// Only the child holds the sockets now: if it does not serve them, the
	// dials below fail instead of hanging.
	for _, f := range files {
		f.Close()
	}
	return cmd, report
}

func readReport(t *testing.T, cmd *exec.Cmd, path string) childReport {
	t.Helper()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("activated child: %v", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r childReport
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("child report %s: %v", b, err)
	}
	return r
}

func listenerFile(t *testing.T, ln net.Listener) *os.File {
	t.Helper()
	if ul, ok := ln.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(false) // the child serves this path now
	}
	f, err := ln.(interface{ File() (*os.File, error) }).File()
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	return f
}

func TestListenersActivated(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "control.sock")
	control, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	api1, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	api2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"control": {sock}, "api": {api1.Addr().String(), api2.Addr().String()}}
	files := []*os.File{listenerFile(t, control), listenerFile(t, api1), listenerFile(t, api2)}
	cmd, report := activate(t, "control:api:api", files...)

	// Each socket answers with the name the child took it under.
	for name, addrs := range want {
		for _, addr := range addrs {
			network := "tcp"
			if name == "control" {
				network = "unix"
			}
			if got := dialName(t, network, addr); got != name {
				t.Errorf("the child served %s %s under name %q, want %q", network, addr, got, name)
			}
		}
	}
	r := readReport(t, cmd, report)
	if r.Err != "" {
		t.Fatalf("Listeners() in the child: %s", r.Err)
	}
	if diff := cmp.Diff(want, r.Addrs); diff != "" {
		t.Errorf("Listeners() addresses by name (-want +got):\n%s", diff)
	}
	if len(r.Env) != 0 {
		t.Errorf("after Listeners() the child still has %v in its environment", r.Env)
	}
	if r.FDCheckErr != "" || len(r.NoCloexec) != 0 {
		t.Errorf("after Listeners() descriptors %v would leak into children (%s)", r.NoCloexec, r.FDCheckErr)
	}
}

func dialName(t *testing.T, network, addr string) string {
	t.Helper()
	c, err := net.Dial(network, addr)
	if err != nil {
		t.Errorf("dial %s %s: %v", network, addr, err)
		return ""
	}
	defer c.Close()
	// Only a guard against a wedged child: the answer comes right away.
	_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Errorf("read from %s %s: %v", network, addr, err)
	}
	return strings.TrimSpace(line)
}

// A descriptor that is not a listening stream socket fails the whole call,
// names itself, and leaves nothing open.
func TestListenersNotAListener(t *testing.T) {
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	uf, err := udp.(*net.UDPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	udp.Close()
	control, err := net.Listen("unix", filepath.Join(t.TempDir(), "c.sock"))
	if err != nil {
		t.Fatal(err)
	}
	cmd, report := activate(t, "api:control", uf, listenerFile(t, control))
	r := readReport(t, cmd, report)
	if !strings.Contains(r.Err, `fd 3 ("api") is not a listening stream socket`) {
		t.Errorf("Listeners() with a UDP socket as fd 3 = %q; want an error naming fd 3 (\"api\")", r.Err)
	}
	if len(r.Addrs) != 0 || len(r.Env) != 0 || len(r.NoCloexec) != 0 {
		t.Errorf("after a failed Listeners(): listeners %v, env %v, inheritable fds %v; want none", r.Addrs, r.Env, r.NoCloexec)
	}
}

func setListenEnv(t *testing.T, pid, fds, names string) {
	t.Helper()
	t.Setenv("LISTEN_PID", pid)
	t.Setenv("LISTEN_FDS", fds)
	t.Setenv("LISTEN_FDNAMES", names)
}

func listenEnvLeft() []string {
	var left []string
	for _, v := range []string{"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"} {
		if _, ok := os.LookupEnv(v); ok {
			left = append(left, v)
		}
	}
	return left
}

// These cases never touch a descriptor, so they run in the test process.
func TestListenersInProcess(t *testing.T) {
	self := strconv.Itoa(os.Getpid())
	tests := []struct {
		name             string
		pid, fds, fdname string
		wantErr          error
	}{
		{"another process", "1", "2", "control:api", nil},
		{"no fds", self, "0", "", nil},
		{"bad pid", "x", "2", "", ErrBadEnvironment},
		{"bad count", self, "two", "", ErrBadEnvironment},
		{"names mismatch", self, "2", "control", ErrBadEnvironment},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			setListenEnv(t, tt.pid, tt.fds, tt.fdname)
			got, err := Listeners()
			if !errors.Is(err, tt.wantErr) || len(got) != 0 {
				t.Errorf("Listeners() with LISTEN_PID=%s LISTEN_FDS=%s LISTEN_FDNAMES=%s = %v, %v; want none, %v", tt.pid, tt.fds, tt.fdname, got, err, tt.wantErr)
			}
			if left := listenEnvLeft(); len(left) != 0 {
				t.Errorf("Listeners() left %v in the environment", left)
			}
		})
	}
	// A bad descriptor number is an error, not a panic or a silent skip.
	// 1000 is far above anything this test process has open.
	t.Run("closed descriptor", func(t *testing.T) {
		setListenEnv(t, self, "1000", "")
		if _, err := Listeners(); !errors.Is(err, syscall.EBADF) {
			t.Errorf("Listeners() with LISTEN_FDS=1000 = %v, want EBADF", err)
		}
	})
}

func TestParseListenEnv(t *testing.T) {
	tests := []struct {
		pid, fds, names string
		want            []string
		err             bool
	}{
		{"", "", "", nil, false},
		{"", "2", "a:b", nil, false},
		{"42", "", "", nil, false},
		{"43", "2", "a:b", nil, false},
		{"42", "0", "", nil, false},
		{"42", "2", "", []string{"unknown", "unknown"}, false},
		{"42", "2", "control:api", []string{"control", "api"}, false},
		{"42", "3", "control:api:api", []string{"control", "api", "api"}, false},
		{"42", "1", "", []string{"unknown"}, false},
		{"42", "2", "a:b:c", nil, true},
		{"42", "-1", "", nil, true},
		{"42", "99999999", "", nil, true},
		{"0", "1", "", nil, true},
		{"4x", "1", "", nil, true},
	}
	for _, tt := range tests {
		got, err := parseListenEnv(tt.pid, tt.fds, tt.names, 42)
		if !slices.Equal(got, tt.want) || (err != nil) != tt.err {
			t.Errorf("parseListenEnv(%q, %q, %q) = %q, %v; want %q, error %v", tt.pid, tt.fds, tt.names, got, err, tt.want, tt.err)
		}
	}
}
