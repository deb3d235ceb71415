package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/ohd-dev/ohd/pkg/conversation"
	"github.com/ohd-dev/ohd/pkg/openhands"
	"github.com/ohd-dev/ohd/pkg/proxy"
	"github.com/ohd-dev/ohd/pkg/store"
)

// ProxyOptions configure Proxy. Zero fields take their defaults.
type ProxyOptions struct {
	// Standin is the path of a built integration/standin binary, the inner
	// server both paths reach; "" builds one with `go build` (the working
	// directory must be inside ohd's module).
	Standin string
	// Duration is how long each path (proxy, direct) is driven in each
	// mode, split over Rounds alternating them; default 10s. (On the
	// 2-core VM, 3s gave ratios from 0.74 to 0.99 in six runs in a row of
	// the same build; 12s gave 0.86 and 0.87.)
	Duration time.Duration
	// Rounds is the number of proxy/direct alternations per mode (the
	// order flips every round); default 6.
	Rounds int
	// Clients is the number of concurrent HTTP clients and of WebSocket
	// connections; default 32.
	Clients int
	// WSMessage is the size of a WebSocket message; default 1 KiB.
	WSMessage int
	// WSWindow is the number of messages a WebSocket connection keeps in
	// flight; default 16.
	WSWindow int
	// Modes are the modes to run: "http" and "ws" (Go clients), "wrk"
	// (the same GET as http, driven by wrk; installed from Debian's
	// packages when missing) and, with Image, "limit" (wrk with
	// LimitClients connections, its baseline the inner server reached
	// from inside its container's network namespace: no hop at all);
	// default all of them.
	Modes []string
	// LimitClients is the number of connections of the limit mode;
	// default 16.
	LimitClients int
	// Image, when set, runs `ohd serve` as its own process, as deployed
	// (docker runtime, this image: the test image), with one conversation
	// created through its API: "proxy" is ohd's conversation API,
	// "direct" that conversation's inner server at its published port, as
	// the issue defines the baseline. When empty (a quick smoke run), the
	// stand-in runs as a host process and ohd's proxy in this process.
	Image string
}

// ProxyResult is one mode's measurement: requests (http) or echoed
// messages (ws) per second through ohd's conversation API against the
// same inner server reached directly, with the same clients, in the same
// run.
type ProxyResult struct {
	Mode    string // "http", "ws" or "wrk"
	Clients int
	// Rate is requests or echoed messages per second; the latencies are
	// per request, or per message from send to echo.
	ProxyRate, DirectRate   float64
	ProxyP50, ProxyP99      time.Duration
	DirectP50, DirectP99    time.Duration
	Ratio                   float64 // ProxyRate / DirectRate
	ProxyErrors, DirectErrs int     // failed requests or connections (must be 0)
	// OHDCPU is the CPU time the ohd process spent per request or
	// message while the proxy path was driven (0 when ohd's proxy runs in
	// this process).
	OHDCPU time.Duration
	// Via is how ohd reached the inner server: "container network
	// namespace" or "published port" (the baseline always uses the
	// published port, but in the limit mode, where it is the inner
	// server inside its network namespace).
	Via string
}

// Line is the one-line summary the harness prints:
//
//	bench: proxy-<mode> ratio=<proxy/direct> p99=<proxy p99>
func (r ProxyResult) Line() string {
	return fmt.Sprintf("bench: proxy-%s ratio=%.2f p99=%v", r.Mode, r.Ratio, r.ProxyP99.Round(time.Microsecond))
}

// Detail is a longer, human-readable line with every figure.
func (r ProxyResult) Detail() string {
	unit := "req/s"
	if r.Mode == "ws" {
		unit = "msg/s"
	}
	s := fmt.Sprintf("proxy-%s clients=%d proxy: %.0f %s p50=%v p99=%v | direct: %.0f %s p50=%v p99=%v | ratio=%.2f errors=%d/%d",
		r.Mode, r.Clients, r.ProxyRate, unit, r.ProxyP50.Round(time.Microsecond), r.ProxyP99.Round(time.Microsecond),
		r.DirectRate, unit, r.DirectP50.Round(time.Microsecond), r.DirectP99.Round(time.Microsecond),
		r.Ratio, r.ProxyErrors, r.DirectErrs)
	if r.OHDCPU > 0 {
		what := "request"
		if r.Mode == "ws" {
			what = "message"
		}
		s += fmt.Sprintf(" | ohd CPU %v per %s", r.OHDCPU.Round(100*time.Nanosecond), what)
	}
	if r.Via != "" {
		s += " | ohd via " + r.Via
	}
	return s
}

// proxyBenchID is the bench conversation: a new id per run, so that a
// second run on the same engine, or the leftover container of a killed
// one, never collides with this run's container name.
var proxyBenchID = store.NewID()

// proxyBenchKey is the outer key of the bench proxy.
const proxyBenchKey = "ohd-bench-outer-session-key"

// Proxy runs a stand-in inner server and ohd's conversation API in front
// of it (on loopback TCP, with an orchestrator that only knows this one
// conversation) and drives both with the same clients: HTTP requests
// (GET /api/conversations/{id}/echo/bench, keep-alive) and WebSocket
// echoes on /sockets/events/{id}.
func Proxy(ctx context.Context, opts ProxyOptions) ([]ProxyResult, error) {
	if opts.Duration <= 0 {
		opts.Duration = 10 * time.Second
	}
	if opts.Rounds <= 0 {
		opts.Rounds = 6
	}
	if opts.Clients <= 0 {
		opts.Clients = 32
	}
	if opts.WSMessage <= 0 {
		opts.WSMessage = 1 << 10
	}
	if opts.WSWindow <= 0 {
		opts.WSWindow = 16
	}
	bin := opts.Standin
	if bin == "" && opts.Image == "" {
		dir, err := os.MkdirTemp("", "ohdbench-proxy")
		if err != nil {
			return nil, fmt.Errorf("bench proxy: %w", err)
		}
		defer os.RemoveAll(dir)
		bin = filepath.Join(dir, "standin")
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/ohd-dev/ohd/integration/standin")
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("bench proxy: go build integration/standin: %v\n%s", err, out)
		}
	}
	// target is one path: where, with which key, and (for ohd as its
	// own process) the CPU time it has used so far.
	type target struct {
		addr, key string
		cpu       func() time.Duration
	}
	if opts.LimitClients <= 0 {
		opts.LimitClients = 16
	}
	var via, direct target
	// limitDirect is the inner server inside its container's network
	// namespace, where wrk runs through nsenter ("" without a container).
	var limitNetns, limitAddr string
	// pathOf says how ohd reached the inner server.
	pathOf := func() string { return "in-process proxy to a stand-in process" }
	if opts.Image != "" {
		d, err := startOHD(ctx, opts.Image)
		if err != nil {
			return nil, err
		}
		defer d.stop()
		via = target{d.listen, d.key, func() time.Duration { return processCPU(d.cmd.Process.Pid) }}
		direct = target{d.innerAddr, d.innerKey, nil}
		pathOf = d.path
		if limitNetns, limitAddr, err = innerInNetns(ctx, d.containerID); err != nil {
			return nil, err
		}
	} else {
		innerKey := "ohd-bench-inner-session-key"
		inner, err := proxyStartStandin(ctx, bin, innerKey)
		if err != nil {
			return nil, err
		}
		defer inner.stop()
		srv, err := proxy.New(proxy.Options{
			Conversations: &proxyBenchConversations{addr: inner.addr, key: []byte(innerKey)},
			Keys:          [][]byte{[]byte(proxyBenchKey)},
		})
		if err != nil {
			return nil, fmt.Errorf("bench proxy: %w", err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("bench proxy: %w", err)
		}
		sctx, stopServe := context.WithCancel(context.Background())
		var serveWG sync.WaitGroup
		serveWG.Go(func() { _ = srv.Serve(sctx, ln) })
		defer func() {
			stopServe()
			serveWG.Wait()
		}()
		via, direct = target{ln.Addr().String(), proxyBenchKey, nil}, target{inner.addr, innerKey, nil}
	}

	var results []ProxyResult
	if len(opts.Modes) == 0 {
		opts.Modes = []string{"http", "ws", "wrk"}
		if limitNetns != "" {
			opts.Modes = append(opts.Modes, "limit")
		}
	}
	for _, mode := range opts.Modes {
		var wrk string
		var wrkP99 time.Duration // the proxy's slowest p99 over the rounds
		clients := opts.Clients
		direct := direct
		var netns string // where wrk runs for the direct leg ("": here)
		if mode == "limit" {
			if limitNetns == "" {
				return nil, errors.New("bench proxy: the limit mode needs a container (Image)")
			}
			clients, direct, netns = opts.LimitClients, target{limitAddr, direct.key, nil}, limitNetns
		}
		if mode == "wrk" || mode == "limit" {
			var err error
			if wrk, err = ensureWrk(ctx); err != nil {
				return nil, fmt.Errorf("bench proxy: %w", err)
			}
		}
		drive := func(t target, d time.Duration) (sample, error) {
			if mode == "wrk" || mode == "limit" {
				ns := ""
				if t.addr == direct.addr {
					ns = netns
				}
				s, p99, err := proxyDriveWrk(ctx, wrk, ns, t.addr, t.key, clients, d)
				if t.addr == via.addr {
					wrkP99 = max(wrkP99, p99)
				}
				return s, err
			}
			if mode == "http" {
				return proxyDriveHTTP(ctx, t.addr, t.key, opts.Clients, d)
			}
			return proxyDriveWS(ctx, t.addr, t.key, opts.Clients, opts.WSMessage, opts.WSWindow, d)
		}
		per := opts.Duration / time.Duration(opts.Rounds)
		var ps, ds sample
		var ohdCPU time.Duration
		type leg struct {
			t    target
			into *sample
		}
		legs := []leg{{direct, &ds}, {via, &ps}}
		// Warm them up (connections, goroutine stacks, caches).
		for _, l := range legs {
			if _, err := drive(l.t, per/5); err != nil {
				return nil, err
			}
		}
		for round := range opts.Rounds {
			order := slices.Clone(legs)
			if round%2 == 1 {
				slices.Reverse(order)
			}
			for _, o := range order {
				var cpu0 time.Duration
				if o.t.cpu != nil {
					cpu0 = o.t.cpu()
				}
				s, err := drive(o.t, per)
				if err != nil {
					return nil, err
				}
				if o.t.cpu != nil {
					ohdCPU += o.t.cpu() - cpu0
				}
				o.into.add(s)
			}
		}
		r := ProxyResult{
			Mode: mode, Clients: clients,
			ProxyRate: ps.rate(), DirectRate: ds.rate(),
			ProxyErrors: ps.errors, DirectErrs: ds.errors, Via: pathOf(),
		}
		if ps.n > 0 {
			r.OHDCPU = ohdCPU / time.Duration(ps.n)
		}
		r.ProxyP50, r.ProxyP99 = ps.percentile(0.50), ps.percentile(0.99)
		r.DirectP50, r.DirectP99 = ds.percentile(0.50), ds.percentile(0.99)
		if mode == "wrk" || mode == "limit" {
			r.ProxyP99 = wrkP99 // wrk reports percentiles, not latencies
		}
		if r.DirectRate > 0 {
			r.Ratio = r.ProxyRate / r.DirectRate
		}
		results = append(results, r)
	}
	return results, nil
}

// proxyDriveHTTP runs clients goroutines sending GET echo requests for d.
func proxyDriveHTTP(ctx context.Context, addr, key string, clients int, d time.Duration) (sample, error) {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients, DisableCompression: true}}
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/api/conversations/"+proxyBenchID+"/echo/bench", nil)
	req.Header.Set("X-Session-API-Key", key)
	return driveHTTP(ctx, "proxy", hc, req, clients, d)
}

// proxyDriveWS opens conns WebSockets and, on each, keeps window messages
// of size bytes in flight for d, counting echoes.
func proxyDriveWS(ctx context.Context, addr, key string, conns, size, window int, d time.Duration) (sample, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hdr := http.Header{}
	hdr.Set("X-Session-API-Key", key)
	cs := make([]*websocket.Conn, conns)
	defer func() {
		for _, c := range cs {
			if c != nil {
				c.CloseNow()
			}
		}
	}()
	for i := range cs {
		c, _, err := websocket.Dial(ctx, "ws://"+addr+"/sockets/events/"+proxyBenchID, &websocket.DialOptions{HTTPHeader: hdr})
		if err != nil {
			return sample{}, fmt.Errorf("bench proxy: websocket: %w", err)
		}
		c.SetReadLimit(int64(size) + 4096)
		if _, _, err := c.Read(ctx); err != nil { // the stand-in's hello
			return sample{}, fmt.Errorf("bench proxy: websocket hello: %w", err)
		}
		cs[i] = c
	}
	msg := make([]byte, size)
	per := make([]sample, conns)
	var stop atomic.Bool
	var completed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i, c := range cs {
		sent := make(chan time.Time, window)
		wg.Go(func() { // writer
			defer close(sent)
			for !stop.Load() {
				t0 := time.Now()
				select {
				case sent <- t0:
				case <-ctx.Done():
					return
				}
				if err := c.Write(ctx, websocket.MessageBinary, msg); err != nil {
					return
				}
			}
		})
		wg.Go(func() { // reader
			s := &per[i]
			s.lat = make([]time.Duration, 0, 1<<14)
			for t0 := range sent {
				if _, _, err := c.Read(ctx); err != nil {
					if ctx.Err() == nil {
						s.errors++
					}
					for range sent {
					}
					return
				}
				if !stop.Load() { // count only what was echoed while the clock ran
					s.lat = append(s.lat, time.Since(t0))
					s.n++
					completed.Add(1)
				}
			}
		})
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
	// As driveHTTP: a short drive on a loaded machine goes on until a
	// first echo came back (at most minDriveWait more), so it measures a
	// rate rather than none (seen in a loaded make test: "nothing
	// completed" after 400 ms).
	for wait := time.Now().Add(minDriveWait); completed.Load() == 0 && ctx.Err() == nil && time.Now().Before(wait); {
		time.Sleep(5 * time.Millisecond)
	}
	stop.Store(true)
	elapsed := time.Since(start)
	wg.Wait()
	for _, c := range cs {
		c.Close(websocket.StatusNormalClosure, "")
	}
	cs = nil
	return collect(ctx, "proxy", per, elapsed)
}

// proxyStandin is a running stand-in process, or container.
type proxyStandin struct {
	addr string
	cmd  *exec.Cmd
	done chan struct{}
}

func proxyStartStandin(ctx context.Context, bin, key string) (*proxyStandin, error) {
	cmd := exec.Command(bin)
	cmd.Env = []string{
		"PATH=/usr/bin:/bin",
		"STANDIN_ADDR=127.0.0.1:0",
		"OH_SESSION_API_KEYS_0=" + key,
		"OHD_CONVERSATION_ID=" + proxyBenchID,
	}
	// The stand-in, like the agent server, creates its conversations
	// directory at start-up; a temporary one, removed when it ends.
	convDir, err := os.MkdirTemp("", "ohd-bench-standin-")
	if err != nil {
		return nil, fmt.Errorf("bench proxy: %w", err)
	}
	cmd.Env = append(cmd.Env, "OH_CONVERSATIONS_PATH="+convDir)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, fmt.Errorf("bench proxy: %w", err)
	}
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(convDir)
		return nil, fmt.Errorf("bench proxy: start stand-in: %w", err)
	}
	st := &proxyStandin{cmd: cmd, done: make(chan struct{})}
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			if strings.Contains(line, `msg="standin: listening"`) {
				for _, f := range strings.Fields(line) {
					if a, ok := strings.CutPrefix(f, "addr="); ok {
						select {
						case addrc <- a:
						default:
						}
					}
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		_ = cmd.Wait()
		_ = os.RemoveAll(convDir)
		close(st.done)
	}()
	select {
	case st.addr = <-addrc:
		return st, nil
	case <-st.done:
		return nil, errors.New("bench proxy: the stand-in exited before listening")
	case <-time.After(20 * time.Second):
		st.stop()
		return nil, errors.New("bench proxy: the stand-in did not listen within 20s")
	case <-ctx.Done():
		st.stop()
		return nil, ctx.Err()
	}
}

func (st *proxyStandin) stop() {
	_ = st.cmd.Process.Kill()
	<-st.done
}

// proxyBenchConversations knows one running conversation.
type proxyBenchConversations struct {
	addr string
	key  []byte
}

func (c *proxyBenchConversations) conv() store.Conversation {
	return store.Conversation{ID: proxyBenchID, State: store.StateRunning, Runtime: "docker", WorkingDir: "/", Workspace: "/"}
}

func (c *proxyBenchConversations) Create(context.Context, conversation.CreateRequest) (store.Conversation, error) {
	return store.Conversation{}, fmt.Errorf("%w: the bench creates no conversation", conversation.ErrInvalid)
}

func (c *proxyBenchConversations) Get(id string) (store.Conversation, error) {
	if id != proxyBenchID {
		return store.Conversation{}, conversation.ErrNotFound
	}
	return c.conv(), nil
}

func (c *proxyBenchConversations) List() []store.Conversation { return []store.Conversation{c.conv()} }

func (c *proxyBenchConversations) Target(_ context.Context, id string) (conversation.Target, error) {
	if id != proxyBenchID {
		return conversation.Target{}, conversation.ErrNotFound
	}
	return conversation.Target{Addr: c.addr, InnerKey: c.key}, nil
}

func (c *proxyBenchConversations) Remove(context.Context, string, conversation.RemoveOptions) (store.Conversation, error) {
	return store.Conversation{}, fmt.Errorf("%w: the bench removes no conversation", conversation.ErrConflict)
}

func (c *proxyBenchConversations) Touch(string) {}

func (c *proxyBenchConversations) InnerInfo(string) (json.RawMessage, error) {
	return nil, openhands.ErrNoState
}
