// Command ohd-bench runs ohd's benchmarks, each against a baseline in the
// same run, and prints one table of all of them followed by one
// "bench: <name> ratio=..." line per compared result. It is what
// `make bench` runs, from the module's checkout.
//
// Benchmarks (-only selects some): broker (the credential broker against a
// plain Unix-socket HTTP server), egress (a container's way out: the
// relay's forward proxy and the broker's egress route against the origin
// reached directly: a 100 MiB download, 32 clients of small requests,
// connection set-up), llm (an LLM stream through the broker
// relay a container's inner server uses and the broker's key-injecting
// proxy, against the provider directly: time to first byte with 1 MiB
// prompts, a 60 s stream, git credential requests during it), proxy (the conversation API against the
// inner server reached directly at its published port, and, as root,
// proxy-limit: wrk with 16 connections against the inner server reached
// from inside its container's network namespace, no hop at all), memory
// (ohd serve's resident memory per live conversation, 50 live; no
// baseline), create (a conversation's create and
// remove against git CLI and Docker Engine calls done directly; needs
// Docker and builds the test image if it is missing), create-parallel (8
// in-place creates of 8 folders at once against 8 worktree creates of the
// same at once), publish (how fast a
// commit made inside a conversation's container reaches the host's
// branch, and what a publish costs), publish-load (publish's p99 with 8
// agents committing at once while 20 other containers run, against one
// agent alone), gitrelay (a 200 MiB clone and a
// 50 MiB push through the broker's git relay against git directly at the
// same git http-backend), kube (a conversation's pod created and removed
// by the kubernetes runtime against the same pod created and deleted
// through the API directly; needs the cluster of scripts/kube/up, whose
// env file names it: without one the row says so) and go (every Go
// benchmark under pkg/, without a baseline).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/ohd-dev/ohd/internal/bench"
	"github.com/ohd-dev/ohd/internal/testimage"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// all is every benchmark, in the order they run and are shown.
var all = []string{"broker", "egress", "llm", "proxy", "memory", "create", "create-parallel", "kube", "publish", "publish-load", "gitrelay", "go"}

// config is the command line.
type config struct {
	only         []string
	duration     time.Duration
	iterations   int
	goBenchtime  string
	image        string
	rebuildImage bool
	strict       bool
	verbose      bool
	timeout      time.Duration
	llmStream    time.Duration
}

func parse(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet(filepath.Base(args[0]), flag.ContinueOnError)
	fs.SetOutput(stderr)
	only := fs.String("only", strings.Join(all, ","), "comma-separated benchmarks to run: "+strings.Join(all, ", "))
	fs.DurationVar(&c.duration, "duration", 0, "how long broker and proxy drive each side in each mode (0: their defaults, 4s and 10s)")
	fs.IntVar(&c.iterations, "iterations", 10, "create/remove cycles on each side")
	fs.StringVar(&c.goBenchtime, "go-benchtime", "1s", "-benchtime of the Go benchmarks")
	fs.StringVar(&c.image, "image", testimage.Ref, "conversation image of the create benchmark (never pulled)")
	fs.BoolVar(&c.rebuildImage, "rebuild-image", false, "rebuild the test image first even if it exists")
	fs.BoolVar(&c.strict, "strict", false, "exit 1 when a benchmark misses its target")
	fs.BoolVar(&c.verbose, "v", false, "show the Go benchmarks' output as it comes")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Minute, "give up after this long")
	fs.DurationVar(&c.llmStream, "llm-stream", 60*time.Second, "length of the llm benchmark's long streams")
	if err := fs.Parse(args[1:]); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, b := range strings.Split(*only, ",") {
		b = strings.TrimSpace(b)
		if b == "" {
			continue
		}
		if !slices.Contains(all, b) {
			return c, fmt.Errorf("-only: unknown benchmark %q: use %s", b, strings.Join(all, ", "))
		}
		if !slices.Contains(c.only, b) {
			c.only = append(c.only, b)
		}
	}
	if len(c.only) == 0 {
		return c, errors.New("-only: no benchmark selected")
	}
	if c.iterations < 1 {
		return c, fmt.Errorf("-iterations %d: need at least 1", c.iterations)
	}
	return c, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parse(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "ohd-bench: %v\n", err)
		}
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	progress := func(format string, a ...any) {
		fmt.Fprintf(stderr, "ohd-bench: "+format+"\n", a...)
	}
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintf(stderr, "ohd-bench: %v\n", err)
		return 1
	}
	// What the create benchmark needs is checked before anything runs, so
	// a missing engine fails in seconds, not after the other benchmarks.
	if slices.Contains(cfg.only, "create") || slices.Contains(cfg.only, "kube") || slices.Contains(cfg.only, "proxy") || slices.Contains(cfg.only, "memory") || slices.Contains(cfg.only, "publish") || slices.Contains(cfg.only, "llm") ||
		slices.Contains(cfg.only, "create-parallel") || slices.Contains(cfg.only, "publish-load") {
		if err := prepareDocker(ctx, cfg, progress); err != nil {
			fmt.Fprintf(stderr, "ohd-bench: create: %v\n", err)
			return 1
		}
	}

	var (
		rows    []bench.Row
		lines   []string
		details []string
		failed  bool
	)
	fail := func(name string, err error) {
		failed = true
		progress("%s failed: %v", name, err)
		rows = append(rows, bench.Row{Name: name, OHD: "failed: " + err.Error(), Ratio: math.NaN(), Failed: true})
	}
	for _, b := range cfg.only {
		start := time.Now()
		progress("running %s", b)
		switch b {
		case "broker":
			res, err := bench.Broker(ctx, bench.BrokerOptions{Duration: cfg.duration})
			if err != nil {
				fail("broker", err)
			}
			rows = append(rows, bench.BrokerRows(res)...)
			for _, r := range res {
				lines, details = append(lines, r.Line()), append(details, r.Detail())
			}
		case "egress":
			res, err := bench.Egress(ctx, bench.EgressOptions{Duration: cfg.duration})
			if err != nil {
				fail("egress", err)
			} else {
				rows = append(rows, bench.EgressRows(res)...)
				lines, details = append(lines, res.Line()), append(details, res.Detail())
			}
		case "llm":
			res, err := bench.LLM(ctx, bench.LLMOptions{Stream: cfg.llmStream, Image: cfg.image})
			if err != nil {
				fail("llm", err)
			}
			rows = append(rows, bench.LLMRows(res)...)
			for _, r := range res {
				lines, details = append(lines, r.Line()), append(details, r.Detail())
			}
		case "proxy":
			// The inner server in a container, reached at its published
			// port: the baseline the issue defines.
			res, err := bench.Proxy(ctx, bench.ProxyOptions{Duration: cfg.duration, Image: cfg.image})
			if err != nil {
				fail("proxy", err)
			}
			rows = append(rows, bench.ProxyRows(res)...)
			for _, r := range res {
				lines, details = append(lines, r.Line()), append(details, r.Detail())
			}
		case "memory":
			res, err := bench.Memory(ctx, bench.MemoryOptions{Image: cfg.image})
			if err != nil {
				fail("memory", err)
			} else {
				rows = append(rows, bench.MemoryRows(res)...)
				lines, details = append(lines, res.Line()), append(details, res.Detail())
			}
		case "create":
			res, err := bench.Create(ctx, bench.CreateOptions{Iterations: cfg.iterations, Image: cfg.image})
			if err != nil {
				fail("create", err)
			}
			rows = append(rows, bench.CreateRows(res)...)
			for _, r := range res {
				lines, details = append(lines, r.Line()), append(details, r.Detail())
			}
			// The same in a large repository: what the agent's own uid
			// costs must not grow with the tree (issue 26).
			res, err = bench.Create(ctx, bench.CreateOptions{Iterations: cfg.iterations, Image: cfg.image, Files: 10000, Suffix: "-10000-files"})
			if err != nil {
				fail("create", err)
			}
			rows = append(rows, bench.CreateRows(res)...)
			for _, r := range res {
				lines, details = append(lines, r.Line()), append(details, r.Detail())
			}
		case "kube":
			if !bench.KubeConfigured() {
				rows = append(rows, bench.Row{Name: "kube-create-remove", OHD: "not run: no cluster (scripts/kube/up, then . /var/lib/ohd-kube/env)", Ratio: math.NaN()})
				break
			}
			if out, err := exec.CommandContext(ctx, filepath.Join(root, "scripts/kube/load-image"), cfg.image).CombinedOutput(); err != nil {
				fail("kube-create-remove", fmt.Errorf("load %s into the cluster: %v: %s", cfg.image, err, out))
				break
			}
			res, err := bench.Kube(ctx, bench.KubeOptions{Iterations: cfg.iterations, Image: cfg.image})
			if err != nil {
				fail("kube-create-remove", err)
			}
			rows = append(rows, bench.CreateRows(res)...)
			for _, r := range res {
				lines, details = append(lines, r.Line()), append(details, r.Detail())
			}
		case "publish":
			res, err := bench.Publish(ctx, bench.PublishOptions{Image: cfg.image})
			if err != nil {
				fail("publish", err)
			} else {
				rows = append(rows, bench.PublishRows(res)...)
				lines, details = append(lines, res.Line()), append(details, res.Detail())
			}
		case "publish-load":
			res, err := bench.PublishLoad(ctx, bench.PublishLoadOptions{Image: cfg.image})
			if err != nil {
				fail("publish-load", err)
			} else {
				rows = append(rows, bench.PublishLoadRows(res)...)
				lines, details = append(lines, res.Line()), append(details, res.Detail())
			}
		case "create-parallel":
			res, err := bench.CreateParallel(ctx, bench.CreateParallelOptions{Image: cfg.image})
			if err != nil {
				fail("create-parallel", err)
			} else {
				rows = append(rows, bench.CreateParallelRows(res)...)
				lines, details = append(lines, res.Line()), append(details, res.Detail())
			}
		case "gitrelay":
			res, err := bench.GitRelay(ctx, bench.GitRelayOptions{})
			if err != nil {
				fail("gitrelay", err)
			}
			rows = append(rows, bench.GitRelayRows(res)...)
			for _, r := range res {
				lines, details = append(lines, r.Line()), append(details, r.Detail())
			}
		case "go":
			opts := bench.GoOptions{Dir: root, Benchtime: cfg.goBenchtime}
			if cfg.verbose {
				opts.Output = stderr
			}
			res, err := bench.RunGo(ctx, opts)
			if err != nil {
				fail("go", err)
			}
			rows = append(rows, bench.GoRows(res)...)
		}
		progress("%s done in %s", b, time.Since(start).Round(100*time.Millisecond))
		if ctx.Err() != nil {
			fmt.Fprintf(stderr, "ohd-bench: stopped: %v\n", context.Cause(ctx))
			return 1
		}
	}

	for _, d := range details {
		fmt.Fprintln(stdout, d)
	}
	if len(details) > 0 {
		fmt.Fprintln(stdout)
	}
	if err := bench.RenderTable(stdout, rows); err != nil {
		fmt.Fprintf(stderr, "ohd-bench: %v\n", err)
		return 1
	}
	if len(lines) > 0 {
		fmt.Fprintln(stdout)
	}
	for _, l := range lines {
		fmt.Fprintln(stdout, l)
	}
	missed := false
	for _, r := range rows {
		failed = failed || r.Failed
		missed = missed || r.Verdict() == "misses"
	}
	if failed || (cfg.strict && missed) {
		return 1
	}
	return 0
}

// prepareDocker checks that the engine answers and that the image exists,
// building the test image when it is missing (or -rebuild-image).
func prepareDocker(ctx context.Context, cfg config, progress func(string, ...any)) error {
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return fmt.Errorf("docker client: %w", err)
	}
	defer cli.Close()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		return fmt.Errorf("no Docker engine answers at %s (%v): start Docker (or set DOCKER_HOST), or leave this benchmark out: -only broker,proxy,go", cli.DaemonHost(), err)
	}
	_, err = cli.ImageInspect(ctx, cfg.image)
	switch {
	case err == nil && !cfg.rebuildImage:
		return nil
	case err != nil && !cerrdefs.IsNotFound(err):
		return fmt.Errorf("inspect image %s: %w", cfg.image, err)
	case cfg.image != testimage.Ref:
		if err != nil {
			return fmt.Errorf("image %s is not in the engine and ohd-bench builds only %s: build or load it, or drop -image", cfg.image, testimage.Ref)
		}
		return fmt.Errorf("-rebuild-image builds only %s, not %s", testimage.Ref, cfg.image)
	}
	progress("building the test image %s (make test-image)", cfg.image)
	t0 := time.Now()
	if err := testimage.Build(ctx, cfg.image); err != nil {
		return err
	}
	progress("built %s in %s", cfg.image, time.Since(t0).Round(100*time.Millisecond))
	return nil
}

// moduleRoot finds the directory of ohd's go.mod from the working
// directory up.
func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/ohd-dev/ohd\n") {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod of github.com/ohd-dev/ohd above %s: run ohd-bench inside the ohd checkout (make bench)", wd)
		}
	}
}
