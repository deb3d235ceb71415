package runtime

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/moby/moby/client"

	"github.com/ohd-dev/ohd/pkg/peercred"
)

// ErrNetnsUnavailable: this process cannot enter containers' network
// namespaces (not Linux, not privileged, or the engine runs elsewhere, as
// with Docker Desktop or a remote DOCKER_HOST). Callers fall back to the
// published port.
var ErrNetnsUnavailable = errors.New("cannot enter container network namespaces")

// NetnsOpener is implemented by runtimes whose containers' network
// namespaces this process can enter.
type NetnsOpener interface {
	// OpenNetns returns a dialer that connects to the inner server from
	// inside the running container's own network namespace. It fails with
	// ErrNetnsUnavailable when this process cannot do that at all, and
	// with another error when the container is not running.
	OpenNetns(ctx context.Context, containerID string) (*NetnsDialer, error)
}

// NetnsDialer connects to one container's inner server from inside that
// container's network namespace: a connection skips the engine's userland
// proxy and the bridge, and can reach no other container, whatever later
// reuses this container's published port or IP address. It holds the
// namespace open until Close, so a dial after the container stopped finds
// nothing listening (connection refused), never another container.
type NetnsDialer struct {
	// ContainerID is the container whose namespace this is.
	ContainerID string
	// Addr is the container's own address and inner port (where the
	// engine's proxy connects); a dial tries the inner port on loopback
	// first, so an inner server stays reachable when the container is
	// disconnected from its network, and Addr when loopback refuses (a
	// server bound to that address only).
	Addr string
	// Serial is unique among the dialers this process opened: a name for
	// this namespace that no other container, nor this container's next
	// start, shares (ohd pools connections by it).
	Serial uint64

	addrs  [2]string
	pref   atomic.Int32 // index in addrs that answered last
	direct bool         // NewAddrDialer: dial Addr from this namespace
	mu     sync.RWMutex
	fd     int // the namespace; -1 once closed
	closed bool
}

// netnsAddr is the container's own address on its network (where the
// engine's proxy connects), or loopback when it has none.
func netnsAddr(ins client.ContainerInspectResult, inner int) string {
	ip := netip.AddrFrom4([4]byte{127, 0, 0, 1})
	if ns := ins.Container.NetworkSettings; ns != nil {
		for _, ep := range ns.Networks {
			if ep != nil && ep.IPAddress.IsValid() {
				ip = ep.IPAddress
				break
			}
		}
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(inner))
}

// netnsSerial numbers the dialers OpenNetns makes.
var netnsSerial atomic.Uint64

// OpenNetns implements NetnsOpener.
func (d *Docker) OpenNetns(ctx context.Context, containerID string) (*NetnsDialer, error) {
	if !strings.HasPrefix(d.host, "unix://") {
		return nil, fmt.Errorf("%w: the engine at %s runs containers on another machine", ErrNetnsUnavailable, d.host)
	}
	ins, err := d.api.ContainerInspect(ctx, containerID, client.ContainerInspectOptions{})
	if err != nil {
		return nil, d.wrap("inspect container", shortID(containerID), err)
	}
	st := ins.Container.State
	if st == nil || !st.Running || st.Pid <= 0 {
		return nil, fmt.Errorf("container %s is not running", shortID(containerID))
	}
	inner := DefaultInnerPort
	if cfg := ins.Container.Config; cfg != nil {
		if p, err := strconv.Atoi(cfg.Labels[LabelInnerPort]); err == nil && p > 0 {
			inner = p
		}
	}
	fd, err := openNetnsOf(st.Pid, ins.Container.ID)
	if err != nil {
		return nil, err
	}
	nd := &NetnsDialer{ContainerID: ins.Container.ID, Addr: netnsAddr(ins, inner), Serial: netnsSerial.Add(1), fd: fd}
	nd.addrs = [2]string{net.JoinHostPort("127.0.0.1", strconv.Itoa(inner)), nd.Addr}
	// The pid was read before the namespace was opened: make sure it is
	// still this container's process (same start), so the namespace is its.
	again, err := d.api.ContainerInspect(ctx, containerID, client.ContainerInspectOptions{})
	if err != nil {
		nd.Close()
		return nil, d.wrap("inspect container", shortID(containerID), err)
	}
	if s2 := again.Container.State; s2 == nil || !s2.Running || s2.Pid != st.Pid || s2.StartedAt != st.StartedAt {
		nd.Close()
		return nil, fmt.Errorf("container %s stopped or restarted while its network namespace was opened", shortID(containerID))
	}
	return nd, nil
}

// ProbeNetns reports whether this process can enter the network
// namespaces of the engine's containers: the engine is on a local Unix
// socket, runs on this machine (not Docker Desktop's VM), and this
// process may enter a network namespace. It fails with an error wrapping
// ErrNetnsUnavailable that says why not. ohd serve --egress broker needs
// it: containers without network are reached only that way.
func (d *Docker) ProbeNetns() error {
	if !strings.HasPrefix(d.host, "unix://") {
		return fmt.Errorf("%w: the engine at %s runs containers on another machine", ErrNetnsUnavailable, d.host)
	}
	if strings.Contains(d.engineOS, "Docker Desktop") {
		return fmt.Errorf("%w: the engine runs in Docker Desktop's virtual machine", ErrNetnsUnavailable)
	}
	// The engine's (and so its containers') processes must be in this
	// process's pid namespace: the kernel reports the peer pid of the
	// engine's socket as 0 when it is not (ohd in a container of its own,
	// given the host's engine socket).
	c, err := net.DialTimeout("unix", strings.TrimPrefix(d.host, "unix://"), 5*time.Second)
	if err != nil {
		return fmt.Errorf("%w: connect to the engine at %s: %v", ErrNetnsUnavailable, d.host, err)
	}
	cred, err := peercred.Get(c)
	c.Close()
	if err != nil || cred.PID <= 0 {
		return fmt.Errorf("%w: the engine's processes are not visible from this process (another pid namespace)", ErrNetnsUnavailable)
	}
	return probeOwnNetns()
}

// DialContext connects to the inner server.
func (nd *NetnsDialer) DialContext(ctx context.Context) (net.Conn, error) {
	nd.mu.RLock()
	defer nd.mu.RUnlock()
	if nd.closed {
		return nil, fmt.Errorf("dial container %s: its network namespace was released", shortID(nd.ContainerID))
	}
	if nd.direct {
		return nd.dialDirect(ctx, nd.Addr)
	}
	i := nd.pref.Load()
	c, err := dialInNetns(ctx, nd.fd, nd.addrs[i])
	if errors.Is(err, syscall.ECONNREFUSED) && nd.addrs[1-i] != nd.addrs[i] {
		if c, err = dialInNetns(ctx, nd.fd, nd.addrs[1-i]); err == nil {
			nd.pref.Store(1 - i)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("dial container %s: %w", shortID(nd.ContainerID), err)
	}
	return c, nil
}

// DialPort connects to port on the container's loopback from inside its
// namespace: the other servers of the agent server's image (VS Code on
// 8001, the desktop on 8002), which the engine never publishes.
func (nd *NetnsDialer) DialPort(ctx context.Context, port int) (net.Conn, error) {
	nd.mu.RLock()
	defer nd.mu.RUnlock()
	if nd.closed {
		return nil, fmt.Errorf("dial container %s: its network namespace was released", shortID(nd.ContainerID))
	}
	if nd.direct {
		host, _, _ := net.SplitHostPort(nd.Addr)
		return nd.dialDirect(ctx, net.JoinHostPort(host, strconv.Itoa(port)))
	}
	c, err := dialInNetns(ctx, nd.fd, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("dial container %s port %d: %w", shortID(nd.ContainerID), port, err)
	}
	return c, nil
}

// Close releases the namespace. Connections already made stay open.
func (nd *NetnsDialer) Close() error {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.closed {
		return nil
	}
	nd.closed = true
	if nd.direct {
		return nil
	}
	return closeNetns(nd.fd)
}

// NewAddrDialer returns a NetnsDialer for a runtime whose containers have
// an address of their own that this host routes to, such as a Kubernetes
// pod's IP on its node: it dials addr (the pod's IP and inner port) and,
// for DialPort, other ports of that IP, from this process's own network
// namespace. Close only stops further dials. A runtime hands one out only
// while the container at addr is the one named containerID; a later
// container given the same IP is reached by a new dialer.
func NewAddrDialer(containerID, addr string) *NetnsDialer {
	return &NetnsDialer{ContainerID: containerID, Addr: addr, Serial: netnsSerial.Add(1), fd: -1, direct: true,
		addrs: [2]string{addr, addr}}
}

func (nd *NetnsDialer) dialDirect(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial container %s: %w", shortID(nd.ContainerID), err)
	}
	return c, nil
}
