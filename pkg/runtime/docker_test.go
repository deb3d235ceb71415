package runtime

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/internal/testimage"
)

// TestStartSettings starts one container with every option set and checks
// that docker inspect shows each hardening setting, and that the kernel
// applies them to the container's first process.
func TestStartSettings(t *testing.T) {
	// A secret in ohd's own environment must not reach the container.
	const secretName, secretValue = "OHD_TEST_SECRET_TOKEN", "sk-test-7f3a9c1e5b"
	t.Setenv(secretName, secretValue)

	d, server := testDocker(t)
	rw := testenv.TempDir(t)
	ro := testenv.TempDir(t)
	runDir := testenv.TempDir(t)
	s := baseSpec(t, server)
	s.Mounts = []Mount{
		{Source: rw, Target: rw},
		{Source: ro, Target: ro, ReadOnly: true},
		{Source: runDir, Target: "/run/ohd", ReadOnly: true},
	}
	s.Env = append(s.Env, "OH_CONVERSATION_RUNTIME=local", "OHD_CONVERSATION_ID="+s.ConversationID, "GIT_CONFIG_COUNT=0")
	s.WorkingDir = rw
	s.ReadOnlyRootfs = true
	s.TmpSize = 16 << 20
	s.Labels = map[string]string{"example.extra": "yes"}
	inst := mustStart(t, d, s)

	ctx := context.Background()
	res, err := rawClient(t).ContainerInspect(ctx, inst.ContainerID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ci := res.Container
	hc := ci.HostConfig

	type settings struct {
		Name, User, WorkingDir       string
		Hostname                     string
		CapAdd, CapDrop, SecurityOpt []string
		Privileged, ReadonlyRootfs   bool
		NetworkMode, PidMode         string
		IpcMode, UTSMode, UsernsMode string
		Memory, MemorySwap, NanoCPUs int64
		PidsLimit                    int64
		Tmpfs                        map[string]string
		PortBindings                 map[string][]string
		Labels                       map[string]string
		Mounts                       []mount.Mount
		RestartPolicy                string
		AutoRemove, Init             bool
		LogConfig                    container.LogConfig
	}
	bindings := func(pm map[string][]string, k string, ip, port string) { pm[k] = append(pm[k], ip+":"+port) }
	got := settings{
		Name: ci.Name, User: ci.Config.User, WorkingDir: ci.Config.WorkingDir, Hostname: ci.Config.Hostname,
		CapAdd: hc.CapAdd, CapDrop: hc.CapDrop, SecurityOpt: hc.SecurityOpt,
		Privileged: hc.Privileged, ReadonlyRootfs: hc.ReadonlyRootfs,
		NetworkMode: string(hc.NetworkMode), PidMode: string(hc.PidMode),
		IpcMode: string(hc.IpcMode), UTSMode: string(hc.UTSMode), UsernsMode: string(hc.UsernsMode),
		Memory: hc.Memory, MemorySwap: hc.MemorySwap, NanoCPUs: hc.NanoCPUs,
		Tmpfs: hc.Tmpfs, PortBindings: map[string][]string{}, Labels: ci.Config.Labels,
		Mounts: hc.Mounts, RestartPolicy: string(hc.RestartPolicy.Name), AutoRemove: hc.AutoRemove,
		LogConfig: hc.LogConfig,
	}
	if hc.PidsLimit != nil {
		got.PidsLimit = *hc.PidsLimit
	}
	if hc.Init != nil {
		got.Init = *hc.Init
	}
	for p, bs := range hc.PortBindings {
		for _, b := range bs {
			bindings(got.PortBindings, p.String(), b.HostIP.String(), b.HostPort)
		}
	}
	bind := func(p string, ro bool) mount.Mount {
		return mount.Mount{Type: mount.TypeBind, Source: p, Target: p, ReadOnly: ro,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate, NonRecursive: true}}
	}
	runMount := bind(runDir, true)
	runMount.Target = "/run/ohd"
	want := settings{
		Name: "/" + ContainerName(s.ConversationID), User: "1000:1000", WorkingDir: rw,
		Hostname: "ohd-" + strings.ReplaceAll(s.ConversationID, "-", ""),
		CapDrop:  []string{"ALL"}, SecurityOpt: []string{"no-new-privileges"},
		ReadonlyRootfs: true, NetworkMode: "default", IpcMode: "private",
		Memory: 64 << 20, MemorySwap: 64 << 20, NanoCPUs: 500_000_000, PidsLimit: 64,
		Tmpfs:        map[string]string{"/tmp": fmt.Sprintf("rw,exec,nosuid,nodev,size=%d,mode=1777", 16<<20)},
		PortBindings: map[string][]string{"8000/tcp": {"127.0.0.1:"}},
		Labels: map[string]string{
			LabelServer: server, LabelConversation: s.ConversationID, LabelInnerPort: "8000", "example.extra": "yes",
		},
		Mounts:        []mount.Mount{bind(rw, false), bind(ro, true), runMount},
		RestartPolicy: "no", Init: true,
		LogConfig: container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "10m", "max-file": "3"}},
	}
	// The engine adds the image's labels under the container's own.
	img, err := rawClient(t).ImageInspect(ctx, s.Image)
	if err != nil {
		t.Fatal(err)
	}
	if img.Config != nil {
		for k, v := range img.Config.Labels {
			if _, ok := want.Labels[k]; !ok {
				want.Labels[k] = v
			}
		}
	}
	if d.logConfig.Type == "" { // an engine whose log driver ohd leaves alone
		want.LogConfig = got.LogConfig
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("inspect settings (-want +got):\n%s", diff)
	}

	// The published port: only on 127.0.0.1, chosen by the engine, the
	// one Start returned.
	published := ci.NetworkSettings.Ports[innerPort(8000)]
	if len(published) != 1 || published[0].HostIP.String() != "127.0.0.1" {
		t.Errorf("published bindings of 8000/tcp = %v, want one on 127.0.0.1", published)
	} else if p, _ := strconv.Atoi(published[0].HostPort); p == 0 || p != inst.HostPort {
		t.Errorf("published host port = %q, Start returned %d; want the same, non-zero", published[0].HostPort, inst.HostPort)
	}
	if inst.Addr != "127.0.0.1:"+strconv.Itoa(inst.HostPort) {
		t.Errorf("Instance.Addr = %q, want 127.0.0.1:%d", inst.Addr, inst.HostPort)
	}
	if code := httpGet(t, "http://"+inst.Addr+"/health"); code != 200 {
		t.Errorf("GET /health on %s = %d, want 200", inst.Addr, code)
	}
	if ip := nonLoopbackIPv4(t); ip != "" {
		if c, err := net.DialTimeout("tcp", net.JoinHostPort(ip, strconv.Itoa(inst.HostPort)), time.Second); err == nil {
			c.Close()
			t.Errorf("the inner port answers on %s:%d; want 127.0.0.1 only", ip, inst.HostPort)
		}
	}

	// Mount points as the engine reports them: same paths, right modes.
	var mounts []string
	for _, m := range ci.Mounts {
		mounts = append(mounts, fmt.Sprintf("%s %s->%s rw=%v", m.Type, m.Source, m.Destination, m.RW))
	}
	slices.Sort(mounts)
	wantMounts := []string{
		fmt.Sprintf("bind %s->/run/ohd rw=false", runDir),
		fmt.Sprintf("bind %s->%s rw=true", rw, rw),
		fmt.Sprintf("bind %s->%s rw=false", ro, ro),
	}
	slices.Sort(wantMounts)
	if diff := cmp.Diff(wantMounts, mounts); diff != "" {
		t.Errorf("mount points (-want +got):\n%s", diff)
	}

	// Env: exactly what was given, plus what the image itself sets; never
	// the secret from ohd's environment.
	var fromImage []string
	if img.Config != nil {
		fromImage = img.Config.Env
	}
	for _, e := range s.Env {
		if !slices.Contains(ci.Config.Env, e) {
			t.Errorf("container env lacks %q", e)
		}
	}
	for _, e := range ci.Config.Env {
		if !slices.Contains(s.Env, e) && !slices.Contains(fromImage, e) {
			t.Errorf("container env has %q, which neither the spec nor the image set", e)
		}
		if strings.Contains(e, secretName) || strings.Contains(e, secretValue) {
			t.Errorf("container env carries the host's secret: %q", e)
		}
	}

	// What the kernel applies to the container's first process.
	status := procStatus(t, ci.State.Pid)
	for k, v := range map[string]string{
		"Uid": "1000\t1000\t1000\t1000", "Gid": "1000\t1000\t1000\t1000",
		"CapEff": "0000000000000000", "CapPrm": "0000000000000000", "CapBnd": "0000000000000000",
		"NoNewPrivs": "1", "Seccomp": "2",
	} {
		if status[k] != v {
			t.Errorf("/proc/<container pid 1>/status %s = %q, want %q", k, status[k], v)
		}
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", ci.State.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(environ, []byte(secretValue)) {
		t.Errorf("the container's process environment carries the host's secret")
	}

	// Read-only root, writable /tmp (and exec allowed there), writable
	// worktree, read-only mount.
	for _, c := range []struct {
		cmd      string
		writable bool
	}{
		{": > /etc/x", false},
		{": > /tmp/x", true},
		{": > " + rw + "/x", false}, // rw belongs to root here; see TestNonRootUser
		{": > " + ro + "/x", false},
	} {
		var stderr bytes.Buffer
		code, err := d.Exec(ctx, inst.ContainerID, []string{"/bin/sh", "-c", c.cmd}, ExecOptions{Stderr: &stderr})
		if err != nil {
			t.Fatalf("Exec(%q): %v", c.cmd, err)
		}
		if (code == 0) != c.writable {
			t.Errorf("Exec(%q) exit code = %d (%s), want writable=%v", c.cmd, code, strings.TrimSpace(stderr.String()), c.writable)
		}
	}
}

// TestNonRootUser checks the container's processes run as the spec's
// uid:gid and files they write into a bind-mounted directory belong to
// that user on the host.
func TestNonRootUser(t *testing.T) {
	testenv.RequireRoot(t) // to chown the shared directory
	d, server := testDocker(t)
	dir := testenv.TempDir(t)
	testenv.ChownR(t, dir, testenv.UnprivilegedUID, testenv.UnprivilegedGID)
	s := baseSpec(t, server)
	s.Mounts = []Mount{{Source: dir, Target: dir}}
	s.WorkingDir = dir
	inst := mustStart(t, d, s)
	ctx := context.Background()

	var out bytes.Buffer
	code, err := d.Exec(ctx, inst.ContainerID, []string{"/bin/sh", "-c", shUIDGID + "; : > made-inside"}, ExecOptions{Stdout: &out, Stderr: &out})
	if err != nil || code != 0 {
		t.Fatalf("Exec(uid, gid; write a file) = %d, %v; output %q", code, err, out.String())
	}
	if got, want := strings.Fields(out.String()), []string{"1000", "1000"}; !slices.Equal(got, want) {
		t.Errorf("uid, gid of a shell in the container = %q, want %q", got, want)
	}
	st, err := os.Stat(filepath.Join(dir, "made-inside"))
	if err != nil {
		t.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	if sys.Uid != 1000 || sys.Gid != 1000 {
		t.Errorf("file written by the container belongs to %d:%d on the host, want 1000:1000", sys.Uid, sys.Gid)
	}

	// The server process too (pid 1 is the init; its child is the server).
	ins, err := d.api.ContainerInspect(ctx, inst.ContainerID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range append([]int{ins.Container.State.Pid}, children(t, ins.Container.State.Pid)...) {
		if uid := procStatus(t, pid)["Uid"]; uid != "1000\t1000\t1000\t1000" {
			t.Errorf("process %d of the container has Uid %q, want 1000 throughout", pid, uid)
		}
	}
}

// TestExec checks exit codes, stdin, stdout and stderr of Exec.
func TestExec(t *testing.T) {
	d, server := testDocker(t)
	inst := mustStart(t, d, baseSpec(t, server))
	ctx := context.Background()
	tests := []struct {
		name           string
		cmd            []string
		opts           ExecOptions
		code           int
		stdout, stderr string
	}{
		{"exit code", []string{"/bin/sh", "-c", "exit 7"}, ExecOptions{}, 7, "", ""},
		{"streams", []string{"/bin/sh", "-c", "echo out; echo err >&2"}, ExecOptions{}, 0, "out\n", "err\n"},
		{"stdin", []string{"/bin/sh", "-c", "while read -r l; do echo \"<$l>\"; done"}, ExecOptions{Stdin: strings.NewReader("hello\nworld\n")}, 0, "<hello>\n<world>\n", ""},
		{"env and dir", []string{"/bin/sh", "-c", "echo $GREETING; pwd"}, ExecOptions{Env: []string{"GREETING=hi"}, WorkingDir: "/tmp"}, 0, "hi\n/tmp\n", ""},
		{"user", []string{"/bin/sh", "-c", shUIDGID}, ExecOptions{User: "1234:1235"}, 0, "1234\n1235\n", ""},
		{"container user", []string{"/bin/sh", "-c", shUIDGID}, ExecOptions{}, 0, "1000\n1000\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			tt.opts.Stdout, tt.opts.Stderr = &stdout, &stderr
			code, err := d.Exec(ctx, inst.ContainerID, tt.cmd, tt.opts)
			if err != nil {
				t.Fatalf("Exec(%q): %v", tt.cmd, err)
			}
			if code != tt.code || stdout.String() != tt.stdout || stderr.String() != tt.stderr {
				t.Errorf("Exec(%q) = %d, stdout %q, stderr %q; want %d, %q, %q",
					tt.cmd, code, stdout.String(), stderr.String(), tt.code, tt.stdout, tt.stderr)
			}
		})
	}
	if _, err := d.Exec(ctx, "ohd-no-such-container", []string{"true"}, ExecOptions{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("Exec in a missing container: %v, want ErrNotFound", err)
	}
}

// TestParallelStarts starts 8 containers at once: all ready, on distinct
// ports, and all gone after Remove.
func TestParallelStarts(t *testing.T) {
	d, server := testDocker(t)
	const n = 8
	insts := make([]Instance, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		s := baseSpec(t, server)
		wg.Go(func() { insts[i], errs[i] = d.Start(context.Background(), s) })
	}
	wg.Wait()
	ports := map[int]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Errorf("Start %d: %v", i, errs[i])
			continue
		}
		if ports[insts[i].HostPort] {
			t.Errorf("Start %d: port %d already given to another container", i, insts[i].HostPort)
		}
		ports[insts[i].HostPort] = true
		t.Logf("start %d: create %v, start %v, ready %v", i, insts[i].Timings.Create, insts[i].Timings.Start, insts[i].Timings.Ready)
	}
	ctx := context.Background()
	list, err := d.List(ctx, server)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != n {
		t.Errorf("List(%s) has %d containers, want %d", server, len(list), n)
	}
	for _, c := range list {
		if !c.Running || c.HostPort == 0 || !ports[c.HostPort] {
			t.Errorf("List: %+v, want running on one of the started ports", c)
		}
	}
	for _, inst := range insts {
		if inst.ContainerID != "" {
			if err := d.Remove(ctx, inst.ContainerID); err != nil {
				t.Errorf("Remove(%s): %v", inst.Name, err)
			}
		}
	}
	requireNoContainers(t, d, server)
}

// TestStartFailures checks that every failed Start says which step
// failed, carries the log tail, wraps the right sentinel and leaves no
// container behind.
func TestStartFailures(t *testing.T) {
	d, server := testDocker(t)
	tests := []struct {
		name     string
		edit     func(*Spec)
		cancel   bool // cancel the caller's context once the container runs
		wantErr  error
		wantStep string
		wantLog  string // in StartError.LogTail
		wantMsg  []string
		notMsg   []string // must not be in the error
	}{{
		name: "exits before ready",
		edit: func(s *Spec) {
			s.Env = append(s.Env, "STANDIN_HEALTH_DELAY=1h", "STANDIN_EXIT_AFTER=300ms")
		},
		wantErr: ErrExited, wantStep: StepReady, wantLog: "simulated crash",
		wantMsg: []string{"ready", "code 3", "simulated crash"},
	}, {
		name: "not ready in time",
		edit: func(s *Spec) {
			s.Env = append(s.Env, "STANDIN_HEALTH_DELAY=1h")
			s.ReadyTimeout = 1500 * time.Millisecond
		},
		wantErr: ErrNotReady, wantStep: StepReady, wantLog: "path=/health status=503",
		wantMsg: []string{"ready", "/health did not answer 200 within 1.5s", "503"},
	}, {
		// Without network the polls enter the container's network
		// namespace; a process that exits at once leaves none to enter,
		// and that is reported as its exit, not as a failure to reach it.
		name: "exits at once without network",
		edit: func(s *Spec) {
			s.NoNetwork = true
			s.Env = append(s.Env, "STANDIN_HEALTH_DELAY=1h", "STANDIN_EXIT_AFTER=1ms")
		},
		wantErr: ErrExited, wantStep: StepReady, wantLog: "simulated crash",
		wantMsg: []string{"ready", "code 3", "simulated crash"},
		notMsg:  []string{"reach the inner server", "netns", "namespace"},
	}, {
		name:    "missing image",
		edit:    func(s *Spec) { s.Image = "ohd-test-no-such-image:1" },
		wantErr: ErrNotFound, wantStep: StepCreate,
		wantMsg: []string{"ohd-test-no-such-image:1", "docker build -f openhands-agent-server/openhands/agent_server/docker/Dockerfile --target binary -t ohd-test-no-such-image:1 .", "software-agent-sdk", "docker load", "--image"},
	}, {
		name:     "missing mount source",
		edit:     func(s *Spec) { s.Mounts = []Mount{{Source: "/nonexistent/ohd-test", Target: "/nonexistent/ohd-test"}} },
		wantStep: StepCreate,
		wantMsg:  []string{"/nonexistent/ohd-test"},
	}, {
		name:    "caller gives up",
		edit:    func(s *Spec) { s.Env = append(s.Env, "STANDIN_HEALTH_DELAY=1h") },
		cancel:  true,
		wantErr: context.Canceled,
		// wantStep "": the cancel may land in start or ready.
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := baseSpec(t, server)
			tt.edit(&s)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var watcher sync.WaitGroup
			if tt.cancel {
				watcher.Go(func() {
					defer cancel()
					for ctx.Err() == nil {
						list, _ := d.List(ctx, server)
						if len(list) == 1 && list[0].Running {
							return
						}
						sleepCtx(ctx, 20*time.Millisecond)
					}
				})
			}
			_, err := d.Start(ctx, s)
			cancel()
			watcher.Wait()
			if err == nil {
				t.Fatal("Start succeeded, want an error")
			}
			t.Logf("error:\n%v", err)
			var se *StartError
			if !errors.As(err, &se) {
				t.Fatalf("Start error %T is not a *StartError", err)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("Start error does not wrap %v", tt.wantErr)
			}
			if tt.wantStep != "" && se.Step != tt.wantStep {
				t.Errorf("StartError.Step = %q, want %q", se.Step, tt.wantStep)
			}
			if !strings.Contains(se.LogTail, tt.wantLog) {
				t.Errorf("StartError.LogTail = %q, want it to contain %q", se.LogTail, tt.wantLog)
			}
			for _, m := range tt.wantMsg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error message lacks %q", m)
				}
			}
			for _, m := range tt.notMsg {
				if strings.Contains(err.Error(), m) {
					t.Errorf("error message has %q, want the exit reported instead", m)
				}
			}
			if se.ContainerID != "" && !se.Removed {
				t.Errorf("StartError.Removed = false, want the failed container removed")
			}
			requireNoContainers(t, d, server)
		})
	}
}

// TestEvents checks that a container killed and removed behind the
// runtime's back produces die and destroy events quickly, and that other
// servers' containers produce none.
func TestEvents(t *testing.T) {
	d, server := testDocker(t)
	_, other := testDocker(t)
	mine := mustStart(t, d, baseSpec(t, server))
	theirs := mustStart(t, d, baseSpec(t, other))

	got := followEvents(t, d, server)

	raw := rawClient(t)
	for _, id := range []string{theirs.ContainerID, mine.ContainerID} {
		if _, err := raw.ContainerKill(context.Background(), id, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
			t.Fatal(err)
		}
	}
	waitEvent(t, got, mine.ContainerID, "die", theirs.ContainerID)
	for _, id := range []string{theirs.ContainerID, mine.ContainerID} {
		if _, err := raw.ContainerRemove(context.Background(), id, client.ContainerRemoveOptions{Force: true}); err != nil {
			t.Fatal(err)
		}
	}
	waitEvent(t, got, mine.ContainerID, "destroy", theirs.ContainerID)
}

// waitEvent waits at most 2s for action on id, failing on any event of
// the container foreign.
func waitEvent(t *testing.T, got <-chan Event, id, action, foreign string) {
	t.Helper()
	deadline := time.After(2 * time.Second)
	for {
		select {
		case e := <-got:
			if e.ContainerID == foreign {
				t.Errorf("Events delivered %+v of another server's container", e)
			}
			if e.ContainerID == id && e.Action == action {
				if e.ConversationID == "" {
					t.Errorf("event %+v lacks the conversation id", e)
				}
				return
			}
		case <-deadline:
			t.Fatalf("no %q event for %s within 2s", action, shortID(id))
		}
	}
}

// TestStopRestart stops a container and starts it again: same container,
// ready again, its port read back.
func TestStopRestart(t *testing.T) {
	d, server := testDocker(t)
	s := baseSpec(t, server)
	first := mustStart(t, d, s)
	ctx := context.Background()
	if err := d.Stop(ctx, first.ContainerID, 5*time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	c, err := d.Inspect(ctx, first.ContainerID)
	if err != nil {
		t.Fatal(err)
	}
	if c.Running || c.HostPort != 0 || c.State != "exited" {
		t.Errorf("Inspect after Stop = %+v, want exited, not running, no port", c)
	}
	if err := d.Stop(ctx, first.ContainerID, time.Second); err != nil {
		t.Errorf("Stop of a stopped container: %v, want nil", err)
	}
	// Restart needs only the readiness fields; the inner port comes from
	// the container's label.
	again, err := d.Restart(ctx, first.ContainerID, Spec{ReadyTimeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if again.ContainerID != first.ContainerID || again.Name != first.Name {
		t.Errorf("Restart = %s (%s), want the same container %s (%s)", again.ContainerID, again.Name, first.ContainerID, first.Name)
	}
	if code := httpGet(t, "http://"+again.Addr+"/health"); code != 200 {
		t.Errorf("GET /health on %s after Restart = %d, want 200", again.Addr, code)
	}
	c, err = d.Inspect(ctx, first.ContainerID)
	if err != nil {
		t.Fatal(err)
	}
	want := Container{
		ID: first.ContainerID, Name: first.Name, ConversationID: s.ConversationID, ServerID: server,
		Running: true, State: "running", HostPort: again.HostPort, ImageID: c.ImageID,
		Mounts: append([]Mount{}, s.Mounts...), // the bind mounts it was made with
		PID:    c.PID,                          // checked below
	}
	if c.PID <= 0 {
		t.Errorf("Inspect PID = %d, want the running container's process on the host", c.PID)
	}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("Inspect after Restart (-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(c.ImageID, "sha256:") {
		t.Errorf("Inspect ImageID = %q, want sha256:...", c.ImageID)
	}
	t.Logf("port before stop %d, after restart %d", first.HostPort, again.HostPort)

	// A Restart that fails leaves the container stopped, not removed.
	if err := d.Stop(ctx, first.ContainerID, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	_, err = d.Restart(ctx, first.ContainerID, Spec{HealthPath: "/no-such-path", ReadyTimeout: time.Second})
	var se *StartError
	if !errors.Is(err, ErrNotReady) || !errors.As(err, &se) || se.Step != StepReady || se.Removed || se.Name != first.Name {
		t.Errorf("Restart with a failing health check = %v, want a ready-step ErrNotReady naming %s, container kept", err, first.Name)
	}
	c, err = d.Inspect(ctx, first.ContainerID)
	if err != nil || c.Running {
		t.Errorf("Inspect after a failed Restart = %+v, %v; want the container kept, stopped", c, err)
	}

	if err := d.Remove(ctx, first.ContainerID); err != nil {
		t.Fatal(err)
	}
	if err := d.Remove(ctx, first.ContainerID); err != nil {
		t.Errorf("Remove of a removed container: %v, want nil", err)
	}
	if _, err := d.Inspect(ctx, first.ContainerID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Inspect of a removed container: %v, want ErrNotFound", err)
	}
	if err := d.Stop(ctx, first.ContainerID, time.Second); !errors.Is(err, ErrNotFound) {
		t.Errorf("Stop of a removed container: %v, want ErrNotFound", err)
	}
	if _, err := d.Restart(ctx, first.ContainerID, s); !errors.Is(err, ErrNotFound) {
		t.Errorf("Restart of a removed container: %v, want ErrNotFound", err)
	}
}

// TestUnreachableEngine checks the error for an engine that is not there.
func TestUnreachableEngine(t *testing.T) {
	const host = "unix:///nonexistent.sock"
	_, err := NewDocker(context.Background(), DockerOptions{Host: host, PingTimeout: 5 * time.Second})
	if !errors.Is(err, ErrEngineUnavailable) {
		t.Fatalf("NewDocker(%q) = %v, want ErrEngineUnavailable", host, err)
	}
	for _, m := range []string{host, "start Docker", "--runtime local"} {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("NewDocker(%q) error %q lacks %q", host, err, m)
		}
	}
}

// TestList checks List returns this server's containers only.
func TestList(t *testing.T) {
	d, server := testDocker(t)
	_, other := testDocker(t)
	s := baseSpec(t, server)
	mine := mustStart(t, d, s)
	theirs := mustStart(t, d, baseSpec(t, other))
	ctx := context.Background()
	list, err := d.List(ctx, server)
	if err != nil {
		t.Fatal(err)
	}
	want := []Container{{
		ID: mine.ContainerID, Name: mine.Name, ConversationID: s.ConversationID, ServerID: server,
		Running: true, State: "running", HostPort: mine.HostPort,
	}}
	if len(list) == 1 {
		want[0].ImageID = list[0].ImageID
	}
	if diff := cmp.Diff(want, list); diff != "" {
		t.Errorf("List(%s) (-want +got):\n%s", server, diff)
	}
	others, err := d.List(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	if len(others) != 1 || others[0].ID != theirs.ContainerID {
		t.Errorf("List(%s) = %+v, want only %s", other, others, theirs.ContainerID)
	}
	// A stopped container is still listed.
	if err := d.Stop(ctx, mine.ContainerID, time.Second); err != nil {
		t.Fatal(err)
	}
	list, err = d.List(ctx, server)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Running || list[0].State != "exited" || list[0].HostPort != 0 {
		t.Errorf("List after Stop = %+v, want one exited container without a port", list)
	}
}

// TestResolveImage checks image references resolve to IDs, and a missing
// image says how to provide it.
func TestResolveImage(t *testing.T) {
	d, _ := testDocker(t)
	ref := testimage.Ensure(t)
	ctx := context.Background()
	img, err := d.ResolveImage(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(img.ID, "sha256:") || img.Ref != ref || img.Floating {
		t.Errorf("ResolveImage(%q) = %+v, want a sha256 ID, not floating", ref, img)
	}
	byID, err := d.ResolveImage(ctx, img.ID)
	if err != nil || byID.ID != img.ID || byID.Floating {
		t.Errorf("ResolveImage(%q) = %+v, %v; want the same ID, not floating", img.ID, byID, err)
	}
	short := strings.TrimPrefix(img.ID, "sha256:")[:12]
	if byShort, err := d.ResolveImage(ctx, short); err != nil || byShort.ID != img.ID || byShort.Floating {
		t.Errorf("ResolveImage(%q) = %+v, %v; want the same ID, not floating", short, byShort, err)
	}
	// A missing image is pulled; with no registry reachable (as in CI
	// here) the pull fails and the error names the image and how to load
	// it.
	_, err = d.ResolveImage(ctx, "ohd-test-no-such-image")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "pulling it failed") || !strings.Contains(err.Error(), "docker load") ||
		!strings.Contains(err.Error(), `"ohd-test-no-such-image"`) || !strings.Contains(err.Error(), "--image") {
		t.Errorf("ResolveImage(missing) = %v, want ErrNotFound after a failed pull, with a load hint", err)
	}
	// InspectImage answers the same for an image the engine has, and
	// ErrNotFound without a pull for one it lacks (the control: the
	// ResolveImage just above tried a pull of the same reference).
	if in, err := d.InspectImage(ctx, ref); err != nil || in.ID != img.ID || in.Ref != ref || in.Floating {
		t.Errorf("InspectImage(%q) = %+v, %v; want %+v", ref, in, err, img)
	}
	if _, err := d.InspectImage(ctx, "ohd-test-no-such-image"); !errors.Is(err, ErrNotFound) || strings.Contains(err.Error(), "pulling") {
		t.Errorf("InspectImage(missing) = %v, want ErrNotFound with no pull", err)
	}
	if ok, err := d.HasImage(ctx, "ohd-test-no-such-image"); ok || err != nil {
		t.Errorf("HasImage(missing) = %v, %v, want false", ok, err)
	}
	if ok, err := d.HasImage(ctx, ref); !ok || err != nil {
		t.Errorf("HasImage(%s) = %v, %v, want true", ref, ok, err)
	}
}

// TestLogs checks Logs separates stdout from stderr, and Spec.Cmd
// replaces the image's command.
func TestLogs(t *testing.T) {
	d, server := testDocker(t)
	s := baseSpec(t, server)
	s.Cmd = []string{"/bin/sh", "-c", "echo to-stdout; echo to-stderr >&2; exec /usr/local/bin/standin"}
	inst := mustStart(t, d, s)
	var stdout, stderr bytes.Buffer
	// The engine's log driver delivers lines asynchronously: the standin's
	// own line may land a moment after its health check answered.
	for deadline := time.Now().Add(10 * time.Second); ; {
		stdout.Reset()
		stderr.Reset()
		if err := d.Logs(context.Background(), inst.ContainerID, false, &stdout, &stderr); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(stderr.String(), "standin: listening") || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if stdout.String() != "to-stdout\n" {
		t.Errorf("stdout = %q, want %q", stdout.String(), "to-stdout\n")
	}
	if e := stderr.String(); !strings.HasPrefix(e, "to-stderr\n") || !strings.Contains(e, "standin: listening") {
		t.Errorf("stderr = %q, want to-stderr then the standin's log", e)
	}
	// Follow ends with the caller's context, without an error.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := d.Logs(ctx, inst.ContainerID, true, nil, nil); err != nil {
		t.Errorf("Logs(follow) after its context ended = %v, want nil", err)
	}
}

// BenchmarkStartRemove measures a whole conversation container's life:
// create, start, ready, remove. The create/start/ready split is reported
// as extra metrics.
func BenchmarkStartRemove(b *testing.B) {
	d, server := testDocker(b)
	ctx := context.Background()
	var sum Timings
	for b.Loop() {
		inst, err := d.Start(ctx, baseSpec(b, server))
		if err != nil {
			b.Fatal(err)
		}
		sum.Create += inst.Timings.Create
		sum.Start += inst.Timings.Start
		sum.Ready += inst.Timings.Ready
		if err := d.Remove(ctx, inst.ContainerID); err != nil {
			b.Fatal(err)
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(sum.Create.Milliseconds())/n, "create-ms/op")
	b.ReportMetric(float64(sum.Start.Milliseconds())/n, "start-ms/op")
	b.ReportMetric(float64(sum.Ready.Milliseconds())/n, "ready-ms/op")
}

func requireNoContainers(t *testing.T, d *Docker, server string) {
	t.Helper()
	list, err := d.List(context.Background(), server)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 0 {
		t.Errorf("List(%s) = %+v, want no container left", server, list)
	}
}

func httpGet(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Errorf("GET %s: %v", url, err)
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// procStatus reads /proc/<pid>/status into a map.
func procStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

// children lists the child processes of pid.
func children(t *testing.T, pid int) []int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		n, _ := strconv.Atoi(f)
		out = append(out, n)
	}
	if len(out) == 0 {
		t.Fatalf("process %d has no children; want the server under the init", pid)
	}
	return out
}

// nonLoopbackIPv4 returns an IPv4 address of this host that is not
// loopback, or "".
func nonLoopbackIPv4(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	return ""
}

// TestStartConflict checks a second Start of one conversation reports the
// existing container as ErrConflict and leaves it alone.
func TestStartConflict(t *testing.T) {
	d, server := testDocker(t)
	s := baseSpec(t, server)
	first := mustStart(t, d, s)
	_, err := d.Start(context.Background(), s)
	var se *StartError
	if !errors.Is(err, ErrConflict) || !errors.As(err, &se) || se.Step != StepCreate {
		t.Fatalf("second Start = %v, want a create-step ErrConflict", err)
	}
	c, err := d.Inspect(context.Background(), first.ContainerID)
	if err != nil || !c.Running {
		t.Errorf("Inspect of the first container = %+v, %v; want it still running", c, err)
	}
}

// TestNetworks checks NewDocker's network handling: the isolated network
// exists afterwards with inter-container communication off, and a network
// that does not exist is refused with the way out.
func TestNetworks(t *testing.T) {
	testenv.RequireDocker(t)
	ctx := context.Background()
	d, err := NewDocker(ctx, DockerOptions{Network: IsolatedNetwork, Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("NewDocker(network %s): %v", IsolatedNetwork, err)
	}
	d.Close()
	res, err := rawClient(t).NetworkInspect(ctx, IsolatedNetwork, client.NetworkInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Network.Driver != "bridge" || res.Network.Options[iccOption] != "false" {
		t.Errorf("network %s: driver %q, %s=%q; want an isolated bridge", IsolatedNetwork, res.Network.Driver, iccOption, res.Network.Options[iccOption])
	}
	_, err = NewDocker(ctx, DockerOptions{Network: "ohd-test-no-such-network", Logger: testLogger(t)})
	if err == nil || !strings.Contains(err.Error(), `network "ohd-test-no-such-network" does not exist`) || !strings.Contains(err.Error(), "docker network create") {
		t.Errorf("NewDocker with a missing network = %v, want an error naming it and the fix", err)
	}
}

// TestExitedSoon checks the wait for the engine to record an exit: a
// running container is not reported as exited (after the whole wait), a
// killed one is, and a removed one is too.
func TestExitedSoon(t *testing.T) {
	d, server := testDocker(t)
	ctx := context.Background()
	inst := mustStart(t, d, baseSpec(t, server))
	t.Cleanup(func() { _ = d.Remove(context.Background(), inst.ContainerID) })

	start := time.Now()
	if err := d.exitedSoon(ctx, inst.ContainerID, 300*time.Millisecond); err != nil {
		t.Fatalf("exitedSoon of a running container = %v, want nil", err)
	}
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Errorf("exitedSoon of a running container returned after %v, want the whole 300ms", waited)
	}

	raw := rawClient(t)
	if _, err := raw.ContainerKill(ctx, inst.ContainerID, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		t.Fatal(err)
	}
	err := d.exitedSoon(ctx, inst.ContainerID, exitSettle)
	var ex *exitedError
	if !errors.As(err, &ex) || ex.code != 137 {
		t.Fatalf("exitedSoon of a killed container = %v, want an exit with code 137", err)
	}

	if _, err := raw.ContainerRemove(ctx, inst.ContainerID, client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if err := d.exitedSoon(ctx, inst.ContainerID, exitSettle); !errors.Is(err, ErrExited) || !strings.Contains(err.Error(), "removed") {
		t.Fatalf("exitedSoon of a removed container = %v, want ErrExited saying it was removed", err)
	}
}
