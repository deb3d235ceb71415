package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ohd-dev/ohd/pkg/broker"
)

// EgressOptions configure Egress. Zero fields take their defaults.
type EgressOptions struct {
	// Download is the size of the download; default 100 MiB.
	Download int64
	// Clients is the number of concurrent small-request clients; default 32.
	Clients int
	// Duration is how long the small requests run in each mode, split
	// over Rounds alternating the modes; defaults 4s and 4.
	Duration time.Duration
	Rounds   int
	// Setups is the number of connection set-ups timed in each mode;
	// default 200.
	Setups int
	// NetDelay and NetRate model a destination on a network (the -net
	// lines): it answers a small request NetDelay after reading it (the
	// round trip and the server's time, which loopback does not have) and
	// sends the download at NetRate bytes a second (the link's). Defaults
	// 2 ms, the nearest a registry or CDN edge is from a server, and
	// 125,000,000 (1 Gbit/s).
	NetDelay time.Duration
	NetRate  float64
}

// EgressResult is the egress benchmark: the relay's forward proxy, the
// broker's egress route and the policy, against the same origin server
// reached directly from the host, in the same run. The loopback lines
// (Download*, Small*) measure the proxy where only the CPU limits: its
// ceiling on this machine. The -net lines (DownloadNet*, SmallNet*)
// measure it against a destination on a network (EgressOptions.NetDelay,
// NetRate), as an agent's destinations are.
type EgressResult struct {
	DownloadProxy, DownloadDirect time.Duration // the whole download
	DownloadRatio                 float64       // direct time / proxy time (a throughput ratio)
	SmallProxyRPS, SmallDirectRPS float64
	SmallRatio                    float64
	// SmallFloorRPS is the same clients through a blind TCP forwarder in
	// this process (one user-space hop, no parsing, no policy, no audit):
	// what any proxy process between client and origin costs here, the
	// bound of SmallRatio. SmallFloorRatio is it against direct.
	SmallFloorRPS, SmallFloorRatio      float64
	DownloadNetProxy, DownloadNetDirect time.Duration
	DownloadNetRatio                    float64
	SmallNetProxyRPS, SmallNetDirectRPS float64
	SmallNetRatio                       float64
	NetDelay                            time.Duration
	NetRate                             float64
	Download                            int64         // bytes of each download
	Clients                             int           // small-request clients
	SetupProxy, SetupDirect             time.Duration // median connection set-up (CONNECT answered vs TCP connected)
	Errors                              int
}

// Line is the one-line summary.
func (r EgressResult) Line() string {
	return fmt.Sprintf("bench: egress download_net_ratio=%.2f small_net_ratio=%.2f download_ratio=%.2f small_ratio=%.2f small_floor_ratio=%.2f setup_extra_ms=%.2f errors=%d",
		r.DownloadNetRatio, r.SmallNetRatio, r.DownloadRatio, r.SmallRatio, r.SmallFloorRatio, ms(r.SetupProxy-r.SetupDirect), r.Errors)
}

// Detail says what was measured.
func (r EgressResult) Detail() string {
	return fmt.Sprintf("egress: through the relay, handed over to the broker's forward proxy and policy (grant, audit) vs the origin directly. "+
		"A destination on a network (%v, %.0f Mbit/s): a %d MiB download %v vs %v; %d clients of small requests %.0f vs %.0f req/s. "+
		"On loopback, the proxy's ceiling here: the download %v vs %v; the small requests %.0f vs %.0f req/s (a blind TCP forwarder, the floor of any proxy process: %.0f req/s). "+
		"CONNECT set-up median %v vs a TCP connect %v",
		r.NetDelay, r.NetRate*8/1e6, r.Download>>20, r.DownloadNetProxy.Round(time.Millisecond), r.DownloadNetDirect.Round(time.Millisecond), r.Clients, r.SmallNetProxyRPS, r.SmallNetDirectRPS,
		r.DownloadProxy.Round(time.Millisecond), r.DownloadDirect.Round(time.Millisecond), r.SmallProxyRPS, r.SmallDirectRPS, r.SmallFloorRPS,
		r.SetupProxy.Round(time.Microsecond), r.SetupDirect.Round(time.Microsecond))
}

// EgressRows are the table rows of Egress.
func EgressRows(r EgressResult) []Row {
	return []Row{
		row("egress-download-net", fmtDur(r.DownloadNetProxy), fmtDur(r.DownloadNetDirect), r.DownloadNetRatio),
		row("egress-small-net", fmtRate(r.SmallNetProxyRPS, "req/s"), fmtRate(r.SmallNetDirectRPS, "req/s"), r.SmallNetRatio),
		row("egress-download", fmtDur(r.DownloadProxy), fmtDur(r.DownloadDirect), r.DownloadRatio),
		row("egress-small", fmtRate(r.SmallProxyRPS, "req/s"), fmtRate(r.SmallDirectRPS, "req/s"), r.SmallRatio),
		row("egress-small-floor", fmtRate(r.SmallFloorRPS, "req/s"), fmtRate(r.SmallDirectRPS, "req/s"), r.SmallFloorRatio),
		// The proxy against the floor of any proxy process (issue 30).
		row("egress-small-vs-floor", fmtRate(r.SmallProxyRPS, "req/s"), fmtRate(r.SmallFloorRPS, "req/s"), r.SmallProxyRPS/r.SmallFloorRPS),
		row("egress-setup", r.SetupProxy.Round(time.Microsecond).String(), r.SetupDirect.Round(time.Microsecond).String(), ms(r.SetupProxy-r.SetupDirect)),
	}
}

const egressBenchConv = "egress-bench"

// Egress runs the egress benchmark in this process: a real Broker (the
// store-backed audit of ohd serve) with a conversation granted the
// origin's loopback address, and the relay with its forward proxy on a
// loopback port, as ohctl inner-exec serves it in a container.
func Egress(ctx context.Context, opts EgressOptions) (EgressResult, error) {
	if opts.Download <= 0 {
		opts.Download = 100 << 20
	}
	if opts.Clients <= 0 {
		opts.Clients = 32
	}
	if opts.Duration <= 0 {
		opts.Duration = 4 * time.Second
	}
	if opts.Rounds <= 0 {
		opts.Rounds = 4
	}
	if opts.Setups <= 0 {
		opts.Setups = 200
	}
	if opts.NetDelay <= 0 {
		opts.NetDelay = 5 * time.Millisecond
	}
	if opts.NetRate <= 0 {
		opts.NetRate = 125e6
	}
	res := EgressResult{NetDelay: opts.NetDelay, NetRate: opts.NetRate, Download: opts.Download, Clients: opts.Clients}
	dir, err := os.MkdirTemp("", "ohdegress")
	if err != nil {
		return res, fmt.Errorf("bench egress: %w", err)
	}
	defer os.RemoveAll(dir)

	// The origin: a 100 MiB body and a small one, on loopback and, with
	// -net, as a destination on a network.
	origin := &http.Server{Handler: egressOrigin(opts)}
	oln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return res, fmt.Errorf("bench egress: %w", err)
	}
	go func() { _ = origin.Serve(oln) }()
	defer origin.Close()
	originAddr := oln.Addr().String()

	be, err := newBrokerAuditBackend(dir)
	if err != nil {
		return res, fmt.Errorf("bench egress: %w", err)
	}
	defer be.close()
	key := broker.DeriveKey([]byte("ohd bench master key"))
	b, err := broker.New(broker.Options{
		RuntimeDir: filepath.Join(dir, "run"), Key: key, Backend: be, Logger: slog.New(slog.DiscardHandler),
		// The caps stay on (their cost is measured) but out of reach.
		Limits: broker.Limits{EgressConns: 4096, EgressRate: 1e9, EgressBurst: 1 << 20, Rate: 1e9, Burst: 1 << 20, MaxConns: -1},
	})
	if err != nil {
		return res, fmt.Errorf("bench egress: %w", err)
	}
	conv := broker.Conversation{ID: egressBenchConv, UID: os.Geteuid(), GID: os.Getegid(), Epoch: 1,
		Grants: broker.Grants{Net: []string{originAddr}}}
	ep, shutdown, err := openBenchConversation(ctx, b, be.SetConversation, conv)
	if err != nil {
		return res, fmt.Errorf("bench egress: %w", err)
	}
	defer shutdown()
	bc := broker.NewClient(ep.Socket, ep.TokenFile)
	defer bc.Close()
	pln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return res, fmt.Errorf("bench egress: %w", err)
	}
	relay := &http.Server{Handler: broker.NewRelay(bc), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = broker.ServeWithForwardProxy(relay, pln, bc) }()
	defer func() { relay.Close(); <-done }()
	proxyURL, _ := url.Parse("http://" + pln.Addr().String())

	client := func(proxy bool) *http.Client {
		tr := &http.Transport{MaxIdleConnsPerHost: opts.Clients, DisableCompression: true}
		if proxy {
			tr.Proxy = http.ProxyURL(proxyURL)
		}
		return &http.Client{Transport: tr}
	}
	var errs atomic.Int64
	getFrom := func(hc *http.Client, addr, path string) {
		resp, err := hc.Get("http://" + addr + path)
		if err != nil {
			errs.Add(1)
			return
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != 200 {
			errs.Add(1)
		}
		resp.Body.Close()
	}
	get := func(hc *http.Client, path string) { getFrom(hc, originAddr, path) }

	// The downloads, best of three each, alternating.
	download := func(path string) (proxied, direct time.Duration) {
		proxied, direct = time.Hour, time.Hour
		for i := range 6 {
			hc := client(i%2 == 0)
			t0 := time.Now()
			get(hc, path)
			d := time.Since(t0)
			hc.CloseIdleConnections()
			if i%2 == 0 {
				proxied = min(proxied, d)
			} else {
				direct = min(direct, d)
			}
		}
		return proxied, direct
	}
	res.DownloadProxy, res.DownloadDirect = download("/big")
	res.DownloadRatio = float64(res.DownloadDirect) / float64(res.DownloadProxy)
	res.DownloadNetProxy, res.DownloadNetDirect = download("/big-net")
	res.DownloadNetRatio = float64(res.DownloadNetDirect) / float64(res.DownloadNetProxy)

	// The floor: a blind TCP forwarder to the origin, which the client
	// takes for the origin.
	fln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return res, fmt.Errorf("bench egress: %w", err)
	}
	defer fln.Close()
	go forwardBlindly(fln, originAddr)

	// Small requests, 32 clients, keep-alive, rounds rotating through the
	// modes.
	modes := []struct {
		proxy        bool
		target, path string
		rps          *float64
	}{
		{true, originAddr, "/small", &res.SmallProxyRPS},
		{false, originAddr, "/small", &res.SmallDirectRPS},
		{false, fln.Addr().String(), "/small", &res.SmallFloorRPS},
		{true, originAddr, "/small-net", &res.SmallNetProxyRPS},
		{false, originAddr, "/small-net", &res.SmallNetDirectRPS},
	}
	per := opts.Duration / time.Duration(opts.Rounds)
	n := make([]int64, len(modes))
	el := make([]time.Duration, len(modes))
	for i := range len(modes) * opts.Rounds {
		m := (i + i/len(modes)) % len(modes)
		hc := client(modes[m].proxy)
		var k atomic.Int64
		stop := time.Now().Add(per)
		var wg sync.WaitGroup
		t0 := time.Now()
		for range opts.Clients {
			wg.Go(func() {
				for time.Now().Before(stop) && ctx.Err() == nil {
					getFrom(hc, modes[m].target, modes[m].path)
					k.Add(1)
				}
			})
		}
		wg.Wait()
		el[m] += time.Since(t0)
		n[m] += k.Load()
		hc.CloseIdleConnections()
	}
	for m := range modes {
		*modes[m].rps = float64(n[m]) / el[m].Seconds()
	}
	res.SmallRatio = res.SmallProxyRPS / res.SmallDirectRPS
	res.SmallFloorRatio = res.SmallFloorRPS / res.SmallDirectRPS
	res.SmallNetRatio = res.SmallNetProxyRPS / res.SmallNetDirectRPS

	// Connection set-up: a CONNECT answered by the proxy (the broker
	// checked, dialled and took the connection over) vs a TCP connect.
	var sp, sd []time.Duration
	for i := range 2 * opts.Setups {
		t0 := time.Now()
		if i%2 == 0 {
			c, err := net.Dial("tcp", pln.Addr().String())
			if err != nil {
				errs.Add(1)
				continue
			}
			_, _ = io.WriteString(c, "CONNECT "+originAddr+" HTTP/1.1\r\nHost: "+originAddr+"\r\n\r\n")
			buf := make([]byte, 64)
			n, err := io.ReadAtLeast(c, buf, len("HTTP/1.1 200"))
			if err != nil || string(buf[:12]) != "HTTP/1.1 200" {
				errs.Add(1)
				_ = n
			}
			sp = append(sp, time.Since(t0))
			c.Close()
		} else {
			c, err := net.Dial("tcp", originAddr)
			if err != nil {
				errs.Add(1)
				continue
			}
			sd = append(sd, time.Since(t0))
			c.Close()
		}
	}
	res.SetupProxy, res.SetupDirect = median(sp), median(sd)
	res.Errors = int(errs.Load())
	if res.Errors > 0 {
		return res, fmt.Errorf("bench egress: %d failed requests", res.Errors)
	}
	return res, nil
}

// egressOrigin is the benchmark's origin: /big is the download and
// /small a two-byte answer, both as fast as loopback goes; /big-net and
// /small-net are the same from a destination on a network: the download
// paced at opts.NetRate, the small answer sent opts.NetDelay after the
// request was read.
func egressOrigin(opts EgressOptions) http.Handler {
	chunk := make([]byte, 1<<20)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big", "/big-net":
			w.Header().Set("Content-Length", fmt.Sprint(opts.Download))
			piece := int64(len(chunk))
			if r.URL.Path == "/big-net" {
				piece = 64 << 10 // a pause every 0.5 ms at 1 Gbit/s
			}
			t0 := time.Now()
			for sent := int64(0); sent < opts.Download; {
				k := min(opts.Download-sent, piece)
				if _, err := w.Write(chunk[:k]); err != nil {
					return
				}
				sent += k
				if r.URL.Path == "/big-net" {
					if ahead := time.Duration(float64(sent)/opts.NetRate*float64(time.Second)) - time.Since(t0); ahead > 0 {
						time.Sleep(ahead)
					}
				}
			}
		case "/small-net":
			time.Sleep(opts.NetDelay)
			_, _ = io.WriteString(w, "ok")
		default:
			_, _ = io.WriteString(w, "ok")
		}
	})
}

// forwardBlindly copies every connection accepted on ln to and from a
// new connection to addr, until ln is closed.
func forwardBlindly(ln net.Listener, addr string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			up, err := net.Dial("tcp", addr)
			if err != nil {
				return
			}
			defer up.Close()
			go func() { _, _ = io.Copy(up, c); up.(*net.TCPConn).CloseWrite() }()
			_, _ = io.Copy(c, up)
		}()
	}
}
