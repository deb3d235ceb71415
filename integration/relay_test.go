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

// engineRelay is a Unix-socket relay between ohd and the Docker engine's
// socket. Cutting it makes the engine unreachable for ohd only: the
// machine's engine, and every other client of it, never notice.
type engineRelay struct {
	t        testing.TB
	path     string // the socket ohd dials (DOCKER_HOST=unix://<path>)
	upstream string // the engine's socket

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
	r := &engineRelay{t: t, path: filepath.Join(dir, "docker.sock"), upstream: upstream, conns: map[net.Conn]struct{}{}}
	t.Cleanup(func() {
		r.cut()
		os.RemoveAll(dir)
	})
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
	_ = os.Remove(r.path)
	ln, err := net.Listen("unix", r.path)
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
	up, err := net.Dial("unix", r.upstream)
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
	if _, err := os.Stat(r.path); err == nil || !errors.Is(err, os.ErrNotExist) {
		_ = os.Remove(r.path)
	}
}
