package integration

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
)

// TestAPIForwardsInsideTheContainer checks the path ohd forwards on when
// it runs as root on the engine's machine: from inside the container's own
// network namespace (no docker-proxy hop, and no address another container
// could take over), the inner server sees the request come from loopback,
// not from the bridge gateway as through the published port. The
// container's address never reaches the client; the inner server stays
// reachable when its container is disconnected from its network; and a
// container that is stopped behind ohd's back and started again is reached
// in its new namespace, not the dead one.
//
// It runs with --egress open: a container on the engine's network, which
// ohd still reaches inside its namespace.
func TestAPIForwardsInsideTheContainer(t *testing.T) {
	// Docker only by design: it cuts the container off Docker's network ohd and reads its address there (--egress open's network); forwarding in a pod's namespace is TestBackendAPIReleasesNamespaces's on both.
	testenv.RequireRoot(t)
	d := dockerDaemon(t, "--egress", "open")
	id, _ := d.apiCreate(map[string]any{"workspace": map[string]any{"working_dir": testenv.TempDir(t)}})

	check := func(when string) {
		t.Helper()
		var echo struct {
			RemoteAddr string `json:"remote_addr"`
		}
		r := d.call("GET", "/api/conversations/"+id+"/echo/netns", nil)
		if r.Status != 200 {
			t.Fatalf("%s: echo = %d %s", when, r.Status, r.Body)
		}
		r.json(t, &echo)
		c := d.record(id)
		ip := strings.TrimSpace(run(t, "docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", c.ContainerID))
		if net.ParseIP(ip) == nil {
			t.Fatalf("%s: container %s has no address (%q)", when, c.ContainerID, ip)
		}
		host, _, err := net.SplitHostPort(echo.RemoteAddr)
		if err != nil || host != "127.0.0.1" {
			t.Errorf("%s: the inner server saw the request from %q, want 127.0.0.1 (forwarded inside its network namespace)", when, echo.RemoteAddr)
		}
		r = d.call("GET", "/api/conversations/"+id+"/error", nil)
		if r.Status != 500 || bytes.Contains(r.Body, []byte(ip+":")) || !bytes.Contains(r.Body, []byte("listening on")) {
			t.Errorf("%s: /error = %d %s, want the inner error without %s", when, r.Status, r.Body, ip)
		}
	}
	check("first start")

	// Cut off its network: the published port is gone, ohd still reaches it.
	cid := d.record(id).ContainerID
	run(t, "docker", "network", "disconnect", "ohd", cid)
	if r := d.call("GET", "/api/conversations/"+id+"/echo/alive", nil); r.Status != 200 {
		t.Errorf("disconnected container: echo = %d %s, want 200", r.Status, r.Body)
	}
	run(t, "docker", "network", "connect", "ohd", cid)

	// Stopped behind ohd's back: ohd follows the engine's events, releases
	// the old namespace, and the next request starts the container again.
	old := d.record(id).ContainerID
	run(t, "docker", "stop", "-t", "1", old)
	deadline := time.Now().Add(30 * time.Second)
	for d.record(id).State != "stopped" {
		if time.Now().After(deadline) {
			t.Fatalf("record still %q 30s after docker stop", d.record(id).State)
		}
		time.Sleep(50 * time.Millisecond)
	}
	check("after a restart")
	if strings.Contains(d.logs.String(), "published ports") {
		t.Errorf("ohd fell back to published ports:\n%s", tail(d.logs.String(), 20))
	}
}

// TestConversationsCannotReachEachOther checks the network ohd puts
// containers on by default: one conversation's container cannot open a
// connection to another's inner server (inter-container communication is
// off), while each reaches its own and the host reaches its published port.
// That is --egress open's network; with --egress broker (the default
// here) a container has no network at all (TestBackendEgressAttackRawTCPToHostLoopback).
func TestConversationsCannotReachEachOther(t *testing.T) {
	// Docker only by design: inter-container communication off is a setting of Docker's network ohd; between pods only a NetworkPolicy isolates (TestBackendEgressIsolationClaim).
	testenv.RequireRoot(t)
	d := dockerDaemon(t, "--egress", "open")
	if icc := strings.TrimSpace(run(t, "docker", "network", "inspect", "-f", `{{index .Options "com.docker.network.bridge.enable_icc"}}`, "ohd")); icc != "false" {
		t.Errorf("network ohd: enable_icc = %q, want false", icc)
	}
	a, _ := d.apiCreate(map[string]any{"workspace": map[string]any{"working_dir": testenv.TempDir(t)}})
	b, _ := d.apiCreate(map[string]any{"workspace": map[string]any{"working_dir": testenv.TempDir(t)}})
	ca, cb := d.record(a), d.record(b)
	pidA := strings.TrimSpace(run(t, "docker", "inspect", "-f", "{{.State.Pid}}", ca.ContainerID))
	pidB := strings.TrimSpace(run(t, "docker", "inspect", "-f", "{{.State.Pid}}", cb.ContainerID))
	ipB := strings.TrimSpace(run(t, "docker", "inspect", "-f", `{{(index .NetworkSettings.Networks "ohd").IPAddress}}`, cb.ContainerID))
	if net.ParseIP(ipB) == nil {
		t.Fatalf("container of %s has no address on network ohd (%q)", b, ipB)
	}
	// connect opens a TCP connection to ipB:8000 from the network
	// namespace of pid, with bash's /dev/tcp, within 3 s.
	connect := func(pid string) error {
		return exec.Command("nsenter", "-t", pid, "-n", "timeout", "3", "bash", "-c", "exec 3<>/dev/tcp/"+ipB+"/8000").Run()
	}
	if err := connect(pidB); err != nil {
		t.Fatalf("B cannot reach its own inner server at %s:8000 (%v): the probe does not work", ipB, err)
	}
	if err := connect(pidA); err == nil {
		t.Errorf("A's container opened a connection to B's inner server at %s:8000", ipB)
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/alive", cb.HostPort))
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("the host cannot reach B's published port: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}

// TestBackendAPIReleasesNamespaces checks that ohd lets go of a container's
// network namespace when it stops the container itself — on the idle
// timeout and on DELETE — not only when the engine reports a stop: a held
// namespace keeps the kernel's copy of a dead container's network alive
// for as long as ohd runs.
func TestBackendAPIReleasesNamespaces(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		testenv.RequireRoot(t)
		d := b.daemon(t, "--idle-timeout", "3s")
		ohdPid := d.cmd.Process.Pid

		// use forwards one request and returns the container's namespace,
		// which ohd must then hold on Docker. On Kubernetes ohd reaches the
		// pod at its IP from the node and never enters its namespace (by
		// design): it must hold none at any time.
		held := b.name != "kubernetes"
		use := func(id string) string {
			t.Helper()
			if r := d.call("GET", "/api/conversations/"+id+"/echo/use", nil); r.Status != 200 {
				t.Fatalf("echo = %d %s", r.Status, r.Body)
			}
			pid := b.pid(t, d.record(id).ContainerID)
			ns, err := os.Readlink("/proc/" + pid + "/ns/net")
			if err != nil {
				t.Fatal(err)
			}
			if got := holdsNamespace(t, ohdPid, ns); got != held {
				t.Fatalf("ohd (pid %d) holds a descriptor of %s after forwarding a request: %v, want %v", ohdPid, ns, got, held)
			}
			return ns
		}

		idle, _ := d.apiCreate(map[string]any{"workspace": map[string]any{"working_dir": testenv.TempDir(t)}})
		nsIdle := use(idle)
		waitFor(t, 60*time.Second, "the idle conversation to stop", func() bool { return d.record(idle).State == "stopped" })
		if holdsNamespace(t, ohdPid, nsIdle) {
			t.Errorf("ohd still holds %s after stopping the idle conversation", nsIdle)
		}

		deleted, _ := d.apiCreate(map[string]any{"workspace": map[string]any{"working_dir": testenv.TempDir(t)}})
		nsDeleted := use(deleted)
		if r := d.call("DELETE", "/api/conversations/"+deleted, nil); r.Status != 200 {
			t.Fatalf("DELETE = %d %s", r.Status, r.Body)
		}
		if holdsNamespace(t, ohdPid, nsDeleted) {
			t.Errorf("ohd still holds %s after DELETE", nsDeleted)
		}

		// The stopped one starts again on the next request, in a new
		// namespace: use checks that ohd holds the namespace of the new
		// process, and ohd released the old one above. (The kernel may give
		// the new namespace the old one's freed inode number, as it does for a
		// container without network, so the numbers are not compared.)
		use(idle)
	})
}

// holdsNamespace reports whether process pid has a descriptor open on
// namespace ns ("net:[inode]").
func holdsNamespace(t *testing.T, pid int, ns string) bool {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if l, err := os.Readlink(dir + "/" + e.Name()); err == nil && l == ns {
			return true
		}
	}
	return false
}
