package integration

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
)

// engineRelay is a relay between ohd and its engine: a Unix-socket relay
// to the Docker engine's socket, or a TCP relay to the Kubernetes API
// server (newAPIServerRelay). Cutting it makes the engine unreachable for
// ohd only: the machine's engine, and every other client of it, never
// notice.
type engineRelay struct {
	t        testing.TB
	network  string // "unix" or "tcp", both sides
	path     string // the address ohd dials (DOCKER_HOST=unix://<path>; host:port)
	upstream string // the engine's address

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup // the accept loop and every connection's copiers
}

// newEngineRelay starts a relay to the engine's socket (DOCKER_HOST when it
// is a unix:// address, else /var/run/docker.sock); it is cut when t ends.
func newEngineRelay(t testing.TB) *engineRelay {
	t.Helper()
	testenv.RequireDocker(t)
	upstream := "/var/run/docker.sock"
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		if !strings.HasPrefix(h, "unix://") {
			testenv.Missing(t, "the engine relay needs a Unix-socket engine, DOCKER_HOST is %q", h)
		}
		upstream = strings.TrimPrefix(h, "unix://")
	}
	dir, err := os.MkdirTemp("/tmp", "ohdrelay-")
	if err != nil {
		t.Fatal(err)
	}
	r := &engineRelay{t: t, network: "unix", path: filepath.Join(dir, "docker.sock"), upstream: upstream, conns: map[net.Conn]struct{}{}}
	t.Cleanup(func() {
		r.cut()
		os.RemoveAll(dir)
	})
	r.restore()
	return r
}

// newAPIServerRelay starts a TCP relay on the loopback to the API server
// at upstream (host:port); it is cut when t ends. Its address is the API
// server's host with another port, which the server's certificate still
// names (certificates name hosts, not ports).
func newAPIServerRelay(t testing.TB, upstream string) *engineRelay {
	t.Helper()
	r := &engineRelay{t: t, network: "tcp", path: freePort(t), upstream: upstream, conns: map[net.Conn]struct{}{}}
	t.Cleanup(r.cut)
	r.restore()
	return r
}

// dockerHost is the DOCKER_HOST value that sends a client through the relay.
func (r *engineRelay) dockerHost() string { return "unix://" + r.path }

// restore listens again: new connections reach the engine.
func (r *engineRelay) restore() {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ln != nil {
		return
	}
	if r.network == "unix" {
		_ = os.Remove(r.path)
	}
	ln, err := net.Listen(r.network, r.path)
	if err != nil {
		r.t.Fatalf("relay: listen %s: %v", r.path, err)
	}
	r.ln = ln
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed by cut
			}
			r.serve(c)
		}
	}()
}

// serve relays one client connection to the engine.
func (r *engineRelay) serve(client net.Conn) {
	up, err := net.Dial(r.network, r.upstream)
	if err != nil {
		client.Close()
		return
	}
	r.mu.Lock()
	if r.ln == nil { // cut while dialling
		r.mu.Unlock()
		client.Close()
		up.Close()
		return
	}
	r.conns[client], r.conns[up] = struct{}{}, struct{}{}
	r.mu.Unlock()
	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			client.Close()
			up.Close()
			r.mu.Lock()
			delete(r.conns, client)
			delete(r.conns, up)
			r.mu.Unlock()
		})
	}
	r.wg.Add(2)
	go func() {
		defer r.wg.Done()
		defer closeBoth()
		_, _ = io.Copy(up, client)
	}()
	go func() {
		defer r.wg.Done()
		defer closeBoth()
		_, _ = io.Copy(client, up)
	}()
}

// cut closes the listener (the socket file goes with it) and every
// relayed connection, as an engine that went away would, and waits until
// every goroutine of the relay has returned.
func (r *engineRelay) cut() {
	r.mu.Lock()
	ln := r.ln
	r.ln = nil
	conns := make([]net.Conn, 0, len(r.conns))
	for c := range r.conns {
		conns = append(conns, c)
	}
	r.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	for _, c := range conns {
		_ = c.Close()
	}
	r.wg.Wait()
	if r.network != "unix" {
		return
	}
	if _, err := os.Stat(r.path); err == nil || !errors.Is(err, os.ErrNotExist) {
		_ = os.Remove(r.path)
	}
}
