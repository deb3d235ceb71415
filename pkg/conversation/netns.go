package conversation

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"

	"github.com/ohd-dev/ohd/pkg/runtime"
)

// netnsCache holds, per running conversation, a dialer into its
// container's network namespace, so the API proxy reaches the inner server
// without the engine's userland proxy (one process hop less per request)
// and without going through an address that another container could take
// over once this one stops. When this process cannot enter namespaces
// (not root, not Linux, an engine in a VM), it is switched off once and
// the proxy uses the published port.
type netnsCache struct {
	mu      sync.Mutex
	entries map[string]*netnsEntry // by conversation ID
	// gen counts drops: a dialer opened across a drop is not kept (its
	// container may be the one that just stopped).
	gen uint64
	off bool
}

type netnsEntry struct {
	containerID string
	hostPort    int
	d           *runtime.NetnsDialer
}

// innerDial returns the namespace dialer of running conversation id (its
// container and published port in r), or nil to use its published port.
func (m *Manager) innerDial(ctx context.Context, id string, r route) *runtime.NetnsDialer {
	opener, ok := m.rt.(runtime.NetnsOpener)
	if !ok || r.containerID == "" || r.hostPort == 0 {
		return nil
	}
	nc := &m.netns
	nc.mu.Lock()
	if nc.off {
		nc.mu.Unlock()
		return nil
	}
	if e := nc.entries[id]; e != nil && e.containerID == r.containerID && e.hostPort == r.hostPort {
		nc.mu.Unlock()
		return e.d
	}
	gen := nc.gen
	nc.mu.Unlock()

	d, err := opener.OpenNetns(ctx, r.containerID)
	nc.mu.Lock()
	defer nc.mu.Unlock()
	if err != nil {
		if errors.Is(err, runtime.ErrNetnsUnavailable) && !nc.off {
			nc.off = true
			m.log.Info("the conversation API reaches inner servers through their published ports", "why", err)
		} else if !nc.off {
			m.log.Debug("conversation API: network namespace not opened; using the published port", "id", id, "err", err)
		}
		return nil
	}
	if e := nc.entries[id]; e != nil && e.containerID == r.containerID && e.hostPort == r.hostPort {
		// Another request opened it meanwhile: keep theirs.
		d.Close()
		return e.d
	}
	if nc.off || nc.gen != gen {
		d.Close()
		return nil
	}
	if nc.entries == nil {
		nc.entries = map[string]*netnsEntry{}
	}
	if old := nc.entries[id]; old != nil {
		// An earlier start's: its container is gone. Close waits for its
		// dials in progress, so not under the lock.
		defer func() { go old.d.Close() }()
	}
	nc.entries[id] = &netnsEntry{containerID: r.containerID, hostPort: r.hostPort, d: d}
	return d
}

// keepNetns hands the namespace dialer d of conversation id's container
// (opened by a create) to the cache, so the conversation's requests reach
// its inner server without asking the engine again: a container without
// network stays reachable while the engine is away. It closes d instead
// when the cache has another entry or is off.
func (m *Manager) keepNetns(id, containerID string, hostPort int, d *runtime.NetnsDialer) {
	nc := &m.netns
	nc.mu.Lock()
	if nc.off || nc.entries[id] != nil {
		nc.mu.Unlock()
		d.Close()
		return
	}
	if nc.entries == nil {
		nc.entries = map[string]*netnsEntry{}
	}
	nc.entries[id] = &netnsEntry{containerID: containerID, hostPort: hostPort, d: d}
	nc.mu.Unlock()
}

// dropNetns releases the namespace of container containerID (all of them
// for ""), which stopped, is stopping or is replaced.
func (m *Manager) dropNetns(containerID string) {
	nc := &m.netns
	var drop []*runtime.NetnsDialer
	nc.mu.Lock()
	nc.gen++
	for id, e := range nc.entries {
		if containerID == "" || e.containerID == containerID {
			drop = append(drop, e.d)
			delete(nc.entries, id)
		}
	}
	nc.mu.Unlock()
	// Close waits for dials in progress: outside the lock.
	for _, d := range drop {
		d.Close()
	}
}

// Close releases what the Manager holds open for the conversation API
// (the containers' network namespaces). The Manager stays usable.
func (m *Manager) Close() error {
	m.dropNetns("")
	return nil
}

// netnsTargetAddr is the Target.Addr of the inner server of a container
// without network, reached through nd: a name no other namespace shares
// (never resolved: the proxy dials through nd), so that no pooled
// connection to one container's inner server is used for another's, nor
// for this container's next start.
func netnsTargetAddr(nd *runtime.NetnsDialer, containerID string, port int) string {
	host := "unreachable-" + shortID(containerID)
	if nd != nil {
		host = "ns" + strconv.FormatUint(nd.Serial, 10)
	}
	return net.JoinHostPort(host+".ohd-netns.invalid", strconv.Itoa(port))
}
