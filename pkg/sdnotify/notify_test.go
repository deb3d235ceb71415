package sdnotify

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// fakeManager is a real unixgram socket standing in for systemd's notify
// socket, with $NOTIFY_SOCKET pointing at it for the test.
func fakeManager(t *testing.T, addr string) *net.UnixConn {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		t.Fatalf("listen on fake NOTIFY_SOCKET %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", addr)
	return conn
}

// receive returns the next datagram. The deadline only keeps a broken test
// from hanging: the datagram was sent before receive is called.
func receive(t *testing.T, conn *net.UnixConn) string {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("read fake NOTIFY_SOCKET: %v", err)
	}
	return string(buf[:n])
}

func unsetenv(t *testing.T, name string) {
	t.Helper()
	t.Setenv(name, "") // restores the old value when t ends
	os.Unsetenv(name)
}

func TestNotifyUnset(t *testing.T) {
	unsetenv(t, "NOTIFY_SOCKET")
	for name, fn := range map[string]func() (bool, error){
		"Ready":    Ready,
		"Stopping": Stopping,
		"Status":   func() (bool, error) { return Status("x") },
	} {
		if sent, err := fn(); sent || err != nil {
			t.Errorf("%s() without NOTIFY_SOCKET = %v, %v; want false, nil", name, sent, err)
		}
	}
}

func TestNotify(t *testing.T) {
	addrs := map[string]string{"path": filepath.Join(t.TempDir(), "notify.sock")}
	if runtime.GOOS == "linux" { // abstract sockets are Linux only
		addrs["abstract"] = "@ohd-sdnotify-test-" + strconv.Itoa(os.Getpid())
	}
	calls := []struct {
		name string
		fn   func() (bool, error)
		want string
	}{
		{"Ready", Ready, "READY=1"},
		{"Stopping", Stopping, "STOPPING=1"},
		{"Status", func() (bool, error) { return Status("reconciling 3 conversations") }, "STATUS=reconciling 3 conversations"},
		// A newline in a status must not smuggle in another assignment.
		{"Status/injection", func() (bool, error) { return Status("x\nREADY=1\r\x00y") }, "STATUS=x READY=1  y"},
		{"Notify/many", func() (bool, error) { return Notify("STATUS=up\nREADY=1") }, "STATUS=up\nREADY=1"},
	}
	for kind, addr := range addrs {
		t.Run(kind, func(t *testing.T) {
			mgr := fakeManager(t, addr)
			for _, c := range calls {
				sent, err := c.fn()
				if !sent || err != nil {
					t.Fatalf("%s() = %v, %v; want true, nil", c.name, sent, err)
				}
				if got := receive(t, mgr); got != c.want {
					t.Errorf("%s() sent %q, want %q", c.name, got, c.want)
				}
			}
		})
	}
}

func TestNotifyErrors(t *testing.T) {
	tests := []struct {
		addr string
		want error
	}{
		{"relative/notify.sock", ErrUnsupportedSocket},
		{"vsock:2:1234", ErrUnsupportedSocket},
		{filepath.Join(t.TempDir(), "absent.sock"), syscall.ENOENT},
	}
	for _, tt := range tests {
		t.Setenv("NOTIFY_SOCKET", tt.addr)
		sent, err := Ready()
		if sent || !errors.Is(err, tt.want) {
			t.Errorf("Ready() with NOTIFY_SOCKET=%q = %v, %v; want false, %v", tt.addr, sent, err, tt.want)
		}
	}
}
