package integration

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
)

// TestSystemdNotify: under a fake $NOTIFY_SOCKET, ohd says READY=1 only
// once it serves, and STOPPING=1 on shutdown.
func TestSystemdNotify(t *testing.T) {
	binaries(t)
	dirs := newDirs(t)
	notifyPath := filepath.Join(dirs.Run, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	control := filepath.Join(dirs.Run, "ohd.sock")
	cmd := exec.Command(built.ohd, "serve", "--state-dir", dirs.State, "--runtime-dir", dirs.Run, "--runtime", "local", "--listen", "off")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "NOTIFY_SOCKET=" + notifyPath}
	logs := &testenv.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() { _ = cmd.Process.Kill() }()

	read := func() string {
		t.Helper()
		buf := make([]byte, 4096)
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("no notification: %v\n%s", err, logs)
		}
		return string(buf[:n])
	}
	msg := read()
	if !strings.Contains(msg, "READY=1") {
		t.Fatalf("first notification %q, want READY=1", msg)
	}
	// It really serves at that moment.
	if c, err := net.Dial("unix", control); err != nil {
		t.Errorf("READY=1 sent before the control socket serves: %v", err)
	} else {
		c.Close()
	}
	for strings.HasPrefix(msg, "READY") || strings.HasPrefix(msg, "STATUS") {
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		msg = read()
		if strings.Contains(msg, "STOPPING=1") {
			break
		}
	}
	if !strings.Contains(msg, "STOPPING=1") {
		t.Errorf("no STOPPING=1 on shutdown, got %q", msg)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("ohd exited with %v after SIGTERM", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("ohd did not exit after SIGTERM")
	}
}

// TestSocketActivation: with LISTEN_FDS, ohd serves ohctl and the
// conversation API on the sockets it was passed and opens none itself.
func TestSocketActivation(t *testing.T) {
	binaries(t)
	dirs := newDirs(t)
	if err := os.MkdirAll(dirs.Run, 0o711); err != nil {
		t.Fatal(err)
	}
	passed := filepath.Join(dirs.Run, "activated.sock")
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: passed, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	tl, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	uf, _ := ul.File()
	tf, _ := tl.File()
	ul.SetUnlinkOnClose(false) // the passed descriptor keeps serving this path
	ul.Close()
	tl.Close()
	ownSocket := filepath.Join(dirs.Run, "own.sock")
	// sh exec keeps the pid, so LISTEN_PID names ohd itself.
	cmd := exec.Command("/bin/sh", "-c", `LISTEN_PID=$$ exec "$0" "$@"`, built.ohd, "serve",
		"--state-dir", dirs.State, "--runtime-dir", dirs.Run, "--control-socket", ownSocket, "--runtime", "local", "--listen", "127.0.0.1:1")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LISTEN_FDS=2", "LISTEN_FDNAMES=control:api"}
	cmd.ExtraFiles = []*os.File{uf, tf}
	logs := &testenv.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	uf.Close()
	tf.Close()
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })

	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := runOhctl(passed, nil, "ls")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ohctl on the passed socket: %v\n--- ohd ---\n%s", err, logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := os.Stat(ownSocket); err == nil {
		t.Errorf("ohd opened its own control socket %s although one was passed", ownSocket)
	}
	resp, err := http.Get("http://" + tl.Addr().String() + "/health")
	if err != nil {
		t.Fatalf("conversation API on the passed TCP socket: %v\n%s", err, logs)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET /health on the passed socket = %d", resp.StatusCode)
	}
}

// TestSocketActivationRefusesUnservedSockets: a passed socket ohd would
// not serve (an unknown name, a second socket of one name, the API socket
// with --listen off) stops the start with exit status 2 and a message
// naming the fix, before the store or a socket is created: systemd would
// keep such a socket open and its clients would wait for ever.
func TestSocketActivationRefusesUnservedSockets(t *testing.T) {
	binaries(t)
	for _, c := range []struct {
		name, names string
		tcp         int // how many TCP sockets after the Unix one
		args        []string
		want        string
	}{
		{"unknown name", "control:apix", 1, nil, `named "apix"`},
		{"unit name only", "control:ohd-api.socket", 1, nil, "FileDescriptorName=control or api"},
		{"two API sockets", "control:api:api", 2, nil, `2 sockets named "api"`},
		{"API socket with --listen off", "control:api", 1, []string{"--listen", "off"}, "disable ohd-api.socket"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dirs := newDirs(t)
			ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(testenv.TempDir(t), "c.sock"), Net: "unix"})
			if err != nil {
				t.Fatal(err)
			}
			defer ul.Close()
			uf, _ := ul.File()
			files := []*os.File{uf}
			for range c.tcp {
				tl, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
				if err != nil {
					t.Fatal(err)
				}
				defer tl.Close()
				tf, _ := tl.File()
				files = append(files, tf)
			}
			args := append([]string{"serve", "--state-dir", dirs.State, "--runtime-dir", dirs.Run, "--runtime", "local"}, c.args...)
			// An ohd that does not refuse would serve until killed.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, "/bin/sh", append([]string{"-c", `LISTEN_PID=$$ exec "$0" "$@"`, built.ohd}, args...)...)
			cmd.Env = []string{"PATH=/usr/bin:/bin", "LISTEN_FDS=" + strconv.Itoa(len(files)), "LISTEN_FDNAMES=" + c.names}
			cmd.ExtraFiles = files
			out, err := cmd.CombinedOutput()
			for _, f := range files {
				f.Close()
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), c.want) {
				t.Errorf("ohd with LISTEN_FDNAMES=%s %v: %v\n%s\nwant exit status 2 and %q", c.names, c.args, err, out, c.want)
			}
			for _, p := range []string{filepath.Join(dirs.Run, "ohd.sock"), filepath.Join(dirs.State, "ohd.db"), filepath.Join(dirs.State, "master.key")} {
				if _, err := os.Stat(p); err == nil {
					t.Errorf("%s was created", p)
				}
			}
		})
	}
}

// TestSessionAPIKeyFile: keys from a file (kept out of argv and the
// environment) are the accepted ones, and none is generated.
func TestSessionAPIKeyFile(t *testing.T) {
	keyFile := filepath.Join(testenv.TempDir(t), "keys")
	if err := os.WriteFile(keyFile, []byte("# operators\nkey-one-0123456789\n\nkey-two-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, daemonOptions{Args: []string{"--session-api-key-file", keyFile}})
	for key, want := range map[string]int{"key-one-0123456789": 200, "key-two-0123456789": 200, "key-three": 401, "# operators": 401} {
		req, _ := http.NewRequest("GET", "http://"+d.listen+"/api/conversations/count", nil)
		req.Header.Set("X-Session-API-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("key %q: %d, want %d", key, resp.StatusCode, want)
		}
	}
	if _, err := os.Stat(filepath.Join(d.dirs.State, "session-api-key")); err == nil {
		t.Error("a key was generated although keys were configured")
	}
}
