package bench

import (
	"bytes"
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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moby/moby/client"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/control"
	"github.com/ohd-dev/ohd/pkg/runtime"
)

// ohdDaemon is `ohd serve` run as its own process, as deployed, with one
// conversation in a container of the test image: the proxy benchmark
// drives its conversation API and, for the baseline, the conversation's
// inner server at its published port.
type ohdDaemon struct {
	dir    string
	cmd    *exec.Cmd
	done   chan struct{}
	logs   *testenv.SyncBuffer
	listen string // the conversation API
	key    string // its session API key
	ctl    *control.Client

	// The conversation's inner server: published port and key.
	innerAddr, innerKey string
	// containerID is the conversation's container.
	containerID string
	// via is how ohd reaches it, from ohd's log.
	via string
}

// startOHD builds ohd and a static ohctl, starts the daemon with the
// docker runtime and image, and creates conversation proxyBenchID through
// its API.
func startOHD(ctx context.Context, image string) (_ *ohdDaemon, err error) {
	return startOHDWith(ctx, image, nil)
}

// startOHDWith is startOHD with more fields in the conversation's create
// body (an agent with an LLM, say).
func startOHDWith(ctx context.Context, image string, create map[string]any) (_ *ohdDaemon, err error) {
	dir, err := os.MkdirTemp("", "ohdbench-daemon")
	if err != nil {
		return nil, fmt.Errorf("bench proxy: %w", err)
	}
	d := &ohdDaemon{dir: dir, logs: &testenv.SyncBuffer{}}
	defer func() {
		if err != nil {
			d.stop()
		}
	}()
	bin := filepath.Join(dir, "bin")
	if _, err := buildHelper(ctx, bin); err != nil { // ohd mounts the ohctl next to it
		return nil, fmt.Errorf("bench proxy: %w", err)
	}
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", filepath.Join(bin, "ohd"), "github.com/ohd-dev/ohd/cmd/ohd")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("bench proxy: go build cmd/ohd: %w\n%s", err, out)
	}
	ws := filepath.Join(dir, "workspace")
	for _, p := range []string{bin, ws} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return nil, fmt.Errorf("bench proxy: %w", err)
		}
		if err := os.Chmod(p, 0o755); err != nil {
			return nil, fmt.Errorf("bench proxy: %w", err)
		}
	}
	_ = os.Chmod(dir, 0o755)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench proxy: %w", err)
	}
	d.listen = ln.Addr().String()
	ln.Close()
	socket := filepath.Join(dir, "run", "ohd.sock")
	d.cmd = exec.Command(filepath.Join(bin, "ohd"), "serve",
		"--state-dir", filepath.Join(dir, "state"), "--runtime-dir", filepath.Join(dir, "run"),
		"--worktree-root", filepath.Join(dir, "worktrees"), "--control-socket", socket,
		"--runtime", "docker", "--image", image, "--listen", d.listen, "--log-format", "json",
		// The baseline is the inner server at its published port, which
		// a container without network (--egress broker) does not have;
		// ohd's own path, inside the namespace, is the same in both modes.
		"--egress", "open")
	d.cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir}
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		d.cmd.Env = append(d.cmd.Env, "DOCKER_HOST="+h)
	}
	d.cmd.Stdout, d.cmd.Stderr = d.logs, d.logs
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench proxy: start ohd: %w", err)
	}
	d.done = make(chan struct{})
	go func() { _ = d.cmd.Wait(); close(d.done) }()
	d.ctl = control.NewClient(socket)

	deadline := time.Now().Add(time.Minute)
	for {
		if resp, err := http.Get("http://" + d.listen + "/alive"); err == nil {
			resp.Body.Close()
			break
		}
		select {
		case <-d.done:
			return nil, fmt.Errorf("bench proxy: ohd exited during start-up:\n%s", d.logs)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("bench proxy: ohd did not answer on %s within a minute:\n%s", d.listen, d.logs)
		}
	}
	k, err := os.ReadFile(filepath.Join(dir, "state", "session-api-key"))
	if err != nil {
		return nil, fmt.Errorf("bench proxy: %w", err)
	}
	d.key = strings.TrimSpace(string(k))

	cb := map[string]any{"conversation_id": proxyBenchID, "workspace": map[string]any{"working_dir": ws}}
	for k, v := range create {
		cb[k] = v
	}
	body, _ := json.Marshal(cb)
	resp, err := d.api(ctx, http.MethodPost, "/api/conversations", body)
	if err != nil {
		return nil, err
	}
	if resp.status != http.StatusCreated {
		return nil, fmt.Errorf("bench proxy: create the conversation: %d %s\n%s", resp.status, resp.body, d.logs)
	}
	c, err := d.ctl.Get(ctx, proxyBenchID)
	if err != nil {
		return nil, fmt.Errorf("bench proxy: %w", err)
	}
	if c.HostPort == 0 {
		return nil, errors.New("bench proxy: the conversation has no published port")
	}
	ik, err := os.ReadFile(filepath.Join(c.BrokerDir, "session-api-key"))
	if err != nil {
		return nil, fmt.Errorf("bench proxy: read the inner key: %w", err)
	}
	d.innerAddr, d.innerKey = net.JoinHostPort("127.0.0.1", strconv.Itoa(c.HostPort)), strings.TrimSpace(string(ik))
	d.containerID = c.ContainerID
	return d, nil
}

type apiAnswer struct {
	status int
	body   []byte
}

func (d *ohdDaemon) api(ctx context.Context, method, path string, body []byte) (apiAnswer, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+d.listen+path, bytes.NewReader(body))
	if err != nil {
		return apiAnswer{}, err
	}
	req.Header.Set("X-Session-API-Key", d.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return apiAnswer{}, fmt.Errorf("bench proxy: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return apiAnswer{resp.StatusCode, b}, nil
}

// path reports how ohd reached the inner server, from its log: it says
// when it cannot enter containers' network namespaces.
func (d *ohdDaemon) path() string {
	if strings.Contains(d.logs.String(), "through their published ports") {
		return "published port"
	}
	return "container network namespace"
}

// stop deletes the conversation (its container goes), stops ohd and
// removes its directories.
func (d *ohdDaemon) stop() {
	if d.cmd != nil && d.cmd.Process != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, _ = d.api(ctx, http.MethodDelete, "/api/conversations/"+proxyBenchID, nil)
		cancel()
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(30 * time.Second):
			_ = d.cmd.Process.Kill()
			<-d.done
		}
	}
	_ = os.RemoveAll(d.dir)
}

// processCPU is the user and system CPU time process pid has used (0 if
// it cannot be read), from /proc/<pid>/stat in clock ticks of 10 ms
// (USER_HZ is 100 on Linux).
func processCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// innerInNetns returns the network namespace of container id's first
// process (/proc/<pid>/ns/net) and the inner server's address inside it,
// for a client run there (nsenter): the inner server with no hop at all.
// Not root (nsenter cannot enter it), it returns "".
func innerInNetns(ctx context.Context, id string) (netns, addr string, err error) {
	if os.Geteuid() != 0 {
		return "", "", nil
	}
	ctx, cancel := context.WithTimeout(ctx, engineCallBudget)
	defer cancel()
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return "", "", fmt.Errorf("bench proxy: %w", err)
	}
	defer cli.Close()
	res, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return "", "", fmt.Errorf("bench proxy: inspect the conversation's container: %w", err)
	}
	ci := res.Container
	if ci.State == nil || ci.State.Pid <= 0 {
		return "", "", errors.New("bench proxy: the conversation's container does not run")
	}
	port := runtime.DefaultInnerPort
	if ci.Config != nil {
		if p, err := strconv.Atoi(ci.Config.Labels[runtime.LabelInnerPort]); err == nil && p > 0 {
			port = p
		}
	}
	return fmt.Sprintf("/proc/%d/ns/net", ci.State.Pid), net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}
