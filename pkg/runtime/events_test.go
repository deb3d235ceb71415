package runtime

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/ohd-dev/ohd/internal/testenv"
)

// engineProxy forwards a Unix socket to the real engine's socket, so a
// test can cut the runtime's connections to the engine, or make the
// engine unreachable for a while, without touching the engine itself.
type engineProxy struct {
	path, target string
	mu           sync.Mutex
	ln           net.Listener
	conns        map[net.Conn]bool
	wg           sync.WaitGroup
}

func newEngineProxy(t *testing.T) *engineProxy {
	t.Helper()
	target := "/var/run/docker.sock"
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		if !strings.HasPrefix(h, "unix://") {
			testenv.Missing(t, "the engine proxy needs a unix:// DOCKER_HOST, not %s", h)
		}
		target = strings.TrimPrefix(h, "unix://")
	}
	p := &engineProxy{path: filepath.Join(t.TempDir(), "engine.sock"), target: target, conns: map[net.Conn]bool{}}
	p.listen(t)
	t.Cleanup(func() {
		p.down()
		p.wg.Wait()
	})
	return p
}

func (p *engineProxy) host() string { return "unix://" + p.path }

// listen (re)opens the proxy's socket.
func (p *engineProxy) listen(t *testing.T) {
	t.Helper()
	os.Remove(p.path)
	ln, err := net.Listen("unix", p.path)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.serve(c) })
		}
	})
}

func (p *engineProxy) serve(c net.Conn) {
	e, err := net.Dial("unix", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[e] = true, true
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() { io.Copy(e, c); e.Close() })
	wg.Go(func() { io.Copy(c, e); c.Close() })
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, e)
	p.mu.Unlock()
}

// down closes the socket and cuts every connection: the engine is gone.
func (p *engineProxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
}

// TestEventsReconnect cuts the runtime's connection to the engine and
// keeps the engine unreachable for a moment: Events must report the
// outage as ErrEngineUnavailable to other calls, reconnect by itself,
// announce a resync, and deliver later events.
func TestEventsReconnect(t *testing.T) {
	testenv.RequireDocker(t)
	proxy := newEngineProxy(t)
	d, err := NewDocker(context.Background(), DockerOptions{Host: proxy.host(), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	direct, server := testDocker(t)
	inst := mustStart(t, direct, baseSpec(t, server))

	ctx := context.Background()
	got := followEvents(t, d, server)

	// The stream is up once an event of ours comes through.
	raw := rawClient(t)
	if _, err := raw.ContainerKill(ctx, inst.ContainerID, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, got, inst.ContainerID, "die", "")

	proxy.down()
	if err := d.Ping(ctx); !errors.Is(err, ErrEngineUnavailable) {
		t.Errorf("Ping with the engine gone = %v, want ErrEngineUnavailable", err)
	}
	time.Sleep(300 * time.Millisecond) // let a reconnect attempt fail
	proxy.listen(t)

	deadline := time.After(15 * time.Second)
	for resynced := false; !resynced; {
		select {
		case e := <-got:
			resynced = e.Action == ActionResync && e.ContainerID == ""
		case <-deadline:
			t.Fatal("no resync event within 15s of the engine coming back")
		}
	}
	if _, err := raw.ContainerRemove(ctx, inst.ContainerID, client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, got, inst.ContainerID, "destroy", "")
}
