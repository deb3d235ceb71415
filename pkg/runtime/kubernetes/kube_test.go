package kubernetes

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
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
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/internal/testimage"
	"github.com/ohd-dev/ohd/pkg/runtime"
)

// RequireCluster stops t unless the one-node test cluster is up (make
// test-kube sets OHD_KUBE=1 and sources scripts/kube's env): a skip with
// the reason otherwise; with OHD_KUBE=1 a missing piece is a failure.
func requireCluster(t testing.TB) {
	t.Helper()
	if os.Getenv("OHD_KUBE") != "1" {
		t.Skip("no test cluster: make test-kube runs the Kubernetes tests (OHD_KUBE=1)")
	}
	for _, v := range []string{"KUBECONFIG", "OHD_KUBE_NODE", "OHD_KUBE_NAMESPACE"} {
		if os.Getenv(v) == "" {
			t.Fatalf("OHD_KUBE=1 but %s is empty: source scripts/kube's env (make test-kube does)", v)
		}
	}
}

var loaded struct {
	sync.Mutex
	refs map[string]error
}

// LoadImage makes sure the node's containerd has the test image as
// Docker has it now (testimage.Ensure may just have rebuilt it).
func loadImage(t testing.TB) string {
	t.Helper()
	ref := testimage.Ensure(t)
	loaded.Lock()
	defer loaded.Unlock()
	if loaded.refs == nil {
		loaded.refs = map[string]error{}
	}
	err, ok := loaded.refs[ref]
	if !ok {
		root, _ := filepath.Abs("../../..")
		out, lerr := exec.Command(filepath.Join(root, "scripts/kube/load-image"), ref).CombinedOutput()
		if lerr != nil {
			err = errors.New(lerr.Error() + ": " + string(out))
		}
		loaded.refs[ref] = err
	}
	if err != nil {
		t.Fatalf("load %s into the cluster: %v", ref, err)
	}
	return ref
}

func newUUID(t testing.TB) string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// criImageConfig reads image configuration as ohd serve does: from the
// node's containerd over the CRI.
func criImageConfig(t testing.TB) ImageConfigFunc {
	t.Helper()
	sock := os.Getenv("OHD_KUBE_CONTAINERD")
	if sock == "" {
		t.Fatal("OHD_KUBE=1 but OHD_KUBE_CONTAINERD is empty: source scripts/kube's env (make test-kube does)")
	}
	return CRIImageConfig(sock)
}

// dockerImageConfig reads image configuration from Docker, where the test
// image is built (what the CRI's answer is checked against).
func dockerImageConfig(t testing.TB) ImageConfigFunc {
	d, err := runtime.NewDocker(context.Background(), runtime.DockerOptions{})
	if err != nil {
		t.Fatalf("docker: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d.ResolveImage
}

// testKube connects to the test cluster and returns the runtime and a
// fresh server id whose pods and policies are deleted when t ends.
func testKube(t testing.TB) (*Kube, string) {
	t.Helper()
	requireCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k, err := New(ctx, Options{
		Kubeconfig: os.Getenv("KUBECONFIG"), Namespace: os.Getenv("OHD_KUBE_NAMESPACE"), Node: os.Getenv("OHD_KUBE_NODE"),
		ImageConfig: criImageConfig(t),
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	server := "test-" + strings.ReplaceAll(newUUID(t), "-", "")[:16]
	t.Cleanup(func() { cleanServer(t, k, server); k.Close() })
	return k, server
}

func cleanServer(t testing.TB, k *Kube, server string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	zero := int64(0)
	sel := metav1.ListOptions{LabelSelector: serverSelector(server)}
	if err := k.cs.CoreV1().Pods(k.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, sel); err != nil {
		t.Errorf("cleanup pods of %s: %v", server, err)
	}
	if err := k.cs.NetworkingV1().NetworkPolicies(k.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
		t.Errorf("cleanup policies of %s: %v", server, err)
	}
}

// standinEnv lets the test image's stand-in answer at the pod's IP as an
// unprivileged uid with no session key.
var standinEnv = []string{"STANDIN_ADDR=0.0.0.0:8000", "OH_CONVERSATIONS_PATH=/tmp/conversations"}

func baseSpec(t testing.TB, server string) runtime.Spec {
	return runtime.Spec{
		Env:            slices.Clone(standinEnv),
		ConversationID: newUUID(t),
		ServerID:       server,
		Image:          loadImage(t),
		UID:            testenv.UnprivilegedUID,
		GID:            testenv.UnprivilegedGID,
		Resources:      runtime.Resources{MemoryBytes: 128 << 20, NanoCPUs: 500_000_000},
		ReadyTimeout:   60 * time.Second,
	}
}

func execOut(t testing.TB, k *Kube, id string, cmd ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	code, err := k.Exec(ctx, id, cmd, runtime.ExecOptions{Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatalf("exec %v: %v", cmd, err)
	}
	return code, out.String()
}

// withImage fills Entrypoint and Cmd from the image, as the conversation
// manager does.
func withImage(t testing.TB, k *Kube, s runtime.Spec) runtime.Spec {
	img, err := k.ResolveImage(context.Background(), s.Image)
	if err != nil {
		t.Fatalf("ResolveImage: %v", err)
	}
	if len(img.Entrypoint)+len(img.Cmd) == 0 {
		t.Fatalf("image %s has no entrypoint or command", s.Image)
	}
	return s
}

// TestKubeLifecycle: a conversation's pod starts on the node with its
// hostPath mounts at the same paths, answers at its IP without a published
// port, runs commands through the API as the repository owner, shows its
// output; Stop leaves no pod (its files stay on the node), Restart then
// finds none, Start makes a new pod (another container id), Remove leaves
// nothing.
func TestKubeLifecycle(t *testing.T) {
	k, server := testKube(t)
	ctx := context.Background()
	dir := testenv.TempDir(t)
	rw, ro := filepath.Join(dir, "rw"), filepath.Join(dir, "ro")
	for _, d := range []string{rw, ro} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, testenv.UnprivilegedUID, testenv.UnprivilegedGID); err != nil {
			t.Fatal(err)
		}
	}
	s := withImage(t, k, baseSpec(t, server))
	s.Mounts = []runtime.Mount{{Source: rw, Target: rw}, {Source: ro, Target: ro, ReadOnly: true}}
	inst, err := k.Start(ctx, s)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if !inst.NoNetwork || inst.HostPort != runtime.DefaultInnerPort || !strings.HasPrefix(inst.ContainerID, runtime.ContainerName(s.ConversationID)+"/") {
		t.Errorf("instance %+v", inst)
	}
	t.Logf("start: create %v, running %v, ready %v", inst.Timings.Create, inst.Timings.Start, inst.Timings.Ready)

	// Reached through the dialer at the pod's IP.
	nd, err := k.OpenNetns(ctx, inst.ContainerID)
	if err != nil {
		t.Fatalf("OpenNetns: %v", err)
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return nd.DialContext(ctx) }}}
	resp, err := hc.Get("http://inner/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /health through the dialer: %v %v", resp, err)
	}
	resp.Body.Close()
	nd.Close()

	if code, out := execOut(t, k, inst.ContainerID, "sh", "-c", "while IFS= read -r l; do case $l in Uid:*) echo $l;; esac; done < /proc/self/status"); code != 0 || !strings.Contains(out, "Uid: 1000 1000 1000 1000") {
		t.Errorf("id -u: %d %q", code, out)
	}
	if code, out := execOut(t, k, inst.ContainerID, "sh", "-c", "echo hi > "+rw+"/f"); code != 0 {
		t.Errorf("write to the read-write mount: %d %q", code, out)
	}
	if b, err := os.ReadFile(filepath.Join(rw, "f")); err != nil || string(b) != "hi\n" {
		t.Errorf("the host does not see the file the pod wrote at the same path: %q %v", b, err)
	}
	if code, _ := execOut(t, k, inst.ContainerID, "sh", "-c", "echo x > "+ro+"/f"); code == 0 {
		t.Error("the read-only mount took a write")
	}
	// Exec's working directory and environment.
	var out bytes.Buffer
	code, err := k.Exec(ctx, inst.ContainerID, []string{"sh", "-c", "pwd; echo $FOO"}, runtime.ExecOptions{WorkingDir: rw, Env: []string{"FOO=bar"}, Stdout: &out})
	if err != nil || code != 0 || out.String() != rw+"\nbar\n" {
		t.Errorf("exec with dir and env: %d %v %q", code, err, out.String())
	}
	if code, _ := execOut(t, k, inst.ContainerID, "sh", "-c", "exit 7"); code != 7 {
		t.Errorf("exit code %d, want 7", code)
	}
	var logs bytes.Buffer
	if err := k.Logs(ctx, inst.ContainerID, false, &logs, nil); err != nil {
		t.Errorf("Logs: %v", err)
	}
	c, err := k.Inspect(ctx, inst.ContainerID)
	if err != nil || !c.Running || c.ConversationID != s.ConversationID || c.ServerID != server || c.HostPort != 8000 {
		t.Errorf("Inspect: %+v %v", c, err)
	}
	// The mounts it was made with, as Docker's Inspect reports its bind
	// mounts: the start compares them with today's plan.
	if fmt.Sprint(c.Mounts) != fmt.Sprint(s.Mounts) {
		t.Errorf("Inspect's mounts = %v, want %v", c.Mounts, s.Mounts)
	}
	l, err := k.List(ctx, server)
	if err != nil || len(l) != 1 || l[0].ID != inst.ContainerID {
		t.Errorf("List: %+v %v", l, err)
	}

	if err := k.Stop(ctx, inst.ContainerID, 5*time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := k.Inspect(ctx, inst.ContainerID); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Inspect after Stop: %v, want ErrNotFound (a stopped conversation has no pod)", err)
	}
	if _, err := os.Stat(filepath.Join(rw, "f")); err != nil {
		t.Errorf("the pod's files went with it: %v", err)
	}
	if _, err := k.Restart(ctx, inst.ContainerID, s); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Restart of a stopped pod: %v, want ErrNotFound (resume is a new pod)", err)
	}
	again, err := k.Start(ctx, s)
	if err != nil {
		t.Fatalf("Start again: %v", err)
	}
	if again.ContainerID == inst.ContainerID {
		t.Errorf("the new pod has the old id %s", again.ContainerID)
	}
	if err := k.Remove(ctx, again.ContainerID); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if l, err := k.List(ctx, server); err != nil || len(l) != 0 {
		t.Errorf("List after Remove: %+v %v", l, err)
	}
	if err := k.Remove(ctx, again.ContainerID); err != nil {
		t.Errorf("Remove of a removed pod: %v", err)
	}
}

// TestKubeHardening: the pod runs as the Spec's uid:gid with no
// capabilities, no privilege escalation, a read-only root with a
// writable /tmp, and Hardening finds nothing; asked about another uid it
// says so (the check can fail).
func TestKubeHardening(t *testing.T) {
	k, server := testKube(t)
	ctx := context.Background()
	s := withImage(t, k, baseSpec(t, server))
	s.ReadOnlyRootfs = true
	inst, err := k.Start(ctx, s)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	_, status := execOut(t, k, inst.ContainerID, "sh", "-c", `while IFS= read -r l; do printf '%s\n' "$l"; done < /proc/self/status`)
	for _, want := range []string{"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "NoNewPrivs:\t1", "Uid:\t1000\t1000\t1000\t1000", "Gid:\t1000\t1000\t1000\t1000"} {
		if !strings.Contains(status, want) {
			t.Errorf("/proc/self/status lacks %q:\n%s", want, status)
		}
	}
	if code, _ := execOut(t, k, inst.ContainerID, "sh", "-c", "echo x > /rootfile"); code == 0 {
		t.Error("the read-only root took a write")
	}
	if code, out := execOut(t, k, inst.ContainerID, "sh", "-c", "echo x > /tmp/f && read -r l < /tmp/f && echo $l"); code != 0 {
		t.Errorf("/tmp is not writable: %q", out)
	}
	if p, err := k.Hardening(ctx, inst.ContainerID, 1000, 1000); err != nil || len(p) != 0 {
		t.Errorf("Hardening: %v %v", p, err)
	}
	if p, err := k.Hardening(ctx, inst.ContainerID, 0, 0); err != nil || len(p) == 0 {
		t.Errorf("Hardening for uid 0: %v %v, want a problem", p, err)
	}
	pod, err := k.get(ctx, inst.ContainerID)
	if err != nil {
		t.Fatal(err)
	}
	if pod.Spec.NodeName != k.node || pod.Spec.Containers[0].ImagePullPolicy != corev1.PullNever || *pod.Spec.AutomountServiceAccountToken {
		t.Errorf("node %q, pull policy %s, token %v", pod.Spec.NodeName, pod.Spec.Containers[0].ImagePullPolicy, *pod.Spec.AutomountServiceAccountToken)
	}
}

// TestKubeOOM: a pod whose main process is killed for exceeding its
// memory limit fails its start as the Docker runtime's does
// (StartError.OOMKilled, ErrExited), and Events reports "oom" then "die".
func TestKubeOOM(t *testing.T) {
	k, server := testKube(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs := make(chan runtime.Event, 100)
	go k.Events(ctx, server, func(e runtime.Event) { evs <- e })
	s := baseSpec(t, server)
	s.Resources.MemoryBytes = 32 << 20
	s.Entrypoint = []string{"sh", "-c", "a=0123456789abcdef; while :; do a=\"$a$a\"; done"}
	_, err := k.Start(ctx, s)
	var se *runtime.StartError
	if !errors.As(err, &se) || !se.OOMKilled || !errors.Is(err, runtime.ErrExited) {
		t.Fatalf("Start of a memory hog: %v, want a StartError with OOMKilled and ErrExited", err)
	}
	if !se.Removed {
		t.Error("the failed pod was not removed")
	}
	var got []string
	deadline := time.After(30 * time.Second)
	for !slices.Contains(got, "destroy") {
		select {
		case e := <-evs:
			got = append(got, e.Action)
		case <-deadline:
			t.Fatalf("events so far %v, want oom, die and destroy", got)
		}
	}
	if i, j := slices.Index(got, "oom"), slices.Index(got, "die"); i < 0 || j < i {
		t.Errorf("events %v: want oom before die", got)
	}
}

// TestKubeEgressPolicy: a conversation without network gets a deny-all
// egress policy before its pod exists, and no DNS; on this cluster's
// bridge plugin ohd cannot tell it is enforced and says so.
func TestKubeEgressPolicy(t *testing.T) {
	k, server := testKube(t)
	ctx := context.Background()
	s := withImage(t, k, baseSpec(t, server))
	s.NoNetwork = true
	inst, err := k.Start(ctx, s)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	np, err := k.cs.NetworkingV1().NetworkPolicies(k.ns).Get(ctx, runtime.ContainerName(s.ConversationID), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the conversation's NetworkPolicy: %v", err)
	}
	if len(np.Spec.Egress) != 0 || !slices.Contains(np.Spec.PolicyTypes, "Egress") || np.Spec.PodSelector.MatchLabels[runtime.LabelConversation] != s.ConversationID {
		t.Errorf("policy %+v is not a deny-all egress policy of the conversation", np.Spec)
	}
	pod, err := k.get(ctx, inst.ContainerID)
	if err != nil {
		t.Fatal(err)
	}
	if pod.Spec.DNSPolicy != corev1.DNSNone || pod.Labels[runtime.LabelNetwork] != "none" {
		t.Errorf("dns policy %s, network label %q", pod.Spec.DNSPolicy, pod.Labels[runtime.LabelNetwork])
	}
	if enforced, why := k.PolicyEnforcement(ctx); enforced || !strings.Contains(why, "cannot tell") {
		t.Errorf("PolicyEnforcement on the bridge plugin: %v %q", enforced, why)
	}
	if err := k.Remove(ctx, inst.ContainerID); err != nil {
		t.Fatal(err)
	}
	if _, err := k.cs.NetworkingV1().NetworkPolicies(k.ns).Get(ctx, np.Name, metav1.GetOptions{}); err == nil {
		t.Error("Remove left the policy")
	}
}

// TestKubeMissingImage: an image the node lacks fails at once with
// ErrNotFound saying how to import it (imagePullPolicy Never), and
// nothing is left.
func TestKubeMissingImage(t *testing.T) {
	k, server := testKube(t)
	s := baseSpec(t, server)
	s.Image = "ohd-no-such-image:1"
	s.Entrypoint = []string{"true"}
	_, err := k.Start(context.Background(), s)
	if !errors.Is(err, runtime.ErrNotFound) || !strings.Contains(err.Error(), "import") {
		t.Fatalf("Start with a missing image: %v, want ErrNotFound with a hint", err)
	}
	if l, _ := k.List(context.Background(), server); len(l) != 0 {
		t.Errorf("left %v", l)
	}
}

// TestKubeAdoption: a second runtime (a restarted ohd) finds the running
// pod by its labels, reaches it, and follows its events.
func TestKubeAdoption(t *testing.T) {
	k, server := testKube(t)
	ctx := context.Background()
	inst, err := k.Start(ctx, withImage(t, k, baseSpec(t, server)))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	k2, _ := testKube(t)
	l, err := k2.List(ctx, server)
	if err != nil || len(l) != 1 || l[0].ID != inst.ContainerID || !l[0].Running || l[0].HostPort == 0 {
		t.Fatalf("the second runtime's List: %+v %v", l, err)
	}
	if code, out := execOut(t, k2, l[0].ID, "sh", "-c", ":"); code != 0 {
		t.Errorf("exec through the second runtime: %d %q", code, out)
	}
	ectx, cancel := context.WithCancel(ctx)
	defer cancel()
	evs := make(chan runtime.Event, 100)
	watching := make(chan struct{})
	var once sync.Once
	k2.onWatch = func() { once.Do(func() { close(watching) }) }
	go k2.Events(ectx, server, func(e runtime.Event) { evs <- e })
	<-watching // events before the watch are not replayed
	// Behind ohd's back: the pod is deleted.
	zero := int64(0)
	name, _ := splitID(inst.ContainerID)
	if err := k.cs.CoreV1().Pods(k.ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(30 * time.Second)
	for {
		select {
		case e := <-evs:
			if e.Action == "destroy" && e.ContainerID == inst.ContainerID && e.ConversationID != "" {
				return
			}
		case <-deadline:
			t.Fatal("no destroy event for the deleted pod")
		}
	}
}

// TestKubeExecTTY: a command run on a terminal sees one, with the size
// asked for (ohctl exec -t). The API has no initial size: it arrives just
// after the command starts, as with Docker engines before API 1.42, so
// the command waits for it.
func TestKubeExecTTY(t *testing.T) {
	k, server := testKube(t)
	s := withImage(t, k, baseSpec(t, server))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	inst, err := k.Start(ctx, s)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	var out bytes.Buffer
	code, err := k.Exec(ctx, inst.ContainerID, []string{"sh", "-c", `tty >/dev/null || exit 3; i=0; while [ "$(stty size)" = "0 0" ] && [ $i -lt 2000 ]; do i=$((i+1)); done; stty size`},
		runtime.ExecOptions{TTY: true, Size: runtime.TermSize{Rows: 40, Cols: 100}, Stdout: &out})
	if err != nil || code != 0 || strings.TrimSpace(out.String()) != "40 100" {
		t.Errorf("stty size on a 40x100 terminal: %d %v %q", code, err, out.String())
	}
}

// TestKubeWedgedPodCallsGiveUp: the node's container runtime hangs on a
// pod (testenv.WedgeProcess: the pod's containerd shim stopped). An exec
// in it gives up at the engine timeout (the watchdog's empty command does
// not run either), a Stop gives up once the kubelet has not stopped the
// pod within its grace period and the engine timeout, both are listed by
// Stalls naming the pod, and another pod on the node runs commands all
// the while. Once the shim goes on, the pod is removed.
func TestKubeWedgedPodCallsGiveUp(t *testing.T) {
	_, server := testKube(t)
	ctx := context.Background() // no deadline of the caller's: the runtime's own must hold
	k, err := New(ctx, Options{
		Kubeconfig: os.Getenv("KUBECONFIG"), Namespace: os.Getenv("OHD_KUBE_NAMESPACE"), Node: os.Getenv("OHD_KUBE_NODE"),
		ImageConfig: criImageConfig(t), EngineTimeout: 3 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	wedged, err := k.Start(ctx, withImage(t, k, baseSpec(t, server)))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	other, err := k.Start(ctx, withImage(t, k, baseSpec(t, server)))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	_, uid := splitID(wedged.ContainerID)
	pid, err := testenv.PodProcess(string(uid))
	if err != nil {
		t.Fatal(err)
	}
	w := testenv.WedgeProcess(t, wedged.ContainerID, pid)

	t0 := time.Now()
	_, err = k.Exec(ctx, wedged.ContainerID, []string{"sh", "-c", ":"}, runtime.ExecOptions{Stdout: io.Discard, Stderr: io.Discard})
	if !errors.Is(err, runtime.ErrEngineTimeout) {
		t.Errorf("exec in the wedged pod: %v, want ErrEngineTimeout", err)
	}
	t.Logf("exec gave up after %v", time.Since(t0).Round(time.Millisecond))
	if code, out := execOut(t, k, other.ContainerID, "sh", "-c", "echo on"); code != 0 || out != "on\n" {
		t.Errorf("exec in another pod while one is wedged: %d %q", code, out)
	}
	t0 = time.Now()
	if err := k.Stop(ctx, wedged.ContainerID, time.Second); !errors.Is(err, runtime.ErrEngineTimeout) {
		t.Errorf("stop of the wedged pod: %v, want ErrEngineTimeout", err)
	}
	t.Logf("stop gave up after %v", time.Since(t0).Round(time.Millisecond))
	got := k.Stalls()
	var ops []string
	for _, s := range got {
		ops = append(ops, s.Op)
		name, _, _ := strings.Cut(wedged.ContainerID, "/")
		if s.Container != wedged.ContainerID || !strings.Contains(s.String(), "on pod "+name+" timed out at") {
			t.Errorf("stall %+v reads %q, want it to name pod %s", s, s, name)
		}
	}
	if len(got) != 2 || ops[0] != "exec start" || !strings.HasPrefix(ops[1], "stop") {
		t.Errorf("Stalls() = %v, want the exec's start and the stop", got)
	}
	if code, out := execOut(t, k, other.ContainerID, "sh", "-c", "echo still"); code != 0 || out != "still\n" {
		t.Errorf("exec in another pod after the wedged one's stop gave up: %d %q", code, out)
	}

	// The shim goes on: the kubelet finishes the deletion.
	w.Release()
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := k.Remove(rctx, wedged.ContainerID); err != nil {
		t.Errorf("Remove once the shim goes on: %v", err)
	}
	if err := k.Remove(rctx, other.ContainerID); err != nil {
		t.Errorf("Remove of the other pod: %v", err)
	}
}
