package peercred

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ohd-dev/ohd/internal/testenv"
)

// dialEnv makes the test binary a client: it dials the socket named in the
// variable, writes its pid, and holds the connection until stdin closes.
const dialEnv = "PEERCRED_TEST_DIAL"

func TestMain(m *testing.M) {
	if path := os.Getenv(dialEnv); path != "" {
		c, err := net.Dial("unix", path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Fprintf(c, "%d\n", os.Getpid())
		_, _ = io.Copy(io.Discard, os.Stdin)
		c.Close()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func listen(t *testing.T, dir string) (*net.UnixListener, string) {
	t.Helper()
	path := filepath.Join(dir, "s.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln, path
}

func TestGetSameProcess(t *testing.T) {
	ln, path := listen(t, t.TempDir())
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	got, err := Get(sc)
	if err != nil {
		t.Fatalf("Get() error = %v", err)
	}
	want := Cred{PID: os.Getpid(), UID: os.Geteuid(), GID: os.Getegid()}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Get() mismatch (-want +got):\n%s", diff)
	}
}

func TestGetNotUnix(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := Get(c); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Get(tcp) error = %v, want ErrUnsupported", err)
	}
	ctx := ConnContext(context.Background(), c)
	if _, ok := FromContext(ctx); ok {
		t.Errorf("FromContext(ConnContext(tcp)) ok = true, want false")
	}
}

func TestConnContextHTTP(t *testing.T) {
	ln, path := listen(t, t.TempDir())
	srv := &http.Server{
		ConnContext: ConnContext,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			cred, ok := FromContext(r.Context())
			fmt.Fprintf(w, "%v %d %d %d", ok, cred.PID, cred.UID, cred.GID)
		}),
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", path)
	}}}
	defer hc.CloseIdleConnections()
	want := fmt.Sprintf("true %d %d %d", os.Getpid(), os.Geteuid(), os.Getegid())
	for i := range 2 { // the second request reuses the connection
		resp, err := hc.Get("http://peercred/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != want {
			t.Errorf("request %d: handler saw %q, want %q", i, b, want)
		}
	}
}

// startClient runs the test binary as a client of path, optionally as
// another user, and returns the accepted server side, the child, and a
// function that makes the child exit and waits for it.
func startClient(t *testing.T, ln *net.UnixListener, path string, asUser bool) (net.Conn, *exec.Cmd, func()) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if asUser {
		// The test binary lives in a 0700 directory: copy it where the
		// other uid can execute it.
		b, err := os.ReadFile(exe)
		if err != nil {
			t.Fatal(err)
		}
		exe = filepath.Join(testenv.TempDir(t), "peercred.test")
		if err := os.WriteFile(exe, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(exe)
	cmd.Env = []string{dialEnv + "=" + path}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if asUser {
		testenv.AsUser(cmd, testenv.UnprivilegedUID, testenv.UnprivilegedGID)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waited bool
	stop := func() {
		if waited {
			return
		}
		waited = true
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("client: %v", err)
		}
	}
	t.Cleanup(stop)
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Close() })
	line, err := bufio.NewReader(sc).ReadString('\n')
	if err != nil {
		t.Fatalf("read client pid: %v", err)
	}
	if pid, _ := strconv.Atoi(line[:len(line)-1]); pid != cmd.Process.Pid {
		t.Fatalf("client says pid %q, started %d", line, cmd.Process.Pid)
	}
	return sc, cmd, stop
}

func TestGetOtherUser(t *testing.T) {
	testenv.RequireRoot(t)
	dir := testenv.TempDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ln, path := listen(t, dir)
	if err := os.Chmod(path, 0o777); err != nil {
		t.Fatal(err)
	}
	sc, cmd, _ := startClient(t, ln, path, true)
	got, err := Get(sc)
	if err != nil {
		t.Fatalf("Get() error = %v", err)
	}
	want := Cred{PID: cmd.Process.Pid, UID: testenv.UnprivilegedUID, GID: testenv.UnprivilegedGID}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Get() mismatch (-want +got):\n%s", diff)
	}
}
