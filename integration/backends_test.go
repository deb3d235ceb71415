package integration

import (
	"bytes"
	"cmp"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/internal/testimage"
	"github.com/ohd-dev/ohd/pkg/openhands"
	"github.com/ohd-dev/ohd/pkg/store"
)

// backend is one container runtime the runtime-dependent tests run on:
// how to start ohd on it, and how to look at a conversation's container
// behind ohd's back with the engine's own tools.
type backend struct {
	name string
	// daemon starts ohd on this backend (the test image, 256 MiB
	// containers) with extra flags.
	daemon func(t testing.TB, extra ...string) *daemon
	// start is daemon with the harness's other options (a hosts file,
	// environment); opts.Args come after the backend's own flags.
	start func(t testing.TB, opts daemonOptions) *daemon
	// running says whether the container ohd recorded (ContainerID) runs.
	running func(t testing.TB, containerID string) bool
	// exists says whether it exists at all.
	exists func(t testing.TB, containerID string) bool
	// kill removes it behind ohd's back.
	kill func(t testing.TB, containerID string)
	// stop stops it behind ohd's back: Docker keeps the stopped
	// container; Kubernetes has no stopped pod, so the pod is deleted
	// (the kubelet stops it first, as a drain does).
	stop func(t testing.TB, containerID string)
	// crash kills it at once behind ohd's back, as a crash of the node's
	// engine or an OOM kill of the whole container would: Docker keeps the
	// dead container (docker kill); a pod is deleted without grace, the
	// kubelet killing its processes (a pod killed from inside cannot be:
	// the pause process and the agent's PID 1 ignore SIGKILL from their
	// own namespace).
	crash func(t testing.TB, containerID string)
	// sandbox is the engine's record of the sandbox container a removal
	// runs for conversationID (role sandbox), if one exists at this
	// moment; it never fails the test (it is polled from a goroutine
	// while the sandbox comes and goes).
	sandbox func(t testing.TB, conversationID string) (workload, bool)
	// gateway is the host's address on the containers' network: Docker's
	// default bridge, where a container on a bridge network reaches the
	// host; the test cluster's pod bridge (ohdkube0, scripts/kube/up).
	gateway func(t *testing.T) string
	// workload is the engine's own record of the container, read with
	// the engine's tools (docker inspect; the pod from the API server).
	workload func(t testing.TB, containerID string) workload
	// removeAll removes every container of d's server, so a failed test
	// leaves nothing running.
	removeAll func(t testing.TB, d *daemon)
	// stranger makes a container labelled as serverID's, for a
	// conversation that has no record, and returns its id.
	stranger func(t testing.TB, serverID string) string
	// ofConversation lists the ids of the containers of a conversation.
	ofConversation func(t testing.TB, conversationID string) []string
	// ofServer lists the containers of an ohd (its server id): their ids
	// and the conversation each is labelled with.
	ofServer func(t testing.TB, serverID string) map[string]string
	// execCmd is a command that runs cmd in conversation c's container,
	// its output streamed as it comes: docker exec behind ohd's back; on
	// Kubernetes ohctl exec (the API server's exec, through ohd: the
	// test has no kubectl on its PATH).
	execCmd func(d *daemon, c store.Conversation, cmd ...string) *exec.Cmd
	// pid is a process of the container on the host (one in its network
	// namespace), to enter with nsenter: Docker's State.Pid; a process
	// whose cgroup names the pod's uid.
	pid func(t testing.TB, containerID string) string
	// states is the engine's view of each container's run: whether it
	// runs, since when, how often the engine restarted it (one docker
	// inspect; the pods' container statuses).
	states func(t testing.TB, containerIDs ...string) map[string]containerState
	// everything is the engine's record of every container it has, ohd's
	// or not (docker inspect of all; every pod of the test namespace).
	everything func(t testing.TB) string
	// output is what the container printed, from the engine's own log.
	output func(t testing.TB, containerID string) string
	// loadImage makes the image ref, which Docker has (a test built it),
	// the engine's to run: Docker has it; the node's containerd is given
	// it (scripts/kube/load-image).
	loadImage func(t testing.TB, ref string)
	// rawExec runs cmd in the container containerID behind ohd's back,
	// ohd up or down, and returns its output (stdout and stderr): docker
	// exec; on Kubernetes the API server's exec, through client-go.
	rawExec func(t testing.TB, containerID string, cmd ...string) (string, error)
	// stoppedKeepsContainer: Docker keeps a stopped conversation's
	// container (ohd starts it again); Kubernetes has no stopped pod: ohd
	// deletes it, and resume creates a new one (another container id),
	// the conversation's state staying on the node's disk.
	stoppedKeepsContainer bool
	// wedge makes the engine hang on the container (testenv.Wedged): on
	// Docker its shim is stopped; on Kubernetes the pod's (containerd's
	// shim serves all of a pod's containers), so the kubelet's exec and
	// kill of the pod hang while the API server answers.
	wedge func(t testing.TB, containerID string) *testenv.Wedged
}

// expectedWarning says doctor's check warns on this backend by design:
// on Kubernetes, egress-policy (ohd cannot tell the pod's deny-all policy
// is enforced, and the test cluster's bridge plugin enforces none:
// TestBackendEgressIsolationClaim).
func (b backend) expectedWarning(check string) bool {
	return b.name == "kubernetes" && check == "egress-policy"
}

// doctorProblems is ohctl doctor's table without the checks that warn on
// b by design (expectedWarning).
func (b backend) doctorProblems(out string) string {
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "WARN" && b.expectedWarning(f[2]) {
			continue
		}
		keep = append(keep, l)
	}
	return strings.Join(keep, "\n")
}

// workload is what the engine holds of a conversation's container, in
// the terms both backends share.
type workload struct {
	Name     string // the engine's name (Docker's without its "/")
	Hostname string // what the container's processes see as theirs
	// Command is what the container runs: the image's command and ohd's
	// arguments (Docker's Cmd; the container's command and args).
	Command []string
	User    string // "uid:gid" it runs as
	// CapDropAll, NoNewPrivs, Privileged, HostNamespaces: the hardening.
	CapDropAll, NoNewPrivs, Privileged, HostNamespaces bool

	ReadOnlyRoot bool
	TmpMounted   bool  // a memory file system at /tmp
	Memory       int64 // the memory limit in bytes
	CPULimited   bool
	// PidsLimit is the container's own; 0 on Kubernetes, which has none
	// per pod (the kubelet's podPidsLimit applies).
	PidsLimit int64
	// NoNetwork: Docker's network mode none; on Kubernetes the pod has the
	// node's pod network (isolated only by a NetworkPolicy the plugin may
	// not enforce: TestBackendEgressIsolationClaim) and no DNS.
	NoNetwork bool
	Published int // ports published on the host
	Labels    map[string]string
	Mounts    map[string]workloadMount // by destination in the container
	Env       []string                 // NAME=value
	Raw       string                   // the whole record, to search for secrets
}

type workloadMount struct {
	Source string // "" for a mount of the engine's own (tmpfs, emptyDir)
	RW     bool
}

// eachBackend runs fn as a subtest per backend: "docker", and
// "kubernetes" against the test cluster of make test-kube (OHD_KUBE=1;
// skipped otherwise, with the reason).
func eachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	for _, b := range []backend{dockerBackend(), kubeBackend()} {
		t.Run(b.name, func(t *testing.T) {
			if b.name == "kubernetes" {
				requireKube(t) // before fn's set-up (a 3,000-file repository, an image build)
			}
			fn(t, b)
		})
	}
}

// backendOf is the backend d runs on: Kubernetes, or Docker (whose
// listings find nothing of a local daemon).
func backendOf(d *daemon) backend {
	if d.opts.Runtime == "kubernetes" {
		return kubeBackend()
	}
	return dockerBackend()
}

func dockerBackend() backend {
	start := func(t testing.TB, opts daemonOptions) *daemon {
		t.Helper()
		testenv.RequireDocker(t)
		img := testimage.Ensure(t)
		ensurePackageWedge(t, img)
		opts.Runtime = "docker"
		opts.Args = append([]string{"--image", img, "--memory", "268435456", "--ready-timeout", "60s"}, opts.Args...)
		d := startDaemon(t, opts)
		d.serverID() // cached for checks and the cleanup once ohd is gone
		t.Cleanup(func() { removeServerContainers(t, d) })
		return d
	}
	return backend{
		name:   "docker",
		daemon: func(t testing.TB, extra ...string) *daemon { return start(t, daemonOptions{Args: extra}) },
		start:  start,
		running: func(t testing.TB, id string) bool {
			out, err := dockerCmd("inspect", "-f", "{{.State.Running}}", id).Output()
			return err == nil && strings.TrimSpace(string(out)) == "true"
		},
		exists: func(_ testing.TB, id string) bool { return containerExists(id) },
		kill:   func(t testing.TB, id string) { _ = dockerCmd("rm", "-f", id).Run() },
		stop:   func(t testing.TB, id string) { run(t, "docker", "stop", "-t", "1", id) },
		crash:  func(t testing.TB, id string) { run(t, "docker", "kill", id) },
		sandbox: func(_ testing.TB, conv string) (workload, bool) {
			out, _ := dockerCmd("ps", "-q", "--filter", "label=dev.ohd.role=sandbox", "--filter", "label=dev.ohd.conversation="+conv).Output()
			id := strings.TrimSpace(string(out))
			if id == "" {
				return workload{}, false
			}
			// One inspect for the mounts and the network mode: the sandbox
			// may be gone by a second.
			out, err := dockerCmd("inspect", "-f", `{{range .Mounts}}{{.Source}}|{{.Destination}}|{{.RW}}{{"\n"}}{{end}}{{.HostConfig.NetworkMode}}`, id).Output()
			if err != nil {
				return workload{}, false
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			w := workload{Mounts: map[string]workloadMount{}, NoNetwork: lines[len(lines)-1] == "none"}
			for _, l := range lines[:len(lines)-1] {
				if f := strings.Split(l, "|"); len(f) == 3 {
					w.Mounts[f[1]] = workloadMount{Source: f[0], RW: f[2] == "true"}
				}
			}
			return w, true
		},
		execCmd: func(_ *daemon, c store.Conversation, cmd ...string) *exec.Cmd {
			return dockerCmd(append([]string{"exec", c.ContainerID}, cmd...)...)
		},
		pid: func(t testing.TB, id string) string {
			return strings.TrimSpace(run(t, "docker", "inspect", "-f", "{{.State.Pid}}", id))
		},
		loadImage: func(testing.TB, string) {},
		states:    inspectAll,
		everything: func(t testing.TB) string {
			all := strings.Fields(run(t, "docker", "ps", "-aq"))
			if len(all) == 0 {
				return ""
			}
			out, _ := dockerCmd(append([]string{"inspect"}, all...)...).Output()
			return string(out)
		},
		output: func(t testing.TB, id string) string {
			out, _ := dockerCmd("logs", id).CombinedOutput()
			return string(out)
		},
		rawExec: func(_ testing.TB, id string, cmd ...string) (string, error) {
			out, err := dockerCmd(append([]string{"exec", id}, cmd...)...).CombinedOutput()
			return string(out), err
		},
		gateway:   bridgeGateway,
		workload:  dockerWorkload,
		removeAll: removeServerContainers,
		stranger: func(t testing.TB, server string) string {
			id := strings.TrimSpace(run(t, "docker", "create", "--label", "dev.ohd.server="+server,
				"--label", "dev.ohd.conversation="+store.NewID(), testimage.Ensure(t)))
			t.Cleanup(func() { _ = dockerCmd("rm", "-f", id).Run() })
			return id
		},
		ofConversation: func(t testing.TB, conv string) []string {
			return strings.Fields(run(t, "docker", "ps", "-aq", "--no-trunc", "--filter", "label=dev.ohd.conversation="+conv))
		},
		ofServer: func(t testing.TB, server string) map[string]string {
			ids := map[string]string{}
			out := run(t, "docker", "ps", "-a", "--no-trunc", "--filter", "label=dev.ohd.server="+server, "--format", `{{.ID}} {{.Label "dev.ohd.conversation"}}`)
			for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
				if id, conv, _ := strings.Cut(l, " "); id != "" {
					ids[id] = conv
				}
			}
			return ids
		},
		stoppedKeepsContainer: true,
		wedge:                 testenv.Wedge,
	}
}

func dockerWorkload(t testing.TB, id string) workload {
	t.Helper()
	info := inspect(t, id)
	hc, _ := get(info, "HostConfig").(map[string]any)
	cfg, _ := get(info, "Config").(map[string]any)
	num := func(v any) int64 { f, _ := v.(float64); return int64(f) }
	w := workload{
		Name:           strings.TrimPrefix(fmt.Sprint(info["Name"]), "/"),
		Hostname:       fmt.Sprint(cfg["Hostname"]),
		User:           fmt.Sprint(cfg["User"]),
		CapDropAll:     fmt.Sprint(hc["CapDrop"]) == "[ALL]",
		NoNewPrivs:     strings.Contains(fmt.Sprint(hc["SecurityOpt"]), "no-new-privileges"),
		Privileged:     hc["Privileged"] == true,
		HostNamespaces: hc["NetworkMode"] == "host" || hc["PidMode"] == "host" || hc["IpcMode"] == "host",
		ReadOnlyRoot:   hc["ReadonlyRootfs"] == true,
		TmpMounted:     get(hc, "Tmpfs", "/tmp") != nil,
		Memory:         num(hc["Memory"]),
		CPULimited:     num(hc["NanoCpus"]) > 0,
		PidsLimit:      num(hc["PidsLimit"]),
		NoNetwork:      hc["NetworkMode"] == "none",
		Labels:         map[string]string{},
		Mounts:         map[string]workloadMount{},
		Raw:            inspectRaw(t, id),
	}
	for _, a := range get(cfg, "Cmd").([]any) {
		w.Command = append(w.Command, fmt.Sprint(a))
	}
	pb, _ := get(hc, "PortBindings").(map[string]any)
	ports, _ := get(info, "NetworkSettings", "Ports").(map[string]any)
	w.Published = max(len(pb), len(ports))
	for k, v := range cfg["Labels"].(map[string]any) {
		w.Labels[k] = fmt.Sprint(v)
	}
	for _, m := range get(info, "Mounts").([]any) {
		src, _ := get(m, "Source").(string)
		w.Mounts[get(m, "Destination").(string)] = workloadMount{Source: src, RW: get(m, "RW") == true}
	}
	for _, e := range cfg["Env"].([]any) {
		w.Env = append(w.Env, fmt.Sprint(e))
	}
	return w
}

var kubeImage struct {
	sync.Mutex
	loaded map[string]error
}

// requireKube stops t without the test cluster: make test-kube sets
// OHD_KUBE=1 and sources scripts/kube's env; there, nothing skips.
func requireKube(t testing.TB) kubernetes.Interface {
	t.Helper()
	if os.Getenv("OHD_KUBE") != "1" {
		t.Skip("no test cluster: make test-kube runs the Kubernetes backend (OHD_KUBE=1)")
	}
	for _, v := range []string{"KUBECONFIG", "OHD_KUBE_NODE", "OHD_KUBE_NAMESPACE"} {
		if os.Getenv(v) == "" {
			t.Fatalf("OHD_KUBE=1 but %s is empty: source scripts/kube's env (make test-kube does)", v)
		}
	}
	rc, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// kubeTestImage is the test image, loaded into the node's containerd as
// Docker has it now.
func kubeTestImage(t testing.TB) string {
	return kubeLoadImage(t, testimage.Ensure(t))
}

// kubeLoadImage loads the image ref Docker has into the node's
// containerd, once per test binary, and returns ref.
func kubeLoadImage(t testing.TB, ref string) string {
	kubeImage.Lock()
	defer kubeImage.Unlock()
	if kubeImage.loaded == nil {
		kubeImage.loaded = map[string]error{}
	}
	err, ok := kubeImage.loaded[ref]
	if !ok {
		out, lerr := exec.Command(filepath.Join(moduleRoot(), "scripts/kube/load-image"), ref).CombinedOutput()
		if lerr != nil {
			err = &ohctlError{code: -1, stderr: string(out)}
		}
		kubeImage.loaded[ref] = err
	}
	if err != nil {
		t.Fatalf("load %s into the cluster: %v", ref, err)
	}
	return ref
}

func kubeBackend() backend {
	ns := func() string { return os.Getenv("OHD_KUBE_NAMESPACE") }
	getPod := func(t testing.TB, id string) *corev1.Pod {
		cs := requireKube(t)
		name, uid, _ := strings.Cut(id, "/")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		p, err := cs.CoreV1().Pods(ns()).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			t.Fatalf("get pod %s: %v", name, err)
		}
		if string(p.UID) != uid {
			return nil
		}
		return p
	}
	pod := func(t testing.TB, id string) (bool, bool) {
		p := getPod(t, id)
		if p == nil {
			return false, false
		}
		running := false
		for _, s := range p.Status.ContainerStatuses {
			running = running || s.State.Running != nil
		}
		return true, running && p.DeletionTimestamp == nil
	}
	list := func(t testing.TB, set labels.Set) []corev1.Pod {
		cs := requireKube(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		l, err := cs.CoreV1().Pods(ns()).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(set).String()})
		if err != nil {
			t.Fatalf("list pods %v: %v", set, err)
		}
		return l.Items
	}
	removeAll := func(t testing.TB, d *daemon) {
		server := d.serverID()
		if server == "" {
			return
		}
		cs := requireKube(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		zero := int64(0)
		sel := metav1.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{"dev.ohd.server": server}).String()}
		_ = cs.CoreV1().Pods(ns()).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, sel)
		_ = cs.NetworkingV1().NetworkPolicies(ns()).DeleteCollection(ctx, metav1.DeleteOptions{}, sel)
	}
	start := func(t testing.TB, opts daemonOptions) *daemon {
		t.Helper()
		requireKube(t)
		img := kubeTestImage(t)
		opts.Runtime = "kubernetes"
		opts.Args = append([]string{"--image", img, "--memory", "268435456", "--ready-timeout", "90s",
			"--kubeconfig", os.Getenv("KUBECONFIG"), "--kube-node", os.Getenv("OHD_KUBE_NODE"), "--kube-namespace", ns(),
			"--kube-cri-socket", os.Getenv("OHD_KUBE_CONTAINERD")}, opts.Args...)
		d := startDaemon(t, opts)
		d.serverID()
		t.Cleanup(func() { removeAll(t, d) })
		return d
	}
	// kill deletes the pod and waits until it is gone, as docker rm -f
	// returns once the container is. The grace period is 1 s, not 0: a
	// pod deleted with 0 leaves the API at once (a force delete) while the
	// kubelet kills its containers after, so a request made just after
	// would still reach the old pod; with 1 the pod object stays until the
	// kubelet has killed them.
	kill := func(t testing.TB, id string) {
		cs := requireKube(t)
		name, _, _ := strings.Cut(id, "/")
		one := int64(1)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_ = cs.CoreV1().Pods(ns()).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &one})
		for getPod(t, id) != nil {
			if ctx.Err() != nil {
				t.Fatalf("pod %s is still there 60 s after its deletion", id)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return backend{
		name:    "kubernetes",
		daemon:  func(t testing.TB, extra ...string) *daemon { return start(t, daemonOptions{Args: extra}) },
		start:   start,
		running: func(t testing.TB, id string) bool { _, r := pod(t, id); return r },
		exists:  func(t testing.TB, id string) bool { e, _ := pod(t, id); return e },
		kill:    kill,
		stop:    kill,
		crash:   kill,
		sandbox: func(t testing.TB, conv string) (workload, bool) {
			cs := requireKube(t) // it passed when ohd started: no Skip or Fatal here
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			sel := labels.SelectorFromSet(labels.Set{"dev.ohd.role": "sandbox", "dev.ohd.conversation": conv}).String()
			l, err := cs.CoreV1().Pods(ns()).List(ctx, metav1.ListOptions{LabelSelector: sel})
			if err != nil {
				return workload{}, false
			}
			for i := range l.Items {
				if l.Items[i].DeletionTimestamp == nil {
					return podWorkload(t, &l.Items[i]), true
				}
			}
			return workload{}, false
		},
		execCmd: func(d *daemon, c store.Conversation, cmd ...string) *exec.Cmd {
			return exec.Command(built.ohctl, append([]string{"--socket", d.socket, "exec", c.ID, "--"}, cmd...)...)
		},
		rawExec: kubeExec,
		states: func(t testing.TB, ids ...string) map[string]containerState {
			m := map[string]containerState{}
			for _, id := range ids {
				s := containerState{ID: id}
				if p := getPod(t, id); p != nil && p.DeletionTimestamp == nil {
					for _, c := range p.Status.ContainerStatuses {
						if c.Name == "agent" {
							s.Running = c.State.Running != nil
							if s.Running {
								s.StartedAt = c.State.Running.StartedAt.UTC().Format(time.RFC3339)
							}
							s.RestartCount = float64(c.RestartCount)
						}
					}
				}
				m[id] = s
			}
			return m
		},
		everything: func(t testing.TB) string {
			raw, err := json.Marshal(list(t, nil))
			if err != nil {
				t.Fatal(err)
			}
			return string(raw)
		},
		output: func(t testing.TB, id string) string {
			cs := requireKube(t)
			name, _, _ := strings.Cut(id, "/")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			out, err := cs.CoreV1().Pods(ns()).GetLogs(name, &corev1.PodLogOptions{Container: "agent"}).DoRaw(ctx)
			if err != nil {
				t.Fatalf("the log of pod %s: %v", name, err)
			}
			return string(out)
		},
		loadImage: func(t testing.TB, ref string) { requireKube(t); kubeLoadImage(t, ref) },
		pid:       podPid,
		wedge: func(t testing.TB, id string) *testenv.Wedged {
			pid, err := strconv.Atoi(podPid(t, id))
			if err != nil {
				t.Fatal(err)
			}
			return testenv.WedgeProcess(t, id, pid)
		},
		gateway: func(t *testing.T) string { return interfaceAddr(t, "ohdkube0") },
		workload: func(t testing.TB, id string) workload {
			t.Helper()
			p := getPod(t, id)
			if p == nil {
				t.Fatalf("pod %s: not found", id)
			}
			return podWorkload(t, p)
		},
		removeAll: removeAll,
		stranger: func(t testing.TB, server string) string {
			cs := requireKube(t)
			no := false
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "ohd-stranger-" + store.NewID()[:8], Namespace: ns(),
					Labels: map[string]string{"dev.ohd.server": server, "dev.ohd.conversation": store.NewID()}},
				Spec: corev1.PodSpec{
					NodeName: os.Getenv("OHD_KUBE_NODE"), RestartPolicy: corev1.RestartPolicyNever,
					AutomountServiceAccountToken: &no,
					Containers: []corev1.Container{{Name: "agent", Image: kubeTestImage(t), ImagePullPolicy: corev1.PullNever,
						Command: []string{"sh", "-c", "sleep 3600"}}},
				},
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			p, err := cs.CoreV1().Pods(ns()).Create(ctx, p, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("create a stranger pod: %v", err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				zero := int64(0)
				_ = cs.CoreV1().Pods(ns()).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
			})
			return p.Name + "/" + string(p.UID)
		},
		ofConversation: func(t testing.TB, conv string) []string {
			var ids []string
			for _, p := range list(t, labels.Set{"dev.ohd.conversation": conv}) {
				if p.DeletionTimestamp == nil {
					ids = append(ids, p.Name+"/"+string(p.UID))
				}
			}
			return ids
		},
		ofServer: func(t testing.TB, server string) map[string]string {
			ids := map[string]string{}
			for _, p := range list(t, labels.Set{"dev.ohd.server": server}) {
				if p.DeletionTimestamp == nil { // deleted: the kubelet finishes it
					ids[p.Name+"/"+string(p.UID)] = p.Labels["dev.ohd.conversation"]
				}
			}
			return ids
		},
	}
}

// kubeExec runs cmd in the agent container of the pod id ("name/uid")
// through the API server's exec, as kubectl exec would: ohd plays no part.
func kubeExec(t testing.TB, id string, cmd ...string) (string, error) {
	t.Helper()
	cs := requireKube(t)
	rc, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		t.Fatal(err)
	}
	name, _, _ := strings.Cut(id, "/")
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(os.Getenv("OHD_KUBE_NAMESPACE")).Name(name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: "agent", Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewWebSocketExecutor(rc, "GET", req.URL().String())
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out lockedBuffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &out})
	return out.String(), err
}

// lockedBuffer is a buffer two goroutines may write at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// podWorkload describes a pod as workload does. The kubelet adds mounts
// of its own at run time (/etc/hosts, /etc/hostname, /etc/resolv.conf,
// /dev/termination-log); they are not in the spec, so not here.
// podPid is a process of pod id (its "<name>/<uid>") on the host.
func podPid(t testing.TB, id string) string {
	t.Helper()
	_, uid, _ := strings.Cut(id, "/")
	pid, err := testenv.PodProcess(uid)
	if err != nil {
		t.Fatal(err)
	}
	return strconv.Itoa(pid)
}

func podWorkload(t testing.TB, p *corev1.Pod) workload {
	t.Helper()
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	w := workload{Name: p.Name, Hostname: cmp.Or(p.Spec.Hostname, p.Name), Labels: p.Labels, Mounts: map[string]workloadMount{}, Raw: string(raw),
		HostNamespaces: p.Spec.HostNetwork || p.Spec.HostPID || p.Spec.HostIPC,
		NoNetwork:      p.Labels["dev.ohd.network"] == "none" && p.Spec.DNSPolicy == corev1.DNSNone}
	var c *corev1.Container
	for i := range p.Spec.Containers {
		if p.Spec.Containers[i].Name == "agent" {
			c = &p.Spec.Containers[i]
		}
	}
	if c == nil {
		t.Fatalf("pod %s has no agent container: %s", p.Name, raw)
	}
	w.Command = append(slices.Clone(c.Command), c.Args...)
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsUser != nil && sc.RunAsGroup != nil {
			w.User = fmt.Sprintf("%d:%d", *sc.RunAsUser, *sc.RunAsGroup)
		}
		w.CapDropAll = sc.Capabilities != nil && len(sc.Capabilities.Add) == 0 && slices.Contains(sc.Capabilities.Drop, "ALL")
		w.NoNewPrivs = sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation
		w.Privileged = sc.Privileged != nil && *sc.Privileged
		w.ReadOnlyRoot = sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem
	}
	if m, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		w.Memory = m.Value()
	}
	if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok && !q.IsZero() {
		w.CPULimited = true
	}
	for _, port := range c.Ports {
		if port.HostPort != 0 {
			w.Published++
		}
	}
	vols := map[string]corev1.Volume{}
	for _, v := range p.Spec.Volumes {
		vols[v.Name] = v
	}
	for _, m := range c.VolumeMounts {
		v := vols[m.Name]
		switch {
		case v.HostPath != nil:
			w.Mounts[m.MountPath] = workloadMount{Source: v.HostPath.Path, RW: !m.ReadOnly}
		case v.EmptyDir != nil && m.MountPath == "/tmp" && v.EmptyDir.Medium == corev1.StorageMediumMemory:
			w.TmpMounted = true // Docker's tmpfs at /tmp: not among its Mounts either
		default:
			w.Mounts[m.MountPath] = workloadMount{RW: !m.ReadOnly}
		}
	}
	for _, e := range c.Env {
		w.Env = append(w.Env, e.Name+"="+e.Value)
	}
	return w
}

func (d *daemon) show(id string) store.Conversation {
	d.t.Helper()
	var c store.Conversation
	d.ohctlJSON(&c, "show", id)
	return c
}

// TestBackendLifecycle: create, exec in the worktree at its own path,
// idle stop, resume on the next request, remove; on each backend.
func TestBackendLifecycle(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		d := b.daemon(t, "--idle-timeout", "3s")
		var c store.Conversation
		d.ohctlJSON(&c, "create", "--repo", testenv.NewRepo(t, testenv.RepoOptions{}), "--worktree")
		if c.State != store.StateRunning || c.ContainerID == "" || c.Runtime != b.name {
			t.Fatalf("create = %+v", c)
		}
		if !b.running(t, c.ContainerID) {
			t.Fatalf("container %s does not run", c.ContainerID)
		}
		if code, out := d.execIn(c.ID, "git", "-C", c.Worktree, "status", "--short", "--branch"); code != 0 || !strings.HasPrefix(out, "## openhands/"+c.ID) {
			t.Errorf("git status in the container: %d %q", code, out)
		}
		if code, out := d.execIn(c.ID, "sh", "-c", "echo from-inside > "+c.Worktree+"/inside.txt"); code != 0 {
			t.Fatalf("write in the worktree: %d %q", code, out)
		}
		if b, err := os.ReadFile(filepath.Join(c.Worktree, "inside.txt")); err != nil || string(b) != "from-inside\n" {
			t.Errorf("the host sees %q %v at the same path", b, err)
		}
		waitFor(t, 60*time.Second, "the idle conversation to stop", func() bool { return d.show(c.ID).State == store.StateStopped })
		if b.running(t, c.ContainerID) {
			t.Error("the container of a stopped conversation still runs")
		}
		if got := b.exists(t, c.ContainerID); got != b.stoppedKeepsContainer {
			t.Errorf("a stopped conversation's container exists: %v, want %v (see backend.stoppedKeepsContainer)", got, b.stoppedKeepsContainer)
		}
		if code, out := d.execIn(c.ID, catCmd(c.Worktree+"/inside.txt")...); code != 0 || out != "from-inside\n" {
			t.Errorf("after resume: %d %q", code, out)
		}
		now := d.show(c.ID)
		if now.State != store.StateRunning || !b.running(t, now.ContainerID) {
			t.Errorf("after resume: %s, container %s", now.State, now.ContainerID)
		}
		if same := now.ContainerID == c.ContainerID; same != b.stoppedKeepsContainer {
			t.Errorf("resumed in the same container: %v, want %v", same, b.stoppedKeepsContainer)
		}
		d.ohctl("rm", now.ID)
		if b.exists(t, now.ContainerID) {
			t.Error("container left after rm")
		}
	})
}

// TestBackendHardening: the agent runs as its own uid (agentUID, neither
// root nor the repository's owner, since issue 26) with no capabilities
// and no-new-privileges, and
// ohctl doctor finds the container hardened.
func TestBackendHardening(t *testing.T) {
	testenv.RequireRoot(t)
	eachBackend(t, func(t *testing.T, b backend) {
		d := b.daemon(t, "--read-only-rootfs")
		repo := testenv.NewRepo(t, testenv.RepoOptions{Owner: &testenv.Owner{UID: 1000, GID: 1000}})
		var c store.Conversation
		d.ohctlJSON(&c, "create", "--repo", repo, "--worktree")
		_, status := d.execIn(c.ID, catCmd("/proc/self/status")...)
		for _, want := range []string{"CapEff:\t0000000000000000", "NoNewPrivs:\t1", fmt.Sprintf("Uid:\t%[1]d\t%[1]d\t%[1]d\t%[1]d", agentUID)} {
			if !strings.Contains(status, want) {
				t.Errorf("/proc/self/status lacks %q", want)
			}
		}
		if code, _ := d.execIn(c.ID, "sh", "-c", "echo x > /rootfile"); code == 0 {
			t.Error("the read-only root took a write")
		}
		// No credential of the engine in reach of the agent: on Kubernetes
		// no ServiceAccount token is mounted (the pod could otherwise call
		// the API server as its account).
		if code, out := d.execIn(c.ID, "sh", "-c", "test -e /var/run/secrets/kubernetes.io/serviceaccount/token && echo present; test -e /var/run/docker.sock && echo socket; :"); code != 0 || strings.Contains(out, "present") || strings.Contains(out, "socket") {
			t.Errorf("an engine credential inside the container: %d %q", code, out)
		}
		var hardened bool
		for _, ch := range d.doctorChecks(c.ID) {
			if ch.Check == "container-hardening" {
				hardened = ch.Status == "ok"
				if !hardened {
					t.Errorf("doctor: %+v", ch)
				}
			}
		}
		if !hardened {
			t.Error("doctor ran no container-hardening check")
		}
		d.ohctl("rm", c.ID)
	})
}

// TestBackendBrokerSocket: the broker socket mounted into the container
// answers there: git's credential helper (ohctl at /run/ohd/bin) gets the
// granted host's password and nothing for another.
func TestBackendBrokerSocket(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		d := b.daemon(t)
		if _, err := d.ohctlIn("ghp-broker-reachable", "secret", "set", "gh"); err != nil {
			t.Fatal(err)
		}
		d.ohctl("git-host", "set", "github.com", "--secret", "gh")
		var c store.Conversation
		d.ohctlJSON(&c, "create", "--repo", testenv.NewRepo(t, testenv.RepoOptions{}), "--worktree", "--grant-git", "github.com/my-org")
		d.ohctl("grant", c.ID, "git", "github.com/my-org", "--git-relay=false")
		fill := func(url string) (int, string) {
			return d.execIn(c.ID, "sh", "-c", "printf 'url="+url+"\\n\\n' | GIT_TERMINAL_PROMPT=0 git -C "+c.Worktree+" credential fill")
		}
		if code, out := fill("https://github.com/my-org/repo.git"); code != 0 || !strings.Contains(out, "password=ghp-broker-reachable") {
			t.Errorf("granted host through the broker socket: %d %q", code, out)
		}
		if code, out := fill("https://github.com/other-org/repo.git"); code == 0 || strings.Contains(out, "ghp-broker-reachable") {
			t.Errorf("ungranted path: %d %q", code, out)
		}
		d.ohctl("rm", "--discard", c.ID)
	})
}

// TestBackendAdoptionAfterRestart: ohd is killed and started again (the
// seed's reconcile after restart); the running conversation's container
// is adopted (same id, still running, reached), one removed while ohd was
// down is marked stopped, and a container with ohd's label but no record
// (a stranger made while ohd was down) is removed.
func TestBackendAdoptionAfterRestart(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		d := b.daemon(t)
		repo := testenv.NewRepo(t, testenv.RepoOptions{})
		var a, g store.Conversation
		d.ohctlJSON(&a, "create", "--repo", repo, "--worktree")
		d.ohctlJSON(&g, "create", "--repo", repo, "--worktree")
		server := d.serverID()
		d.kill()
		b.kill(t, g.ContainerID)
		stranger := b.stranger(t, server)
		waitFor(t, 60*time.Second, "the killed container to be gone", func() bool { return !b.exists(t, g.ContainerID) })
		d.start()
		waitFor(t, 60*time.Second, "the labelled container without a record to be removed", func() bool { return !b.exists(t, stranger) })
		if a2 := d.show(a.ID); a2.State != store.StateRunning || a2.ContainerID != a.ContainerID || !b.running(t, a.ContainerID) {
			t.Errorf("a not adopted: %s %s (was %s)", a2.State, a2.ContainerID, a.ContainerID)
		}
		if g2 := d.show(g.ID); g2.State != store.StateStopped {
			t.Errorf("g's container is gone but its record is %s", g2.State)
		}
		if code, out := d.execIn(a.ID, "git", "-C", a.Worktree, "status", "--short", "--branch"); code != 0 || !strings.HasPrefix(out, "## openhands/"+a.ID) {
			t.Errorf("adopted conversation: %d %q", code, out)
		}
		d.ohctl("rm", a.ID)
		d.ohctl("rm", g.ID)
	})
}

// TestBackendOOMInsideIsNotADeath: a process in the conversation's
// container (a build) is killed for memory; the container and its inner
// server run on, and ohd keeps the record running.
func TestBackendOOMInsideIsNotADeath(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		d := b.daemon(t)
		id, _ := d.apiCreate(map[string]any{"workspace": map[string]any{"working_dir": testenv.NewRepo(t, testenv.RepoOptions{})}})
		c := d.record(id)
		if code, out := d.innerExec(id, "sh", "-c", "echo before"); code != 0 || !strings.Contains(out, "before") {
			t.Fatalf("exec before the OOM: %d %q", code, out)
		}
		code, out := d.execIn(id, "sh", "-c", "a=0123456789abcdef; while :; do a=\"$a$a\"; done")
		if code == 0 {
			t.Fatalf("the memory hog exited 0: %q", out)
		}
		if got := d.record(id); got.State != store.StateRunning || got.ContainerID != c.ContainerID {
			t.Errorf("after an OOM kill inside: %s %s, want running %s", got.State, got.ContainerID, c.ContainerID)
		}
		if !b.running(t, c.ContainerID) {
			t.Fatal("the container itself stopped")
		}
		if code, out := d.innerExec(id, "sh", "-c", "echo after"); code != 0 || !strings.Contains(out, "after") {
			t.Errorf("exec after the OOM: %d %q", code, out)
		}
	})
}

// TestBackendContainerSettings: the engine's own record of a
// conversation's container (docker inspect; the pod from the API server)
// shows the agent's uid, the hardening, the limits, no network and
// nothing published, ohd's labels, every mount at its own path and
// read-only where it must be, and no secret anywhere.
func TestBackendContainerSettings(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		d := b.daemon(t, "--read-only-rootfs")
		repo := testenv.NewRepo(t, testenv.RepoOptions{})
		secretValue := "S3CRET-VALUE-do-not-leak-" + store.NewID()
		if _, err := d.ohctlIn(secretValue, "secret", "set", "api"); err != nil {
			t.Fatal(err)
		}
		var c store.Conversation
		d.ohctlJSON(&c, "create", "--repo", repo, "--worktree", "--grant-secret", "api")
		if c.ContainerID == "" || c.HostPort == 0 || c.State != store.StateRunning {
			t.Fatalf("create = %+v, want a running container", c)
		}
		w := b.workload(t, c.ContainerID)
		if w.User != "10001:10001" {
			t.Errorf("User = %v, want the agent's own 10001:10001, not the repository owner (issue 26)", w.User)
		}
		if !w.CapDropAll || !w.NoNewPrivs || w.Privileged || w.HostNamespaces {
			t.Errorf("capabilities all dropped %v, no-new-privileges %v, privileged %v, host namespaces %v", w.CapDropAll, w.NoNewPrivs, w.Privileged, w.HostNamespaces)
		}
		// Kubernetes has no pids limit per pod: the kubelet's podPidsLimit
		// (512 in scripts/kube) applies to every pod of the node.
		wantPids := map[string]int64{"docker": 512, "kubernetes": 0}[b.name]
		if w.Memory != 268435456 || w.PidsLimit != wantPids || !w.CPULimited {
			t.Errorf("limits: memory %v pids %v (want %d) cpus limited %v", w.Memory, w.PidsLimit, wantPids, w.CPULimited)
		}
		if !w.ReadOnlyRoot || !w.TmpMounted {
			t.Errorf("read-only root %v, memory file system at /tmp %v", w.ReadOnlyRoot, w.TmpMounted)
		}
		// The default egress mode where ohd enters namespaces (it does, as
		// root): no network but loopback, nothing published (DESIGN §5).
		// A pod has the pod network, no DNS, and a deny-all policy
		// (TestBackendEgressIsolationClaim says what ohd claims of it).
		if c.Egress != store.EgressBroker || !w.NoNetwork || w.Published != 0 {
			t.Errorf("egress %q, no network %v, published ports %d; want broker, true and none", c.Egress, w.NoNetwork, w.Published)
		}
		if w.Labels["dev.ohd.conversation"] != c.ID || w.Labels["dev.ohd.server"] != d.serverID() {
			t.Errorf("labels = %v", w.Labels)
		}
		if w.Name != "ohd-"+strings.ReplaceAll(c.ID, "-", "")[:12] {
			t.Errorf("name = %v", w.Name)
		}

		// Mounts: the worktree at its own path; the conversation's git view at
		// the repository's git dir's path; the real object store read-only as
		// the view's alternate; the hooks read-only; nothing of the real git dir
		// writable.
		alt := filepath.Join(filepath.Dir(c.GitView), "objects")
		type want struct {
			src string
			rw  bool
		}
		wantMounts := map[string]want{
			c.Worktree:                          {c.Worktree, true},
			filepath.Join(c.Worktree, ".git"):   {filepath.Join(c.Worktree, ".git"), false}, // the user's git follows it (package mountplan)
			c.CommonDir:                         {c.GitView, true},
			alt:                                 {filepath.Join(c.CommonDir, "objects"), false},
			filepath.Join(c.CommonDir, "hooks"): {filepath.Join(c.CommonDir, "hooks"), false},
			"/run/ohd":                          {"", false},
			"/run/ohd/bin/ohctl":                {"", false},
		}
		// The host's branches, read-only, as the view's remote "host" (DESIGN
		// §3: live both ways).
		hostView := filepath.Join(filepath.Dir(c.GitView), "host")
		wantMounts[hostView] = want{hostView, false}
		// The inner server's state on the host, at its own paths (DESIGN
		// §6): every relative default path of the real server.
		inner := openhands.DirsOf(filepath.Join(d.dirs.State, "inner"), c.ID)
		for _, dir := range inner.Mounted() {
			wantMounts[dir] = want{dir, true}
		}
		for dst, m := range w.Mounts {
			want, ok := wantMounts[dst]
			if !ok {
				t.Errorf("unexpected mount %s from %s", dst, m.Source)
				continue
			}
			if want.rw != m.RW {
				t.Errorf("mount %s: RW = %v, want %v", dst, m.RW, want.rw)
			}
			if want.src != "" && m.Source != want.src {
				t.Errorf("mount %s comes from %s, want %s", dst, m.Source, want.src)
			}
			if m.RW && strings.HasPrefix(m.Source, c.CommonDir) {
				t.Errorf("mount %s: the real git dir %s is writable in the container", dst, m.Source)
			}
		}
		for dst := range wantMounts {
			if _, ok := w.Mounts[dst]; !ok {
				t.Errorf("mount %s missing", dst)
			}
		}

		// Nothing secret anywhere in the engine's record.
		innerKey, _ := os.ReadFile(filepath.Join(c.BrokerDir, "session-api-key"))
		innerSecretKey, _ := os.ReadFile(filepath.Join(c.BrokerDir, "secret-key"))
		token, _ := os.ReadFile(filepath.Join(c.BrokerDir, "token"))
		masterKey, _ := os.ReadFile(filepath.Join(d.dirs.State, "master.key"))
		for what, v := range map[string]string{
			"secret value": secretValue, "inner key": strings.TrimSpace(string(innerKey)),
			"inner secret key": strings.TrimSpace(string(innerSecretKey)),
			"broker token":     strings.TrimSpace(string(token)), "master key": strings.TrimSpace(string(masterKey)),
		} {
			if len(v) < 16 {
				t.Fatalf("%s not found on the host (%q)", what, v)
			}
			if strings.Contains(w.Raw, v) {
				t.Errorf("the engine's record shows the %s", what)
			}
		}
		if raw, _ := hex.DecodeString(strings.TrimSpace(string(masterKey))); bytes.Contains([]byte(w.Raw), raw) {
			t.Error("the engine's record holds the raw master key")
		}
		for _, e := range w.Env {
			if strings.HasPrefix(e, "OH_SESSION_API_KEYS") {
				t.Errorf("env carries %s", strings.SplitN(e, "=", 2)[0])
			}
		}
		d.ohctl("rm", "--discard", c.ID)
		if b.exists(t, c.ContainerID) {
			t.Error("container left after rm")
		}
	})
}

// TestBackendWorktreeValidFromBothSides: the worktree is git's own on
// both sides at the same absolute path: git inside sees its branch, the
// host's registration is locked and resolves, a commit inside is
// published to the host's branch, and gc and prune inside leave the
// host's registration intact.
func TestBackendWorktreeValidFromBothSides(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) { worktreeValidFromBothSides(t, b.daemon(t)) })
}

func worktreeValidFromBothSides(t *testing.T, d *daemon) {
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", repo, "--worktree")

	// Inside: git sees the worktree on its branch.
	code, out := d.execIn(c.ID, "git", "-C", c.Worktree, "status", "--short", "--branch")
	if code != 0 || !strings.HasPrefix(out, "## openhands/"+c.ID) {
		t.Fatalf("git status inside = %d %q, want ## openhands/%s", code, out, c.ID)
	}
	// On the host, at the same time: locked, not prunable, gitdir resolves.
	e := entryFor(porcelain(t, repo), c.Worktree)
	if e == nil || e["locked"] == "" {
		t.Fatalf("host entry = %v, want it registered and locked", e)
	}
	if _, ok := e["prunable"]; ok {
		t.Errorf("host reports the live worktree prunable: %v", e)
	}
	gitdir, err := os.ReadFile(filepath.Join(c.CommonDir, "worktrees", c.AdminID, "gitdir"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(strings.TrimSpace(string(gitdir))); err != nil {
		t.Errorf("host gitdir %s does not resolve on the host: %v", gitdir, err)
	}

	// A commit made inside is published to the host's branch.
	code, out = d.execIn(c.ID, "sh", "-c", "cd "+c.Worktree+" && echo inside > made-inside.txt && git add made-inside.txt && git -c user.name=agent -c user.email=agent@example.com commit -q -m 'from the container'")
	if code != 0 {
		t.Fatalf("commit inside: %d %s", code, out)
	}
	_, inside := d.execIn(c.ID, "git", "-C", c.Worktree, "rev-parse", "HEAD")
	waitHostRef(t, repo, "refs/heads/openhands/"+c.ID, strings.TrimSpace(inside), 5*time.Second)
	if got := testenv.Git(t, repo, "log", "-1", "--format=%s", "openhands/"+c.ID); got != "from the container" {
		t.Errorf("host branch tip = %q", got)
	}

	// gc and prune inside leave the host's registrations intact.
	d.execIn(c.ID, "git", "-C", c.Worktree, "worktree", "prune")
	d.execIn(c.ID, "git", "-C", c.Worktree, "gc", "--prune=now")
	e = entryFor(porcelain(t, repo), c.Worktree)
	if e == nil {
		t.Fatal("the worktree registration is gone after gc/prune inside")
	}
	if _, ok := e["prunable"]; ok {
		t.Errorf("prunable after gc inside: %v", e)
	}
	// The config inside is the conversation's own; the hooks are the
	// repository's, read-only.
	if code, out := d.execIn(c.ID, "sh", "-c", "echo '[evil]' >> "+filepath.Join(c.CommonDir, "config")); code != 0 {
		t.Errorf("writing the view's config inside failed: %s", out)
	}
	if code, _ := d.execIn(c.ID, "sh", "-c", "echo evil >> "+filepath.Join(c.CommonDir, "hooks", "post-checkout")); code == 0 {
		t.Error("writing a hook inside the container succeeded")
	}
	if b, _ := os.ReadFile(filepath.Join(c.CommonDir, "config")); strings.Contains(string(b), "evil") {
		t.Error("the host's .git/config was changed from inside")
	}

	var rm store.Conversation
	d.ohctlJSON(&rm, "rm", c.ID)
	if !rm.Removal.BranchKept {
		t.Error("the branch with a commit from inside was not kept")
	}
	if got := porcelain(t, repo); len(got) != 1 {
		t.Errorf("registrations after rm: %v", got)
	}
}

// catCmd prints a file with the shell alone: the test image has no cat.
func catCmd(path string) []string {
	return []string{"sh", "-c", `while IFS= read -r l; do printf '%s\n' "$l"; done < "$0"`, path}
}

// TestBackendEgressIsolationClaim: in broker mode ohd claims isolation
// only where it holds. Docker's containers have no network at all: no
// note, doctor has no policy check. A Kubernetes pod gets a deny-all
// egress NetworkPolicy, which this cluster's bridge plugin does not
// enforce and ohd cannot tell is enforced: the create answer says so (an
// X-Ohd-Note) and doctor warns (egress-policy) — a difference by design.
func TestBackendEgressIsolationClaim(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		d := b.daemon(t, "--egress", "broker")
		r := d.call("POST", "/api/conversations", map[string]any{"workspace": map[string]any{"working_dir": testenv.NewRepo(t, testenv.RepoOptions{})}})
		if r.Status != 201 {
			t.Fatalf("create = %d %s", r.Status, r.Body)
		}
		id := r.Header.Get("X-Ohd-Conversation-Id")
		noted := false
		for _, n := range r.Header.Values("X-Ohd-Note") {
			noted = noted || strings.Contains(n, "cannot tell whether this cluster's network plugin enforces NetworkPolicy")
		}
		var policy *string
		for _, ch := range d.doctorChecks(id) {
			if ch.Check == "egress-policy" {
				s := ch.Status + ": " + ch.Detail
				policy = &s
			}
		}
		switch b.name {
		case "docker":
			if noted || policy != nil {
				t.Errorf("Docker's network mode none is isolation: note %v, doctor %v", noted, policy)
			}
		case "kubernetes":
			if !noted {
				t.Errorf("the create answer does not say the policy may not be enforced: %v", r.Header.Values("X-Ohd-Note"))
			}
			if policy == nil || !strings.HasPrefix(*policy, "warn: ") {
				t.Errorf("doctor's egress-policy check: %v, want a warning", policy)
			}
		}
		d.ohctl("rm", id)
	})
}

// TestKubeEvictionIsReportedAsAKillForMemory: the kubelet evicts a
// conversation's pod for the node's lack of memory. It writes the pod's
// status (phase Failed, reason Evicted, the agent container terminated
// with 137) as here, where the test writes it through the API server in
// its place: making a one-node cluster short of memory on purpose would
// starve every other process on the machine. ohd reports it as the
// Docker backend reports a container killed for memory: a warning that
// it was killed for lack of memory, the record stopped with the note
// "exited behind ohd's back (exit code 137)", and the next request makes
// a new pod with the conversation's state.
func TestKubeEvictionIsReportedAsAKillForMemory(t *testing.T) {
	// Kubernetes only by design: an eviction is the kubelet's; Docker has none (TestBackendOOMInsideIsNotADeath is the OOM on both).
	cs := requireKube(t)
	b := kubeBackend()
	d := b.daemon(t)
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", testenv.NewRepo(t, testenv.RepoOptions{}), "--worktree")
	if code, out := d.execIn(c.ID, "sh", "-c", "echo kept > "+c.Worktree+"/kept.txt"); code != 0 {
		t.Fatalf("write in the worktree: %d %q", code, out)
	}
	name, _, _ := strings.Cut(c.ContainerID, "/")
	ns := os.Getenv("OHD_KUBE_NAMESPACE")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	p.Status.Phase = corev1.PodFailed
	p.Status.Reason = "Evicted"
	p.Status.Message = "The node was low on resource: memory. Threshold quantity: 100Mi, available: 51200Ki."
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
		Reason: "TerminationByKubelet", Message: p.Status.Message, LastTransitionTime: now})
	for i := range p.Status.ContainerStatuses {
		p.Status.ContainerStatuses[i].Ready = false
		p.Status.ContainerStatuses[i].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 137, Reason: "Error", StartedAt: now, FinishedAt: now}}
	}
	if _, err := cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("write the eviction's status: %v", err)
	}
	waitFor(t, 30*time.Second, "ohd to report the eviction as a kill for memory", func() bool {
		return strings.Contains(d.logs.String(), "killed for lack of memory")
	})
	waitFor(t, 30*time.Second, "the record to be stopped", func() bool { return d.show(c.ID).State == store.StateStopped })
	got := d.show(c.ID)
	noted := false
	for _, n := range got.Notes {
		noted = noted || strings.Contains(n, "exited behind ohd's back") && strings.Contains(n, "(exit code 137)")
	}
	if !noted {
		t.Errorf("the record's notes do not say the pod exited with 137: %q", got.Notes)
	}
	// Resumed on the next request: a new pod, the worktree as it was.
	if code, out := d.execIn(c.ID, catCmd(c.Worktree+"/kept.txt")...); code != 0 || out != "kept\n" {
		t.Errorf("after the eviction: %d %q", code, out)
	}
	if now := d.show(c.ID); now.State != store.StateRunning || now.ContainerID == c.ContainerID || !b.running(t, now.ContainerID) {
		t.Errorf("after the eviction: %s in %s (the evicted pod was %s)", now.State, now.ContainerID, c.ContainerID)
	}
	d.ohctl("rm", c.ID)
}
