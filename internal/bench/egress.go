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
	// over Rounds alternating proxy and direct; defaults 4s and 4.
	Duration time.Duration
	Rounds   int
	// Setups is the number of connection set-ups timed in each mode;
	// default 200.
	Setups int
}

// EgressResult is the egress benchmark: the relay's forward proxy, the
// broker's egress route and the policy, against the same origin server
// reached directly from the host, in the same run.
type EgressResult struct {
	DownloadProxy, DownloadDirect time.Duration // the whole download
	DownloadRatio                 float64       // direct time / proxy time (a throughput ratio)
	SmallProxyRPS, SmallDirectRPS float64
	SmallRatio                    float64
	// SmallFloorRPS is the same clients through a blind TCP forwarder in
	// this process (one user-space hop, no parsing, no policy, no audit):
	// what any proxy process between client and origin costs here, the
	// bound of SmallRatio. SmallFloorRatio is it against direct.
	SmallFloorRPS, SmallFloorRatio float64
	SetupProxy, SetupDirect        time.Duration // median connection set-up (CONNECT answered vs TCP connected)
	Errors                         int
}

// Line is the one-line summary.
func (r EgressResult) Line() string {
	return fmt.Sprintf("bench: egress download_ratio=%.2f small_ratio=%.2f small_floor_ratio=%.2f setup_extra_ms=%.2f errors=%d",
		r.DownloadRatio, r.SmallRatio, r.SmallFloorRatio, ms(r.SetupProxy-r.SetupDirect), r.Errors)
}

// Detail says what was measured.
func (r EgressResult) Detail() string {
	return fmt.Sprintf("egress: through the relay, handed over to the broker's forward proxy and policy (grant, audit) vs the origin directly: a 100 MiB download %v vs %v; 32 clients of small requests %.0f vs %.0f req/s (a blind TCP forwarder, the floor of any proxy process: %.0f req/s); CONNECT set-up median %v vs a TCP connect %v",
		r.DownloadProxy.Round(time.Millisecond), r.DownloadDirect.Round(time.Millisecond), r.SmallProxyRPS, r.SmallDirectRPS, r.SmallFloorRPS,
		r.SetupProxy.Round(time.Microsecond), r.SetupDirect.Round(time.Microsecond))
}

// EgressRows are the table rows of Egress.
func EgressRows(r EgressResult) []Row {
	return []Row{
		row("egress-download", fmtDur(r.DownloadProxy), fmtDur(r.DownloadDirect), r.DownloadRatio),
		row("egress-small", fmtRate(r.SmallProxyRPS, "req/s"), fmtRate(r.SmallDirectRPS, "req/s"), r.SmallRatio),
		row("egress-small-floor", fmtRate(r.SmallFloorRPS, "req/s"), fmtRate(r.SmallDirectRPS, "req/s"), r.SmallFloorRatio),
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
	var res EgressResult
	dir, err := os.MkdirTemp("", "ohdegress")
	if err != nil {
		return res, fmt.Errorf("bench egress: %w", err)
	}
	defer os.RemoveAll(dir)

	// The origin: a 100 MiB body and a small one.
	chunk := make([]byte, 1<<20)
	origin := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			w.Header().Set("Content-Length", fmt.Sprint(opts.Download))
			for left := opts.Download; left > 0; left -= int64(len(chunk)) {
				if _, err := w.Write(chunk[:min(left, int64(len(chunk)))]); err != nil {
					return
				}
			}
			return
		}
		_, _ = io.WriteString(w, "ok")
	})}
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

	// The download, best of three each, alternating.
	res.DownloadProxy, res.DownloadDirect = time.Hour, time.Hour
	for i := range 6 {
		proxy := i%2 == 0
		hc := client(proxy)
		t0 := time.Now()
		get(hc, "/big")
		d := time.Since(t0)
		hc.CloseIdleConnections()
		if proxy {
			res.DownloadProxy = min(res.DownloadProxy, d)
		} else {
			res.DownloadDirect = min(res.DownloadDirect, d)
		}
	}
	res.DownloadRatio = float64(res.DownloadDirect) / float64(res.DownloadProxy)

	// The floor: a blind TCP forwarder to the origin, which the client
	// takes for the origin.
	fln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return res, fmt.Errorf("bench egress: %w", err)
	}
	defer fln.Close()
	go forwardBlindly(fln, originAddr)

	// Small requests, 32 clients, keep-alive, rounds rotating through
	// proxy, direct and floor.
	const proxied, direct, floor = 0, 1, 2
	per := opts.Duration / time.Duration(opts.Rounds)
	var n [3]int64
	var el [3]time.Duration
	for i := range 3 * opts.Rounds {
		mode := (i + i/3) % 3
		hc := client(mode == proxied)
		target := originAddr
		if mode == floor {
			target = fln.Addr().String()
		}
		var k atomic.Int64
		stop := time.Now().Add(per)
		var wg sync.WaitGroup
		t0 := time.Now()
		for range opts.Clients {
			wg.Go(func() {
				for time.Now().Before(stop) && ctx.Err() == nil {
					getFrom(hc, target, "/small")
					k.Add(1)
				}
			})
		}
		wg.Wait()
		el[mode] += time.Since(t0)
		n[mode] += k.Load()
		hc.CloseIdleConnections()
	}
	rps := func(m int) float64 { return float64(n[m]) / el[m].Seconds() }
	res.SmallProxyRPS, res.SmallDirectRPS, res.SmallFloorRPS = rps(proxied), rps(direct), rps(floor)
	res.SmallRatio = res.SmallProxyRPS / res.SmallDirectRPS
	res.SmallFloorRatio = res.SmallFloorRPS / res.SmallDirectRPS

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
