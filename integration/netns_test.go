package integration

import (
	"bytes"
	"net"
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
func TestAPIForwardsInsideTheContainer(t *testing.T) {
	testenv.RequireRoot(t)
	d := dockerDaemon(t)
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
	run(t, "docker", "network", "disconnect", "bridge", cid)
	if r := d.call("GET", "/api/conversations/"+id+"/echo/alive", nil); r.Status != 200 {
		t.Errorf("disconnected container: echo = %d %s, want 200", r.Status, r.Body)
	}
	run(t, "docker", "network", "connect", "bridge", cid)

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
