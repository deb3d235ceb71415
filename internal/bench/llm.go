package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ohd-dev/ohd/pkg/broker"
	"github.com/ohd-dev/ohd/pkg/broker/brokertest"
)

// LLMOptions configure the LLM benchmark. Zero fields take the defaults.
type LLMOptions struct {
	// Stream is how long the long stream of each style lasts (one event a
	// second). Default 60s.
	Stream time.Duration
	// Prompt is the size of each request body. Default 1 MiB.
	Prompt int
	// Rounds is the time-to-first-byte samples per style and path.
	// Default 20.
	Rounds int
	// Dir holds the broker's sockets; "" makes a temporary directory.
	Dir string
	// Image, when set, also measures through a container: ohd serve with
	// the docker runtime and this image (the test image, whose stand-in
	// makes the LLM call as litellm would), one conversation per style
	// created with the LLM key, and the call made by the inner server
	// through ohd's relay in its container; rows llm-<style>-ttfb-container.
	Image string
}

// LLMResult is one style of the LLM benchmark: the broker relay (what
// ohctl inner-exec serves on a container's loopback) in front of the
// broker's key-injecting proxy, against the provider reached directly.
type LLMResult struct {
	// Style is "openai" (POST /chat/completions, Authorization: Bearer)
	// or "anthropic" (POST /v1/messages, x-api-key); "-container" is
	// added when the request was made by the inner server in a container,
	// through ohd's conversation API (the TTFB then includes that hop too).
	Style string
	// TTFB are the medians and p90s of the time from sending a request
	// (with its whole body) to the first byte of the answer's body.
	RelayTTFB, DirectTTFB, RelayTTFB90, DirectTTFB90 time.Duration
	// Stream is the long stream through the relay: events received, how
	// long it lasted, and the longest gap between two events (an event a
	// second is sent: a buffering path shows one long gap).
	StreamEvents int
	StreamDur    time.Duration
	StreamMaxGap time.Duration
	// GitDuring are git credential requests of the same conversation made
	// while the stream was in flight: how many succeeded of how many, and
	// their slowest.
	GitOK, GitTotal int
	GitMax          time.Duration
}

// Line is the result as one "bench:" line.
func (r LLMResult) Line() string {
	return fmt.Sprintf("bench: llm-%s-ttfb relay_ms=%.2f direct_ms=%.2f diff_ms=%.2f p90_relay_ms=%.2f p90_direct_ms=%.2f stream_events=%d stream_s=%.1f max_gap_ms=%.0f git_during_stream=%d/%d git_max_ms=%.2f",
		r.Style, ms(r.RelayTTFB), ms(r.DirectTTFB), ms(r.RelayTTFB-r.DirectTTFB), ms(r.RelayTTFB90), ms(r.DirectTTFB90),
		r.StreamEvents, r.StreamDur.Seconds(), ms(r.StreamMaxGap), r.GitOK, r.GitTotal, ms(r.GitMax))
}

// Detail says what was measured.
func (r LLMResult) Detail() string {
	if strings.HasSuffix(r.Style, "-container") {
		return fmt.Sprintf("llm-%s: the inner server in a container calls the LLM (1 MiB prompts) through ohd's relay in the container and the broker, timed by the inner server from sending to the first byte, vs the provider directly from the host; a %s stream (asked through ohd's conversation API) got %d events, longest gap %s",
			r.Style, r.StreamDur.Round(time.Second), r.StreamEvents, r.StreamMaxGap.Round(time.Millisecond))
	}
	return fmt.Sprintf("llm-%s: 1 MiB prompts through the broker relay and the broker's LLM proxy (key injected) vs the provider directly; a %s stream through the relay got %d events, longest gap %s; %d/%d git credential requests during it, slowest %s",
		r.Style, r.StreamDur.Round(time.Second), r.StreamEvents, r.StreamMaxGap.Round(time.Millisecond), r.GitOK, r.GitTotal, r.GitMax.Round(10*time.Microsecond))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// LLMRows are the table rows: time to first byte through the relay, the
// difference to direct in ms against the 10 ms bound.
func LLMRows(rs []LLMResult) []Row {
	var out []Row
	for _, r := range rs {
		name := "llm-" + r.Style + "-ttfb"
		out = append(out, row(name, fmtDur(r.RelayTTFB), fmtDur(r.DirectTTFB), ms(r.RelayTTFB-r.DirectTTFB)))
	}
	return out
}

const (
	llmBenchConv = "llm-bench"
	llmBenchKey  = "sk-bench-0123456789abcdef"
)

// LLM runs the LLM benchmark for both header styles.
func LLM(ctx context.Context, opts LLMOptions) ([]LLMResult, error) {
	if opts.Stream <= 0 {
		opts.Stream = 60 * time.Second
	}
	if opts.Prompt <= 0 {
		opts.Prompt = 1 << 20
	}
	if opts.Rounds <= 0 {
		opts.Rounds = 20
	}
	dir := opts.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "ohdllm")
		if err != nil {
			return nil, fmt.Errorf("bench llm: %w", err)
		}
		defer os.RemoveAll(d)
		dir = d
	}
	prov, err := newBenchProvider(opts.Stream)
	if err != nil {
		return nil, fmt.Errorf("bench llm: %w", err)
	}
	defer prov.close()

	be := brokertest.New()
	be.DiscardAudit()
	be.SetLLMProfile(broker.LLMProfile{Name: "openai", BaseURL: prov.url + "/v1", APIKey: []byte(llmBenchKey)})
	be.SetLLMProfile(broker.LLMProfile{Name: "anthropic", BaseURL: prov.url, APIKey: []byte(llmBenchKey), AuthHeader: "x-api-key"})
	be.SetSecret("git-token", []byte("ghp-bench"))
	be.SetGitCredential("github.com", broker.GitCredential{Username: "x-access-token", Password: []byte("ghp-bench")})
	b, err := broker.New(broker.Options{
		RuntimeDir: filepath.Join(dir, "run"), Key: broker.DeriveKey([]byte("ohd llm bench master key")),
		Backend: be, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return nil, fmt.Errorf("bench llm: %w", err)
	}
	conv := broker.Conversation{ID: llmBenchConv, UID: os.Geteuid(), GID: os.Getegid(), Epoch: 1,
		Grants: broker.Grants{LLM: []string{"openai", "anthropic"}, Git: []string{"github.com"}}}
	ep, shutdown, err := openBenchConversation(ctx, b, be.SetConversation, conv)
	if err != nil {
		return nil, fmt.Errorf("bench llm: %w", err)
	}
	defer shutdown()
	bc := broker.NewClient(ep.Socket, ep.TokenFile)
	defer bc.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench llm: %w", err)
	}
	relay := &http.Server{Handler: broker.NewRelay(bc), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = relay.Serve(ln) }()
	defer relay.Close()
	// The relay answers only Host 127.0.0.1:8751, as inside a container:
	// requests name that address and are dialed to ln.
	relayURL := "http://" + broker.RelayAddr

	prompt := bytes.Repeat([]byte("x"), opts.Prompt)
	styles := []struct {
		name, relayPath, directPath string
		hdr                         http.Header
	}{
		{"openai", "/llm/openai/chat/completions", "/v1/chat/completions", http.Header{"Authorization": {"Bearer placeholder"}}},
		{"anthropic", "/llm/anthropic/v1/messages", "/v1/messages", http.Header{"X-Api-Key": {"placeholder"}, "Anthropic-Version": {"2023-06-01"}}},
	}
	var dialer net.Dialer
	hc := &http.Client{Transport: &http.Transport{Proxy: nil, DisableCompression: true, MaxIdleConnsPerHost: 4,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == broker.RelayAddr {
				addr = ln.Addr().String()
			}
			return dialer.DialContext(ctx, network, addr)
		}}}
	defer hc.CloseIdleConnections()
	out := make([]LLMResult, len(styles))
	for i, st := range styles {
		out[i].Style = st.name
		var relayS, directS sample
		for range opts.Rounds {
			for _, side := range []struct {
				url string
				s   *sample
				hdr http.Header
			}{{relayURL + st.relayPath, &relayS, st.hdr}, {prov.url + st.directPath, &directS, directHeader(st.name)}} {
				d, err := ttfb(ctx, hc, side.url, side.hdr, prompt)
				if err != nil {
					return nil, fmt.Errorf("bench llm %s: %w", st.name, err)
				}
				side.s.lat = append(side.s.lat, d)
			}
		}
		out[i].RelayTTFB, out[i].DirectTTFB = relayS.percentile(0.5), directS.percentile(0.5)
		out[i].RelayTTFB90, out[i].DirectTTFB90 = relayS.percentile(0.9), directS.percentile(0.9)
	}
	if n := prov.badKeys(); n > 0 {
		return nil, fmt.Errorf("bench llm: the provider got %d requests without the injected key", n)
	}

	// The long streams, both styles at once, with git credential
	// requests of the same conversation while they are in flight.
	var wg sync.WaitGroup
	errs := make([]error, len(styles))
	for i, st := range styles {
		wg.Go(func() {
			out[i].StreamEvents, out[i].StreamDur, out[i].StreamMaxGap, errs[i] = longStream(ctx, hc, relayURL+st.relayPath, st.hdr, prompt)
		})
	}
	gitCtx, stopGit := context.WithCancel(ctx)
	var git struct {
		ok, total int
		max       time.Duration
	}
	wg.Go(func() {
		t := time.NewTicker(opts.Stream / 20)
		defer t.Stop()
		time.Sleep(opts.Stream / 40) // the streams are in flight
		for {
			t0 := time.Now()
			_, err := bc.GitCredential(gitCtx, "get", []byte("protocol=https\nhost=github.com\n\n"))
			d := time.Since(t0)
			if gitCtx.Err() != nil {
				return
			}
			git.total++
			if err == nil {
				git.ok++
			}
			git.max = max(git.max, d)
			select {
			case <-gitCtx.Done():
				return
			case <-t.C:
			}
		}
	})
	// Stop the git requests when both streams have ended.
	go func() {
		for {
			if prov.streamsDone() >= len(styles) || ctx.Err() != nil {
				stopGit()
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	wg.Wait()
	stopGit()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("bench llm: %w", err)
	}
	for i := range out {
		out[i].GitOK, out[i].GitTotal, out[i].GitMax = git.ok, git.total, git.max
	}
	if opts.Image != "" {
		for _, st := range []struct{ name, model, base string }{
			{"openai", "openai/gpt-bench", prov.url + "/v1"},
			{"anthropic", "anthropic/claude-bench", prov.url},
		} {
			r, err := llmThroughContainer(ctx, opts, prov, st.name, st.model, st.base)
			if err != nil {
				return nil, fmt.Errorf("bench llm %s through a container: %w", st.name, err)
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// llmThroughContainer creates a conversation whose agent has the LLM
// (the key mediated into the broker) and has its inner server make the
// calls: TTFB rounds against the provider directly, then one long stream.
func llmThroughContainer(ctx context.Context, opts LLMOptions, prov *benchProvider, style, model, base string) (LLMResult, error) {
	r := LLMResult{Style: style + "-container"}
	d, err := startOHDWith(ctx, opts.Image, map[string]any{
		"agent": map[string]any{"kind": "Agent", "llm": map[string]any{"model": model, "api_key": llmBenchKey, "base_url": base, "stream": true}},
	})
	if err != nil {
		return r, err
	}
	defer d.stop()
	hc := &http.Client{Transport: &http.Transport{Proxy: nil, DisableCompression: true}}
	defer hc.CloseIdleConnections()
	prompt := strings.Repeat("x", opts.Prompt)
	call := func(short bool) (*http.Response, time.Time, error) {
		p := prompt
		if short {
			p = firstOnly + prompt[len(firstOnly):]
		}
		b, _ := json.Marshal(map[string]any{"stream": true, "prompt": p})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+d.listen+"/api/conversations/"+proxyBenchID+"/standin/llm", bytes.NewReader(b))
		if err != nil {
			return nil, time.Time{}, err
		}
		req.Header.Set("X-Session-API-Key", d.key)
		req.Header.Set("Content-Type", "application/json")
		t0 := time.Now()
		resp, err := hc.Do(req)
		return resp, t0, err
	}
	dir := directHeader(style)
	directPath := "/v1/chat/completions"
	if style == "anthropic" {
		directPath = "/v1/messages"
	}
	var relayS, directS sample
	for range opts.Rounds {
		resp, t0, err := call(true)
		if err != nil {
			return r, err
		}
		_ = t0
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		us, perr := strconv.ParseInt(resp.Header.Get("X-Standin-Llm-Ttfb-Us"), 10, 64)
		if resp.StatusCode != http.StatusOK || perr != nil {
			return r, fmt.Errorf("the inner server's LLM call: status %d, no time to first byte (%v)", resp.StatusCode, perr)
		}
		// As the inner server saw it: from sending the prompt to the
		// first byte, through the relay in its container and the broker.
		relayS.lat = append(relayS.lat, time.Duration(us)*time.Microsecond)
		dl, err := ttfb(ctx, hc, prov.url+directPath, dir, []byte(prompt))
		if err != nil {
			return r, err
		}
		directS.lat = append(directS.lat, dl)
	}
	r.RelayTTFB, r.DirectTTFB = relayS.percentile(0.5), directS.percentile(0.5)
	r.RelayTTFB90, r.DirectTTFB90 = relayS.percentile(0.9), directS.percentile(0.9)
	resp, t0, err := call(false)
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	last := time.Now()
	for sc.Scan() {
		if !strings.HasPrefix(sc.Text(), "data: ") {
			continue
		}
		now := time.Now()
		if r.StreamEvents > 0 {
			r.StreamMaxGap = max(r.StreamMaxGap, now.Sub(last))
		}
		last = now
		r.StreamEvents++
	}
	r.StreamDur = time.Since(t0)
	if n := prov.badKeys(); n > 0 {
		return r, fmt.Errorf("the provider got %d requests without the injected key", n)
	}
	if err := sc.Err(); err != nil {
		// Say where the stream broke: ohd's log of the run.
		return r, fmt.Errorf("the stream through ohd after %d events (%v): %w\nohd's log:\n%s", r.StreamEvents, r.StreamDur, err, d.logs)
	}
	return r, nil
}

func directHeader(style string) http.Header {
	if style == "anthropic" {
		return http.Header{"X-Api-Key": {llmBenchKey}, "Anthropic-Version": {"2023-06-01"}}
	}
	return http.Header{"Authorization": {"Bearer " + llmBenchKey}}
}

// ttfb sends one request with body and returns the time to the first
// byte of the answer's body; the stream is then abandoned.
func ttfb(ctx context.Context, hc *http.Client, url string, hdr http.Header, body []byte) (time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"?first=1", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header = hdr.Clone()
	req.Header.Set("Content-Type", "application/json")
	t0 := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var one [1]byte
	if _, err := io.ReadFull(resp.Body, one[:]); err != nil {
		return 0, fmt.Errorf("%s: status %d, no body: %w", url, resp.StatusCode, err)
	}
	d := time.Since(t0)
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: status %d", url, resp.StatusCode)
	}
	return d, nil
}

// longStream reads one whole stream and returns its events, duration and
// longest gap between events.
func longStream(ctx context.Context, hc *http.Client, url string, hdr http.Header, body []byte) (int, time.Duration, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, 0, 0, err
	}
	req.Header = hdr.Clone()
	t0 := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return 0, 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, 0, fmt.Errorf("%s: status %d", url, resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	events, last, gap := 0, time.Now(), time.Duration(0)
	done := false
	for sc.Scan() {
		if !strings.HasPrefix(sc.Text(), "data: ") {
			continue
		}
		now := time.Now()
		if events > 0 {
			gap = max(gap, now.Sub(last))
		}
		last = now
		events++
		done = done || sc.Text() == "data: [DONE]"
	}
	if err := sc.Err(); err != nil {
		return events, time.Since(t0), gap, err
	}
	if !done {
		return events, time.Since(t0), gap, fmt.Errorf("%s: the stream ended without [DONE]", url)
	}
	return events, time.Since(t0), gap, nil
}

// benchProvider is an LLM provider: it reads the whole prompt, answers
// with one server-sent event at once, and, unless asked for the first
// event only, one a second until its stream length has passed.
type benchProvider struct {
	srv    *http.Server
	ln     net.Listener
	url    string
	stream time.Duration
	mu     sync.Mutex
	bad    int
	done   int
}

func newBenchProvider(stream time.Duration) (*benchProvider, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &benchProvider{ln: ln, url: "http://" + ln.Addr().String(), stream: stream}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

func (p *benchProvider) close() { _ = p.srv.Close() }

func (p *benchProvider) badKeys() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bad
}

func (p *benchProvider) streamsDone() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// firstOnly in a prompt asks the provider for its first event only (the
// stand-in in a container passes no query).
const firstOnly = "ohd-bench-first-only"

func (p *benchProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	short := r.URL.Query().Get("first") == "1" || bytes.Contains(body, []byte(firstOnly))
	ok := r.Header.Get("Authorization") == "Bearer "+llmBenchKey
	if r.URL.Path == "/v1/messages" {
		ok = r.Header.Get("X-Api-Key") == llmBenchKey && r.Header.Get("Authorization") == ""
	}
	if !ok {
		p.mu.Lock()
		p.bad++
		p.mu.Unlock()
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	fmt.Fprint(w, "data: {\"delta\":0}\n\n")
	fl.Flush()
	if short {
		return
	}
	end := time.Now().Add(p.stream)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for i := 1; time.Now().Before(end); i++ {
		select {
		case <-r.Context().Done():
			return
		case <-t.C:
		}
		fmt.Fprintf(w, "data: {\"delta\":%d}\n\n", i)
		fl.Flush()
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	fl.Flush()
	p.mu.Lock()
	p.done++
	p.mu.Unlock()
}
