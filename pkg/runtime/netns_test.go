//go:build linux

package runtime

import (
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
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/ohd-dev/ohd/internal/testenv"
)

// netnsGet sends GET path with key to the inner server through dial.
func netnsGet(t *testing.T, dial func(context.Context) (net.Conn, error), path, key string) (int, error) {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext:       func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
	}}
	req, _ := http.NewRequest(http.MethodGet, "http://inner"+path, nil)
	req.Header.Set("X-Session-API-Key", key)
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestOpenNetns checks the namespace dialer reaches its own container's
// inner server and no other: two containers with different keys, the
// dialer of A accepted by A's key only; once A stops, a dial is refused
// (nothing listens in A's namespace any more) instead of reaching B; a
// closed dialer dials nothing.
func TestOpenNetns(t *testing.T) {
	testenv.RequireRoot(t)
	d, server := testDocker(t)
	ctx := context.Background()
	start := func(key string) Instance {
		s := baseSpec(t, server)
		s.Env = append(s.Env, "OH_SESSION_API_KEYS_0="+key)
		return mustStart(t, d, s)
	}
	a, b := start("key-a"), start("key-b")

	nd, err := d.OpenNetns(ctx, a.ContainerID)
	if err != nil {
		t.Fatalf("OpenNetns(A): %v", err)
	}
	defer nd.Close()
	ins, err := rawClient(t).ContainerInspect(ctx, a.ContainerID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ip string
	for _, ep := range ins.Container.NetworkSettings.Networks {
		ip = ep.IPAddress.String()
	}
	if nd.ContainerID != a.ContainerID || nd.Addr != net.JoinHostPort(ip, "8000") {
		t.Errorf("dialer = %s %s, want %s %s:8000", nd.ContainerID, nd.Addr, a.ContainerID, ip)
	}
	if code, err := netnsGet(t, nd.DialContext, "/api/conversations/count", "key-a"); err != nil || code != 200 {
		t.Errorf("A's dialer with A's key = %d, %v; want 200", code, err)
	}
	if code, err := netnsGet(t, nd.DialContext, "/api/conversations/count", "key-b"); err != nil || code != 401 {
		t.Errorf("A's dialer with B's key = %d, %v; want 401 (it must reach A, not B)", code, err)
	}

	if err := d.Stop(ctx, a.ContainerID, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := nd.DialContext(ctx); !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.ENETUNREACH) {
		t.Errorf("dial after A stopped = %v, want connection refused (or no route): A's namespace is empty", err)
	}
	if code, err := netnsGet(t, nd.DialContext, "/api/conversations/count", "key-b"); err == nil {
		t.Errorf("a request through A's dialer after A stopped got %d: it reached another server", code)
	}
	if _, err := d.OpenNetns(ctx, a.ContainerID); err == nil || errors.Is(err, ErrNetnsUnavailable) {
		t.Errorf("OpenNetns of a stopped container = %v, want a not-running error", err)
	}
	if err := nd.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := nd.DialContext(ctx); err == nil || !strings.Contains(err.Error(), "released") {
		t.Errorf("dial after Close = %v, want a released-namespace error", err)
	}
	if err := nd.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}

	// B is untouched, and reachable through its own dialer.
	nb, err := d.OpenNetns(ctx, b.ContainerID)
	if err != nil {
		t.Fatalf("OpenNetns(B): %v", err)
	}
	defer nb.Close()
	if code, err := netnsGet(t, nb.DialContext, "/api/conversations/count", "key-b"); err != nil || code != 200 {
		t.Errorf("B's dialer with B's key = %d, %v; want 200", code, err)
	}
}

// TestOpenNetnsRefusesAForeignProcess checks that a pid whose cgroup does
// not name the container (as when the engine runs in a VM and its pids
// mean nothing here) is refused as unavailable, not entered.
func TestOpenNetnsRefusesAForeignProcess(t *testing.T) {
	testenv.RequireRoot(t)
	fd, err := openNetnsOf(os.Getpid(), strings.Repeat("ab", 32))
	if err == nil {
		closeNetns(fd)
		t.Fatal("openNetnsOf(this test's pid, a container id) succeeded")
	}
	if !errors.Is(err, ErrNetnsUnavailable) || !strings.Contains(err.Error(), "is not container") {
		t.Errorf("openNetnsOf(this test's pid) = %v, want ErrNetnsUnavailable naming the mismatch", err)
	}
}

// netnsChildEnv makes the test binary the child TestOpenNetnsUnprivileged
// starts as an unprivileged user (see TestMain).
const netnsChildEnv = "OHD_TEST_NETNS_CHILD"

// TestOpenNetnsUnprivileged checks that a process without privileges (ohd
// run by a user of the docker group) is told the namespaces are
// unavailable, so ohd falls back to the published port, even for a
// container running as its own uid.
func TestOpenNetnsUnprivileged(t *testing.T) {
	testenv.RequireRoot(t)
	d, server := testDocker(t)
	inst := mustStart(t, d, baseSpec(t, server))
	ins, err := rawClient(t).ContainerInspect(context.Background(), inst.ContainerID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The test binary, where the unprivileged user can run it.
	dir := testenv.TempDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "runtime.test")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := testenv.AsUser(exec.Command(bin), testenv.UnprivilegedUID, testenv.UnprivilegedGID)
	cmd.Env = []string{netnsChildEnv + "=" + strconv.Itoa(ins.Container.State.Pid) + ":" + ins.Container.ID}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "refused: ") {
		t.Errorf("child as uid %d: %v\n%s", testenv.UnprivilegedUID, err, out)
	}
	t.Logf("child as uid %d: %s", testenv.UnprivilegedUID, out)
}

// Two more child modes, for integration/systemd_test.go, which runs this
// test binary under ohd.service's sandbox to show that the sandbox lets
// ohd enter a namespace:
//
//	OHD_TEST_NETNS_LISTEN=addr|pidfile|greeting  serve greeting on addr,
//	  then write this process's pid to pidfile
//	OHD_TEST_NETNS_PROBE=pid|container-id|addr|greeting  open pid's
//	  namespace as ohd does, connect to addr in it, expect greeting
const (
	netnsListenEnv = "OHD_TEST_NETNS_LISTEN"
	netnsProbeEnv  = "OHD_TEST_NETNS_PROBE"
)

// TestMain runs the child of TestOpenNetnsUnprivileged, or one of the
// modes above, when asked to.
func TestMain(m *testing.M) {
	if v := os.Getenv(netnsChildEnv); v != "" {
		os.Exit(netnsChild(v))
	}
	if v := os.Getenv(netnsListenEnv); v != "" {
		os.Exit(netnsListen(v))
	}
	if v := os.Getenv(netnsProbeEnv); v != "" {
		os.Exit(netnsProbe(v))
	}
	os.Exit(m.Run())
}

func netnsListen(v string) int {
	f := strings.Split(v, "|")
	if len(f) != 3 {
		fmt.Printf("%s=%q: want addr|pidfile|greeting\n", netnsListenEnv, v)
		return 2
	}
	ln, err := net.Listen("tcp", f[0])
	if err != nil {
		fmt.Println("listen:", err)
		return 1
	}
	if err := os.WriteFile(f[1]+".tmp", []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		fmt.Println(err)
		return 1
	}
	if err := os.Rename(f[1]+".tmp", f[1]); err != nil {
		fmt.Println(err)
		return 1
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			fmt.Println("accept:", err)
			return 1
		}
		_, _ = c.Write([]byte(f[2]))
		c.Close()
	}
}

func netnsProbe(v string) int {
	f := strings.Split(v, "|")
	if len(f) != 4 {
		fmt.Printf("%s=%q: want pid|container-id|addr|greeting\n", netnsProbeEnv, v)
		return 2
	}
	pid, _ := strconv.Atoi(f[0])
	fd, err := openNetnsOf(pid, f[1])
	if err != nil {
		fmt.Println("probe: open:", err)
		return 1
	}
	defer closeNetns(fd)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := dialInNetns(ctx, fd, f[2])
	if err != nil {
		fmt.Println("probe: dial:", err)
		return 1
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || string(got) != f[3] {
		fmt.Printf("probe: read %q, %v; want %q\n", got, err, f[3])
		return 1
	}
	fmt.Println("probe: ok")
	return 0
}

// netnsChild tries to open the namespace of "pid:container-id" and exits
// 0 if it was refused as unavailable.
func netnsChild(v string) int {
	pid, id, _ := strings.Cut(v, ":")
	p, _ := strconv.Atoi(pid)
	fd, err := openNetnsOf(p, id)
	if err == nil {
		closeNetns(fd)
		fmt.Printf("uid %d entered container %s's network namespace\n", os.Getuid(), id)
		return 1
	}
	if !errors.Is(err, ErrNetnsUnavailable) {
		fmt.Printf("uid %d: openNetnsOf = %v, want ErrNetnsUnavailable\n", os.Getuid(), err)
		return 1
	}
	fmt.Println("refused:", err)
	return 0
}
